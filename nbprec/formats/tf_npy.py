"""TensorFlow benchmark dumps (tfdbg_ascend on GPU/CPU): one ``.npy`` per tensor output.

File names are ``{op_name}.{output_index}.{timestamp}.npy`` (FORMATS.md section 1): ``op_name`` matches
``[A-Za-z0-9_-]+`` (``/`` became ``_``), ``output_index`` is digits and ``timestamp`` is 1 to 255 digits
(microseconds). TensorFlow dumps hold outputs only: every row has role ``"output"`` and slot = output index.

Building the index reads only the ``.npy`` headers (about 128 bytes per file), never the payloads.

Examples
--------
>>> dump = nbprec.open("tf_dump/", occurrence="all")   # doctest: +SKIP
>>> dump.index[["op", "slot", "step", "dtype", "shape"]]  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from nbprec.dtypes import DTYPE_NAMES, canonical_dtype, dtype_of
from nbprec.dump import Dump, Problem
from nbprec.dump_index import index_columns
from nbprec.dump_problems import first_problem
from nbprec.errors import DumpFormatError, EmptyDumpError
from nbprec.formats._files import ConfinedFiles, error_text, inside, open_regular, printable, real_folder
from nbprec.formats._payload import NPY_HEADER_ERRORS, payload_array
from nbprec.formats.base import DumpReader

NAME_PATTERN = re.compile(r"([A-Za-z0-9_-]+)\.([0-9]+)\.([0-9]{1,255})\.npy")
MAX_NAME_LENGTH = 255
OCCURRENCES = ("last", "first", "all")
_MAGIC = b"\x93NUMPY"
_HEADER = re.compile(r"\{'descr': '([^']+)', 'fortran_order': (True|False), 'shape': \(([0-9, ]*)\), \} *\n?")
_MAX_HEADER = 1 << 20
_GUESS_SAMPLE = 32

Occurrence = str | int


class NpyHeaderError(ValueError):
    """A ``.npy`` header that cannot be read (wrong magic, truncated, unsupported version)."""


def read_npy_header(
    file: str, cache: dict[bytes, tuple[np.dtype, tuple[int, ...], bool, int]] | None = None
) -> tuple[np.dtype, tuple[int, ...], bool]:
    """The dtype, shape and Fortran order of the ``.npy`` file ``file``, from its header only (see
    :func:`read_npy_layout`, which also says where the payload starts)."""
    return read_npy_layout(file, cache)[:3]


def read_npy_layout(
    file: str, cache: dict[bytes, tuple[np.dtype, tuple[int, ...], bool, int]] | None = None
) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    """The dtype, shape, Fortran order and payload offset of the ``.npy`` file ``file``, from its header only.

    numpy's own writer always produces the same header layout, which a regular expression reads in a few
    microseconds; anything else is handed to :func:`numpy.lib.format.read_array_header_1_0` /
    ``_2_0``, which validate it fully. ``cache`` (raw header bytes -> parsed header), shared over the files
    of one dump, skips parsing headers already seen. Raises :class:`NpyHeaderError` for a bad header and for
    a payload shorter than the header promises (a truncated file).
    """
    try:
        fd, size = open_regular(file)
    except DumpFormatError as exc:  # a FIFO, a device, unopenable
        raise NpyHeaderError(exc.problem) from None
    try:
        if size == 0:
            raise NpyHeaderError("empty file (0 bytes): not a .npy file")
        head = os.pread(fd, 256, 0)
        if len(head) < 10 or not head.startswith(_MAGIC):
            raise NpyHeaderError("not a .npy file (wrong magic bytes)" if len(head) >= 6 else "truncated header")
        major = head[6]
        start = 10 if major == 1 else 12
        if major not in (1, 2, 3):
            raise NpyHeaderError(f"unsupported .npy format version {major}.{head[7]}")
        length = int.from_bytes(head[8:start], "little")
        if length > _MAX_HEADER or start + length > size:
            raise NpyHeaderError(f"truncated header (declares {length} bytes, file has {size})")
        if start + length > len(head):
            head += os.pread(fd, start + length - len(head), len(head))
    finally:
        os.close(fd)
    raw = head[: start + length]
    parsed = cache.get(raw) if cache is not None else None
    if parsed is None:
        try:
            parsed = _parse_header(file, raw, major, start)
        except NpyHeaderError:
            raise
        except NPY_HEADER_ERRORS as exc:  # numpy's, for odd headers
            raise NpyHeaderError(f"unreadable header: {error_text(exc)}") from None
        if cache is not None:
            cache[raw] = parsed
    dtype, shape, fortran, expected = parsed
    if size < expected:
        raise NpyHeaderError(f"truncated payload: {size} bytes, the header promises {expected}")
    return dtype, shape, fortran, len(raw)


def _parse_header(file: str, raw: bytes, major: int, start: int) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    match = _HEADER.fullmatch(raw[start:].decode("utf-8" if major == 3 else "latin1"))
    if match is not None:
        dtype = np.dtype(match[1])
        shape = tuple(int(d) for d in match[3].split(",") if d.strip())
        fortran = match[2] == "True"
    else:
        dtype, shape, fortran = _numpy_header(file, major)
    if is_raw_bfloat16(dtype):
        dtype = dtype_of("bfloat16")
    expected = len(raw) + (0 if dtype.hasobject else math.prod(shape) * dtype.itemsize)
    return dtype, shape, fortran, expected


def is_raw_bfloat16(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is a plain 2-byte void (``|V2`` / ``<V2``): how numpy saves an ``ml_dtypes.bfloat16``
    array, whose type a ``.npy`` header cannot name. The only 2-byte type ml_dtypes has, so read as bfloat16."""
    return dtype.kind == "V" and dtype.itemsize == 2 and dtype.names is None and dtype.subdtype is None


