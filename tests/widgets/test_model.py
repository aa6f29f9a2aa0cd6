"""The dashboard state without a browser: table model, re-judging, selection propagation, static fallbacks."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from nbprec.compare.rules import STATUS_FAIL
from nbprec.widgets.model import OpsModel, Selection


@pytest.mark.parametrize("rule", ["default", "cann", "msprobe", "ptdbg"])
@pytest.mark.parametrize(("metric", "value"), [("cosine", 0.99999), ("rel_euclidean", 0.003), ("max_abs_err", 0.01)])
def test_fast_rejudge_equals_core_with_threshold(msprobe_comparison, rule, metric, value):
    comp = msprobe_comparison.with_rule(rule)
    model = OpsModel(comp)
    model.set_threshold(value, metric)
    core = comp.with_threshold(metric, value).ops
    columns = ["in_status", "status", "origin"] + (["explained"] if "explained" in core else [])
    for column in columns:
        assert model.ops[column].tolist() == core[column].tolist(), column
    assert model.flagged == len(comp.with_threshold(metric, value).failing_ops())


def test_slider_changes_flagged_count_and_first_failing(msprobe_comparison):
    model = OpsModel(msprobe_comparison)
    values = (0.9, 0.9999, 0.999999)
    expected = [len(msprobe_comparison.with_threshold("cosine", v).failing_ops()) for v in values]
    seen = []
    for value in values:
        model.set_threshold(value, "cosine")
        seen.append(model.view().flagged)
    assert seen == expected
    assert seen[0] < seen[-1]
    first = model.first_failing()
    assert first["op"] == msprobe_comparison.with_threshold("cosine", 0.999999).first_failing_op()["op"]
    page = model.view()
    marked = page.rows[page.rows["mark"] == "first failing"]
    assert marked["op"].tolist() == [first["op"]]


def test_filters_sort_and_paging(msprobe_comparison):
    model = OpsModel(msprobe_comparison, page_size=10)
    page = model.view()
    assert page.pages == 10 and len(page.rows) == 10
    assert page.rows["order"].tolist() == sorted(page.rows["order"])
    model.set_filters(op_types={"linear"})
    assert set(model.view().rows["op_type"]) == {"linear"}
    model.set_filters(op_types=(), pattern="LAYER_NORM")
    rows = model.view().rows
    assert len(rows) and all("layer_norm" in op.lower() for op in rows["op"])
    model.set_filters(pattern="")
    model.set_threshold(0.999999, "cosine")
    model.set_filters(statuses={STATUS_FAIL})
    assert (model.view().rows["status"] == STATUS_FAIL).all()
    model.set_filters(statuses=(), origins={"introduced"})
    assert (model.view().rows["origin"] == "introduced").all()
    model.set_filters(origins=())
    model.set_sort("out_cosine")
    values = model.view().rows["out_cosine"].to_numpy()
    assert (np.diff(values[np.isfinite(values)]) >= 0).all()  # worst (lowest) first
    op = model.ops.iloc[-1]["op"]
    model.set_sort("order")
    assert model.page_of(op) == 9
    with pytest.raises(ValueError, match="cannot sort"):
        model.set_sort("nope")


def test_selection_propagates_to_every_view(msprobe_comparison):
    from nbprec.widgets import explore

    dash = explore(msprobe_comparison, overflow=False)
    last = msprobe_comparison.ops.iloc[-1]["op"]
    dash.select(last)
    assert dash.table.model.page == dash.table.model.page_of(last)
    assert last in dash.table.page_rows["op"].tolist()
    assert dash.trend.data.selected == len(msprobe_comparison.ops) - 1
    assert dash.inspector.tensor.startswith(last)
    assert dash.inspector.inspection is not None  # payloads read from the dumps named in comparison.meta
    centre = [n for n in dash.subgraph.elements.nodes if "selected" in n["classes"]]
    assert centre and centre[0]["data"]["op"] == last
    # a click in one view moves the others
    dash.table.click_row(0)
    assert dash.selection.op == dash.table.page_rows.iloc[0]["op"]
    dash.trend.click_point(5)
    assert dash.selection.op == msprobe_comparison.ops.iloc[5]["op"]
    assert dash.inspector.rows["op"].eq(dash.selection.op).all()
    node = next(n for n in dash.subgraph.elements.nodes if "selected" not in n["classes"])
    dash.subgraph.click_node(node["data"])
    assert dash.selection.op == node["data"]["op"]


def test_slider_moves_update_trend_and_graph(msprobe_comparison):
    from nbprec.widgets import explore

    dash = explore(msprobe_comparison, overflow=False)
    assert dash.model.flagged == 0
    dash.table.set_threshold(0.999999)
    assert dash.trend.data.threshold == 0.999999
    assert len(dash.trend.data.fails) == dash.model.flagged > 0
    assert "<b>" in dash.table.summary_text() and str(dash.model.flagged) in dash.table.summary_text()
    dash.table.set_metric("rel_euclidean")
    assert dash.trend.data.metric == "out_rel_euclidean"
    dash.table.set_rule("cann")
    assert dash.model.rule.name == "cann"


def test_widgets_build_and_follow_state(msprobe_comparison):
    pytest.importorskip("ipydatagrid")
    from nbprec.widgets import explore

    dash = explore(msprobe_comparison, overflow=False)
    bundle = dash._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and "text/html" in bundle
    grid = dash.table._grid
    assert len(grid.data) == len(dash.table.page_rows)
    dash.table._cos_slider.value = 0.999999  # what dragging the slider does
    assert dash.model.threshold == 0.999999
    assert str(dash.model.flagged) in dash.table._summary.value
    dash.table._grid.selections = [{"r1": 3, "r2": 3, "c1": 0, "c2": 5}]  # a click on the fourth row
    assert dash.selection.op == dash.table.page_rows.iloc[3]["op"]
    assert dash.inspector._header.value.count(dash.selection.op) >= 1
    assert len(dash.trend._line.y) == len(msprobe_comparison.ops)
    assert 0 < len(dash.subgraph._cy.graph.nodes) <= 300
    dash.subgraph._cy.graph.nodes  # noqa: B018
    dash.subgraph.click_node(dash.subgraph.elements.nodes[0]["data"])
    assert dash.inspector._tensor.value == dash.inspector.tensor


def test_static_fallbacks_escape_user_strings(msprobe_comparison):
    from nbprec.widgets import explore

    table = msprobe_comparison.table.copy()
    table.loc[table["op"] == table["op"].iloc[0], "op"] = "<script>alert(1)</script>"
    from nbprec.compare import Comparison

    comp = Comparison(table, rule=msprobe_comparison.rule, meta={"target": "<b>t</b>", "bench": "b&"})
    dash = explore(comp, overflow=False)
    dash.select("<script>alert(1)</script>")
    html = dash.to_html()
    assert "<script>" not in html and "&lt;script&gt;" in html and "&lt;b&gt;t&lt;/b&gt;" in html
    assert "<svg" in dash.trend.to_html() and dash.trend.to_svg().startswith("<svg")
    assert "<table" in dash.table.to_html()


def test_core_and_model_import_no_widget_library():
    code = (
        "import sys, nbprec, nbprec.inspect, nbprec.widgets.model, nbprec.widgets.graphdata;"
        "bad=[m for m in ('ipywidgets','bqplot','ipycytoscape','ipydatagrid') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_selection_is_plain_and_observable():
    sel = Selection()
    calls = []
    sel.observe(calls.append)
    sel.select("a")
    sel.select("a")
    sel.select(None)
    assert calls == ["a", None]
