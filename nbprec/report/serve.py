"""The explore dashboard as a standalone web page: Voila serving a generated notebook on 127.0.0.1.

``nbprec serve TARGET BENCH`` calls :func:`serve`, prints the URL and waits. The notebook holds two code
cells: the parameters (paths as Python literals) and ``nbprec.explore(...)``; Voila runs it in a kernel and
shows only the outputs, so the page is the live dashboard with no code. Voila runs with nbprec's page template
(``templates/nbprec_serve``, copied into Voila's template path): Voila's lab page without its Font Awesome
links to a CDN, so the page requests nothing from outside the machine.

The dashboard is prepared before anyone asks for it (``preheat``, the default): Voila starts a kernel as soon
as it starts and runs the notebook in it, so that opening the page costs only the browser's part, not the
kernel's start, the imports and the comparison. The notebook then creates :data:`READY_FILE` in the server's
folder (:meth:`DashboardServer.wait_ready`). Each page takes the prepared kernel; :data:`REFILL_SECONDS` later
Voila starts the next one, so that a page opened after that is ready too. Only the first kernel compares the
dumps: it saves the comparison in :data:`SAVED_FOLDER`, which the next kernels load.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbprec._optional import require
from nbprec.report.notebook import KERNEL, ReportError, parameters_source, strip_ansi

#: nbprec's Voila template: Voila's lab page without Font Awesome from a CDN (Voila serves its own copy).
TEMPLATE = "nbprec_serve"
TEMPLATE_DIR = Path(__file__).resolve().parent / "templates" / TEMPLATE
#: The file the dashboard notebook creates in the server's folder once its dashboard cell has run.
READY_FILE = "dashboard-ready"
#: The folder, beside the notebook, of the comparison the first kernel made (:meth:`Comparison.save`): every
#: later page loads it rather than comparing the dumps again, so all pages show the dumps as first compared.
SAVED_FOLDER = "comparison"
#: Seconds Voila waits, after a page took the prepared kernel, before it starts the next one: long enough for
#: that page to draw without the next kernel's start competing for the processor.
REFILL_SECONDS = 5.0


def _install_template(home: Path) -> Path:
    """Copy nbprec's Voila template into ``home/jupyter-data/voila/templates/`` and return ``home/jupyter-data``
    (a folder for ``JUPYTER_PATH``)."""
    data = home / "jupyter-data"
    shutil.copytree(TEMPLATE_DIR, data / "voila" / "templates" / TEMPLATE, dirs_exist_ok=True)
    return data


_EXPLORE = """\
import os
import shutil

import nbprec


def _prepared(problem=""):  # DashboardServer.wait_ready returns, and .problem says what went wrong
    with open(READY + ".part", "w", encoding="utf-8") as part:
        part.write(problem)
    os.replace(READY + ".part", READY)


def _comparison():  # the first kernel compares and saves; the next ones (a reload, a new tab) load that
    if os.path.isfile(os.path.join(SAVED, "comparison.json")):
        try:
            saved = nbprec.Comparison.load(SAVED)
        except (nbprec.NbprecError, OSError, ValueError):  # damaged: compare again
            saved = None
        if saved is not None and (saved.meta.get("target"), saved.meta.get("bench")) == (TARGET, BENCH):
            return saved
    comparison = nbprec.compare(TARGET, BENCH, rule=RULE)
    part = f"{SAVED}.part{os.getpid()}"
    try:
        os.replace(comparison.save(part), SAVED)
    except OSError:  # another kernel saved it first, or no room: this one is not kept
        shutil.rmtree(part, ignore_errors=True)
    return comparison


try:
    dash = nbprec.explore(_comparison(), target=TARGET, bench=BENCH)
except BaseException as exc:  # the page shows the traceback
    _prepared(f"{type(exc).__name__}: {exc}")
    raise
