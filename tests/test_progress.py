"""The text progress bar (:class:`nbprec._progress.TextProgress`): its rate counts from its first report."""

from __future__ import annotations

import io
import re

import pytest

from nbprec import _progress
from nbprec._progress import TextProgress


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(_progress.time, "perf_counter", fake)
    return fake


def test_work_done_before_the_first_report_is_not_in_the_rate(clock: _Clock) -> None:
    """A comparison whose first 600 pairs were measured while the command started reports them at once: the
    rate is that of the pairs measured after, not 600 pairs over the microseconds since the bar was made."""
    out = io.StringIO()
    bar = TextProgress("comparing", stream=out, min_interval=0)
    clock.now += 1e-6
    bar(600, 1000)
    clock.now += 0.5
    bar(800, 1000)
    clock.now += 0.5
    bar(1000, 1000)
    first, middle, last = out.getvalue().splitlines()
    assert first == "comparing [##################............] 600/1000"  # no rate yet: nothing to time
    assert middle.endswith(" 800/1000  400/s  eta 0s")
    assert last.endswith(" 1000/1000  400/s  eta 0s")


def test_rate_and_time_left_of_an_ordinary_loop(clock: _Clock) -> None:
    out = io.StringIO()
    bar = TextProgress("reading", stream=out, min_interval=0)
    for done in range(1, 5):
        clock.now += 2.0
        bar(done, 10)
    lines = out.getvalue().splitlines()
    assert "/s" not in lines[0]
    assert lines[-1].endswith(" 4/10  0.5/s  eta 12s")  # 3 items in 6 s since the first report: 6 left, 12 s
    assert [re.search(r" (\d+)/10", line).group(1) for line in lines] == ["1", "2", "3", "4"]


def test_reports_closer_than_the_interval_are_skipped_but_not_the_last(clock: _Clock) -> None:
    out = io.StringIO()
    bar = TextProgress("comparing", stream=out, min_interval=0.25)
    bar(1, 4)
    clock.now += 0.1
    bar(2, 4)  # too soon: skipped
    clock.now += 0.1
    bar(4, 4)  # the end is always said
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[-1].endswith(" 4/4  15/s  eta 0s")


def test_a_terminal_line_is_written_over_in_full(clock: _Clock) -> None:
    """On a terminal each report rewrites the line; a shorter one is padded over the longer one before it."""
    out = _Terminal()
    bar = TextProgress("comparing", stream=out, min_interval=0)
    bar(1, 100)
    clock.now += 0.001
    bar(50, 100)  # a long line: a rate of 49,000/s
    clock.now += 100.0
    bar(51, 100)  # a shorter rate
    writes = out.getvalue().split("\r")[1:]
    assert len(writes[2]) >= len(writes[1].rstrip())
    assert writes[2].rstrip().endswith("51/100  0.5/s  eta 98s")