def _numpy_header(file: str, major: int) -> tuple[np.dtype, tuple[int, ...], bool]:
    with open(file, "rb") as handle:
        try:
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
            else:
                raise NpyHeaderError(f"unsupported .npy format version {version[0]}.{version[1]}")
        except NPY_HEADER_ERRORS as exc:  # numpy's errors for a malformed header
            raise NpyHeaderError(f"unreadable header: {error_text(exc)}") from exc
    return dtype, tuple(shape), fortran


def parse_file_name(name: str) -> tuple[str, int, int] | str:
    """``(op_name, output_index, timestamp)`` for a valid dump file name, else the reason it is not one.

    Examples
    --------
    >>> parse_file_name("scope_MatMul.0.1675157077176648.npy")
    ('scope_MatMul', 0, 1675157077176648)
    >>> parse_file_name("scope/MatMul:0.npy")
    "does not follow the naming rule {op_name}.{output_index}.{timestamp}.npy"
    """
    if len(name) > MAX_NAME_LENGTH:
        return f"name longer than {MAX_NAME_LENGTH} characters ({len(name)}): the op cannot be compared"
    match = NAME_PATTERN.fullmatch(name)
    if match is None:
        return "does not follow the naming rule {op_name}.{output_index}.{timestamp}.npy"
    return match[1], int(match[2]), int(match[3])


def select_occurrences(timestamps: list[tuple[int, str]], occurrence: Occurrence) -> list[tuple[int, int, str]]:
    """Pick occurrences of one tensor: ``(step, timestamp, file name)`` from its ``(timestamp, name)`` list.

    ``"last"``/``"first"`` give step -1; an int ``k`` gives the k-th occurrence in time as step ``k`` (a
    negative ``k`` counts from the end and gives step -1); ``"all"`` gives every occurrence with steps 0, 1, 2, ...
    """
    ordered = sorted(timestamps)
    if occurrence == "all":
        return [(step, ts, name) for step, (ts, name) in enumerate(ordered)]
    if occurrence == "last":
        return [(-1, *ordered[-1])]
    if occurrence == "first":
        return [(-1, *ordered[0])]
    k = int(occurrence)
    if -len(ordered) <= k < len(ordered):
        return [(k if k >= 0 else -1, *ordered[k])]
    return []


