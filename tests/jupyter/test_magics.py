"""The ``%nbprec`` magics in a real kernel (nbclient), on the demo's dumps.

One notebook runs every command once (a module fixture); each test reads the outputs of its cells.
"""

from __future__ import annotations

import importlib.util
import re

import pytest

pytestmark = pytest.mark.slow

DEMO = "demo-output"
GE_OOM = "[ERROR] GE(9,python3):... Out of memory: current var size[13962468864] exceeds total var size[13958643712]"
#: cell key -> source; run in this order in one kernel.
CELLS = {
    "load": "%load_ext nbprec",
    "compare": f"%nbprec compare {DEMO}/tiny_bf16_faulty {DEMO}/tiny_fp32 -o comp",
    "compare_bound": "print(type(comp).__name__, comp is _nbprec, comp.first_failing_op()['op'])",
    "compare_rule": f"%nbprec compare {DEMO}/tiny_bf16 {DEMO}/tiny_fp32 --threshold 0.9999 --output cmp-out",
    "info": f"%nbprec info {DEMO}/tiny_fp16",
    "info_bound": "print(type(_nbprec).__name__, _nbprec.summary()['ops'])",
    "overflow": f"%nbprec overflow {DEMO}/tiny_fp16 --bench {DEMO}/tiny_fp32 -o ovf",
    "overflow_bound": "print(type(ovf).__name__, ovf.impact.verdict)",
    "ni": f"%nbprec ni Functional.gelu.1.forward --target {DEMO}/tiny_bf16_faulty --bench {DEMO}/tiny_fp32",
    "ni_bound": "print(type(_nbprec).__name__, _nbprec.status)",
    "diagnose": f"%nbprec diagnose '{GE_OOM}' -o diag",
    "diagnose_cell": f"%%nbprec diagnose\n{GE_OOM}\n",
    "missing": f"%nbprec compare {DEMO}/no-such-run {DEMO}/tiny_fp32",
    "bad_rule": f"%nbprec compare {DEMO}/tiny_bf16 {DEMO}/tiny_fp32 --rule strictest",
    "bad_bind": f"%nbprec compare {DEMO}/tiny_bf16 {DEMO}/tiny_fp32 -o cmp/",
    "no_command": "%nbprec",
    "serve": f"%nbprec serve {DEMO}/tiny_bf16 {DEMO}/tiny_fp32",
    "help": "%nbprec compare --help",
    "doc": "%nbprec?",
    "model": (
        "import nbprec\nfrom nbprec.demo.tiny import build_tiny, train_step\n"
        "nbprec.seed_all(0)\nmodel, ids, labels = build_tiny('bfloat16', faulty=False, seed=0)"
    ),
    "capture": "%%nbprec capture runs/magic --mode tensor -o cap\ntrain_step(model, ids, labels)",
    "capture_api": (
        "nbprec.seed_all(0)\nmodel2, ids2, labels2 = build_tiny('bfloat16', faulty=False, seed=0)\n"
        "with nbprec.capture(model2, 'runs/api', mode='tensor'):\n    train_step(model2, ids2, labels2)\n"
        "a, b = nbprec.open('runs/magic'), nbprec.open('runs/api')\n"
        "print(type(cap).__name__, len(a.index), sorted(a.index['name']) == sorted(b.index['name']))"
    ),
    "capture_raises": "%%nbprec capture runs/raised\ntrain_step(model, ids, labels)\nraise ValueError('boom')",
    "capture_exists": "%%nbprec capture runs/magic\ntrain_step(model, ids, labels)",
    "after_error": "print('still running')",
}


