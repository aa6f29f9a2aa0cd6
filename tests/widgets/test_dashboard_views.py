"""The one-screen dashboard's views without a browser: table columns and filters, the trend's log scale and the
verdict's marks, cheap selection updates, the lazy overflow scan (test_browser_layout.py renders them)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nbprec.compare.rules import STATUS_FAIL
from nbprec.widgets import explore
from nbprec.widgets.model import OpsModel
from nbprec.widgets.table import VISIBLE_ROWS, _cell_text
from nbprec.widgets.trend import FLOOR, error_values, line_points

pytest.importorskip("bqplot")
pytest.importorskip("ipydatagrid")


def test_the_grid_shows_op_status_origin_and_the_rules_metrics_first(msprobe_comparison):
    model = OpsModel(msprobe_comparison.with_rule("cann"))
    columns = model.columns()
    assert columns[:5] == ["op", "status", "origin", "out_cosine", "in_cosine"]
    assert "out_rel_euclidean" in columns[:7]  # the rule's other bound, before the identity columns
    assert columns[-4:] == ["mark", "op_type", "module", "order"]


def test_module_filter_keeps_a_module_and_its_children(faulty_5000):
    model = OpsModel(faulty_5000, page_size=100_000)
    model.set_filters(modules=["enc.layers.1"])
    modules = set(model.view().rows["module"])
    assert modules == {"enc.layers.1"}  # not enc.layers.10 .. 19
    model.set_filters(modules=["enc.layers.1", "enc.layers.20"])
    assert set(model.view().rows["module"]) == {"enc.layers.1", "enc.layers.20"}
    model.set_filters(modules=["enc"])
    assert model.view().matching == len(faulty_5000.ops)
    model.set_filters(modules=())
    model.set_sort("module")
    rows = model.view().rows["module"].tolist()
    assert rows == sorted(rows)
    model.set_sort("op", ascending=False)
    names = model.view().rows["op"].tolist()
    assert names == sorted(names, reverse=True)


def test_sorting_and_filtering_100000_ops_gives_the_rows_pandas_gives(bench_widgets):
    """Every filter and sort of the table at 10^5 ops against the same selection made with pandas (their
    speed is measured by ``bench/widgets.py``, not here)."""
    model = OpsModel(bench_widgets.faulty_comparison(100_000))
    ops = model.ops
    names, modules = ops["op"].astype(str).str.lower(), ops["module"].astype(str)
    in_layer_7 = (modules == "enc.layers.7") | modules.str.startswith("enc.layers.7.")
    filters = {
        "name": ({"pattern": "OP.9"}, names.str.contains("op.9", regex=False)),
        "type": ({"pattern": "", "op_types": {"gelu", "softmax"}}, ops["op_type"].isin({"gelu", "softmax"})),
        "status": ({"op_types": (), "statuses": {STATUS_FAIL}}, ops["status"] == STATUS_FAIL),
        "module": ({"statuses": (), "modules": ["enc.layers.7"]}, in_layer_7),
    }
    for label, (change, expected) in filters.items():
        model.set_filters(**change)
        page = model.view()
        assert 0 < page.matching == int(expected.sum()) < len(ops), label
        assert list(page.rows["op"]) == list(ops["op"][expected.to_numpy()][: model.page_size]), label
    model.set_filters(modules=())
    for column in ("op", "op_type", "status", "module"):
        model.set_sort(column)
        page = model.view()
        expected = ops.assign(key=ops[column].astype(str)).sort_values("key", kind="stable")["op"]
        assert page.matching == len(ops)
        assert list(page.rows["op"]) == list(expected[: model.page_size]), column


def test_go_to_first_failing_op_lands_on_the_verdicts_op(faulty_5000):
    dash = explore(faulty_5000, overflow=False)
    dash.table.widget  # noqa: B018
    first = faulty_5000.first_failing_op()
    assert first["op"] in faulty_5000.verdict().headline
    dash.table.set_filters(pattern="op.4")  # a filter that hides it, on another page
    dash.table.set_page(3)
    dash.table.go_to_first_failing()
    assert dash.selection.op == first["op"]
    shown = dash.table.page_rows["op"].tolist()
    assert first["op"] in shown[:VISIBLE_ROWS]  # on screen without scrolling the grid
    assert dash.model.pattern == "" and dash.table._pattern.value == ""
    assert first["op"] in dash.table._grid.data["op"].tolist()[:VISIBLE_ROWS]


def test_selecting_an_op_far_away_brings_its_row_into_view(faulty_5000):
    dash = explore(faulty_5000, overflow=False)
    dash.table.widget  # noqa: B018
    op = faulty_5000.ops.iloc[4321]["op"]
    dash.trend.click_point(4321)
    assert op in dash.table.page_rows["op"].tolist()[:VISIBLE_ROWS]
    grid_data = dash.table._grid._data
    dash.table.click_row(VISIBLE_ROWS - 1)  # a row already on screen: only the colours change
    assert dash.table._grid._data is grid_data
    assert json_name(dash.selection.op) in dash.table._grid.default_renderer.background_color.value


def json_name(op: str) -> str:
    import json

    return json.dumps(op)


def test_trend_shows_0_9999_and_0_3_on_one_log_axis(faulty_5000):
    dash = explore(faulty_5000, overflow=False)
    trend = dash.trend
    trend.widget  # noqa: B018
    d = trend.data
    assert type(trend._sy).__name__ == "LogScale"
    worst, best = float(np.nanmax(d.err)), float(np.nanmin(d.err))
    assert worst == pytest.approx(0.7)  # cosine 0.3
    assert best < 1e-4  # cosine 0.9999 and better, not flattened onto 1.0
    assert trend._sy.min <= best and trend._sy.max >= worst
    assert error_values("out_cosine", np.array([1.0, 0.9999, np.nan]))[0] == FLOOR
    # the verdict's story: first failing op = introduced op here, onset drawn; named as the verdict names it
    first = faulty_5000.first_failing_op()
    assert d.first == d.introduced == float(first["order"])
    assert np.isfinite(d.onset)
    assert d.names["first"] == first["op"] and first["op"] in trend._caption()
    assert np.asarray(trend._marks.x)[0, 0] == d.first
    assert list(trend._marks.opacities) == [1.0, 0.0, 1.0]  # the introduced line would hide the first failing one
    assert "(introduced it)" in trend._caption()


def test_trend_marks_infinite_errors_and_zooms(faulty_5000):
    dash = explore(faulty_5000, overflow=False)
    trend = dash.trend
    trend.widget  # noqa: B018
    dash.table.set_metric("max_abs_err")
    assert len(trend.data.outliers) == 2 and "2 inf/overflow" in trend._caption()
    assert np.isfinite(np.asarray(trend._line.y, dtype=float)).all()  # inf drawn at the top, not dropped
    assert "inf" in dash.table._grid_frame().to_numpy().ravel().tolist() or _cell_text(np.inf) == "inf"
    assert _cell_text(np.inf) == "inf" and _cell_text(-np.inf) == "-inf" and _cell_text(np.nan) == ""
    trend.set_window(1000, 1100)
    assert (trend._sx.min, trend._sx.max) == (1000.0, 1100.0)
    assert len(trend._line.x) == 101  # every op of the window
    trend.set_window(None)
    assert trend._sx.max == len(trend.data.x) - 1


def test_the_trend_draws_its_dots_for_the_window_shown(faulty_5000):
    """At most MAX_DOTS dots over 5,000 ops, every failing op first where they fit; zoomed in, every op of the
    window has its dot, and clicking one selects that op."""
    from nbprec.widgets.trend import MAX_DOTS

    dash = explore(faulty_5000, overflow=False)
    trend = dash.trend
    trend.widget  # noqa: B018
    drawn = len(trend._dots.x) + len(trend._fail_dots.x)
    assert drawn == MAX_DOTS and len(trend.data.fails) > 0
    assert len(trend._fail_dots.x) == min(len(trend.data.fails), MAX_DOTS // 2)
    trend.set_window(4000, 4099)
    shown = np.concatenate([trend._dots.x, trend._fail_dots.x])
    assert set(np.arange(4000, 4100)) <= set(shown.astype(int).tolist())
    assert set(trend._fail_dots.x.astype(int).tolist()) == set(
        trend.data.fails[(trend.data.fails >= 4000) & (trend.data.fails <= 4099)].tolist()
    )
    k = int(np.flatnonzero(trend._dots.x == 4050)[0])
    trend._clicked(trend._dot_positions, {"data": {"index": k}})
    assert dash.selection.op == dash.model.ops.iloc[int(trend.data.rows[4050])]["op"]
    trend.set_window(None)
    assert len(trend._dots.x) + len(trend._fail_dots.x) == MAX_DOTS


def test_line_reduction_keeps_peaks():
    y = np.full(100_000, 1e-6)
    y[54_321] = 0.7
    x, kept = line_points(np.arange(100_000.0), y, 4_000)
    assert len(x) <= 4_000 and kept.max() == 0.7 and 54_321 in x


def test_a_selection_moves_the_diamond_without_resending_the_line(faulty_5000):
    dash = explore(faulty_5000, overflow=False)
    dash.widget  # noqa: B018
    line, dots = dash.trend._line.y, dash.trend._dots.x
    dash.trend.click_point(777)
    assert dash.trend._line.y is line and dash.trend._dots.x is dots
    assert dash.trend._selected.x.tolist() == [777.0]


def test_the_overflow_scan_runs_when_its_tab_is_opened(msprobe_comparison):
    dash = explore(msprobe_comparison)
    dash.widget  # noqa: B018
    assert not dash.overflow.scanned
    dash.select(msprobe_comparison.ops.iloc[3]["op"])
    assert not dash.overflow.scanned
    titles = [dash._tabs.get_title(i) for i in range(len(dash._tabs.children))]
    dash._tabs.selected_index = titles.index("Overflow")
    assert dash.overflow.scanned and "First critical op" in dash.overflow._summary.value


def test_displaying_the_dashboard_starts_no_overflow_scan(msprobe_comparison):
    """The display bundle (widget + static fallbacks) says the scan has not run instead of running it."""
    dash = explore(msprobe_comparison)
    bundle = dash._repr_mimebundle_()
    assert not dash.overflow.scanned
    assert "runs when this tab is first opened" in bundle["text/html"]
    view = bundle["application/vnd.jupyter.widget-view+json"]
    assert view == {"version_major": 2, "version_minor": 0, "model_id": dash.widget.model_id}
    dash.overflow.load()
    assert "First critical op" in dash.overflow.to_html()


def test_one_screen_layout_holds_every_view(faulty_5000):
    dash = explore(faulty_5000)
    root = dash.widget
    css, grid = root.children
    assert "grid-template-areas" in css.value and "@container" in css.value
    areas = [c.layout.grid_area for c in grid.children]
    assert areas == ["head", "table", "graph", "trend", "side"]
    assert grid.children[1].children[-1] is dash.table.widget
    assert grid.children[2].children[-1] is dash.subgraph.widget
    assert grid.children[3].children[-1] is dash.trend.widget
    titles = [dash._tabs.get_title(i) for i in range(len(dash._tabs.children))]
    assert titles == ["Tensor inspector", "Tensor plots", "Overflow"]
    dash._tabs.selected_index = 1
    assert dash.inspector.plots._figures == []  # no tensor payloads (a synthetic comparison): no empty figures sent
    assert "element-wise views unavailable" in dash.inspector.plots._note.value  # and why


def test_the_tensor_plots_are_drawn_only_while_their_tab_is_open(msprobe_comparison, faulty_5000):
    """The histogram, scatter and error profiles have a tab of their own: the dashboard sends no figure until it
    is opened, selections while it is closed send it nothing, and opening it draws the pair shown then. A
    comparison of statistics only (no tensor payloads) never gets an empty figure."""
    import ipywidgets

    def built_widgets(action):
        built = []
        previous = ipywidgets.Widget._widget_construction_callback
        ipywidgets.Widget.on_widget_constructed(built.append)
        try:
            action()
        finally:
            ipywidgets.Widget.on_widget_constructed(previous)
        return sum(type(w).__name__ == "Figure" for w in built)

    dash = explore(msprobe_comparison, overflow=False)
    plots = dash.inspector.plots
    assert built_widgets(lambda: dash.widget) == 1  # the trend's only
    other = next(op for op in msprobe_comparison.ops["op"] if op != dash.selection.op)
    dash.select(other)
    assert plots._figures == [] and dash.inspector.tensor is not None
    titles = [dash._tabs.get_title(i) for i in range(len(dash._tabs.children))]
    assert built_widgets(lambda: setattr(dash._tabs, "selected_index", titles.index("Tensor plots"))) == 4
    assert plots.shown and all(f in plots._box.children for f in plots._figures)
    assert plots._hist_target.scales["y"].min == 0  # counts never below zero
    assert len(plots._hist_target.x) > 0 and len(plots._scatter.x) > 0
    assert dash.inspector.tensor in plots._note.value  # the pair the inspector shows
    dash._tabs.selected_index = titles.index("Tensor inspector")
    drawn = plots._scatter.x.copy()
    third = next(op for op in msprobe_comparison.ops["op"][::-1] if op not in (other, dash.selection.op))
    dash.select(third)
    assert np.array_equal(plots._scatter.x, drawn)  # closed: nothing sent
    dash._tabs.selected_index = titles.index("Tensor plots")
    assert dash.inspector.tensor in plots._note.value
    expected = dash.inspector.inspection.scatter["bench"].to_numpy()
    assert set(plots._scatter.x.tolist()) <= set(expected.tolist()) and not np.array_equal(plots._scatter.x, drawn)

    both = explore(msprobe_comparison, overflow=False)  # the dashboard, and ``dash.inspector`` as a cell's result
    both.widget  # noqa: B018
    alone = both.inspector
    bundle = alone._repr_mimebundle_()
    shown = alone._alone
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == shown.model_id
    assert shown.children == (alone.widget, alone.plots.widget) and len(alone.plots._figures) == 4
    both._tabs.selected_index = 1
    both._tabs.selected_index = 0  # the dashboard's plots tab closed: the inspector shown alone still draws them
    drawn = alone.plots._scatter.x.copy()
    both.select(next(op for op in msprobe_comparison.ops["op"][::-1] if op != both.selection.op))
    assert alone.plots.shown and not np.array_equal(alone.plots._scatter.x, drawn)

    statistics_only = explore(faulty_5000, overflow=False)
    statistics_only.widget  # noqa: B018
    assert built_widgets(lambda: setattr(statistics_only._tabs, "selected_index", 1)) == 0
    assert statistics_only.inspector.plots._figures == [] and statistics_only.inspector.inspection is None


def test_the_neighbourhood_controls_are_built_when_that_mode_is_first_shown(faulty_5000):
    statistics_only = explore(faulty_5000, overflow=False)
    statistics_only.widget  # noqa: B018
    assert statistics_only.subgraph._neighbourhood_bar.children == ()
    statistics_only.subgraph.set_mode("neighbourhood")
    bar = statistics_only.subgraph._neighbourhood_bar.children
    assert [type(c).__name__ for c in bar] == ["HTML", "IntSlider", "HTML", "IntSlider", "Button"]


def test_the_model_graph_is_laid_out_in_python():
    """Every block and op of the whole-model view has its position, and every open block its box around what it
    holds (plain nodes under it, not Cytoscape.js compound nodes): no layout engine runs in the browser."""
    from nbprec.graph.navigator import ModelNavigator
    from nbprec.widgets.graphdata import navigator_elements
    from nbprec.widgets.subgraph import _LAYOUTS

    assert _LAYOUTS["model"]["name"] == "preset"
    n = 10_000
    i = np.arange(n)
    ops = pd.DataFrame({"op": [f"op{k}" for k in i], "order": i, "status": "pass", "origin": "",
                        "module": [f"m.s{k // 2500}.b{k // 250 % 10}.l{k // 25 % 10}" for k in i],
                        "out_cosine": 1.0})  # fmt: skip
    nav = ModelNavigator.from_ops(ops)
    nav.reveal("op6180")
    e = navigator_elements(nav.view(), "cosine")
    leaves = [n for n in e.nodes if not n["data"]["expanded"]]
    assert leaves and all("position" in n for n in leaves)
    ys = {n["data"]["id"]: n["position"]["y"] for n in leaves}
    assert ys["op6179"] < ys["op6180"] < ys["op6181"]
    boxes = {n["data"]["id"]: n for n in e.nodes if n["data"]["expanded"]}
    assert len(boxes) >= 4 and not any("parent" in n["data"] for n in e.nodes)  # m, s2, b4, l7 and groups
    for node in e.nodes:  # inside the box of the open block that holds it, and drawn above it
        holder = boxes.get(node["data"].get("within", ""))
        if holder is None:
            continue
        (x, y), (bx, by) = node["position"].values(), holder["position"].values()
        assert abs(x - bx) < holder["data"]["w"] / 2 and abs(y - by) < holder["data"]["h"] / 2
        assert node["data"].get("z", 99) > holder["data"]["z"] and holder.get("grabbable") is False


def test_open_blocks_however_deep_are_drawn_under_the_edges_and_the_ops():
    """A module tree 30 levels deep: every open block's box stays below the edges' and the ops' z-indexes."""
    from nbprec.graph.navigator import ModelNavigator
    from nbprec.widgets.graphdata import navigator_elements, navigator_style

    depth = 30
    ops = pd.DataFrame({"op": ["a", "b", "c"], "order": [0, 1, 2], "status": "pass", "origin": "",
                        "module": [".".join(f"m{k}" for k in range(depth))] * 3, "out_cosine": 1.0})  # fmt: skip
    nav = ModelNavigator.from_ops(ops)
    nav.reveal("b")
    e = navigator_elements(nav.view(), "cosine")
    boxes = [n["data"]["z"] for n in e.nodes if n["data"]["expanded"]]
    assert len(boxes) >= 20 and boxes == sorted(boxes)  # outer blocks first, each under what it holds
    style = {rule["selector"]: rule["style"] for rule in navigator_style()}
    assert style["node.expanded"]["z-index"] == "data(z)"
    assert max(boxes) < style["edge"]["z-index"] < style["node"]["z-index"]


