"""What the ``nbprec compare`` command's early worker read before the readers ask for it.

``nbprec compare`` forks a worker before it imports numpy (:mod:`nbprec.compare.early`). That worker reads each
side's ``dump.json`` with the C scanner to find the pairs it can measure early, and sends each scan to the
command's process. The reader (:func:`nbprec.formats.msprobe_scan.scan_dump_json`) then takes the scan of a file
from here instead of reading and scanning the file again: 7 ms a side for a ``dump.json`` of 1,766 ops. The GE
graph of ``--graph`` comes the same way, read and converted (:func:`nbprec.graph.ge.read_ge_model`: 25-40 ms of
the command's opening of an NPU comparison, done while it imports numpy), and so do the index rows of a CANN
target (:mod:`nbprec.formats.cann_index`); each kind of result has its own ``kind``.

A result is taken only for the very file it was made of: the same device, inode, size, modification and change
times, as the worker saw them before it read the file. Any change to the file in between changes one of those,
and the reader then reads the file itself. Nothing here runs unless a worker registered its results
(:func:`provide`): the library, the daemon and the other commands never do.

This module imports neither numpy nor typing: the worker and the command's start use it.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    #: A file's identity: (device, inode, size, modification time, change time), the times in nanoseconds.
    Identity = tuple[int, int, int, int, int]

_source: Callable[[tuple], Any] | None = None


def identity(status: os.stat_result) -> Identity:
    """The identity of a file by its ``os.stat`` result."""
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns


def identity_of(path: str | os.PathLike[str]) -> Identity | None:
    """The identity of whatever ``path`` names now (a file or a folder, links followed), None when nothing
    does: what a result made of several files and folders records of each, and checks again."""
    try:
        return identity(os.stat(path))
    except (OSError, ValueError):
        return None


def key(status: os.stat_result, kind: str = "") -> tuple:
    """The key of a ``kind`` of result (``""``: a dump.json scan) made of the file whose ``os.stat`` result is
    ``status``: the worker sends each under it, the readers ask for it."""
    found = identity(status)
    return (*found, kind) if kind else found


def provide(source: Callable[[tuple], Any] | None) -> None:
    """Register ``source`` (key -> the result made of that file, or None), or remove it (None)."""
    global _source
    _source = source


def active() -> bool:
    """Whether a worker registered its results (a source is there to ask)."""
    return _source is not None


def take_key(key: tuple, wait: bool = False) -> Any:
    """The result a registered source has under ``key`` (one not made of a single file: a dump tree's, whose
    reader checks what it was made of itself), or None. ``wait``: when the source is still making results it was
    started to make before this process needs them (``source.wait``), wait for it first."""
    source = _source
    if source is None:
        return None
    found = source(key)
    if found is None and wait and hasattr(source, "wait"):
        source.wait()
        found = source(key)
    return found


def take(path: str | os.PathLike[str], kind: str = "") -> Any:
    """The ``kind`` of result (``""``: the scanner's) made of the regular file ``path`` as it is now, when a
    registered source has it; else None (the caller reads the file)."""
    source = _source
    if source is None:
        return None
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(status.st_mode):
        return None
    return source(key(status, kind))


__all__ = ["active", "identity", "identity_of", "key", "provide", "take", "take_key"]
