"""Tensors larger than memory: compared in parts, with the bits of the one-piece computation, in bounded memory.

A payload of 1 MiB or more is memory-mapped (``nbprec.formats._payload``); one of ``RELEASE_FROM`` bytes or
more is read window by window and its pages are handed back as they are read, every pass (KL's min/max pass,
the main pass, the exact variance pass, the NaN/inf count) continuing one kernel state from window to window.
Here the windows are made small (monkeypatched) so that a few MiB of real files cross dozens of them; the last
test compares a 512 MiB pair in a process whose data segment is capped below the size of one side.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import nbprec
from nbprec.compare import _kernels as kernels
from nbprec.compare._kernels import FUSED, Flat
from nbprec.compare.metrics import METRIC_COLUMNS, MetricResult, tensor_metrics
from nbprec.formats import _payload as payload
from nbprec.formats.native import NativeDumpWriter

needs_fused = pytest.mark.skipif(FUSED is None, reason="the compiled kernel is not built")
N = 1_500_007  # elements per side: 6 MB of float32, mapped (over MAP_FROM), not a multiple of any window
F32_EPS = float(np.finfo(np.float32).eps)


@pytest.fixture
def small_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows of 37 kernel blocks, pages handed back from 1 MiB payloads every 64 KiB."""
    monkeypatch.setattr(payload, "RELEASE_FROM", 1 << 20)
    monkeypatch.setattr(payload, "RELEASE_STEP", 1 << 16)
    monkeypatch.setattr(kernels, "WINDOW", 37 * 512)


def _pair(kind: str) -> tuple[np.ndarray, np.ndarray]:
    """A target and a benchmark of N elements: bf16/fp16/fp32 noise against fp32 (or fp64), seeded."""
    rng = np.random.default_rng(11)
    y = (rng.standard_normal(N) * 2 - 0.3).astype(np.float32)
    y[::101] = 0.0  # exact zeros: the relative errors' special case
    noisy = y + rng.standard_normal(N).astype(np.float32) * 1e-3
    x = {
        "bf16 vs fp32": y.astype(ml_dtypes.bfloat16),
        "fp16 vs fp32": y.astype(np.float16),
        "fp32 vs fp32": noisy,
        "fp32 vs fp64": noisy,
        "int32 vs fp32": np.round(y * 100).astype(np.int32),
    }[kind]
    return x, (y.astype(np.float64) if kind == "fp32 vs fp64" else y)


def _write(folder: Path, arrays: dict[str, np.ndarray], blocks: int = 200_003) -> nbprec.Dump:
    """An nbprec dump of ``arrays`` (written block by block, as a tensor larger than memory would be)."""
    with NativeDumpWriter(folder, run=folder.name) as writer:
        for order, (name, array) in enumerate(arrays.items()):
            flat = array.reshape(-1)
            writer.write_tensor_blocks(
                {"name": name, "op": f"op.{order}", "order": order},
                (flat[i : i + blocks] for i in range(0, flat.size, blocks)),
                dtype=array.dtype,
                shape=array.shape,
            )
    return nbprec.open(folder)


def _same_bits(got: MetricResult, want: MetricResult) -> dict:
    """The columns whose values differ (NaN equal to NaN)."""
    return {
        c: (got[c], want[c])
        for c in METRIC_COLUMNS
        if not (got[c] == want[c] or (math.isnan(got[c]) and math.isnan(want[c])))
    }


