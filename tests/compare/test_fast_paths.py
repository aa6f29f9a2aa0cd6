"""The fast paths of the comparison: float16 conversion by bits, the fused chunk kernel against the
METRICS.md formulas written out in float64, forked worker processes, and the native payload loader."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pandas as pd
import pytest

import nbprec
from nbprec.compare import compare
from nbprec.compare._kernels import to_f64
from nbprec.compare.metrics import METRIC_COLUMNS, tensor_metrics
from nbprec.errors import DumpFormatError
from nbprec.formats.native import NativeDumpWriter

F32_EPS = float(np.finfo(np.float32).eps)
EPS = float(np.finfo(np.float64).eps)


def test_float16_conversion_by_bits_is_exact_for_every_bit_pattern():
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    with np.errstate(invalid="ignore"):
        expected = every.astype(np.float64)
    out = to_f64(every, np.empty(every.size))
    np.testing.assert_array_equal(out, expected)  # NaN at the same places, signed zeros, denormals, inf
    assert np.array_equal(np.signbit(out), np.signbit(expected))


def reference(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """METRICS.md written out in plain float64 numpy (whole arrays, no chunking)."""
    x, y = x.astype(np.float64).ravel(), y.astype(np.float64).ravel()
    d = x - y
    t = np.abs(d)
    a = np.abs(y)
    rel = np.where(a > EPS, t / np.where(a > EPS, a, 1.0), 0.0)
    eps_b = F32_EPS
    ratio_den = np.where(a > EPS, a, np.where(a == 0, eps_b, a))
    ratio = t / ratio_den

    def normalised(v: np.ndarray) -> np.ndarray:
        span = v.max() - v.min()
        v = (v - v.min()) / span if span > 0 else v
        v = np.maximum(v, F32_EPS)
        return v / v.sum()

    p, q = normalised(x), normalised(y)
    norm_x, norm_y = np.linalg.norm(x), np.linalg.norm(y)
    both_zero = norm_x <= EPS and norm_y <= EPS  # METRICS.md: a norm <= eps counts as all zero
    kl = float(np.sum(p * np.log(p / q)))
    return {
        "cosine": 1.0 if both_zero else min(float(np.dot(x, y) / (norm_x * norm_y)), 1.0),
        "max_abs_err": float(t.max()),
        "mean_abs_err": float(t.mean()),
        "rmse": math.sqrt(float(np.mean(d * d))),
        "rel_euclidean": 0.0 if norm_y <= EPS else math.sqrt(float(np.sum(d * d) / np.sum(y * y))),  # msaccucmp
        "accumulated_rel_err": float(rel.sum()),
        "max_rel_err": float(rel.max()),
        "mean_rel_err": float(rel.mean()),
        "kl_divergence": 0.0 if kl < EPS else kl,
        "target_mean": float(x.mean()),
        "target_std": float(x.std()),
        "bench_mean": float(y.mean()),
        "bench_std": float(y.std()),
        "thousandth_ratio": float(np.mean(ratio < 0.001)),
        "five_thousandth_ratio": float(np.mean(ratio < 0.005)),
        "euclidean": math.sqrt(float(np.sum(d * d))),
    }


def _cases() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(11)
    bench = (rng.standard_normal(200_003) * 2 + 0.3).astype(np.float32)
    bench[::101] = 0.0
    big = (rng.standard_normal(70_001) * 1e30).astype(np.float32)
    near = (1.0 + rng.standard_normal(90_000) * 1e-3).astype(np.float32)
    near_target = np.nextafter(near, np.float32(2), dtype=np.float32)  # one ulp apart: d cancels to 2**-23
    tiny = (rng.standard_normal(66_000) * 1e-20).astype(np.float32)
    return {
        "bf16 noise": (bench.astype(ml_dtypes.bfloat16), bench),
        "fp16 noise": (bench.astype(np.float16), bench),
        "fp32 equal": (bench.copy(), bench),
        "large magnitude": (big.astype(ml_dtypes.bfloat16), big),
        "near cancellation": (near_target, near),
        "tiny magnitude": (tiny.astype(ml_dtypes.bfloat16), tiny),
        "fault": ((bench * 1.25 + 0.01).astype(np.float16), bench),
    }


@pytest.mark.parametrize("case", list(_cases()))
@pytest.mark.parametrize("chunk", [4096, 1 << 16, 1 << 20])
def test_kernel_matches_the_formulas_written_out(case, chunk):
    x, y = _cases()[case]
    got, want = tensor_metrics(x, y, chunk_size=chunk), reference(x, y)
    assert got.reason == ""
    for col in METRIC_COLUMNS:
        if col == "kl_divergence":  # a difference of nearly equal sums
            assert math.isclose(got[col], want[col], rel_tol=1e-9, abs_tol=1e-14), (col, got[col], want[col])
        else:
            assert math.isclose(got[col], want[col], rel_tol=1e-10, abs_tol=1e-300), (col, got[col], want[col])


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
@pytest.mark.parametrize("chunk", [5, 1 << 16])
def test_non_finite_values_propagate_in_every_path(dtype, chunk):
    bench = np.linspace(-3, 3, 1001).astype(np.float32)
    target = bench.astype(dtype)
    target[7], target[500] = np.nan, np.inf
    r = tensor_metrics(target, bench, chunk_size=chunk)
    assert r.reason == "non-finite values: target has 1 NaN, 1 inf"
    for col in ("cosine", "max_abs_err", "mean_abs_err", "rmse", "max_rel_err", "kl_divergence", "euclidean"):
        assert math.isnan(r[col]), col
    assert math.isnan(r["thousandth_ratio"]) and math.isnan(r["target_mean"])
    assert math.isclose(r["bench_std"], float(bench.astype(np.float64).std()), rel_tol=1e-12)


def test_float16_overflow_to_inf_counts_as_inf():
    bench = np.array([1.0, 7e4, -7e4, 2.0] * 100, np.float32)
    with np.errstate(over="ignore"):
        target = bench.astype(np.float16)
    r = tensor_metrics(target, bench)
    assert r["max_abs_err"] == math.inf and r.reason == "non-finite values: target has 0 NaN, 200 inf"


# -- forked worker processes ---------------------------------------------------------------------------


def _table(comp) -> pd.DataFrame:
    return comp.table.drop(columns=[c for c in comp.table.columns if c.startswith("status")], errors="ignore")


@pytest.fixture
def small_batches(monkeypatch):
    import importlib

    workers = importlib.import_module("nbprec.compare.workers")
    monkeypatch.setattr(workers, "BATCH_JOBS", 3)
    return workers


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forked workers need fork()")
def test_processes_give_the_same_table_as_this_thread_and_threads(make_mlp_dump, small_batches):
    target, bench = make_mlp_dump(name="t", dtype=ml_dtypes.bfloat16, fault_at=5), make_mlp_dump(name="b")
    serial = compare(target, bench, workers=1)
    seen = []
    forked = compare(target, bench, workers=2, parallel="processes", progress=lambda d, t: seen.append((d, t)))
    threads = compare(target, bench, workers=2, parallel="threads")
    pd.testing.assert_frame_equal(_table(forked), _table(serial))
    pd.testing.assert_frame_equal(_table(threads), _table(serial))
    assert seen[-1][0] == seen[-1][1] == int((serial.table["compare_mode"] == "tensor").sum())
    assert forked.first_failing_op()["op"] == serial.first_failing_op()["op"]
    with pytest.raises(ChildProcessError):  # the workers were waited for before compare returned
        os.waitpid(-1, os.WNOHANG)


def test_batches_hold_every_pair_once_largest_first_and_shrink_towards_the_end():
    from nbprec.compare import workers

    rng = np.random.default_rng(0)
    numel = np.concatenate([rng.integers(1, 1 << 23, 40), rng.integers(1, 1 << 16, 500), [0, -1]]).astype(float)
    jobs = [(i, "tensor", i, i) for i in rng.permutation(len(numel))]
    runs = workers.batches(jobs, numel)
    flat = [job for run in runs for job in run]
    assert sorted(flat) == sorted(jobs)
    sizes = [max(numel[job[0]], 0) for job in flat]
    assert sizes == sorted(sizes, reverse=True)
    costs = [sum(max(numel[job[0]], 0) + workers.JOB_COST for job in run) for run in runs]
    assert all(len(run) <= workers.BATCH_JOBS for run in runs)
    assert max(costs[-5:]) <= workers.TAIL_ELEMENTS + workers.JOB_COST + (1 << 16)  # small batches at the end
    assert max(costs) > 8 * max(costs[-5:])
    assert workers.batches([], numel) == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forked workers need fork()")
def test_this_process_measures_beside_the_forked_workers(small_batches):
    """workers=2 forks one process and measures in this one too: every batch once, shared between the two."""
    import time

    batches = [[(k, "tensor", k, k)] for k in range(8)]

    def measure_batch(batch):
        time.sleep(0.02)  # a worker holds batches for a while: this process finds none waiting and measures
        return [(job[0], {"pid": os.getpid()}, "") for job in batch]

    results = [r for batch in small_batches.run_processes(batches, measure_batch, 2) for r in batch]
    assert sorted(i for i, _, _ in results) == list(range(8))
    pids = {values["pid"] for _, values, _ in results}
    assert os.getpid() in pids and len(pids) == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forked workers need fork()")
def test_a_dead_worker_loses_no_row(make_mlp_dump, small_batches, monkeypatch):
    monkeypatch.setattr(small_batches, "_process_worker", lambda *args: os._exit(3))
    target, bench = make_mlp_dump(name="t", dtype=np.float16), make_mlp_dump(name="b")
    pd.testing.assert_frame_equal(
        _table(compare(target, bench, workers=2, parallel="processes")), _table(compare(target, bench, workers=1))
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forked workers need fork()")
def test_a_worker_killed_after_one_batch_loses_no_row(make_mlp_dump, small_batches, monkeypatch):
    """A worker that dies mid-run (after returning one batch, holding another): what it held is measured by
    the parent, and the table is the one a single thread makes."""
    import pickle

    def one_then_die(measure_batch, batches, jobs, results):
        number = small_batches._NUMBER.unpack(small_batches._read_exact(jobs, 4))[0]
        data = pickle.dumps(measure_batch(batches[number]))
        small_batches._write_all(results, small_batches._NUMBER.pack(len(data)) + data)
        os._exit(9)

    monkeypatch.setattr(small_batches, "_process_worker", one_then_die)
    target, bench = make_mlp_dump(name="t", dtype=np.float16), make_mlp_dump(name="b")
    pd.testing.assert_frame_equal(
        _table(compare(target, bench, workers=2, parallel="processes")), _table(compare(target, bench, workers=1))
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forked workers need fork()")
def test_an_error_in_the_parent_stops_and_reaps_every_worker(make_mlp_dump, small_batches, monkeypatch):
    target, bench = make_mlp_dump(name="t", dtype=np.float16), make_mlp_dump(name="b")
    forked = []
    fork_worker = small_batches._fork_worker
    monkeypatch.setattr(small_batches, "_fork_worker", lambda *a: forked.append(fork_worker(*a)) or forked[-1])

    def interrupt(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compare(target, bench, workers=3, parallel="processes", progress=interrupt)
    assert len(forked) == 2  # this process measures too
    for worker in forked:
        with pytest.raises(ChildProcessError):  # killed and reaped: no such child any more
            os.waitpid(worker.pid, os.WNOHANG)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forked workers need fork()")
def test_when_no_worker_can_be_forked_this_process_measures_everything(make_mlp_dump, small_batches, monkeypatch):
    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(small_batches.os, "fork", no_fork)
    target, bench = make_mlp_dump(name="t", dtype=np.float16), make_mlp_dump(name="b")
    pd.testing.assert_frame_equal(
        _table(compare(target, bench, workers=2, parallel="processes")), _table(compare(target, bench, workers=1))
    )


def test_a_bug_in_a_worker_thread_surfaces_and_stops_the_workers(make_mlp_dump, monkeypatch):
    import importlib
    import threading

    engine = importlib.import_module("nbprec.compare.engine")
    target, bench = make_mlp_dump(name="t", dtype=np.float16), make_mlp_dump(name="b")
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("kernel bug")

    monkeypatch.setattr(engine, "tensor_metrics", broken)
    with pytest.raises(RuntimeError, match="kernel bug"):
        compare(target, bench, workers=2, parallel="threads")
    assert not [t for t in threading.enumerate() if t.name.startswith("nbprec-compare")]
    assert len(calls) < int(target.index["has_data"].sum())  # stopped early, not run to the end


def test_auto_picks_processes_for_large_work_threads_otherwise(monkeypatch):
    from nbprec.compare import workers

    small = [[(i, "tensor", i, i) for i in range(10)]] * 2
    large = [[(i, "tensor", i, i) for i in range(128)]] * 40
    numel = np.full(128, 1 << 16, dtype=np.float64)
    fork = hasattr(os, "fork") and sys.platform != "darwin"
    monkeypatch.setattr(workers.threading, "active_count", lambda: 1)
    assert workers.use_processes("auto", 2, large, numel) is fork
    assert not workers.use_processes("auto", 2, small, numel)  # too little work to pay for a fork
    assert not workers.use_processes("threads", 2, large, numel)
    assert not workers.use_processes("auto", 1, large, numel)
    monkeypatch.setattr(workers.threading, "active_count", lambda: 3)  # a notebook kernel: never fork
    assert not workers.use_processes("auto", 2, large, numel)
    assert workers.use_threads("auto", 2, 20) is (workers.KERNEL != "numpy")
    assert workers.use_threads("threads", 2, 20) and not workers.use_threads("auto", 1, 20)


def test_parallel_must_be_known(make_mlp_dump):
    with pytest.raises(nbprec.errors.ComparisonError, match="parallel"):
        compare(make_mlp_dump(name="a"), make_mlp_dump(name="b"), parallel="gpu")


def test_arguments_are_checked_before_any_dump_is_opened(tmp_path):
    """A typo in mode, parallel or rule is reported at once, not after opening (possibly large) dumps: here
    the dumps do not even exist, and the error is still about the argument."""
    missing = tmp_path / "no-such-dump"
    for kwargs, what in [({"parallel": "gpu"}, "parallel"), ({"mode": "fast"}, "mode"), ({"rule": "nope"}, "nope")]:
        with pytest.raises(nbprec.errors.NbprecError, match=what):
            compare(missing, missing, **kwargs)


# -- native payload loader -----------------------------------------------------------------------------


def _native(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with NativeDumpWriter(path) as writer:
        for order, (name, array) in enumerate(arrays.items()):
            writer.write_tensor({"name": name, "op": name, "order": order}, array)


def test_native_loader_matches_np_load_and_handles_fortran_order(tmp_path):
    arrays = {
        "f32": np.arange(12, dtype=np.float32).reshape(3, 4),
        "bf16": np.linspace(-1, 1, 7).astype(ml_dtypes.bfloat16),
        "i64": np.arange(5, dtype=np.int64),
        "bool": np.array([True, False, True]),
        "c64": np.array([1 + 2j, 3j], np.complex64),
        "scalar": np.ones((), np.float16),
        "fortran": np.arange(6, dtype=np.float64).reshape(2, 3),
    }
    _native(tmp_path / "run", arrays)
    dump = nbprec.open(tmp_path / "run")
    payload = Path(dump.row("fortran")["file"])
    np.save(payload, np.asfortranarray(arrays["fortran"]))  # same values, stored column-major
    for name, array in arrays.items():
        loaded = dump.tensor(name)
        assert loaded.dtype == array.dtype and loaded.shape == array.shape, name
        np.testing.assert_array_equal(loaded, array, err_msg=name)
        assert not loaded.flags.writeable, name  # a view of the file's bytes (mapped when large), never a copy


def test_native_loader_refuses_a_symlink_out_of_the_dump_and_reports_truncation(tmp_path):
    _native(tmp_path / "run", {"a": np.arange(4.0), "b": np.arange(1000.0)})
    dump = nbprec.open(tmp_path / "run")
    outside = tmp_path / "outside.npy"
    np.save(outside, np.zeros(4))
    payload = Path(dump.row("a")["file"])
    payload.unlink()
    payload.symlink_to(outside)
    with pytest.raises(DumpFormatError, match="outside"):
        dump.tensor("a")
    inside = Path(dump.row("b")["file"])
    inside.write_bytes(inside.read_bytes()[:200])
    with pytest.raises(DumpFormatError):
        dump.tensor("b")
