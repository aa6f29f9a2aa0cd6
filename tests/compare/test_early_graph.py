"""The GE graph of ``nbprec compare --graph``, read by the command's early worker while the command imports numpy
(``nbprec.graph.ge.shipped_record``) and taken by the command's reader (``read_ge_model``): the same model as a
read of the file, read again when the file changed after the worker read it, and the command's own error when the
worker could not read it.

Each run happens in a fresh interpreter, as the command runs: the worker is forked before numpy is loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from early_support import command_with_and_without_worker, needs_two_cores

from nbprec.compare import early
from nbprec.demo.npu import NpuDemo, make_npu_demo

# The worker started for the NPU case (argv[1], argv[2]) with the graph argv[3] ("early"), or not ("plain"); the
# graph file then changed (argv[5] "changed": a blank line added: the same graph, not the same file). Prints how
# many times this process parsed a graph file, whether the model it read equals a plain read of the file as it is
# now, and numpy's absence from the worker (it is checked by the model's arrival before numpy is imported here).
_RUN = """
import importlib, json, sys, time
from nbprec.compare import early
target, bench, graph, how, changed = sys.argv[1:6]
if how == "early":
    early.start(target, bench, graph=graph)
    time.sleep(1.0)  # (the worker's window: reading the graph takes it tens of milliseconds)
if changed == "changed":
    with open(graph, "a", encoding="utf-8") as fh:
        fh.write("\\n")
ge = importlib.import_module("nbprec.graph.ge")
parsed = []
parse = ge.read_message
def counting(path):
    parsed.append(str(path))
    return parse(path)
ge.read_message = counting
try:
    model = ge.read_ge_model(graph)
except ge.GeGraphError as exc:
    model = exc
early.discard()
file = ge.graph_file(graph) if not isinstance(model, Exception) else None
if file is not None:
    raw, fmt = parse(file)
    plain = ge.convert_model(raw, path=str(file), fmt=fmt)
print(json.dumps({
    "parsed": len(parsed),
    "equal": file is not None and model == plain,
    "error": str(model) if isinstance(model, Exception) else "",
}))
"""


def _read_fresh(case: NpuDemo, graph: Path, how: str, changed: bool = False) -> dict:
    env = {**os.environ, "NBPREC_EARLY": "off" if how == "plain" else "on"}
    args = [str(case.npu), str(case.tf), str(graph), how, "changed" if changed else ""]
    done = subprocess.run(
        [sys.executable, "-c", _RUN, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> NpuDemo:
    return make_npu_demo(tmp_path_factory.mktemp("npu-demo"))


@needs_two_cores
@pytest.mark.parametrize("given", ["file", "folder"])
def test_the_reader_takes_the_workers_graph(case: NpuDemo, given: str) -> None:
    graph = case.graph if given == "file" else case.graph.parent
    plain = _read_fresh(case, graph, "plain")
    early_read = _read_fresh(case, graph, "early")
    assert plain == {"parsed": 1, "equal": True, "error": ""}  # (the reader parses the file itself)
    assert early_read == {"parsed": 0, "equal": True, "error": ""}  # the worker's model, equal to a read


@needs_two_cores
def test_a_graph_changed_after_the_worker_read_it_is_read_again(case: NpuDemo, tmp_path: Path) -> None:
    graph = tmp_path / case.graph.name
    graph.write_bytes(case.graph.read_bytes())
    assert _read_fresh(case, graph, "early", changed=True) == {"parsed": 1, "equal": True, "error": ""}


@needs_two_cores
def test_a_graph_the_worker_cannot_read_fails_as_without_it(case: NpuDemo, tmp_path: Path) -> None:
    graph = tmp_path / "ge_proto_00000001_Build.txt"
    graph.write_text('graph {\n  name: "g"\n  op { name: "a" type: \n', encoding="utf-8")  # cut short
    plain = _read_fresh(case, graph, "plain")
    early_read = _read_fresh(case, graph, "early")
    assert plain["error"] and early_read == plain  # the reader's own error, naming the file and the line


@needs_two_cores
def test_the_command_compares_alike_with_the_workers_graph(case: NpuDemo, tmp_path: Path) -> None:
    """``nbprec compare NPU TF --graph G -o OUT`` in its own process, with the worker and without: the same
    printout and the same files."""
    outputs = command_with_and_without_worker([str(case.npu), str(case.tf), "--graph", str(case.graph)], tmp_path)
    assert outputs["on"][0] in (0, 1), outputs["on"][2][-3000:]
    assert outputs["on"] == outputs["off"]
    assert "compare_msprobe.csv" in outputs["on"][3]


@pytest.mark.parametrize(
    ("args", "graph"),
    [
        (["compare", "T", "B", "--graph", "g.txt"], "g.txt"),
        (["compare", "T", "B", "--graph=g.txt", "-o", "OUT"], "g.txt"),
        (["compare", "--graph", "a.txt", "T", "B", "--graph", "b.txt"], "b.txt"),  # (the last, as argparse)
        (["compare", "T", "B", "-o", "OUT"], None),
        (["compare", "T", "B", "--graph="], None),
        (["compare", "T", "B", "--", "--graph", "g.txt"], None),  # (paths after --)
        (["info", "--graph", "g.txt"], None),  # (not a comparison)
        (["compare", "T", "B", "--graph", "g.txt", "--scheduler", "tcp://h:8786"], None),  # (no worker: measured there)
    ],
)
def test_the_graph_option_is_read_from_the_command_line(args: list[str], graph: str | None) -> None:
    assert early.graph_option(args) == graph


def test_each_kind_of_result_is_asked_under_its_own_key(tmp_path: Path) -> None:
    """A dump.json scan and a graph's model of the same file are told apart: each kind has its own key."""
    from nbprec.formats import _prescan

    file = tmp_path / "ge_proto_00000001_Build.txt"
    file.write_text("graph {}\n", encoding="utf-8")
    seen: list[tuple] = []
    _prescan.provide(lambda key: seen.append(key) or "found")
    try:
        assert _prescan.take(file, "ge-model") == "found"
        assert _prescan.take(file) == "found"
    finally:
        _prescan.provide(None)
    identity = _prescan.identity(file.stat())
    assert seen == [(*identity, "ge-model"), identity]
