"""Writes a TensorFlow benchmark dump: ``.npy`` files, the index beside them, and what could not be written.

:class:`DumpWriter` knows nothing of TensorFlow: it receives numpy arrays with their TF names and writes them
as ``{op_name}.{output_index}.{timestamp}.npy`` (FORMATS.md section 1), with strictly increasing
microsecond timestamps in the order the tensors arrive. Each tensor is also a line of the JSON-lines index
``nbprec_tf_dump.jsonl`` (its TF name, op type, step, dtype, shape), and each tensor that could not be
written (a name breaking the rules, a dtype with no ``.npy`` form) is a ``"skipped"`` line and an entry of
:attr:`DumpWriter.skipped`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

from nbprec.errors import CaptureError
from nbprec.formats.tf_npy import NAME_PATTERN
from nbprec.tf.naming import INDEX_FILE, dump_file_name, dump_op_name, name_problem, unique_name

IF_EXISTS = ("fail", "append", "replace")
INDEX_VERSION = 1


def existing_dump_files(path: Path) -> list[Path]:
    """The dump files (``.npy`` files following the naming rule, and the index) already in ``path``."""
    if not path.is_dir():
        return []
    with os.scandir(path) as entries:
        return [
            Path(e.path)
            for e in entries
            if e.is_file(follow_symlinks=False) and (e.name == INDEX_FILE or NAME_PATTERN.fullmatch(e.name))
        ]


def prepare_folder(path: Path, if_exists: str) -> None:
    """Create ``path``; with dump files already in it, fail, keep them or delete them (``if_exists``)."""
    if if_exists not in IF_EXISTS:
        raise CaptureError(f"if_exists must be one of {IF_EXISTS}, not {if_exists!r}")
    if path.exists() and not path.is_dir():
        raise CaptureError(f"{path}: the dump path exists and is not a folder")
    old = existing_dump_files(path) if if_exists != "append" else []
    if old and if_exists == "fail":
        raise CaptureError(
            f"{path}: the folder already holds {len(old)} dump files from an earlier run (e.g. {old[0].name}); "
            "use a new folder, if_exists='append' to add to them, or if_exists='replace' to delete them first"
        )
    for file in old:  # if_exists == "replace": only files this writer would have written
        file.unlink()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CaptureError(f"{path}: cannot create the dump folder: {exc}") from exc


class DumpWriter:
    """Writes tensors into one dump folder; thread-safe (graph-mode tensors arrive on TF's threads).

    Parameters
    ----------
    path
        The dump folder (created).
    if_exists : {"fail", "append", "replace"}
        What to do when the folder already holds dump files: raise, add to them, or delete them first.
    meta
        Facts recorded in the index's ``"session"`` line (TF version, step selection, ...).

    Attributes
    ----------
    files : int
        ``.npy`` files written.
    skipped : list of dict
        Tensors and ops that were not written: ``tensor``, ``op_type``, ``graph``, ``reason``, ``step`` (the
        first step it happened in, None if it was found while a graph was traced) and ``count``.
    """

    def __init__(self, path: str | os.PathLike[str], *, if_exists: str = "fail", meta: Mapping[str, Any] | None = None):
        self.path = Path(path)
        prepare_folder(self.path, if_exists)
        self.files = 0
        self.bytes = 0
        self.skipped: list[dict[str, Any]] = []
        self._skip_keys: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._last_ts = 0
        self._step: int | None = None
        self._taken: dict[str, object] = {}
        self._order = 0
        self._step_files = 0
        self._index: IO[str] | None = open(self.path / INDEX_FILE, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        self._line({"record": "session", "version": INDEX_VERSION, "pid": os.getpid(), **dict(meta or {})})

    # -- steps -----------------------------------------------------------------------------------------
    def begin_step(self, step: int | None) -> None:
        """Start a step: names are made unique within a step, and ``order`` restarts at 0."""
        with self._lock:
            self._step = step
            self._taken = {}
            self._order = 0
            self._step_files = 0

    def end_step(self) -> None:
        """Record the end of the current step in the index."""
        with self._lock:
            self._line({"record": "step", "step": self._step, "tensors": self._step_files})

    # -- tensors ---------------------------------------------------------------------------------------
    def write_op(
        self,
        owner: object,
        op_name: str,
        op_type: str,
        graph: str,
        outputs: Iterable[tuple[int, np.ndarray, str]],
        tf_name: str | None = None,
    ) -> int:
        """Write the outputs of one op run: ``(slot, array, TF dtype name)`` each; returns the files written.

        ``op_name`` gives the file name (``/`` becomes ``_``); ``tf_name``, the op's name in TensorFlow when
        it differs, is what the index and the list of skipped tensors show.

        ``owner`` identifies the op (a graph node, or one eager execution): distinct owners that share a name
        in one step get ``_1``, ``_2`` suffixes; the same owner running again (a loop) keeps its name and gets
        a later timestamp, as tfdbg_ascend writes repeated executions.
        """
        written = 0
        with self._lock:
            if self._index is None:
                return 0
            name = unique_name(dump_op_name(op_name), self._taken, owner)
            for slot, array, tf_dtype in outputs:
                written += self._write_one(tf_name or op_name, name, op_type, graph, slot, array, tf_dtype)
        return written

    def _write_one(
        self, op_name: str, name: str, op_type: str, graph: str, slot: int, array: np.ndarray, tf_dtype: str
    ) -> int:
        ts = self._timestamp()
        problem = name_problem(name, slot, ts)
        if problem is not None:
            self._skip(f"{op_name}:{slot}", op_type, graph, problem)
            return 0
        file = self.path / dump_file_name(name, slot, ts)
        try:
            with open(file, "xb") as handle:
                np.lib.format.write_array(handle, array, allow_pickle=False)
        except FileExistsError:  # another writer used this timestamp: take the next one
            return self._write_one(op_name, name, op_type, graph, slot, array, tf_dtype)
        except OSError as exc:
            self._skip(f"{op_name}:{slot}", op_type, graph, f"could not be written: {exc}")
            return 0
        self.files += 1
        self._step_files += 1
        self.bytes += array.nbytes
        self._line(
            {
                "record": "tensor",
                "file": file.name,
                "tensor": f"{op_name}:{slot}",
                "op": name,
                "slot": slot,
                "op_type": op_type,
                "graph": graph,
                "step": self._step,
                "order": self._order,
                "timestamp": ts,
                "dtype": tf_dtype,
                "saved_dtype": array.dtype.name,
                "shape": list(array.shape),
            }
        )
        self._order += 1
        return 1

    def skip(self, tensor: str, op_type: str, graph: str, reason: str, *, traced: bool = False) -> None:
        """Record that ``tensor`` (``op:slot``, or an op or graph name) was not written, and why.

        ``traced``: found while a graph was traced (not in a step). Repeats of one tensor and reason are
        counted, not listed again.
        """
        with self._lock:
            self._skip(tensor, op_type, graph, reason, traced=traced)

    def _skip(self, tensor: str, op_type: str, graph: str, reason: str, *, traced: bool = False) -> None:
        key = (tensor, reason)
        seen = self._skip_keys.get(key)
        if seen is not None:
            seen["count"] += 1
            return
        entry = {
            "tensor": tensor,
            "op_type": op_type,
            "graph": graph,
            "reason": reason,
            "step": None if traced else self._step,
            "count": 1,
        }
        self._skip_keys[key] = entry
        self.skipped.append(entry)
        self._line({"record": "skipped", **entry})

    # -- plumbing --------------------------------------------------------------------------------------
    def _timestamp(self) -> int:
        """Microseconds since the epoch, strictly increasing within this writer."""
        self._last_ts = max(time.time_ns() // 1000, self._last_ts + 1)
        return self._last_ts

    def _line(self, record: Mapping[str, Any]) -> None:
        if self._index is not None:
            self._index.write(json.dumps(record, default=str) + "\n")

    def close(self, error: BaseException | None = None) -> None:
        """Write the summary line (with ``error``, the exception that ended the run, if any) and close the
        index (idempotent)."""
        with self._lock:
            if self._index is None:
                return
            counts = {e["tensor"] + " | " + e["reason"]: e["count"] for e in self.skipped if e["count"] > 1}
            end = {"record": "end", "files": self.files, "bytes": self.bytes, "skipped_repeats": counts}
            if error is not None:
                end["error"] = repr(error)[:1000]
            self._line(end)
            self._index.close()
            self._index = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._index is None


def read_index(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read the index ``nbprec_tf_dump.jsonl`` of a dump folder written by :mod:`nbprec.tf`.

    Returns
    -------
    dict
        ``"sessions"`` and ``"ends"`` (lists of dicts: how each dump started and ended, with ``"error"``
        when an exception ended it), ``"tensors"`` and ``"skipped"`` (pandas DataFrames), ``"steps"`` (list
        of dicts), and ``"problems"`` (lines that could not be read, as ``(line number, text)``).

    Examples
    --------
    >>> index = read_index("tf_dump")  # doctest: +SKIP
    >>> index["skipped"][["tensor", "reason"]]  # doctest: +SKIP
    """
    import pandas as pd

    file = Path(path) / INDEX_FILE
    if not file.is_file():
        raise CaptureError(f"{file}: no nbprec TensorFlow dump index here")
    out: dict[str, list[Any]] = {"session": [], "tensor": [], "skipped": [], "step": [], "end": [], "problems": []}
    with open(file, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            try:
                record = json.loads(line)
                out[record.pop("record")].append(record)
            except (ValueError, KeyError, TypeError, AttributeError):
                out["problems"].append((number, line[:200]))
    return {
        "sessions": out["session"],
        "tensors": pd.DataFrame(out["tensor"]),
        "skipped": pd.DataFrame(out["skipped"]),
        "steps": out["step"],
        "ends": out["end"],
        "problems": out["problems"],
    }


__all__ = ["IF_EXISTS", "DumpWriter", "existing_dump_files", "prepare_folder", "read_index"]
