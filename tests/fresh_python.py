"""Run a Python snippet in a fresh interpreter (no module of this test process loaded there)."""

from __future__ import annotations

import json
import subprocess
import sys


def run_python(script: str, timeout: float = 120) -> str:
    """``script`` run by this interpreter's executable in a process of its own; its stdout, stripped. A failure
    (non-zero exit) fails the calling test with the snippet's stderr."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def command_in_fresh_python(argv: list[str], modules: tuple[str, ...]) -> tuple[str, dict[str, bool]]:
    """``nbprec ARGV`` run by ``nbprec.cli.main`` in a fresh interpreter: what it printed, and which of ``modules``
    it loaded (an import a code path must not pay for)."""
    code = (
        "import contextlib, io, json, sys\n"
        "from nbprec.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as text:\n"
        f"    main({list(argv)!r})\n"
        f"print(json.dumps([text.getvalue(), {{m: m in sys.modules for m in {list(modules)!r}}}]))\n"
    )
    text, loaded = json.loads(run_python(code).splitlines()[-1])
    return text, loaded


#: The end of a script run in a fresh interpreter that runs ``nbprec compare`` (``argv``, the command's arguments) as
#: ``entry`` runs it: ``"run"``, in a process of its own (nbprec.cli.run); else as the command daemon's served
#: process runs it (daemon_process._run_command), its streams on /dev/null. Both end the process (os._exit).
RUN_COMMAND_AS = r"""
import os, socket, sys
if entry == "run":
    import nbprec.cli
    sys.argv = ["nbprec", *argv]
    nbprec.cli.run()
else:
    from nbprec.cli import daemon_process
    mine, theirs = socket.socketpair()
    streams = [os.open(os.devnull, os.O_RDONLY), os.open(os.devnull, os.O_WRONLY), os.open(os.devnull, os.O_WRONLY)]
    request = {"argv": argv, "cwd": os.getcwd(), "umask": 0o022, "env": dict(os.environ), "encoding": "utf-8"}
    daemon_process._run_command(theirs, request, streams)
"""
