"""Work done beside this process: a forked child that runs one function (writing files, say) while this process
goes on with other work, on another core.

:func:`beside` is a context manager: the child starts on entry and the body runs meanwhile; on leaving, this
process waits for the child and raises what it raised. Where a fork is unsafe or unavailable (not POSIX, or
other threads run in this process: a forked copy could inherit a lock one of them holds; in a notebook, say),
the function runs in this process on leaving instead, with the same result. Nothing crosses the process
boundary but the child's exit status and, on failure, its error message (text through a pipe).
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


def _run_child(work: Callable[[], None], pipe: int) -> None:
    """Body of the child: run ``work``, exit 0; on any error, send its message and exit 1. Never returns."""
    status = 1
    try:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C stops the child at once, as the parent
        work()
        status = 0
    except BaseException as exc:
        import traceback  # (here: the command's start-up does not pay for it)

        text = str(exc) if isinstance(exc, NbprecError) else "".join(traceback.format_exception_only(exc)).strip()
        with contextlib.suppress(OSError):
            os.write(pipe, text.encode("utf-8", "backslashreplace")[:_MESSAGE_BYTES])
    finally:
        with contextlib.suppress(OSError):
            os.close(pipe)
        os._exit(status)  # no atexit handlers, no flush of buffers the parent also holds


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, _MESSAGE_BYTES):
        chunks.append(chunk)
    return b"".join(chunks)


@contextlib.contextmanager
def beside(work: Callable[[], None], what: str) -> Iterator[bool]:
    """Run ``work()`` in a forked child while the ``with`` body runs in this process; yields whether it was
    forked.

    On leaving, waits for the child; its failure is raised as :class:`~nbprec.errors.NbprecError` ``"{what}:
    {message}"``. When the body raises, the child is stopped and waited for, and the body's error goes on.
    Without a safe fork (:func:`can_fork`) ``work()`` runs here when the body is done.
    """
    if not can_fork():
        yield False
        work()
        return
    for stream in (sys.stdout, sys.stderr):  # what is buffered now is written once, not again by the child
        with contextlib.suppress(Exception):
            stream.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        _run_child(work, write_end)
    os.close(write_end)
    finished = False
    try:
        yield True
        message = _read_all(read_end)  # the child closes its end when it exits
        _, status = os.waitpid(pid, 0)
        finished = True
        if os.waitstatus_to_exitcode(status) != 0:
            told = message.decode("utf-8", "replace").strip()
            raise NbprecError(f"{what}: {told or f'the writing process ended with status {status}'}")
    finally:
        os.close(read_end)
        if not finished:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)


__all__ = ["beside", "can_fork"]
