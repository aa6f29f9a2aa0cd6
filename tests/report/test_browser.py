"""The offline report in a real browser: Debian Chromium opens it from file:// with every other request aborted,
and a reader moves the threshold, filters, sorts, pages, clicks rows, trend points and graph nodes.

Needs ``/usr/bin/chromium`` (``apt-get install -y chromium``) and playwright; the subgraph (a cytoscape widget)
also needs the fetched report assets (``nbprec report --fetch-assets``). Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import time
from pathlib import Path

import browser_support as bs
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, bs.needs_chromium]

READY_JS = "() => document.querySelector('.nbprec-explorer')?.dataset.state === 'ready'"
SUMMARY = ".nbprec-x-summary"
ROWS = ".nbprec-x-table tbody tr"
HOSTILE_OP = "<img src=x onerror=alert(1)>"  # the failing op of the hostile_pair fixture (conftest.py)


@pytest.fixture(scope="module")
def context():
    with bs.chromium(viewport=(1440, 900)) as ctx:
        ctx.blocked = bs.block_network(ctx)
        yield ctx


def _open(context, path: Path):
    page = context.new_page()
    page.dialogs, page.errors = [], []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    start = time.monotonic()
    page.goto(path.resolve().as_uri(), timeout=bs.TIMEOUT_MS)
    bs.wait_until(page, READY_JS)
    page.render_seconds = time.monotonic() - start
    return page


def _column(page, name: str) -> list[str]:
    index = page.evaluate(
        "c => [...document.querySelectorAll('.nbprec-x-table thead th')].findIndex(th => th.dataset.col === c)", name
    )
    assert index >= 0, name
    return page.locator(f"{ROWS} td:nth-child({index + 1})").all_inner_texts()


def _op_names(page) -> list[str]:
    return page.locator(f"{ROWS} td.op").evaluate_all("tds => tds.map(td => td.title)")


def _flagged(page) -> int:
    return int(page.inner_text(".nbprec-x-flagged").split()[0])


@pytest.fixture(scope="module")
def comparison(tiny_pair):
    import nbprec

    return nbprec.compare(*tiny_pair, progress=None)


def test_report_renders_offline(context, tiny_report):
    page = _open(context, tiny_report.html)
    text = page.inner_text("body")
    for bad in bs.WIDGET_ERRORS:
        assert bad not in text
    assert "needs JavaScript" not in page.inner_text(".nbprec-explorer")  # the script ran
    assert page.locator(ROWS).count() == 25  # one page of the operator table
    assert page.locator(".nbprec-x-trend circle.fail").count() > 10  # failing ops on the error trend
    # the culprit is selected and inspected: statistics, histogram/scatter SVG, worst elements
    inspector = page.inner_text(".nbprec-x-inspector")
    assert "Functional.gelu.1.forward" in inspector and "top 10 worst elements" in inspector
    assert page.locator(".nbprec-x-inspector svg").count() >= 1
    assert page.locator(".nbprec-x-table tr.selected td.op").get_attribute("title") == "Functional.gelu.1.forward"
    # no control that needs a kernel is drawn: no slider, dropdown or button widget of ipywidgets
    assert page.locator(".widget-slider, .widget-dropdown, .widget-button, .widget-select-multiple").count() == 0
    if tiny_report.offline_widgets:
        bs.wait_until(page, f"() => ({bs.CYTOSCAPE_NODES_JS})() > 1")
        assert 1 < page.evaluate(bs.CYTOSCAPE_NODES_JS) <= 300  # the culprit's subgraph (canvas)
        fallbacks = page.locator(".nbprec-widget-output:has(.widget-subarea) > .nbprec-fallback")
        assert fallbacks.count() >= 1 and not fallbacks.first.is_visible()
    assert page.errors == [] and not context.blocked, (page.errors, context.blocked[:5])
    path = bs.screenshot(page, "report.png")
    print(f"report ({tiny_report.export.bytes / 1e6:.1f} MB) ready in {page.render_seconds:.1f} s; {path}")
    page.close()


def test_threshold_filters_sort_paging_and_selection_work_offline(context, tiny_report, comparison):
    from nbprec.report.explorer import rule_value, slider_metric, threshold_positions

    page = _open(context, tiny_report.html)
    metric = slider_metric(comparison)
    positions = threshold_positions(metric, rule_value(comparison, metric), len(comparison.ops))
    slider = page.locator(".nbprec-x-threshold")

    # threshold: the strictest position flags what the core flags there, on the table and the trend
    before = (_flagged(page), page.locator(".nbprec-x-trend circle.fail").count())
    assert before[0] == len(comparison.failing_ops())
    slider.focus()
    page.keyboard.press("End")
    strict = len(comparison.with_threshold(metric, positions[-1]).failing_ops())
    assert _flagged(page) == strict > before[0]
    assert page.locator(".nbprec-x-trend circle.fail").count() > before[1]
    page.select_option(".nbprec-x-filter-status", "fail")
    assert f"({strict} of {len(comparison.ops)} ops)" in page.inner_text(".nbprec-x-page")
    assert set(_column(page, "status")) == {"fail"}
    page.select_option(".nbprec-x-filter-status", "")
    slider.press("Home")
    assert _flagged(page) == len(comparison.with_threshold(metric, positions[0]).failing_ops()) < strict
    slider.fill(str(positions.index(rule_value(comparison, metric))))
    assert _flagged(page) == before[0]

    # filters: name substring, op type, module
    page.fill(".nbprec-x-filter-name", "GELU")
    names = _op_names(page)
    assert names and all("gelu" in n.lower() for n in names)
    assert len(names) == int((comparison.ops["op"].str.lower().str.contains("gelu")).sum())
    page.fill(".nbprec-x-filter-name", "")
    page.select_option(".nbprec-x-filter-type", "linear")
    assert set(_column(page, "op_type")) == {"linear"}
    page.select_option(".nbprec-x-filter-type", "")
    page.fill(".nbprec-x-filter-module", "layers.1")
    assert all("layers.1" in m for m in _column(page, "module"))
    page.fill(".nbprec-x-filter-module", "")

    # sorting: worst cosine first, then the other way round
    page.click(".nbprec-x-table th[data-col='out_cosine'] button")
    assert page.get_attribute(".nbprec-x-table th[data-col='out_cosine']", "aria-sort") == "ascending"
    values = [float(v) for v in _column(page, "out_cosine")]
    assert (
        values == sorted(values)
        and _op_names(page)[0] == comparison.ops.loc[comparison.ops["out_cosine"].idxmin(), "op"]
    )
    page.click(".nbprec-x-table th[data-col='out_cosine'] button")
    values = [float(v) for v in _column(page, "out_cosine")]
    assert values == sorted(values, reverse=True)
    page.click(".nbprec-x-table th[data-col='order'] button")  # back to execution order

    # paging
    first_page = _op_names(page)
    page.click(".nbprec-x-next")
    assert page.inner_text(".nbprec-x-page").startswith("page 2 of")
    second_page = _op_names(page)
    assert len(second_page) == 25 and not set(first_page) & set(second_page)
    page.click(".nbprec-x-prev")
    assert _op_names(page) == first_page

    # a row click inspects that op: precomputed tensor details for a worst op, the op's row for another
    worst = str(comparison.worst_ops(10)["op"].iloc[1])
    page.fill(".nbprec-x-filter-name", worst)
    page.locator(ROWS).filter(has=page.locator(f"td.op[title='{worst}']")).first.click()
    inspector = page.inner_text(".nbprec-x-inspector")
    assert worst in inspector and "statistics" in inspector and "top 10 worst elements" in inspector
    page.fill(".nbprec-x-filter-name", "functional.embedding")
    page.locator(ROWS).first.click()
    assert "Functional.embedding.0.forward" in page.inner_text(".nbprec-x-inspector")
    assert "precomputed for the culprit" in page.inner_text(".nbprec-x-inspector")

    # a trend point selects its op and reveals its row (filters are cleared when they hide it)
    dot = page.locator(".nbprec-x-trend circle.fail").last
    op = dot.get_attribute("data-pos")
    dot.click()
    assert page.locator(f"{ROWS}.selected").get_attribute("data-pos") == op
    assert page.locator(".nbprec-x-trend line.mark.selected").count() == 1

    # go to first failing op
    page.click(".nbprec-x-goto-first")
    assert page.locator(f"{ROWS}.selected td.op").get_attribute("title") == str(comparison.first_failing_op()["op"])

    # a graph node click selects its op in the explorer
    if tiny_report.offline_widgets:
        bs.wait_until(page, "() => document.querySelector('.nbprec-explorer').dataset.graph === 'linked'")
        node = page.evaluate(
            "() => { const d = [...document.querySelectorAll('div')].find(e => e._cyreg && e._cyreg.cy);"
            " d.scrollIntoView(); const cy = d._cyreg.cy;"
            " const n = cy.nodes().filter(x => !x.hasClass('expanded') && x.id() !== 'Functional.gelu.1.forward')[0];"
            " const p = n.renderedPosition(), r = d.getBoundingClientRect();"
            " return {id: n.id(), x: r.left + p.x, y: r.top + p.y}; }"
        )
        page.mouse.click(node["x"], node["y"])
        bs.wait_until(page, "() => document.querySelector('.nbprec-x-table tr.selected') !== null", 10_000)
        assert node["id"] in page.inner_text(".nbprec-x-inspector")

    assert page.errors == [] and page.dialogs == []
    assert not context.blocked, f"the report tried the network: {context.blocked[:5]}"
    bs.screenshot(page, "report_controls.png")
    page.close()


def test_hostile_op_name_is_text(context, hostile_pair, tmp_path_factory):
    from nbprec.report import write_report

    report = write_report(*hostile_pair, tmp_path_factory.mktemp("hostile") / "report.html")
    page = _open(context, report.html)
    page.fill(".nbprec-x-filter-name", "onerror")
    page.locator(ROWS).first.click()
    page.wait_for_timeout(500)  # let any injected handler fire
    assert page.dialogs == [] and page.errors == []
    assert page.locator("img[src=x]").count() == 0
    assert _op_names(page) == [HOSTILE_OP]  # shown literally, as text
    assert HOSTILE_OP in page.inner_text(".nbprec-x-inspector")
    for bad in bs.WIDGET_ERRORS:
        assert bad not in page.inner_text("body")
    bs.screenshot(page, "report_hostile.png")
    page.close()
