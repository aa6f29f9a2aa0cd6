"""The executor interface: every backend gives the table of this thread; batches and the cost model are
shared; a backend is a few lines; Ctrl-C in a comparison on forked processes leaves no process behind."""

from __future__ import annotations

import importlib
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pandas as pd
import pytest
from damaged_msprobe import DAMAGES, damaged_copy

import nbprec
from nbprec.compare import compare
from nbprec.compare.executors import (
    BatchRun,
    Executor,
    ForkExecutor,
    FuturesExecutor,
    InlineExecutor,
    ThreadExecutor,
    local_executor,
)
from nbprec.compare.workers import BatchLimits, batches
from nbprec.dump import Dump
from nbprec.dump_index import make_index
from nbprec.errors import ComparisonError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
TARGET, BENCH = FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix"
FORK = hasattr(os, "fork") and sys.platform != "darwin"


class PickledInline(Executor):
    """A third backend in three lines: each batch as its portable call, through pickle (as to another machine),
    measured here, last batch first."""

    def submit_batches(self, batches, task):
        return BatchRun(pickle.loads(pickle.dumps(task.portable(batch)))() for batch in reversed(batches))


def test_a_new_backend_in_a_few_lines_gives_the_same_table(make_mlp_dump):
    target, bench = make_mlp_dump(name="t", dtype=ml_dtypes.bfloat16, fault_at=5), make_mlp_dump(name="b")
    seen = []
    remote = compare(target, bench, executor=PickledInline(), progress=lambda *a: seen.append(a))
    pd.testing.assert_frame_equal(remote.table, compare(target, bench, workers=1).table)
    measured = int((remote.table["compare_mode"] == "tensor").sum())
    assert seen[-1] == (measured, measured)


@pytest.mark.parametrize("executor", ["inline", "threads", "fork"])
def test_every_local_backend_gives_the_table_of_a_portable_run(executor):
    if executor == "fork" and not FORK:
        pytest.skip("forked workers need fork()")
    chosen = {"inline": InlineExecutor(), "threads": ThreadExecutor(2), "fork": ForkExecutor(2)}[executor]
    pd.testing.assert_frame_equal(
        compare(TARGET, BENCH, executor=chosen).table, compare(TARGET, BENCH, executor=PickledInline()).table
    )


