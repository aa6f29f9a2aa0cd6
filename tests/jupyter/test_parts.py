"""The parts of nbprec.jupyter that need no kernel or server: argument binding, dump detection, notebooks."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbprec.jupyter.detect import ProbeCache, detect_dumps
from nbprec.jupyter.notebooks import investigation_notebook, load_template, notebook_name

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HOSTILE_NAMES = ['it\'s "quoted"', "back\\slash", "$HOME {x} {{y}}", "new\nline", "ünï cödé", "#*_`[md]`"]


def test_import_nbprec_loads_no_jupyter_or_widget_library():
    code = (
        "import sys, nbprec\n"
        "assert callable(nbprec.load_ipython_extension)\n"
        "assert nbprec._jupyter_labextension_paths() == [{'src': 'labextension', 'dest': 'jupyterlab-nbprec'}]\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(loaded & {'IPython', 'tornado', 'jupyter_server', 'ipywidgets', 'nbprec.jupyter'}))\n"
        "print('nbprec.jupyter' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["[]", "False"]


def test_split_bind_takes_o_name_and_refuses_what_is_no_variable():
    from IPython.core.error import UsageError

    from nbprec.jupyter.magics import split_bind

    assert split_bind(["info", "a", "-o", "d"]) == (["info", "a"], "d")
    assert split_bind(["info", "a", "-od"]) == (["info", "a"], "d")
    assert split_bind(["compare", "a", "b", "--output", "out/"]) == (["compare", "a", "b", "--output", "out/"], None)
    for bad in (["-o", "out/"], ["-o", "class"], ["-o"]):
        with pytest.raises(UsageError):
            split_bind(["compare", *bad])


def test_detect_dumps_names_each_readable_entry_with_its_format(tmp_path):
    for name in ("bf16_tensor_mix", "fp32_statistics_mix"):
        os.symlink(FIXTURES / "msprobe" / name, tmp_path / name)
    (tmp_path / "not-a-dump").mkdir()
    (tmp_path / "not-a-dump" / "x.txt").write_text("hello")
    (tmp_path / "empty").mkdir()
    (tmp_path / ".hidden").mkdir()
    json_file = FIXTURES / "msprobe" / "bf16_tensor_mix" / "step0" / "rank0" / "dump.json"
    os.symlink(json_file, tmp_path / "dump.json")  # single-file formats count too
    found, complete = detect_dumps(tmp_path)
    assert complete
    assert found == {"bf16_tensor_mix": "msprobe", "fp32_statistics_mix": "msprobe", "dump.json": "msprobe"}


def test_detect_dumps_stops_at_its_budget_and_resumes_from_the_cache(tmp_path):
    for i in range(5):
        os.symlink(FIXTURES / "msprobe" / "bf16_tensor_mix", tmp_path / f"run{i}")
    cache = ProbeCache()
    found, complete = detect_dumps(tmp_path, budget=0.0, cache=cache)
    assert not complete and len(found) < 5
    found, complete = detect_dumps(tmp_path, budget=60.0, cache=cache)
    assert complete and len(found) == 5
    assert detect_dumps(tmp_path / "missing") == ({}, True)


def test_probe_cache_keeps_a_bounded_number_of_answers():
    cache = ProbeCache(limit=2)
    for i in range(3):
        cache.put(f"p{i}", 1, "nbprec")
    assert cache.get("p0", 1) is None and cache.get("p2", 1) == "nbprec"
    assert cache.get("p2", 2) is None  # another modification time: probe again


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_investigation_notebook_passes_any_folder_name_to_the_code_unchanged(name):
    nb = investigation_notebook(f"runs/{name}", "runs/fp32", rule="msprobe")
    code = "".join(nb["cells"][1]["source"])
    tree = ast.parse(code)  # valid Python whatever the name
    assign = next(node for node in tree.body if isinstance(node, ast.Assign))
    assert ast.literal_eval(assign.value) == (f"runs/{name}", "runs/fp32")
    assert "rule='msprobe'" in code
    title = "".join(nb["cells"][0]["source"]).splitlines()[0]
    assert "\n" not in title and "__TARGET_NAME__" not in title
    assert nb["metadata"]["nbprec"] == {"target": f"runs/{name}", "bench": "runs/fp32", "rule": "msprobe"}


def test_inspect_notebook_for_one_dump_and_file_names():
    nb = investigation_notebook("demo-output/tiny_fp16")
    assert "nbprec.open('demo-output/tiny_fp16')" in "".join(nb["cells"][1]["source"])
    assert notebook_name("demo-output/tiny_fp16") == "nbprec-tiny_fp16.ipynb"
    assert notebook_name("a/bf16 run", "b/fp32/") == "nbprec-bf16_run-vs-fp32.ipynb"
    assert notebook_name("..") == "nbprec-dump.ipynb"
    with pytest.raises(Exception, match="no notebook template"):
        load_template("other")


@pytest.mark.slow
@pytest.mark.parametrize("bench", ["tiny_fp32", None])
def test_investigation_notebooks_run_without_errors(demo_root, tmp_path, bench):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.from_dict(investigation_notebook("tiny_bf16_faulty", bench))
    nbclient.NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(demo_root / "demo-output")}}).execute()
    outputs = [output for cell in nb.cells for output in cell.get("outputs", [])]
    problems = [o for o in outputs if o["output_type"] == "error" or o.get("name") == "stderr"]
    assert not problems, problems
    shown = str(outputs)
    assert "Traceback" not in shown
    assert ("Functional.gelu.1.forward" if bench else "nbprec overflow report") in shown
