"""Real browser: Voila serves the demo notebook, Debian Chromium (driven by playwright) renders and clicks it.

Needs ``/usr/bin/chromium`` (``apt-get install -y chromium``) and the ``playwright``/``voila`` packages; the
tests skip with the reason otherwise. Screenshots go to ``tests/artifacts/`` (gitignored).
"""

from __future__ import annotations

import time

import browser_support as bs
import pytest

pytestmark = [pytest.mark.browser, bs.needs_chromium]


@pytest.fixture(scope="module")
def voila_url(demo_notebook, tmp_path_factory):
    """Voila serving the demo notebook."""
    yield from bs.serve_voila(demo_notebook, tmp_path_factory.mktemp("jupyter"))


@pytest.fixture(scope="module")
def page(voila_url, browser):
    """The rendered dashboard page (all widgets drawn)."""
    pg = browser.new_page(viewport={"width": 1500, "height": 1000})
    start = time.monotonic()
    pg.goto(voila_url, timeout=bs.TIMEOUT_MS)
    pg.wait_for_function(
        "() => [...document.querySelectorAll('div')].some(d => d._cyreg && d._cyreg.cy"
        " && d._cyreg.cy.nodes().length)"
        " && document.querySelectorAll('.dot').length > 0"
        " && document.querySelector('.lm-DataGrid canvas, .p-DataGrid canvas')"
        " && document.querySelector('.nbprec-selected')",
        timeout=bs.TIMEOUT_MS,
    )
    pg.render_seconds = time.monotonic() - start
    yield pg
    pg.close()


def _selected_text(pg) -> str:
    return pg.locator(".nbprec-selected").first.inner_text()


def test_dashboard_renders_every_view(page):
    text = page.inner_text("body")
    for bad in ("Error displaying widget", "Loading widget", "Traceback"):
        assert bad not in text
    assert "Functional.gelu.1.forward" in _selected_text(page)  # the planted fault is selected at open
    grid = page.locator(".lm-DataGrid, .p-DataGrid").first.bounding_box()
    assert grid["width"] > 300 and grid["height"] > 200
    nodes = page.evaluate(
        "() => [...document.querySelectorAll('div')].find(d => d._cyreg && d._cyreg.cy)._cyreg.cy.nodes().length"
    )
    assert 0 < nodes <= 300
    assert page.locator(".dot").count() > 10  # the trend's points
    assert page.locator(".bargroup rect").count() == 0  # the tensor plots wait for their tab
    page.locator(".lm-TabBar-tab", has_text="Tensor plots").click()
    page.wait_for_selector(".nbprec-plotted", timeout=bs.TIMEOUT_MS)
    page.wait_for_function("() => document.querySelectorAll('.bargroup rect').length > 0", timeout=bs.TIMEOUT_MS)
    assert "Functional.gelu.1.forward" in page.locator(".nbprec-plotted").inner_text()  # the inspector's tensor
    heights = page.evaluate(
        "() => [...document.querySelectorAll('.bargroup rect')].map(r => parseFloat(r.getAttribute('height')))"
    )
    assert any(h > 0 for h in heights), "histogram bars are drawn with no height"
    bs.ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(bs.ARTIFACTS / "dashboard.png"), full_page=True)
    page.locator(".lm-TabBar-tab", has_text="Tensor inspector").click()  # as the next tests expect it
    print(f"dashboard rendered in {page.render_seconds:.1f} s")


def test_clicking_a_table_row_updates_the_inspector(page):
    grid = page.locator(".lm-DataGrid, .p-DataGrid").first
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    # row 3 of the first page (rows of 22 px below a 20 px header): the 4th op in execution order
    page.mouse.click(box["x"] + 250, box["y"] + 20 + 3 * 22 + 11)
    page.wait_for_function(
        "() => !document.querySelector('.nbprec-selected').innerText.includes('gelu.1.forward')", timeout=30_000
    )
    assert "Selected op:" in _selected_text(page)
    page.screenshot(path=str(bs.ARTIFACTS / "after_row_click.png"), full_page=False)


