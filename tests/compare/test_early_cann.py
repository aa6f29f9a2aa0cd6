"""The index rows of a CANN target, made by ``nbprec compare``'s early worker while the command imports numpy
(``nbprec.formats.cann_index.ship_rows``) and taken by the reader (``shipped_rows``): the same dump as a read of its
files, read again when a file or folder changed after the worker read it or when the options differ, the reader's
own error when the worker could not read it, and the same command output with and without the worker.

Each run happens in a fresh interpreter, as the command runs: the worker is forked before numpy is loaded.
"""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from early_support import command_with_and_without_worker, needs_two_cores

from nbprec.compare import early_msprobe
from nbprec.demo.npu import NpuDemo, make_npu_demo

# The worker started for the NPU case (argv[1], argv[2]; the graph argv[3], or "" for none) and given time to
# finish ("early"), or not started ("plain"); then argv[5] is done to the target ("touch": one dump file's
# modification time moved; "add": a file added to its step folder; "" nothing), and the target is opened with the
# options of argv[6] (JSON). Prints how many times this process indexed the dump itself, the index, problems and
# meta as JSON text, and whether numpy had been imported when the worker was started.
_RUN = """
import importlib, json, os, sys, time
from nbprec.compare import early
target, bench, graph, how, change, options = sys.argv[1:7]
numpy_before = "numpy" in sys.modules
if how == "early":
    early.start(target, bench, graph=graph or None)
    time.sleep(1.5)  # (the worker's window: the rows take it tens of milliseconds after the graph)
if change == "touch":
    step = next(os.path.join(r, f) for r, _, fs in sorted(os.walk(target)) for f in sorted(fs) if f[-1].isdigit())
    os.utime(step, ns=(os.stat(step).st_atime_ns, os.stat(step).st_mtime_ns + 1_000_000_000))
elif change == "add":
    folder = next(r for r, _, fs in sorted(os.walk(target)) if any(f[-1].isdigit() for f in fs))
    with open(os.path.join(folder, "notes.log"), "w") as fh:
        fh.write("a file the worker did not see")
index = importlib.import_module("nbprec.formats.cann_index")
indexed = []
rows = index.index_rows
def counting(*args, **kwargs):
    indexed.append(1)
    return rows(*args, **kwargs)
index.index_rows = counting
cann = importlib.import_module("nbprec.formats.cann")
cann.index_rows = counting
from nbprec.formats import open_dump
from nbprec.graph.ge import read_ge_model
kwargs = json.loads(options)
if graph:
    kwargs["graph"] = read_ge_model(graph)
dump = open_dump(target, format="cann", **kwargs)
early.discard()
print(json.dumps({
    "indexed": len(indexed),
    "index": dump.index.to_json(),
    "problems": dump.problems.to_json(),
    "meta": json.dumps(dump.meta, sort_keys=True, default=str),
    "numpy_before": numpy_before,
}))
"""


