"""Reader of nbprec's own dump format (specified in ``docs/dump-format.md``), and the format's constants.

The writer lives in :mod:`nbprec.formats.native`, which re-exports :class:`NativeDumpReader`. Opening a dump
reads the header, the index (from the column cache ``close()`` writes, else from ``index.jsonl``), edges and
module hierarchy; payloads are memory-mapped on demand and call stacks read on first use.
"""

from __future__ import annotations

import errno
import functools
import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from nbprec.columns import group_codes
from nbprec.dtypes import numpy_dtype
from nbprec.dump import Dump, Problem
from nbprec.dump_index import index_columns, unreadable_integer
from nbprec.errors import DumpFormatError, EmptyDumpError, NbprecError
from nbprec.formats._files import PayloadFolder, error_text, open_regular, read_regular, real_folder
from nbprec.formats._jsonstream import int_or_float
from nbprec.formats._npyfile import KERNEL_DESCRS, header_span, parse_header
from nbprec.formats._payload import MAP_FROM, NPY_HEADER_ERRORS, payload_array
from nbprec.formats.base import DumpReader
from nbprec.formats.native_columns import COLUMNS_FILE, INDEX_FILE, read_columns
from nbprec.formats.probes import HEADER_FILE, is_run_tree, nbprec_dump

FORMAT_NAME = "nbprec-dump"
FORMAT_VERSION = 1
EDGES_FILE = "edges.jsonl"
MODULES_FILE = "modules.jsonl"
STACKS_FILE = "stacks.jsonl"
CALLS_FILE = "calls.jsonl"
COMPLETE_FILE = "complete"
TENSOR_DIR = "tensors"
MODES = ("tensor", "statistics")

#: Dtypes numpy lacks, stored as their raw bits: canonical name -> storage dtype.
RAW_BITS_STORAGE: dict[str, np.dtype] = {
    "bfloat16": np.dtype(np.uint16),
    "float8_e4m3fn": np.dtype(np.uint8),
    "float8_e5m2": np.dtype(np.uint8),
}

_SAFE_FILE = rf"{TENSOR_DIR}/[A-Za-z0-9_-][A-Za-z0-9._~-]*\.npy"
MAX_HEADER = 16 << 20  # bytes of nbprec-dump.json or of the complete marker read at most
MAX_LINE = 64 << 20  # bytes of one index.jsonl line read at most
_JSONL_CHUNK = 16 << 20


class NativeDumpReader(DumpReader):
    """Reads nbprec's own dump format (``nbprec-dump.json`` + ``index.jsonl`` + ``tensors/``)."""

    name: ClassVar[str] = "nbprec"
    description: ClassVar[str] = "nbprec's native dump (written by nbprec.capture / NativeDumpWriter)"

    @classmethod
    def guess_can_open(cls, path: Path) -> bool:
        """A folder holding ``nbprec-dump.json``, or run folders named ``rank{M}`` / ``step{N}/rank{M}``."""
        return nbprec_dump(path)

    def open(self, path: Path, **options: Any) -> Dump:
        """Read the header and index of the run folder ``path`` (never the payloads)."""
        from nbprec.formats.native_tree import read_run_tree

        if not (Path(path) / HEADER_FILE).is_file() and is_run_tree(Path(path)):
            return read_run_tree(Path(path))  # one capture folder per rank (and step): docs/capture.md
        if options:
            raise TypeError(f"the nbprec reader takes no options, got {sorted(options)}")
        return read_native_dump(Path(path))


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-strict JSON constant {token}")


def _parse_lines(
    body: bytes, first_line: int, final: bool, file: Path, problems: list[Problem]
) -> list[dict[str, Any]]:
    """The objects of the complete lines ``body`` (line numbers from ``first_line``): one ``json.loads`` of the
    lines joined into an array (newlines kept, so no string can span two lines), line by line on any error to
    say which lines are bad. ``final``: ``body`` ends the file without a newline (its last line may be cut)."""
    n_lines = body.count(b"\n") + 1
    try:
        text = body.decode("utf-8")
        records = json.loads("[" + text.replace("\n", ",\n") + "]", parse_constant=_reject_constant)
        if len(records) == n_lines and all(type(r) is dict for r in records):
            return records
    except (UnicodeDecodeError, ValueError, RecursionError):
        pass
    records = []
    lines = body.split(b"\n")
    for number, line in enumerate(lines, start=first_line):
        if not line.strip():
            continue
        try:
            obj = json.loads(line.decode("utf-8"), parse_constant=_reject_constant, parse_int=int_or_float)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            last = final and number == first_line + len(lines) - 1
            what = "truncated last line (the run stopped while writing it)" if last else f"invalid JSON: {exc}"
            problems.append(Problem(str(file), what, f"line {number}"))
            continue
        if type(obj) is not dict:
            problems.append(Problem(str(file), f"expected a JSON object, got {type(obj).__name__}", f"line {number}"))
            continue
        records.append(obj)
    return records


