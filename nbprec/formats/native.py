"""nbprec's own dump format: a writer (used by the PyTorch capture) and a reader.

The layout is specified in ``docs/dump-format.md``. In short, a run folder holds::

    nbprec-dump.json   header (strict JSON): format, version, run, mode, created, framework, meta
    index.jsonl        one strict-JSON object per tensor, appended and flushed as the run goes
    tensors/           one .npy per tensor (mode "tensor" only), memory-mappable
    edges.jsonl        dataflow: {"src": tensor name, "dst_op": op, "dst_slot": slot}
    modules.jsonl      module hierarchy: {"node": ..., "parent": ... or null}
    stacks.jsonl       call stacks: {"op": ..., "frames": [...]}
    complete           written by close(): {"finished": true|false, "tensors": n, "ended": ..., "error": ...}

Examples
--------
>>> with NativeDumpWriter("runs/fp32", run="fp32") as w:                  # doctest: +SKIP
...     w.write_tensor({"name": "linear.0.forward.output.0", "op": "linear.0.forward"}, x)
>>> nbprec.open("runs/fp32").tensor("linear.0.forward.output.0")           # doctest: +SKIP
"""

from __future__ import annotations

import datetime as _dt
import errno
import hashlib
import json
import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from nbprec.dtypes import canonical_dtype, numpy_dtype
from nbprec.dump import INDEX_COLUMNS, Dump, Problem, make_index
from nbprec.errors import CaptureError, DumpFormatError, EmptyDumpError
from nbprec.formats.base import DumpReader
from nbprec.stats import STAT_COLUMNS, tensor_stats

FORMAT_NAME = "nbprec-dump"
FORMAT_VERSION = 1
HEADER_FILE = "nbprec-dump.json"
INDEX_FILE = "index.jsonl"
EDGES_FILE = "edges.jsonl"
MODULES_FILE = "modules.jsonl"
STACKS_FILE = "stacks.jsonl"
COMPLETE_FILE = "complete"
COLUMNS_FILE = "index.columns.json"
TENSOR_DIR = "tensors"
MODES = ("tensor", "statistics")

#: Dtypes numpy lacks, stored as their raw bits: canonical name -> storage dtype.
RAW_BITS_STORAGE: dict[str, np.dtype] = {
    "bfloat16": np.dtype(np.uint16),
    "float8_e4m3fn": np.dtype(np.uint8),
    "float8_e5m2": np.dtype(np.uint8),
}

_RECORD_FIELDS = tuple(c for c in INDEX_COLUMNS if c not in ("run", "file", "has_data", *STAT_COLUMNS))
_COUNT_COLUMNS = ("nan_count", "inf_count", "zero_count")
_SAFE_FILE = rf"{TENSOR_DIR}/[A-Za-z0-9_-][A-Za-z0-9._~-]*\.npy"
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_STEM_BYTES = 160


def encode_float(value: Any) -> float | str | None:
    """A statistic as strict JSON: finite floats as numbers, NaN/inf as ``"NaN"``/``"Infinity"``/``"-Infinity"``.

    ``None`` (unknown, e.g. the min of an empty tensor) stays ``None`` (JSON ``null``).
    """
    if value is None:
        return None
    x = float(value)
    if math.isfinite(x):
        return x
    if math.isnan(x):
        return "NaN"
    return "Infinity" if x > 0 else "-Infinity"


def safe_file_stem(name: str, seq: int) -> str:
    """A file-name stem for tensor ``name``: unique (``seq`` prefix), ASCII, no separators, short.

    Characters outside ``[A-Za-z0-9._-]`` become ``_``; leading dots are dropped; a stem longer than
    160 bytes is cut and suffixed with a SHA-1 of the full name. The index keeps the real name.

    Examples
    --------
    >>> safe_file_stem("../../etc/passwd", 7)
    '000007-_.._etc_passwd'
    """
    stem = _UNSAFE_CHARS.sub("_", name).lstrip(".") or "_"
    if len(stem) > _MAX_STEM_BYTES:
        digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()
        stem = f"{stem[: _MAX_STEM_BYTES - 41]}~{digest}"
    return f"{seq:06d}-{stem}"


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds")


