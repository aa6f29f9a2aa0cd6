"""nbprec serve: Voila serves the explore dashboard on 127.0.0.1; Chromium renders every view."""

from __future__ import annotations

import socket
import time

import browser_support as bs
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, bs.needs_chromium]


def test_serve_renders_the_dashboard(tiny_pair, tmp_path):
    pytest.importorskip("voila")
    from nbprec.report import serve

    with serve(*tiny_pair, workdir=tmp_path) as server, bs.chromium() as ctx:
        assert server.url.startswith("http://127.0.0.1:")
        blocked = bs.block_network(ctx, allow_hosts=("127.0.0.1",))
        page = ctx.new_page()
        start = time.monotonic()
        page.goto(server.url, timeout=bs.TIMEOUT_MS)
        bs.wait_until(
            page,
            f"() => ({bs.CYTOSCAPE_NODES_JS})() > 0 && document.querySelectorAll('.dot').length > 0"
            " && document.querySelector('.lm-DataGrid canvas, .p-DataGrid canvas')",
        )
        seconds = time.monotonic() - start
        text = page.inner_text("body")
        for bad in bs.WIDGET_ERRORS:
            assert bad not in text
        assert "Functional.gelu.1.forward" in text  # the culprit is selected
        assert "import nbprec" not in text  # a page, not a notebook: no code shown
        # nothing leaves the machine: not even Font Awesome, which Voila's lab page links from a CDN
        assert blocked == [], blocked
        # ... yet icons work: Voila serves its own Font Awesome, loaded here from the local server
        faces = page.evaluate("async () => (await document.fonts.load('900 12px \"Font Awesome 5 Free\"')).length")
        assert faces >= 1 and blocked == [], blocked
        bs.screenshot(page, "serve.png")
        print(f"nbprec serve: dashboard rendered in {seconds:.1f} s")
    assert server.process.poll() is not None  # stopped


def test_cli_serve_prints_the_url(tiny_pair, tmp_path):
    """The command prints the URL and keeps serving until stopped."""
    import subprocess
    import sys

    port = bs.free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nbprec", "serve", str(tiny_pair[0]), str(tiny_pair[1]), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in line, line
        assert proc.poll() is None
    finally:
        proc.terminate()  # SIGTERM, as kill or systemd would send
        proc.wait(timeout=30)
    # Voila went with it: nothing listens on the port any more
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