def test_clicking_a_graph_node_updates_the_inspector(page):
    # the graph is redrawn around the op selected by the previous click: wait until it is, and laid out
    page.wait_for_function(
        """() => {
        const div = [...document.querySelectorAll('div')].find(d => d._cyreg && d._cyreg.cy);
        const sel = document.querySelector('.nbprec-selected').innerText;
        const centre = div._cyreg.cy.nodes('.selected');
        return centre.length && sel.includes(centre[0].data('op') || centre[0].id());
    }""",
        timeout=30_000,
    )
    info = _node_to_click(page)
    for _ in range(20):  # positions settle once the preset layout and fit have run
        page.wait_for_timeout(250)
        again = _node_to_click(page)
        if again == info:
            break
        info = again
    page.mouse.click(info["x"], info["y"])
    page.wait_for_function(
        "(op) => document.querySelector('.nbprec-selected').innerText.includes(op)", arg=info["op"], timeout=30_000
    )
    clip = page.locator(".nbprec-selected").first.bounding_box()
    page.screenshot(path=str(bs.ARTIFACTS / "after_node_click.png"), clip={"x": 0, "y": max(clip["y"] - 40, 0),
                    "width": 1500, "height": 900})  # fmt: skip


def _node_to_click(page) -> dict:
    return page.evaluate(
        """() => {
        const div = [...document.querySelectorAll('div')].find(d => d._cyreg && d._cyreg.cy);
        div.scrollIntoView();
        const cy = div._cyreg.cy;
        const r = div.getBoundingClientRect();
        const inside = (n) => { const q = n.renderedPosition();
            return q.x > 10 && q.y > 10 && q.x < r.width - 10 && q.y < r.height - 10; };  // on screen: clickable
        const node = cy.nodes().filter(n => !n.hasClass('selected') && !n.hasClass('block') && inside(n))[0];
        const p = node.renderedPosition();
        return {x: r.left + p.x, y: r.top + p.y, op: node.data('op') || node.data('id')};
    }"""
    )


@pytest.fixture(scope="module")
def npu_url(tmp_path_factory):
    """Voila serving a notebook that compares the NPU demo case (CANN dump + GE graph vs TensorFlow)."""
    folder = tmp_path_factory.mktemp("npu-nb")
    bs.write_notebook(
        folder / "npu.ipynb",
        [
            "import tempfile\nimport nbprec\nfrom nbprec.demo.npu import make_npu_demo\n"
            "case = make_npu_demo(tempfile.mkdtemp(prefix='npu-case-'))  # each page load runs the notebook\n"
            "comp = nbprec.compare(case.npu, case.tf, graph=case.graph)\n"
            "dash = nbprec.explore(comp, target=nbprec.open(case.npu), bench=nbprec.open(case.tf))\n"
            "dash.selection.select('conv2/Conv2D')",
            "dash",
        ],
    )
    yield from bs.serve_voila(folder / "npu.ipynb", tmp_path_factory.mktemp("jupyter-npu"))


def test_npu_dashboard_shows_fusion_records_and_the_ge_graph(npu_url, browser):
    pg = browser.new_page(viewport={"width": 1500, "height": 1000})
    pg.goto(npu_url, timeout=bs.TIMEOUT_MS)
    try:
        pg.wait_for_function(
            "() => document.querySelector('.nbprec-fusion') && [...document.querySelectorAll('div')]"
            ".some(d => d._cyreg && d._cyreg.cy && d._cyreg.cy.nodes().length)",
            timeout=bs.TIMEOUT_MS,
        )
    except Exception:  # keep what the page showed, for the CI log and tests/artifacts/
        bs.ARTIFACTS.mkdir(exist_ok=True)
        pg.screenshot(path=str(bs.ARTIFACTS / "npu_dashboard_timeout.png"), full_page=True)
        print("page text at the timeout:", pg.inner_text("body")[:3000])
        print("Voila's log:", bs.VOILA_LOGS[npu_url].read_text(errors="replace")[-6000:])
        raise
    fusion = pg.locator(".nbprec-fusion").first.inner_text()
    assert "ConvBiasaddReluFusionPass" in fusion and "conv2/Conv2D,conv2/BiasAdd,conv2/Relu" in fusion
    nodes = pg.evaluate(
        "() => [...document.querySelectorAll('div')].find(d => d._cyreg && d._cyreg.cy)._cyreg.cy.nodes()"
        ".map(n => n.data('op') || n.data('id'))"
    )
    assert "conv2/weights" in nodes and "pool1/MaxPool" in nodes  # the GE graph's ops around conv2
    assert "Error displaying widget" not in pg.inner_text("body")
    bs.ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(bs.ARTIFACTS / "npu_dashboard.png"), full_page=True)
    pg.close()
