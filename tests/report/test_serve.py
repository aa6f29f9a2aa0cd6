"""nbprec serve: Voila serves the explore dashboard on 127.0.0.1; Chromium renders every view.

By default the dashboard is prepared ahead (Voila's preheated kernel): the notebook runs when Voila starts, the
page takes that kernel, and Voila prepares the next one for the next page. ``preheat=False`` computes it when
a page is opened.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import browser_support as bs
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow, bs.needs_chromium]

#: The dashboard's views drawn: the subgraph's nodes, the trend's dots and the table's canvas.
_DRAWN_JS = (
    f"() => ({bs.CYTOSCAPE_NODES_JS})() > 0 && document.querySelectorAll('.dot').length > 0"
    " && document.querySelector('.lm-DataGrid canvas, .p-DataGrid canvas')"
)


def _open_dashboard(ctx, url: str) -> tuple[object, float]:
    """A page of the dashboard with every view drawn, and the seconds it took."""
    page = ctx.new_page()
    start = time.monotonic()
    page.goto(url, timeout=bs.TIMEOUT_MS)
    bs.wait_until(page, _DRAWN_JS)
    seconds = time.monotonic() - start
    text = page.inner_text("body")
    for bad in bs.WIDGET_ERRORS:
        assert bad not in text
    assert "Functional.gelu.1.forward" in text  # the culprit is selected
    assert "import nbprec" not in text  # a page, not a notebook: no code shown
    return page, seconds


def test_serve_renders_the_dashboard_prepared_ahead(tiny_pair, tmp_path):
    pytest.importorskip("voila")
    from nbprec.report import serve
    from nbprec.report.serve import SAVED_FOLDER

    with serve(*tiny_pair, workdir=tmp_path, refill_seconds=0.5) as server, bs.chromium() as ctx:
        assert server.url.startswith("http://127.0.0.1:")
        assert server.preheat
        # the comparison ran before any page asked for it
        assert server.wait_ready(timeout=180), server.log.read_text()[-2000:]
        assert (tmp_path / SAVED_FOLDER / "comparison.json").is_file()  # for the next kernels
        blocked = bs.block_network(ctx, allow_hosts=("127.0.0.1",))
        page, seconds = _open_dashboard(ctx, server.url)
        # nothing leaves the machine: not even Font Awesome, which Voila's lab page links from a CDN
        assert blocked == [], blocked
        # ... yet icons work: Voila serves its own Font Awesome, loaded here from the local server
        faces = page.evaluate("async () => (await document.fonts.load('900 12px \"Font Awesome 5 Free\"')).length")
        assert faces >= 1 and blocked == [], blocked
        bs.screenshot(page, "serve.png")
        log = server.log.read_text()
        assert log.count("Using pre-heated kernel") == 1, log[-2000:]
        # the next page takes the kernel Voila prepared after the first one took its own
        deadline = time.monotonic() + 120
        while log.count("Kernel pool of") < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            log = server.log.read_text()
        _page, again = _open_dashboard(ctx, server.url)
        assert server.log.read_text().count("Using pre-heated kernel") == 2
        print(f"nbprec serve: dashboard prepared ahead, drawn in {seconds:.1f} s, again in {again:.1f} s")
    assert server.process.poll() is not None  # stopped


def test_serve_without_preheat_computes_when_the_page_opens(tiny_pair, tmp_path):
    pytest.importorskip("voila")
    from nbprec.report import serve

    with serve(*tiny_pair, workdir=tmp_path, preheat=False) as server, bs.chromium() as ctx:
        assert not server.preheat
        assert not server.wait_ready(timeout=3)  # no kernel runs until a page asks
        _open_dashboard(ctx, server.url)
        assert server.ready_file.exists()
        assert "pre-heated" not in server.log.read_text()


def test_serve_says_why_the_dashboard_could_not_be_built(tiny_pair, tmp_path):
    """A benchmark folder with no dump in it: the prepared kernel fails, the server says why, the page shows it."""
    pytest.importorskip("voila")
    from nbprec.report import serve

    empty = tmp_path / "no dump here"
    empty.mkdir()
    with serve(tiny_pair[0], empty, workdir=tmp_path / "server") as server, bs.chromium() as ctx:
        assert server.wait_ready(timeout=180), server.log.read_text()[-2000:]
        assert server.problem is not None
        assert server.problem.startswith("EmptyDumpError: ") and "no dump in it" in server.problem
        page = ctx.new_page()
        page.goto(server.url, timeout=bs.TIMEOUT_MS)
        page.wait_for_selector("text=EmptyDumpError", timeout=bs.TIMEOUT_MS)


def test_voila_command_preheat_options(tmp_path):
    from nbprec.report.serve import voila_command

    nb = tmp_path / "d.ipynb"
    hot = voila_command(nb, 8123, refill_seconds=2.5)
    assert "--VoilaConfiguration.preheat_kernel=True" in hot
    assert "--VoilaKernelManager.fill_delay=2.5" in hot
    cold = voila_command(nb, 8123, preheat=False)
    assert not any(a.startswith(("--VoilaConfiguration.preheat", "--VoilaKernelManager")) for a in cold)
    assert "--port=8123" in cold and str(nb) in cold and "--Voila.ip=127.0.0.1" in cold
    with pytest.raises(ValueError, match="refill_seconds"):
        voila_command(nb, 8123, refill_seconds=-1)


def test_cli_serve_prints_the_url_then_ready(tiny_pair, tmp_path):
    """The command prints the URL, says when the dashboard is prepared, and keeps serving until stopped."""
    port = bs.free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nbprec", "serve", str(tiny_pair[0]), str(tiny_pair[1]), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in line, line
        assert "preparing the dashboard" in proc.stdout.readline()
        ready = proc.stdout.readline()  # blocks until the kernel has built the dashboard
        assert ready.startswith("dashboard ready (") and f"open http://127.0.0.1:{port}/" in ready, ready
        assert proc.poll() is None
    finally:
        proc.terminate()  # SIGTERM, as kill or systemd would send
        proc.wait(timeout=30)
    # Voila went with it: nothing listens on the port any more
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_cli_serve_says_when_the_dashboard_failed(tiny_pair, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nbprec", "serve", str(tiny_pair[0]), str(empty)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert "nbprec dashboard: http://127.0.0.1:" in proc.stdout.readline()
        assert "preparing the dashboard" in proc.stdout.readline()
        failed = proc.stdout.readline()
        assert failed.startswith("nbprec: the dashboard could not be built (") and "EmptyDumpError" in failed, failed
        assert str(empty) in failed and "the page shows the traceback" in failed
        assert proc.poll() is None  # still serving: the page shows the traceback
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_cli_serve_no_preheat_prints_only_the_url(tiny_pair, tmp_path):
    port = bs.free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nbprec", "serve", str(tiny_pair[0]), str(tiny_pair[1]), "--port", str(port),
         "--no-preheat"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert f"http://127.0.0.1:{port}/" in proc.stdout.readline()
        time.sleep(1)
        assert proc.poll() is None
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "preparing" not in out and "ready" not in out, out


def _run_dashboard_cells(notebook) -> dict:
    """Run the dashboard notebook's code cells here, as a kernel would; their namespace."""
    import nbformat

    namespace: dict = {}
    for cell in nbformat.read(notebook, as_version=4).cells:
        exec(compile(cell.source, str(notebook), "exec"), namespace)
    return namespace


