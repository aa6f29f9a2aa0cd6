"""Ascend storage formats (NC1HWC0, FRACTAL_Z, FRACTAL_NZ, ...) back to the framework layout, and forward.

An Ascend NPU dump stores a tensor in a hardware storage format: channels split into blocks of ``C0``
(``C = C1 * C0``) and, for the cube unit, rows split into blocks of ``Ni`` (``N = No * Ni``), with the last
block padded. Before comparing with a TensorFlow or PyTorch benchmark, :func:`to_origin` puts the values
back into the original (framework) layout and slices the padding off (FORMATS.md section 2); the padding
need not be zero. :func:`from_origin` and :func:`storage_shape` go the other way, for dump writers.

Storage format -> the origin layouts it converts to (``C0`` and ``Ni`` are read from the storage shape):

- ``NC1HWC0`` ``[N, C1, H, W, C0]`` -> NCHW, NHWC, HWCN, CHWN; a 2-D origin ``[N, C]`` (ND/NC) has H=W=1.
- ``FRACTAL_Z`` ``[C1*H*W, No, Ni, C0]`` -> NCHW, HWCN, NHWC, CHWN (N is Cout); 2-D ``[N, C]`` has H=W=1.
- ``NDC1HWC0`` ``[N, D, C1, H, W, C0]``, ``FRACTAL_Z_3D`` ``[D*C1*H*W, No, Ni, C0]`` -> NCDHW, NDHWC, DHWCN.
- ``FRACTAL_NZ`` ``[..., C1, No, Ni, C0]`` -> ``[..., N, C]`` whatever the origin format says (rank 1:
  ``[C]``; leading dims are batch dims, their product must match).
- Plain layouts (NCHW, NHWC, HWCN, CHWN, NCDHW, NDHWC, DHWCN, ND, NC) are transposed between lettered
  layouts of one family, and reshaped when either side is ND/NC or both are the same.

Inference of an unknown origin format (``None``, ``""``, and ``"ND"`` for a padded storage format): the
candidate layouts of the origin's rank are tried in the order listed above (NCHW first); a candidate fits
when every dimension the storage carries as such (N, H, W, D, batch) equals the origin's and every blocked
dimension fits into its blocks (``C <= C1*C0``, ``N <= No*Ni``). A candidate whose blocks are also
minimal (``C1 == ceil(C/C0)``, ``No == ceil(N/Ni)``) wins over an earlier one that only fits; among equals
the earlier wins. For a plain storage format, an origin shape equal to the storage shape keeps the layout,
then the lettered layouts of the family are tried as transposes, then (ND/NC on either side) a reshape.

A conversion is one strided copy of the kept elements (an ``np.copyto`` for the full blocks and one for the
last, partial block of each blocked dimension), with no Python loop over elements and no dtype change; the
copies themselves are in :mod:`nbprec.formats.storage_copy`.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from types import MappingProxyType

from nbprec._record import Record
from nbprec.errors import NbprecError

TYPE_CHECKING = False  # (numpy on first conversion: planning a layout, as a CANN dump's index does, needs none)
if TYPE_CHECKING:
    import numpy as np


class StorageFormatError(NbprecError):
    """A tensor's storage format, storage shape and origin shape do not go together."""


#: CANN format name -> enum id (FORMATS.md section 2; CHWN 14 and DHWCN 31 from CANN's own constants).
FORMAT_IDS = MappingProxyType(
    {
        name: int(number)
        for name, number in re.findall(
            r"(\w+) (\d+)",
            """NCHW 0, NHWC 1, ND 2, NC1HWC0 3, FRACTAL_Z 4, CHWN 14, HWCN 16, NDHWC 27, FRACTAL_NZ 29, NCDHW 30,
            DHWCN 31, NDC1HWC0 32, FRACTAL_Z_3D 33, NC 35, RESERVED 40, MAX 255""",
        )
    }
)
#: CANN format enum id -> name.
FORMAT_NAMES = MappingProxyType({number: name for name, number in FORMAT_IDS.items()})

#: Plain (unpadded) layouts; the lettered ones are transposes of each other within a family.
ORIGIN_LAYOUTS = ("NCHW", "NHWC", "HWCN", "CHWN", "NCDHW", "NDHWC", "DHWCN", "ND", "NC")
_UNLETTERED = ("ND", "NC")

