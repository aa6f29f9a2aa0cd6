"""Binder: a fresh virtualenv built only from binder/ files runs postBuild and the quickstart notebook.

Mirrors what repo2docker does: ``pip install -r binder/requirements.txt`` from the repository root, then
``binder/postBuild``. Works on a copy of the repository's files (git ls-files), so the work tree is untouched.
Slow (a few minutes: it installs torch, TensorFlow, JupyterLab, the widget libraries and nbprec).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_binder_environment_runs_the_quickstart(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git work tree to copy the repository's files")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()  # fmt: skip
    repo = tmp_path / "repo"
    for name in files:
        src = ROOT / name
        if src.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / name)
    venv = tmp_path / "venv"
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(venv),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "HOME": os.environ.get("HOME", str(tmp_path))}  # fmt: skip
    env.pop("PYTHONPATH", None)
    py = str(venv / "bin" / "python")
    # --no-compile: byte-compiling every installed module (torch, TensorFlow, transformers) is most of the
    # install's time (224 against 128 s here) and tests nothing of Binder's; what runs compiles on import
    _run([py, "-m", "pip", "install", "-q", "--no-compile", "-r", "binder/requirements.txt"], repo, env, 900)
    installed = time.monotonic() - start
    out = _run(["bash", "binder/postBuild"], repo, env, 600)
    assert "demo report:" in out and (repo / "demo-output" / "report.html").is_file()
    # the quickstart, executed by the Binder environment's own Python and kernel
    code = (
        "import nbformat, nbclient\n"
        "nb = nbformat.read('notebooks/01-quickstart.ipynb', as_version=4)\n"
        "nbclient.NotebookClient(nb, timeout=600, kernel_name='python3').execute(cwd='notebooks')\n"
        "print('quickstart ok')"
    )
    assert "quickstart ok" in _run([py, "-c", code], repo, env, 600)
    assert "jupyterlab" in _run([py, "-m", "pip", "list"], repo, env, 120).lower()
    print(f"binder: install {installed:.0f} s, total {time.monotonic() - start:.0f} s")
