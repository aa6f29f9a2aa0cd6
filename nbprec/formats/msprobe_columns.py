"""The per-tensor columns of an msprobe ``dump.json`` index, taken from its tensor entries a batch at a time.

:class:`~nbprec.formats.msprobe_index.DumpSourceReader` hands each tensor entry (the dict msprobe writes:
``type``, ``dtype``, ``shape``, ``Max``, ``Min``, ``Mean``, ``Norm``, ``data_name``, ``md5``) to
:class:`TensorColumns` with its op, role and slot. Every :data:`BATCH` entries the columns are taken at once:
one pass per field over the batch (a list comprehension or a numpy conversion each), with the checks
(known dtype, a shape of sizes, a data_name that can name a file) made on the whole batch and repeated entry
by entry only where the batch holds something unusual. Shapes and dtypes are stored once per distinct value.
The entries themselves are dropped after their batch: memory holds the columns, not a dict per tensor.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from array import array
from collections.abc import Callable
from itertools import chain, repeat
from typing import Any

import numpy as np

from nbprec.dtypes import DTYPE_NAMES, canonical_dtype
from nbprec.formats._files import shown

#: Tensor entries whose columns are taken at once.
BATCH = 1 << 12
#: The slots of the first 256 arguments of a list (an op's inputs or outputs), one string object each.
SLOTS = tuple(str(i) for i in range(256))
#: Role codes of :meth:`TensorColumns.add` and the word msprobe writes between op and slot in a tensor name.
ROLES = ("input", "parameter", "output", "gradient")
_NAME_WORDS = (".input.", ".parameters.", ".output.", ".")
_STAT_KEYS = ("Min", "Max", "Mean", "Norm")
_MAX_FILE_NAME = 255
_MAX_NUMEL = (1 << 63) - 1
_INVALID, _TOO_MANY, _UNSEEN = -1, -2, -3
_canonical = functools.lru_cache(maxsize=256)(canonical_dtype)  # one dump names a handful of dtypes

try:
    from nbprec.formats._msprobescan import derived_names as _derived_names_in_c
    from nbprec.formats._msprobescan import shape_ids as _shape_ids_in_c
except ImportError:  # built without a C compiler: the shapes and names in Python
    _derived_names_in_c = _shape_ids_in_c = None


def to_float(value: Any) -> float:
    """A statistic as float; NaN for None, containers and text that is not a number."""
    if type(value) is float:
        return value
    if value is None or isinstance(value, (list, dict)):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def shape_of(value: Any) -> tuple[int, ...] | None:
    """``value`` as a shape when it is a list of sizes (ints, not bools, from 0 to 2**63 - 1), else None."""
    if not isinstance(value, list):
        return None
    for d in value:
        if type(d) is not int or d < 0 or d > _MAX_NUMEL:  # type(), not isinstance(): bool is not a size
            return None
    return tuple(value)


def file_name_problem(data_name: str) -> str:
    """Why ``data_name`` cannot name a payload file in the tensor folder ('' when it can)."""
    if "/" in data_name or data_name in (".", "..") or "\0" in data_name:
        return f"data_name is not a valid file name (over {_MAX_FILE_NAME} bytes or a path)"
    if len(data_name) * 4 > _MAX_FILE_NAME or not data_name.isascii():
        try:
            encoded = os.fsencode(data_name)
        except UnicodeError:
            return "data_name holds characters no file name can hold (lone surrogates): not read"
        if len(encoded) > _MAX_FILE_NAME:
            return f"data_name is not a valid file name (over {_MAX_FILE_NAME} bytes or a path)"
    return ""


def _field(entries: list[dict], key: str) -> list:
    """``entry.get(key)`` of every entry (in C: no Python code runs per entry)."""
    return list(map(dict.get, entries, repeat(key)))


def _floats(values: list) -> np.ndarray:
    """float64 of a batch of statistics: one numpy conversion, entry by entry only when it fails."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return np.array([to_float(v) for v in values], dtype=np.float64)