def _reference(x: np.ndarray, y: np.ndarray, chunk: int = 1 << 20) -> dict[str, float]:
    """METRICS.md written out with numpy in float64, ``chunk`` elements at a time, independently of nbprec's
    kernels: a min/max pass, a pass of sums, and a pass for KL's normalised terms and the central moments."""
    fx, fy = x.reshape(-1), y.reshape(-1)
    n = fx.size
    eps_b = F32_EPS if y.dtype != np.float64 else float(np.finfo(np.float64).eps)

    def chunks():
        for a in range(0, n, chunk):
            yield fx[a : a + chunk].astype(np.float64), fy[a : a + chunk].astype(np.float64)

    lo_x = lo_y = math.inf
    hi_x = hi_y = -math.inf
    for cx, cy in chunks():
        lo_x, hi_x = min(lo_x, cx.min()), max(hi_x, cx.max())
        lo_y, hi_y = min(lo_y, cy.min()), max(hi_y, cy.max())
    parts: dict[str, list[float]] = {}

    def add(key: str, values: np.ndarray) -> None:  # pairwise sums per chunk, added exactly across chunks
        parts.setdefault(key, []).append(float(np.add.reduce(values)))

    mad = max_rel = 0.0
    pass1 = pass5 = 0
    for cx, cy in chunks():
        d = np.abs(cx - cy)
        ay = np.abs(cy)
        r = np.where(ay > 2.220446049250313e-16, d / np.where(ay > 0, ay, 1.0), 0.0)
        rr = d / np.where(ay == 0, eps_b, ay)
        for key, value in (("sx", cx), ("sy", cy), ("sxx", cx * cx), ("syy", cy * cy), ("sxy", cx * cy),
                           ("sdd", d * d), ("sad", d), ("rel", r)):  # fmt: skip
            add(key, value)
        add("kx", np.maximum(cx - lo_x, F32_EPS * (hi_x - lo_x)))
        add("ky", np.maximum(cy - lo_y, F32_EPS * (hi_y - lo_y)))
        mad, max_rel = max(mad, d.max()), max(max_rel, r.max())
        pass1 += int(np.count_nonzero(rr < 0.001))
        pass5 += int(np.count_nonzero(rr < 0.005))
    s = {key: math.fsum(values) for key, values in parts.items()}
    mean_x, mean_y = s["sx"] / n, s["sy"] / n
    for cx, cy in chunks():
        p = np.maximum(cx - lo_x, F32_EPS * (hi_x - lo_x)) / s["kx"]
        q = np.maximum(cy - lo_y, F32_EPS * (hi_y - lo_y)) / s["ky"]
        add("kl", p * np.log(p / q))
        add("m2x", (cx - mean_x) ** 2)
        add("m2y", (cy - mean_y) ** 2)
    kl, m2x, m2y = (math.fsum(parts[key]) for key in ("kl", "m2x", "m2y"))
    return {
        "cosine": min(s["sxy"] / math.sqrt(s["sxx"] * s["syy"]), 1.0),
        "max_abs_err": float(mad),
        "mean_abs_err": s["sad"] / n,
        "rmse": math.sqrt(s["sdd"] / n),
        "rel_euclidean": math.sqrt(s["sdd"] / s["syy"]),
        "accumulated_rel_err": s["rel"],
        "max_rel_err": float(max_rel),
        "mean_rel_err": s["rel"] / n,
        "kl_divergence": kl if kl >= 2.220446049250313e-16 else 0.0,
        "target_mean": mean_x,
        "target_std": math.sqrt(m2x / n),
        "bench_mean": mean_y,
        "bench_std": math.sqrt(m2y / n),
        "thousandth_ratio": pass1 / n,
        "five_thousandth_ratio": pass5 / n,
        "euclidean": math.sqrt(s["sdd"]),
    }


def _matches_reference(got: dict[str, float], want: dict[str, float]) -> dict:
    """Columns off the float64 reference by more than rounding (counts and maxima must be equal)."""
    bad = {}
    for column in METRIC_COLUMNS:
        a, b = got[column], want[column]
        if column in ("max_abs_err", "max_rel_err", "thousandth_ratio", "five_thousandth_ratio"):
            ok = a == b
        elif column == "kl_divergence":  # a difference of nearly equal sums: absolute, at the sums' scale
            ok = abs(a - b) <= 1e-12 + 1e-9 * abs(b)
        else:  # sums of up to 1.5e8 terms: rounding, not a different computation
            ok = math.isclose(a, b, rel_tol=1e-10, abs_tol=1e-300)
        if not ok:
            bad[column] = (a, b)
    return bad


# -- parts give the bits of one piece ----------------------------------------------------------------
@needs_fused
@pytest.mark.parametrize("kind", ["bf16 vs fp32", "fp16 vs fp32", "fp32 vs fp64", "int32 vs fp32"])
def test_a_mapped_pair_read_in_windows_gives_the_bits_of_one_piece(tmp_path, small_windows, kind):
    x, y = _pair(kind)
    dump = _write(tmp_path / "run", {"x": x, "y": y})
    mx, my = dump.tensor("x"), dump.tensor("y")
    assert Flat(mx).pages is not None and Flat(my).pages is not None  # mapped, pages handed back as read
    assert Flat(x).pages is None  # memory that is not a file's is left alone
    one_piece = tensor_metrics(x, y)
    for chunk in (1000, 1 << 16):  # the converted side's parts; rounded to whole kernel blocks
        windows = tensor_metrics(mx, my, chunk_size=chunk)
        assert windows.reason == one_piece.reason
        assert not _same_bits(windows, one_piece), (chunk, _same_bits(windows, one_piece))
    assert not _matches_reference(one_piece.values, _reference(x, y))