_prepared()
dash"""


def write_dashboard_notebook(
    path: str | os.PathLike[str], target: str | os.PathLike[str], bench: str | os.PathLike[str], rule: str = "default"
) -> Path:
    """Write the dashboard notebook (parameters cell, then ``nbprec.explore``) to ``path``; it creates
    :data:`READY_FILE` beside itself once the dashboard is built, and saves its comparison in
    :data:`SAVED_FOLDER` there (or loads it, when an earlier kernel saved it)."""
    nbformat = require("nbformat", "nbprec serve", extra="report")
    v4 = nbformat.v4
    path = Path(path)
    home = path.resolve().parent
    params = {"target": str(Path(target).resolve()), "bench": str(Path(bench).resolve()), "rule": rule,
              "ready": str(home / READY_FILE), "saved": str(home / SAVED_FOLDER)}  # fmt: skip
    cell = v4.new_code_cell(parameters_source(params))
    cell.metadata["tags"] = ["parameters"]
    nb = v4.new_notebook(cells=[cell, v4.new_code_cell(_EXPLORE)])
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class DashboardServer:
    """A running Voila server: its URL, process, notebook and log. Use as a context manager, or :meth:`stop`.

    ``preheat``: whether Voila prepares the page before it is asked for (see the module's text)."""

    url: str
    process: subprocess.Popen
    notebook: Path
    log: Path
    _tmp: Any = None
    preheat: bool = False

    @property
    def ready_file(self) -> Path:
        """The file the notebook creates once its dashboard is built (:data:`READY_FILE`, beside the notebook)."""
        return self.notebook.parent / READY_FILE

    @property
    def problem(self) -> str | None:
        """Why the notebook could not build the dashboard (the exception, as the page shows it); None while it
        is not done or when it succeeded."""
        try:
            text = self.ready_file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        return text.strip() or None

    def wait_ready(self, timeout: float | None = None, poll: float = 0.1) -> bool:
        """Wait until the notebook has built the dashboard (with ``preheat``, before any page asks for it), or
        failed to (:attr:`problem` says why): True once :attr:`ready_file` exists, False after ``timeout``
        seconds (None: no limit) or when Voila exited."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.ready_file.exists():
            if self.process.poll() is not None or (deadline is not None and time.monotonic() >= deadline):
                return False
            time.sleep(poll)
        return True

    def stop(self, timeout: float = 20) -> None:
        """Stop Voila (terminate, then kill after ``timeout`` seconds) and remove its temporary folder."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> DashboardServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(
    target: str | os.PathLike[str],
    bench: str | os.PathLike[str],
    *,
    port: int | None = None,
    rule: str = "default",
    workdir: str | os.PathLike[str] | None = None,
    ready_timeout: float = 60,
    preheat: bool = True,
    refill_seconds: float = REFILL_SECONDS,
) -> DashboardServer:
    """Start Voila on 127.0.0.1 serving the explore dashboard of ``target`` against ``bench``.

    Parameters
    ----------
    target, bench
        The two dumps.
    port
        TCP port (a free one by default).
    rule
        Comparison rule preset.
    workdir
        Folder for the generated notebook, Voila's Jupyter dirs and log (a temporary folder by default,
        removed by :meth:`DashboardServer.stop`).
    ready_timeout
        Seconds to wait for the server to answer.
    preheat
        Prepare the dashboard now, in a kernel started ahead, so that opening the page does not wait for a
        kernel and the comparison (:meth:`DashboardServer.wait_ready` says when it is done). False: each page
        starts its kernel and computes the dashboard when it is opened.
    refill_seconds
        With ``preheat``: seconds after a page took the prepared kernel before Voila prepares the next one.

    Returns
    -------
    DashboardServer
        Open ``.url`` in a browser.

    Raises
    ------
    ReportError
        A dump is missing, Voila is not installed, or it did not start (the message quotes its log).
    """
    for label, path in (("target", target), ("benchmark", bench)):
        if not Path(path).exists():
            raise ReportError(f"{path}: the {label} dump does not exist")
    require("voila", "nbprec serve", extra="report")
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="nbprec-serve-")
        workdir = tmp.name
    home = Path(workdir)
    nb = write_dashboard_notebook(home / "nbprec-dashboard.ipynb", target, bench, rule=rule)
    return start_voila(nb, port=port, ready_timeout=ready_timeout, preheat=preheat, refill_seconds=refill_seconds,
                       tmp=tmp)  # fmt: skip


