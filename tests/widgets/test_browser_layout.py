"""Real browser, one screen: Voila serves the dashboard on a 5,000-op comparison with a planted fault, Debian
Chromium renders it at 1440 x 900 (and in a narrow window), and the tests read the page (cell boxes, the grid's
canvas pixels, the inspector's text). Screenshots go to ``tests/artifacts/`` (gitignored)."""

from __future__ import annotations

import statistics
import time

import browser_support as bs
import pytest

from nbprec.widgets.table import FIRST_COLOUR

pytestmark = [pytest.mark.browser, bs.needs_chromium]

CELLS = (".nbprec-cell-table", ".nbprec-cell-graph", ".nbprec-cell-trend", ".nbprec-cell-side")
#: Whether a canvas of the operator grid shows a colour (the rows are drawn on canvases: read their pixels).
GRID_HAS_COLOUR_JS = """(rgb) => [...document.querySelectorAll('.lm-DataGrid canvas, .p-DataGrid canvas')].some(c => {
  const ctx = c.width && c.height && c.getContext('2d');
  if (!ctx) return false;
  const d = ctx.getImageData(0, 0, c.width, c.height).data;
  for (let i = 0; i < d.length; i += 4) {
    if (Math.abs(d[i] - rgb[0]) < 3 && Math.abs(d[i + 1] - rgb[1]) < 3 && Math.abs(d[i + 2] - rgb[2]) < 3) return true;
  }
  return false; })"""


@pytest.fixture(scope="module")
def voila_5000(bench_widgets, tmp_path_factory):
    folder = tmp_path_factory.mktemp("dash5000")
    notebook = bench_widgets.dashboard_notebook(folder / "dashboard.ipynb", "5000")
    yield from bs.serve_voila(notebook, folder)


def _open(browser, url, bench_widgets, width=1440, height=900):
    page = browser.new_page(viewport={"width": width, "height": height})
    start = time.monotonic()
    page.goto(url, timeout=bs.TIMEOUT_MS)
    page.wait_for_function(bench_widgets._DASHBOARD_READY_JS, timeout=bs.TIMEOUT_MS)
    page.render_seconds = time.monotonic() - start
    return page


@pytest.fixture(scope="module")
def page(voila_5000, browser, bench_widgets):
    pg = _open(browser, voila_5000, bench_widgets)
    yield pg
    pg.close()


def test_table_trend_graph_and_inspector_fit_1440x900(page, bench_widgets):
    text = page.inner_text("body")
    assert not [bad for bad in bs.WIDGET_ERRORS if bad in text]
    assert page.evaluate(bench_widgets._CONTENT_HEIGHT_JS) <= 900  # no page scrolling
    for cell in CELLS:
        box = page.locator(cell).first.bounding_box()
        assert box["width"] > 500 and box["height"] > 250, cell
        assert box["x"] >= 0 and box["x"] + box["width"] <= 1440 and box["y"] + box["height"] <= 900, cell
    grid = page.locator(".lm-DataGrid, .p-DataGrid").first.bounding_box()
    assert grid["height"] >= 200
    bs.ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(bs.ARTIFACTS / "dashboard-5000-1440x900.png"))
    print(f"5,000-op dashboard drawn in {page.render_seconds:.1f} s")


def test_go_to_first_failing_op_brings_its_row_on_screen(page, faulty_5000):
    first = faulty_5000.first_failing_op()["op"]
    rgb = [int(FIRST_COLOUR[i : i + 2], 16) for i in (1, 3, 5)]
    page.wait_for_function(GRID_HAS_COLOUR_JS, arg=rgb, timeout=30_000)  # opened on it: on screen
    page.get_by_role("button", name="▶").click()  # the next page: its row is gone
    page.wait_for_function(f"(rgb) => !({GRID_HAS_COLOUR_JS})(rgb)", arg=rgb, timeout=30_000)
    page.get_by_role("button", name="go to first failing op").click()
    page.wait_for_function(GRID_HAS_COLOUR_JS, arg=rgb, timeout=30_000)
    assert first in page.locator(".nbprec-selected").first.inner_text()


def test_a_row_click_updates_the_linked_views(page, bench_widgets):
    clicks = [bench_widgets._click_row_latency(page, row)[0] for row in (5, 7, 4, 6, 3)]
    print(f"row click to table + trend + inspector updated: median {statistics.median(clicks) * 1e3:.0f} ms")
    assert statistics.median(clicks) < 3.0


def test_a_narrow_window_stacks_the_views(voila_5000, browser, bench_widgets):
    pg = _open(browser, voila_5000, bench_widgets, width=820, height=900)
    try:
        boxes = [pg.locator(cell).first.bounding_box() for cell in CELLS]
        assert len({round(b["x"]) for b in boxes}) == 1  # one column
        assert all(b["width"] > 700 for b in boxes)
        table, graph, trend, side = (b["y"] for b in boxes)
        assert table < trend < graph < side  # the operators, their trend, the graph, the inspector
        pg.screenshot(path=str(bs.ARTIFACTS / "dashboard-narrow.png"), full_page=True)
    finally:
        pg.close()
