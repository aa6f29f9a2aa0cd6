"""The diagnosis widget without a browser: state after pasting and loading, the widgets it fills, escaped HTML."""

from __future__ import annotations

import subprocess
import sys

import pytest

import nbprec
from nbprec.widgets.diagnose import DiagnosisView

HOSTILE = "[ERROR] APP(1,x):2024 [a.cc:1]1 <script>alert('x')</script> <img src=x onerror=alert(1)> & \x1b[31m"


def test_pasting_a_log_fills_the_table(logs):
    view = DiagnosisView()
    assert view.table().empty and view.remedies() == []
    view.paste("\n".join([*logs.NOISE, logs.ge_line("var", 13962468864, 13958643712), logs.OOM_KILLED]))
    table = view.table()
    assert table["kind"].tolist() == ["ge-var-memory", "host-oom"]
    assert table["where"].tolist() == [f"<pasted>:{len(logs.NOISE) + 1}", f"<pasted>:{len(logs.NOISE) + 2}"]
    labels = [label for label, _ in view.remedies()]
    assert labels == [f"ge-var-memory at <pasted>:{len(logs.NOISE) + 1}", f"host-oom at <pasted>:{len(logs.NOISE) + 2}"]
    assert "variable_memory_max_size=str(15036210688)" in view.remedies()[0][1]
    view.clear()
    assert view.table().empty


def test_pasted_commands_are_compared_and_a_loaded_file_is_added(logs):
    view = DiagnosisView()
    view.paste(logs.AOE + "\n" + logs.ATC.replace("allow_mix_precision", "force_fp16"))
    assert view.table()["kind"].tolist() == ["kb-mismatch"]
    assert "--precision_mode=allow_mix_precision" in view.diagnosis.corrected_command
    view.load("dmesg.txt", logs.log_bytes([logs.OOM_KILL_LINE, logs.OOM_KILLED]))
    assert view.table()["where"].tolist() == ["dmesg.txt:1", "<pasted>:2"]  # known failures first


def test_widgets_follow_the_state(logs):
    pytest.importorskip("ipywidgets")
    view = nbprec.diagnose.explore()
    widget = view.widget
    assert view.built and widget.children[1] is view._text
    view._text.value = logs.ge_line("graph", 27917287424, 27917287423)
    view._button.click()
    assert "ge-graph-memory" in view._summary.value
    (remedy,) = view._remedy_box.children
    assert "graph_memory_max_size = str(28991029248)" in remedy.value and "user-select:all" in remedy.value
    # a FileUpload change as ipywidgets 8 sends it: a tuple of dicts holding memoryviews
    upload = {"name": "plog.log", "type": "", "size": 0, "content": memoryview(logs.log_bytes([logs.OOM_KILLED]))}
    view._uploaded({"new": (upload,)})
    assert "plog.log:1" in view._summary.value and len(view._remedy_box.children) == 2
    view._clear.click()
    assert view._text.value == "" and view._remedy_box.children == () and "No problems found" in view._summary.value


def test_html_fallback_escapes_a_hostile_line():
    view = DiagnosisView(HOSTILE + "\n" + HOSTILE.replace("APP", "<b>APP</b>"))
    html = view._repr_html_()
    assert "<script>" not in html and "<img" not in html and "<b>APP" not in html and "\x1b" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html and "\\x1b[31m" in html
    assert html == view.to_html() and "nbprec-diagnose" in view.diagnosis._repr_html_()


def test_a_source_that_cannot_be_read_is_said_not_raised(tmp_path):
    view = DiagnosisView(str(tmp_path / "missing.log"))
    assert "no such file" in view.problem and view.table().empty
    assert "missing.log" in view.to_html()


def test_the_core_loads_no_widget_library():
    code = (
        "import sys, nbprec.diagnose\n"
        "nbprec.diagnose.diagnose('[ERROR] x y').frame\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('ipywidgets', 'bqplot', 'ipycytoscape', 'ipydatagrid', 'torch', 'tensorflow') or m == 'nbprec.widgets')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
