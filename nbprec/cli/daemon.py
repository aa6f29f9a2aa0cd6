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

# The client's imports are C modules or tiny ones: it runs before anything else would be imported, and the public
# wrappers cost it milliseconds (``socket`` and ``signal`` build enums, ``json`` imports ``re``, ``pathlib`` a dozen
# modules). The wire format is spelled out here instead of with ``struct``.
import _signal
import _socket
import os
import stat
import sys
import time
from _json import encode_basestring_ascii as _json_string

from nbprec._switches import switched_off

TYPE_CHECKING = False  # (without importing typing: the daemon's client starts without it)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

#: Seconds a daemon waits for a command before it exits (``NBPREC_DAEMON_IDLE``).
IDLE_SECONDS = 600.0
#: Seconds a client waits for the daemon to take its command before running it itself.
CONNECT_SECONDS = 2.0
#: The longest socket path used (a Unix socket's path holds at most 107 bytes).
_MAX_PATH = 100
#: Environment variables that act when modules are imported: daemons differ when they do.
_IMPORT_VARIABLES = ("PYTHON", "NBPREC_", "NPY_", "NUMPY_", "OPENBLAS_", "OMP_", "MKL_", "GOTO", "LD_")

# -- the wire format -------------------------------------------------------------------------------------------
# A message is a 4-byte big-endian length and that many bytes of JSON (a client's descriptors travel with its
# first bytes). The daemon answers a command with b"R" and the 8-byte pid of the process that runs it; that
# process (or the daemon, for one killed by a signal) then sends b"S" and the 4-byte exit status.
_HEADER_SIZE, _STARTED_SIZE, _STATUS_SIZE = 4, 9, 5


def _framed(data: bytes) -> bytes:
    return len(data).to_bytes(_HEADER_SIZE, "big") + data


def _started_message(pid: int) -> bytes:
    return b"R" + pid.to_bytes(_STARTED_SIZE - 1, "big", signed=True)


def _status_message(status: int) -> bytes:
    return b"S" + status.to_bytes(_STATUS_SIZE - 1, "big", signed=True)


def _to_json(value: Any) -> str:
    """``value`` (str, int, bool, None, list, tuple, dict with str keys: what a request and the key hold) as JSON
    text, ASCII only, as ``json.dumps(value, separators=(",", ":"))`` writes it."""
    if isinstance(value, str):
        return _json_string(value)
    if value is None or isinstance(value, bool):
        return "null" if value is None else "true" if value else "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json_string(k)}:{_to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(_to_json, value)) + "]"
    raise TypeError(f"cannot send a {type(value).__name__} to the command daemon")


def enabled() -> bool:
    """Whether commands use a daemon: ``NBPREC_DAEMON`` is not off, this system can, and the interpreter runs
    with its usual options (no ``-O``, ``-W`` or ``-X``, which a daemon started without them would not honour)."""
    if switched_off("NBPREC_DAEMON"):
        return False
    flags = sys.flags
    if flags.optimize or flags.dev_mode or flags.isolated or sys.warnoptions or getattr(sys, "_xoptions", None):
        return False
    return sys.platform.startswith("linux") and hasattr(_socket, "SCM_RIGHTS") and hasattr(os, "fork")


def socket_folder() -> str:
    """The user's folder of daemon sockets: ``NBPREC_DAEMON_DIR``, else ``$XDG_RUNTIME_DIR/nbprec``, else
    ``/tmp/nbprec-<uid>``."""
    if os.environ.get("NBPREC_DAEMON_DIR"):
        return os.environ["NBPREC_DAEMON_DIR"]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "nbprec")
    return f"/tmp/nbprec-{os.getuid()}"


def _module_path() -> list[str]:
    """``sys.path`` without the folder ``python -m`` or ``-c`` puts first (the working folder), so that one daemon
    serves ``python -m nbprec`` from any folder."""
    first = sys.path[:1]
    return sys.path[1:] if first in ([""], [os.getcwd()]) else list(sys.path)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read()
    except OSError:
        return ""


def _process_limits() -> list:
    """What the process a command runs in inherits and a client cannot hand over: its resource limits
    (``ulimit``: every line of ``/proc/self/limits``), the cores it may run on (``taskset``), its niceness and
    its control groups (a batch job's memory and CPU share). A daemon started under other ones would run the
    command outside them."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return [_read("/proc/self/limits"), cores, os.getpriority(os.PRIO_PROCESS, 0), _read("/proc/self/cgroup")]


def daemon_key() -> str:
    """What a daemon must share with its clients: the interpreter, its module path, nbprec's folder, the user,
    the variables that act when modules are imported and the process's limits (:func:`_process_limits`)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    variables = sorted(
        (k, v) for k, v in os.environ.items() if k.startswith(_IMPORT_VARIABLES) and not k.startswith("NBPREC_DAEMON")
    )
    return _to_json([sys.executable, sys.prefix, here, _module_path(), variables, os.getuid(), _process_limits()])


