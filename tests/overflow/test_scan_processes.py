"""The overflow scan reads the payloads on forked processes (``parallel="processes"``, what ``"auto"`` takes in a
script or the command when the payloads are worth it): the same report as one thread, errors included, progress
counted, and threads where another thread runs."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
from overflow_support import assert_report_of_one_thread, mixed_run

import nbprec.overflow as ov
from nbprec._cores import usable_cores
from nbprec.errors import NbprecError
from nbprec.formats import open_dump

payloads_module = importlib.import_module("nbprec.overflow.payloads")

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or usable_cores() < 2, reason="forked processes need POSIX fork and two usable cores"
)


@pytest.fixture(autouse=True)
def small_batches(monkeypatch):
    """Batches of 4 tensors, so that both processes get some of the fixture's 32 payloads (the forked one is
    handed two batches first)."""
    monkeypatch.setattr(payloads_module, "BATCH_TENSORS", 4)


def _logged_dump(folder: Path, log: Path, fail: dict[str, type[Exception]] | None = None):
    """The dump in ``folder``, each of its payload reads appending ``pid thread`` to ``log`` (a file: a forked
    process's reads are not in this process's memory). ``fail``: tensor name -> error its payload read raises."""
    dump = open_dump(folder)
    read = dump.tensor

    def tensor(key):
        with log.open("a") as fh:
            fh.write(f"{os.getpid()} {threading.current_thread().name}\n")
        error = (fail or {}).get(key["name"])
        if error is not None:
            raise error(f"{key['name']}: damaged on purpose")
        return read(key)

    dump.tensor = tensor
    return dump


def _scan(folder: Path, parallel: str, log: Path, fail: dict[str, type[Exception]] | None = None, **kwargs):
    """The report of the dump in ``folder`` scanned as ``parallel`` says, its reads logged (:func:`_logged_dump`)."""
    return ov.scan(_logged_dump(folder, log, fail), parallel=parallel, **kwargs)


def _readers(log: Path) -> set[tuple[int, str]]:
    return {(int(pid), name) for pid, name in (line.split(" ", 1) for line in log.read_text().splitlines())}


def _serial(folder: Path, log: Path, monkeypatch, fail=None):
    """The report read on this thread alone (threads asked for, no payload large enough for one)."""
    with monkeypatch.context() as patch:
        patch.setattr(payloads_module, "PARALLEL_FROM", 1 << 62)
        return _scan(folder, "threads", log, fail)


def test_processes_give_the_report_of_one_thread(tmp_path, monkeypatch):
    folder = mixed_run(tmp_path / "run")
    calls: list[tuple[int, int]] = []
    forked = _scan(folder, "processes", tmp_path / "forked.log", progress=lambda d, t: calls.append((d, t)))
    serial = _serial(folder, tmp_path / "serial.log", monkeypatch)
    pids = {pid for pid, _ in _readers(tmp_path / "forked.log")}
    assert os.getpid() in pids and len(pids) == 2, pids  # this process read some payloads, a forked one the others
    assert _readers(tmp_path / "serial.log") == {(os.getpid(), threading.current_thread().name)}
    assert_report_of_one_thread(forked, serial, calls)


def test_a_payload_that_fails_in_a_forked_process_is_judged_by_its_statistics(tmp_path, monkeypatch):
    folder = mixed_run(tmp_path / "run")
    fail = {f"Tensor.op{order}.0.forward.output.0": NbprecError for order in (1, 5, 8)}  # wherever it is read
    forked = _scan(folder, "processes", tmp_path / "forked.log", fail)
    serial = _serial(folder, tmp_path / "serial.log", monkeypatch, fail)
    assert len({pid for pid, _ in _readers(tmp_path / "forked.log")}) == 2
    pd.testing.assert_frame_equal(forked.tensors, serial.tensors, check_exact=True)
    row = forked.tensors.set_index("name").loc["Tensor.op5.0.forward.output.0"]
    assert row["source"] == "statistics"
    assert "payload unreadable, statistics used" in row["note"] and "damaged on purpose" in row["note"]
    assert row["status"] == "nan"  # the writer's statistics saw the NaN


def test_an_unexpected_error_in_a_forked_process_reaches_the_caller(tmp_path):
    """The forked process ends on the error; its batch is judged again here, where the error shows."""
    folder = mixed_run(tmp_path / "run")
    fail = {f"Tensor.op{order}.0.forward.input.0": RuntimeError for order in range(10)}  # in every batch
    with pytest.raises(RuntimeError, match="damaged on purpose"):
        _scan(folder, "processes", tmp_path / "forked.log", fail)


def test_auto_forks_in_a_single_threaded_process_for_payloads_worth_it(tmp_path):
    """In a fresh interpreter (a script, the command: no other thread), ``"auto"`` forks when the cost model says
    the payloads are worth it; the report is the one threads give."""
    folder = mixed_run(tmp_path / "run")
    log = tmp_path / "auto.log"
    code = f"""
