"""The offline report in a real browser: Debian Chromium opens it from file:// with every other request aborted.

Needs ``/usr/bin/chromium`` (``apt-get install -y chromium``), playwright and the fetched report assets
(``nbprec report --fetch-assets``); skips with the reason otherwise. Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import time
from pathlib import Path

import browser_support as bs
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, bs.needs_chromium]

RENDERED_JS = (
    "() => document.querySelectorAll('.widget-subarea').length >= 4"
    " && document.querySelector('.lm-DataGrid canvas, .p-DataGrid canvas')"
    " && document.querySelectorAll('.dot').length > 0"
    f" && ({bs.CYTOSCAPE_NODES_JS})() > 0"
)


@pytest.fixture(scope="module")
def context():
    from nbprec.report import find_assets

    if find_assets() is None:
        pytest.skip("report assets not fetched: run `nbprec report --fetch-assets` (make report-assets)")
    with bs.chromium() as ctx:
        blocked = bs.block_network(ctx)
        ctx.blocked = blocked
        yield ctx


def _open(context, path: Path):
    page = context.new_page()
    page.dialogs = []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    start = time.monotonic()
    page.goto(path.resolve().as_uri(), timeout=bs.TIMEOUT_MS)
    bs.wait_until(page, RENDERED_JS)
    page.render_seconds = time.monotonic() - start
    return page


def test_report_renders_offline(context, tiny_report):
    page = _open(context, tiny_report.html)
    text = page.inner_text("body")
    for bad in bs.WIDGET_ERRORS:
        assert bad not in text
    assert not context.blocked, f"the report tried the network: {context.blocked[:5]}"
    grid = page.locator(".lm-DataGrid, .p-DataGrid").first.bounding_box()
    assert grid["width"] > 300 and grid["height"] > 150  # the operator table (a virtualised grid)
    assert page.locator(".dot").count() > 100  # trend and scatter marks (bqplot SVG)
    assert page.locator(".bargroup rect").count() > 0  # histogram bars
    heights = page.evaluate(
        "() => [...document.querySelectorAll('.bargroup rect')].map(r => parseFloat(r.getAttribute('height')))"
    )
    assert any(h > 0 for h in heights), "histogram bars are drawn with no height"
    assert page.locator(".line").count() > 0
    nodes = page.evaluate(bs.CYTOSCAPE_NODES_JS)
    assert 1 < nodes <= 300  # the culprit's subgraph (cytoscape draws on canvas)
    assert page.locator("canvas").count() >= 2
    # once a widget renders its static fallback is hidden
    fallbacks = page.locator(".nbprec-widget-output:has(.widget-subarea) > .nbprec-fallback")
    assert fallbacks.count() >= 4 and not fallbacks.first.is_visible()
    assert "Functional.gelu.1.forward" in text
    path = bs.screenshot(page, "report.png")
    print(f"report ({tiny_report.export.bytes / 1e6:.1f} MB) rendered in {page.render_seconds:.1f} s; {path}")
    page.close()


def test_hostile_op_name_is_text(context, hostile_pair, tmp_path_factory):
    from nbprec.report import write_report

    report = write_report(*hostile_pair, tmp_path_factory.mktemp("hostile") / "report.html")
    page = _open(context, report.html)
    page.wait_for_timeout(500)  # let any injected handler fire
    assert page.dialogs == []
    assert page.locator("img[src=x]").count() == 0
    assert "<img src=x onerror=alert(1)>" in page.inner_text("body")  # shown literally, as text
    for bad in bs.WIDGET_ERRORS:
        assert bad not in page.inner_text("body")
    bs.screenshot(page, "report_hostile.png")
    page.close()