def _digest(data: bytes) -> str:
    """A 64-bit FNV-1a hash of ``data`` as 16 hex digits (stable across processes, unlike ``hash``)."""
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def socket_path(key: str | None = None) -> str:
    """The socket of the daemon of ``key`` (default: this process's :func:`daemon_key`). The name is a hash of
    the key; the daemon checks the whole key of every command."""
    data = (daemon_key() if key is None else key).encode("utf-8", "surrogateescape")
    return os.path.join(socket_folder(), f"daemon-{_digest(data)}.sock")


def _private_folder(folder: str | os.PathLike[str], create: bool) -> bool:
    """Whether ``folder`` is this user's alone (mode 0700), made so when ``create``."""
    if create:
        try:  # noqa: SIM105  (contextlib is not imported by the client)
            os.makedirs(folder, mode=0o700)
        except OSError:  # (exists, or cannot be made: then checked below, and not used)
            pass
    try:
        info = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077 == 0


# -- the client ------------------------------------------------------------------------------------------------
def _send(sock: Any, message: dict, fds: Sequence[int] = ()) -> None:
    """``message`` as length-prefixed JSON, the descriptors ``fds`` with its first bytes."""
    data = _framed(_to_json(message).encode())
    if fds:
        rights = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)  # (C ints, as SCM_RIGHTS wants)
        sent = sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
    else:
        sent = sock.send(data)
    if sent < len(data):  # (nothing more to send is not sent: the peer may have answered and gone already)
        sock.sendall(data[sent:])


def _receive_exact(sock: Any, n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _connect(path: str, timeout: float = CONNECT_SECONDS) -> Any:
    """A connection to the daemon of socket ``path``, or None when there is none (or it is not the user's)."""
    if not _private_folder(os.path.dirname(path), create=False):
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
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
    try:
        try:
            encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
            umask = os.umask(0o022)
            os.umask(umask)
            request = {"op": "run", "key": key, "argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ)}
            _send(sock, {**request, "umask": umask, "encoding": encoding}, (0, 1, 2))
            reply = _receive_exact(sock, _STARTED_SIZE)
        except OSError:  # (a timeout included) the command did not start there
            return None
        if reply is None or reply[:1] != b"R":
            return None
        pid = int.from_bytes(reply[1:], "big", signed=True)
        sock.settimeout(None)  # from here the command runs there, however long it takes
        return _wait_for(sock, pid)
    finally:
        sock.close()


def _wait_for(sock: Any, pid: int) -> int:
    """The exit status of the served command ``pid``, forwarding the signals this process gets to it."""

    def forward(signum: int, _frame: Any) -> None:
        try:  # noqa: SIM105  (contextlib is not imported by the client)
            os.killpg(pid, signum)
        except OSError:
            pass

    for signum in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT):
        _signal.signal(signum, forward)
    reply = _receive_exact(sock, _STATUS_SIZE)
    if reply is None:
        print(
            "nbprec: error: the command's process (forked from the command daemon) ended without a status; "
            "its outputs may be incomplete: run the command again, or with NBPREC_DAEMON=off in its own process",
            file=sys.stderr,
        )
        return 1
    return int.from_bytes(reply[1:], "big", signed=True)


def start_daemon() -> None:
    """Start this environment's daemon in the background: a new session, no inherited streams, run from the
    private socket folder with this process's module path (a folder's own modules shadow nothing). Quietly
    nothing when the socket folder is not the user's own."""
    import subprocess

    key = daemon_key()
    path = socket_path(key)
    folder = os.path.dirname(path)
    if len(os.fsencode(path)) > _MAX_PATH or not _private_folder(folder, create=True):
        return
    start = _to_json({"path": path, "key": key, "sys_path": _module_path()})
    code = "import json, os, sys; start = json.loads(os.environ.pop('NBPREC_DAEMON_START')); "
    code += (
        "sys.path[:] = start['sys_path']; from nbprec.cli.daemon_process import main; main(start['path'], start['key'])"
    )
    try:  # noqa: SIM105
        subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=folder,
            env={**os.environ, "NBPREC_DAEMON_START": start},  # (not on the command line, which ps shows)
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        pass


def ask(op: str) -> dict | None:
    """The daemon's answer to ``op`` (``"status"`` or ``"stop"``), or None when none is running."""
    import json

    sock = _connect(socket_path())
    if sock is None:
        return None
    try:
        _send(sock, {"op": op})
        size = _receive_exact(sock, _HEADER_SIZE)
        body = _receive_exact(sock, int.from_bytes(size, "big")) if size else None
    except OSError:
        return None
    finally:
        sock.close()
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