def read_jsonl(file: Path, problems: list[Problem], *, required: bool = True) -> list[dict[str, Any]]:
    """Parse a JSON-lines file of objects; bad lines (and a truncated last line) become problems.

    The file is read in chunks of 16 MiB, each parsed at once (see :func:`_parse_lines`); a line longer than
    :data:`MAX_LINE` (no newline in 64 MiB: a damaged or hostile file) ends the reading with a problem, so a
    huge sparse file is not read to its end. A missing file gives no records. A file that cannot be read (a
    FIFO, a device) is a :class:`DumpFormatError`, or, when not ``required``, a problem and no records.
    """
    try:
        fd, size = open_regular(file)
    except FileNotFoundError:
        return []
    except DumpFormatError as exc:
        if required:
            raise
        problems.append(Problem(str(file), f"{exc.problem}; its records are missing from the dump"))
        return []
    records: list[dict[str, Any]] = []
    try:
        offset, line, pending = 0, 1, b""
        while True:
            try:
                chunk = os.pread(fd, _JSONL_CHUNK, offset)
            except OSError as exc:
                raise DumpFormatError(file, f"cannot read: {exc.strerror or exc}") from exc
            offset += len(chunk)
            data = pending + chunk
            cut = data.rfind(b"\n") + 1 if chunk else len(data)
            body, pending = data[:cut], data[cut:]
            if len(pending) > MAX_LINE:
                problems.append(
                    Problem(
                        str(file),
                        f"line longer than {MAX_LINE} bytes (damaged?): the rest of the file "
                        f"({max(size - offset + len(pending), 0)} bytes) was not read",
                        f"line {line}",
                    )
                )
                break
            final = not chunk and not data.endswith(b"\n")
            stripped = body.rstrip(b"\n")
            if stripped.strip():
                records.extend(_parse_lines(stripped, line, final, file, problems))
            line += body.count(b"\n")
            if not chunk:
                break
    finally:
        os.close(fd)
    return records


def read_header(path: Path) -> dict[str, Any]:
    """The validated header ``nbprec-dump.json`` of the run folder ``path``."""
    file = path / HEADER_FILE
    try:
        header = json.loads(
            read_regular(file, limit=MAX_HEADER, what="header").decode("utf-8"),
            parse_constant=_reject_constant,
            parse_int=int_or_float,
        )
    except FileNotFoundError:
        raise DumpFormatError(file, "missing: not an nbprec dump folder") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DumpFormatError(file, f"corrupt header, not strict JSON: {exc}") from exc
    except OSError as exc:
        raise DumpFormatError(file, f"cannot read: {exc.strerror or exc}") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise DumpFormatError(file, f"not an nbprec dump header (expected format {FORMAT_NAME!r})")
    version = header.get("version")
    if not isinstance(version, int) or version < 1 or version > FORMAT_VERSION:
        raise DumpFormatError(file, f"unsupported format version {version!r} (this nbprec reads 1..{FORMAT_VERSION})")
    if header.get("mode") not in MODES:
        raise DumpFormatError(file, f"mode must be one of {MODES}, got {header.get('mode')!r}", "mode")
    return header


