"""The overflow scan reads large payloads on threads (``parallel="threads"``, what a notebook gets): the same table as
one thread, errors included; and each op's worst status taken in groupby's aggregations, as the Python definition
takes it. Forked processes: test_scan_processes.py."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from overflow_support import assert_report_of_one_thread, mixed_run

import nbprec.overflow as ov
from nbprec._cores import usable_cores
from nbprec.errors import NbprecError
from nbprec.formats import open_dump

scan_module = importlib.import_module("nbprec.overflow.scan")
payloads_module = importlib.import_module("nbprec.overflow.payloads")


def _scan(folder: Path, threads: bool, monkeypatch, fail: dict[str, type[Exception]] | None = None):
    """The report of the dump in ``folder``, with large payloads on threads or not; the threads that read them, and
    the progress calls. ``fail``: tensor name -> error its payload read raises."""
    monkeypatch.setattr(payloads_module, "PARALLEL_FROM", 128 << 10 if threads else 1 << 62)
    dump = open_dump(folder)
    readers: set[str] = set()
    read = dump.tensor

    def tensor(key):
        readers.add(threading.current_thread().name)
        error = (fail or {}).get(key["name"])
        if error is not None:
            raise error(f"{key['name']}: damaged on purpose")
        return read(key)

    dump.tensor = tensor
    calls: list[tuple[int, int]] = []
    report = ov.scan(dump, parallel="threads", progress=lambda done, total: calls.append((done, total)))
    return report, readers, calls


def test_threads_give_the_table_of_one_thread(tmp_path, monkeypatch):
    if usable_cores() < 2:
        pytest.skip("one usable core: the scan reads on this thread only")
    folder = mixed_run(tmp_path / "run")
    threaded, readers, calls = _scan(folder, True, monkeypatch)
    serial, serial_readers, _ = _scan(folder, False, monkeypatch)
    assert any(name.startswith("nbprec-overflow") for name in readers), readers
    assert serial_readers == {threading.current_thread().name}
    assert_report_of_one_thread(threaded, serial, calls)


def test_a_payload_that_fails_on_a_thread_is_judged_by_its_statistics(tmp_path, monkeypatch):
    if usable_cores() < 2:
        pytest.skip("one usable core: the scan reads on this thread only")
    folder = mixed_run(tmp_path / "run")
    fail = {"Tensor.op5.0.forward.output.0": NbprecError}
    threaded, readers, _ = _scan(folder, True, monkeypatch, fail)
    serial, _, _ = _scan(folder, False, monkeypatch, fail)
    assert any(name.startswith("nbprec-overflow") for name in readers)
    pd.testing.assert_frame_equal(threaded.tensors, serial.tensors, check_exact=True)
    row = threaded.tensors.set_index("name").loc["Tensor.op5.0.forward.output.0"]
    assert row["source"] == "statistics"
    assert "payload unreadable, statistics used" in row["note"] and "damaged on purpose" in row["note"]
    assert row["status"] == "nan"  # the writer's statistics saw the NaN


def test_an_unexpected_error_on_a_thread_reaches_the_caller(tmp_path, monkeypatch):
    if usable_cores() < 2:
        pytest.skip("one usable core: the scan reads on this thread only")
    folder = mixed_run(tmp_path / "run")
    with pytest.raises(RuntimeError, match="damaged on purpose"):
        _scan(folder, True, monkeypatch, {"Tensor.op4.0.forward.input.0": RuntimeError})


@pytest.mark.parametrize("where", ["a payload", "progress"])
def test_an_error_drops_the_payloads_not_started(tmp_path, monkeypatch, where):
    """The first large payload's read fails, or the caller's progress callback stops the scan (Ctrl-C in it, say):
    the threads then read a few payloads more (those under way), not all twenty."""
    if usable_cores() < 2:
        pytest.skip("one usable core: the scan reads on this thread only")
    folder = mixed_run(tmp_path / "run")
    monkeypatch.setattr(payloads_module, "_CHUNK", 1)
    monkeypatch.setattr(payloads_module, "PARALLEL_FROM", 128 << 10)
    dump = open_dump(folder)
    read, reads = dump.tensor, []

    def slow(key):
        reads.append(key["name"])
        if where == "a payload" and key["name"] == "Tensor.op0.0.forward.input.0":
            raise RuntimeError("damaged on purpose")
        time.sleep(0.02)
        return read(key)

    def progress(done, total):
        raise RuntimeError("stopped on purpose")

    dump.tensor = slow
    with pytest.raises(RuntimeError, match="on purpose"):
        ov.scan(dump, parallel="threads", progress=progress if where == "progress" else None)
    large = len(payloads_module.large_payloads(list(dump.columns.itertuples()), True))
    assert large == 20
    assert len(reads) < large / 2, reads


def test_worst_status_is_the_highest_ranked_or_the_first():
    rng = np.random.default_rng(11)
    statuses = ["nan", "inf", "saturated", "suspicious", "normal", "empty", "n/a"]
    rank = scan_module._STATUS_RANK
    frame = pd.DataFrame(
        {
            "step": rng.integers(0, 2, 3000),
            "rank": 0,
            "op": [f"op{i}" for i in rng.integers(0, 400, 3000)],
            # mostly rank-0 statuses: many ops hold only empty and n/a tensors, in either order
            "status": rng.choice(statuses, 3000, p=[0.02, 0.02, 0.02, 0.02, 0.07, 0.45, 0.40]),
        }
    )
    keys = ["step", "rank", "op"]
    got = scan_module._worst_status(frame, keys)
    want = frame.groupby(keys, sort=False)["status"].agg(lambda s: max(s, key=lambda v: rank.get(v, 0)))
    pd.testing.assert_series_equal(got, want, check_names=False)
    assert (want.isin(["empty", "n/a"])).sum() > 50  # the ties the first status decides were there
    assert set(want) == set(statuses)


def test_one_usable_core_reads_on_the_calling_thread(tmp_path):
    """A process confined to one core (its affinity mask) counts one usable core and reads every payload itself."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this system")
    folder = mixed_run(tmp_path / "run")
    code = f"""
import os, threading
os.sched_setaffinity(0, {{sorted(os.sched_getaffinity(0))[0]}})
import nbprec.overflow as ov
from nbprec._cores import usable_cores
from nbprec.formats import open_dump
dump = open_dump({str(folder)!r})
read, readers = dump.tensor, set()
def tensor(key):
    readers.add(threading.current_thread().name)
    return read(key)
dump.tensor = tensor
report = ov.scan(dump)
print(usable_cores(), sorted(readers), report.first_critical()["op"])
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "['MainThread']", "Tensor.op3.0.forward"], done.stdout
    if len(os.sched_getaffinity(0)) > 1:
        assert usable_cores() == len(os.sched_getaffinity(0))
