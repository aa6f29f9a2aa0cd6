"""Reader for msprobe PyTorch dumps (``dump.json`` + ``construct.json`` + ``stack.json`` + ``.pt`` tensors).

Layout: ``<run>/step{N}/rank{M}/{dump.json, construct.json, stack.json, dump_tensor_data/*.pt}``; the
reader accepts the run folder, a step folder, a rank folder or a ``dump.json`` file and reads every
step/rank it finds into one index. See FORMATS.md section 5.

Index conventions
-----------------
- ``name`` is msprobe's own tensor name (its ``data_name`` without ``.pt``, the *NPU Name* of msprobe's
  compare CSV), e.g. ``Functional.embedding.0.forward.input.1``. In statistics/checksum mode, where no
  ``data_name`` is written, the same name is derived: ``{op}.input.{slot}``, ``{op}.output.{slot}``,
  ``{op}.parameters.{param}`` and ``{module}.parameters_grad.{n}.{param}``. Names are unique within one
  step and rank; a dump of several steps repeats them (tell them apart with the ``step``/``rank`` columns
  or :meth:`~nbprec.dump.Dump.select`).
- ``op`` is the key of ``dump.json``'s ``data`` (``Functional.linear.0.forward``,
  ``Module.enc.layers.0.linear1.Linear.forward.0``, ``Module.head.Linear.parameters_grad.0``); ``order`` is
  its position in ``data`` (all tensors of an op share it).
- ``api``: ``Functional.linear`` for API calls; ``Module.Linear`` (prefix and class) for module calls.
  ``op_type``: ``linear`` / ``Linear``. ``call``: the index msprobe writes in the name. For APIs it counts
  the forward calls of that API (a backward entry keeps the index of its forward call); for modules it
  counts the calls of that module *instance* (``Module.enc.layers.0.linear1.Linear.forward.0``).
- ``module``: the module path (``enc.layers.0.linear1``); for an API call, the path of the module that
  called it, from ``construct.json`` (empty when unknown or at top level).
- ``role``: ``input`` (``input_args`` and ``input_kwargs``; keyword slots are the keyword names),
  ``output``, ``parameter`` (``parameters``, slot = parameter name) and ``gradient`` (``parameters_grad``
  entries, direction ``backward``, slot = parameter name). Nested lists give slots like ``"1.0"``.
- **Backward labelling.** msprobe labels backward entries from the backward computation's point of view
  and nbprec keeps its labels: in an op's ``backward`` entry, ``input`` holds the *incoming* gradients
  (w.r.t. the forward outputs, PyTorch's ``grad_output``) and ``output`` the gradients it produces w.r.t. the
  forward inputs (PyTorch's ``grad_input``).
- Non-tensor arguments (floats, ints, bools, ``None``, slices, ...) are not tensor rows; their number is in
  ``dump.meta["non_tensor_values"]``, and the number and bool values are in ``dump.calls`` (op ->
  ``{"input.10": 0.1, "input.training": True, ...}``), which tells a dropout that is on from one that is off.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nbprec._optional import require
from nbprec.dtypes import NUMPY_DTYPES, canonical_dtype
from nbprec.dump import Dump, Problem, make_index
from nbprec.errors import DumpFormatError, EmptyDumpError
from nbprec.formats._layout import (
    DumpSource,
    find_dump_files,
    read_json_file,
    run_name,
)
from nbprec.formats._probe import find_first_file
from nbprec.formats._pt import read_pt_tensor
from nbprec.formats._torch import torch_to_numpy
from nbprec.formats.base import DumpReader, take_run_option

# section of an op entry -> role; rows follow this order (inputs, parameters, outputs, as msprobe's compare CSV)
_SECTIONS = dict(input_args="input", input_kwargs="input", input="input", parameters="parameter", output="output")
_SECTION_RANK = {section: i for i, section in enumerate(_SECTIONS)}
_MODULE_PREFIXES = ("Module", "Cell")
_DIRECTIONS = ("forward", "backward")
_MAX_FILE_NAME = 255
_PROBE_BYTES = 8192


@dataclass(frozen=True)
class _OpKey:
    """What an msprobe op key says: API/module, call index and direction."""

    api: str
    op_type: str
    call: int
    direction: str
    module: str | None  # module path for module calls, None for API calls
    grads: bool  # a ``parameters_grad`` entry


def parse_op_key(key: str) -> _OpKey | None:
    """Split an msprobe op key into its parts; ``None`` if it does not follow msprobe's naming.

    Examples
    --------
    >>> parse_op_key("Functional.linear.0.forward").api
    'Functional.linear'
    >>> parse_op_key("Module.enc.layers.0.linear1.Linear.forward.0").module
    'enc.layers.0.linear1'
    """
    parts = key.split(".")
    if parts[0] in _MODULE_PREFIXES and len(parts) >= 4 and parts[-1].isdigit():
        kind = parts[-2]
        if kind in _DIRECTIONS or kind == "parameters_grad":
            return _OpKey(
                api=f"{parts[0]}.{parts[-3]}",
                op_type=parts[-3],
                call=int(parts[-1]),
                direction="backward" if kind == "parameters_grad" else kind,
                module=".".join(parts[1:-3]),
                grads=kind == "parameters_grad",
            )
    if len(parts) >= 3 and parts[-1] in _DIRECTIONS and parts[-2].isdigit():
        return _OpKey(".".join(parts[:-2]), ".".join(parts[1:-2]), int(parts[-2]), parts[-1], None, False)
    return None


def _is_tensor_entry(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    kind = value.get("type")
    if isinstance(kind, str):
        return kind.endswith(("Tensor", "Parameter", "ndarray"))
    return "dtype" in value and "shape" in value


def _leaves(value: Any, slot: str) -> Iterator[tuple[str, Any]]:
    """(slot, value) for every leaf of an argument structure; nested lists/dicts extend the slot."""
    if isinstance(value, dict) and ("type" in value or _is_tensor_entry(value)):
        yield slot, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{slot}.{key}" if slot else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{slot}.{i}" if slot else str(i))
    else:
        yield slot, value


_canonical = functools.lru_cache(maxsize=256)(canonical_dtype)  # one dump names a handful of dtypes


def _to_float(value: Any) -> float:
    if type(value) is float:  # the usual case, first (a dump has 4 statistics per tensor)
        return value
    if value is None or isinstance(value, (list, dict)):
        return float("nan")
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _shape(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, list):
        return None
    for d in value:
        if type(d) is not int or d < 0:  # type(), not isinstance(): bool is not a size
            return None
    return tuple(value)


def _module_path(node: Any) -> str:
    if not isinstance(node, str):
        return ""
    key = parse_op_key(node)
    return key.module if key is not None and key.module is not None else ""


class DumpSourceReader:
    """Builds the records of one ``dump.json``."""

    def __init__(self, source: DumpSource, problems: list[Problem]) -> None:
        self.source = source
        self.folder = source.dump_json.parent
        self.problems = problems
        self.non_tensor = 0
        self.calls: dict[str, dict[str, bool | int | float]] = {}  # op -> non-tensor argument values
        self.hierarchy: dict[str, str | None] = {}
        self.tensor_dir = self.folder / "dump_tensor_data"
        self.listing: set[str] | None = None  # file names in tensor_dir; None when it cannot be listed
        self._dir_prefix = os.path.join(self.tensor_dir, "")  # + a payload's file name = its path

    def _problem(self, problem: str, record: str = "", file: Path | None = None) -> None:
        self.problems.append(Problem(str(file or self.source.dump_json), problem, record))

    def _find_tensor_dir(self, top: Mapping[str, Any]) -> None:
        recorded = top.get("dump_data_dir")
        for folder in [self.tensor_dir] + ([Path(recorded)] if isinstance(recorded, str) and recorded else []):
            with contextlib.suppress(OSError):
                self.tensor_dir, self.listing = folder, set(os.listdir(folder))
                self._dir_prefix = os.path.join(folder, "")
                return

    def _construct(self) -> None:
        path = self.folder / "construct.json"
        if not path.exists():
            return
        try:
            tree = read_json_file(path)
        except DumpFormatError as exc:
            self._problem(f"construct.json ignored: {exc.problem}", file=path)
            return
        if not isinstance(tree, dict):
            self._problem("construct.json ignored: expected a JSON object", file=path)
            return
        self.hierarchy = {str(k): v if isinstance(v, str) else None for k, v in tree.items()}

    def records(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        top = read_json_file(self.source.dump_json)
        if not isinstance(top, dict) or not isinstance(top.get("data"), dict):
            found = type(top).__name__ if not isinstance(top, dict) else "no 'data' object"
            raise DumpFormatError(
                self.source.dump_json,
                f"not an msprobe dump.json: expected an object with a 'data' object, found {found}",
            )
        self._construct()
        self._find_tensor_dir(top)
        meta = {k: v for k, v in top.items() if k != "data" and not isinstance(v, (dict, list))}
        rows: list[dict[str, Any]] = []
        seen: set[str] = set()
        missing_dir_count = 0
        for order, (key, body) in enumerate(top["data"].items()):
            info = parse_op_key(key)
            if info is None:
                self._problem("op name does not follow msprobe's naming; API, call and direction unknown", key)
            if not isinstance(body, dict):
                self._problem(f"op entry is a {type(body).__name__}, expected an object; skipped", key)
                continue
            module = info.module if info and info.module is not None else _module_path(self.hierarchy.get(key))
            base = {
                "step": self.source.step,
                "rank": self.source.rank,
                "order": order,
                "op": key,
                "api": info.api if info else key,
                "op_type": info.op_type if info else key,
                "call": info.call if info else -1,
                "direction": info.direction if info else "",
                "module": module,
            }
            for role, name_base, slot, entry in self._entries(key, body, info):
                if not _is_tensor_entry(entry):
                    self.non_tensor += 1
                    value = entry.get("value") if isinstance(entry, dict) else None
                    if isinstance(value, (bool, int, float)):  # how the op was called (dropout p, training ...)
                        self.calls.setdefault(key, {})[f"{role}.{slot}"] = value
                    continue
                row = self._row(entry, f"{name_base}.{slot}", base, role, slot)
                if self.listing is None and row["file"]:
                    missing_dir_count += 1
                if row["name"] in seen:
                    self._problem("duplicate tensor name in one dump.json; renamed with a '#' suffix", row["name"])
                    n = 2
                    while f"{row['name']}#{n}" in seen:
                        n += 1
                    row["name"] = f"{row['name']}#{n}"
                seen.add(row["name"])
                rows.append(row)
        if missing_dir_count:
            self._problem(
                f"tensor folder not found ({self.tensor_dir}): "
                f"{missing_dir_count} payloads listed in dump.json are unavailable",
                file=self.tensor_dir,
            )
        return rows, meta

    def _entries(self, key: str, body: Mapping[str, Any], info: _OpKey | None) -> Iterator[tuple[str, str, str, Any]]:
        """(role, name base, slot, value) for every leaf of an op entry."""
        if info is not None and info.grads:
            for param, value in body.items():
                if isinstance(value, list) and len(value) == 1:
                    value = value[0]
                for slot, leaf in _leaves(value, str(param)):
                    yield "gradient", key, slot, leaf
            return
        for section, value in sorted(body.items(), key=lambda item: _SECTION_RANK.get(item[0], len(_SECTIONS))):
            role = _SECTIONS.get(section)
            if role is None:
                self._problem(f"unknown section {section!r} in op entry; skipped", key)
                continue
            part = "parameters" if role == "parameter" else role
            for slot, leaf in _leaves(value, ""):
                yield role, f"{key}.{part}", slot or "0", leaf

    def _row(self, entry: Mapping[str, Any], derived: str, base: Mapping[str, Any], role: str, slot: str) -> dict:
        data_name = entry.get("data_name")
        data_name = data_name if isinstance(data_name, str) and data_name else ""
        name = data_name.removesuffix(".pt") if data_name else derived
        raw_dtype = entry.get("dtype")
        dtype = _canonical(raw_dtype) if isinstance(raw_dtype, str) and raw_dtype else ""
        if dtype not in NUMPY_DTYPES:
            self._problem(f"unknown dtype {raw_dtype!r}; kept as written", name)
        shape = _shape(entry.get("shape"))
        if shape is None:
            self._problem(f"shape {entry.get('shape')!r} is not a list of sizes; shape unknown", name)
        mn, mx = _to_float(entry.get("Min")), _to_float(entry.get("Max"))
        has_data = False
        file = ""
        if data_name:
            too_long = len(data_name) * 4 > _MAX_FILE_NAME and len(data_name.encode("utf-8")) > _MAX_FILE_NAME
            if too_long or "/" in data_name or data_name in (".", ".."):
                self._problem(f"data_name is not a valid file name (over {_MAX_FILE_NAME} bytes or a path)", name)
            else:
                file = self._dir_prefix + data_name  # str: a Path per tensor is slow
                has_data = self.listing is not None and data_name in self.listing
                if self.listing is not None and not has_data:
                    self._problem(f"payload file missing: {data_name}", name, self.tensor_dir)
        return {
            **base,
            "name": name,
            "role": role,
            "slot": slot,
            "dtype": dtype,
            "shape": shape or (),
            "numel": math.prod(shape) if shape is not None else -1,
            "_shape_unknown": shape is None,
            "min": mn,
            "max": mx,
            "mean": _to_float(entry.get("Mean")),
            "norm": _to_float(entry.get("Norm")),
            "abs_max": max(abs(mn), abs(mx)) if not (math.isnan(mn) or math.isnan(mx)) else math.nan,
            "checksum": str(entry.get("md5") or ""),
            "file": file,
            "has_data": has_data,
        }


def _load_stacks(files: tuple[Path, ...]) -> dict[str, list[str]]:
    """Op name -> stack lines, from every ``stack.json`` (new ``{id: [[ops], [lines]]}`` and old ``{op: [lines]}``)."""
    stacks: dict[str, list[str]] = {}
    for path in files:
        content = read_json_file(path)
        if not isinstance(content, dict):
            raise DumpFormatError(path, "expected a JSON object mapping ids or op names to stacks")
        for key, value in content.items():
            if (
                isinstance(value, list)
                and len(value) == 2
                and isinstance(value[0], list)
                and isinstance(value[1], list)
            ):
                for op in value[0]:
                    stacks[str(op)] = [str(line) for line in value[1]]
            elif isinstance(value, list):
                stacks[str(key)] = [str(line) for line in value]
    return stacks


def load_pt_tensor(row: Mapping[str, Any]) -> np.ndarray:
    """Load one msprobe ``.pt`` payload as a bit-exact numpy array.

    Plain one-tensor archives are read directly (:func:`nbprec.formats._pt.read_pt_tensor`: no torch, nothing
    unpickled); anything else goes through ``torch.load(weights_only=True)``.
    """
    path = row["file"]
    array = read_pt_tensor(path)
    if array is not None:
        return _as_recorded(array, row)
    torch = require("torch", "reading msprobe .pt tensors")
    try:  # memory-mapped: the payload is not copied into a fresh storage (zip-format files only)
        obj = torch.load(path, weights_only=True, map_location="cpu", mmap=True)
    except Exception:  # legacy (non-zip) files cannot be mapped; corrupt ones fail again below
        try:
            obj = torch.load(path, weights_only=True, map_location="cpu")
        except Exception as exc:  # torch.load raises many types (zip, pickle, runtime, EOF) for corrupt files
            raise DumpFormatError(path, f"cannot load the .pt file: {type(exc).__name__}: {exc}", row["name"]) from exc
    if not isinstance(obj, torch.Tensor):
        raise DumpFormatError(path, f"holds a {type(obj).__name__}, expected a tensor", row["name"])
    return _as_recorded(torch_to_numpy(obj), row)


def _as_recorded(array: np.ndarray, row: Mapping[str, Any]) -> np.ndarray:
    """``array`` when its dtype and shape are the ones dump.json records for it; a mislabelled or swapped
    payload file is an error rather than a comparison of the wrong tensor."""
    dtype = row.get("dtype", "")
    problem = ""
    if dtype in NUMPY_DTYPES and array.dtype != NUMPY_DTYPES[dtype]:
        problem = f"payload is {array.dtype}, dump.json says {dtype}"
    elif row.get("numel", -1) >= 0 and tuple(array.shape) != tuple(row.get("shape", ())):
        problem = f"payload has shape {list(array.shape)}, dump.json says {list(row.get('shape', ()))}"
    if problem:
        raise DumpFormatError(
            row["file"],
            f"{problem}: the file belongs to another tensor or run (copied over, renamed?); restore it or dump again",
            str(row.get("name", "")) or None,
        )
    return array


class MsprobeDumpReader(DumpReader):
    """Reads msprobe PyTorch dumps (tensor, statistics and md5/checksum modes; levels L0, L1 and mix).

    Options: ``run=`` names the run (default: the folder above ``step*/``).

    Examples
    --------
    >>> dump = MsprobeDumpReader().open(Path("tests/fixtures/msprobe/bf16_tensor_mix"))  # doctest: +SKIP
    >>> dump.tensor("Functional.linear.0.forward.output.0").dtype                       # doctest: +SKIP
    dtype(bfloat16)
    """

    name = "msprobe"
    description = "msprobe PyTorch dumps: step*/rank*/dump.json with .pt tensors"

    @classmethod
    def guess_can_open(cls, path: Path) -> bool:
        """Whether ``path`` is, or holds at depth <= 2, a ``dump.json`` whose first bytes name a ``data`` key."""
        try:
            if path.is_file():
                return path.suffix == ".json" and _looks_like_dump_json(path)
            for depth, folders in ((0, "*"), (1, "rank*"), (2, "[sr][ta]*")):  # ./, rank*/, step*/rank*/
                candidate = find_first_file(
                    path, lambda name: name == "dump.json", max_depth=depth, dir_pattern=folders
                )
                if candidate is not None:
                    return _looks_like_dump_json(candidate)
        except (OSError, RuntimeError):
            return False
        return False

    def open(self, path: Path, **options: Any) -> Dump:
        """Read the index of the msprobe dump at ``path``; see the module docstring for the conventions."""
        run = take_run_option(self.name, options)
        from nbprec.formats import check_dump_path

        path = check_dump_path(path)
        problems: list[Problem] = []
        sources = find_dump_files(path, problems)
        if not sources:
            raise DumpFormatError(path, "no msprobe dump.json here, in rank*/ or in step*/rank*/")
        records: list[dict[str, Any]] = []
        hierarchy: dict[str, str | None] = {}
        calls: dict[str, dict[str, bool | int | float]] = {}
        meta: dict[str, Any] = {}
        non_tensor = 0
        for source in sources:
            reader = DumpSourceReader(source, problems)
            rows, source_meta = reader.records()
            records.extend(rows)
            hierarchy.update(reader.hierarchy)
            calls.update(reader.calls)
            non_tensor += reader.non_tensor
            for k, v in source_meta.items():
                meta.setdefault(k, v)
        if not records:
            raise EmptyDumpError(
                path, f"dump.json lists no tensors ({non_tensor} non-tensor values, {len(problems)} problems)"
            )
        unknown_shape = [bool(r.pop("_shape_unknown")) for r in records]
        index = make_index(records, run=run or run_name(path))
        if any(unknown_shape):
            index.loc[np.array(unknown_shape, dtype=bool), "numel"] = -1
        meta.update(
            non_tensor_values=non_tensor,
            dump_files=[str(s.dump_json) for s in sources],
        )
        stack_files = tuple(
            s.dump_json.parent / "stack.json" for s in sources if (s.dump_json.parent / "stack.json").is_file()
        )
        stacks: Callable[[], Mapping[str, list[str]]] = functools.partial(_load_stacks, stack_files)
        return Dump(
            index,
            path=path,
            format=self.name,
            loader=load_pt_tensor,
            problems=problems,
            meta=meta,
            hierarchy=hierarchy,
            stacks=stacks,
            calls=calls,
        )


def _looks_like_dump_json(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            head = f.read(_PROBE_BYTES)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and b'"data"' in head
