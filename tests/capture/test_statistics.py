"""The capture's one-pass statistics (compiled kernel and torch reductions) against nbprec.stats.tensor_stats."""

from __future__ import annotations

import math
import sys

import ml_dtypes
import numpy as np
import pytest

from nbprec.stats import STAT_COLUMNS, tensor_stats

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

FLOATS = ("float64", "float32", "float16", "bfloat16")


def _reference(t: torch.Tensor) -> tuple:
    t = t.contiguous()
    a = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if t.dtype == torch.bfloat16 else t.numpy()
    with np.errstate(all="ignore"):
        return tuple(tensor_stats(a)[c] for c in STAT_COLUMNS)


def _cases(dtype: str) -> list[torch.Tensor]:
    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(0)
    out = []
    for n in (1, 7, 300, 4099):
        x = (torch.randn(n, generator=gen, dtype=torch.float64) * 3 + 1).to(dt)
        out.append(x)
        y = x.clone()
        y[::7] = math.nan
        y[3::11] = math.inf
        y[5::13] = -math.inf
        y[1::17] = 0
        out.append(y)
    finite_max = {"float16": 65504.0, "bfloat16": 3.0e38, "float32": 3.0e38, "float64": 1.0e300}[dtype]
    out += [
        torch.full((1000,), math.nan, dtype=dt),  # no finite value
        torch.full((1000,), finite_max, dtype=dt),  # squares beyond the dtype (and float32) range
        (3.0 + torch.randn(2000, generator=gen, dtype=torch.float64) * 1e-4).to(dt),  # near-constant: cancellation
        torch.randn(6, 5, generator=gen, dtype=torch.float64).to(dt).t(),  # a transpose, read as it lies
        torch.randn(6, 1, generator=gen, dtype=torch.float64).to(dt).expand(6, 4),  # overlapping memory
        torch.randn(3, 4, 5, generator=gen, dtype=torch.float64).to(dt).permute(2, 0, 1)[1:],  # not dense
        torch.empty(0, dtype=dt),
        torch.zeros(5, dtype=dt),
        -torch.ones(3, dtype=dt),
    ]
    if dtype == "float16":
        out.append(torch.tensor([1e-6, -3e-7, 6e-8, 0.0, 2.0], dtype=dt))  # subnormals
    return out


def _check(got: tuple, want: tuple, rel: float, what: str, constant: bool = False) -> None:
    for column, g, w in zip(STAT_COLUMNS, got, want, strict=True):
        if constant and column in ("std", "norm"):  # numpy's own rounding of huge equal values: inf or garbage
            assert column == "norm" or g == w or g <= rel * abs(got[2]), (what, column, g, w)
        elif w is None or g is None:
            assert g is None and w is None, (what, column, g, w)
        elif isinstance(w, float) and math.isnan(w):
            assert math.isnan(g), (what, column, g, w)
        elif isinstance(w, float) and math.isinf(w):
            assert g == w or column == "norm", (what, column, g, w)  # torch's norm scales instead of overflowing
        else:
            assert g == pytest.approx(w, rel=rel, abs=1e-12), (what, column, g, w)


@pytest.fixture(params=["kernel", "numpy", "reductions"])
def statistics(request: pytest.FixtureRequest):
    """The three ways: the C kernel (CPU), numpy (CPU without the kernel), torch reductions (other devices)."""
    from nbprec.capture.statistics import TensorStatistics

    if request.param == "kernel":
        stats = TensorStatistics(torch)
        if not stats.compiled:
            pytest.skip("nbprec.capture._stats was not compiled")
        return stats
    stats = TensorStatistics(torch, kernel=None)
    if request.param == "numpy":
        return stats
    return lambda t: stats.many([t])[0]  # what a CUDA/NPU tensor gets, here on CPU tensors


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_statistics_agree_with_tensor_stats(statistics, dtype: str) -> None:
    for i, t in enumerate(_cases(dtype)):
        _check(statistics(t), _reference(t), 1e-9, f"{dtype} case {i} {tuple(t.shape)}", constant=i == 9)


