"""Shared real-browser helpers: Debian Chromium driven by Python playwright (see ../shared docs, BROWSER.md).

Test modules ``import browser_support`` (pytest puts ``tests/`` on the path, see pyproject.toml).
Never runs ``playwright install``: the browser is ``/usr/bin/chromium``
(``apt-get install -y chromium``); tests skip with that hint when it is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
TIMEOUT_MS = 90_000
#: Text that must never appear on a page whose widgets rendered.
WIDGET_ERRORS = ("Error displaying widget", "Loading widget", "Traceback")
#: JavaScript: a predicate over the page, true once cytoscape drew a graph with nodes.
CYTOSCAPE_NODES_JS = (
    "() => { const d = [...document.querySelectorAll('div')].find(e => e._cyreg && e._cyreg.cy);"
    " return d ? d._cyreg.cy.nodes().length : 0; }"
)

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian Chromium at /usr/bin/chromium (apt-get install -y chromium)"
)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def chromium(viewport: tuple[int, int] = (1400, 1000)) -> Iterator[Any]:
    """A fresh browser context (Debian Chromium, headless) for one test module; closed on exit."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=list(ARGS))
        try:
            context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
            yield context
        finally:
            browser.close()


def block_network(context: Any, allow_hosts: tuple[str, ...] = ()) -> list[str]:
    """Abort every request except ``file://``, ``data:`` and ``allow_hosts``; returns the list of blocked URLs."""
    blocked: list[str] = []

    def route(r: Any) -> None:
        url = r.request.url
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme in ("file", "data", "blob") or parsed.hostname in allow_hosts:
            r.continue_()
        else:
            blocked.append(url)
            r.abort()

    context.route("**/*", route)
    return blocked


def wait_until(page: Any, predicate_js: str, timeout_ms: int = TIMEOUT_MS) -> float:
    """Wait for a JavaScript predicate over the page; returns the seconds waited."""
    start = time.monotonic()
    page.wait_for_function(predicate_js, timeout=timeout_ms)
    return time.monotonic() - start


def screenshot(page: Any, name: str, full_page: bool = True) -> Path:
    """Save a screenshot under ``tests/artifacts/`` (gitignored) and return its path."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=full_page)
    return path


VOILA_LOGS: dict[str, Path] = {}  # URL -> Voila's log, printed when a page times out


def serve_voila(notebook: Path, home: Path):
    """Voila serving ``notebook`` on 127.0.0.1 with its own config/runtime dirs: yields the URL."""
    pytest.importorskip("voila")
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "IPYTHONDIR": str(home / "ipython"),
    }
    port = free_port()
    voila = shutil.which("voila", path=str(Path(sys.executable).parent)) or "voila"
    cmd = [voila, str(notebook), "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1",
           "--ServerApp.port_retries=0", "--VoilaConfiguration.show_tracebacks=True"]  # fmt: skip
    log = (home / "voila.log").open("w")
    proc = subprocess.Popen(cmd, cwd=notebook.parent, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    VOILA_LOGS[url] = home / "voila.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # up when it accepts a connection: a GET would run the notebook
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            break
        except OSError:
            time.sleep(0.3)
    yield url
    proc.terminate()
    proc.wait(timeout=20)
    log.close()


def module_browser() -> Iterator[Any]:
    """A Chromium browser for a test module's fixture (playwright's sync API allows one driver at a time); the
    tests that take it are skipped, with the reason, where Debian's Chromium is not installed."""
    if not CHROMIUM.exists():
        pytest.skip(needs_chromium.kwargs["reason"])
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=list(ARGS))
        yield browser
        browser.close()


def code_notebook(cells: list[str]) -> Any:
    """A notebook (``nbformat``) of code ``cells`` with the python3 kernel."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def write_notebook(path: Path, cells: list[str]) -> Path:
    """A notebook of code ``cells`` with the python3 kernel, written at ``path`` (for :func:`serve_voila`)."""
    import nbformat

    nbformat.write(code_notebook(cells), path)
    return path


def model_graph_cells(n_ops: int, bench: Path, failing_order: int) -> list[str]:
    """Notebook cells drawing the whole-model graph of an ``n_ops``-op synthetic comparison (``bench/widgets.py``)
    with four module levels (stage, block, layer, sub) and op ``failing_order`` failing, plus a button that selects
    that op (a selection made elsewhere)."""
    op = f"Functional.op.{failing_order}.forward"
    return [
        f"import sys; sys.path.insert(0, {str(bench)!r})\n"
        "from widgets import synthetic_comparison\n"
        "from nbprec.compare import Comparison\n"
        "from nbprec.widgets.model import OpsModel, Selection\n"
        "from nbprec.widgets.subgraph import SubgraphView\n"
        f"comp = synthetic_comparison({n_ops})\n"
        "k = comp.table['order'].to_numpy()  # four module levels: stage, block, layer, sub\n"
        "comp.table['module'] = ['model.stage%d.block%d.layer%d.sub%d' % t for t in\n"
        "    zip(k // 25000, k // 2500 % 10, k // 250 % 10, k // 25 % 10)]\n"
        f"comp.table.loc[comp.table['order'] == {failing_order}, 'cosine'] = 0.2  # one clearly failing op\n"
        "comp = Comparison(comp.table, rule=comp.rule, meta=comp.meta)\n"
        "model = OpsModel(comp)\n"
        "selection = Selection()\n"
        "view = SubgraphView(model, selection)",
        "view",
        "import ipywidgets as w\n"
        f"pick = w.Button(description='select op {failing_order}')\n"
        f"pick.on_click(lambda _: selection.select({op!r}))\n"
        "pick",
    ]


#: JavaScript: the page point to click on graph node ``id`` (an open block: inside its top left corner, where no
#: edge passes; any other node: its middle), after panning it into view when it is off the canvas.
GRAPH_NODE_POINT_JS = """(id) => {
    const div = [...document.querySelectorAll('div')].find(d => d._cyreg && d._cyreg.cy);
    div.scrollIntoView();
    const cy = div._cyreg.cy;
    const node = cy.getElementById(id);
    const at = () => {
        const box = node.renderedBoundingBox({includeLabels: false});
        const middle = {x: (box.x1 + box.x2) / 2, y: (box.y1 + box.y2) / 2};
        return node.isParent() || node.hasClass('expanded') ? {x: box.x1 + 5, y: box.y1 + 5} : middle;
    };
    let p = at();
    if (p.x < 0 || p.y < 0 || p.x > cy.width() || p.y > cy.height()) {
        cy.panBy({x: cy.width() / 2 - p.x, y: cy.height() / 2 - p.y});
        p = at();
    }
    const r = div.getBoundingClientRect();
    return {x: r.left + p.x, y: r.top + p.y};
}"""


def click_graph_node(page: Any, node_id: str) -> None:
    """Click the cytoscape graph's node ``node_id`` with the mouse, as a user would."""
    point = page.evaluate(GRAPH_NODE_POINT_JS, node_id)
    page.mouse.click(point["x"], point["y"])