@pytest.fixture(scope="module")
def executed(demo_root, tmp_path_factory):
    """The notebook of :data:`CELLS` run in a kernel whose folder holds ``demo-output/``: cell outputs and replies."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    work = tmp_path_factory.mktemp("magics")
    (work / DEMO).symlink_to(demo_root / DEMO, target_is_directory=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS.values()]
    replies: dict[int, dict] = {}

    def on_executed(cell, cell_index, execute_reply):
        replies[cell_index] = execute_reply["content"]

    client = nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=600, allow_errors=True, on_cell_executed=on_executed,
        resources={"metadata": {"path": str(work)}},
    )  # fmt: skip
    client.execute()
    return {key: (nb.cells[i].outputs, replies[i]) for i, key in enumerate(CELLS)}, work


def text(outputs, name=None) -> str:
    """The text of the stream outputs (of stream ``name`` only, when given)."""
    return "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream" and name in (None, o["name"]))


def data(outputs) -> dict:
    """The MIME bundles of the display outputs, merged."""
    merged: dict = {}
    for o in outputs:
        if o["output_type"] in ("display_data", "execute_result"):
            merged.update(o["data"])
    return merged


def ok(executed, key):
    outputs, reply = executed[0][key]
    assert reply["status"] == "ok", (key, reply, outputs)
    return outputs


def one_line_error(executed, key) -> str:
    """The message of a failed magic: the cell failed, and showed one line and no traceback."""
    outputs, reply = executed[0][key]
    assert reply["status"] == "error" and reply["ename"] == "UsageError", (key, reply)
    shown = text(outputs).strip()
    assert "\n" not in shown and "Traceback" not in shown and shown.startswith("UsageError: "), shown
    assert not [o for o in outputs if o["output_type"] == "error"]
    return shown


def test_compare_shows_the_dashboard_and_binds_the_comparison(executed):
    bundle = data(ok(executed, "compare"))
    assert "application/vnd.jupyter.widget-view+json" in bundle  # the live dashboard
    assert "Functional.gelu.1.forward" in bundle["text/html"]  # and its static fallback
    assert text(ok(executed, "compare_bound")).split() == ["Comparison", "True", "Functional.gelu.1.forward"]


def test_compare_takes_every_option_of_the_command_line(executed):
    ok(executed, "compare_rule")
    out = executed[1] / "cmp-out"
    assert {"comparison.json", "ops.csv", "compare_msaccucmp.csv", "compare_msprobe.csv"} <= {
        p.name for p in out.iterdir()
    }


def test_info_overflow_and_ni_show_their_reports_and_bind_them(executed):
    assert "nbprec.Dump" in data(ok(executed, "info"))["text/html"]
    assert text(ok(executed, "info_bound")).split() == ["Dump", "168"]
    assert "nbprec overflow report" in data(ok(executed, "overflow"))["text/html"]
    name, verdict = text(ok(executed, "overflow_bound")).split(maxsplit=1)
    assert name == "OverflowReport" and verdict.strip()
    assert "Functional.gelu.1.forward" in data(ok(executed, "ni"))["text/html"]
    assert "subgraph (depth 2)" in text(ok(executed, "ni"))
    assert text(ok(executed, "ni_bound")).split() == ["NodeInfo", "fail"]


@pytest.mark.skipif(importlib.util.find_spec("nbprec.diagnose") is None, reason="this nbprec has no diagnose yet")
def test_diagnose_on_a_log_line_and_on_the_pasted_cell(executed):
    for key in ("diagnose", "diagnose_cell"):
        assert "variable_memory_max_size" in data(ok(executed, key))["text/html"]


def test_errors_are_one_line_not_a_traceback(executed):
    assert "no-such-run: no such file or folder" in one_line_error(executed, "missing")
    assert "invalid choice: 'strictest'" in one_line_error(executed, "bad_rule")
    assert "use --output cmp/" in one_line_error(executed, "bad_bind")
    assert "give a command" in one_line_error(executed, "no_command")
    assert "would block this kernel" in one_line_error(executed, "serve")
    assert "the folder exists and is not empty" in one_line_error(executed, "capture_exists")


def test_help_is_the_command_lines_and_says_what_o_means_here(executed):
    shown = text(ok(executed, "help"), "stdout")
    assert "usage: nbprec compare" in shown and "--threshold VALUE" in shown
    assert "-o NAME binds the result" in shown


def test_question_mark_documents_every_command(executed):
    _, reply = executed[0]["doc"]
    page = "".join(p["data"]["text/plain"] for p in reply["payload"] if p.get("source") == "page")
    page = re.sub(r"\x1b\[[0-9;]*m", "", page)
    for command in ("compare", "info", "overflow", "ni", "isolate", "diagnose", "%%nbprec capture"):
        assert f"%nbprec {command}" in page or command in page, command
    assert "_nbprec" in page and "-o NAME" in page


def test_capture_cell_records_the_model_as_the_python_api_does(executed):
    assert "nbprec: captured 168 ops, 430 tensors of model (TinyEncoder)" in text(ok(executed, "capture"))
    assert text(ok(executed, "capture_api")).split() == ["Capture", "430", "True"]


def test_capture_cell_that_raises_shows_its_traceback_and_fails(executed):
    outputs, reply = executed[0]["capture_raises"]
    assert reply["status"] == "error" and reply["ename"] == "UsageError"
    errors = [(o["ename"], o["evalue"]) for o in outputs if o["output_type"] == "error"]
    assert errors == [("ValueError", "boom")]  # the cell's own traceback, once
    assert "marked unfinished" in text(outputs)
    assert (executed[1] / "runs" / "raised").is_dir()
    assert text(ok(executed, "after_error")).strip() == "still running"
