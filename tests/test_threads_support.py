"""tests/threads_support.py's ``ticks_inside``: what the GIL tests rely on."""

from __future__ import annotations

import hashlib
import random

from threads_support import ticks_inside


def test_a_call_that_holds_the_gil_has_no_tick_inside_in_any_attempt():
    # list.sort of floats compares them in C without running Python code: the GIL is held throughout
    rng = random.Random(1)
    values = [rng.random() for _ in range(600_000)]
    inside, seconds = ticks_inside(lambda: sorted(values), attempts=3)
    assert seconds > 0.05, seconds  # long enough to be ticked in, had the GIL been released
    assert inside == 0


def test_a_call_that_releases_the_gil_is_ticked_inside():
    data = bytes(512 << 20)  # hashlib releases the GIL while it hashes more than 2 KiB
    inside, seconds = ticks_inside(lambda: hashlib.sha256(data).digest())
    assert seconds > 0.05, seconds
    assert inside > 0
