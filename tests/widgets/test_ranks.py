"""The rank x step overview drives the dashboard, without a browser: clicking a cell sets the shared selection's
run, and the table, the trend and the inspector show that (step, rank). Real 2-rank x 2-step msprobe and nbprec
dumps (tests/fixtures/multirank)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import nbprec
from nbprec.widgets import explore
from nbprec.widgets.model import OpsModel, Selection
from nbprec.widgets.runs import MISSING_COLOUR, RunsView, heatmap_data

MULTI = Path(__file__).resolve().parents[1] / "fixtures" / "multirank"
MSPROBE = MULTI / "msprobe"
RELU = "Torch.relu.0.forward"
ALL_REDUCE = "Distributed.all_reduce.0.forward"


@pytest.fixture(scope="module")
def comparison() -> nbprec.Comparison:
    return nbprec.compare(MSPROBE / "fault", MSPROBE / "fp32", progress=None)


@pytest.fixture
def dash(comparison):
    return explore(comparison, overflow=False)


def test_the_dashboard_opens_on_the_rank_that_diverged_first(dash) -> None:
    assert dash.runs is not None and dash.views[0] is dash.runs
    assert dash.selection.run == (1, 1) and dash.selection.op == RELU
    assert dash.model.run == (1, 1)
    rows = dash.table.page_rows
    assert set(zip(rows["step"], rows["rank"], strict=True)) == {(1, 1)}
    assert rows.loc[rows["mark"] == "first failing", "op"].tolist() == [RELU]
    assert list(rows.columns[:2]) == ["step", "rank"]
    assert "step 1, rank 1: " in dash.table.summary_text() and f"{RELU} (step 1, rank 1)" in dash.table.summary_text()
    assert set(dash.inspector.rows["rank"]) == {1} and set(dash.inspector.rows["step"]) == {1}


def test_heatmap_cells(dash) -> None:
    d = dash.runs.data
    assert d.value == "failing_ops"  # statistics dumps: no cosine to show
    assert d.steps.tolist() == [0, 1] and d.ranks.tolist() == [0, 1]
    assert d.values.tolist() == [[0, 15], [0, 60]]
    assert d.labels[1, 1] == "60 failing (divergence)" and d.labels[0, 1] == "15 failing"
    assert d.badness[0, 0] == 0 and d.badness[1, 1] == 1 and 0 < d.badness[0, 1] < 1
    assert d.selected == (1, 1)


def test_clicking_a_cell_filters_every_view(dash, comparison) -> None:
    dash.runs.click_cell(1, 0)
    assert dash.selection.run == (1, 0) and dash.model.run == (1, 0)
    assert dash.selection.op == ALL_REDUCE  # the run's first failing op
    ops = comparison.ops
    in_run = ops[(ops["step"] == 1) & (ops["rank"] == 0)]
    assert len(dash.trend.data.x) == len(in_run)
    assert dash.trend.data.rows.tolist() == in_run.index.tolist()
    assert dash.trend.data.selected == in_run["op"].tolist().index(ALL_REDUCE)
    page = dash.table.page_rows
    assert set(page["rank"]) == {0} and set(page["step"]) == {1}
    assert page.loc[page["mark"] == "first failing", "op"].tolist() == [ALL_REDUCE]
    assert dash.model.view().matching == len(in_run)
    assert set(dash.inspector.rows["rank"]) == {0} and dash.inspector.tensor.startswith(ALL_REDUCE)
    assert dash.runs.data.selected == (1, 0)
    # a run with nothing failing selects its first op
    dash.runs.click_cell(0, 1)
    assert (
        dash.selection.run == (0, 1) and dash.selection.op == ops[(ops["step"] == 0) & (ops["rank"] == 1)].iloc[0]["op"]
    )
    # back to every (step, rank): the table holds them all, the trend every op
    dash.runs.show_all()
    assert dash.selection.run is None and dash.model.run is None
    assert len(dash.trend.data.x) == len(ops) and dash.model.view().matching == len(ops)
    with pytest.raises(ValueError, match="no step 5"):
        dash.runs.click_cell(5, 0)


def test_clicks_elsewhere_move_the_run(dash, comparison) -> None:
    dash.runs.show_all()
    position = int(np.flatnonzero((comparison.ops["step"] == 1) & (comparison.ops["rank"] == 0))[3])
    dash.trend.click_point(position)
    assert dash.selection.run == (1, 0) and dash.selection.op == comparison.ops.iloc[position]["op"]
    dash.runs.show_all()
    dash.table.set_page(1)
    row = dash.table.page_rows.iloc[0]
    dash.table.click_row(0)
    assert dash.selection.run == (int(row["step"]), int(row["rank"])) and dash.selection.op == row["op"]


def test_the_threshold_rejudges_the_heatmap(dash) -> None:
    before = dash.runs.data.values.copy()
    dash.table.set_metric("rel_euclidean")
    dash.table.set_threshold(10.0)
    after = dash.runs.data.values
    assert after.sum() < before.sum()
    assert after.sum() == dash.model.runs().table["failing_ops"].sum() == dash.model.flagged


def test_the_selection_object_alone() -> None:
    sel = Selection()
    runs, ops = [], []
    sel.observe_run(runs.append)
    sel.observe(ops.append)
    sel.select_run((1, 1), "a")
    sel.select_run((1, 0))  # same op name, another run: the views are told
    sel.select_run((1, 0))
    sel.select_run(None, "b")
    assert runs == [(1, 1), (1, 0), None] and ops == ["a", "a", "b"]


def test_a_missing_rank_is_grey_and_said(tmp_path: Path) -> None:
    bench = tmp_path / "fp32"
    shutil.copytree(MSPROBE / "fp32", bench)
    for folder in bench.glob("step*/rank1"):
        shutil.rmtree(folder)
    comp = nbprec.compare(MSPROBE / "fault", bench, progress=None)
    dash = explore(comp, overflow=False)
    d = dash.runs.data
    assert not d.present[1].any() and d.present[0].all()
    assert d.labels[1].tolist() == ["target only", "target only"]
    html = dash.runs.to_html()
    assert MISSING_COLOUR in html and "Rank 1 is in the target only" in html
    assert dash.to_html().index("nbprec-runs") < dash.to_html().index("nbprec-ops")
    assert "Rank 1 is in the target only" in dash.header_html()
    assert dash.selection.run == (1, 0) and dash.selection.op == ALL_REDUCE


def test_one_step_and_rank_has_no_overview() -> None:
    fault, fp32 = nbprec.open(MSPROBE / "fault"), nbprec.open(MSPROBE / "fp32")
    comp = nbprec.compare(fault.select(step=1, rank=1), fp32.select(step=1, rank=1), progress=None)
    dash = explore(comp, overflow=False)
    assert dash.runs is None and dash.selection.run is None and dash.selection.op == RELU
    assert "step" not in dash.table.page_rows.columns


def test_heatmap_values_and_static_grid(comparison) -> None:
    model = OpsModel(comparison)
    view = RunsView(model, Selection(), value="out_error")
    assert view.data.labels[0, 0] == "0" and view.data.badness[1, 1] == 1
    grid = view.grid_html()
    assert grid.count("nbprec-run-cell") == 4 and "data-step='1' data-rank='1'" in grid
    with pytest.raises(ValueError, match="not one of"):
        heatmap_data(model.runs(), "nope")


def test_widgets_build_and_a_cell_click_selects(tmp_path: Path) -> None:
    pytest.importorskip("bqplot")
    pytest.importorskip("ipydatagrid")
    target, bench = nbprec.open(MULTI / "nbprec" / "fault"), nbprec.open(MULTI / "nbprec" / "fp32")
    comp = nbprec.compare(target, bench, progress=None)
    dash = explore(comp, overflow=False)
    bundle = dash._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and "nbprec-runs-grid" in bundle["text/html"]
    heat = dash.runs._map
    assert heat.color.shape == (2, 2) and heat.row.tolist() == ["rank 0", "rank 1"]
    assert np.asarray(heat.selected).tolist() == [[1, 1]]
    heat.selected = [[0, 1]]  # what a click on rank 0, step 1 does in the browser
    assert dash.selection.run == (1, 0) and dash.selection.op == "Tensor.div_.0.forward"
    assert set(dash.table._grid.data["rank"]) == {0}
    assert len(dash.trend._line.y) == len(dash.trend.data.x) < len(comp.ops)
    dash.runs._all.click()
    assert dash.selection.run is None and heat.selected is None
    dash.runs._value.value = "out_error"
    assert dash.runs.value == "out_error" and "worst output relative error" in dash.runs._grid.value
    # a single rank over two steps still draws (bqplot would squeeze a 1 x 2 grid)
    one_rank = nbprec.compare(target.select(rank=0), bench.select(rank=0), progress=None)
    small = explore(one_rank, overflow=False)
    small.runs.widget  # noqa: B018
    assert small.runs._map.color.shape == (2, 2) and small.runs._map.row.tolist() == ["rank 0", " "]
    small.runs._map.selected = [[0, 0]]
    assert small.selection.run == (0, 0)
    small.runs._map.selected = [[1, 0]]  # the blank padding row does nothing
    assert small.selection.run == (0, 0)