def _read_complete(path: Path, problems: list[Problem]) -> dict[str, Any]:
    file = path / COMPLETE_FILE
    try:
        text = read_regular(file, limit=MAX_HEADER, what="complete marker").decode("utf-8")
        record = json.loads(text, parse_int=int_or_float)
    except FileNotFoundError:
        problems.append(
            Problem(str(file), "the run did not finish (no complete marker): it crashed or is still being written")
        )
        return {"finished": False}
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, DumpFormatError) as exc:
        why = exc.problem if isinstance(exc, DumpFormatError) else exc
        problems.append(Problem(str(file), f"unreadable complete marker: {why}"))
        return {"finished": False}
    if not isinstance(record, dict):
        problems.append(Problem(str(file), "complete marker is not a JSON object"))
        return {"finished": False}
    if not record.get("finished"):
        problems.append(Problem(str(file), f"the run ended with an error: {record.get('error') or 'unknown'}"))
    return record


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@functools.lru_cache(maxsize=64)
def _stored_as(recorded: str) -> tuple[np.dtype, np.dtype] | None:
    """(the numpy dtype an index dtype name means, the dtype its payload is stored as), or None when it names
    no dtype numpy holds (a pure function of the name: a dump has a handful)."""
    try:
        target = numpy_dtype(recorded)
    except NbprecError:
        return None
    return target, RAW_BITS_STORAGE.get(recorded, target)


def _check_payload(file: str, row: Mapping[str, Any], dtype: np.dtype, shape: tuple[int, ...]) -> np.dtype:
    """The numpy dtype the index says the payload holds (its original dtype, which a raw-bits storage is
    viewed as), when the stored ``dtype`` and ``shape`` are what the index says; else an error."""
    recorded = str(row["dtype"])
    known = _stored_as(recorded)
    if known is None:  # the usual error, naming the file and the tensor
        numpy_dtype(recorded, path=file, record=str(row["name"]))
    target, expected = known  # type: ignore[misc] (numpy_dtype raised otherwise)
    if dtype != expected or tuple(shape) != tuple(row["shape"]):
        raise DumpFormatError(
            file, f"payload is {dtype}{list(shape)}, index says {recorded}{list(row['shape'])}", str(row["name"])
        )
    return target


@functools.lru_cache(maxsize=64)
def _npy_dtype(descr: str) -> np.dtype:
    """The numpy dtype of a ``.npy`` header's ``descr`` (a pure function of the text)."""
    return np.dtype(descr)


def _open_npy(file: str, fd: int, size: int, row: Mapping[str, Any]) -> np.ndarray:
    """The ``.npy`` payload of ``row``, open as ``fd`` (a regular file of ``size`` bytes), memory-mapped when
    large.

    Parses the plain headers numpy writes (simple dtype, C or Fortran order) itself, where ``np.load``
    opens the file three times and compiles the header with ``ast``, and checks them against the index before
    the payload is mapped or read; anything else goes to ``np.load``.
    """
    head = os.pread(fd, size if size < MAP_FROM else 4096, 0)  # a small file in one read: its payload too
    span = header_span(head)
    if span is None:  # (np.load would open a zip archive as an .npz, which holds no array)
        raise DumpFormatError(file, "not a .npy file (its first bytes are not the .npy magic)", str(row["name"]))
    parsed = _npy_header(head[span[0] : span[1]], span[1])
    if parsed is None:
        array = np.load(file, mmap_mode="r", allow_pickle=False)
        return array.view(_check_payload(file, row, array.dtype, array.shape))
    dtype, shape, fortran, offset = parsed
    target = _check_payload(file, row, dtype, shape)  # before anything is mapped or read
    numel = math.prod(shape)
    if dtype.hasobject or numel == 0:
        array = np.load(file, mmap_mode="r", allow_pickle=False)  # the usual error, or numpy's empty array
    else:  # mapped or read in place: np.memmap costs about 4x more to set up
        flat = payload_array(fd, file, dtype, offset, numel, size, head)
        array = flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)
    return array.view(target) if array.dtype != target else array


@functools.lru_cache(maxsize=1024)
def _npy_header(text: bytes, offset: int) -> tuple[np.dtype, tuple[int, ...], bool, int] | None:
    """(dtype, shape, Fortran order, payload offset) of a plain ``.npy`` header, or None for another kind (a pure
    function of the header's bytes: tensors of one shape and dtype share it, so a dump parses a few)."""
    parsed = parse_header(text)
    if parsed is None:
        return None
    descr, fortran, shape = parsed
    return _npy_dtype(descr), shape, fortran, offset