def _open_fresh(case: NpuDemo, how: str, graph: bool = True, change: str = "", **options: object) -> dict:
    env = {**os.environ, "NBPREC_EARLY": "off" if how == "plain" else "on"}
    args = [str(case.npu), str(case.tf), str(case.graph) if graph else "", how, change, json.dumps(options)]
    done = subprocess.run(
        [sys.executable, "-c", _RUN, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def case(tmp_path: Path) -> NpuDemo:
    return make_npu_demo(tmp_path / "npu-demo")


def _same_dump(a: dict, b: dict) -> bool:
    return all(a[k] == b[k] for k in ("index", "problems", "meta"))


@needs_two_cores
@pytest.mark.parametrize("graph", [True, False], ids=["graph", "no-graph"])
def test_the_reader_takes_the_workers_rows(case: NpuDemo, graph: bool) -> None:
    plain = _open_fresh(case, "plain", graph)
    early_read = _open_fresh(case, "early", graph)
    assert plain["indexed"] == 1  # (the reader indexes the dump itself)
    assert early_read["indexed"] == 0  # the worker's rows ...
    assert _same_dump(early_read, plain)  # ... the same index, problems and meta
    assert not early_read["numpy_before"]


@needs_two_cores
@pytest.mark.parametrize("change", ["touch", "add"])
def test_a_dump_changed_after_the_worker_read_it_is_read_again(case: NpuDemo, change: str) -> None:
    early_read = _open_fresh(case, "early", change=change)
    assert early_read["indexed"] == 1
    assert _same_dump(early_read, _open_fresh(case, "plain"))  # (the files as they are now)


@needs_two_cores
@pytest.mark.parametrize("options", [{"occurrence": "all"}, {"layout": "storage"}, {"step": 0}])
def test_rows_made_with_other_options_are_not_taken(case: NpuDemo, options: dict) -> None:
    early_read = _open_fresh(case, "early", **options)
    assert early_read["indexed"] == 1
    assert _same_dump(early_read, _open_fresh(case, "plain", **options))


@needs_two_cores
@pytest.mark.parametrize("damaged", ["", "one", "all"])
def test_the_command_says_the_same_with_the_workers_rows(tmp_path: Path, damaged: str) -> None:
    """``nbprec compare NPU TF -o OUT`` (no ``--graph``: tests/compare/test_early_graph.py runs it with one) in its
    own process, with the worker and without: the same printout and files. One dump file cut short: the worker's
    rows carry the reader's problem for it; every file cut short: the worker sends nothing, and the command fails as
    without it."""
    case = make_npu_demo(tmp_path / "npu-demo")
    files = sorted(Path(r, n) for r, _, names in os.walk(case.npu) for n in names if n[-1].isdigit())
    for file in {"": [], "one": files[-1:], "all": files}[damaged]:  # (not the first alone: the format guess reads it)
        file.write_bytes(b"\x40\x00\x00")  # (shorter than the header length itself)
    outputs = command_with_and_without_worker([str(case.npu), str(case.tf)], tmp_path)
    assert outputs["on"] == outputs["off"]
    if damaged == "all":
        assert outputs["on"][0] != 0 and str(case.npu) in outputs["on"][2]
    else:
        assert outputs["on"][0] in (0, 1), outputs["on"][2][-3000:]
        assert (b"too short" in outputs["on"][3]["comparison.json"]) == (damaged == "one")


# The worker started for argv[1] and argv[2] with ship_rows patched to leave a mark (argv[3]) when called.
_MARK = """
import sys, time
from nbprec.compare import early
from nbprec.formats import cann_index
def marking(*args, **kwargs):
    open(sys.argv[3], "w").close()
cann_index.ship_rows = marking
early.start(sys.argv[1], sys.argv[2])
time.sleep(1.0)
early.discard()
"""


@needs_two_cores
@pytest.mark.parametrize("kind", ["statistics", "md5", "cann"])
def test_the_worker_makes_rows_for_a_target_that_is_not_msprobes(tmp_path: Path, kind: str) -> None:
    """Dumps without pairs for the worker to measure: an msprobe statistics or md5 pair (whose dump.json files it
    scanned) is not looked at as a CANN dump; a CANN target is."""
    fixtures = Path(__file__).parents[1] / "fixtures" / "msprobe"
    if kind == "cann":
        case = make_npu_demo(tmp_path / "npu-demo")
        target, bench = case.npu, case.tf
    else:
        suffix = "statistics_mix" if kind == "statistics" else "md5_L1"
        target, bench = fixtures / f"bf16_{suffix}", fixtures / f"fp32_{suffix}"
    mark = tmp_path / "made"
    done = subprocess.run(
        [sys.executable, "-c", _MARK, str(target), str(bench), str(mark)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert mark.exists() == (kind == "cann")


def test_the_rows_are_made_without_numpy(tmp_path: Path) -> None:
    """What the worker runs, in a fresh interpreter: the rows are made and sent, and numpy is never imported."""
    case = make_npu_demo(tmp_path / "npu-demo")
    code = (
        "import sys\n"
        "from nbprec.formats.cann_index import ship_rows\n"
        "from nbprec.graph.ge import shipped_record\n"
        "key, _pickled, model = shipped_record(sys.argv[2])\n"
        "sent = []\n"
        "made = ship_rows(sys.argv[1], model, key, lambda k, record: sent.append((k, record)))\n"
        "print(made, len(sent), len(sent[0][1][1]['name']) if sent else 0, 'numpy' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(case.npu), str(case.graph)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    made, sent, rows, numpy = done.stdout.split()
    assert (made, sent, numpy) == ("True", "1", "False") and int(rows) > 0


def _flag(preparing: bool) -> mmap.mmap:
    flag = mmap.mmap(-1, 16)
    flag[1] = early_msprobe.PREPARING if preparing else 0
    return flag


@pytest.fixture
def live_pid():
    """A child process that lives while the test runs: the worker's pid in the tests of ``wait``."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    yield child.pid
    child.kill()
    child.wait()


def test_the_command_waits_for_rows_while_the_worker_reads_on(live_pid: int) -> None:
    """``ShippedScans.wait``: while the worker's count of files moves (a thread here, a file every 50 ms for
    longer than a stall), then returns once it is done."""
    flag = _flag(preparing=True)
    shipped = early_msprobe.ShippedScans(os.memfd_create("t"), flag, live_pid)
    files = int((early_msprobe.STALL_SECONDS + 0.3) / 0.05)

    def worker() -> None:
        for done in range(1, files + 1):
            time.sleep(0.05)
            flag[2:8] = done.to_bytes(6, "little")
        flag[1] = 0

    thread = threading.Thread(target=worker)
    start = time.monotonic()
    thread.start()
    shipped.wait()
    waited = time.monotonic() - start
    thread.join()
    assert flag[1] == 0 and waited > early_msprobe.STALL_SECONDS + 0.2  # (the worker's whole time: beyond a stall)


def test_the_command_does_not_wait_for_a_stalled_or_gone_worker(live_pid: int) -> None:
    stalled = early_msprobe.ShippedScans(os.memfd_create("t"), _flag(preparing=True), live_pid)
    start = time.monotonic()
    stalled.wait()
    assert early_msprobe.STALL_SECONDS <= time.monotonic() - start < early_msprobe.STALL_SECONDS + 0.5

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    start = time.monotonic()
    early_msprobe.ShippedScans(os.memfd_create("t"), _flag(preparing=True), gone.pid).wait()
    assert time.monotonic() - start < early_msprobe.STALL_SECONDS  # (no process of that id is this one's child)

    start = time.monotonic()
    early_msprobe.ShippedScans(os.memfd_create("t"), _flag(preparing=False), live_pid).wait()
    assert time.monotonic() - start < 0.05  # (nothing in the making: no wait at all)
