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

import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nbprec import dtypes
from nbprec._optional import require
from nbprec.dtypes import ITEMSIZES
from nbprec.dump import Dump, Problem
from nbprec.dump_index import index_columns
from nbprec.dump_problems import first_problem
from nbprec.errors import DumpFormatError, EmptyDumpError
from nbprec.formats import _payload
from nbprec.formats._files import ConfinedFiles, real_folder
from nbprec.formats._layout import STEP_RE, find_dump_files, is_rank_folder, read_json_file, run_name
from nbprec.formats._payload import MAP_FROM
from nbprec.formats._pt import read_pt_open, read_small_pt
from nbprec.formats._torch import torch_to_numpy
from nbprec.formats.base import DumpReader, take_run_option
from nbprec.formats.msprobe_index import DumpSourceReader
from nbprec.formats.msprobe_keys import parse_op_key
from nbprec.formats.probes import msprobe_dump


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


def _recorded_problem(dtype: np.dtype, shape: tuple[int, ...], row: Mapping[str, Any]) -> str:
    """'' when a payload of ``dtype`` and ``shape`` is the tensor dump.json records for ``row``, else why not."""
    recorded = row.get("dtype", "")
    if recorded in dtypes.DTYPE_NAMES and dtype != dtypes.numpy_dtype(recorded):
        return f"payload is {dtype}, dump.json says {recorded}"
    if row.get("numel", -1) >= 0 and tuple(shape) != tuple(row.get("shape", ())):
        return f"payload has shape {list(shape)}, dump.json says {list(row.get('shape', ()))}"
    return ""


def _mismatch(row: Mapping[str, Any], problem: str) -> DumpFormatError:
    return DumpFormatError(
        row["file"],
        f"{problem}: the file belongs to another tensor or run (copied over, renamed?); restore it or dump again",
        str(row.get("name", "")) or None,
    )


def _as_recorded(array: np.ndarray, row: Mapping[str, Any]) -> np.ndarray:
    """``array`` when its dtype and shape are the ones dump.json records for it; a mislabelled or swapped
    payload file is an error rather than a comparison of the wrong tensor."""
    problem = _recorded_problem(array.dtype, array.shape, row)
    if problem:
        raise _mismatch(row, problem)
    return array


class PayloadLoader:
    """Loads msprobe ``.pt`` payloads as bit-exact numpy arrays, reading only regular files inside ``roots``.

    ``roots`` are the real folders payloads may lie in (the dump's folder, checked ``dump_data_dir`` folders).
    A payload whose real path leads elsewhere (a symbolic link to ``/etc/shadow``), that is not a regular file
    (a FIFO, ``/dev/zero``) or that declares another dtype or shape than dump.json records is refused before
    its storage is read. Plain one-tensor archives are read directly
    (:func:`nbprec.formats._pt.read_pt_tensor`: no torch, nothing unpickled); anything else goes through
    ``torch.load(weights_only=True)``.
    """

    #: What :meth:`reads_whole` accepts: small plain ``.pt`` archives (the engine's small-pair path for them).
    small_payloads = "pt"

    def __init__(self, roots: list[str]) -> None:
        self.roots = list(roots)
        self._files = ConfinedFiles(self.roots)

    def reads_whole(self, row: Mapping[str, Any]) -> bool:
        """Whether this loader reads ``row``'s payload in one open and one read (a small payload of a known dtype,
        in a folder inside the dump), as long as the file is the plain archive dump.json says it is."""
        return self._sized_inside(row, 0, MAP_FROM)

    def reads_mapped(self, row: Mapping[str, Any]) -> bool:
        """Whether this loader maps ``row``'s payload and the comparison reads it in one call of the compiled kernel
        (:data:`MAP_FROM` bytes or more of a known dtype, under :data:`~nbprec.formats._payload.RELEASE_FROM`, in a
        folder inside the dump), as long as the file is the plain archive dump.json says it is: the pairs the
        command's early worker maps (:func:`nbprec.compare.small_pairs.mapped_pair`)."""
        return self._sized_inside(row, MAP_FROM, _payload.RELEASE_FROM)

    def _sized_inside(self, row: Mapping[str, Any], low: int, high: int) -> bool:
        """Whether ``row``'s payload, by its known dtype and element count, holds ``low`` to ``high`` - 1 bytes and
        lies in a folder inside the dump."""
        itemsize, numel = ITEMSIZES.get(row.get("dtype", "")), row.get("numel", -1)
        if itemsize is None or not low <= numel * itemsize < high:
            return False
        return self._files.folder_inside(str(row["file"]))

    def __call__(self, row: Mapping[str, Any]) -> np.ndarray:
        path, name = str(row["file"]), str(row["name"])
        if self.reads_whole(row):
            array = read_small_pt(path, dtypes.numpy_dtype(row["dtype"]), tuple(row.get("shape", ())))  # the usual one
            if array is not None:
                return array

        def check(dtype: str, shape: tuple[int, ...]) -> None:
            problem = _recorded_problem(dtypes.numpy_dtype(dtype) if dtype in dtypes.DTYPE_NAMES else dtype, shape, row)
            if problem:
                raise _mismatch(row, problem)

        fd, size = self._files.open(path, name)
        try:
            array = read_pt_open(fd, size, path, check=check, record=name)
        finally:
            os.close(fd)
        if array is not None:  # of the dtype and shape `check` passed
            return array
        torch = require("torch", "reading msprobe .pt tensors")
        try:  # memory-mapped: the payload is not copied into a fresh storage (zip-format files only)
            obj = torch.load(path, weights_only=True, map_location="cpu", mmap=True)
        except Exception:  # legacy (non-zip) files cannot be mapped; corrupt ones fail again below
            try:
                obj = torch.load(path, weights_only=True, map_location="cpu")
            except Exception as exc:  # torch.load raises many types (zip, pickle, runtime, EOF) for corrupt files
                raise DumpFormatError(
                    path, f"cannot load the .pt file: {type(exc).__name__}: {exc}", row["name"]
                ) from exc
        if not isinstance(obj, torch.Tensor):
            raise DumpFormatError(path, f"holds a {type(obj).__name__}, expected a tensor", row["name"])
        return _as_recorded(torch_to_numpy(obj), row)


