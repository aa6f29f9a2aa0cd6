"""A minimal progress reporter for long loops (no dependency; tqdm-like line on a stream)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

#: A progress callback receives (done, total).
ProgressCallback = Callable[[int, int], None]


class TextProgress:
    """Prints ``label [#####.....] done/total  rate  eta`` to a stream, at most a few times a second.

    Examples
    --------
    >>> bar = TextProgress("comparing", stream=sys.stdout, min_interval=0)
    >>> bar(5, 10)  # doctest: +ELLIPSIS
    comparing ...5/10...
    """

    def __init__(self, label: str, stream: TextIO | None = None, min_interval: float = 0.25, width: int = 30) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval = min_interval
        self.width = width
        self._start = time.perf_counter()
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if done < total and now - self._last < self.min_interval:
            return
        self._last = now
        frac = done / total if total else 1.0
        filled = int(frac * self.width)
        elapsed = now - self._start
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else 0.0
        line = (
            f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}  {rate:,.0f}/s  eta {eta:,.0f}s"
        )
        tty = getattr(self.stream, "isatty", lambda: False)()
        end = "\n" if done >= total or not tty else ""
        self.stream.write(("\r" if tty else "") + line + end)
        self.stream.flush()