@needs_fused
def test_a_strided_side_is_read_a_part_at_a_time_with_the_same_bits(small_windows):
    x, y = _pair("bf16 vs fp32")
    wide = np.zeros((x.size, 2), dtype=x.dtype)
    wide[:, 0] = x
    strided = wide[:, 0]  # every other element of a larger buffer: no flat view exists
    assert not strided.flags.c_contiguous
    assert not _same_bits(tensor_metrics(strided, y), tensor_metrics(x, y))
    # two Fortran-ordered sides of one shape are read in place (as their transposes)
    fx, fy = kernels.flat_pair(
        np.asfortranarray(x[:1_500_000].reshape(1000, 1500)), np.asfortranarray(y[:1_500_000].reshape(1000, 1500))
    )
    assert fx.contiguous and fy.contiguous


@needs_fused
@pytest.mark.parametrize("where", ["window edges", "middle of windows", "last element"])
def test_nan_and_inf_anywhere_in_the_parts_propagate_as_in_one_piece(tmp_path, small_windows, where):
    x, y = _pair("fp32 vs fp32")
    window = kernels.WINDOW
    positions = {
        "window edges": [window - 1, window, 5 * window, 9 * window + 1],
        "middle of windows": [window // 2, 7 * window + 100, 20 * window + 333, 40 * window + 7],
        "last element": [N - 1, N - 2, N - 3, N - 4],
    }[where]
    x, y = x.copy(), y.copy()
    x[positions[0]], x[positions[1]], y[positions[2]], x[positions[3]] = np.nan, np.inf, -np.inf, np.nan
    dump = _write(tmp_path / "run", {"x": x, "y": y})
    with np.errstate(all="ignore"):
        one_piece = tensor_metrics(x, y)
        windows = tensor_metrics(dump.tensor("x"), dump.tensor("y"))
        numpy_kernel = tensor_metrics(dump.tensor("x"), dump.tensor("y"), kernel="numpy", chunk_size=4099)
    assert windows.reason == one_piece.reason == numpy_kernel.reason
    assert "target has 2 NaN, 1 inf" in windows.reason and "benchmark has 0 NaN, 1 inf" in windows.reason
    assert windows.nonfinite == (3, 1)
    assert not _same_bits(windows, one_piece)
    for column in ("cosine", "max_abs_err", "kl_divergence", "thousandth_ratio", "target_mean"):
        assert math.isnan(windows[column]), column
    assert windows["bench_mean"] == -math.inf  # y holds -inf and no NaN


class KernelSpy:
    """Counts the elements read by the min/max pass and by the pair passes of the compiled kernel."""

    def __init__(self) -> None:
        self.min_max_elements = 0
        self.pair_elements = 0

    def __getattr__(self, name: str):
        return getattr(FUSED, name)

    def min_max(self, buf, code):
        self.min_max_elements += memoryview(buf).nbytes // (8, 4, 2, 2)[code]
        return FUSED.min_max(buf, code)

    def pair_accumulate(self, x, x_type, *rest):
        self.pair_elements += memoryview(x).nbytes // (8, 4, 2, 2)[x_type]
        return FUSED.pair_accumulate(x, x_type, *rest)


@needs_fused
def test_kl_takes_a_min_max_pass_first_unless_the_dump_recorded_right_extremes(tmp_path, small_windows, monkeypatch):
    """KL's min-max normalisation needs each side's extremes before its pass: without the dump's statistics
    that is a first pass over each side; with right ones the pair is read once; with wrong ones twice. The
    extremes sit in the last and the first window, and every way gives the same bits."""
    x, y = _pair("bf16 vs fp32")
    x, y = x.copy(), y.copy()
    x[-5], y[3] = -40.0, 50.0  # the target's minimum in the last window, the benchmark's maximum in the first
    dump = _write(tmp_path / "run", {"x": x, "y": y})
    mx, my = dump.tensor("x"), dump.tensor("y")
    recorded = dump.index.set_index("name")
    right = (recorded.at["x", "min"], recorded.at["x", "max"], recorded.at["y", "min"], recorded.at["y", "max"])
    assert right[0] == -40.0 and right[3] == 50.0
    results = {}
    for label, extremes in (("none", None), ("right", right), ("wrong", (-1.0, 1.0, -1.0, 1.0))):
        spy = KernelSpy()
        monkeypatch.setattr(kernels, "FUSED", spy)
        results[label] = tensor_metrics(mx, my, extremes=extremes)
        monkeypatch.setattr(kernels, "FUSED", FUSED)
        passes = {"none": (2 * N, N), "right": (0, N), "wrong": (0, 2 * N)}[label]
        assert (spy.min_max_elements, spy.pair_elements) == passes, label
    assert results["right"].extremes_held is True and results["wrong"].extremes_held is False
    assert not _same_bits(results["right"], results["none"]) and not _same_bits(results["wrong"], results["none"])
    want = _reference(x, y)
    assert not _matches_reference(results["none"].values, want)
    assert math.isclose(results["none"]["kl_divergence"], want["kl_divergence"], rel_tol=1e-9)


@needs_fused
def test_the_exact_variance_pass_reads_in_windows_too(tmp_path, small_windows):
    """Values near 1 with a tiny spread (a layer-norm weight): the sum and sum of squares cancel, so the
    standard deviation takes a second, centred pass, which reads the mapped side window by window."""
    rng = np.random.default_rng(3)
    y = (1.0 + rng.standard_normal(N) * 1e-7).astype(np.float64)
    x = y * (1 + 1e-9)
    dump = _write(tmp_path / "run", {"x": x, "y": y})
    windows = tensor_metrics(dump.tensor("x"), dump.tensor("y"))
    assert not _same_bits(windows, tensor_metrics(x, y))
    assert math.isclose(windows["bench_std"], float(np.std(y)), rel_tol=1e-9)


# -- bounded memory ----------------------------------------------------------------------------------
_CHILD = """
import json, math, resource, sys
args = json.loads(sys.argv[1])
# the data segment (heap, anonymous maps: what a copy or a conversion of a tensor would take) is capped below
# the size of one side; the file maps of the payloads are not data, and are measured by VmHWM instead
resource.setrlimit(resource.RLIMIT_DATA, (args["data_limit"], args["data_limit"]))
import nbprec
from nbprec.compare.metrics import tensor_metrics

def peak_mb():
    with open("/proc/self/status") as status:  # this process's own peak; ru_maxrss would count the parent's
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) // 1024

result = {}
target, bench = nbprec.open(args["target"]), nbprec.open(args["bench"])
r = tensor_metrics(target.tensor("t"), bench.tensor("t"))
result["direct"] = {**r.values, "reason": r.reason}
result["direct_peak_mb"] = peak_mb()
comp = nbprec.compare(target, bench, workers=1, parallel="threads")
row = comp.table.iloc[0]
result["compare"] = {k: float(row[k]) for k in r.values}
result["peak_mb"] = peak_mb()
print("RESULT " + json.dumps(result))
"""


@pytest.mark.slow
@needs_fused
def test_a_pair_larger_than_the_memory_limit_is_compared_in_bounded_memory(tmp_path):
    """Two 512 MiB float32 tensors in nbprec dumps, compared (directly and by ``nbprec.compare``) in a process
    whose data segment is capped at 384 MiB (less than one side) and whose peak resident memory must stay
    under 300 MiB (the 1 GiB pair is read through file maps, page by page); the results equal a chunked
    float64 reference."""
    n = 128 << 20
    if shutil.disk_usage(tmp_path).free < 4 * n * 4:
        pytest.skip("needs 2 GiB of free disk")
    block = 1 << 23

    def side(noise: bool):  # block i of the benchmark, or of the target (the benchmark plus noise), seeded
        for i, start in enumerate(range(0, n, block)):
            y = np.random.default_rng([21, i]).standard_normal(min(block, n - start), dtype=np.float32)
            if noise:
                y += np.random.default_rng([22, i]).standard_normal(y.size, dtype=np.float32) * np.float32(1e-3)
            yield y

    for run, noise in (("bench", False), ("target", True)):
        with NativeDumpWriter(tmp_path / run, run=run) as writer:
            writer.write_tensor_blocks({"name": "t", "op": "op.0"}, side(noise), dtype="float32", shape=(n,))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    args = {"target": str(tmp_path / "target"), "bench": str(tmp_path / "bench"), "data_limit": 384 << 20}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CHILD), json.dumps(args)],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the child died (exit {done.returncode}): {done.stderr[-3000:]}"
    result = json.loads(lines[-1][len("RESULT ") :])
    assert result["direct_peak_mb"] < 300 and result["peak_mb"] < 300, result
    x = np.load(next((tmp_path / "target" / "tensors").iterdir()), mmap_mode="r")
    y = np.load(next((tmp_path / "bench" / "tensors").iterdir()), mmap_mode="r")
    want = _reference(x, y, chunk=1 << 22)
    assert result["direct"]["reason"] == ""
    assert not _matches_reference(result["direct"], want)
    assert result["compare"] == {k: v for k, v in result["direct"].items() if k != "reason"}
