"""Which entries of a folder are dumps nbprec reads: the file browser's dump icon and context menu ask this.

Each entry is probed with :func:`nbprec.guess_format`, the rule :func:`nbprec.open` itself follows, so the icon
appears exactly on what ``nbprec.open`` opens. Probing reads names and a few first bytes, never payloads; a
time budget bounds a folder with many entries (the rest is reported as not probed), and :class:`ProbeCache`
remembers answers by modification time so a file browser refreshing every few seconds costs nothing.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

#: Entries never probed: hidden ones, and folders that are never dumps but can be deep.
SKIPPED = frozenset({"__pycache__", "node_modules", "site-packages"})


@dataclass
class ProbeCache:
    """Formats found, by path and modification time (one per server, kept by the extension; bounded).

    Safe to share between the threads that probe for concurrent requests.

    Attributes
    ----------
    limit
        Entries kept; the oldest go first.
    """

    limit: int = 4096
    _formats: dict[tuple[str, int], str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, path: str, mtime_ns: int) -> str | None:
        """The format recorded for ``path`` at ``mtime_ns`` ('' for not a dump), or None if not probed."""
        with self._lock:
            return self._formats.get((path, mtime_ns))

    def put(self, path: str, mtime_ns: int, fmt: str) -> None:
        """Record the format of ``path`` at ``mtime_ns``."""
        with self._lock:
            if len(self._formats) >= self.limit:
                del self._formats[next(iter(self._formats))]
            self._formats[(path, mtime_ns)] = fmt


def probe(path: str | os.PathLike[str]) -> str:
    """The format :func:`nbprec.guess_format` gives ``path``, or ``''`` when nbprec does not read it."""
    from nbprec.errors import NbprecError
    from nbprec.formats import guess_format

    try:
        return guess_format(path)
    except (NbprecError, OSError):
        return ""


def detect_dumps(
    folder: str | os.PathLike[str], *, budget: float = 2.0, cache: ProbeCache | None = None
) -> tuple[dict[str, str], bool]:
    """The entries of ``folder`` that are dumps, by name, with their format; and whether all were probed.

    Parameters
    ----------
    folder
        The folder whose entries (files and sub-folders) are probed; the folder itself is not.
    budget
        Seconds to spend probing; entries left when it runs out are not reported and the second value is
        False (the caller may ask again: answers so far are cached).
    cache
        Answers by path and modification time.

    Examples
    --------
    >>> detect_dumps("tests/fixtures/msprobe")  # doctest: +SKIP
    ({'bf16_tensor_mix': 'msprobe', 'fp32_tensor_mix': 'msprobe'}, True)
    """
    deadline = time.monotonic() + budget
    found: dict[str, str] = {}
    try:
        with os.scandir(folder) as scan:
            entries = sorted(scan, key=lambda e: e.name)
    except OSError:
        return {}, True
    for entry in entries:
        if entry.name.startswith(".") or entry.name in SKIPPED:
            continue
        try:
            mtime = entry.stat().st_mtime_ns
        except OSError:
            continue
        fmt = cache.get(entry.path, mtime) if cache is not None else None
        if fmt is None:
            if time.monotonic() > deadline:
                return found, False
            fmt = probe(Path(entry.path))
            if cache is not None:
                cache.put(entry.path, mtime, fmt)
        if fmt:
            found[entry.name] = fmt
    return found, True
