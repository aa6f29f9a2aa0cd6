"""nbprec's own dump format: the writer (used by the PyTorch capture); the reader is re-exported here.

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
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from nbprec.dtypes import canonical_dtype, numpy_dtype
from nbprec.dump_index import INDEX_COLUMNS
from nbprec.errors import CaptureError
from nbprec.formats.native_blocks import write_blocks
from nbprec.formats.native_read import (
    CALLS_FILE,
    COLUMNS_FILE,
    COMPLETE_FILE,
    EDGES_FILE,
    FORMAT_NAME,
    FORMAT_VERSION,
    HEADER_FILE,
    INDEX_FILE,
    MODES,
    MODULES_FILE,
    RAW_BITS_STORAGE,
    STACKS_FILE,
    TENSOR_DIR,
    NativeDumpReader,
)
from nbprec.stats import STAT_COLUMNS, tensor_stats

#: Records are handed to the operating system at least this often (seconds): a killed process loses at most
#: the records of its last FLUSH_INTERVAL; exceptions in Python close the writer and lose nothing.
FLUSH_INTERVAL = 0.2

_RECORD_FIELDS = tuple(c for c in INDEX_COLUMNS if c not in ("run", "file", "has_data", *STAT_COLUMNS))
_COUNT_COLUMNS = ("nan_count", "inf_count", "zero_count")
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
            for name in (INDEX_FILE, EDGES_FILE, MODULES_FILE, STACKS_FILE, CALLS_FILE):
                self._files[name] = open(self._path / name, "w", encoding="utf-8")  # noqa: SIM115
        self._last_flush = time.monotonic()

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
            if not line.isascii():
                try:
                    line.encode("utf-8")
                except UnicodeEncodeError:  # lone surrogates (file-name bytes that are not UTF-8): \u escapes
                    line = json.dumps(obj, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise CaptureError(f"{self._path / file_name}: record is not strict-JSON-serialisable: {exc}") from exc
        try:
            self._files[file_name].write(line + "\n")
            now = time.monotonic()
            if now - self._last_flush >= FLUSH_INTERVAL:
                self.flush()
                self._last_flush = now
        except OSError as exc:
            with self._io(self._path / file_name):
                raise exc

    def flush(self) -> None:
        """Hand every buffered record to the operating system now (also done every FLUSH_INTERVAL seconds)."""
        with self._io(self._path):
            for handle in self._files.values():
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
        out, key = self._new_record(record)
        name = out["name"]
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
        if self._mode == "tensor" and array is not None:
            rel = f"{TENSOR_DIR}/{safe_file_stem(name, self._count)}.npy"
            self._save(self._path / rel, array, out["dtype"])
            out["file"] = rel
        self._add_record(out, key, stats)

    def write_tensor_blocks(
        self,
        record: Mapping[str, Any],
        blocks: Iterable[np.ndarray],
        *,
        dtype: Any,
        shape: tuple[int, ...] | list[int],
        stats: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one tensor record whose payload arrives block by block: a tensor larger than memory.

        The payload is the concatenation of ``blocks`` (flat, in C order, of ``dtype`` or cast to it
        safely), written as it comes; statistics are computed block by block unless ``stats`` are given
        (:class:`~nbprec.formats.native_blocks.BlockStats`: the same as :func:`~nbprec.stats.tensor_stats`,
        to rounding). In mode ``"statistics"`` only the statistics are kept.

        Examples
        --------
        >>> with NativeDumpWriter("runs/big", run="big") as w:                     # doctest: +SKIP
        ...     parts = (np.full(1 << 26, i, np.float32) for i in range(64))
        ...     w.write_tensor_blocks({"name": "x"}, parts, dtype="float32", shape=(64, 1 << 26))
        """
        out, key = self._new_record(record)
        name = out["name"]
        out["dtype"] = canonical_dtype(dtype)
        out["shape"] = [int(d) for d in shape]
        out["numel"] = math.prod(out["shape"])
        rel = f"{TENSOR_DIR}/{safe_file_stem(name, self._count)}.npy"
        target = self._path / rel if self._mode == "tensor" else None
        with self._io(target or self._path):
            found = write_blocks(target, blocks, numpy_dtype(out["dtype"]), out["shape"], want_stats=stats is None)
        if target is not None:
            out["file"] = rel
        self._add_record(out, key, found if stats is None else stats)

    def _new_record(self, record: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[int, int, str]]:
        """The record's index fields, checked, and its (step, rank, name) key."""
        name = record.get("name")
        if not isinstance(name, str) or not name:
            raise CaptureError(f"{self._path}: a tensor record needs a non-empty string 'name', got {name!r}")
        out: dict[str, Any] = {k: record[k] for k in _RECORD_FIELDS if k in record}
        key = (int(out.get("step", -1)), int(out.get("rank", -1)), name)
        if key in self._keys:
            raise CaptureError(f"{self._path}: tensor {name!r} written twice for step {key[0]}, rank {key[1]}")
        out["name"] = name
        return out, key

    def _add_record(self, out: dict[str, Any], key: tuple[int, int, str], stats: Mapping[str, Any] | None) -> None:
        """Write the record (with its statistics) to the index and to the column cache."""
        for column in STAT_COLUMNS:
            value = (stats or {}).get(column)
            if column in _COUNT_COLUMNS and value is not None:
                out[column] = int(value)
            else:
                out[column] = encode_float(value)
        if "file" in out:  # after the statistics, as write_tensor has always written it
            out["file"] = out.pop("file")
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
            with self._io(target):
                target.unlink(missing_ok=True)  # an earlier dump's name may be a hard link: never write through
                with open(target, "xb") as handle:
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

    def write_call(self, op: str, call: Mapping[str, object]) -> None:
        """Record how ``op`` was called: its API and its arguments, tensors as slot references.

        ``call`` is JSON-safe (see :mod:`nbprec.capture.signature`); isolation re-runs use it.
        """
        self._append(CALLS_FILE, {"op": op, "call": dict(call)})

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
            text = json.dumps(cache, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
            try:
                data = text.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates in names: \u escapes
                data = json.dumps(cache, allow_nan=False, separators=(",", ":")).encode("ascii")
            tmp.write_bytes(data)
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


__all__ = [
    "COLUMNS_FILE",
    "INDEX_FILE",
    "NativeDumpReader",
    "NativeDumpWriter",
    "encode_float",
    "safe_file_stem",
]