@pytest.mark.parametrize("damage", [False, True])
def test_later_kernels_load_the_first_comparison(tiny_pair, tmp_path, monkeypatch, damage):
    """The notebook's first run compares and saves; a later one (Voila's next prepared kernel, a reload) loads
    that comparison instead of comparing again, unless it is damaged."""
    pytest.importorskip("ipywidgets")
    import nbprec
    from nbprec.report.serve import READY_FILE, SAVED_FOLDER, write_dashboard_notebook

    notebook = write_dashboard_notebook(tmp_path / "dashboard.ipynb", *tiny_pair)
    first = _run_dashboard_cells(notebook)["dash"].comparison
    saved = tmp_path / SAVED_FOLDER
    assert (saved / "comparison.json").is_file() and (tmp_path / READY_FILE).read_text() == ""
    assert not list(tmp_path.glob(f"{SAVED_FOLDER}.part*"))
    calls = []
    compare = nbprec.compare
    monkeypatch.setattr(nbprec, "compare", lambda *a, **k: calls.append(a) or compare(*a, **k))
    if damage:
        (saved / "comparison.json").write_text("{not json")
    (tmp_path / READY_FILE).unlink()
    again = _run_dashboard_cells(notebook)["dash"].comparison
    assert len(calls) == int(damage)
    assert (tmp_path / READY_FILE).exists()
    assert again.table["target_name"].tolist() == first.table["target_name"].tolist()
    assert again.table["cosine"].tolist() == pytest.approx(first.table["cosine"].tolist(), nan_ok=True)
    assert again.first_failing_op()["op"] == first.first_failing_op()["op"] == "Functional.gelu.1.forward"


def test_a_new_server_clears_what_an_earlier_one_prepared(tiny_pair, tmp_path):
    """A workdir used again (for another pair, say): the ready file and the saved comparisons are removed
    before Voila starts, and a saved comparison of other dumps is never loaded."""
    pytest.importorskip("ipywidgets")
    from nbprec.report.serve import READY_FILE, SAVED_FOLDER, clear_prepared, write_dashboard_notebook

    first = write_dashboard_notebook(tmp_path / "dashboard.ipynb", *tiny_pair)
    _run_dashboard_cells(first)
    (tmp_path / f"{SAVED_FOLDER}.part123").mkdir()
    swapped = write_dashboard_notebook(tmp_path / "dashboard.ipynb", tiny_pair[1], tiny_pair[0])  # other pair
    comparison = _run_dashboard_cells(swapped)["dash"].comparison
    assert comparison.meta["target"] == str(tiny_pair[1].resolve())  # compared again, not loaded
    clear_prepared(tmp_path)
    assert not (tmp_path / READY_FILE).exists() and not (tmp_path / SAVED_FOLDER).exists()
    assert not list(tmp_path.glob(f"{SAVED_FOLDER}.part*"))