#: Padded storage format -> its dims, each the group of symbols multiplied into one stored dim.
#: ``C1``/``C0`` split C and ``N1``/``N0`` split N (outer block count, block size); ``B`` is a batch.
_GROUPS = MappingProxyType(
    {
        "NC1HWC0": (("N",), ("C1",), ("H",), ("W",), ("C0",)),
        "FRACTAL_Z": (("C1", "H", "W"), ("N1",), ("N0",), ("C0",)),
        "NDC1HWC0": (("N",), ("D",), ("C1",), ("H",), ("W",), ("C0",)),
        "FRACTAL_Z_3D": (("D", "C1", "H", "W"), ("N1",), ("N0",), ("C0",)),
        "FRACTAL_NZ": (("B",), ("C1",), ("N1",), ("N0",), ("C0",)),
    }
)
#: Padded storage format -> origin rank -> origin layouts tried by inference, in order.
_CANDIDATES = MappingProxyType(
    {
        "NC1HWC0": MappingProxyType({4: ("NCHW", "NHWC", "HWCN", "CHWN"), 2: ("NC",)}),
        "FRACTAL_Z": MappingProxyType({4: ("NCHW", "HWCN", "NHWC", "CHWN"), 2: ("NC",)}),
        "NDC1HWC0": MappingProxyType({5: ("NCDHW", "NDHWC", "DHWCN")}),
        "FRACTAL_Z_3D": MappingProxyType({5: ("NCDHW", "NDHWC", "DHWCN")}),
    }
)
#: Storage formats :func:`to_origin` converts from.
STORAGE_FORMATS = (*_GROUPS, *ORIGIN_LAYOUTS)


def format_name(format: int | str) -> str:
    """The CANN name of a format given by enum id or name; never raises.

    Names are upper-cased and lose a ``FORMAT_`` prefix; an unknown id gives ``"FORMAT_<id>"``.

    Examples
    --------
    >>> format_name(3), format_name("format_fractal_nz"), format_name(57)
    ('NC1HWC0', 'FRACTAL_NZ', 'FORMAT_57')
    """
    if isinstance(format, str):
        name = format.strip().upper()
        bare = name.removeprefix("FORMAT_")
        if bare.isdigit():
            return FORMAT_NAMES.get(int(bare), f"FORMAT_{int(bare)}")
        return bare or name
    try:
        number = int(format)
    except (TypeError, ValueError, OverflowError):
        return str(format)
    return FORMAT_NAMES.get(number, f"FORMAT_{number}")


def format_id(format: str | int) -> int:
    """The CANN enum id of a format name (``"NC1HWC0"``, ``"FORMAT_NC1HWC0"``; an int is returned as is).

    Raises
    ------
    StorageFormatError
        The name is not a known format.
    """
    if not isinstance(format, str):
        return int(format)
    name = format_name(format)
    if name in FORMAT_IDS:
        return FORMAT_IDS[name]
    if name.startswith("FORMAT_") and name[7:].isdigit():
        return int(name[7:])
    raise StorageFormatError(f"unknown format name {format!r}; known formats: {', '.join(FORMAT_IDS)}")


class _Plan(Record):
    """How expanded storage and origin arrays map: ``axes[j]`` is the storage axis of origin axis ``j``, or
    ``(outer, inner)`` for a blocked dimension; ``tight`` says every blocked dimension has minimal padding."""

    layout: str
    storage_dims: tuple[int, ...]
    origin_dims: tuple[int, ...]
    axes: tuple[int | tuple[int, int], ...]
    tight: bool