def _make_loader(root: str) -> Callable[[Mapping[str, Any]], np.ndarray]:
    """The payload loader of a dump whose real folder is ``root``: regular files inside it only."""

    files = ConfinedFiles([root])

    def load(row: Mapping[str, Any]) -> np.ndarray:
        file, name = str(row["file"]), str(row["name"])
        if row["dtype"] == "object":
            raise DumpFormatError(file, "holds Python objects (a pickle); nbprec never unpickles files", name)
        fd, size = files.open(file, name)
        try:
            offset = int(row.get("offset", -1))
            if offset >= 0:  # a C-order payload of a native dtype at a known offset: read it directly
                shape = tuple(row["shape"])
                return payload_array(fd, file, dtype_of(row["dtype"]), offset, math.prod(shape), size).reshape(shape)
        finally:
            os.close(fd)
        try:
            array = np.load(file, mmap_mode="r", allow_pickle=False)
        except ValueError as exc:
            if "allow_pickle" in str(exc):
                refusal = "holds Python objects (a pickle); nbprec never unpickles files"
                raise DumpFormatError(file, refusal, name) from exc
            raise DumpFormatError(file, f"cannot read the .npy file: {exc}", name) from exc
        except (*NPY_HEADER_ERRORS, OSError) as exc:
            raise DumpFormatError(file, f"cannot read the .npy file: {exc}", name) from exc
        raw = row["dtype"] == "bfloat16" and is_raw_bfloat16(array.dtype)
        return array.view(dtype_of("bfloat16")) if raw else array

    return load


#: The index :mod:`nbprec.tf` writes beside its ``.npy`` files (one JSON object per line).
CAPTURE_INDEX = "nbprec_tf_dump.jsonl"
_CAPTURE_INDEX_MAX = 256 << 20


def _capture_op_types(path: Path, problems: list[Problem]) -> dict[str, str]:
    """File name -> TensorFlow op type, from the index of a dump written by :mod:`nbprec.tf` ({} without one)."""
    try:
        if not path.is_file():
            return {}
        if path.stat().st_size > _CAPTURE_INDEX_MAX:
            problems.append(Problem(str(path), f"larger than {_CAPTURE_INDEX_MAX >> 20} MiB: op types not read"))
            return {}
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        problems.append(Problem(str(path), f"cannot read the capture index: {exc.strerror or exc}"))
        return {}
    out = {}
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash: the files themselves are still read
        if isinstance(record, dict) and record.get("record") == "tensor" and isinstance(record.get("file"), str):
            out[record["file"]] = str(record.get("op_type", ""))
    return out


