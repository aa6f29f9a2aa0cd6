"""Float64 values as text, exactly as ``repr`` writes them (the shortest text that reads back as the same
double), several times faster: the CSV exports of a large comparison write about fifty numbers a tensor.

:func:`float_texts` uses the C formatter ``nbprec._floattext`` when it is built (see its source for the method),
and ``repr`` otherwise. The formatter's tables, powers of ten to 126 bits and the decimal exponent that goes with
each binary one, are computed here once, the first time they are needed (about 1 ms).
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    from nbprec import _floattext as _C
except ImportError:  # built without a C compiler: repr
    _C = None

_Q_MIN, _Q_MAX = -1074, 971  # binary exponents of normal doubles, v = c 2^q with 2^52 <= c < 2^53
_K_MIN, _K_MAX = -324, 292  # decimal exponents the tables cover
_ready = False


def _floor_log2(num: int, den: int) -> int:
    """floor(log2(num / den)) for positive integers."""
    e = num.bit_length() - den.bit_length()  # num / den is in (2^(e-1), 2^(e+1))
    at_least = num >= den << e if e >= 0 else num << -e >= den
    return e if at_least else e - 1


def exponent_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each binary exponent q (from -1074 to 971): k, the largest integer with 10^k <= 2^q, and the same for
    3/4 2^q (the rounding interval is narrower below a power of two); for each k (from -324 to 292),
    floor(log2(10^-k)). From float64 logarithms, which are far enough from every integer here to be exact (the
    tests check each value against integer arithmetic)."""
    q = np.arange(_Q_MIN, _Q_MAX + 1, dtype=np.float64)
    k_normal = np.floor(q * np.log10(2.0)).astype(np.int64)
    k_closer = np.maximum(np.floor(q * np.log10(2.0) + np.log10(0.75)).astype(np.int64), _K_MIN)  # (not at -1074)
    k = np.arange(_K_MIN, _K_MAX + 1, dtype=np.float64)
    log2_tenth = np.floor(-k * np.log2(10.0)).astype(np.int64)
    return k_normal, k_closer, log2_tenth


def tables() -> tuple[bytes, bytes]:
    """The formatter's tables (see ``set_tables`` in nbprec/_floattext.c): for each binary exponent q, k (the
    largest integer with 10^k <= the width of the rounding interval, 2^q, or 3/4 2^q below a power of two) and
    the shift h = q + floor(log2(10^-k)) + 2; for each k, g = floor(10^-k 2^-r) + 1 with r chosen so that
    2^125 <= g < 2^126, split in 63-bit halves."""
    k_normal, k_closer, log2_tenth = exponent_tables()
    q = np.arange(_Q_MIN, _Q_MAX + 1)
    h_normal = q + log2_tenth[k_normal - _K_MIN] + 2
    h_closer = q + log2_tenth[k_closer - _K_MIN] + 2
    g_halves = []
    for k, log2 in zip(range(_K_MIN, _K_MAX + 1), log2_tenth.tolist(), strict=True):
        r = log2 - 125
        g = (10**-k << -r) + 1 if k <= 0 and r <= 0 else (10**-k >> r) + 1 if k <= 0 else (1 << -r) // 10**k + 1
        g_halves += [g >> 63, g & ((1 << 63) - 1)]
    k_and_h = np.concatenate([k_normal, k_closer, h_normal, h_closer]).astype(np.int16)
    return k_and_h.tobytes(), np.array(g_halves, dtype=np.uint64).tobytes()


def _formatter() -> Any:
    """The C formatter with its tables set, or None when it is not built."""
    global _ready
    if _C is not None and not _ready:
        _C.set_tables(*tables())
        _ready = True
    return _C


def prepare() -> bool:
    """Set the C formatter's tables now rather than at its first use (a process about to fork workers that
    format numbers: they then share them); whether the formatter is built."""
    return _formatter() is not None


def json_texts_function() -> Any:
    """The C function ``json_texts`` (see nbprec/_floattext.c) with its tables set, or None when it is not built:
    a tuple of ints, floats and None as their JSON texts, non-finite floats as the strings of
    :func:`nbprec.formats.native.encode_float`."""
    formatter = _formatter()
    return None if formatter is None else formatter.json_texts


def float_texts(values: Any, nan: str = "") -> list[str]:
    """``repr`` of each value (flattened, as float64), ``nan`` for NaN."""
    array = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    formatter = _formatter()
    if formatter is None:
        return [nan if v != v else repr(v) for v in array.tolist()]
    return formatter.texts(array, nan)


#: A column of numbers as ``nbprec._csvjoin.join_rows`` takes it: (a contiguous float64 or int64 array, the text of
#: NaN); :func:`number_texts` gives its cells as text.
NumberColumn = tuple[np.ndarray, str]


def number_column(values: Any, nan: str = "") -> NumberColumn | list[str]:
    """A float64 or integer array as a CSV column of numbers: ``(values, nan)`` for the C row joiner, which writes
    them as :func:`float_texts` (or ``str``, integers) would, without making a text object per value; their texts
    when the formatter is not built. Integers wider than int64 (uint64) are given as texts."""
    array = np.asarray(values).reshape(-1)
    if array.dtype.kind == "f":
        array = np.ascontiguousarray(array, dtype=np.float64)
        return (array, nan) if _formatter() is not None else float_texts(array, nan)
    if array.dtype.kind in "iu" and np.can_cast(array.dtype, np.int64):
        return (np.ascontiguousarray(array, dtype=np.int64), nan)
    return list(map(str, array.tolist()))


def is_number_column(column: Any) -> bool:
    """Whether ``column`` is a column of numbers :func:`number_column` gave (rather than a sequence of cells)."""
    return type(column) is tuple and len(column) == 2 and isinstance(column[0], np.ndarray)


def number_texts(column: NumberColumn | list[str]) -> list[str]:
    """The cells of a column :func:`number_column` gave, as text (any other column is given as it is)."""
    if not is_number_column(column):
        return column
    values, nan = column
    return float_texts(values, nan) if values.dtype.kind == "f" else list(map(str, values.tolist()))


__all__ = [
    "NumberColumn",
    "float_texts",
    "is_number_column",
    "json_texts_function",
    "number_column",
    "number_texts",
    "prepare",
]