def test_a_process_pool_is_a_backend_whose_workers_read_the_files():
    """A spawned pool shares nothing with this process: the index rows and payload sources travel, and the
    workers open the payload files themselves."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import resource_tracker

    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        pooled = compare(TARGET, BENCH, executor=FuturesExecutor(pool, slots=2))
    stop = getattr(resource_tracker._resource_tracker, "_stop", None)
    if stop is not None:  # its helper process: no child of this process is left behind
        stop()
    pd.testing.assert_frame_equal(pooled.table, compare(TARGET, BENCH, workers=1).table)


def test_batches_keep_steps_and_ranks_apart_and_hold_every_pair_once():
    rng = np.random.default_rng(1)
    numel = rng.integers(1, 1 << 22, 600).astype(float)
    groups = rng.integers(0, 4, 600)
    jobs = [(i, "tensor", i, i) for i in rng.permutation(600)]
    limits = BatchLimits(jobs=16, elements=1 << 24, tail=1 << 18, by_rank=True)
    runs = batches(jobs, numel, limits, slots=4, groups=groups)
    assert sorted(job for run in runs for job in run) == sorted(jobs)
    assert all(len({groups[job[0]] for job in run}) == 1 for run in runs)
    assert all(len(run) <= 16 for run in runs)
    one_group = batches(jobs, numel, limits, slots=4)
    sizes = [numel[job[0]] for run in one_group for job in run]
    assert sizes == sorted(sizes, reverse=True)  # largest first when ranks are not kept apart


def test_threads_take_a_few_small_pairs_at_a_time_and_large_ones_alone():
    """A thread takes several small pairs per hand-over (each one cost a lock, a queue and a wake-up of the
    caller's thread, as much as a small pair's Python) and a large pair on its own; every pair once."""
    from nbprec.compare.executors import THREAD_BATCH_JOBS

    small = [(i, "tensor", i, i) for i in range(400)]  # msprobe's usual payloads: 64 K elements
    numel = np.full(420, 1 << 16, dtype=float)
    numel[400:] = 1 << 23  # and twenty of 8 M elements
    large = [(i, "tensor", i, i) for i in range(400, 420)]
    runs = batches(small + large, numel, ThreadExecutor.limits, slots=2)
    assert sorted(job for run in runs for job in run) == sorted(small + large)
    assert all(len(run) == 1 for run in runs if run[0] in large)
    sizes = [len(run) for run in runs if run[0] in small]
    assert max(sizes) == THREAD_BATCH_JOBS and sum(sizes) / len(sizes) > 2


def test_threads_read_their_batches_payloads_ahead_in_one_call(monkeypatch):
    """On threads, the small payloads of a batch are read ahead in one call that holds the GIL for none of them
    (``_zipdir.read_small_many``), and each pair then takes its two from there: no payload is read one by one."""
    from nbprec.formats import _files, _ptzip

    if _files._read_small_many_c is None:
        pytest.skip("the C directory reader is not built")
    calls = {"one": 0, "many": 0}
    one, many = _ptzip._read_small_c, _files._read_small_many_c

    def read_one(path, limit, wait=True):
        calls["one"] += 1
        return one(path, limit, wait)

    def read_many(paths, limit, archives, wait=True):
        calls["many"] += 1
        return many(paths, limit, archives, wait)

    monkeypatch.setattr(_ptzip, "_read_small_c", read_one)
    monkeypatch.setattr(_files, "_read_small_many_c", read_many)
    threads = compare(TARGET, BENCH, executor=ThreadExecutor(2))
    assert calls["many"] > 0 and calls["one"] == 0, calls
    calls["many"] = 0
    inline = compare(TARGET, BENCH, executor=InlineExecutor())
    assert calls["many"] == 0 and calls["one"] > 0, calls  # (one at a time elsewhere)
    pd.testing.assert_frame_equal(threads.table, inline.table)


def test_threads_measure_a_batchs_small_pairs_in_one_kernel_call(monkeypatch):
    """On threads, the small pairs of a batch go through the kernel together (``pair_metrics_many``), most pairs
    of the dump that way (or taking the values of the pair whose bytes they repeat), and none through one
    ``pair_metrics`` or ``pair_sums`` call each; the table is the one measured inline."""
    from nbprec.compare import _sums

    if _sums.FUSED is None:
        pytest.skip("the compiled kernel is not built")
    real = _sums.FUSED
    counts = {"many": 0, "pairs in many": 0, "one": 0}

    class Counting:
        def __getattr__(self, name):
            return getattr(real, name)

        def pair_metrics_many(self, calls):
            counts["many"] += 1
            counts["pairs in many"] += len(calls)
            return real.pair_metrics_many(calls)

        def pair_metrics(self, *args):
            counts["one"] += 1
            return real.pair_metrics(*args)

        def pair_sums(self, *args):
            counts["one"] += 1
            return real.pair_sums(*args)

    monkeypatch.setattr(_sums, "FUSED", Counting())
    small_pairs = importlib.import_module("nbprec.compare.small_pairs")
    monkeypatch.setattr(small_pairs, "FUSED", _sums.FUSED)
    small_pairs.RECENT.reused = 0
    threads = compare(TARGET, BENCH, executor=ThreadExecutor(2))
    compared = int((threads.table["compare_mode"] == "tensor").sum())
    taken = small_pairs.RECENT.reused  # (pairs repeating a measured pair's bytes take its values: no kernel call)
    assert counts["many"] > 0 and counts["pairs in many"] + taken > compared // 2, (counts, taken, compared)
    assert counts["one"] == 0, counts  # (every pair it takes measured together; the fixture holds no NaN)
    pd.testing.assert_frame_equal(threads.table, compare(TARGET, BENCH, executor=InlineExecutor()).table)


def test_a_batch_whose_small_pairs_fail_together_is_measured_pair_by_pair(monkeypatch):
    """Should measuring a batch's small pairs together raise, each pair is measured on its own (where such an
    error becomes that pair's reason): the table is the one measured inline."""
    from nbprec.compare import engine

    calls = []

    def broken(items, kind):
        calls.append(len(items))
        raise ValueError("a batch that cannot be measured together")

    monkeypatch.setattr(engine, "small_pairs", broken)
    threads = compare(TARGET, BENCH, executor=ThreadExecutor(2))
    assert calls and sum(calls) > 10, calls  # (the batches' small pairs were all taken to it)
    pd.testing.assert_frame_equal(threads.table, compare(TARGET, BENCH, executor=InlineExecutor()).table)


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_dump_compares_the_same_on_threads_reading_ahead(tmp_path, damage):
    """Reading ahead reads the same files the same way: a payload it refuses (linked out, truncated, swapped)
    is read again by the pair's own path, which says why, as without it."""
    run = damaged_copy(tmp_path, TARGET, damage)
    threads, inline = (compare(run, BENCH, executor=e) for e in (ThreadExecutor(2), InlineExecutor()))
    pd.testing.assert_frame_equal(threads.table, inline.table)
    assert threads.meta["problems"] == inline.meta["problems"]


