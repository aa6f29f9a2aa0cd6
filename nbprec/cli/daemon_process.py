"""The command daemon's own process (see :mod:`nbprec.cli.daemon`, the client's side and the protocol): it imports
what the served commands need, warms up, then forks a process per command that becomes the client's command."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path

from nbprec.cli.daemon import (
    _HEADER_SIZE,
    CONNECT_SECONDS,
    IDLE_SECONDS,
    _framed,
    _private_folder,
    _receive_exact,
    _send,
    _started_message,
    _status_message,
)

#: Seconds a starting daemon waits for its socket's lock: a stale daemon that made way for a new one holds it until
#: its process has ended, and the client that found it stale may run its command and start the new one sooner.
LOCK_WAIT_SECONDS = 5.0

#: The modules a daemon imports for the commands it runs.
_WARM_MODULES = (
    "nbprec.cli.comparing",
    "nbprec.cli.dumps",
    "nbprec.cli.overflow",
    "nbprec.compare",
    "nbprec.compare.engine",
    "nbprec.compare.comparison",
    "nbprec.compare.msprobe_layout",
    "nbprec.compare.exports",
    "nbprec.formats",
    "nbprec.formats.msprobe",
    "nbprec.formats.native_read",
    "nbprec.formats.ptdbg",
    "nbprec.formats.cann",
    "nbprec.formats.tf_npy",
    "nbprec.overflow",
    "nbprec.safe_text",
)


def _module_stamps() -> dict[str, tuple[int, int]]:
    """(mtime, size) of the file of every imported nbprec module."""
    stamps = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and (name == "nbprec" or name.startswith("nbprec.")):
            with contextlib.suppress(OSError):
                info = os.stat(path)
                stamps[path] = (info.st_mtime_ns, info.st_size)
    return stamps


def stale(stamps: dict[str, tuple[int, int]]) -> bool:
    """Whether a module file of ``stamps`` changed (or went) since."""
    for path, stamp in stamps.items():
        try:
            info = os.stat(path)
        except OSError:
            return True
        if (info.st_mtime_ns, info.st_size) != stamp:
            return True
    return False


def _detach(others: list[socket.socket], pipe: tuple[int, int]) -> None:
    """In a forked process: drop the daemon's signal handlers, its sockets (``others``) and its wake-up
    ``pipe``, and lead a process group of its own (the client forwards its signals to it)."""
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.set_wakeup_fd(-1)
    for other in others:
        other.close()
    for fd in pipe:
        os.close(fd)
    os.setpgid(0, 0)


def _wait_as_spare(channel: socket.socket) -> None:
    """The spare process: wait for the daemon to hand it a command (the client's connection and streams) and
    run it; exit when the daemon goes (its end of ``channel`` closes)."""
    try:
        request, fds = _receive_request(channel)
    except (OSError, ValueError):
        os._exit(0)
    if request is None or len(fds) != 4:
        os._exit(0)
    channel.close()
    conn = socket.socket(fileno=fds[0])
    _run_command(conn, request, fds[1:])


def _run_command(conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked process: become the client's command (its streams ``fds``), run it, send its status to
    the client's connection ``conn`` and exit."""
    status = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        _reopen_streams(request["encoding"])
        sys.argv = ["nbprec", *request["argv"]]
        from nbprec._gc import spare_until_exit
        from nbprec.cli import main

        spare_until_exit()  # (this process ends with os._exit below)
        if request["argv"][:1] == ["compare"]:
            prepare_compare(request["argv"])
        status = main(request["argv"])
    except SystemExit as exc:  # argparse: usage errors (2) and --help (0)
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        started = sys.modules.get("nbprec.compare.early")
        if started is not None:
            started.discard()  # (a command that stopped before comparing: its results are not wanted)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        with contextlib.suppress(OSError):
            conn.sendall(_status_message(status))
        os._exit(status)


def prepare_compare(argv: list[str]) -> None:
    """Set up the process of a served ``nbprec compare`` (``argv`` after the program name) as the command's own
    process is set up (:func:`nbprec.cli.run`): its heap marked for huge pages, and the early worker started
    (:mod:`nbprec.compare.early`) when it has pairs to measure in the dumps: here it measures while the dumps
    are opened and matched (there are no imports to cover); for dumps without payloads, or of other formats,
    the fork of this large process would only cost."""
    from nbprec.cli import compare_heap
    from nbprec.compare import early

    paths = early.compare_paths(argv)
    compare_heap(paths)
    if paths is not None and early.has_pairs(*paths):
        early.start(*paths)


def _receive_request(conn: socket.socket, max_fds: int = 4) -> tuple[dict | None, list[int]]:
    """One length-prefixed JSON message and the descriptors sent with it; (None, []) at the end of ``conn``."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, max_fds)
    if not data:
        return None, fds
    try:
        if len(data) < _HEADER_SIZE:
            raise ValueError("a short request")
        size = int.from_bytes(data[:_HEADER_SIZE], "big")
        body = data[_HEADER_SIZE:]
        if len(body) < size:
            body += _receive_exact(conn, size - len(body)) or b""
        return json.loads(body), fds
    except (OSError, ValueError):
        for fd in fds:
            os.close(fd)
        raise


def _reopen_streams(encoding: str) -> None:
    """sys.stdin/stdout/stderr over descriptors 0-2 (now the client's), buffered as Python buffers them."""
    import io

    def text(fd: int, mode: str, line: bool) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        buffered = io.BufferedWriter(raw) if mode == "w" else io.BufferedReader(raw)
        return io.TextIOWrapper(buffered, encoding=encoding, errors="strict", line_buffering=line)

    sys.stdin = sys.__stdin__ = text(0, "r", False)
    sys.stdout = sys.__stdout__ = text(1, "w", os.isatty(1))
    sys.stderr = sys.__stderr__ = text(2, "w", True)
    sys.stderr.reconfigure(errors="backslashreplace")


class _Daemon:
    """The daemon loop: commands come in on ``listener``; each runs in a forked process."""

    def __init__(self, listener: socket.socket, key: str, idle: float) -> None:
        self.listener = listener
        self.key = key
        self.idle = idle
        self.started = time.time()
        self.served = 0
        self.last = time.monotonic()  # when the last command ended or started
        self.running: dict[int, socket.socket] = {}  # pid -> its client's connection
        self.spare: tuple[int, socket.socket] | None = None  # (pid, channel) of the process for the next command
        self.stamps = _module_stamps()
        read, self.wakeup = os.pipe()
        os.set_blocking(self.wakeup, False)
        os.set_blocking(read, False)
        self.woken = read
        signal.set_wakeup_fd(self.wakeup)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # (the wake-up descriptor wakes the loop)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def serve(self) -> None:
        import select

        while True:
            timeout = max(0.0, self.last + self.idle - time.monotonic())
            ready, _, _ = select.select([self.listener, self.woken], [], [], None if self.running else timeout)
            if self.woken in ready:
                with contextlib.suppress(OSError):
                    os.read(self.woken, 4096)
            self._reap()
            if self.listener in ready and not self._accept():
                return
            if not self.running and time.monotonic() >= self.last + self.idle:
                return  # no command for self.idle seconds (status questions do not count)

    def _reap(self) -> None:
        """Wait for finished commands (one killed by a signal gets its status, 128 + signal, sent here) and for
        a spare that died."""
        while self.running or self.spare:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.running.pop(pid, None)
            if conn is None:
                if self.spare is not None and self.spare[0] == pid:  # a spare that died: fork another one later
                    self.close()
                continue
            self.last = time.monotonic()
            if os.WIFSIGNALED(wait_status):
                with contextlib.suppress(OSError):
                    conn.sendall(_status_message(128 + os.WTERMSIG(wait_status)))
            conn.close()

    def _accept(self) -> bool:
        """Take one connection; False when the daemon is to stop."""
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return True
        fds: list[int] = []
        try:
            conn.settimeout(CONNECT_SECONDS)
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            if struct.unpack("3i", creds)[1] != os.getuid():
                conn.close()
                return True
            request, fds = _receive_request(conn, 3)
            if request is None:
                for fd in fds:
                    os.close(fd)
                raise ValueError("no request")
        except (OSError, ValueError):
            conn.close()
            return True
        op = request.get("op")
        if op != "run":
            answer = {"pid": os.getpid(), "started": self.started, "served": self.served}
            self._answer(conn, answer)
            return op != "stop"
        is_stale = stale(self.stamps)
        if (
            len(fds) != 3 or is_stale or request.get("key") != self.key
        ):  # the client runs it; a stale daemon makes way for a new one
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                conn.sendall(b"X")
            conn.close()
            return not is_stale
        self._start(conn, request, fds)
        return True

    def _answer(self, conn: socket.socket, answer: dict) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(_framed(json.dumps(answer).encode()))
        conn.close()

    def _start(self, conn: socket.socket, request: dict, fds: list[int]) -> None:
        """Hand the command to the spare process (forked before it came, so that no fork waits here), or fork
        one for it when there is no spare; then fork the next spare."""
        conn.settimeout(None)
        pid = self._hand_to_spare(conn, request, fds)
        if pid is None:
            try:
                pid = os.fork()
            except OSError:
                for fd in fds:
                    os.close(fd)
                conn.close()  # the client sees no start and runs the command itself
                return
            if pid == 0:
                try:
                    _detach(self._inherited(), (self.woken, self.wakeup))
                    _run_command(conn, request, fds)
                finally:  # (never back into the daemon's loop, whatever happens)
                    os._exit(1)
            with contextlib.suppress(OSError):  # (the child does it too: set before the client may signal it)
                os.setpgid(pid, pid)
        for fd in fds:
            os.close(fd)
        self.served += 1
        self.last = time.monotonic()
        self.running[pid] = conn
        with contextlib.suppress(OSError):
            conn.sendall(_started_message(pid))
        self._fork_spare()

    def _inherited(self) -> list[socket.socket]:
        """The daemon's sockets a forked process closes."""
        spare = [self.spare[1]] if self.spare else []
        return [self.listener, *self.running.values(), *spare]

    def _fork_spare(self) -> None:
        """Fork the process that will run the next command (it waits on a socket pair for it)."""
        if self.spare is not None:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            return
        if pid == 0:
            try:
                ours.close()
                _detach(self._inherited(), (self.woken, self.wakeup))
                _wait_as_spare(theirs)
            finally:  # (never back into the daemon's loop, whatever happens)
                os._exit(1)
        theirs.close()
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        self.spare = (pid, ours)

    def _hand_to_spare(self, conn: socket.socket, request: dict, fds: list[int]) -> int | None:
        """The spare's pid once it holds the command, or None (no spare, or it is gone)."""
        if self.spare is None:
            return None
        pid, channel = self.spare
        self.spare = None
        try:
            _send(channel, request, [conn.fileno(), *fds])
        except OSError:
            return None
        finally:
            channel.close()
        return pid

    def close(self) -> None:
        """Let the spare go (its end of the socket pair closes)."""
        if self.spare is not None:
            self.spare[1].close()
            self.spare = None


def _warm_up(ops: int = 48) -> None:
    """Compare two small generated dumps, as ``nbprec compare -o`` does, in a temporary folder: the code the
    commands run then has run once here (lazily imported modules, first-call work, the interpreter's
    specialised bytecode), and every command shares that instead of redoing it."""
    import io
    import tempfile

    import numpy as np

    from nbprec.cli import main
    from nbprec.formats.native import NativeDumpWriter

    rng = np.random.default_rng(0)
    values = [rng.standard_normal(256) for _ in range(ops)]
    with tempfile.TemporaryDirectory(prefix="nbprec-daemon-") as tmp:
        for side, dtype in (("target", np.float16), ("bench", np.float32)):
            with NativeDumpWriter(f"{tmp}/{side}") as writer:
                for i, x in enumerate(values):
                    op = f"Functional.linear.{i}.forward"
                    writer.write_tensor({"name": f"{op}.output.0", "op": op, "order": i}, x.astype(dtype))
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            main(["compare", f"{tmp}/target", f"{tmp}/bench", "-o", f"{tmp}/out", "--no-progress"])
            main(["info", f"{tmp}/target"])


def _serve(path: Path, key: str) -> None:
    """Become the daemon of ``path``: one per socket (a lock held for life), imports first, then the loop.
    The environment is the first client's (``run`` set the command's process environment)."""
    import fcntl
    import importlib

    if not _private_folder(path.parent, create=False):
        return
    lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:  # a stale daemon holds it until its process has ended, which may be a moment after it said so
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if time.monotonic() >= deadline:
                return  # another daemon holds it, and serves
            time.sleep(0.05)
    for name in _WARM_MODULES:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    with contextlib.suppress(Exception):
        _warm_up()
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)
    try:
        idle = float(os.environ.get("NBPREC_DAEMON_IDLE", IDLE_SECONDS))
    except ValueError:
        idle = IDLE_SECONDS
    try:
        daemon = _Daemon(listener, key, idle)
        daemon._fork_spare()
        try:
            daemon.serve()
        finally:
            daemon.close()
    finally:  # (the lock is held until the process ends: no other daemon bound this path meanwhile)
        with contextlib.suppress(OSError):
            path.unlink()
        listener.close()


def main(path: str, key: str) -> None:
    """The daemon process of socket ``path`` for clients of ``key`` (see :func:`start_daemon`)."""
    os.chdir("/")  # (holds no folder busy; each command runs in its client's)
    _serve(Path(path), key)