@pytest.mark.parametrize("dtype", FLOATS)
def test_long_tensors_across_many_blocks(statistics, dtype: str) -> None:
    """Many of the kernel's blocks (2048 elements, 1024 of float64) and their halves, with odd tails, NaN/inf."""
    gen = torch.Generator().manual_seed(2)
    for n in (5 * 2048 + 1, 3 * 1024 + 1023, 100_003):
        x = (torch.randn(n, generator=gen, dtype=torch.float64) * 3 + 1).to(getattr(torch, dtype))
        _check(statistics(x), _reference(x), 1e-9, f"{dtype} {n}")
        x[n // 3 :: 997] = math.nan
        x[n // 2] = -math.inf
        _check(statistics(x), _reference(x), 1e-9, f"{dtype} {n} with NaN/inf")


def _kernel_module():
    from nbprec.capture.statistics import load_kernel

    if load_kernel() is None:
        pytest.skip("nbprec.capture._stats was not compiled")
    import importlib

    return importlib.import_module("nbprec.capture._stats")


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16", "int8", "bool"])
def test_large_tensors_summed_in_parts_on_torchs_threads(dtype: str) -> None:
    """Tensors of SPLIT_BYTES (128 KB) and more are summed in parts at once (on the OpenMP threads torch runs its
    ops on): the same statistics as whole, whatever the part count, the same every time, NaN/inf/zeros counted in
    every part."""
    kernel = _kernel_module()
    code = {"float64": 0, "float32": 1, "float16": 2, "bfloat16": 3, "int8": 7, "bool": 9}[dtype]
    gen = torch.Generator().manual_seed(4)
    size = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    n = 3 * kernel.SPLIT_BYTES // size + 1234  # room for several parts, and an odd tail
    if dtype in ("int8", "bool"):
        x = torch.randint(-100, 100, (n,), generator=gen, dtype=torch.int8)
        x = x > 20 if dtype == "bool" else x
    else:
        x = (torch.randn(n, generator=gen, dtype=torch.float64) * 3 + 1).to(getattr(torch, dtype))
        x[n // 5 :: 100_003] = math.nan  # in every part
        x[n - 3] = math.inf
        x[(n // 2) :: 50_001] = 0
    whole = kernel.stats(x.data_ptr(), n, code, 1)
    _check(whole, _reference(x), 1e-9, f"{dtype} whole")
    for threads in (2, 3, 8):
        parts = kernel.stats(x.data_ptr(), n, code, threads)
        _check(parts, whole, 1e-12, f"{dtype} in {threads} parts")
        assert kernel.stats(x.data_ptr(), n, code, threads) == parts  # not a matter of which thread ran what
    if sys.platform.startswith("linux"):
        assert kernel.team() in ("libgomp.so.1", "libomp.so", "libiomp5.so")  # torch's, found rather than loaded


def test_tensors_either_side_of_the_split_size() -> None:
    """Tensors from SPLIT_BYTES (128 KB) on are summed in parts of 64 KB at least, as many as the threads (8 at
    most); below, whole whatever the thread count (bit for bit). At the split size, the two parts' statistics are
    the whole tensor's to 1e-12."""
    kernel = _kernel_module()
    size = kernel.SPLIT_BYTES
    assert size == 128 << 10
    assert [kernel.parts(size - 1, t) for t in (1, 2, 8)] == [1, 1, 1]
    assert [kernel.parts(size, t) for t in (0, 1, 2, 3, 8)] == [1, 1, 2, 2, 2]
    assert [kernel.parts(4 * size, t) for t in (2, 3, 8, 64)] == [2, 3, 8, 8]
    gen = torch.Generator().manual_seed(6)
    below = torch.randn(kernel.SPLIT_BYTES // 4 - 1, generator=gen) * 5 + 2
    assert kernel.stats(below.data_ptr(), below.numel(), 1, 2) == kernel.stats(below.data_ptr(), below.numel(), 1, 1)
    at = torch.randn(kernel.SPLIT_BYTES // 4, generator=gen) * 5 + 2
    whole = kernel.stats(at.data_ptr(), at.numel(), 1, 1)
    _check(kernel.stats(at.data_ptr(), at.numel(), 1, 2), whole, 1e-12, "float32 at SPLIT_BYTES in 2 parts")
    _check(whole, _reference(at), 1e-9, "float32 at SPLIT_BYTES whole")


def test_parts_from_several_python_threads_at_once() -> None:
    """Python threads summing large tensors at the same time (the GIL released) each get their own results."""
    from concurrent.futures import ThreadPoolExecutor

    kernel = _kernel_module()
    gen = torch.Generator().manual_seed(5)
    tensors = [torch.randn(1 << 20, generator=gen) * (k + 1) + k for k in range(8)]
    alone = [kernel.stats(t.data_ptr(), t.numel(), 1, 2) for t in tensors]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            together = list(pool.map(lambda t: kernel.stats(t.data_ptr(), t.numel(), 1, 2), tensors))
            assert together == alone


def test_the_kernel_takes_the_tensor_as_owner_and_says_what_it_takes() -> None:
    """``owner`` (the tensor whose memory is read) is only held for the call: the same statistics with it as
    without; a call with too few or too many arguments says which it takes."""
    kernel = _kernel_module()
    x = torch.randn(5000)
    assert kernel.stats(x.data_ptr(), x.numel(), 1, 2, x) == kernel.stats(x.data_ptr(), x.numel(), 1, 2)
    for args in ((x.data_ptr(), x.numel()), (x.data_ptr(), x.numel(), 1, 2, x, None)):
        with pytest.raises(TypeError, match=r"3 to 5 arguments \(address, n, type\[, threads\[, owner\]\]\)"):
            kernel.stats(*args)


def test_the_capture_sums_in_as_many_parts_as_torch_has_threads(monkeypatch) -> None:
    from nbprec.capture.statistics import TensorStatistics

    kernel = _kernel_module()
    seen = []
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    stats = TensorStatistics(torch, kernel=lambda *args: seen.append(args[3:]) or kernel.stats(*args))
    x = torch.randn(1 << 20)
    _check(stats(x), _reference(x), 1e-9, "through TensorStatistics")
    assert len(seen) == 1 and seen[0][0] == 3 and seen[0][1] is x  # torch's thread count; x held for the call


def _child_statistics(stats, queue) -> None:
    torch.set_num_threads(1)  # what torch's DataLoader workers do first
    y = torch.arange(1 << 20, dtype=torch.float32)
    queue.put(stats(y))


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork()")
def test_a_forked_child_on_one_thread_sums_whole() -> None:
    """OpenMP cannot start a region in a child forked after the parent ran one (it waits for threads the child does
    not have): the part count is torch's thread count when each tensor is measured, so a child that set it to 1, as
    torch's own workers do, never starts one."""
    import multiprocessing

    kernel = _kernel_module()
    from nbprec.capture.statistics import TensorStatistics

    stats = TensorStatistics(torch)
    stats(torch.randn(kernel.SPLIT_BYTES // 2))  # float32: in parts, on torch's threads, in this process
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_statistics, args=(stats, queue))
    child.start()
    child.join(60)
    if child.exitcode is None:
        child.kill()
        child.join()
    assert child.exitcode == 0, "the child hung or failed"
    got = queue.get(timeout=10)
    _check(got, _reference(torch.arange(1 << 20, dtype=torch.float32)), 1e-9, "in the child")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_norm_when_the_first_block_is_unlike_the_rest(statistics, dtype: str) -> None:
    """The kernel centres its sums on the first block's mean and derives the sum of squares from them; a first
    block holding one finite value far from the rest (the rest is NaN) takes its exact second pass."""
    gen = torch.Generator().manual_seed(3)
    for lead in (1e3, 30.0):
        x = (torch.randn(100_003, generator=gen, dtype=torch.float64) * 1e-3).to(getattr(torch, dtype))
        x[:2047] = math.nan
        x[2047] = lead
        _check(statistics(x), _reference(x), 1e-9, f"{dtype} first block {lead}")


@pytest.mark.parametrize("dtype", ["int64", "int32", "int16", "int8", "uint8", "bool"])
def test_integer_and_bool_statistics(statistics, dtype: str) -> None:
    gen = torch.Generator().manual_seed(1)
    t = torch.randint(-100 if dtype.startswith("int") else 0, 100, (1001,), generator=gen)
    t = (t > 50) if dtype == "bool" else t.to(getattr(torch, dtype))
    _check(statistics(t), _reference(t), 1e-12, dtype)


def test_statistics_of_tensors_needing_grad_and_complex_ones(statistics) -> None:
    w = torch.randn(5, 4, requires_grad=True)
    _check(statistics(w), _reference(w.detach()), 1e-9, "requires_grad")
    z = torch.randn(10, dtype=torch.complex64)
    _check(statistics(z), _reference(z.abs()), 1e-6, "complex")


def test_float8_statistics(statistics) -> None:
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(torch, name):
            continue
        x = torch.tensor([0.5, -3.0, 0.0, 2.25, 448.0 if name == "float8_e4m3fn" else 57344.0]).to(getattr(torch, name))
        _check(statistics(x), _reference(x.float()), 1e-12, name)


def test_float32_accumulation_where_a_device_has_no_float64() -> None:
    """The torch path on a device without float64 (MPS, some NPUs): float32 sums, the norm kept finite."""
    from nbprec.capture.statistics import TensorStatistics

    stats = TensorStatistics(torch, kernel=None)
    stats._accumulators["cpu"] = torch.float32  # what the probe finds on such a device
    for dtype in ("float16", "bfloat16"):
        for i, t in enumerate(_cases(dtype)):
            _check(stats.many([t])[0], _reference(t), 1e-5, f"{dtype} case {i}", constant=i == 9)
    huge = torch.full((64,), 3.0e38, dtype=torch.bfloat16)  # squares overflow float32: rescaled
    got = dict(zip(STAT_COLUMNS, stats.many([huge])[0], strict=True))
    assert math.isfinite(got["norm"]) and got["norm"] == pytest.approx(8 * float(huge[0]), rel=1e-6)
    assert got["nan_count"] == got["inf_count"] == 0


def test_many_moves_results_to_the_host_once_per_device() -> None:
    from nbprec.capture.statistics import TensorStatistics

    stats = TensorStatistics(torch, kernel=None)
    tensors = [torch.randn(10), torch.tensor([math.inf, 1.0]), torch.empty(0), torch.ones(3, dtype=torch.float16)]
    got = stats.many(tensors)
    for t, g in zip(tensors, got, strict=True):
        _check(g, _reference(t), 1e-9, str(t.dtype))
    meta = stats.many([torch.empty(3, device="meta")])
    assert meta == [None]


def test_kernel_type_errors() -> None:
    from nbprec.capture.statistics import load_kernel

    kernel = load_kernel()
    if kernel is None:
        pytest.skip("nbprec.capture._stats was not compiled")
    with pytest.raises(ValueError, match="unknown element type"):
        kernel(1, 1, 99)
    with pytest.raises(ValueError):
        kernel(0, 5, 1)
    assert kernel(0, 0, 1) == (None, None, None, None, None, None, 0, 0, 0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_a_capture_without_the_kernel_records_the_same_statistics(tmp_path, monkeypatch, dtype: str) -> None:
    """The torch-reduction fallback (no C compiler at install) and the kernel agree on a real training step."""
    import nbprec
    from nbprec.capture import statistics as capture_statistics

    from .conftest import capture_tiny

    if capture_statistics.load_kernel() is None:
        pytest.skip("nbprec.capture._stats was not compiled")
    with_kernel = nbprec.open(capture_tiny(tmp_path / "kernel", dtype)).index
    monkeypatch.setattr(capture_statistics, "load_kernel", lambda: None)
    fallback = nbprec.open(capture_tiny(tmp_path / "torch", dtype)).index
    assert list(with_kernel["name"]) == list(fallback["name"]) and len(with_kernel) > 100
    for column in STAT_COLUMNS:
        np.testing.assert_allclose(
            fallback[column].to_numpy(float), with_kernel[column].to_numpy(float), rtol=1e-9, atol=1e-12, err_msg=column
        )
    assert with_kernel["nan_count"].notna().all()