def test_local_executor_follows_parallel_and_the_cost_model(monkeypatch):
    from nbprec.compare import workers

    monkeypatch.setattr(workers.threading, "active_count", lambda: 1)
    jobs = [(i, "tensor", i, i) for i in range(200)]
    large, small = np.full(200, 1 << 20, dtype=float), np.full(200, 16, dtype=float)
    expected = ForkExecutor if FORK else (ThreadExecutor, InlineExecutor)
    assert isinstance(local_executor("auto", 2, jobs, large), expected)
    assert isinstance(local_executor("processes", 1, jobs, large), InlineExecutor)
    assert isinstance(local_executor("threads", 2, jobs, large), ThreadExecutor)
    assert not isinstance(local_executor("auto", 2, jobs, small), ForkExecutor)  # too little work for a fork


def test_a_loader_holding_payloads_in_memory_is_not_sent_to_other_workers(tmp_path):
    arrays = {"big": np.ones(1 << 19, dtype=np.float32)}  # 2 MB inside the loader
    index = make_index([{"name": "big", "file": "big", "dtype": "float32", "shape": (1 << 19,), "has_data": True}])
    dump = Dump(index, path=tmp_path, format="memory", loader=lambda row: arrays[row["file"]])
    with pytest.raises(ComparisonError, match=r"holds 2\.1 MB"):
        compare(dump, dump, executor=PickledInline())


def test_executor_must_be_an_executor(make_mlp_dump):
    with pytest.raises(ComparisonError, match="executor must be"):
        compare(make_mlp_dump(name="a"), make_mlp_dump(name="b"), executor=object())


_INTERRUPTED_RUN = """
import json, os, signal, sys, time
import nbprec
from nbprec.compare import engine

# A process started with SIGINT ignored keeps it ignored, and so would this one (the test suite run as a
# background job by a shell without job control: it failed so in .ci/run): Ctrl-C must raise
# KeyboardInterrupt here, as in a terminal
signal.signal(signal.SIGINT, signal.default_int_handler)

real = engine.tensor_metrics

def slow(*args, **kwargs):  # every pair takes a while: the run is still going when Ctrl-C comes
    time.sleep(0.02)
    return real(*args, **kwargs)

engine.tensor_metrics = slow

def children():
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                    found.append(int(entry))
        except (ValueError, OSError, IndexError):
            pass
    return found

said = []

def progress(done, total):
    if not said:
        said.append(done)
        print(json.dumps({"running": children(), "done": done, "total": total}), flush=True)
        time.sleep(30)  # the run cannot end before Ctrl-C comes: it comes here

try:
    nbprec.compare(sys.argv[1], sys.argv[2], workers=3, parallel="processes", progress=progress)
    print(json.dumps({"finished": True}), flush=True)
except KeyboardInterrupt:
    print(json.dumps({"interrupted": True, "left": children()}), flush=True)
    sys.exit(130)
"""


@pytest.mark.skipif(not FORK or not Path("/proc/self/stat").exists(), reason="forked workers, /proc")
def test_ctrl_c_stops_a_forked_run_and_leaves_no_process_behind():
    """Ctrl-C as a terminal sends it (SIGINT to the whole process group) in the middle of a comparison on
    three processes: KeyboardInterrupt reaches the caller, the forked workers are gone before it does, and
    nothing of the session is left running."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_INTERRUPTED_RUN), str(TARGET), str(BENCH)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        running = json.loads(proc.stdout.readline())
        assert len(running["running"]) == 2 and 0 < running["done"] < running["total"]
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert json.loads(out.splitlines()[-1]) == {"interrupted": True, "left": []}
    assert "Traceback" not in err  # the workers ignored it: the parent stopped them
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in running["running"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in running["running"] if Path(f"/proc/{pid}").exists()]


def test_nbprec_compare_still_names_its_parallel_options(make_mlp_dump):
    with pytest.raises(nbprec.errors.ComparisonError, match="parallel"):
        compare(make_mlp_dump(name="a"), make_mlp_dump(name="b"), parallel="dask")