def test_a_view_builds_its_widget_with_the_collector_paused():
    """The first build (widget libraries imported, tens of thousands of objects made) triggers no collection; the
    collector's state comes back after it, whether it was on or off."""
    import gc

    import ipywidgets

    from nbprec.widgets.base import View

    seen: list[bool] = []

    class Probe(View):
        def _build(self) -> ipywidgets.HTML:
            seen.append(gc.isenabled())
            return ipywidgets.HTML("probe")

        def to_html(self) -> str:
            return "probe"

    was = gc.isenabled()
    try:
        gc.enable()
        assert Probe().widget.value == "probe" and gc.isenabled()
        gc.disable()
        assert Probe().widget.value == "probe"
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False, False]


def test_no_control_has_a_description_for_the_typesetter(msprobe_comparison):
    """Every widget of the dashboard, with the controls built on demand (the error-metric slider, the graph's
    neighbourhood controls, the overflow list, the rank x step view): none has a ``description`` (ipywidgets hands
    each one to the page's LaTeX typesetter, and JupyterLab's and Voila's load MathJax on its first call) and
    none is an ``HTMLMath`` or ``Label`` (typeset too). Each control's words are a caption beside it."""
    from pathlib import Path

    import ipywidgets

    import nbprec

    multirank = Path(__file__).resolve().parents[1] / "fixtures" / "multirank" / "msprobe"
    built = []
    previous = ipywidgets.Widget._widget_construction_callback
    ipywidgets.Widget.on_widget_constructed(built.append)
    try:
        for comparison in (msprobe_comparison, nbprec.compare(multirank / "fault", multirank / "fp32", progress=None)):
            dash = explore(comparison)
            dash.widget  # noqa: B018
            dash.table.set_metric("max_abs_err")  # the error metrics' slider
            dash.subgraph.set_mode("neighbourhood")  # the depth and block sliders
            dash.overflow.load()  # the flagged list
    finally:
        ipywidgets.Widget.on_widget_constructed(previous)
    assert dash.runs is not None and dash.runs.built
    names = {type(w).__name__ for w in built}
    assert {"FloatSlider", "FloatLogSlider", "IntRangeSlider", "IntSlider", "Dropdown", "Select"} <= names
    typeset = [
        (type(w).__name__, w.description)
        for w in built
        if isinstance(w, ipywidgets.widgets.widget_description.DescriptionWidget) and w.description
    ]
    assert typeset == []
    assert not names & {"HTMLMath", "Label"}
    captions = [w.value for w in built if type(w).__name__ == "HTML" and "white-space:nowrap" in w.value]
    assert {"threshold", "metric", "rule", "sort", "zoom", "tensor", "flagged", "depth", "blocks", "cells"} <= {
        c.split(">")[1].split("<")[0] for c in captions
    }