def _framework() -> dict[str, str]:
    info = {"python": sys.version.split()[0], "numpy": np.__version__}
    torch = sys.modules.get("torch")  # never import torch here: report it only if the caller uses it
    if torch is not None:
        info["torch"] = str(getattr(torch, "__version__", ""))
    return info


class NativeDumpWriter:
    """Writes one run in nbprec's dump format, crash-safely (every record is flushed as it is written).

    Parameters
    ----------
    path
        The run folder to create.
    run
        Run name recorded in the header; defaults to the folder's name.
    mode
        ``"tensor"`` (save payloads and statistics) or ``"statistics"`` (statistics only).
    meta
        Free-form, JSON-serialisable facts about the run (model, dtype, seed, ...).
    overwrite
        Allow writing into an existing non-empty folder (its nbprec files are replaced).

    Raises
    ------
    CaptureError
        The folder exists and is not empty (and ``overwrite`` is false), it cannot be created or written
        (permissions, a file in the way, a full disk), or ``mode``/``meta`` are invalid.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        run: str | None = None,
        mode: str = "tensor",
        meta: dict[str, Any] | None = None,
        overwrite: bool = False,
    ) -> None:
        self._path = Path(path)
        if mode not in MODES:
            raise CaptureError(f"{self._path}: mode must be one of {MODES}, not {mode!r}")
        self._mode = mode
        self._run = run if run is not None else self._path.name
        self._count = 0
        self._keys: set[tuple[int, int, str]] = set()
        self._closed = False
        self._files: dict[str, Any] = {}
        self._columns: dict[str, list[Any]] = {}  # the index, column-wise, for the cache close() writes
        self._check_target(overwrite)
        header = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "run": self._run,
            "mode": mode,
            "created": _now(),
            "framework": _framework(),
            "meta": dict(meta or {}),
        }
        try:
            header_text = json.dumps(header, allow_nan=False, indent=1)
        except (TypeError, ValueError) as exc:
            raise CaptureError(f"{self._path}: meta must be JSON-serialisable without NaN/inf: {exc}") from exc
        with self._io(self._path):
            self._path.mkdir(parents=True, exist_ok=True)
            (self._path / TENSOR_DIR).mkdir(exist_ok=True)
            (self._path / COMPLETE_FILE).unlink(missing_ok=True)
            tmp = self._path / (HEADER_FILE + ".tmp")
            tmp.write_text(header_text + "\n", encoding="utf-8")
            tmp.replace(self._path / HEADER_FILE)
            for name in (INDEX_FILE, EDGES_FILE, MODULES_FILE, STACKS_FILE):
                self._files[name] = open(self._path / name, "w", encoding="utf-8", buffering=1)  # noqa: SIM115

    # -- helpers -----------------------------------------------------------------------------------
    def _check_target(self, overwrite: bool) -> None:
        p = self._path
        if p.exists() and not p.is_dir():
            raise CaptureError(f"{p}: cannot create the dump folder: a file with that name is in the way")
        if p.is_dir() and not overwrite:
            try:
                non_empty = any(p.iterdir())
            except OSError as exc:
                raise CaptureError(f"{p}: cannot list the existing folder: {exc.strerror or exc}") from exc
            if non_empty:
                raise CaptureError(
                    f"{p}: the folder exists and is not empty; refusing to overwrite it "
                    "(choose a new folder, or pass overwrite=True)"
                )

    def _io(self, target: Path) -> _OSErrorToCapture:
        return _OSErrorToCapture(target)

    def _append(self, file_name: str, obj: Mapping[str, Any]) -> None:
        if self._closed:
            raise CaptureError(f"{self._path}: the dump writer is closed")
        try:
            line = json.dumps(obj, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise CaptureError(f"{self._path / file_name}: record is not strict-JSON-serialisable: {exc}") from exc
        with self._io(self._path / file_name):
            handle = self._files[file_name]
            handle.write(line + "\n")
            handle.flush()

    # -- public API --------------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        """The run folder."""
        return self._path

    @property
    def mode(self) -> str:
        """``"tensor"`` or ``"statistics"``."""
        return self._mode

    @property
    def count(self) -> int:
        """How many tensor records were written."""
        return self._count

    def write_tensor(
        self, record: Mapping[str, Any], array: np.ndarray | None = None, stats: Mapping[str, Any] | None = None
    ) -> None:
        """Append one tensor record (and, in mode ``"tensor"``, its payload).

        Parameters
        ----------
        record
            Index columns: ``name`` (required, unique per step and rank), ``step``, ``rank``, ``order``, ``op``,
            ``op_type``, ``api``, ``call``, ``module``, ``direction``, ``role``, ``slot``, ``checksum`` and
            ``dtype`` (the canonical original dtype; required when ``array`` is None, together with ``shape``).
        array
            The tensor as numpy. bfloat16/float8 as ``ml_dtypes`` arrays, or as their raw bits
            (uint16/uint8) with ``record["dtype"]`` naming the real dtype.
        stats
            Precomputed statistics (keys of :data:`nbprec.stats.STAT_COLUMNS`); computed with
            :func:`~nbprec.stats.tensor_stats` from ``array`` when omitted.
        """
        name = record.get("name")
        if not isinstance(name, str) or not name:
            raise CaptureError(f"{self._path}: a tensor record needs a non-empty string 'name', got {name!r}")
        out: dict[str, Any] = {k: record[k] for k in _RECORD_FIELDS if k in record}
        key = (int(out.get("step", -1)), int(out.get("rank", -1)), name)
        if key in self._keys:
            raise CaptureError(f"{self._path}: tensor {name!r} written twice for step {key[0]}, rank {key[1]}")
        if array is not None:
            array = self._as_original(np.asarray(array), record, name)
            out["dtype"] = canonical_dtype(array.dtype)
            out["shape"] = [int(d) for d in array.shape]
            out["numel"] = int(array.size)
        else:
            if not record.get("dtype") or "shape" not in record:
                raise CaptureError(f"{self._path}: tensor {name!r} has no array, so its record needs dtype and shape")
            out["dtype"] = canonical_dtype(record["dtype"])
            out["shape"] = [int(d) for d in record["shape"]]
            out["numel"] = int(record.get("numel", math.prod(out["shape"])))
        if stats is None and array is not None:
            with np.errstate(over="ignore", invalid="ignore"):  # inf/NaN statistics are recorded, not warned
                stats = tensor_stats(array)
        for column in STAT_COLUMNS:
            value = (stats or {}).get(column)
            if column in _COUNT_COLUMNS and value is not None:
                out[column] = int(value)
            else:
                out[column] = encode_float(value)
        if self._mode == "tensor" and array is not None:
            rel = f"{TENSOR_DIR}/{safe_file_stem(name, self._count)}.npy"
            self._save(self._path / rel, array, out["dtype"])
            out["file"] = rel
        self._append(INDEX_FILE, out)
        self._keys.add(key)
        for column, value in out.items():
            values = self._columns.get(column)
            if values is None:
                values = self._columns[column] = [None] * self._count
            values.append(value)
        self._count += 1
        for values in self._columns.values():
            if len(values) < self._count:
                values.append(None)

    def _as_original(self, array: np.ndarray, record: Mapping[str, Any], name: str) -> np.ndarray:
        if array.dtype.hasobject:
            raise CaptureError(f"{self._path}: tensor {name!r} is an object array; only numeric arrays are stored")
        declared = canonical_dtype(record["dtype"]) if record.get("dtype") else ""
        actual = canonical_dtype(array.dtype)
        if not declared or declared == actual:
            return array
        if RAW_BITS_STORAGE.get(declared) == array.dtype:
            return array.view(numpy_dtype(declared))
        raise CaptureError(
            f"{self._path}: tensor {name!r} is declared {declared} but the array is {actual} "
            "(pass the array in its original dtype, or its raw bits for bfloat16/float8)"
        )

    def _save(self, target: Path, array: np.ndarray, dtype: str) -> None:
        storage = RAW_BITS_STORAGE.get(dtype)
        data = array.view(storage) if storage is not None else array
        try:
            with self._io(target), open(target, "wb") as handle:
                np.lib.format.write_array(handle, data, allow_pickle=False)
        except CaptureError:
            target.unlink(missing_ok=True)
            raise

    def write_edge(self, src: str, dst_op: str, dst_slot: str) -> None:
        """Record that op ``dst_op`` consumed tensor ``src`` as its input ``dst_slot``."""
        self._append(EDGES_FILE, {"src": src, "dst_op": dst_op, "dst_slot": str(dst_slot)})

    def write_module(self, node: str, parent: str | None) -> None:
        """Record that ``node`` (an op or module call) sits inside module call ``parent`` (None: top)."""
        self._append(MODULES_FILE, {"node": node, "parent": parent})

    def write_stack(self, op: str, frames: list[str]) -> None:
        """Record the user call stack of ``op`` (outermost frame first)."""
        self._append(STACKS_FILE, {"op": op, "frames": [str(f) for f in frames]})

    def close(self, *, error: BaseException | None = None) -> None:
        """Flush and close every file and write the ``complete`` record (``finished`` false if ``error``)."""
        if self._closed:
            return
        self._closed = True
        failure: OSError | None = None
        for handle in self._files.values():
            try:
                handle.close()
            except OSError as exc:  # a full disk can surface on the final flush
                failure = failure or exc
        if failure is None:
            try:
                self._write_columns()
            except OSError as exc:
                failure = exc
        self._columns = {}
        record = {
            "finished": error is None and failure is None,
            "tensors": self._count,
            "ended": _now(),
            "error": None if error is None else f"{type(error).__name__}: {error}",
        }
        with self._io(self._path / COMPLETE_FILE):
            (self._path / COMPLETE_FILE).write_text(json.dumps(record) + "\n", encoding="utf-8")
            if failure is not None:
                raise failure

    def _write_columns(self) -> None:
        cache = {
            "rows": self._count,
            "index_bytes": (self._path / INDEX_FILE).stat().st_size,
            "columns": self._columns,
        }
        tmp = self._path / (COLUMNS_FILE + ".tmp")
        try:
            tmp.write_text(json.dumps(cache, allow_nan=False, ensure_ascii=False, separators=(",", ":")), "utf-8")
            tmp.replace(self._path / COLUMNS_FILE)
        finally:
            tmp.unlink(missing_ok=True)

    def __enter__(self) -> NativeDumpWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(error=exc)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<NativeDumpWriter {str(self._path)!r} mode={self._mode} tensors={self._count} {state}>"


class _OSErrorToCapture:
    """Context manager turning an OSError into a CaptureError that names the path (and a full disk)."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, OSError):
            if exc.errno == errno.ENOSPC:
                raise CaptureError(f"{self.target}: no space left on device while writing the dump") from exc
            raise CaptureError(f"{self.target}: cannot write the dump: {exc.strerror or exc}") from exc


