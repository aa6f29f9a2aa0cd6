"""Reader for ptdbg_ascend PyTorch dumps: JSON-lines ``.pkl`` files plus folders of ``.npy`` tensors.

ptdbg_ascend's ``.pkl`` files are **text**, one JSON array per line (they are never unpickled here):

- ``[name, step, [], dtype, shape, [max, min, mean]]`` for a tensor; an overflow-check line carries 101 in
  place of the step and may lack the summary;
- ``[name_stack_info, [[path, line, func, code], ...]]`` for the call stack of an op.

Layouts seen in ptdbg's releases, all accepted (the reader walks the folder for ``*.pkl``):
``ptdbg_dump_v{version}/[step{N}/]rank{M}/dump.pkl`` with the tensors in the ``dump/`` folder beside it
(generally: the folder named like the ``.pkl`` without its suffix, ``{mode}_dump.pkl`` -> ``{mode}_dump/``),
older ``npu_dump.pkl`` with ``npu_dump_{timestamp}/``, and overflow files
``Overflow_info_{%Y%m%d_%H%M%S}_{n}.pkl`` with their own folder. Each tensor is ``{name}.npy``.

Index conventions
-----------------
- Names are ptdbg's: ``{Prefix}_{api}_{n}_{forward|backward}_{input|output}.{i}`` (nested ``.{i}.{j}``),
  Prefix in ``Tensor, Torch, Functional, NPU, VF, Aten, Distributed``. ``op`` is the part before
  ``_input``/``_output`` (``Functional_linear_0_forward``); ``api`` is normalised like msprobe's
  (``Functional.linear``), ``op_type`` is ``linear`` and ``call`` is ``n``. Names without a known prefix come
  from ``module_dump(module, "MyNet")`` and get ``api`` ``Module.MyNet`` and ``module`` ``MyNet``.
- Names are unique within one step and rank; a repeated name gets a ``#2`` suffix and a problem row.
- **Backward labelling.** ptdbg writes a backward hook's ``grad_output`` (the incoming gradients, w.r.t.
  the forward outputs) under ``_input`` and its ``grad_input`` (the gradients it produces, w.r.t. the forward
  inputs) under ``_output``: the labels follow the dataflow of the backward computation, the same
  convention msprobe uses. nbprec keeps them: ``role`` is ``input`` for the incoming gradients and
  ``output`` for the produced ones, and always agrees with the name.
- ``step`` and ``rank`` come from ``step{N}``/``rank{M}`` folders (-1 without them). The second field of a
  line is ptdbg's ``dump_step`` setting, not the iteration; its values are listed in
  ``meta["pkl_steps"]``.
- Overflow lines (101, or any line of an ``Overflow_info_*.pkl``) stay rows; their op names are listed in
  ``meta["overflow_ops"]``.
- Scalars (dtype ``<class 'float'>``...) are not tensor rows; they are counted in
  ``meta["non_tensor_values"]``. Stacks become ``dump.stacks[op]``.
- ptdbg saves bfloat16 tensors as float32 ``.npy``; :meth:`~nbprec.dump.Dump.tensor` casts such payloads
  back to the dtype on record (exact, since the values came from that dtype).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nbprec.dtypes import DTYPE_NAMES, LOW_PRECISION_FLOATS, canonical_dtype, dtype_of
from nbprec.dump import Dump, Problem
from nbprec.dump_index import index_columns
from nbprec.dump_problems import first_problem
from nbprec.errors import DumpFormatError, EmptyDumpError
from nbprec.formats._files import open_regular, read_regular
from nbprec.formats._jsonstream import loads
from nbprec.formats._payload import NPY_HEADER_ERRORS
from nbprec.formats.base import DumpReader, take_run_option
from nbprec.formats.probes import ptdbg_dump

PREFIXES = ("Tensor", "Torch", "Functional", "NPU", "VF", "Aten", "Distributed")
OVERFLOW_STEP = 101
MAX_PKL = 1 << 30  # bytes of one .pkl read at most (a JSON line per tensor: 10^6 tensors take about 300 MB)
_TENSOR_RE = re.compile(r"^(?P<op>.+_\d+_(?:forward|backward))_(?P<role>input|output)(?P<slot>(?:\.[A-Za-z0-9_]+)*)$")
_OP_RE = re.compile(r"^(?P<head>.+)_(?P<call>\d+)_(?P<direction>forward|backward)$")
_OVERFLOW_FILE_RE = re.compile(r"^Overflow_info_\d{8}_\d{6}(?:_\d+)?$")
_STEP_RE = re.compile(r"^step(\d+)$")
_RANK_RE = re.compile(r"^rank(\d+)$")
_STACK_SUFFIX = "_stack_info"
_MAX_FILE_NAME = 255
_MAX_DEPTH = 6


def parse_tensor_name(name: str) -> dict[str, Any] | None:
    """The op, API, call, direction, role and slot a ptdbg tensor name encodes; ``None`` if it encodes none.

    Examples
    --------
    >>> info = parse_tensor_name("Functional_linear_145_backward_output.1.0")
    >>> info["op"], info["api"], info["call"], info["role"], info["slot"]
    ('Functional_linear_145_backward', 'Functional.linear', 145, 'output', '1.0')
    """
    m = _TENSOR_RE.match(name)
    if m is None:
        return None
    info = parse_op_name(m.group("op"))
    if info is None:
        return None
    return {**info, "role": m.group("role"), "slot": m.group("slot").lstrip(".") or "0"}


def parse_op_name(op: str) -> dict[str, Any] | None:
    """Parse ``{Prefix}_{api}_{n}_{direction}`` (or a module dump's ``{name}_{n}_{direction}``)."""
    m = _OP_RE.match(op)
    if m is None:
        return None
    head = m.group("head")
    prefix, _, api = head.partition("_")
    if prefix in PREFIXES and api:
        api_name, op_type, module = f"{prefix}.{api}", api, ""
    else:
        api_name, op_type, module = f"Module.{head}", head, head
    return {
        "op": op,
        "api": api_name,
        "op_type": op_type,
        "module": module,
        "call": int(m.group("call")),
        "direction": m.group("direction"),
    }


def _natural_key(text: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _folder_numbers(pkl: Path) -> tuple[int, int]:
    """(step, rank) from ``step{N}``/``rank{M}`` among the three folders above a ``.pkl`` (-1 if absent)."""
    step = rank = -1
    for folder in list(pkl.parents)[:3]:
        if rank < 0 and (m := _RANK_RE.match(folder.name)):
            rank = int(m.group(1))
        elif step < 0 and (m := _STEP_RE.match(folder.name)):
            step = int(m.group(1))
    return step, rank


def _entry_is(entry: os.DirEntry[str], kind: str) -> bool:
    """``entry.is_dir()``/``is_file()`` that says False instead of raising (a symlink loop raises ELOOP)."""
    try:
        return entry.is_dir() if kind == "dir" else entry.is_file()
    except OSError:
        return False


def find_pkl_files(root: Path, problems: list[Problem]) -> list[Path]:
    """Every ``*.pkl`` under ``root`` (depth <= 6), not descending into tensor folders, safe on symlink loops."""
    found: list[Path] = []
    seen: set[tuple[int, int]] = set()

    def visit(folder: Path, depth: int) -> None:
        try:
            st = folder.stat()
            entries = sorted(os.scandir(folder), key=lambda e: _natural_key(e.name))
        except OSError as exc:
            problems.append(Problem(str(folder), f"cannot list the folder: {exc.strerror or exc}"))
            return
        if (st.st_dev, st.st_ino) in seen:
            problems.append(Problem(str(folder), "symlink loop: this folder was already visited; skipped"))
            return
        seen.add((st.st_dev, st.st_ino))
        stems = [e.name[:-4] for e in entries if e.name.endswith(".pkl") and _entry_is(e, "file")]
        found.extend(folder / f"{stem}.pkl" for stem in stems)
        for entry in entries:
            if entry.name.endswith(".pkl") or entry.name.endswith(".npy"):
                continue
            is_dir = _entry_is(entry, "dir")
            if not is_dir and entry.is_symlink() and not os.path.exists(entry.path):
                problems.append(Problem(entry.path, "broken symlink or symlink loop; skipped"))
            if not is_dir or any(entry.name == s or entry.name.startswith(f"{s}_") for s in stems):
                continue
            if depth < _MAX_DEPTH:
                visit(Path(entry.path), depth + 1)

    visit(root, 0)
    return found


def _tensor_files(pkl: Path) -> dict[str, Path]:
    """File name -> path of the ``.npy`` payloads in the folder(s) that belong to ``pkl``."""
    stem = pkl.name[:-4]
    folders = [pkl.parent / stem]
    with contextlib.suppress(OSError):  # an unlistable parent leaves just the stem folder to try
        folders += sorted(
            (p for p in pkl.parent.iterdir() if p.name.startswith(f"{stem}_") and p.is_dir()),
            key=lambda p: _natural_key(p.name),
            reverse=True,
        )
    files: dict[str, Path] = {}
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            files.setdefault(name, folder / name)
    return files


def _to_float(value: Any) -> float:
    if value is None or isinstance(value, (list, dict, str)):
        return float("nan")
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _format_frame(frame: Any) -> str:
    if isinstance(frame, list) and len(frame) == 4:
        path, line, func, code = frame
        return f"File {path}, line {line}, in {func}, \n {code}"
    return str(frame)


@dataclass
class _Collector:
    """Rows, problems and facts gathered over every .pkl of a dump."""

    problems: list[Problem] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    stacks: dict[str, list[str]] = field(default_factory=dict)
    overflow_ops: list[str] = field(default_factory=list)
    pkl_steps: set[int] = field(default_factory=set)
    non_tensor: int = 0
    order: dict[tuple[int, int], dict[str, int]] = field(default_factory=dict)
    names: dict[tuple[int, int], set[str]] = field(default_factory=dict)

    def read_pkl(self, pkl: Path) -> None:
        try:  # a regular file only (a FIFO would block), of bounded size
            raw = read_regular(pkl, limit=MAX_PKL, what="ptdbg .pkl file")
        except OSError as exc:
            self.problems.append(Problem(str(pkl), f"cannot read the file: {exc.strerror or exc}"))
            return
        except DumpFormatError as exc:
            self.problems.append(Problem(str(pkl), exc.problem))
            return
        if raw[:1] == b"\x80":
            self.problems.append(
                Problem(str(pkl), "binary pickle, not ptdbg's JSON lines; nbprec never unpickles files: skipped")
            )
            return
        step, rank = _folder_numbers(pkl)
        overflow_file = bool(_OVERFLOW_FILE_RE.match(pkl.name[:-4]))
        files = _tensor_files(pkl)
        for number, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            record = f"line {number}"
            try:
                item = loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
                self.problems.append(Problem(str(pkl), f"not a JSON array: {exc}", record))
                continue
            if not isinstance(item, list) or not item or not isinstance(item[0], str):
                self.problems.append(Problem(str(pkl), "expected a JSON array starting with a name", record))
            elif len(item) == 2 and isinstance(item[1], list):
                self._stack(pkl, item, record)
            elif len(item) >= 5:
                self._tensor(pkl, item, record, step, rank, overflow_file, files)
            else:
                self._problem(pkl, f"unexpected array of {len(item)} elements (expected 2 or 6)", record)

    def _problem(self, pkl: Path, problem: str, record: str) -> None:
        self.problems.append(Problem(str(pkl), problem, record))

    def _stack(self, pkl: Path, item: list[Any], record: str) -> None:
        name = item[0]
        if not name.endswith(_STACK_SUFFIX):
            self._problem(pkl, f"two-element line whose name {name!r} does not end in {_STACK_SUFFIX!r}", record)
            return
        self.stacks[name[: -len(_STACK_SUFFIX)]] = [_format_frame(frame) for frame in item[1]]

    def _tensor(
        self,
        pkl: Path,
        item: list[Any],
        record: str,
        step: int,
        rank: int,
        overflow_file: bool,
        files: Mapping[str, Path],
    ) -> None:
        name, dump_step, _, raw_dtype, raw_shape = item[:5]
        summary = item[5] if len(item) > 5 and isinstance(item[5], list) else []
        if isinstance(raw_dtype, str) and raw_dtype.startswith("<class"):
            self.non_tensor += 1
            return
        overflow = dump_step == OVERFLOW_STEP or overflow_file
        if isinstance(dump_step, int) and not overflow:
            self.pkl_steps.add(dump_step)
        info = parse_tensor_name(name)
        if info is None:
            self._problem(pkl, f"name {name!r} does not follow ptdbg's naming; op, role and slot unknown", record)
            info = {"op": name, "api": name, "op_type": name, "module": "", "call": -1, "direction": ""}
            info.update(role="output", slot="0")
        dtype = canonical_dtype(raw_dtype) if isinstance(raw_dtype, str) and raw_dtype else ""
        if dtype not in DTYPE_NAMES:
            self._problem(pkl, f"unknown dtype {raw_dtype!r} for {name}; kept as written", record)
        shape_ok = isinstance(raw_shape, list) and all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in raw_shape
        )
        if not shape_ok:
            self._problem(pkl, f"shape {raw_shape!r} of {name} is not a list of sizes; shape unknown", record)
        key = (step, rank)
        op_orders = self.order.setdefault(key, {})
        order = op_orders.setdefault(info["op"], len(op_orders))
        if overflow and info["op"] not in self.overflow_ops:
            self.overflow_ops.append(info["op"])
        file_name = f"{name}.npy"
        file: Path | None = None
        if len(file_name.encode("utf-8")) > _MAX_FILE_NAME:
            self._problem(pkl, f"name is over {_MAX_FILE_NAME - 4} characters: no file can hold its payload", record)
        else:
            file = files.get(file_name)
            if file is None:
                self._problem(pkl, f"payload file {file_name} not found beside the .pkl", record)
        seen = self.names.setdefault(key, set())
        unique = name
        if unique in seen:
            n = 2
            while f"{name}#{n}" in seen:
                n += 1
            unique = f"{name}#{n}"
            self._problem(
                pkl, f"duplicate tensor name {name!r} in step {step}, rank {rank}; renamed {unique!r}", record
            )
        seen.add(unique)
        mx, mn, mean = ([_to_float(v) for v in summary[:3]] + [float("nan")] * 3)[:3]
        self.rows.append(
            {
                **info,
                "name": unique,
                "step": step,
                "rank": rank,
                "order": order,
                "dtype": dtype,
                "shape": tuple(raw_shape) if shape_ok else (),
                "numel": int(np.prod(raw_shape)) if shape_ok else -1,
                "_shape_unknown": not shape_ok,
                "max": mx,
                "min": mn,
                "mean": mean,
                "abs_max": max(abs(mn), abs(mx)) if not (np.isnan(mn) or np.isnan(mx)) else float("nan"),
                "file": str(file) if file is not None else "",
                "has_data": file is not None,
            }
        )


def load_npy_tensor(row: Mapping[str, Any]) -> np.ndarray:
    """Load one ptdbg ``.npy`` payload (memory-mapped, never unpickled), in the dtype on record."""
    path = row["file"]
    try:
        fd, _size = open_regular(path, str(row["name"]))  # never a FIFO or a device
    except FileNotFoundError:
        raise DumpFormatError(path, "payload file missing", row["name"]) from None
    os.close(fd)
    try:
        try:
            array = np.load(path, allow_pickle=False, mmap_mode="r")
        except ValueError as exc:
            if "pickle" in str(exc):
                raise
            array = np.load(path, allow_pickle=False)  # some arrays (e.g. empty ones) cannot be memory-mapped
    except (OSError, *NPY_HEADER_ERRORS) as exc:
        raise DumpFormatError(path, f"cannot load the .npy file: {exc}", row["name"]) from exc
    if not isinstance(array, np.ndarray):
        raise DumpFormatError(path, f"holds a {type(array).__name__}, expected one .npy array", row["name"])
    recorded = row["dtype"]
    if recorded in LOW_PRECISION_FLOATS and recorded in DTYPE_NAMES and array.dtype.kind == "f":
        target = dtype_of(recorded)
        if array.dtype != target:
            array = np.asarray(array).astype(target)
    return array


class PtdbgDumpReader(DumpReader):
    """Reads ptdbg_ascend dumps (``dump.pkl`` JSON lines, overflow files and ``.npy`` folders).

    Options: ``run=`` names the run (default: the opened folder's name, skipping ``step*``/``rank*``).

    Examples
    --------
    >>> dump = PtdbgDumpReader().open(Path("ptdbg_dump_v4.0"))  # doctest: +SKIP
    >>> dump.meta["overflow_ops"]                                # doctest: +SKIP
    ['Functional_linear_3_forward']
    """

    name = "ptdbg"
    description = "ptdbg_ascend PyTorch dumps: JSON-lines .pkl files with folders of .npy tensors"

    @classmethod
    def guess_can_open(cls, path: Path) -> bool:
        """Whether ``path`` is, or holds within three folder levels, a ``.pkl`` whose first line is ptdbg's."""
        return ptdbg_dump(path)

    def open(self, path: Path, **options: Any) -> Dump:
        """Read the index of the ptdbg dump at ``path`` (a folder or one ``.pkl``)."""
        run = take_run_option(self.name, options)
        from nbprec.formats import check_dump_path

        path = check_dump_path(path)
        collector = _Collector()
        pkls = [path] if path.is_file() else find_pkl_files(path, collector.problems)
        if not pkls:
            raise DumpFormatError(path, "no ptdbg .pkl file in this folder or below")
        for pkl in pkls:
            collector.read_pkl(pkl)
        if not collector.rows:
            raise EmptyDumpError(
                path,
                f"the .pkl files list no tensors ({len(pkls)} files, {len(collector.problems)} problems"
                f"{first_problem(collector.problems)})",
            )
        unknown_shape = np.array([bool(r.pop("_shape_unknown")) for r in collector.rows], dtype=bool)
        index = index_columns(collector.rows, run=run or _run_name(path))  # Columns: no pandas frame to build
        numel = index["numel"].copy()
        numel[unknown_shape] = -1
        index["numel"] = numel
        meta = {
            "pkl_files": [str(p) for p in pkls],
            "overflow_ops": list(collector.overflow_ops),
            "pkl_steps": sorted(collector.pkl_steps),
            "non_tensor_values": collector.non_tensor,
        }
        return Dump(
            index,
            path=path,
            format=self.name,
            loader=load_npy_tensor,
            problems=collector.problems,
            meta=meta,
            stacks=collector.stacks,
        )


def _run_name(path: Path) -> str:
    folder = path.parent if path.is_file() else path
    while (_RANK_RE.match(folder.name) or _STEP_RE.match(folder.name)) and folder.parent != folder:
        folder = folder.parent
    return folder.name
