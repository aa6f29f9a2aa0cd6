"""Canonical dtype names and their numpy equivalents.

Every reader records a tensor's *original* dtype under one canonical name (``"bfloat16"``,
``"float8_e4m3fn"``, ...), whatever spelling its format uses (``torch.bfloat16``, ``DT_BF16``, CANN's
enum 27). Low-precision floats that numpy lacks come from ``ml_dtypes``, so a bf16 payload is held
bit-exactly and converted to float32/float64 only when compared.
"""

from __future__ import annotations

import contextlib

import ml_dtypes
import numpy as np

from nbprec.errors import NbprecError

# canonical name -> numpy dtype
NUMPY_DTYPES: dict[str, np.dtype] = {
    "float64": np.dtype(np.float64),
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "complex64": np.dtype(np.complex64),
    "complex128": np.dtype(np.complex128),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64),
    "bool": np.dtype(np.bool_),
}

# spellings other tools use -> canonical name
_ALIASES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp32": "float32",
    "fp64": "float64",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "bool_": "bool",
    "float8_e4m3": "float8_e4m3fn",
    "hifloat8": "hifloat8",
}

# Largest finite value of each floating dtype (the saturation point).
FINITE_MAX: dict[str, float] = {
    "float16": 65504.0,
    "bfloat16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).max),
    "float8_e4m3fn": float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max),
    "float8_e5m2": float(ml_dtypes.finfo(ml_dtypes.float8_e5m2).max),
    "float32": float(np.finfo(np.float32).max),
    "float64": float(np.finfo(np.float64).max),
}

#: The element type codes of the one-pass C kernels (``nbprec/_elements.h``: the capture's statistics and the
#: overflow scan's counts), by dtype name (numpy's names, which are also torch's dtype attribute names).
ELEMENT_TYPE_CODES = {
    "float64": 0, "float32": 1, "float16": 2, "bfloat16": 3, "int64": 4, "int32": 5, "int16": 6, "int8": 7,
    "uint8": 8, "bool": 9,
}  # fmt: skip

LOW_PRECISION_FLOATS = frozenset({"float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "hifloat8"})
FLOAT_DTYPES = frozenset({"float64", "float32", *LOW_PRECISION_FLOATS})


#: numpy dtypes (and scalar types) already named by :func:`canonical_dtype` (it is called per tensor)
_NUMPY_NAMES: dict[object, str] = {}


def canonical_dtype(name: object) -> str:
    """Return nbprec's canonical name for a dtype spelled any common way.

    Unknown names are returned lower-cased and stripped of prefixes rather than rejected: the index keeps
    what the file said, and :func:`numpy_dtype` raises when such a tensor's payload is actually needed.

    Examples
    --------
    >>> canonical_dtype("torch.bfloat16"), canonical_dtype("DT_FLOAT16"), canonical_dtype(np.float32)
    ('bfloat16', 'float16', 'float32')
    """
    if isinstance(name, (np.dtype, type)):
        try:
            return _NUMPY_NAMES[name]
        except (KeyError, TypeError):
            pass
        dt = np.dtype(name)
        found = next((canon for canon, np_dt in NUMPY_DTYPES.items() if np_dt == dt), dt.name)
        with contextlib.suppress(TypeError):
            _NUMPY_NAMES[name] = found
        return found
    text = str(name).strip()
    for prefix in ("torch.", "tf.", "np.", "numpy.", "DT_", "dt_"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    text = text.lower()
    if text in NUMPY_DTYPES:
        return text
    return _ALIASES.get(text, text)


def numpy_dtype(name: str, *, path: str = "", record: str | None = None) -> np.dtype:
    """The numpy dtype for a canonical dtype name; raises a clear error for unknown ones."""
    try:
        return NUMPY_DTYPES[canonical_dtype(name)]
    except KeyError:
        where = f"{path}: " if path else ""
        rec = f" (record {record})" if record else ""
        known = ", ".join(sorted(NUMPY_DTYPES))
        raise NbprecError(f"{where}unknown dtype {name!r}{rec}; nbprec knows {known}") from None


def is_float(name: str) -> bool:
    """Whether a canonical dtype name is a floating-point type (of any width)."""
    return canonical_dtype(name) in FLOAT_DTYPES
