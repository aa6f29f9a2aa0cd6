"""Canonical dtype names and their numpy equivalents.

Every reader records a tensor's *original* dtype under one canonical name (``"bfloat16"``,
``"float8_e4m3fn"``, ...), whatever spelling its format uses (``torch.bfloat16``, ``DT_BF16``, CANN's
enum 27). Low-precision floats that numpy lacks come from ``ml_dtypes``, so a bf16 payload is held
bit-exactly and converted to float32/float64 only when compared.

``ml_dtypes`` is imported when a numpy dtype is first asked for (:data:`NUMPY_DTYPES`, :func:`numpy_dtype`), not
with this module: a comparison that reads its payloads as bytes (the usual msprobe pair, measured by the compiled
kernel) never needs it, and ``nbprec compare`` then starts 5 ms sooner. What only needs the names and sizes
(:data:`DTYPE_NAMES`, :data:`ITEMSIZES`, :data:`FINITE_MAX`) loads nothing.
"""

from __future__ import annotations

import contextlib

from nbprec.errors import NbprecError

TYPE_CHECKING = False  # (numpy-free at import: the command's early worker reads ITEMSIZES without typing or numpy)
if TYPE_CHECKING:
    from typing import Any

    import numpy as np

    NUMPY_DTYPES: dict[str, np.dtype]

#: Bytes per element of each canonical dtype numpy can hold (with ``ml_dtypes``): the names of
#: :data:`NUMPY_DTYPES`.
ITEMSIZES: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "complex64": 8, "complex128": 16, "int8": 1, "int16": 2, "int32": 4, "int64": 8,
    "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1,
}  # fmt: skip
#: The canonical dtype names numpy can hold: ``name in DTYPE_NAMES`` is ``name in NUMPY_DTYPES`` without
#: importing ``ml_dtypes``.
DTYPE_NAMES = frozenset(ITEMSIZES)
_ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")  # (the names ml_dtypes gives numpy)


def _numpy_dtypes() -> dict[str, np.dtype]:
    """:data:`NUMPY_DTYPES`, made on first use (importing ``ml_dtypes``) and kept as this module's global."""
    global NUMPY_DTYPES
    made = globals().get("NUMPY_DTYPES")
    if made is None:
        import ml_dtypes
        import numpy as np

        made = {name: np.dtype(getattr(ml_dtypes, name) if name in _ML_DTYPES else name) for name in ITEMSIZES}
        NUMPY_DTYPES = made
    return made


def __getattr__(name: str) -> Any:
    """``NUMPY_DTYPES`` (canonical name -> numpy dtype), made on first use (see the module docstring)."""
    if name == "NUMPY_DTYPES":
        return _numpy_dtypes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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

# Largest finite value of each floating dtype (the saturation point): (2 - 2^(1-p)) 2^emax for the dtypes with
# infinities, 448 for float8_e4m3fn (no infinity: its largest exponent holds finite values but for one NaN
# pattern). A test holds them to numpy's and ml_dtypes' finfo.
FINITE_MAX: dict[str, float] = {
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
    "float8_e4m3fn": 448.0,
    "float8_e5m2": 57344.0,
    "float32": 3.4028234663852886e38,
    "float64": 1.7976931348623157e308,
}

# Machine epsilon of each floating dtype (2^(1-p), p the significand's bits): the gap above 1.0, the scale of one
# rounding relative to a value. A test holds them to numpy's and ml_dtypes' finfo.
EPSILON: dict[str, float] = {
    "float16": 2.0**-10,
    "bfloat16": 2.0**-7,
    "float8_e4m3fn": 2.0**-3,
    "float8_e5m2": 2.0**-2,
    "float32": 2.0**-23,
    "float64": 2.0**-52,
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
    if not isinstance(name, str):
        import numpy as np

        if isinstance(name, (np.dtype, type)):
            try:
                return _NUMPY_NAMES[name]
            except (KeyError, TypeError):
                pass
            found = np.dtype(name).name  # (a dtype of NUMPY_DTYPES has its key's name, byte-swapped or not)
            with contextlib.suppress(TypeError):
                _NUMPY_NAMES[name] = found
            return found
    text = str(name).strip()
    for prefix in ("torch.", "tf.", "np.", "numpy.", "DT_", "dt_"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    text = text.lower()
    if text in DTYPE_NAMES:
        return text
    return _ALIASES.get(text, text)


def numpy_dtype(name: str, *, path: str = "", record: str | None = None) -> np.dtype:
    """The numpy dtype for a dtype name (any spelling :func:`canonical_dtype` knows); raises a clear error for unknown
    ones. ``ml_dtypes`` is loaded for its own dtypes only."""
    canonical = canonical_dtype(name)
    if canonical not in DTYPE_NAMES:
        where = f"{path}: " if path else ""
        rec = f" (record {record})" if record else ""
        known = ", ".join(sorted(DTYPE_NAMES))
        raise NbprecError(f"{where}unknown dtype {name!r}{rec}; nbprec knows {known}")
    if canonical in _ML_DTYPES:
        return _numpy_dtypes()[canonical]
    import numpy as np

    return np.dtype(canonical)


def dtype_of(name: str) -> np.dtype:
    """The numpy dtype of a canonical dtype name numpy can hold (one of :data:`DTYPE_NAMES`), for the loaders of
    payloads: :func:`numpy_dtype` once per name, then a dict lookup; ``ml_dtypes`` loaded for its own dtypes only."""
    found = _DTYPE_OF.get(name)
    if found is None:
        if name not in DTYPE_NAMES:
            raise NbprecError(f"unknown dtype {name!r}; nbprec knows {', '.join(sorted(DTYPE_NAMES))}")
        found = _DTYPE_OF[name] = numpy_dtype(name)
    return found


_DTYPE_OF: dict[str, np.dtype] = {}


def is_float(name: str) -> bool:
    """Whether a canonical dtype name is a floating-point type (of any width)."""
    return canonical_dtype(name) in FLOAT_DTYPES
