"""The layout of each tensor of a CANN dump: what it is stored in, and which layout the index shows it in.

Decided once per tensor while the index is built (:func:`plan_layout`, shapes only, no payload), applied each
time a payload is read (:func:`to_row_layout`). The original layout comes, first to last, from a GE graph's
``origin_format`` / ``origin_shape`` records, from the dump's ``original_shape`` and ``original_op.format``,
and else from the shapes themselves (:func:`nbprec.formats.storage.resolve_origin_format`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from nbprec._record import Record
from nbprec.dtypes import ITEMSIZES
from nbprec.formats.storage import (
    ORIGIN_LAYOUTS,
    StorageFormatError,
    format_name,
    resolve_origin_format,
    to_origin,
)

TYPE_CHECKING = False  # (planning needs no numpy: the CANN index is built without it, see cann_index)
if TYPE_CHECKING:
    import numpy as np


class TensorLayout(Record):
    """How one tensor is stored and shown.

    Attributes
    ----------
    shape
        The index's shape: the original layout's shape, or the stored shape when kept as stored.
    storage_format, storage_shape
        What the file holds.
    origin_format
        The layout ``shape`` is in (the storage format when nothing is converted).
    storage_numel
        Elements the stored shape holds.
    problem
        Why the tensor could not be planned (then it is kept as stored), ``""`` when it could.
    """

    shape: tuple[int, ...]
    storage_format: str
    storage_shape: tuple[int, ...]
    origin_format: str
    storage_numel: int | None
    problem: str = ""


def _stored_shape(tensor: Any, dtype: str) -> tuple[int, ...]:
    """The stored shape; a header with no dims but a payload of several items is a 1-D array of them."""
    shape = tuple(int(d) for d in tensor.shape.dim)
    itemsize = ITEMSIZES.get(dtype, 0)
    if not shape and itemsize and int(tensor.size) > itemsize:
        return (int(tensor.size) // itemsize,)
    return shape


def _resolve(
    storage_format: str,
    storage_shape: tuple[int, ...],
    origin_shape: tuple[int, ...],
    origin_format: str,
) -> tuple[str, str]:
    """(the origin layout to convert to, or "" when none fits; a note). A recorded format that does not fit
    the shapes (a writer that left ``original_op.format`` at its default, NCHW) yields to the inferred one."""
    try:
        answer = (resolve_origin_format(storage_format, storage_shape, origin_shape, origin_format or None), "")
    except StorageFormatError as exc:
        answer = ("", f"{exc}; kept as stored")
        if origin_format:
            try:
                inferred = resolve_origin_format(storage_format, storage_shape, origin_shape, None)
                answer = (inferred, "")
            except StorageFormatError:
                pass
    return answer


def plan_key(
    tensor: Any, dtype: str, origin_op: Any, hint: tuple[str, tuple[int, ...] | None] | None, keep_storage: bool
) -> tuple:
    """Everything of a header entry that :func:`plan_layout` reads, as one hashable value: entries with equal keys
    have equal plans (a dump's tensors come in a few kinds, and planning one costs several times this)."""
    dims = tuple(tensor.shape.dim)
    original = tuple(tensor.original_shape.dim) if tensor.HasField("original_shape") else None
    origin = int(origin_op.format) if origin_op is not None and origin_op.name else None
    size = 0 if dims else int(tensor.size)  # (read only when there are no dims: see _stored_shape)
    return dtype, int(tensor.format), dims, size, original, origin, hint, keep_storage


def plan_layout(
    tensor: Any,
    dtype: str,
    origin_op: Any,
    hint: tuple[str, tuple[int, ...] | None] | None,
    *,
    keep_storage: bool = False,
) -> TensorLayout:
    """Plan one header entry (an ``OpInput`` / ``OpOutput``): see the module docstring. A reader plans each kind
    of entry once (:func:`plan_key`)."""
    storage_format = format_name(int(tensor.format))
    storage_shape = _stored_shape(tensor, dtype)
    numel = math.prod(storage_shape)
    origin_shape = tuple(int(d) for d in tensor.original_shape.dim) if tensor.HasField("original_shape") else None
    origin_format = ""
    if origin_op is not None and origin_op.name:
        origin_format = format_name(int(origin_op.format))
    if hint is not None:
        hint_format, hint_shape = hint
        origin_format = str(hint_format or origin_format)
        origin_shape = tuple(hint_shape) if hint_shape is not None else origin_shape
    if origin_format not in ORIGIN_LAYOUTS:
        origin_format = ""
    if keep_storage:
        return TensorLayout(storage_shape, storage_format, storage_shape, storage_format, numel)
    plain = storage_format in ORIGIN_LAYOUTS
    if plain and (not origin_format or origin_format == storage_format or origin_shape is None):
        same_count = origin_shape is not None and math.prod(origin_shape) == numel
        return TensorLayout(
            origin_shape if same_count else storage_shape, storage_format, storage_shape, storage_format, numel
        )
    if origin_shape is None:
        reason = f"stored as {storage_format} with no original shape recorded: kept as stored (give the GE graph)"
        return TensorLayout(storage_shape, storage_format, storage_shape, storage_format, numel, problem=reason)
    resolved, problem = _resolve(storage_format, storage_shape, origin_shape, origin_format)
    if not resolved:
        return TensorLayout(storage_shape, storage_format, storage_shape, storage_format, numel, problem=problem)
    return TensorLayout(origin_shape, storage_format, storage_shape, resolved, numel)


def to_row_layout(flat: np.ndarray, row: Mapping[str, Any]) -> np.ndarray:
    """A payload (flat, as read) in the layout its index row says (see :func:`plan_layout`)."""
    storage_format, origin_format = row["storage_format"], row["origin_format"]
    shape = tuple(row["shape"])
    if storage_format == origin_format:
        return flat.reshape(shape)
    return to_origin(flat, storage_format, tuple(row["storage_shape"]), shape, origin_format)


__all__ = ["TensorLayout", "plan_key", "plan_layout", "to_row_layout"]
