"""The Binder environment of tests/notebooks/test_binder.py, built in the background from the session's start.

Mirrors what repo2docker does: ``pip install -r binder/requirements.txt`` from the repository root, then
``binder/postBuild``, then the quickstart notebook executed by that environment's own kernel. It works on a copy
of the repository's files (git ls-files), so the work tree is untouched.

The build takes a few minutes, most of them pip unpacking torch, TensorFlow and JupyterLab on one core. When the
test is among the collected ones, ``tests/conftest.py`` starts it as soon as collection ends, so that it runs
beside the rest of the suite; the test then waits for it and checks every step. Run alone, the test starts it
itself.

The build runs as this file's ``__main__`` in a process of its own session that is not a child of pytest (its
parent exits at once), so that tests checking that a call left no child process behind see none of it. It
writes what each step did to ``steps.json`` in its folder, then ``done``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
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
    """A build running (or run) in ``work``; :meth:`wait` returns its steps once all ran or one failed."""

    work: Path

    @property
    def repo(self) -> Path:
        return self.work / "repo"

    def start(self) -> BinderBuild:
        launcher = "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True)"
        with open(self.work / "build.log", "wb") as log:  # the build's own errors, if it fails outside a step
            subprocess.run([sys.executable, "-c", launcher, sys.executable, __file__, str(self.work)],
                           stdout=log, stderr=log, check=True)  # fmt: skip
        return self

    def wait(self, timeout: float = 2400) -> tuple[list[Step], str]:
        """The steps run and why nothing was built ('' when something was)."""
        deadline = time.monotonic() + timeout
        while not (self.work / "done").exists():
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the Binder build did not finish in {timeout:.0f} s")
            if not self._running() and not (self.work / "done").exists():
                log = (self.work / "build.log").read_text(errors="replace")
                raise RuntimeError(f"the Binder build ended without finishing:\n{log[-3000:]}")
            time.sleep(1)
        result = json.loads((self.work / "steps.json").read_text())
        return [Step(**s) for s in result["steps"]], result["skipped"]

    def _pid(self) -> int | None:
        try:
            return int((self.work / "pid").read_text())
        except (OSError, ValueError):
            return None

    def _running(self) -> bool:
        pid = self._pid()
        if pid is None:  # not written yet: give it a moment
            return time.monotonic() - (self.work / "build.log").stat().st_mtime < 60
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    def stop(self) -> None:
        """Kill the build and every command it runs, if it still runs (its own process group)."""
        pid = self._pid()
        if pid is not None and not (self.work / "done").exists():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def _build(work: Path) -> None:
    """The build itself (this file run as ``__main__``, in its own session)."""
    (work / "pid").write_text(str(os.getpid()))
    steps: list[Step] = []
    skipped = ""

    def record() -> None:
        (work / "steps.json").write_text(json.dumps({"steps": [asdict(s) for s in steps], "skipped": skipped}))

    try:
        if shutil.which("git") is None or not (ROOT / ".git").exists():
            skipped = "needs the git work tree to copy the repository's files"
            return
        repo = work / "repo"
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.split()  # fmt: skip
        for name in files:
            src = ROOT / name
            if src.is_file():
                (repo / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, repo / name)
        venv = work / "venv"
        env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(venv),
               "PIP_DISABLE_PIP_VERSION_CHECK": "1", "HOME": os.environ.get("HOME", str(work))}  # fmt: skip
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
            step = Step(name, cmd)
            steps.append(step)
            start = time.monotonic()
            try:
                done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
                step.returncode, step.stdout, step.stderr = done.returncode, done.stdout, done.stderr
            except subprocess.TimeoutExpired as exc:
                step.returncode, step.stderr = -1, f"{exc.stderr or ''}\n(killed after {timeout} s)"
            step.seconds = time.monotonic() - start
            record()
            if step.returncode != 0:
                return
    finally:
        record()
        (work / "done").write_text("")


_started: BinderBuild | None = None


def build() -> BinderBuild:
    """The session's build, started now unless it already runs (tests/conftest.py starts it when the test is
    collected; the test itself, run some other way)."""
    global _started
    if _started is None:
        _started = BinderBuild(Path(tempfile.mkdtemp(prefix="nbprec-binder-"))).start()
    return _started


def finish() -> None:
    """At the session's end: stop the build if it still runs, and remove its folder (the virtualenv's 3 GB take
    most of a minute: a process of its own removes them after the session)."""
    global _started
    if _started is not None:
        _started.stop()
        subprocess.run([sys.executable, "-c", "import subprocess, sys; subprocess.Popen(sys.argv[1:], "
                        "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)",
                        "rm", "-rf", str(_started.work)], check=False)  # fmt: skip
        _started = None


if __name__ == "__main__":
    _build(Path(sys.argv[1]))
