"""Work done beside this process: a forked child that runs one function (writing files, say) while this process
goes on with other work, on another core.

:func:`beside` is a context manager: the child starts on entry and the body runs meanwhile; on leaving, this
process waits for the child and raises what it raised. A second function may be left to whichever of the two is
free first (``either``): the child once its own work is done, or this process once the body is; one token in a
pipe decides (a pipe's read is atomic: one of them takes the byte, the other finds the pipe empty and goes on).
Where a fork is unsafe or unavailable (not POSIX, or other threads run in this process: a forked copy could
inherit a lock one of them holds; in a notebook, say), the functions run in this process on leaving instead, with
the same result. Nothing crosses the process boundary but the child's exit status and, on failure, its error
message (text through a pipe).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from nbprec.errors import NbprecError

#: the longest error message a child sends back (its first line names the error)
_MESSAGE_BYTES = 1 << 16


def can_fork() -> bool:
    """Whether a forked copy of this process is safe: POSIX ``fork``, and this thread the only one."""
    return hasattr(os, "fork") and threading.active_count() == 1


def _run_child(work: Callable[[], None], pipe: int, either: Callable[[], None] | None, token: int | None) -> None:
    """Body of the child: run ``work``, then ``either`` if it takes the ``token`` first, and exit 0; on any error,
    send its message and exit 1. Never returns."""
    status = 1
    try:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C stops the child at once, as the parent
        work()
        if either is not None and _take(token):
            either()
        status = 0
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.write(pipe, _told(exc).encode("utf-8", "backslashreplace")[:_MESSAGE_BYTES])
    finally:
        with contextlib.suppress(OSError):
            os.close(pipe)
        os._exit(status)  # no atexit handlers, no flush of buffers the parent also holds


def _told(exc: BaseException) -> str:
    """What a failure of the work says: an nbprec error's message, else the exception's last line."""
    if isinstance(exc, NbprecError):
        return str(exc)
    import traceback  # (here: the command's start-up does not pay for it)

    return "".join(traceback.format_exception_only(exc)).strip()


def _tell(what: str, told: list[str], cause: BaseException | None) -> None:
    """Raise what the work's failures told, if any, as one :class:`~nbprec.errors.NbprecError`."""
    if told:
        raise NbprecError(f"{what}: {'; '.join(told)}") from cause


def _token() -> int:
    """The read end of a pipe holding one byte, its write end closed: :func:`_take` never waits on it."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"1")
    finally:
        os.close(write_end)
    return read_end


def _take(token: int | None) -> bool:
    """Whether this process took the token's byte (the other one finds the pipe at its end)."""
    return token is not None and os.read(token, 1) == b"1"


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, _MESSAGE_BYTES):
        chunks.append(chunk)
    return b"".join(chunks)


@contextlib.contextmanager
def beside(work: Callable[[], None], what: str, either: Callable[[], None] | None = None) -> Iterator[bool]:
    """Run ``work()`` in a forked child while the ``with`` body runs in this process; yields whether it was
    forked. ``either()``, when given, runs once, in whichever process is free first: the child after ``work()``,
    or this one when the body is done.

    On leaving, waits for the child; its failure, or that of ``either()`` run here, is raised as
    :class:`~nbprec.errors.NbprecError` ``"{what}: {message}"`` (both messages when both failed). When the body
    raises, the child is stopped and waited for, and the body's error goes on. Without a safe fork
    (:func:`can_fork`) ``work()`` and then ``either()`` run here when the body is done, and their failures are
    told in the same way.
    """
    if not can_fork():
        yield False
        told, failed = [], None
        for run in (work, either):
            try:
                if run is not None:
                    run()
            except Exception as exc:  # (the shared work runs although the work failed, as when forked)
                told.append(_told(exc))
                failed = failed or exc
        _tell(what, told, failed)
        return
    for stream in (sys.stdout, sys.stderr):  # what is buffered now is written once, not again by the child
        with contextlib.suppress(Exception):
            stream.flush()
    token = _token() if either is not None else None
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        for fd in (read_end, write_end, token):
            if fd is not None:
                os.close(fd)
        raise
    if pid == 0:  # the child
        os.close(read_end)
        _run_child(work, write_end, either, token)
    os.close(write_end)
    finished = False
    try:
        yield True
        failed = None  # (``either``'s failure here: told once the child is done, with the child's own)
        if either is not None and _take(token):
            try:
                either()
            except Exception as exc:
                failed = exc
        message = _read_all(read_end)  # the child closes its end when it exits
        _, status = os.waitpid(pid, 0)
        finished = True
        told = []
        if os.waitstatus_to_exitcode(status) != 0:
            told.append(message.decode("utf-8", "replace").strip() or f"the writing process ended with status {status}")
        if failed is not None:
            told.append(_told(failed))
        _tell(what, told, failed)
    finally:
        os.close(read_end)
        if token is not None:
            os.close(token)
        if not finished:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)


__all__ = ["beside", "can_fork"]
