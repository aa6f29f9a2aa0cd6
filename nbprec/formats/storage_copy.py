"""The strided copies that move a tensor's values between its storage-format array and its origin-layout
array (:func:`nbprec.formats.storage.to_origin` and ``from_origin``), given the plan that maps their axes.

A plan's copies (:class:`_Piece`: for each blocked dimension its full blocks and its last, partial block) are
worked out once per plan and value size, on arrays of the right shapes over no memory, and kept as byte offsets,
shapes and strides on the flat arrays; a conversion is then one ``np.copyto`` per piece between ``np.ndarray``
views of the two buffers.
"""

from __future__ import annotations

import functools
from itertools import product
from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import as_strided

from nbprec._record import Record

if TYPE_CHECKING:
    from nbprec.formats.storage import _Plan


def _split(view: np.ndarray, blocked: dict[int, int]) -> np.ndarray:
    """``view`` with each axis ``j`` in ``blocked`` split into (blocks, ``blocked[j]``): always a view."""
    shape = [n for j, d in enumerate(view.shape) for n in ((d // blocked[j], blocked[j]) if j in blocked else (d,))]
    strides = [n for j, t in enumerate(view.strides) for n in ((t * blocked[j], t) if j in blocked else (t,))]
    return as_strided(view, shape=shape, strides=strides)


class _Piece(Record):
    """One strided copy of a conversion: the same ``shape`` at a byte offset and strides of the flat origin
    array and of the flat storage array; ``run`` is the byte size of the elements copied (the values' own,
    or a whole contiguous run of them, see :func:`_pieces`)."""

    shape: tuple[int, ...]
    origin_offset: int
    origin_strides: tuple[int, ...]
    storage_offset: int
    storage_strides: tuple[int, ...]
    run: int


@functools.lru_cache(maxsize=4096)  # dumps repeat their shapes; a plan's pieces take ~50 us to work out
def _pieces(plan: _Plan, itemsize: int) -> tuple[_Piece, ...]:
    """The copies that move values between the flat storage and origin arrays of ``plan``: for each blocked
    dimension its full blocks and its last, partial block are separate pieces. Where the last axis of a piece
    is contiguous on both sides (the C0 block of FRACTAL_NZ and NC1HWC0), each run along it is copied as one
    element of that many bytes, about twice as fast as value by value."""
    # The views are worked out on arrays of the right shapes over no memory (nothing is read or written);
    # their offsets and strides, in bytes, are what the pieces keep.
    cell = np.dtype((np.void, itemsize))
    storage = as_strided(np.zeros(1, cell), shape=plan.storage_dims, strides=_c_strides(plan.storage_dims, itemsize))
    origin = as_strided(np.zeros(1, cell), shape=plan.origin_dims, strides=_c_strides(plan.origin_dims, itemsize))
    s_base, o_base = _address(storage), _address(origin)
    blocked = [j for j, ax in enumerate(plan.axes) if isinstance(ax, tuple)]
    pieces = []
    for full in product((True, False), repeat=len(blocked)):
        part = dict(zip(blocked, full, strict=True))
        o_index: list[slice] = [slice(None)] * origin.ndim
        s_index: list[slice | int] = [slice(None)] * storage.ndim
        splits: dict[int, int] = {}
        order: list[int] = []  # storage axes, in the order of the origin piece's axes
        for j, ax in enumerate(plan.axes):
            if not isinstance(ax, tuple):
                order.append(ax)
                continue
            outer, inner = ax
            block = storage.shape[inner]
            count, rest = divmod(origin.shape[j], block)
            if part[j]:
                o_index[j] = slice(0, count * block)
                s_index[outer] = slice(0, count)
                splits[j] = block
                order += [outer, inner]
            else:
                o_index[j] = slice(count * block, None)
                s_index[outer] = count
                s_index[inner] = slice(0, rest)
                order.append(inner)
        o_piece = _split(origin[tuple(o_index)], splits)
        if o_piece.size == 0:
            continue
        kept = [a for a in range(storage.ndim) if not isinstance(s_index[a], int)]
        s_piece = storage[tuple(s_index)].transpose([kept.index(a) for a in order])
        shape, o_strides, s_strides, run = o_piece.shape, o_piece.strides, s_piece.strides, itemsize
        if len(shape) >= 2 and shape[-1] >= 2 and o_strides[-1] == s_strides[-1] == itemsize:
            shape, o_strides, s_strides, run = shape[:-1], o_strides[:-1], s_strides[:-1], shape[-1] * itemsize
        pieces.append(_Piece(shape, _address(o_piece) - o_base, o_strides, _address(s_piece) - s_base, s_strides, run))
    return tuple(pieces)


@functools.lru_cache(maxsize=64)
def _run_dtype(size: int) -> np.dtype:
    return np.dtype((np.void, size))


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def move(storage: np.ndarray, origin: np.ndarray, plan: _Plan, *, into_origin: bool) -> None:
    """Copy the values of ``plan`` between the flat, C-contiguous ``storage`` and ``origin`` arrays (of one
    dtype), into the origin or out of it: one ``np.copyto`` per piece (:func:`_pieces`)."""
    itemsize = storage.itemsize
    for piece in _pieces(plan, itemsize):
        if storage.dtype.hasobject:  # object arrays cannot be made over a buffer: views, value by value
            o, s = _value_views(piece, origin, storage)
        else:
            dtype = storage.dtype if piece.run == itemsize else _run_dtype(piece.run)
            o = np.ndarray(piece.shape, dtype, origin, piece.origin_offset, piece.origin_strides)
            s = np.ndarray(piece.shape, dtype, storage, piece.storage_offset, piece.storage_strides)
        np.copyto(*((o, s) if into_origin else (s, o)))


def _value_views(piece: _Piece, origin: np.ndarray, storage: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A piece of the flat ``origin`` and ``storage`` as views of their own values (runs unfolded)."""
    itemsize = storage.itemsize
    shape, o_strides, s_strides = piece.shape, piece.origin_strides, piece.storage_strides
    if piece.run != itemsize:
        shape, o_strides, s_strides = (*shape, piece.run // itemsize), (*o_strides, itemsize), (*s_strides, itemsize)
    o = as_strided(origin[piece.origin_offset // itemsize :], shape, o_strides)
    return o, as_strided(storage[piece.storage_offset // itemsize :], shape, s_strides)
