"""Work beside the process (:mod:`nbprec._beside`): a forked child writes while the body runs; its failure is
reported with its message; a failing body stops it; the work left to either side runs once, on the side free
first; without a safe fork the work runs in this process; and the ``nbprec compare -o`` files are the same either
way."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from nbprec import _beside
from nbprec._beside import beside, can_fork
from nbprec.cli import main
from nbprec.errors import NbprecError
from nbprec.formats.native import NativeDumpWriter

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")


@pytest.fixture
def forkable(monkeypatch):
    """A fork is taken as safe although other tests may have left idle threads (Dask's offload thread)."""
    monkeypatch.setattr(_beside, "can_fork", lambda: True)


def _wait_for(path: Path, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_the_work_runs_in_another_process_while_the_body_runs(tmp_path, forkable):
    started, go, marker = tmp_path / "started", tmp_path / "go", tmp_path / "pid"

    def work() -> None:  # starts, then waits for the body: it can only finish if both run at once
        started.write_text("")
        if _wait_for(go):
            marker.write_text(str(os.getpid()))

    with beside(work, "writing") as forked:
        assert _wait_for(started), "the work did not start while the body ran"
        go.write_text("")
    assert forked
    assert int(marker.read_text()) != os.getpid()


def test_a_failing_child_is_reported_with_its_message(tmp_path, forkable):
    def work() -> None:
        raise OSError(28, "No space left on device", str(tmp_path / "big.csv"))

    with (
        pytest.raises(NbprecError, match=r"writing the CSVs: .*No space left on device.*big\.csv"),
        beside(work, "writing the CSVs"),
    ):
        pass


def test_a_failing_body_stops_the_child_and_its_error_goes_on(tmp_path, forkable):
    marker = tmp_path / "late"
    with pytest.raises(ValueError, match="body"), beside(lambda: (time.sleep(2), marker.write_text("x")), "w"):
        raise ValueError("body")
    time.sleep(2.5)
    assert not marker.exists()  # killed, not left running


def _note_pid(path: Path) -> None:
    with open(path, "a") as fh:
        fh.write(f"{os.getpid()}\n")


def test_the_shared_work_runs_once_in_the_child_when_the_body_is_still_busy(tmp_path, forkable):
    ran = tmp_path / "either"
    with beside(lambda: None, "w", either=lambda: _note_pid(ran)):
        assert _wait_for(ran), "the child did not take the shared work while the body ran"  # (the body waits)
    pids = ran.read_text().split()
    assert len(pids) == 1 and int(pids[0]) != os.getpid()


def test_the_shared_work_runs_once_here_when_the_child_is_still_busy(tmp_path, forkable):
    ran = tmp_path / "either"
    # the child's own work ends only once the shared work has run: it can only have run here
    with beside(lambda: _wait_for(ran), "w", either=lambda: _note_pid(ran)):
        pass
    assert ran.read_text().split() == [str(os.getpid())]


def test_a_failure_of_the_shared_work_here_is_told_after_the_child_is_done(tmp_path, forkable):
    started, done = tmp_path / "shared work started", tmp_path / "child done"

    def fail() -> None:
        started.write_text("")
        raise OSError(28, "No space left on device", str(tmp_path / "b.csv"))

    # the child's own work ends only once the shared work has started: it is taken here, and fails
    with (
        pytest.raises(NbprecError, match=r"^writing: .*No space left on device.*b\.csv"),
        beside(lambda: _wait_for(started) and done.write_text(""), "writing", either=fail),
    ):
        pass
    assert done.exists()  # waited for, not killed


def test_failures_of_the_child_and_of_the_shared_work_are_both_told(tmp_path, forkable):
    started = tmp_path / "shared work started"

    def child() -> None:
        _wait_for(started)  # (the shared work is taken here meanwhile)
        raise ValueError("the child's")

    def shared() -> None:
        started.write_text("")
        raise ValueError("the shared work's")

    with (
        pytest.raises(NbprecError, match=r"^w: ValueError: the child's; ValueError: the shared work's$"),
        beside(child, "w", either=shared),
    ):
        pass


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files in /proc")
def test_a_fork_that_fails_is_raised_and_leaves_no_pipe_open(monkeypatch, forkable):
    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(_beside.os, "fork", no_fork)
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(BlockingIOError), beside(lambda: None, "w", either=lambda: None):
        pass
    assert len(os.listdir("/proc/self/fd")) == before


def _raises(exc: Exception):
    def run() -> None:
        raise exc

    return run


def test_with_other_threads_the_work_runs_here_after_the_body(tmp_path):
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not can_fork()
        order = []
        with beside(lambda: order.append(("work", os.getpid())), "w") as forked:
            order.append(("body", os.getpid()))
        assert not forked and order == [("body", os.getpid()), ("work", os.getpid())]
        order.clear()
        with beside(lambda: order.append("work"), "w", either=lambda: order.append("either")) as forked:
            order.append("body")
        assert not forked and order == ["body", "work", "either"]
        with (
            pytest.raises(NbprecError, match=r"^w: OSError: one; ValueError: two$"),
            beside(_raises(OSError("one")), "w", either=_raises(ValueError("two"))),
        ):
            pass
    finally:
        stop.set()
        thread.join()


def _pair(root: Path) -> tuple[Path, Path]:
    values = np.random.default_rng(3).standard_normal((12, 500)).astype(np.float32)
    for side in ("t", "b"):
        with NativeDumpWriter(root / side, run=side) as writer:
            for i in range(12):
                record = {"name": f"Functional.linear.{i}.forward.output.0", "op": f"Functional.linear.{i}.forward"}
                record.update(order=i, api="linear", call=i, direction="forward", role="output", slot="0")
                writer.write_tensor(record, values[i].astype(np.float16) if side == "t" else values[i])
    return root / "t", root / "b"


def test_compare_writes_the_same_files_forked_or_not(tmp_path, monkeypatch, capsys):
    target, bench = _pair(tmp_path)
    monkeypatch.setattr(_beside, "can_fork", lambda: True)  # the first run writes beside, the second here
    assert main(["compare", str(target), str(bench), "-o", str(tmp_path / "forked"), "--no-progress"]) == 0
    monkeypatch.setattr(_beside, "can_fork", lambda: False)
    assert main(["compare", str(target), str(bench), "-o", str(tmp_path / "here"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.count("wrote ") == 2
    names = sorted(p.name for p in (tmp_path / "here").iterdir())
    assert "compare_msprobe.csv" in names and "compare_msaccucmp.csv" in names
    assert names == sorted(p.name for p in (tmp_path / "forked").iterdir())
    for name in names:
        if name != "comparison.json":  # it records the dump paths only; the same, but checked below anyway
            assert (tmp_path / "forked" / name).read_bytes() == (tmp_path / "here" / name).read_bytes(), name
    assert (tmp_path / "forked" / "comparison.json").read_text() == (tmp_path / "here" / "comparison.json").read_text()


@pytest.mark.parametrize("taken", ["compare_msaccucmp.csv", "compare_msprobe.csv"])
@pytest.mark.parametrize("fork", [True, False])
def test_compare_reports_either_interop_layout_it_could_not_write_and_writes_the_other(
    tmp_path, capsys, monkeypatch, taken, fork
):
    monkeypatch.setattr(_beside, "can_fork", lambda: fork)
    target, bench = _pair(tmp_path)
    out = tmp_path / "out"
    (out / taken).mkdir(parents=True)  # a folder where the file goes: whichever process writes it fails
    assert main(["compare", str(target), str(bench), "-o", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "writing compare_msaccucmp.csv and compare_msprobe.csv" in err and "Is a directory" in err
    other = {"compare_msaccucmp.csv", "compare_msprobe.csv"} - {taken}
    assert (out / other.pop()).is_file() and (out / "tensors.csv").is_file()
