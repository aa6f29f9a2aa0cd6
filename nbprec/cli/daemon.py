"""The command daemon: a background process that has imported nbprec, so that commands start without paying
for it.

A ``nbprec compare`` spends about 0.1 s before it opens a dump: the interpreter, numpy and nbprec's own modules.
On a pair of small dumps that is a third of the command. The first served command of a Python environment
(:data:`~nbprec.cli._choices.SERVED_COMMANDS`: compare, isolate, overflow, info, ni) runs as usual and then
starts a daemon, which imports what those commands need, runs one small comparison to warm up, and waits on a
Unix socket. The next commands are clients: each sends its arguments, working folder, environment, umask and its
standard input, output and error (the descriptors themselves) to the daemon, which forks a process that runs the
command exactly as the client would have, with the client's terminal and files. The client forwards the signals
it gets (Ctrl-C) to that process and exits with its status.

- The daemon belongs to the user (the socket's folder is theirs, mode 0700, and the peer's user is checked) and
  to one environment: it serves only clients with the same interpreter, ``sys.path``, nbprec folder and
  variables that act when modules are imported (``PYTHON*``, ``NBPREC_*``, numpy and BLAS settings).
- It never runs stale code: before each command it checks that none of the nbprec modules it imported changed
  on disk, and exits when one did (that client runs the command itself).
- It exits after :data:`IDLE_SECONDS` without a command (``NBPREC_DAEMON_IDLE`` seconds), or on
  ``nbprec daemon stop``.
- ``NBPREC_DAEMON=off`` runs every command in its own process and starts no daemon. So does any failure to reach
  the daemon before the command started there: the command then runs in the client.

Linux only (it forks, and passes descriptors with ``SCM_RIGHTS``); elsewhere commands run in their own process.
The client's part imports nothing heavy: it runs before numpy would be imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import struct
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

TYPE_CHECKING = False  # (without importing typing: the daemon's client starts without it)
if TYPE_CHECKING:
    from typing import Any

#: Seconds a daemon waits for a command before it exits (``NBPREC_DAEMON_IDLE``).
IDLE_SECONDS = 600.0
#: Seconds a client waits for the daemon to take its command before running it itself.
CONNECT_SECONDS = 2.0
#: The resource limits a command's process inherits (``resource.RLIMIT_*``): daemons differ when they do.
_LIMITS = ("RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_RSS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_NPROC")
#: The longest socket path used (a Unix socket's path holds at most 107 bytes).
_MAX_PATH = 100
#: Environment variables that act when modules are imported: daemons differ when they do.
_IMPORT_VARIABLES = ("PYTHON", "NBPREC_", "NPY_", "NUMPY_", "OPENBLAS_", "OMP_", "MKL_", "GOTO", "LD_")
_HEADER = struct.Struct(">I")
_STATUS = struct.Struct(">ci")  # b"S", the command's exit status
_STARTED = struct.Struct(">cq")  # b"R", the pid of the process that runs it


def enabled() -> bool:
    """Whether commands use a daemon: ``NBPREC_DAEMON`` is not off, this system can, and the interpreter runs
    with its usual options (no ``-O``, ``-W`` or ``-X``, which a daemon started without them would not honour)."""
    if os.environ.get("NBPREC_DAEMON", "on").strip().lower() in {"0", "off", "no", "false"}:
        return False
    flags = sys.flags
    if flags.optimize or flags.dev_mode or flags.isolated or sys.warnoptions or getattr(sys, "_xoptions", None):
        return False
    return sys.platform.startswith("linux") and hasattr(socket, "send_fds") and hasattr(os, "fork")


def socket_folder() -> Path:
    """The user's folder of daemon sockets: ``NBPREC_DAEMON_DIR``, else ``$XDG_RUNTIME_DIR/nbprec``, else
    ``/tmp/nbprec-<uid>``."""
    if os.environ.get("NBPREC_DAEMON_DIR"):
        return Path(os.environ["NBPREC_DAEMON_DIR"])
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "nbprec"
    return Path(f"/tmp/nbprec-{os.getuid()}")


def _module_path() -> list[str]:
    """``sys.path`` without the folder ``python -m`` or ``-c`` puts first (the working folder), so that one daemon
    serves ``python -m nbprec`` from any folder."""
    first = sys.path[:1]
    return sys.path[1:] if first in ([""], [os.getcwd()]) else list(sys.path)


def _process_limits() -> list:
    """What the process a command runs in inherits and a client cannot hand over: its resource limits
    (``ulimit``), the cores it may run on (``taskset``), its niceness and its control groups (a batch job's
    memory and CPU share). A daemon started under other ones would run the command outside them."""
    import resource

    limits = [resource.getrlimit(getattr(resource, name)) for name in _LIMITS if hasattr(resource, name)]
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as file:
            groups = file.read()
    except OSError:
        groups = ""
    return [limits, cores, os.getpriority(os.PRIO_PROCESS, 0), groups]


def daemon_key() -> str:
    """What a daemon must share with its clients: the interpreter, its module path, nbprec's folder, the user,
    the variables that act when modules are imported and the process's limits (:func:`_process_limits`)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    variables = sorted(
        (k, v) for k, v in os.environ.items() if k.startswith(_IMPORT_VARIABLES) and not k.startswith("NBPREC_DAEMON")
    )
    return json.dumps([sys.executable, sys.prefix, here, _module_path(), variables, os.getuid(), _process_limits()])