def load_pt_tensor(row: Mapping[str, Any]) -> np.ndarray:
    """Load one msprobe ``.pt`` payload as a bit-exact numpy array, from anywhere under the payload's own
    folder (a :class:`PayloadLoader` rooted there; a dump's loader is rooted at the dump's folder)."""
    return PayloadLoader([real_folder(os.path.dirname(str(row["file"])))])(row)


def dump_folder(path: Path) -> Path:
    """The folder of the run an msprobe dump at ``path`` belongs to (above ``step*/rank*/`` or
    ``step*/proc*/``): payloads must lie inside it."""
    folder = path if path.is_dir() else path.parent
    if is_rank_folder(folder.name):
        folder = folder.parent
    if STEP_RE.match(folder.name):
        folder = folder.parent
    return folder


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
    description = "msprobe PyTorch dumps: step*/rank*/dump.json (or step*/proc*/) with .pt tensors"

    @classmethod
    def guess_can_open(cls, path: Path) -> bool:
        """Whether ``path`` is, or holds at depth <= 2, a ``dump.json`` whose first bytes name a ``data`` key."""
        return msprobe_dump(path)

    def open(self, path: Path, **options: Any) -> Dump:
        """Read the index of the msprobe dump at ``path``; see the module docstring for the conventions."""
        run = take_run_option(self.name, options)
        from nbprec.formats import check_dump_path

        path = check_dump_path(path)
        problems: list[Problem] = []
        sources = find_dump_files(path, problems)
        if not sources:
            where = "in rank*/ or proc*/, or in step*/rank*/ or step*/proc*/"
            raise DumpFormatError(path, f"no msprobe dump.json here, {where}")
        roots = [real_folder(dump_folder(path))]
        frames: list[dict[str, Any]] = []
        hierarchy: dict[str, str | None] = {}
        calls: dict[str, dict[str, bool | int | float]] = {}
        meta: dict[str, Any] = {}
        non_tensor = 0
        for source in sources:
            reader = DumpSourceReader(source, problems, roots)
            frame, source_meta = reader.read()
            frames.append(frame)
            hierarchy.update(reader.hierarchy)
            calls.update(reader.calls)
            non_tensor += reader.non_tensor
            for k, v in source_meta.items():
                meta.setdefault(k, v)
        records = frames[0] if len(frames) == 1 else {c: np.concatenate([f[c] for f in frames]) for c in frames[0]}
        del frames
        if not len(records["name"]):
            raise EmptyDumpError(
                path,
                f"dump.json lists no tensors ({non_tensor} non-tensor values, {len(problems)} problems"
                f"{first_problem(problems)})",
            )
        unknown_shape = records["numel"] < 0
        index = index_columns(records, run=run or run_name(path), typed=True)
        del records  # the index holds the columns now
        if unknown_shape.any():
            numel = index["numel"].copy()
            numel[unknown_shape] = -1
            index["numel"] = numel
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
            loader=PayloadLoader(roots),
            problems=problems,
            meta=meta,
            hierarchy=hierarchy,
            stacks=stacks,
            calls=calls,
        )


__all__ = ["MsprobeDumpReader", "PayloadLoader", "dump_folder", "load_pt_tensor", "parse_op_key"]
