"""What the tests of calls that release the GIL share: whether this thread runs Python while another thread is
inside the call (with the GIL held, none of this thread's ticks could fall strictly inside it)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def ticks_inside(call: Callable[[], object], attempts: int = 3) -> tuple[int, float]:
    """Run ``call`` in another thread while this one ticks; the ticks that fell between 30% and 90% of the
    call's span (clear of its start and end, where the GIL changes hands), and the span in seconds.

    Up to ``attempts`` calls, until one has a tick inside: on a loaded machine (a test suite beside CI on two
    cores) this thread may not be scheduled at all during one call. A call that holds the GIL has no tick inside
    in any attempt, so retrying cannot hide one."""
    inside, seconds = 0, 0.0
    for _ in range(attempts):
        inside, seconds = _ticks_inside_once(call)
        if inside:
            break
    return inside, seconds


def _ticks_inside_once(call: Callable[[], object]) -> tuple[int, float]:
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
