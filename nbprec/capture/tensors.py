"""Tensor helpers of the capture: finding tensors in arguments, statistics in torch, the overflow test."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from nbprec.dtypes import FINITE_MAX, LOW_PRECISION_FLOATS
from nbprec.stats import STAT_COLUMNS, tensor_stats

_EMPTY_STATS: dict[str, float | int | None] = {**dict.fromkeys(STAT_COLUMNS[:6]), **dict.fromkeys(STAT_COLUMNS[6:], 0)}


def iter_tensors(torch: Any, obj: Any, prefix: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Yield ``(slot, tensor)`` for every tensor in ``obj`` (nested tuples, lists and dicts), in order.

    Slots are positions joined with dots (``"0"``, ``"1.0"``) or dict keys (``"attention_mask"``).
    """
    if isinstance(obj, torch.Tensor):
        yield prefix or "0", obj
    elif depth > 8:
        return
    elif isinstance(obj, (tuple, list)):
        for i, item in enumerate(obj):
            yield from iter_tensors(torch, item, f"{prefix}.{i}" if prefix else str(i), depth + 1)
    elif isinstance(obj, Mapping):
        for key, item in obj.items():
            yield from iter_tensors(torch, item, f"{prefix}.{key}" if prefix else str(key), depth + 1)


def call_tensors(torch: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    """The tensors among a call's arguments: positional by position, keywords by name."""
    found = list(iter_tensors(torch, args)) if args else []
    if kwargs:
        found.extend(iter_tensors(torch, dict(kwargs)))
    return found


def dtype_name(tensor: Any) -> str:
    """Canonical dtype name of a torch tensor (``"bfloat16"``, ``"float32"``, ``"int64"``)."""
    return str(tensor.dtype).removeprefix("torch.")


def tensor_to_numpy(torch: Any, tensor: Any) -> Any:
    """The tensor as a numpy array with the same bits (bfloat16/float8 as ``ml_dtypes`` arrays).

    Uses the shared :func:`nbprec.formats._torch.torch_to_numpy`; falls back to an equivalent raw-bits view
    when that module is unavailable.
    """
    try:
        from nbprec.formats._torch import torch_to_numpy
    except ImportError:
        import ml_dtypes

        t = tensor.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return t.numpy()
    return torch_to_numpy(tensor)


_CHUNK = 1 << 16  # elements per float64 chunk: the copy stays in the CPU cache


def _sums(flat: np.ndarray, shift: float = 0.0) -> tuple[float, float]:
    """Sum and sum of squares of ``flat - shift`` in float64, a cache-sized chunk at a time."""
    total = squares = 0.0
    for start in range(0, flat.size, _CHUNK):
        d = flat[start : start + _CHUNK].astype(np.float64)
        if shift:
            d -= shift
        total += float(d.sum())
        squares += float(np.einsum("i,i->", d, d))  # not np.dot: BLAS threads would fight torch's for the cores
    return total, squares


def torch_stats(torch: Any, tensor: Any) -> dict[str, float | int | None]:
    """Statistics of a tensor in float64, with :func:`nbprec.stats.tensor_stats`'s meaning, but faster.

    ``min``/``max``/``mean``/``std`` (population) /``norm``/``abs_max`` are over the finite values; NaN/inf/zero
    are counted. CPU tensors are viewed as numpy arrays (float16/bfloat16 widened to float32 by torch first);
    sums and sums of squares are taken in float64 over cache-sized chunks (the standard deviation is
    recomputed around the mean when the one-pass formula would lose digits); min/max and the zero count run
    on the original values. Tensors holding NaN/inf fall back to :func:`~nbprec.stats.tensor_stats`.
    """
    t = tensor.detach()
    n = t.numel()
    if n == 0:
        return dict(_EMPTY_STATS)
    if t.device.type != "cpu":
        t = t.cpu()
    if t.is_complex():
        t = t.abs()
    if t.dtype in (torch.float16, torch.bfloat16) or not (t.is_floating_point() or t.dtype == torch.bool):
        t = t.to(torch.float32) if t.is_floating_point() else t.to(torch.float64)
    a = t.numpy()
    if a.dtype == np.bool_:
        a = a.astype(np.float64)
    flat = a.reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        total, squares = _sums(flat)
        if not math.isfinite(total + squares):  # NaN or inf among the values (or float64 overflow)
            return tensor_stats(a)
    mn, mx = float(a.min()), float(a.max())
    mean = total / n
    var = squares / n - mean * mean
    if var < 1e-3 * mean * mean:  # the one-pass formula cancels: recompute around the mean
        var = _sums(flat, mean)[1] / n
    return {
        "min": mn,
        "max": mx,
        "mean": mean,
        "std": math.sqrt(max(var, 0.0)),
        "norm": math.sqrt(squares),
        "abs_max": max(abs(mn), abs(mx)),
        "nan_count": 0,
        "inf_count": 0,
        "zero_count": int(np.count_nonzero(flat == 0)),
    }


def overflow_kind(torch: Any, tensor: Any) -> str | None:
    """What is wrong with a floating tensor: ``"nan"``, ``"inf"``, ``"saturated"`` (|x| at the dtype's max), or None.

    Saturation is checked for low-precision floats only (float16, bfloat16, float8), using
    :data:`nbprec.dtypes.FINITE_MAX`.
    """
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return None
    peak = float(tensor.detach().abs().max())
    if math.isnan(peak):
        return "nan"
    if math.isinf(peak):
        return "inf"
    name = dtype_name(tensor)
    if name in LOW_PRECISION_FLOATS and peak >= FINITE_MAX.get(name, math.inf):
        return "saturated"
    return None