class PayloadLoader:
    """Loads a native dump's ``.npy`` payloads (see :func:`_open_npy`), reading only regular files inside the
    dump's ``tensors/`` folder (a symbolic link there is followed only when it stays inside)."""

    #: What :meth:`reads_whole` accepts: plain ``.npy`` files (the engine's small-pair path for them).
    small_payloads = "npy"
    #: :meth:`reads_whole` answers by dtype and folder alone, whatever the payload's size.
    reads_whole_any_size = True

    def __init__(self, path: Path) -> None:
        self.tensor_dir = os.path.realpath(path / TENSOR_DIR) + os.sep
        self._real_dirs: dict[str, str] = {}  # payload folder as written in the index -> its real path

    def _real_dir(self, folder: str) -> str:
        real = self._real_dirs.get(folder)
        if real is None:
            real = self._real_dirs[folder] = os.path.realpath(folder) + os.sep
        return real

    def reads_whole(self, row: Mapping[str, Any]) -> bool:
        """Whether ``row``'s payload may be measured from its bytes, read whole, in this loader's place (the
        engine's small-pair path, the ``nbprec compare`` command's early worker: both read small plain files with
        :func:`nbprec.formats._npyfile.small_npy`, the same bytes this loader's arrays hold, and leave it
        anything else): a dtype the compiled kernel reads, in the dump's own ``tensors/`` folder."""
        folder = os.path.dirname(str(row["file"]))
        return row.get("dtype") in KERNEL_DESCRS and self._real_dir(folder) == self.tensor_dir

    def __call__(self, row: Mapping[str, Any]) -> np.ndarray:
        file, name = str(row["file"]), str(row["name"])
        opened = None
        try:
            if self._real_dir(os.path.dirname(file)) == self.tensor_dir and _NOFOLLOW:
                try:  # in the dump's tensors/ and no symbolic link itself: inside the dump, no realpath needed
                    opened = open_regular(file, name, nofollow=True)
                except OSError as exc:
                    if exc.errno != errno.ELOOP or isinstance(exc, FileNotFoundError):
                        raise
            if opened is None:
                if not os.path.realpath(file).startswith(self.tensor_dir):
                    raise DumpFormatError(file, f"payload outside the dump's {TENSOR_DIR}/ folder refused", name)
                opened = open_regular(file, name)
        except FileNotFoundError:
            raise DumpFormatError(file, "payload file missing", name) from None
        fd, size = opened
        try:
            return _open_npy(file, fd, size, row)
        except (*NPY_HEADER_ERRORS, OSError) as exc:  # numpy's errors for a damaged header
            if "allow_pickle" in str(exc):
                raise DumpFormatError(
                    file, "holds Python objects (a pickle); nbprec never unpickles files", name
                ) from exc
            raise DumpFormatError(file, f"cannot read the .npy payload: {error_text(exc)}", name) from exc
        finally:
            os.close(fd)


def _check_payload_files(path: Path, files: list[str], names: list[str], problems: list[Problem]) -> np.ndarray:
    """Which of the payloads ``files`` (relative paths ``tensors/<name>.npy`` that passed the name check) can
    be read: regular files in ``tensors/``, or symbolic links to regular files there. One listing of the
    folder; FIFOs, devices, folders, missing files and links leading out of ``tensors/`` are problems."""
    folder = path / TENSOR_DIR
    try:
        listing = PayloadFolder(folder, [real_folder(folder)])
    except OSError as exc:
        if len(files):
            why = f"cannot list the payload folder ({exc.strerror or exc}): {len(files)} payloads unavailable"
            problems.append(Problem(str(folder), why))
        return np.zeros(len(files), dtype=bool)
    skip = len(TENSOR_DIR) + 1
    stems = [f[skip:] for f in files]
    regular = listing.regular
    ok = np.fromiter((stem in regular for stem in stems), bool, len(stems))
    for position in np.flatnonzero(~ok).tolist():
        why = listing.problem(stems[position])
        if why:
            where = str(folder) if why.startswith("payload file missing") else str(path / files[position])
            problems.append(Problem(where, why, str(names[position])))
        else:
            ok[position] = True
    return ok


def _unreadable_integer(
    problems: list[Problem], index_file: Path, lines: list[dict] | None, column: str, position: int, value: Any
) -> None:
    """The problem of an integer of ``index.jsonl``'s record ``position`` that no int64 holds, read as unknown."""
    name = lines[position].get("name") if lines is not None else None
    record = str(name) if name is not None else f"row {position}"
    problems.append(Problem(str(index_file), unreadable_integer(column, value), record))


