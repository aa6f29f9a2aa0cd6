"""Tensor helpers of the capture: finding tensors in arguments, tensors as arrays, the overflow test."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from nbprec.dtypes import FINITE_MAX, LOW_PRECISION_FLOATS, canonical_dtype
from nbprec.formats.native_read import RAW_BITS_STORAGE

_NESTED_TYPES: dict[type, bool] = {tuple: True, list: True, dict: True, int: False, float: False, type(None): False}


def is_nested(obj: Any) -> bool:
    """Whether ``obj`` is a tuple, list or mapping (one that may hold tensors): ``isinstance`` against the
    ``Mapping`` ABC runs Python code each time, so the answer is kept per type."""
    kind = type(obj)
    found = _NESTED_TYPES.get(kind)
    if found is None:
        found = _NESTED_TYPES[kind] = issubclass(kind, (tuple, list, Mapping))
    return found


def iter_tensors(torch: Any, obj: Any, prefix: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Yield ``(slot, tensor)`` for every tensor in ``obj`` (nested tuples, lists and dicts), in order.

    Slots are positions joined with dots (``"0"``, ``"1.0"``) or dict keys (``"attention_mask"``).
    """
    if isinstance(obj, torch.Tensor):
        yield prefix or "0", obj
    elif depth > 8 or not is_nested(obj):
        return
    elif isinstance(obj, (tuple, list)):
        for i, item in enumerate(obj):
            yield from iter_tensors(torch, item, f"{prefix}.{i}" if prefix else str(i), depth + 1)
    else:
        for key, item in obj.items():
            yield from iter_tensors(torch, item, f"{prefix}.{key}" if prefix else str(key), depth + 1)


def call_tensors(torch: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    """The tensors among a call's arguments: positional by position, keywords by name.

    The same as ``iter_tensors`` over ``args`` and then over ``kwargs``, with the common case (tensors passed
    directly) handled without a generator per argument.
    """
    tensor = torch.Tensor
    found: list[tuple[str, Any]] = []
    for i, arg in enumerate(args):
        if isinstance(arg, tensor):
            found.append((_SLOTS[i] if i < len(_SLOTS) else str(i), arg))
        elif is_nested(arg):
            found.extend(iter_tensors(torch, arg, str(i), 1))
    if kwargs:
        for key, value in kwargs.items():
            if isinstance(value, tensor):
                found.append((str(key), value))
            elif is_nested(value):
                found.extend(iter_tensors(torch, value, str(key), 1))
    return found


_SLOTS = tuple(str(i) for i in range(16))


def dtype_name(tensor: Any) -> str:
    """Canonical dtype name of a torch tensor (``"bfloat16"``, ``"float32"``, ``"int64"``)."""
    return str(tensor.dtype).removeprefix("torch.")


def tensor_to_numpy(torch: Any, tensor: Any) -> Any:
    """The tensor as a numpy array with the same bits (bfloat16/float8 as ``ml_dtypes`` arrays).

    Uses the shared :func:`nbprec.formats._torch.torch_to_numpy`.
    """
    from nbprec.formats._torch import torch_to_numpy

    return torch_to_numpy(tensor)


class TensorArrays:
    """Tensors as the arrays a dump stores: numpy views of their memory, bfloat16/float8 as raw bits.

    Parameters
    ----------
    torch
        The torch module.
    """

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        raw = {"bfloat16": torch.int16, "float8_e4m3fn": torch.uint8, "float8_e5m2": torch.uint8}
        self._raw_bits = {getattr(torch, n): (v, RAW_BITS_STORAGE[n]) for n, v in raw.items() if hasattr(torch, n)}
        self._strided = torch.strided

    def dtype_name(self, dtype: Any) -> str:
        """The canonical name of a torch dtype, as the dump records it."""
        return canonical_dtype(str(dtype).removeprefix("torch."))

    def payload(self, t: Any, copy: bool = False) -> np.ndarray:
        """``t``'s values as a C-contiguous numpy array in the dump's storage dtype (a view when possible).

        ``copy`` makes sure the array owns its memory (the inputs of an in-place op, saved before it runs).
        """
        x = t.detach() if t.requires_grad else t
        if x.device.type != "cpu":
            x = x.cpu()
        if x.layout is not self._strided:
            x = x.to_dense()
        if x.is_conj() or x.is_neg():
            x = x.resolve_conj().resolve_neg()
        if not x.is_contiguous():
            x = x.contiguous()
        raw = self._raw_bits.get(x.dtype)
        if raw is not None:
            array = x.view(raw[0]).numpy().view(raw[1])
        else:
            try:
                array = x.numpy()
            except (TypeError, RuntimeError):  # dtypes numpy lacks: the shared converter's error or ml_dtypes
                array = tensor_to_numpy(self._torch, x)
        return array.copy() if copy else array


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
