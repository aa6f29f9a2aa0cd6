"""What the tests of calls that release the GIL share: whether this thread runs Python while another thread is
inside the call (with the GIL held, none of this thread's ticks could fall strictly inside it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def ticks_inside(call: Callable[[], object]) -> tuple[int, float]:
    """Run ``call`` in another thread while this one ticks; the ticks that fell between 30% and 90% of the
    call's span (clear of its start and end, where the GIL changes hands), and the span in seconds."""
    span: list[float] = []
    started = threading.Event()

    def run() -> None:
        started.set()
        span.append(time.perf_counter())
        call()
        span.append(time.perf_counter())

    other = threading.Thread(target=run)
    ticks = []
    other.start()
    started.wait()
    while other.is_alive():
        ticks.append(time.perf_counter())
    other.join()
    start, end = span
    return sum(start + 0.3 * (end - start) < t < end - 0.1 * (end - start) for t in ticks), end - start
