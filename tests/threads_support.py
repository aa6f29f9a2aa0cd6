"""What the tests of calls that release the GIL share: whether this thread runs Python while another thread is
inside the call (with the GIL held, this thread can run only before the call starts or after it ends)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def ticks_inside(call: Callable[[], object], attempts: int = 3) -> tuple[int, float]:
    """Run ``call`` in another thread while this one ticks; the ticks at which that thread was between 30% and
    90% of the CPU time it spent in the call, and the call's span in seconds.

    "Inside" is read on the other thread's own CPU clock, not on the wall clock: where the GIL changes hands at the
    call's start and end, and the machine's scheduler delays either thread, the wall-clock span can stretch while
    the call does no work, and ticks would land inside it. The call must keep its thread busy (computing or
    copying with the GIL released, as the kernels do): a sleep spends almost no CPU time, so where its few
    microseconds fall decides whether it has an inside.

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
    cpu: list[float] = []
    started = threading.Event()

    def run() -> None:
        started.set()
        span.append(time.perf_counter())
        cpu.append(time.thread_time())
        call()
        cpu.append(time.thread_time())
        span.append(time.perf_counter())

    other = threading.Thread(target=run)
    ticks = []  # the other thread's CPU time at each tick
    other.start()
    clock = time.pthread_getcpuclockid(other.ident)
    started.wait()
    while other.is_alive():
        try:
            ticks.append(time.clock_gettime(clock))
        except OSError:  # the thread has just ended: its clock with it
            break
    other.join()
    (c0, c1), (start, end) = cpu, span
    low, high = c0 + 0.3 * (c1 - c0), c0 + 0.9 * (c1 - c0)
    return sum(low < t < high for t in ticks), end - start