class NativeDumpReader(DumpReader):
    """Reads nbprec's own dump format (``nbprec-dump.json`` + ``index.jsonl`` + ``tensors/``)."""

    name: ClassVar[str] = "nbprec"
    description: ClassVar[str] = "nbprec's native dump (written by nbprec.capture / NativeDumpWriter)"

    @classmethod
    def guess_can_open(cls, path: Path) -> bool:
        """A folder holding ``nbprec-dump.json``."""
        try:
            return Path(path).is_dir() and (Path(path) / HEADER_FILE).is_file()
        except OSError:
            return False

    def open(self, path: Path, **options: Any) -> Dump:
        """Read the header and index of the run folder ``path`` (never the payloads)."""
        if options:
            raise TypeError(f"the nbprec reader takes no options, got {sorted(options)}")
        return read_native_dump(Path(path))


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-strict JSON constant {token}")


def read_jsonl(file: Path, problems: list[Problem]) -> list[dict[str, Any]]:
    """Parse a JSON-lines file of objects; bad lines (and a truncated last line) become problems.

    The fast path parses the whole file with one ``json.loads`` (lines joined into an array, newlines kept
    so that no string can span two lines); any error falls back to line-by-line parsing to say which lines
    are bad. A missing file gives no records.
    """
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise DumpFormatError(file, f"cannot read: {exc.strerror or exc}") from exc
    body = raw.rstrip(b"\n")
    if not body.strip():
        return []
    n_lines = body.count(b"\n") + 1
    try:
        text = body.decode("utf-8")
        records = json.loads("[" + text.replace("\n", ",\n") + "]", parse_constant=_reject_constant)
        if len(records) == n_lines and all(type(r) is dict for r in records):
            return records
    except (UnicodeDecodeError, ValueError):
        pass
    records = []
    lines = body.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError) as exc:
            last = number == len(lines) and not raw.endswith(b"\n")
            what = "truncated last line (the run stopped while writing it)" if last else f"invalid JSON: {exc}"
            problems.append(Problem(str(file), what, f"line {number}"))
            continue
        if type(obj) is not dict:
            problems.append(Problem(str(file), f"expected a JSON object, got {type(obj).__name__}", f"line {number}"))
            continue
        records.append(obj)
    return records


