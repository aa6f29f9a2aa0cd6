"""Tensor helpers of the capture: finding tensors in arguments, statistics in torch, the overflow test."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from nbprec.dtypes import FINITE_MAX, LOW_PRECISION_FLOATS
from nbprec.stats import STAT_COLUMNS

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


def torch_stats(torch: Any, tensor: Any) -> dict[str, float | int | None]:
    """Statistics of a tensor in float64, computed by torch, with :func:`nbprec.stats.tensor_stats`'s meaning.

    ``min``/``max``/``mean``/``std`` (population) /``norm``/``abs_max`` are over the finite values; NaN/inf/zero
    are counted. The common all-finite case costs a handful of reductions and one host transfer.
    """
    t = tensor.detach()
    if t.numel() == 0:
        return dict(_EMPTY_STATS)
    x = t.abs() if t.is_complex() else t
    x = x.to(torch.float64)
    mn, mx = torch.aminmax(x)
    std, mean = torch.std_mean(x, correction=0)
    norm = torch.linalg.vector_norm(x)
    zeros = torch.count_nonzero(x == 0)
    mn_v, mx_v, mean_v, std_v, norm_v, zero_v = torch.stack([mn, mx, mean, std, norm, zeros.to(x.dtype)]).tolist()
    if math.isfinite(mean_v):  # the sum of finite values from <= 32-bit floats cannot overflow float64
        return {
            "min": mn_v,
            "max": mx_v,
            "mean": mean_v,
            "std": std_v,
            "norm": norm_v,
            "abs_max": max(abs(mn_v), abs(mx_v)),
            "nan_count": 0,
            "inf_count": 0,
            "zero_count": int(zero_v),
        }
    nan_count = int(torch.isnan(x).sum())
    inf_count = int(torch.isinf(x).sum())
    finite = x[torch.isfinite(x)]
    if finite.numel() == 0:
        return {**_EMPTY_STATS, "nan_count": nan_count, "inf_count": inf_count, "zero_count": int(zero_v)}
    mn, mx = torch.aminmax(finite)
    std, mean = torch.std_mean(finite, correction=0)
    mn_v, mx_v, mean_v, std_v, norm_v = torch.stack([mn, mx, mean, std, torch.linalg.vector_norm(finite)]).tolist()
    return {
        "min": mn_v,
        "max": mx_v,
        "mean": mean_v,
        "std": std_v,
        "norm": norm_v,
        "abs_max": max(abs(mn_v), abs(mx_v)),
        "nan_count": nan_count,
        "inf_count": inf_count,
        "zero_count": int(zero_v),
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
