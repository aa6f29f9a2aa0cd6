"""Writing an output file that may already exist: its old content overwritten in place, not thrown away first.

Commands write the same files into the same folder each time they are re-run (``nbprec compare -o OUT``).
Opening an existing file with ``open(path, "w")`` empties it first, and on a file system such as ext4 mounted
with ``discard`` (common on virtual machines), freeing blocks already written to the disk waits for the device
to discard them: the six files of a comparison (1.9 MB) took 3.8 ms to write over their previous versions, and
0.5 ms overwritten in place (``bench/README.md``). :func:`rewriting` opens the file without emptying it, and when
the writing ends cuts what is left of the old content beyond the new (only that part's blocks are freed, none
when the size did not change).

The file's content afterwards is what ``open(path, "w")`` would have left, also when the writing fails with an
exception (the file is then cut where the writing stopped). A process killed outright (``SIGKILL``) while writing
leaves the new content's start followed by the old content's end, where ``"w"`` would have left the start alone.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO


@contextlib.contextmanager
def rewriting(
    path: str | os.PathLike[str], *, encoding: str = "utf-8", errors: str = "strict", newline: str | None = None
) -> Iterator[IO[str]]:
    """A text file open to write ``path``'s whole new content, as ``open(path, "w", ...)`` gives (created with
    the same permissions when missing), except that an existing file's old content is overwritten in place and
    its tail cut when the ``with`` block ends, instead of being discarded when the file is opened."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)  # (as open's)
    fd = os.open(path, flags, 0o666)
    try:
        handle = open(fd, "w", encoding=encoding, errors=errors, newline=newline)  # noqa: SIM115 (closed below)
    except BaseException:
        os.close(fd)
        raise
    with handle:
        try:
            yield handle
        finally:
            try:
                handle.flush()
            finally:  # (cut even when the flush failed: what was written stands, the old tail goes)
                _cut(fd)


def _cut(fd: int) -> None:
    """Cut the regular file ``fd`` where its writing ended (a FIFO or a device has no old content to cut). A file
    system that cannot cut files is an error only when there is something to cut."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        return
    end = os.lseek(fd, 0, os.SEEK_CUR)
    try:
        os.ftruncate(fd, end)
    except OSError:
        if info.st_size != end:
            raise