def clear_prepared(home: Path) -> None:
    """Remove what an earlier server's notebook left in ``home`` (its ready file, its saved comparison and any
    half-written one), so that a new server in the same folder neither reports ready early nor loads another
    pair's comparison."""
    (home / READY_FILE).unlink(missing_ok=True)
    for folder in (home / SAVED_FOLDER, *home.glob(f"{SAVED_FOLDER}.part*")):
        shutil.rmtree(folder, ignore_errors=True)


def voila_command(
    notebook: Path, port: int, *, preheat: bool = True, refill_seconds: float = REFILL_SECONDS
) -> list[str]:
    """The command line that runs Voila on ``notebook`` as :func:`serve` does (nbprec's template, 127.0.0.1)."""
    if refill_seconds < 0:
        raise ValueError(f"refill_seconds must be >= 0, not {refill_seconds}")
    # Voila's own command, through nbprec's launcher: the same, a second sooner (nbprec._deferred_imports)
    cmd = [sys.executable, "-m", "nbprec._voila", str(notebook), "--no-browser", f"--port={port}",
           "--Voila.ip=127.0.0.1", f"--template={TEMPLATE}", "--ServerApp.port_retries=0",
           "--VoilaConfiguration.show_tracebacks=True"]  # fmt: skip
    if preheat:  # a pool of one kernel, which runs the notebook as soon as it starts
        cmd += ["--VoilaConfiguration.preheat_kernel=True", "--VoilaConfiguration.default_pool_size=1",
                f"--VoilaKernelManager.fill_delay={refill_seconds:g}"]  # fmt: skip
    return cmd


def start_voila(
    notebook: str | os.PathLike[str],
    *,
    port: int | None = None,
    ready_timeout: float = 60,
    preheat: bool = True,
    refill_seconds: float = REFILL_SECONDS,
    tmp: Any = None,
) -> DashboardServer:
    """Run Voila on ``notebook`` (any notebook: :func:`serve` passes the dashboard's) as :func:`serve` does, its
    Jupyter folders and log beside it; returns once it accepts connections. A notebook that creates
    :data:`READY_FILE` beside itself when its dashboard is built lets :meth:`DashboardServer.wait_ready` work.
    ``tmp``: a temporary folder the server removes when stopped."""
    notebook = Path(notebook)
    home = notebook.parent
    clear_prepared(home)
    port = port or free_port()
    cmd = voila_command(notebook, port, preheat=preheat, refill_seconds=refill_seconds)
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(home / "jupyter-config"),
        "JUPYTER_RUNTIME_DIR": str(home / "jupyter-runtime"),
        # nbprec's Voila template, copied where Voila looks for templates: <JUPYTER_PATH>/voila/templates/<name>
        "JUPYTER_PATH": os.pathsep.join(p for p in (str(_install_template(home)), os.environ.get("JUPYTER_PATH")) if p),
    }
    log = home / "voila.log"
    with log.open("w") as handle:
        proc = subprocess.Popen(cmd, cwd=home, env=env, stdout=handle, stderr=subprocess.STDOUT)
    server = DashboardServer(f"http://127.0.0.1:{port}/", proc, notebook, log, tmp, preheat)
    try:
        _wait_until_serving(server, port, ready_timeout)
    except BaseException:  # not started, or interrupted while starting: never leave Voila running
        server.stop()
        raise
    return server


def _wait_until_serving(server: DashboardServer, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            text = strip_ansi(server.log.read_text(errors="replace"))[-1500:]
            raise ReportError(
                f"voila exited with status {server.process.returncode} before serving {server.notebook}:\n{text}"
            )
        try:  # a TCP connection, not a page request (which would make Voila run the notebook)
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise ReportError(f"voila did not answer on {server.url} within {timeout:.0f} s (log: {server.log})")
