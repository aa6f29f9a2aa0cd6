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

    The rate (and the time left from it) counts from the first report: what was done before it (pairs measured
    while the command started, say, reported at once) did not take the bar's time, and a rate over it would be
    nonsense. The first report has no rate yet, so it prints none.

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
        self._first: tuple[int, float] | None = None  # (done, when) at the first report: where the rate starts
        self._last = 0.0
        self._shown = 0  # length of the line on a terminal, which the next one writes over

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if self._first is None:
            self._first = (done, now)
        if done < total and now - self._last < self.min_interval:
            return
        self._last = now
        frac = done / total if total else 1.0
        filled = int(frac * self.width)
        line = f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}"
        first_done, first_time = self._first
        if done > first_done and now > first_time:
            rate = (done - first_done) / (now - first_time)
            shown = f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"  # (a slow loop's 0.5/s is not 0/s)
            line += f"  {shown}/s  eta {(total - done) / rate:,.0f}s"
        tty = getattr(self.stream, "isatty", lambda: False)()
        end = "\n" if done >= total or not tty else ""
        if tty:  # over the line before, which may have been longer
            line, self._shown = line.ljust(self._shown), len(line)
        self.stream.write(("\r" if tty else "") + line + end)
        self.stream.flush()