def read_columns(path: Path, problems: list[Problem]) -> pd.DataFrame | None:
    """The column cache ``index.columns.json`` close() wrote, or None when absent, stale or unreadable.

    The cache is used only if it describes exactly the bytes of ``index.jsonl`` (same size); otherwise the
    reader falls back to ``index.jsonl``, which stays the source of truth.
    """
    file = path / COLUMNS_FILE
    try:
        cache = json.loads(file.read_text(encoding="utf-8"), parse_constant=_reject_constant)
        index_bytes = (path / INDEX_FILE).stat().st_size
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problems.append(Problem(str(file), f"unreadable column cache ignored, {INDEX_FILE} read instead: {exc}"))
        return None
    columns = cache.get("columns") if isinstance(cache, dict) else None
    rows = cache.get("rows") if isinstance(cache, dict) else None
    if (
        not isinstance(columns, dict)
        or "name" not in columns
        or not all(isinstance(v, list) and len(v) == rows for v in columns.values())
    ):
        problems.append(Problem(str(file), f"malformed column cache ignored, {INDEX_FILE} read instead"))
        return None
    if cache.get("index_bytes") != index_bytes:
        problems.append(Problem(str(file), f"stale column cache ignored ({INDEX_FILE} changed after the run)"))
        return None
    return pd.DataFrame(columns)


