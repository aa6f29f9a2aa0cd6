"""The capture's tensor statistics: one pass over each tensor, on its own device and in its own dtype.

Statistics have the meaning of :func:`nbprec.stats.tensor_stats` (``min``/``max``/``mean``/``std``
(population)/``norm``/``abs_max`` over the finite values, NaN/inf/zero counts) and are returned as tuples in
the order of :data:`nbprec.stats.STAT_COLUMNS`.

- **CPU tensors** go to the compiled kernel ``nbprec.capture._stats`` (``_stats.c``), which reads the tensor's
  memory once, in its dtype (float64/32/16, bfloat16, signed integers, uint8, bool), and keeps every running
  sum in float64; a permuted view that covers its memory densely (a transpose) is read as it lies.
- **Other CPU tensors** (complex: magnitudes, float8, ...; all of them when the kernel was not compiled): numpy
  over the tensor's memory, float64 sums over cache-sized chunks (float16/bfloat16 widened to float32 first).
- **Other devices**: torch reductions on the device, in the tensor's dtype with float64 accumulation (float32
  where the device has no float64): ``aminmax``, one sum, one sum of squares and a zero count per tensor,
  stacked and moved to the host with one transfer (:meth:`TensorStatistics.many`: several tensors at once,
  one transfer per device). Tensors holding NaN/inf (seen in their min/max) and the rare tensors whose
  variance the one-pass formula would cancel are redone in a second, exact pass.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from nbprec.dtypes import ELEMENT_TYPE_CODES
from nbprec.stats import STAT_COLUMNS, tensor_stats

Stats = tuple[Any, ...]

#: Statistics of an empty tensor (and of one whose statistics cannot be computed, with counts None).
EMPTY_STATS: Stats = (None, None, None, None, None, None, 0, 0, 0)


def load_kernel() -> Any:
    """The compiled statistics function (``nbprec.capture._stats.stats``), or None when it was not built."""
    try:
        return importlib.import_module("nbprec.capture._stats").stats
    except ImportError:
        return None


def stats_dict(stats: Stats | None) -> dict[str, Any] | None:
    """A statistics tuple as a dict keyed by :data:`~nbprec.stats.STAT_COLUMNS`."""
    return None if stats is None else dict(zip(STAT_COLUMNS, stats, strict=True))


class TensorStatistics:
    """Computes statistics of torch tensors (one instance per capture; it holds no tensors).

    Parameters
    ----------
    torch
        The torch module.
    kernel
        The compiled kernel; ``"auto"`` loads it, None does without (CPU tensors then go to numpy: tests).

    Examples
    --------
    >>> import torch                                            # doctest: +SKIP
    >>> TensorStatistics(torch)(torch.tensor([1.0, -3.0, float("inf"), 0.0]))  # doctest: +SKIP
    (-3.0, 1.0, -0.666..., 1.699..., 3.162..., 3.0, 0, 1, 1)
    """

    def __init__(self, torch: Any, kernel: Any = "auto") -> None:
        self._torch = torch
        self._kernel = load_kernel() if kernel == "auto" else kernel
        self._codes = {getattr(torch, name): code for name, code in ELEMENT_TYPE_CODES.items()}
        self._strided = torch.strided
        self._accumulators: dict[str, Any] = {}  # device type -> float64, or float32 where it has no float64
        # the kernel sums a large tensor in parts at once, on torch's threads, as many as torch uses at the
        # time: a process forked from one that ran OpenMP regions must not start one (it would wait forever for
        # threads it does not have), and torch's own workers call torch.set_num_threads(1) for that reason
        self._threads = torch.get_num_threads

    @property
    def compiled(self) -> bool:
        """Whether CPU tensors go to the compiled kernel."""
        return self._kernel is not None

    def __call__(self, t: Any) -> Stats | None:
        """Statistics of one tensor; None when they cannot be computed (meta, sparse, quantized tensors)."""
        kernel = self._kernel
        if kernel is not None and t.is_cpu:  # (not t.device.type: it makes a device object, 0.5 us)
            code = self._codes.get(t.dtype)
            if code is not None and t.layout is self._strided and not t.is_neg():
                if not t.is_contiguous() and not _covers_memory(t):
                    t = t.contiguous()
                return kernel(t.data_ptr(), t.numel(), code, self._threads(), t)  # (t: held for the call)
        if t.device.type == "cpu":
            try:
                return self._numpy(t)
            except (RuntimeError, TypeError, NotImplementedError):  # meta/sparse/quantized tensors
                return None
        return self.many([t])[0]

    # -- numpy, for CPU tensors the kernel does not take (or without the kernel) --------------------------------
    def _numpy(self, t: Any) -> Stats | None:
        """Float64 sums over cache-sized chunks of the tensor's memory seen as a numpy array (no float64 copy of
        the whole tensor; float16/bfloat16 widened to float32 by torch first), min/max and the zero count on the
        values; :func:`~nbprec.stats.tensor_stats` for tensors holding NaN/inf."""
        torch = self._torch
        x = self._values(t)
        if x is None:
            return None
        n = x.numel()
        if n == 0:
            return EMPTY_STATS
        if x.is_floating_point():
            if x.dtype in (torch.float16, torch.bfloat16):
                x = x.float()
        else:
            x = x.double()
        flat = x.resolve_neg().numpy()
        with np.errstate(over="ignore", invalid="ignore"):
            total, squares = _chunked_sums(flat)
            if not math.isfinite(total + squares):  # NaN or inf among the values (or float64 overflow)
                found = tensor_stats(flat)
                return tuple(found[c] for c in STAT_COLUMNS)
        lo, hi = float(flat.min()), float(flat.max())
        mean = total / n
        var = squares / n - mean * mean
        if var < 1e-3 * mean * mean:  # the one-pass formula cancels: again around the mean
            var = _chunked_sums(flat, mean)[1] / n
        zeros = int(np.count_nonzero(flat == 0))
        return (lo, hi, mean, math.sqrt(max(var, 0.0)), math.sqrt(squares), max(abs(lo), abs(hi)), 0, 0, zeros)

    # -- torch reductions ----------------------------------------------------------------------------------
    def many(self, tensors: Sequence[Any]) -> list[Stats | None]:
        """Statistics of several tensors with torch reductions on their devices, one host transfer per device."""
        torch = self._torch
        out: list[Stats | None] = [None] * len(tensors)
        rows: dict[Any, list[tuple[int, Any, Any]]] = {}
        for i, t in enumerate(tensors):
            try:
                x = self._values(t)
                if x is None:
                    continue
                if x.numel() == 0:
                    out[i] = EMPTY_STATS
                    continue
                acc = self._accumulator(x)
                if not x.is_floating_point():
                    x = x.to(acc)
                lo, hi = torch.aminmax(x)
                row = torch.stack(
                    [
                        lo.to(acc),
                        hi.to(acc),
                        x.sum(dtype=acc),
                        torch.linalg.vector_norm(x, dtype=acc),
                        (x.numel() - torch.count_nonzero(x)).to(acc),
                    ]
                )
            except (RuntimeError, TypeError, NotImplementedError):  # meta/sparse/quantized tensors
                continue
            rows.setdefault((x.device, acc), []).append((i, x, row))
        for group in rows.values():
            values = torch.stack([row for _, _, row in group]).tolist()  # the one transfer to the host
            for (i, x, _), (lo, hi, total, norm, zeros) in zip(group, values, strict=True):
                try:
                    out[i] = self._finish(x, lo, hi, total, norm, int(zeros))
                except (RuntimeError, TypeError, NotImplementedError):
                    out[i] = None
        return out

    def _values(self, t: Any) -> Any:
        """The tensor's values as a flat real tensor on its device (complex: magnitudes), or None."""
        torch = self._torch
        x = t.detach()
        if x.layout != self._strided or x.device.type == "meta" or x.is_quantized:
            return None
        if x.is_complex():
            x = x.abs()
        elif x.dtype == torch.bool:
            x = x.to(torch.uint8)
        elif x.is_floating_point() and x.element_size() == 1:  # float8: few reductions take it; float32 is exact
            x = x.float()
        return x.reshape(-1)

    def _accumulator(self, x: Any) -> Any:
        acc = self._accumulators.get(x.device.type)
        if acc is None:
            torch = self._torch
            try:
                torch.zeros((), dtype=torch.float64, device=x.device)
                acc = torch.float64
            except (RuntimeError, TypeError):
                acc = torch.float32
            self._accumulators[x.device.type] = acc
        return acc

    def _finish(self, x: Any, lo: float, hi: float, total: float, norm: float, zeros: int) -> Stats:
        """The statistics from one pass's sums; a second pass only for NaN/inf, cancellation or overflow."""
        torch = self._torch
        n = x.numel()
        if not (math.isfinite(lo) and math.isfinite(hi)):  # NaN or inf among the values (aminmax shows both)
            return self._with_nonfinite(x, zeros)
        abs_max = max(abs(lo), abs(hi))
        scale = abs_max or 1.0
        acc = None
        if not (math.isfinite(total) and math.isfinite(norm)):  # the accumulator overflowed (float32): rescaled
            acc = self._accumulator(x)
            scaled = x.to(acc) / scale
            total = scale * float(scaled.sum())
            norm = scale * float(torch.linalg.vector_norm(scaled))
        mean = total / n
        rms, mean_s = norm / scale / math.sqrt(n), mean / scale  # in units of the largest |value|: no overflow
        var = rms * rms - mean_s * mean_s
        if not var >= 1e-3 * mean_s * mean_s:  # the one-pass formula cancels: an exact second pass
            acc = acc or self._accumulator(x)
            var = float(torch.var(x.to(acc) / scale, correction=0))
        return (lo, hi, mean, scale * math.sqrt(max(var, 0.0)), norm, abs_max, 0, 0, zeros)

    def _with_nonfinite(self, x: Any, zeros: int) -> Stats:
        torch = self._torch
        finite = torch.isfinite(x)
        values = x[finite]
        nan = int(torch.isnan(x).sum())
        inf = x.numel() - values.numel() - nan
        if values.numel() == 0:
            return (None, None, None, None, None, None, nan, inf, zeros)
        acc = self._accumulator(values)
        lo, hi = (float(v) for v in torch.aminmax(values))
        total = float(values.sum(dtype=acc))
        norm = float(torch.linalg.vector_norm(values, dtype=acc))
        stats = self._finish(values, lo, hi, total, norm, zeros)
        return (*stats[:6], nan, inf, zeros)


_CHUNK = 1 << 16  # elements per float64 chunk: the copy stays in the CPU cache


def _chunked_sums(flat: np.ndarray, shift: float = 0.0) -> tuple[float, float]:
    """Sum and sum of squares of ``flat - shift`` in float64, a cache-sized chunk at a time."""
    total = squares = 0.0
    for start in range(0, flat.size, _CHUNK):
        d: Any = flat[start : start + _CHUNK].astype(np.float64)
        if shift:
            d -= shift
        total += float(d.sum())
        squares += float(np.einsum("i,i->", d, d))  # not np.dot: BLAS threads would fight torch's for the cores
    return total, squares


def _covers_memory(t: Any) -> bool:
    """Whether a non-contiguous tensor's elements fill ``numel`` consecutive slots from ``data_ptr`` (a permuted
    dense tensor such as a transpose): then its statistics can be taken over that memory as it lies."""
    sizes = t.shape
    strides = t.stride()
    expected = 1
    for stride, size in sorted(zip(strides, sizes, strict=True)):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True