def socket_path(key: str | None = None) -> Path:
    """The socket of the daemon of ``key`` (default: this process's :func:`daemon_key`). The name is a hash of
    the key; the daemon checks the whole key of every command."""
    data = (daemon_key() if key is None else key).encode()
    return socket_folder() / f"daemon-{zlib.crc32(data):08x}{zlib.adler32(data):08x}.sock"


def _private_folder(folder: Path, create: bool) -> bool:
    """Whether ``folder`` is this user's alone (mode 0700), made so when ``create``."""
    if create:
        with contextlib.suppress(OSError):  # (exists, or cannot be made: then checked below, and not used)
            folder.mkdir(mode=0o700, parents=True)
    try:
        info = folder.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077 == 0


# -- the client ------------------------------------------------------------------------------------------------
def _send(sock: socket.socket, message: dict, fds: Sequence[int] = ()) -> None:
    """``message`` as length-prefixed JSON, the descriptors ``fds`` with its first bytes."""
    data = json.dumps(message).encode()
    data = _HEADER.pack(len(data)) + data
    sent = socket.send_fds(sock, [data], list(fds)) if fds else sock.send(data)
    if sent < len(data):  # (nothing more to send is not sent: the peer may have answered and gone already)
        sock.sendall(data[sent:])


def _receive_exact(sock: socket.socket, n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _connect(path: Path, timeout: float = CONNECT_SECONDS) -> socket.socket | None:
    """A connection to the daemon of socket ``path``, or None when there is none (or it is not the user's)."""
    if not _private_folder(path.parent, create=False):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


def run_on_daemon(argv: Sequence[str]) -> int | None:
    """Run the command ``argv`` on the daemon and return its exit status; None when it did not start there
    (no daemon, a stale one, an unusable standard stream): the caller runs it itself."""
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
    except OSError:
        return None
    key = daemon_key()
    sock = _connect(socket_path(key))
    if sock is None:
        return None
    with sock:
        try:
            encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
            umask = os.umask(0o022)
            os.umask(umask)
            request = {"op": "run", "key": key, "argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ)}
            _send(sock, {**request, "umask": umask, "encoding": encoding}, (0, 1, 2))
            reply = _receive_exact(sock, _STARTED.size)
        except OSError:  # (a timeout included) the command did not start there
            return None
        if reply is None or reply[:1] != b"R":
            return None
        pid = _STARTED.unpack(reply)[1]
        sock.settimeout(None)  # from here the command runs there, however long it takes
        return _wait_for(sock, pid)


def _wait_for(sock: socket.socket, pid: int) -> int:
    """The exit status of the served command ``pid``, forwarding the signals this process gets to it."""

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(OSError):
            os.killpg(pid, signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, forward)
    reply = _receive_exact(sock, _STATUS.size)
    if reply is None:
        print(
            "nbprec: error: the command's process (forked from the command daemon) ended without a status; "
            "its outputs may be incomplete: run the command again, or with NBPREC_DAEMON=off in its own process",
            file=sys.stderr,
        )
        return 1
    return _STATUS.unpack(reply)[1]


def start_daemon() -> None:
    """Start this environment's daemon in the background: a new session, no inherited streams, run from the
    private socket folder with this process's module path (a folder's own modules shadow nothing). Quietly
    nothing when the socket folder is not the user's own."""
    import subprocess

    key = daemon_key()
    path = socket_path(key)
    if len(os.fsencode(path)) > _MAX_PATH or not _private_folder(path.parent, create=True):
        return
    start = json.dumps({"path": str(path), "key": key, "sys_path": _module_path()})
    code = "import json, os, sys; start = json.loads(os.environ.pop('NBPREC_DAEMON_START')); "
    code += (
        "sys.path[:] = start['sys_path']; from nbprec.cli.daemon_process import main; main(start['path'], start['key'])"
    )
    with contextlib.suppress(OSError):
        subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=path.parent,
            env={**os.environ, "NBPREC_DAEMON_START": start},  # (not on the command line, which ps shows)
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )


def ask(op: str) -> dict | None:
    """The daemon's answer to ``op`` (``"status"`` or ``"stop"``), or None when none is running."""
    sock = _connect(socket_path())
    if sock is None:
        return None
    with sock:
        try:
            _send(sock, {"op": op})
            size = _receive_exact(sock, _HEADER.size)
            body = _receive_exact(sock, _HEADER.unpack(size)[0]) if size else None
        except OSError:
            return None
    return json.loads(body) if body else None


def _cmd_daemon(args: Any) -> int:
    """``nbprec daemon status|stop``."""
    answer = ask(args.action)
    if answer is None:
        print(f"no nbprec daemon is running for this environment ({socket_path()})")
        return 0 if args.action == "stop" else 3
    if args.action == "stop":
        print(f"stopped the nbprec daemon (pid {answer['pid']})")
        return 0
    up = time.time() - answer["started"]
    print(
        f"nbprec daemon pid {answer['pid']}, up {up:.0f} s, {answer['served']} command(s) run, socket {socket_path()}"
    )
    return 0