import importlib, os, threading
import pandas as pd
import nbprec.overflow as ov
from nbprec.formats import open_dump
payloads = importlib.import_module("nbprec.overflow.payloads")
payloads.TENSOR_SECONDS, payloads.BATCH_TENSORS = 1.0, 4  # every payload "worth" a process; batches for both
reports = []
for parallel in ("auto", "threads"):
    dump = open_dump({str(folder)!r})
    read = dump.tensor
    def tensor(key, read=read):
        with open({str(log)!r} if parallel == "auto" else os.devnull, "a") as fh:
            fh.write(f"{{os.getpid()}} {{threading.current_thread().name}}\\n")
        return read(key)
    dump.tensor = tensor
    reports.append(ov.scan(dump, parallel=parallel))
pd.testing.assert_frame_equal(reports[0].tensors, reports[1].tensors, check_exact=True)
print(threading.active_count(), reports[0].first_critical()["op"])
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "Tensor.op3.0.forward"], done.stdout
    assert len({pid for pid, _ in _readers(log)}) == 2


def test_auto_takes_threads_beside_other_threads(tmp_path, monkeypatch):
    """A process running other threads (a notebook's kernel runs its own) is not forked: threads read."""
    folder = mixed_run(tmp_path / "run")
    monkeypatch.setattr(payloads_module, "TENSOR_SECONDS", 1.0)  # every payload "worth" a process
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, name="a user's thread")
    other.start()
    try:
        _scan(folder, "auto", tmp_path / "beside.log")
    finally:
        stop.set()
        other.join()
    readers = _readers(tmp_path / "beside.log")
    assert {pid for pid, _ in readers} == {os.getpid()}
    assert any(name.startswith("nbprec-overflow") for _, name in readers), readers


def test_auto_reads_a_small_dump_here(tmp_path):
    """The fixture's payloads (12 MB) cost less than starting a process: no fork."""
    folder = mixed_run(tmp_path / "run")
    _scan(folder, "auto", tmp_path / "auto.log")
    assert {pid for pid, _ in _readers(tmp_path / "auto.log")} == {os.getpid()}


def test_parallel_must_be_a_known_mode(tmp_path):
    with pytest.raises(ValueError, match="parallel must be one of auto, processes, threads, not 'cores'"):
        ov.scan(open_dump(mixed_run(tmp_path / "run")), parallel="cores")


def test_an_error_in_progress_stops_the_forked_process(tmp_path, monkeypatch):
    """The caller's progress callback stops the scan (Ctrl-C in it, say): the error goes on, and the forked process
    is ended and waited for (no process left running or unreaped)."""
    folder = mixed_run(tmp_path / "run")
    fork, forked = os.fork, []

    def recorded_fork():
        pid = fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", recorded_fork)

    def progress(done, total):
        raise RuntimeError("stopped on purpose")

    with pytest.raises(RuntimeError, match="stopped on purpose"):
        _scan(folder, "processes", tmp_path / "forked.log", progress=progress)
    assert len(forked) == 1, forked
    assert not Path(f"/proc/{forked[0]}").exists()  # gone, and reaped: a zombie would still be listed


def test_headroom_on_processes_gives_the_report_of_threads(tmp_path, monkeypatch):
    """``headroom`` reads its payloads as ``scan`` does (:func:`nbprec.overflow.payloads.judge_rows`)."""
    folder = mixed_run(tmp_path / "run")
    forked = ov.headroom(_logged_dump(folder, tmp_path / "forked.log"), parallel="processes")
    threaded = ov.headroom(_logged_dump(folder, tmp_path / "threads.log"), parallel="threads")
    assert len({pid for pid, _ in _readers(tmp_path / "forked.log")}) == 2
    assert {pid for pid, _ in _readers(tmp_path / "threads.log")} == {os.getpid()}
    pd.testing.assert_frame_equal(forked.tensors, threaded.tensors, check_exact=True)
    pd.testing.assert_frame_equal(forked.ops, threaded.ops, check_exact=True)
    checked = forked.tensors["numel"].gt(0) & ~forked.tensors["dtype"].isin(["int64"])
    assert checked.sum() == 30 and forked.tensors["source"][checked].eq("payload").all()  # none from statistics