class TensorColumns:
    """The columns of every tensor of one ``dump.json``, in the order the tensors were added.

    ``problem(sentence, record)`` records a problem of a tensor (its record is the tensor's name).
    """

    def __init__(self, problem: Callable[[str, str], None]) -> None:
        self._problem = problem
        self.entries: list[dict] = []  # the pending batch (the reader appends to it, as add() does)
        self.op_of = array("q")  # per tensor: its op (a position in the reader's per-op columns)
        self.roles = bytearray()  # per tensor: a code of ROLES
        self.slots: list[str] = []
        self.names: list[str] = []
        self.dtypes: list[str] = []
        self.shape_ids = array("q")  # per tensor: a position in self.shapes, or -1 (unknown)
        self.shapes: list[tuple[int, ...]] = []
        self.numels: list[int] = []  # per distinct shape
        self.checksums: list[str] = []
        self.stats: tuple[list[np.ndarray], ...] = ([], [], [], [])  # min, max, mean, norm: one array per batch
        self.payload = bytearray()  # per tensor: 1 when a payload file is named
        self.payload_names: dict[int, str] = {}  # row -> payload file name, where it is not name + ".pt"
        self._shape_ids: dict[Any, int] = {None: _INVALID}
        self._dtypes: dict[Any, str] = {}
        self._known_dtypes: set[str] = set()

    def __len__(self) -> int:
        return len(self.op_of)

    def add(self, entry: dict, op: int, role: int, slot: str) -> None:
        """A tensor entry of op ``op`` (position), role code ``role`` and slot ``slot``."""
        self.entries.append(entry)
        self.op_of.append(op)
        self.roles.append(role)
        self.slots.append(slot)

    def flush(self, ops: list[str]) -> None:
        """Take the columns of the pending entries (``ops``: the op keys, by position)."""
        entries = self.entries
        if not entries:
            return
        stats = [_floats(_field(entries, key)) for key in _STAT_KEYS]
        self._take(ops, _field(entries, "data_name"), _field(entries, "dtype"), _field(entries, "shape"), stats,
                   _field(entries, "md5"))  # fmt: skip
        entries.clear()

    def extend(self, ops: list[str], fields: tuple, rows: slice) -> None:
        """Take the columns of the tensors at ``rows`` of a whole dump.json's fields, as
        :func:`nbprec.formats._msprobescan.scan` gives them (``(op_of, roles, slots, data_names, dtypes, shapes,
        md5s, stats)``: bytes of int64, bytes, lists, and an (n, 4) float64 array of Min, Max, Mean, Norm), in
        the batches :meth:`flush` takes entries in."""
        op_of, roles, slots, data_names, dtypes, shapes, md5s, stats = fields
        self.op_of.frombytes(op_of[rows.start * 8 : rows.stop * 8])
        self.roles.extend(roles[rows])
        self.slots.extend(slots[rows])
        columns = [np.ascontiguousarray(stats[rows, k]) for k in range(len(_STAT_KEYS))]
        self._take(ops, data_names[rows], dtypes[rows], shapes[rows], columns, md5s[rows])

    def _take(self, ops: list[str], data_names: list, dtypes: list, shapes: list, stats: list, md5: list) -> None:
        """The columns of a batch of tensors whose op, role and slot are added, from their fields' raw values
        (``stats``: a float64 array per key of :data:`_STAT_KEYS`)."""
        first = len(self.names)
        found: list[tuple[int, int, str]] = []  # (row, field, problem): said in row order, as read
        names, has_file = self._names(data_names, first, ops, found)
        self._dtype_column(dtypes, first, found)
        self._shape_column(shapes, first, found)
        if any(md5):
            self.checksums.extend(m if type(m) is str else str(m or "") for m in md5)
        else:  # no checksum in the batch (tensor and statistics modes): one shared ''
            self.checksums.extend(repeat("", len(md5)))
        for values, column in zip(self.stats, stats, strict=True):
            values.append(column)
        self.names.extend(names)
        self.payload.extend(has_file)
        for row, _field_code, problem in sorted(found):
            self._problem(problem, self.names[row])

    def _names(self, data_names: list, first: int, ops: list[str], found: list) -> tuple[list[str], bytes]:
        """Each entry's name (its data_name without ``.pt``, else derived from op, role and slot) and whether
        it names a payload file; data_names that cannot name a file are problems (and name no payload)."""
        if {str}.issuperset(map(type, data_names)) and "" not in data_names:  # every entry names its payload
            named = [True] * len(data_names)
            files = data_names
        elif not any(data_names):  # none does (None, '': statistics and md5 modes)
            named = [False] * len(data_names)
            files = []
        else:
            named = [type(d) is str and d != "" for d in data_names]
            files = [d for d, ok in zip(data_names, named, strict=True) if ok]
        names = list(map(str.removesuffix, files, repeat(".pt")))
        if not files and data_names:  # statistics and md5 modes: every name derived, a column at a time
            names = self._derived_names(ops, first, len(data_names))
        elif len(files) < len(data_names):  # some payloads not named: msprobe's own names, derived
            given = iter(names)
            op_of, roles, slots = self.op_of, self.roles, self.slots
            names = [
                next(given) if ok else f"{ops[op_of[row]]}{_NAME_WORDS[roles[row]]}{slots[row]}"
                for row, ok in enumerate(named, start=first)
            ]
        joined = "\n".join(files)
        simple = (
            "/" not in joined
            and "\0" not in joined
            and joined.isascii()  # one byte a character: the length is the file name's
            and max(map(len, files), default=0) <= _MAX_FILE_NAME
            and "." not in files
            and ".." not in files
        )
        if not simple:
            for i in [i for i, ok in enumerate(named) if ok]:
                why = file_name_problem(data_names[i])
                if why:
                    found.append((first + i, 2, why))
                    named[i] = False
        if not all(map(str.endswith, files, repeat(".pt"))):  # payload files not named {name}.pt
            for i in [i for i, ok in enumerate(named) if ok and data_names[i] != names[i] + ".pt"]:
                self.payload_names[first + i] = data_names[i]
        return names, bytes(named)

    def _derived_names(self, ops: list[str], first: int, count: int) -> list[str]:
        """msprobe's names of the tensors at rows ``first`` to ``first + count``: op key, role word and slot."""
        if _derived_names_in_c is not None:
            return _derived_names_in_c(ops, self.op_of, self.roles, self.slots, _NAME_WORDS, first, count)
        rows = slice(first, first + count)
        heads = map(str.__add__, map(ops.__getitem__, self.op_of[rows]), map(_NAME_WORDS.__getitem__, self.roles[rows]))
        return list(map(str.__add__, heads, self.slots[rows]))

    def _dtype_column(self, raw: list, first: int, found: list) -> None:
        cache = self._dtypes
        try:
            dtypes = list(map(cache.__getitem__, raw))
        except (KeyError, TypeError):  # dtypes not seen yet: each distinct spelling once, then the map again
            for spelling in {d for d in raw if type(d) is str} - cache.keys():
                self._dtype(spelling)
            try:
                dtypes = list(map(cache.__getitem__, raw))
            except (KeyError, TypeError):  # not all strings (None, a number, a hostile list)
                dtypes = [self._dtype(d) for d in raw]
        known = self._known_dtypes
        if not known.issuperset(dtypes):
            for i, dtype in enumerate(dtypes):
                if dtype not in known:
                    found.append((first + i, 0, f"unknown dtype {shown(raw[i])}; kept as written"))
        self.dtypes.extend(dtypes)

    def _dtype(self, raw: Any) -> str:
        """The canonical name of a recorded dtype ('' when missing), cached per distinct spelling."""
        dtype = _canonical(raw) if isinstance(raw, str) and raw else ""
        with contextlib.suppress(TypeError):  # an unhashable one is not cached
            self._dtypes[raw] = dtype
        if dtype in DTYPE_NAMES:
            self._known_dtypes.add(dtype)
        return dtype

    def _shape_column(self, raw: list, first: int, found: list) -> None:
        """Each tensor's shape id (:meth:`_shape_id`), and the problems of the shapes that have none. The usual
        shapes (lists of sizes) are looked up and added in C when it is built (``_msprobescan.shape_ids``), the
        others by :meth:`_shape_id`, in row order: the ids of the Python way."""
        if _shape_ids_in_c is not None and type(raw) is list:
            in_c = _shape_ids_in_c(raw, self._shape_ids, self.shapes, self.numels, _UNSEEN)
            ids = np.frombuffer(in_c, dtype=np.int64).copy()
            for i in np.flatnonzero(ids == _UNSEEN).tolist():
                ids[i] = self._shape_id(raw[i])
        else:
            cache = self._shape_ids
            if {list}.issuperset(map(type, raw)) and {int}.issuperset(map(type, chain.from_iterable(raw))):
                shapes = list(map(tuple, raw))  # sizes are ints, never bools: cacheable
                for shape in dict.fromkeys(shapes):  # each new shape once, in order of appearance
                    if shape not in cache:
                        self._shape_id(list(shape))
                found_ids = list(map(cache.get, shapes, repeat(_UNSEEN)))
            else:
                found_ids = [self._shape_id(s) for s in raw]
            ids = np.array(
                [self._shape_id(s) if i == _UNSEEN else i for i, s in zip(found_ids, raw, strict=True)],
                dtype=np.int64,
            )
        for i in np.flatnonzero(ids < 0).tolist():  # _INVALID or _TOO_MANY
            if ids[i] == _INVALID:
                found.append((first + i, 1, f"shape {shown(raw[i])} is not a list of sizes; shape unknown"))
            else:
                what = f"shape {list(raw[i])} has more elements than an index can count; shape unknown"
                found.append((first + i, 1, what))
                ids[i] = _INVALID
        self.shape_ids.frombytes(ids.tobytes())

    def _shape_id(self, raw: Any) -> int:
        """The position of a recorded shape in :attr:`shapes` (added when new), or a code of why it is none.
        (Only checked shapes are looked up: ``(True, 2) == (1, 2)``, and a bool is not a size.)"""
        shape = shape_of(raw)
        if shape is None:
            return _INVALID
        if shape in self._shape_ids:
            return self._shape_ids[shape]
        numel = math.prod(shape)
        if numel > _MAX_NUMEL:
            shape_id = _TOO_MANY
        else:
            shape_id = len(self.shapes)
            self.shapes.append(shape)
            self.numels.append(numel)
        self._shape_ids[shape] = shape_id
        return shape_id

    def columns(self) -> dict[str, Any]:
        """The per-tensor columns as numpy arrays (and ``names``, a list); the buffers are released."""
        n = len(self)
        ids = np.frombuffer(self.shape_ids, dtype=np.int64) if n else np.empty(0, np.int64)
        shapes = np.empty(len(self.shapes) + 1, dtype=object)
        for i, shape in enumerate([*self.shapes, ()]):  # one by one: numpy would take tuples for rows
            shapes[i] = shape
        numels = np.array([*self.numels, -1], dtype=np.int64)
        out = {
            "role": np.array(ROLES, dtype=object)[np.frombuffer(self.roles, dtype=np.uint8)],
            "slot": np.array(self.slots, dtype=object),
            "dtype": np.array(self.dtypes, dtype=object),
            "shape": shapes[ids],
            "numel": numels[ids],
            "checksum": np.array(self.checksums, dtype=object),
        }
        for column, parts in zip(("min", "max", "mean", "norm"), self.stats, strict=True):
            out[column] = np.concatenate(parts) if parts else np.empty(0, np.float64)
        self.slots, self.dtypes, self.checksums, self.stats = [], [], [], ([], [], [], [])
        return out


__all__ = ["BATCH", "ROLES", "SLOTS", "TensorColumns", "file_name_problem", "shape_of", "to_float"]