class TfNpyDumpReader(DumpReader):
    """Reads a folder of TensorFlow ``{op_name}.{output_index}.{timestamp}.npy`` files.

    Options of :meth:`open`: ``occurrence`` = ``"last"`` (default, like the Ascend tools), ``"first"``,
    ``"all"`` (every timestamp becomes its own step 0, 1, 2, ...) or an int (that occurrence of each tensor).
    """

    name: ClassVar[str] = "tf_npy"
    description: ClassVar[str] = "TensorFlow benchmark dump: {op_name}.{output_index}.{timestamp}.npy files"

    @classmethod
    def guess_can_open(cls, path: Path) -> bool:
        """A folder whose first few ``.npy`` files follow the naming rule."""
        try:
            if not Path(path).is_dir():
                return False
            matched = total = 0
            with os.scandir(path) as entries:
                for entry in entries:
                    if not entry.name.endswith(".npy"):
                        continue
                    total += 1
                    matched += NAME_PATTERN.fullmatch(entry.name) is not None
                    if total >= _GUESS_SAMPLE:
                        break
            return matched > 0 and matched * 2 >= total
        except OSError:
            return False

    def open(self, path: Path, *, occurrence: Occurrence = "last", **options: Any) -> Dump:
        """Index the folder ``path`` from file names and ``.npy`` headers."""
        if options:
            raise TypeError(f"the tf_npy reader takes only occurrence=, got {sorted(options)}")
        if not (occurrence in OCCURRENCES or (isinstance(occurrence, int) and not isinstance(occurrence, bool))):
            raise ValueError(f"occurrence must be 'last', 'first', 'all' or an int, not {occurrence!r}")
        path = Path(path)
        if not path.is_dir():
            raise DumpFormatError(path, "a TensorFlow npy dump is a folder of .npy files")
        problems: list[Problem] = []
        tensors: dict[tuple[str, int], list[tuple[int, str]]] = defaultdict(list)
        root = real_folder(path)
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name == CAPTURE_INDEX:  # the index nbprec.tf writes beside the files: op types
                    continue
                parsed = parse_file_name(entry.name)
                record = f"{parsed[0]}.{parsed[1]}" if not isinstance(parsed, str) else ""
                if entry.is_dir():
                    problems.append(Problem(str(path / entry.name), "subfolder ignored (a TF dump is flat)", record))
                    continue
                if isinstance(parsed, str):
                    problems.append(Problem(str(path / entry.name), parsed))
                    continue
                if entry.is_symlink() and not inside(entry.path, [root]):
                    where = printable(os.path.realpath(entry.path))
                    problems.append(
                        Problem(entry.path, f"symbolic link to {where}, which lies outside the dump: not read", record)
                    )
                    continue
                tensors[parsed[0], parsed[1]].append((parsed[2], entry.name))
        listed = len(problems)  # (the listing's: names that break the naming rule, links out of the dump)
        records = self._records(path, tensors, occurrence, problems)
        if not records:
            raise EmptyDumpError(
                path,
                f"no valid TensorFlow .npy dump file ({len(problems)} files or entries could not be used"
                f"{first_problem(problems, after=listed)})",
            )
        op_types = _capture_op_types(path / CAPTURE_INDEX, problems)
        if op_types:
            for r in records:
                r["op_type"] = op_types.get(Path(r["file"]).name, "")
        index = index_columns(records, run=path.name)  # Columns: Dump.index makes the frame when asked
        index["offset"] = np.array([r["offset"] for r in records], dtype=np.int64)
        meta: dict[str, Any] = {"task": "tensor", "framework": "tensorflow", "occurrence": occurrence}
        raw_bfloat16 = sum(1 for r in records if r["raw_bfloat16"])
        if raw_bfloat16:
            meta["assumptions"] = [
                f"{raw_bfloat16} .npy files hold 2-byte void values (|V2), as numpy saves ml_dtypes.bfloat16 "
                "arrays: read as bfloat16"
            ]
        return Dump(index, path=path, format=self.name, loader=_make_loader(root), problems=problems, meta=meta)

    @staticmethod
    def _records(
        path: Path,
        tensors: Mapping[tuple[str, int], list[tuple[int, str]]],
        occurrence: Occurrence,
        problems: list[Problem],
    ) -> list[dict[str, Any]]:
        base = str(path) + os.sep
        dtypes: dict[np.dtype, str] = {}
        headers: dict[bytes, tuple[np.dtype, tuple[int, ...], bool, int]] = {}
        chosen: list[tuple[int, int, str, str, int]] = []
        for (op, slot), stamps in tensors.items():
            picked = select_occurrences(stamps, occurrence)
            if not picked:
                problems.append(Problem(base + stamps[0][1], f"only {len(stamps)} occurrences, no #{occurrence}"))
            chosen.extend((step, ts, name, op, slot) for step, ts, name in picked)
        chosen.sort()  # by step, then timestamp (execution order), then file name
        records: list[dict[str, Any]] = []
        order: dict[int, int] = defaultdict(int)
        for step, _ts, name, op, slot in chosen:
            file = base + name
            name_of = f"{op}.{slot}"
            try:
                dtype, shape, fortran, offset = read_npy_layout(file, headers)
            except (OSError, NpyHeaderError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                problems.append(Problem(file, f".npy file not read: {why}", name_of))
                continue
            canon = dtypes.get(dtype)
            if canon is None:
                canon = dtypes[dtype] = canonical_dtype(dtype)
            has_data = True
            if canon == "object":
                problems.append(
                    Problem(file, "object array (a pickle): indexed, but its payload will not be loaded", name_of)
                )
            elif dtype.kind == "V" and canon not in DTYPE_NAMES:
                has_data = False
                problems.append(
                    Problem(
                        file,
                        f"raw {dtype.itemsize}-byte values ({dtype.str}): the .npy header does not say their real "
                        "dtype (a 1-byte float8, int4, ...); indexed, but its payload will not be loaded",
                        name_of,
                    )
                )
            records.append(
                {
                    "name": name_of,
                    "step": step,
                    "order": order[step],
                    "op": op,
                    "slot": str(slot),
                    "role": "output",
                    "dtype": canon,
                    "shape": shape,
                    "numel": math.prod(shape),
                    "file": file,
                    "has_data": has_data,
                    "raw_bfloat16": canon == "bfloat16" and dtype == dtype_of("bfloat16"),
                    # where the payload starts, for a direct read; -1: np.load decides (Fortran order,
                    # another byte order, a dtype without a canonical name)
                    "offset": offset if not fortran and dtype.isnative and canon in DTYPE_NAMES else -1,
                }
            )
            order[step] += 1
        return records


__all__ = [
    "NAME_PATTERN",
    "TfNpyDumpReader",
    "parse_file_name",
    "read_npy_header",
    "read_npy_layout",
    "select_occurrences",
]