def read_header(path: Path) -> dict[str, Any]:
    """The validated header ``nbprec-dump.json`` of the run folder ``path``."""
    file = path / HEADER_FILE
    try:
        header = json.loads(file.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except FileNotFoundError:
        raise DumpFormatError(file, "missing: not an nbprec dump folder") from None
    except (UnicodeDecodeError, ValueError) as exc:
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
        record = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        problems.append(
            Problem(str(file), "the run did not finish (no complete marker): it crashed or is still being written")
        )
        return {"finished": False}
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problems.append(Problem(str(file), f"unreadable complete marker: {exc}"))
        return {"finished": False}
    if not isinstance(record, dict):
        problems.append(Problem(str(file), "complete marker is not a JSON object"))
        return {"finished": False}
    if not record.get("finished"):
        problems.append(Problem(str(file), f"the run ended with an error: {record.get('error') or 'unknown'}"))
    return record


def _make_loader(path: Path) -> Callable[[Mapping[str, Any]], np.ndarray]:
    tensor_dir = os.path.realpath(path / TENSOR_DIR) + os.sep

    def load(row: Mapping[str, Any]) -> np.ndarray:
        file = str(row["file"])
        if not os.path.realpath(file).startswith(tensor_dir):
            raise DumpFormatError(file, f"payload outside the dump's {TENSOR_DIR}/ folder refused", row["name"])
        array = np.load(file, mmap_mode="r", allow_pickle=False)
        dtype = str(row["dtype"])
        target = numpy_dtype(dtype, path=file, record=str(row["name"]))
        expected = RAW_BITS_STORAGE.get(dtype, target)
        if array.dtype != expected or tuple(array.shape) != tuple(row["shape"]):
            raise DumpFormatError(
                file,
                f"payload is {array.dtype}{list(array.shape)}, index says {dtype}{list(row['shape'])}",
                str(row["name"]),
            )
        return array.view(target) if expected != target else array

    return load


def read_native_dump(path: Path) -> Dump:
    """Open the nbprec run folder ``path``: header, index, edges, module hierarchy, lazy stacks."""
    header = read_header(path)
    problems: list[Problem] = []
    index_file = path / INDEX_FILE
    columns = read_columns(path, problems)
    records: pd.DataFrame | list[dict[str, Any]] = columns if columns is not None else read_jsonl(index_file, problems)
    if not len(records):
        raise EmptyDumpError(index_file, "no tensor records: the run wrote no tensors (or its index is missing)")
    complete = _read_complete(path, problems)
    try:
        index = make_index(records, run=str(header.get("run") or path.name))
    except (TypeError, ValueError) as exc:
        raise DumpFormatError(index_file, f"a record holds a value of the wrong type: {exc}") from exc
    named = np.fromiter((type(n) is str and n != "" for n in index["name"]), bool, len(index))
    if not named.all():
        for position in np.flatnonzero(~named):
            problems.append(Problem(str(index_file), "record without a string 'name' skipped", f"row {position}"))
        index = index[named].reset_index(drop=True)
    files = index["file"].astype(str)
    has_file = files != ""
    good = files.str.fullmatch(_SAFE_FILE) & has_file
    for position in np.flatnonzero((has_file & ~good).to_numpy()):
        name = index.at[position, "name"]
        problems.append(Problem(str(index_file), f"unsafe payload path {files[position]!r} ignored", str(name)))
    index["file"] = np.where(good, str(path) + os.sep + files, "")
    index["has_data"] = good.to_numpy()
    duplicated = index.duplicated(["step", "rank", "name"])
    for name in index.loc[duplicated, "name"]:
        problems.append(Problem(str(index_file), "tensor name appears twice in the same step and rank", str(name)))
    edges = pd.DataFrame(read_jsonl(path / EDGES_FILE, problems), columns=["src", "dst_op", "dst_slot"])
    hierarchy = {
        str(r.get("node")): (None if r.get("parent") is None else str(r["parent"]))
        for r in read_jsonl(path / MODULES_FILE, problems)
    }

    def stacks() -> dict[str, list[str]]:
        found: list[Problem] = []
        return {str(r.get("op")): list(r.get("frames") or []) for r in read_jsonl(path / STACKS_FILE, found)}

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
        loader=_make_loader(path),
        problems=problems,
        meta=meta,
        hierarchy=hierarchy,
        stacks=stacks,
        edges=edges,
    )


__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "RAW_BITS_STORAGE",
    "NativeDumpReader",
    "NativeDumpWriter",
    "encode_float",
    "safe_file_stem",
]