def read_native_dump(path: Path) -> Dump:
    """Open the nbprec run folder ``path``: header, index, edges, module hierarchy, lazy stacks."""
    header = read_header(path)
    problems: list[Problem] = []
    index_file = path / INDEX_FILE
    columns = read_columns(path, problems)
    records: dict[str, Any] | list[dict[str, Any]]
    records = columns if columns is not None else read_jsonl(index_file, problems)
    if not (len(records["name"]) if columns is not None else len(records)):
        bad_lines = [p for p in problems if p.file == str(index_file)]
        if bad_lines:
            first = bad_lines[0]
            raise DumpFormatError(
                index_file,
                f"no readable tensor record: {len(bad_lines)} lines could not be read ({first.record}: "
                f"{first.problem})",
            )
        raise EmptyDumpError(index_file, "no tensor records: the run wrote no tensors (or its index is missing)")
    complete = _read_complete(path, problems)

    try:
        run = str(header.get("run") or path.name)
        lines = records if columns is None else None  # (index.jsonl's records; the cache says its own problems)
        unreadable = functools.partial(_unreadable_integer, problems, index_file, lines)
        index = index_columns(records, run=run, typed=columns is not None, unreadable=unreadable)
        del records, columns, lines, unreadable
    except (TypeError, ValueError) as exc:
        raise DumpFormatError(index_file, f"a record holds a value of the wrong type: {exc}") from exc
    names = index["name"].tolist()
    named = np.fromiter((type(n) is str and n != "" for n in names), bool, len(names))
    if not named.all():
        for position in np.flatnonzero(~named):
            problems.append(Problem(str(index_file), "record without a string 'name' skipped", f"row {position}"))
        index = index.take(named)
        names = index["name"].tolist()
    files = ["" if f is None or f != f else str(f) for f in index["file"].tolist()]
    has_file = np.fromiter((f != "" for f in files), bool, len(files))
    safe = re.compile(_SAFE_FILE).fullmatch
    good = np.fromiter((bool(f) and safe(f) is not None for f in files), bool, len(files))
    for position in np.flatnonzero(has_file & ~good):
        problems.append(
            Problem(str(index_file), f"unsafe payload path {files[position]!r} ignored", str(names[position]))
        )
    usable = good.copy()
    positions = np.flatnonzero(usable).tolist()
    usable[positions] = _check_payload_files(
        path, [files[i] for i in positions], [names[i] for i in positions], problems
    )
    prefix = str(path) + os.sep
    index["file"] = np.array([prefix + f if g else "" for f, g in zip(files, good.tolist(), strict=True)], dtype=object)
    index["has_data"] = usable
    codes, n_keys = group_codes(index["step"], index["rank"], index["name"])
    if n_keys < len(codes):
        seen = np.zeros(n_keys, dtype=bool)
        for position, code in enumerate(codes.tolist()):  # every occurrence after the first, in index order
            if seen[code]:
                problems.append(Problem(str(index_file), "tensor name appears twice in the same step and rank",
                                        str(names[position])))  # fmt: skip
            seen[code] = True
    edges = read_jsonl(path / EDGES_FILE, problems, required=False)  # a DataFrame of them on first use
    hierarchy = {
        str(r.get("node")): (None if r.get("parent") is None else str(r["parent"]))
        for r in read_jsonl(path / MODULES_FILE, problems, required=False)
    }

    def stacks() -> dict[str, list[str]]:
        found: list[Problem] = []
        return {str(r.get("op")): list(r.get("frames") or []) for r in read_jsonl(path / STACKS_FILE, found)}

    def calls() -> dict[str, dict]:
        found: list[Problem] = []
        return {str(r.get("op")): dict(r.get("call") or {}) for r in read_jsonl(path / CALLS_FILE, found)}

    meta = {
        "task": header["mode"],
        "mode": header["mode"],
        "run": header.get("run", ""),
        "version": header["version"],
        "created": header.get("created", ""),
        "framework": header.get("framework", {}),
        "finished": bool(complete.get("finished")),
        "ended": complete.get("ended"),
        "error": complete.get("error"),
        "meta": header.get("meta", {}),
    }
    return Dump(
        index,
        path=path,
        format=NativeDumpReader.name,
        loader=PayloadLoader(path),
        problems=problems,
        meta=meta,
        hierarchy=hierarchy,
        stacks=stacks,
        calls=calls,
        edges=edges,
    )


__all__ = [
    "COLUMNS_FILE",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "RAW_BITS_STORAGE",
    "NativeDumpReader",
    "read_columns",
    "read_header",
    "read_jsonl",
    "read_native_dump",
]