def _dims(shape: Sequence[int], what: str, fmt: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise StorageFormatError(f"{fmt}: the {what} {shape!r} is not a sequence of integers") from None
    if any(d < 0 for d in dims):
        raise StorageFormatError(f"{fmt}: the {what} {dims} has a negative dimension")
    return dims


def _origin_view(fmt: str, layout: str, origin: tuple[int, ...], where: str) -> tuple[str, tuple[int, ...]]:
    """(letters, dims) of the origin array as the storage format sees it."""
    if fmt == "FRACTAL_NZ":
        if not origin:
            raise StorageFormatError(f"{where}: a scalar origin; FRACTAL_NZ needs an origin of rank 1 or more")
        n, c = (1, origin[0]) if len(origin) == 1 else origin[-2:]
        return "BNC", (math.prod(origin[:-2]), n, c)
    if layout == "NC":
        if len(origin) != 2:
            raise StorageFormatError(f"{where}: NC needs rank 2, the origin has rank {len(origin)}")
        return "NCHW", (*origin, 1, 1)
    if len(layout) != len(origin):
        raise StorageFormatError(f"{where}: {layout} needs rank {len(layout)}, the origin has rank {len(origin)}")
    return layout, origin


def _plan(fmt: str, storage: tuple[int, ...], origin: tuple[int, ...], layout: str) -> _Plan:
    """The plan for a padded storage format, or a StorageFormatError saying what does not fit."""
    where = f"{fmt} storage shape {storage} cannot hold origin shape {origin} as {layout}"
    letters, odims = _origin_view(fmt, layout, origin, where)
    groups = _GROUPS[fmt]
    if fmt == "FRACTAL_NZ":
        if len(storage) < 4:
            raise StorageFormatError(f"{where}: FRACTAL_NZ needs a storage rank of at least 4 ([..., C1, No, Ni, C0])")
        storage = (math.prod(storage[:-4]), *storage[-4:])
    elif len(storage) != len(groups):
        raise StorageFormatError(f"{where}: {fmt} needs a storage rank of {len(groups)}, got {len(storage)}")
    size = dict(zip(letters, odims, strict=True))
    sym_dims: dict[str, int] = {}
    for stored, group in zip(storage, groups, strict=True):
        known = [s for s in group if s in size]
        unknown = [s for s in group if s not in size]
        if not unknown:  # a dim the origin carries as such (N, H, W, D, batch)
            if stored != size[group[0]]:
                name = "batch (product of the leading dims)" if group[0] == "B" else group[0]
                raise StorageFormatError(f"{where}: {name}={size[group[0]]} but the storage has {stored}")
            sym_dims[group[0]] = stored
            continue
        rest = math.prod(size[s] for s in known)
        if stored % rest if rest else stored:
            raise StorageFormatError(
                f"{where}: the stored dim {'*'.join(group)}={stored} is not a multiple of {'*'.join(known)}={rest}"
            )
        sym_dims.update({s: size[s] for s in known})
        sym_dims[unknown[0]] = stored // rest if rest else 0
    symbols = [s for group in groups for s in group]
    axes: list[int | tuple[int, int]] = []
    tight = True
    for letter, dim in zip(letters, odims, strict=True):
        if letter in symbols:
            axes.append(symbols.index(letter))
            continue
        outer, inner = sym_dims[letter + "1"], sym_dims[letter + "0"]
        if dim > outer * inner:
            blocks = "C1*C0" if letter == "C" else "No*Ni"
            raise StorageFormatError(f"{where}: {letter}={dim} > {blocks}={outer}*{inner}={outer * inner}")
        tight = tight and outer == -(-dim // inner)
        axes.append((symbols.index(letter + "1"), symbols.index(letter + "0")))
    return _Plan(layout, tuple(sym_dims[s] for s in symbols), odims, tuple(axes), tight)


@functools.lru_cache(maxsize=4096)  # pure in its (hashable) arguments: dumps repeat their shapes
def _choose_plan(fmt: str, storage: tuple[int, ...], origin: tuple[int, ...], origin_format: str | None) -> _Plan:
    by_rank = _CANDIDATES.get(fmt, {})  # FRACTAL_NZ: [..., N, C] whatever plain layout is named
    supported = ORIGIN_LAYOUTS if fmt == "FRACTAL_NZ" else sorted({x for v in by_rank.values() for x in v} | {"ND"})
    if origin_format is not None and origin_format not in supported:
        raise StorageFormatError(
            f"{fmt} cannot be converted to {origin_format}; supported origin formats: {', '.join(supported)}"
        )
    if fmt == "FRACTAL_NZ" or origin_format not in (None, "ND"):
        return _plan(fmt, storage, origin, "ND" if fmt == "FRACTAL_NZ" else origin_format)
    candidates = by_rank.get(len(origin), ())
    plans, reasons = [], []
    for layout in candidates:
        try:
            plans.append(_plan(fmt, storage, origin, layout))
        except StorageFormatError as exc:
            reasons.append(f"as {layout}: {str(exc).split(': ', 1)[-1]}")
    if not plans:
        why = "; ".join(reasons) or f"{fmt} converts to origins of rank {' or '.join(map(str, by_rank))}"
        raise StorageFormatError(f"{fmt} storage shape {storage}: no origin format fits origin shape {origin}: {why}")
    return next((p for p in plans if p.tight), plans[0])


def _norm_format(fmt: int | str | None) -> str | None:
    if fmt is None or (isinstance(fmt, str) and not fmt.strip()):
        return None
    return format_name(fmt)


def _plain_perm(src: str, dst: str, shape: tuple[int, ...], where: str) -> list[int] | None:
    """Axes taking an array of ``shape`` from plain layout ``src`` to ``dst``, or None for a reshape."""
    if src == dst or src in _UNLETTERED or dst in _UNLETTERED:
        return None
    if sorted(src) != sorted(dst):
        raise StorageFormatError(f"{where}: {src} and {dst} are not transposes of each other")
    if len(shape) != len(src):
        raise StorageFormatError(f"{where}: {src} needs rank {len(src)}, the shape has rank {len(shape)}")
    return [src.index(letter) for letter in dst]


@functools.lru_cache(maxsize=4096)
def _plain_layout(
    fmt: str, storage: tuple[int, ...], origin: tuple[int, ...], origin_format: str | None
) -> tuple[str, list[int] | None]:
    """(origin layout, axis permutation or None for a reshape) of a plain storage format."""
    where = f"{fmt} storage shape {storage}, origin shape {origin}"
    if origin_format is not None and origin_format not in ORIGIN_LAYOUTS:
        raise StorageFormatError(
            f"{where}: unsupported origin format {origin_format}; supported: {', '.join(ORIGIN_LAYOUTS)}"
        )
    layout = origin_format or fmt
    if origin_format not in (None, *_UNLETTERED):  # a lettered origin: a transpose, or a reshape if the same
        perm = _plain_perm(fmt, origin_format, storage, where)
        if perm is not None and tuple(storage[p] for p in perm) != origin:
            expected = tuple(storage[p] for p in perm)
            raise StorageFormatError(f"{where}: as {origin_format} the storage shape transposes to {expected}")
    elif storage == origin or fmt in _UNLETTERED:
        perm = None
    else:  # infer: a transpose within the storage's family, else (origin ND/NC) a reshape
        family = [x for x in ORIGIN_LAYOUTS if sorted(x) == sorted(fmt) and len(storage) == len(fmt)]
        perms = {x: [fmt.index(letter) for letter in x] for x in family}
        layout, perm = next(
            ((x, p) for x, p in perms.items() if tuple(storage[i] for i in p) == origin), (layout, None)
        )
        if perm is None and origin_format is None:
            raise StorageFormatError(
                f"{where}: the origin shape is no transpose of the storage shape in {', '.join(family) or fmt} "
                '(pass origin_format="ND" to reshape)'
            )
    if perm is None and math.prod(origin) != math.prod(storage):
        raise StorageFormatError(
            f"{where}: the origin shape holds {math.prod(origin)} elements, not {math.prod(storage)}"
        )
    return layout, perm


def _checked(
    storage_format: int | str, storage_shape: Sequence[int], origin_shape: Sequence[int]
) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    fmt = _norm_format(storage_format)
    if fmt not in STORAGE_FORMATS:
        raise StorageFormatError(
            f"unsupported storage format {fmt or storage_format!r}; supported: {', '.join(STORAGE_FORMATS)}"
        )
    return fmt, _dims(storage_shape, "storage shape", fmt), _dims(origin_shape, "origin shape", fmt)


def _arguments(
    storage_format: int | str,
    storage_shape: Sequence[int],
    origin_shape: Sequence[int],
    origin_format: int | str | None,
) -> tuple[str, tuple[int, ...], tuple[int, ...], str | None]:
    """:func:`_checked`'s format and shapes and the normalised origin format, remembered for hashable
    arguments (a dump converts many tensors of few shapes)."""
    try:
        return _arguments_of(storage_format, tuple(storage_shape), tuple(origin_shape), origin_format)
    except TypeError:  # unhashable (or not a sequence): checked without the cache, which says what is wrong
        return (*_checked(storage_format, storage_shape, origin_shape), _norm_format(origin_format))


@functools.lru_cache(maxsize=4096)
def _arguments_of(
    storage_format: int | str, storage_shape: tuple, origin_shape: tuple, origin_format: int | str | None
) -> tuple[str, tuple[int, ...], tuple[int, ...], str | None]:
    return (*_checked(storage_format, storage_shape, origin_shape), _norm_format(origin_format))


def resolve_origin_format(
    storage_format: int | str,
    storage_shape: Sequence[int],
    origin_shape: Sequence[int],
    origin_format: int | str | None = None,
) -> str:
    """The origin layout :func:`to_origin` converts to, from the shapes alone (no payload needed).

    ``origin_format`` None, ``""`` or ND is inferred as in :func:`to_origin`; a given one is checked. The
    result is a name from :data:`ORIGIN_LAYOUTS`: ND for FRACTAL_NZ and for a plain reshape.

    Raises
    ------
    StorageFormatError
        As :func:`to_origin` does for these shapes.

    Examples
    --------
    >>> resolve_origin_format("FRACTAL_Z", (18, 3, 16, 16), (3, 3, 20, 40))
    'HWCN'
    """
    fmt, storage, origin = _checked(storage_format, storage_shape, origin_shape)
    origin_fmt = _norm_format(origin_format)
    if fmt not in _GROUPS:
        return _plain_layout(fmt, storage, origin, origin_fmt)[0]
    if not math.prod(origin) and not math.prod(storage):
        return _writer_layout(fmt, origin, origin_fmt)
    return _choose_plan(fmt, storage, origin, origin_fmt).layout


def to_origin(
    data: np.ndarray,
    storage_format: int | str,
    storage_shape: Sequence[int],
    origin_shape: Sequence[int],
    origin_format: int | str | None = None,
) -> np.ndarray:
    """A stored tensor in its origin (framework) layout and shape, with the storage padding sliced off.

    Parameters
    ----------
    data
        The payload, flat or already shaped; its dtype is kept (bfloat16 and float8 included).
    storage_format
        The dump's format, as CANN id or name (``3``, ``"NC1HWC0"``, ``"FORMAT_FRACTAL_NZ"``).
    storage_shape
        The dump's shape of the stored tensor.
    origin_shape
        The original (framework) shape; the result has exactly this shape.
    origin_format
        The original layout (NCHW, NHWC, HWCN, CHWN, NCDHW, NDHWC, DHWCN, ND, NC); ``None`` or ``""`` infers
        it from the shapes (see the module docstring), and so does ``"ND"`` unless the shapes only fit a reshape.

    Returns
    -------
    numpy.ndarray
        A new C-contiguous array, or a reshaped view of ``data`` when nothing moves (same plain layout).

    Raises
    ------
    StorageFormatError
        An unsupported format, ``data.size != prod(storage_shape)``, or an origin shape that does not fit
        into the storage shape (the message names the format, the shapes and the misfit).
    """
    import numpy as np

    from nbprec.formats.storage_copy import move

    fmt, storage, origin, origin_fmt = _arguments(storage_format, storage_shape, origin_shape, origin_format)
    data = np.asarray(data)
    if data.size != math.prod(storage):
        raise StorageFormatError(
            f"{fmt}: the data holds {data.size} elements but the storage shape {storage} needs {math.prod(storage)}"
        )
    if fmt not in _GROUPS:
        perm = _plain_layout(fmt, storage, origin, origin_fmt)[1]
        return data.reshape(origin) if perm is None else np.ascontiguousarray(data.reshape(storage).transpose(perm))
    out = np.empty(origin, dtype=data.dtype)
    if out.size or data.size:  # (an empty origin in an empty storage fits whatever its H*W)
        plan = _choose_plan(fmt, storage, origin, origin_fmt)
        move(np.ascontiguousarray(data).reshape(-1), out.reshape(-1), plan, into_origin=True)
    return out


def _writer_layout(fmt: str, origin: tuple[int, ...], origin_format: int | str | None) -> str:
    """The origin layout a writer stores from: None/ND mean NCHW (4-D), NC (2-D) or NCDHW (5-D)."""
    layout = _norm_format(origin_format)
    if fmt not in _GROUPS:
        if fmt not in ORIGIN_LAYOUTS:
            raise StorageFormatError(f"unsupported storage format {fmt!r}; supported: {', '.join(STORAGE_FORMATS)}")
        return layout or fmt
    if fmt == "FRACTAL_NZ" or layout not in (None, "ND"):
        return "ND" if fmt == "FRACTAL_NZ" else layout
    return _CANDIDATES[fmt].get(len(origin), ("NCHW",))[0]


def storage_shape(
    origin_shape: Sequence[int],
    storage_format: int | str,
    origin_format: int | str | None,
    *,
    itemsize: int,
    c0: int | None = None,
    ni: int = 16,
) -> tuple[int, ...]:
    """The storage shape a tensor of ``origin_shape`` gets in ``storage_format`` (minimal padding).

    ``c0`` defaults to 32 for 1-byte dtypes (``itemsize == 1``) and 16 otherwise; ``ni`` is the ``Ni`` of
    ``N = No * Ni``. ``origin_format`` None or ND means NCHW (4-D), NC (2-D) or NCDHW (5-D) for the
    padded formats but FRACTAL_NZ, and the storage's own layout for plain formats.

    Examples
    --------
    >>> storage_shape((3, 3, 20, 40), "FRACTAL_Z", "HWCN", itemsize=2)
    (18, 3, 16, 16)
    >>> storage_shape((4, 100, 30), "FRACTAL_NZ", "ND", itemsize=1)
    (4, 1, 7, 16, 32)
    """
    fmt = _norm_format(storage_format) or ""
    origin = _dims(origin_shape, "origin shape", fmt)
    layout = _writer_layout(fmt, origin, origin_format)
    where = f"{fmt} from origin shape {origin} as {layout}"
    if fmt not in _GROUPS:
        perm = _plain_perm(layout, fmt, origin, where)
        return origin if perm is None else tuple(origin[p] for p in perm)
    if fmt != "FRACTAL_NZ" and layout not in {x for v in _CANDIDATES[fmt].values() for x in v}:
        raise StorageFormatError(f"{where}: {fmt} is not stored from {layout}")
    c0 = (32 if itemsize == 1 else 16) if c0 is None else int(c0)
    if c0 <= 0 or ni <= 0:
        raise StorageFormatError(f"{where}: block sizes must be positive, got c0={c0}, ni={ni}")
    size = dict(zip(*_origin_view(fmt, layout, origin, where), strict=True))
    size.update(C1=-(-size["C"] // c0), C0=c0, N1=-(-size["N"] // ni), N0=ni)
    dims = tuple(math.prod(size[s] for s in group) for group in _GROUPS[fmt])
    return (*origin[:-2], *dims[1:]) if fmt == "FRACTAL_NZ" else dims


def from_origin(
    array: np.ndarray,
    storage_format: int | str,
    origin_format: int | str | None,
    *,
    c0: int | None = None,
    ni: int = 16,
) -> np.ndarray:
    """``array`` (in ``origin_format``) stored in ``storage_format`` with zero padding: the inverse of
    :func:`to_origin`, for dump writers. The result has the storage dims (see :func:`storage_shape` for
    ``c0``, ``ni`` and a None or ND ``origin_format``) and ``array``'s dtype.

    Examples
    --------
    >>> x = np.arange(2 * 20 * 3 * 3, dtype=np.float16).reshape(2, 20, 3, 3)
    >>> stored = from_origin(x, "NC1HWC0", "NCHW")
    >>> stored.shape
    (2, 2, 3, 3, 16)
    >>> bool((to_origin(stored.ravel(), "NC1HWC0", stored.shape, x.shape) == x).all())
    True
    """
    import numpy as np

    from nbprec.formats.storage_copy import move

    array = np.asarray(array)
    shape = storage_shape(array.shape, storage_format, origin_format, itemsize=array.dtype.itemsize, c0=c0, ni=ni)
    fmt = _norm_format(storage_format) or ""
    layout = _writer_layout(fmt, array.shape, origin_format)
    if fmt not in _GROUPS:
        perm = _plain_perm(layout, fmt, array.shape, fmt)
        return np.ascontiguousarray(array if perm is None else array.transpose(perm)).reshape(shape)
    stored = np.zeros(shape, dtype=array.dtype)
    if array.size:
        plan = _plan(fmt, shape, array.shape, layout)
        move(stored.reshape(-1), np.ascontiguousarray(array).reshape(-1), plan, into_origin=False)
    return stored
