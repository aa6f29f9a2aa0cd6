"""Shared fixtures: the demo's dumps in a folder, and a real Jupyter server (JupyterLab or Notebook 7) serving it
with nbprec's JupyterLab extension (the shipped nbprec/labextension/) and server extension enabled."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import browser_support as bs
import pytest

REPO = Path(__file__).resolve().parents[2]
LABEXTENSION = REPO / "nbprec" / "labextension"


@pytest.fixture(scope="session")
def demo_root(tmp_path_factory) -> Path:
    """A folder holding ``demo-output/`` (the four tiny demo runs), a folder that is no dump and a text file."""
    pytest.importorskip("torch")
    from nbprec.demo import tiny_runs

    root = tmp_path_factory.mktemp("lab-root")
    tiny_runs(root / "demo-output")
    (root / "demo-output" / "notes").mkdir()
    (root / "demo-output" / "notes" / "todo.txt").write_text("compare bf16 with fp32\n")
    (root / "demo-output" / "README.txt").write_text("the demo runs\n")
    return root


@dataclass
class JupyterServer:
    """A running Jupyter server: its URL (with the base URL), its token and the folder it serves."""

    url: str
    token: str
    root: Path
    home: Path
    log: Path

    def api(self, path: str, method: str = "GET", body: object = None, token: bool = True) -> tuple[int, object]:
        """Call the server's REST API: ``(status, parsed JSON reply)``."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if token:
            request.add_header("Authorization", f"token {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                return reply.status, json.loads(reply.read() or b"null")
        except urllib.error.HTTPError as error:
            text = error.read()
            try:
                return error.code, json.loads(text)
            except ValueError:
                return error.code, text.decode(errors="replace")


def prepare_home(home: Path) -> None:
    """Config, data and runtime folders for one server, with nbprec's extensions enabled.

    The shipped extension is linked into the data folder (the first place JupyterLab looks), and the server
    extension is enabled in the config folder, so the tests see the source tree's build whatever is installed.
    """
    for sub in ("config", "data/labextensions", "runtime", "ipython"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    link = home / "data" / "labextensions" / "jupyterlab-nbprec"
    if not link.exists():
        link.symlink_to(LABEXTENSION, target_is_directory=True)
    config = {"ServerApp": {"jpserver_extensions": {"nbprec": True}}}
    (home / "config" / "jupyter_server_config.json").write_text(json.dumps(config))


@pytest.fixture(scope="session")
def lab(demo_root, tmp_path_factory):
    """JupyterLab serving ``demo_root`` (``--LabApp.expose_app_in_browser``: ``window.jupyterapp``)."""
    yield from _serve("lab", demo_root, tmp_path_factory.mktemp("lab-home"))


@pytest.fixture(scope="session")
def notebook7(demo_root, tmp_path_factory):
    """Notebook 7 serving ``demo_root``."""
    pytest.importorskip("notebook")
    yield from _serve("notebook", demo_root, tmp_path_factory.mktemp("nb7-home"))


def _serve(app: str, root: Path, home: Path):
    """Run ``jupyter lab`` or ``jupyter notebook`` on ``root`` until the session ends; yields the server."""
    prepare_home(home)
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "IPYTHONDIR": str(home / "ipython"),
        "JUPYTER_PLATFORM_DIRS": "0",
    }
    port, token = bs.free_port(), secrets.token_hex(16)
    jupyter = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or "jupyter"
    app_class = "LabApp" if app == "lab" else "JupyterNotebookApp"
    cmd = [
        jupyter, app, "--no-browser", "--ip=127.0.0.1", f"--port={port}", f"--IdentityProvider.token={token}",
        "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}", f"--{app_class}.expose_app_in_browser=True",
        f"--{app_class}.news_url=None",
    ]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = home / f"{app}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
        server = JupyterServer(f"http://127.0.0.1:{port}/", token, root, home, log)
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    pytest.fail(f"jupyter {app} exited: {log.read_text()[-3000:]}")
                try:
                    if server.api("api/status")[0] == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.3)
            else:
                pytest.fail(f"jupyter {app} did not start in 90 s: {log.read_text()[-3000:]}")
            yield server
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
