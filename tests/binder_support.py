"""The Binder environment of tests/notebooks/test_binder.py, built in the background from the session's start.

Mirrors what repo2docker does: ``pip install -r binder/requirements.txt`` from the repository root, then
``binder/postBuild``, then the quickstart notebook executed by that environment's own kernel. It works on a copy
of the repository's files (git ls-files), so the work tree is untouched.

The build takes a few minutes, most of them pip unpacking torch, TensorFlow and JupyterLab on one core. When the
test is among the collected ones, ``tests/conftest.py`` starts it as soon as collection ends, so that it runs
beside the rest of the suite; the test then waits for it and checks every step. Run alone, the test starts it
itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_ID = "tests/notebooks/test_binder.py::test_binder_environment_runs_the_quickstart"

#: The quickstart, executed by the Binder environment's own Python and kernel.
QUICKSTART = (
    "import nbformat, nbclient\n"
    "nb = nbformat.read('notebooks/01-quickstart.ipynb', as_version=4)\n"
    "nbclient.NotebookClient(nb, timeout=600, kernel_name='python3').execute(cwd='notebooks')\n"
    "print('quickstart ok')"
)


@dataclass
class Step:
    """One command of the build, and what became of it."""

    name: str
    cmd: list[str]
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0

    def failure(self) -> str:
        return (
            f"{self.name}: {' '.join(self.cmd)} exited {self.returncode}:\n{self.stdout[-3000:]}\n{self.stderr[-3000:]}"
        )


@dataclass
class BinderBuild:
    """The build's steps run one after the other on a thread; :meth:`wait` returns them once all ran or one
    failed. ``skipped`` says why nothing was built (no git work tree)."""

    work: Path
    steps: list[Step] = field(default_factory=list)
    skipped: str = ""
    error: BaseException | None = None
    _thread: threading.Thread | None = None
    _proc: subprocess.Popen | None = None
    _stopped: bool = False

    @property
    def repo(self) -> Path:
        return self.work / "repo"

    def start(self) -> BinderBuild:
        env = dict(os.environ)  # a copy now: tests change os.environ while the build runs
        self._thread = threading.Thread(target=self._build, args=(env,), name="binder-build", daemon=True)
        self._thread.start()
        return self

    def wait(self, timeout: float = 2400) -> list[Step]:
        assert self._thread is not None, "the build was never started"
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.stop()
            raise TimeoutError(f"the Binder build did not finish in {timeout:.0f} s")
        if self.error is not None:
            raise self.error
        return self.steps

    def stop(self) -> None:
        """Stop the command running now and every later one (the session ends)."""
        self._stopped = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def _build(self, env: dict[str, str]) -> None:
        try:
            if shutil.which("git") is None or not (ROOT / ".git").exists():
                self.skipped = "needs the git work tree to copy the repository's files"
                return
            self._copy_repository()
            venv = self.work / "venv"
            env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv),
                       PIP_DISABLE_PIP_VERSION_CHECK="1", HOME=env.get("HOME", str(self.work)))  # fmt: skip
            env.pop("PYTHONPATH", None)
            py = str(venv / "bin" / "python")
            # --no-compile: byte-compiling every installed module (torch, TensorFlow, transformers) is most of the
            # install's time (224 against 128 s here) and tests nothing of Binder's; what runs compiles on import
            for name, cmd, timeout in [
                ("venv", [sys.executable, "-m", "venv", str(venv)], 300),
                ("install", [py, "-m", "pip", "install", "-q", "--no-compile", "-r", "binder/requirements.txt"], 900),
                ("postBuild", ["bash", "binder/postBuild"], 600),
                ("quickstart", [py, "-c", QUICKSTART], 600),
                ("pip list", [py, "-m", "pip", "list"], 120),
            ]:
                if self._stopped or not self._run(Step(name, cmd), env, timeout):
                    return
        except BaseException as exc:  # reported by wait(), in the test
            self.error = exc

    def _copy_repository(self) -> None:
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.split()  # fmt: skip
        for name in files:
            src = ROOT / name
            if src.is_file():
                (self.repo / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, self.repo / name)

    def _run(self, step: Step, env: dict[str, str], timeout: float) -> bool:
        self.steps.append(step)
        start = time.monotonic()
        self._proc = subprocess.Popen(step.cmd, cwd=self.repo, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            step.stdout, step.stderr = self._proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            step.stdout, step.stderr = self._proc.communicate()
            step.stderr += f"\n(killed after {timeout:.0f} s)"
        step.returncode = self._proc.returncode
        step.seconds = time.monotonic() - start
        return step.returncode == 0


_started: BinderBuild | None = None


def start_in_background() -> BinderBuild:
    """Start the build for the session (tests/conftest.py, when the test was collected)."""
    global _started
    if _started is None:
        _started = BinderBuild(Path(tempfile.mkdtemp(prefix="nbprec-binder-"))).start()
    return _started


def build() -> BinderBuild:
    """The session's build: the one started in the background, or one started now."""
    return start_in_background()


def finish() -> None:
    """At the session's end: stop what still runs and remove the virtualenv and the copy."""
    global _started
    if _started is not None:
        _started.stop()
        if _started._thread is not None:
            _started._thread.join(30)
        # removing the virtualenv's 3 GB takes most of a minute: a process of its own does it after the session
        subprocess.Popen(["rm", "-rf", str(_started.work)], start_new_session=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)  # fmt: skip
        _started = None
