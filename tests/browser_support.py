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
    """A Chromium browser for a test module's fixture (playwright's sync API allows one driver at a time)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=list(ARGS))
        yield browser
        browser.close()
