"""The overflow scan reads large payloads on threads: the same table as one thread, errors included; and each op's
worst status taken in groupby's aggregations, as the Python definition takes it."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pandas as pd
import pytest

import nbprec.overflow as ov
from nbprec._cores import usable_cores
from nbprec.errors import NbprecError
from nbprec.formats import open_dump
from nbprec.formats.native import NativeDumpWriter

scan_module = importlib.import_module("nbprec.overflow.scan")

#: Elements of the large payloads: 200,000 float16 values hold 400 KB, beyond PARALLEL_FROM.
LARGE = 200_000


def _run(folder: Path) -> Path:
    """Ten ops of large float16, bfloat16 and float32 payloads (normal, saturated, NaN, inf), small ones between,
    an integer and an empty tensor."""
    rng = np.random.default_rng(5)
    with NativeDumpWriter(folder, mode="tensor") as w:
        for order in range(10):
            op = f"Tensor.op{order}.0.forward"
            x = rng.standard_normal(LARGE).astype(np.float16)
            out = (x * 8).astype([np.float16, ml_dtypes.bfloat16, np.float32][order % 3])
            if order == 3:
                out[17] = np.float16(65504)  # saturated
            if order == 5:
                out[::1000] = np.nan
            if order == 7:
                out[9] = np.inf
            tensors = {"input.0": x, "input.1": x[:50].copy(), "output.0": out}
            if order == 2:
                tensors["output.1"] = np.arange(7, dtype=np.int64)
                tensors["output.2"] = np.zeros((0, 3), np.float16)
            for key, array in tensors.items():
                role, slot = key.split(".")
                record = {"name": f"{op}.{key}", "op": op, "op_type": f"op{order}", "order": order}
                record.update(role=role, slot=slot, direction="forward", api=f"Tensor.op{order}")
                w.write_tensor(record, array)
    return folder


def _scan(folder: Path, threads: bool, monkeypatch, fail: dict[str, type[Exception]] | None = None):
    """The report of the dump in ``folder``, with large payloads on threads or not; the threads that read them, and
    the progress calls. ``fail``: tensor name -> error its payload read raises."""
    monkeypatch.setattr(scan_module, "PARALLEL_FROM", 128 << 10 if threads else 1 << 62)
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
    report = ov.scan(dump, progress=lambda done, total: calls.append((done, total)))
    return report, readers, calls


def test_threads_give_the_table_of_one_thread(tmp_path, monkeypatch):
    if usable_cores() < 2:
        pytest.skip("one usable core: the scan reads on this thread only")
    folder = _run(tmp_path / "run")
    threaded, readers, calls = _scan(folder, True, monkeypatch)
    serial, serial_readers, _ = _scan(folder, False, monkeypatch)
    assert any(name.startswith("nbprec-overflow") for name in readers), readers
    assert serial_readers == {threading.current_thread().name}
    pd.testing.assert_frame_equal(threaded.tensors, serial.tensors, check_exact=True)
    pd.testing.assert_frame_equal(threaded.ops, serial.ops, check_exact=True)
    status = dict(zip(threaded.tensors["name"], threaded.tensors["status"], strict=True))
    assert status["Tensor.op3.0.forward.output.0"] == "saturated"
    assert status["Tensor.op5.0.forward.output.0"] == "nan"
    assert status["Tensor.op7.0.forward.output.0"] == "inf"
    assert status["Tensor.op2.0.forward.output.1"] == "n/a"
    assert status["Tensor.op2.0.forward.output.2"] == "empty"
    assert threaded.first_critical()["op"] == "Tensor.op3.0.forward"
    total = len(threaded.tensors)
    done = [d for d, _ in calls]
    assert done == sorted(done) and done[-1] == total and {t for _, t in calls} == {total}


def test_a_payload_that_fails_on_a_thread_is_judged_by_its_statistics(tmp_path, monkeypatch):
    if usable_cores() < 2:
        pytest.skip("one usable core: the scan reads on this thread only")
    folder = _run(tmp_path / "run")
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
    folder = _run(tmp_path / "run")
    with pytest.raises(RuntimeError, match="damaged on purpose"):
        _scan(folder, True, monkeypatch, {"Tensor.op4.0.forward.input.0": RuntimeError})


@pytest.mark.parametrize("where", ["a payload", "progress"])
def test_an_error_drops_the_payloads_not_started(tmp_path, monkeypatch, where):
    """The first large payload's read fails, or the caller's progress callback stops the scan (Ctrl-C in it, say):
    the threads then read a few payloads more (those under way), not all twenty."""
    if usable_cores() < 2:
        pytest.skip("one usable core: the scan reads on this thread only")
    folder = _run(tmp_path / "run")
    monkeypatch.setattr(scan_module, "_CHUNK", 1)
    monkeypatch.setattr(scan_module, "PARALLEL_FROM", 128 << 10)
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
        ov.scan(dump, progress=progress if where == "progress" else None)
    large = len(scan_module._large_payloads(list(dump.columns.itertuples()), True))
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
    folder = _run(tmp_path / "run")
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
