"""The operator table's canvas copies, in Voila and Chromium: one per painted region, and the same pixels.

nbprec's lab extension patches Lumino's DataGrid (``jupyterlab-nbprec/src/gridcopies.ts``): the cells a paint
draws into the grid's buffer canvas are copied to the canvas shown once for the region, not once a cell.
``globalThis.nbprecCellCopies = 'each'`` turns that off, which gives the grid's own behaviour to compare with.
"""

from __future__ import annotations

import browser_support as bs
import pytest

pytestmark = [pytest.mark.browser, bs.needs_chromium]

_READY_JS = (
    "() => [...document.querySelectorAll('div')].some(d => d._cyreg && d._cyreg.cy && d._cyreg.cy.nodes().length)"
    " && document.querySelectorAll('.dot').length > 0"
    " && document.querySelector('.lm-DataGrid canvas, .p-DataGrid canvas')"
    " && document.querySelector('.nbprec-selected')"
)
#: Every canvas of the operator table, as PNG data URLs.
_GRID_PIXELS_JS = "() => [...document.querySelectorAll('.lm-DataGrid canvas')].map(c => c.toDataURL('image/png'))"


@pytest.fixture(scope="module")
def voila_url(demo_notebook, tmp_path_factory):
    yield from bs.serve_voila(demo_notebook, tmp_path_factory.mktemp("jupyter"))


def _settle(page, bench_widgets) -> dict:
    """Wait until the page has made no canvas copy for 0.5 s; the copies counted so far."""
    last = None
    for _ in range(60):
        now = page.evaluate(bench_widgets._CANVAS_COPIES_JS)
        if now == last:
            return now
        last = now
        page.wait_for_timeout(500)
    return last


def _grid_states(browser, url: str, bench_widgets, copies: str | None) -> tuple[dict, list[list[str]]]:
    """Load the dashboard (``copies``: the switch's value, None to leave it unset), then click a row and scroll
    the table; the copies of the first load, and the table's pixels after each step."""
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    try:
        if copies is not None:
            page.add_init_script(f"globalThis.nbprecCellCopies = {copies!r};")
        page.add_init_script(bench_widgets._CANVAS_COPIES_INIT)
        page.goto(url, timeout=bs.TIMEOUT_MS)
        page.wait_for_function(_READY_JS, timeout=bs.TIMEOUT_MS)
        first = _settle(page, bench_widgets)
        pixels = [page.evaluate(_GRID_PIXELS_JS)]
        grid = page.locator(".lm-DataGrid").first
        grid.scroll_into_view_if_needed()
        box = grid.bounding_box()
        page.mouse.click(box["x"] + 250, box["y"] + 20 + 3 * 22 + 11)  # the 4th row: a selection repaints rows
        page.wait_for_function(
            "() => !document.querySelector('.nbprec-selected').innerText.includes('gelu.1.forward')",
            timeout=30_000,
        )
        _settle(page, bench_widgets)
        pixels.append(page.evaluate(_GRID_PIXELS_JS))
        page.mouse.move(box["x"] + 250, box["y"] + 120)
        page.mouse.wheel(0, 66)  # three rows down: the grid moves what it shows and paints the rows uncovered
        _settle(page, bench_widgets)
        pixels.append(page.evaluate(_GRID_PIXELS_JS))
    finally:
        page.close()
    return first, pixels


def test_the_table_copies_each_region_once_and_draws_the_same_pixels(voila_url, browser, bench_widgets):
    each, each_pixels = _grid_states(browser, voila_url, bench_widgets, "each")
    once, once_pixels = _grid_states(browser, voila_url, bench_widgets, None)
    assert each["cells"] >= 50, each  # the grid's own paint: a copy for every visible cell
    assert once["cells"] <= 8 and once["copies"] * 5 <= each["copies"], (once, each)
    assert len(once_pixels[0]) >= 1
    for step, (a, b) in enumerate(zip(once_pixels, each_pixels, strict=True)):
        assert a == b, f"the table's pixels differ after step {step} (load, row click, scroll)"
    assert once_pixels[0] != once_pixels[1] != once_pixels[2]  # each step changed what the table shows
