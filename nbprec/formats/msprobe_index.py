"""The index of one msprobe ``dump.json``, built column by column while the file is read op by op.

:class:`DumpSourceReader` streams ``dump.json`` (:class:`~nbprec.formats._jsonstream.JsonObjectStream`): one
op entry is decoded at a time and its tensors are appended to per-column arrays, never to one dict per row,
so a ``dump.json`` of 10^6 ops is indexed in bounded memory (the text of one 4 MiB chunk plus the columns).
Op-level values (op, api, call, module, ...) are stored once per op and spread to its tensors at the end.

Payload files are checked when the index is built, from one listing of the tensor folder: a payload is
usable only when it is a regular file whose real path lies inside the dump (or inside a checked
``dump_data_dir``); FIFOs, devices, folders, broken links and links leading out of the dump are problems and
their rows have no data. See :mod:`nbprec.formats.msprobe` for the index conventions.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import stat
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nbprec.dtypes import NUMPY_DTYPES, canonical_dtype
from nbprec.dump import Problem
from nbprec.errors import DumpFormatError
from nbprec.formats._files import PayloadFolder, inside, printable, real_folder
from nbprec.formats._jsonstream import JsonObjectStream
from nbprec.formats._layout import DumpSource, read_json_file

# section of an op entry -> role; rows follow this order (inputs, parameters, outputs, as msprobe's compare CSV)
_SECTIONS = dict(input_args="input", input_kwargs="input", input="input", parameters="parameter", output="output")
_SECTION_RANK = {section: i for i, section in enumerate(_SECTIONS)}
_MODULE_PREFIXES = ("Module", "Cell")
_DIRECTIONS = ("forward", "backward")
_MAX_FILE_NAME = 255
_MAX_NUMEL = (1 << 63) - 1
TENSOR_DIR = "dump_tensor_data"


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
    if parts[0] in _MODULE_PREFIXES and len(parts) >= 4 and _is_index(parts[-1]):
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
    if len(parts) >= 3 and parts[-1] in _DIRECTIONS and _is_index(parts[-2]):
        return _OpKey(".".join(parts[:-2]), ".".join(parts[1:-2]), int(parts[-2]), parts[-1], None, False)
    return None


def _is_index(text: str) -> bool:
    """Whether ``text`` is a call index: ASCII digits, few enough for an int64 (``"²"`` is a digit ``int``
    refuses, and 5000 digits would make ``int`` raise)."""
    return 0 < len(text) <= 18 and text.isascii() and text.isdigit()


def _is_tensor_entry(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    kind = value.get("type")
    if isinstance(kind, str):
        return kind.endswith(("Tensor", "Parameter", "ndarray"))
    return "dtype" in value and "shape" in value


def _leaves(value: Any, slot: str, out: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``out`` extended with (slot, value) for every leaf of an argument structure; nested lists/dicts extend
    the slot. (A list, not a generator: this runs for every argument of every op.)"""
    if type(value) is dict:
        if "type" in value or ("dtype" in value and "shape" in value):
            out.append((slot, value))
        else:
            for key, item in value.items():
                _leaves(item, f"{slot}.{key}" if slot else str(key), out)
    elif type(value) is list:
        for i, item in enumerate(value):
            _leaves(item, f"{slot}.{i}" if slot else str(i), out)
    else:
        out.append((slot, value))
    return out


_canonical = functools.lru_cache(maxsize=256)(canonical_dtype)  # one dump names a handful of dtypes


def _to_float(value: Any) -> float:
    if type(value) is float:  # the usual case, first (a dump has 4 statistics per tensor)
        return value
    if value is None or isinstance(value, (list, dict)):
        return float("nan")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return float("nan")


def _shape(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, list):
        return None
    for d in value:
        if type(d) is not int or d < 0 or d > _MAX_NUMEL:  # type(), not isinstance(): bool is not a size
            return None
    return tuple(value)


def _shown(value: Any) -> str:
    """``repr(value)`` for a problem's sentence, cut to 120 characters (a hostile value may be huge)."""
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _module_path(node: Any) -> str:
    if not isinstance(node, str):
        return ""
    key = parse_op_key(node)
    return key.module if key is not None and key.module is not None else ""


def _file_name_problem(data_name: str) -> str:
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


def checked_data_dir(recorded: str) -> str:
    """The real path of a ``dump_data_dir`` recorded in dump.json when it is an msprobe tensor folder (a
    ``dump_tensor_data`` folder beside a ``dump.json``), '' otherwise."""
    real = os.path.realpath(recorded)
    if os.path.basename(real) != TENSOR_DIR or not os.path.isdir(real):
        return ""
    beside = os.path.join(os.path.dirname(real), "dump.json")
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.stat(beside).st_mode):
            return real
    return ""


class DumpSourceReader:
    """Builds the index columns of one ``dump.json`` (see the module docstring).

    ``roots`` are the real folders (as :func:`~nbprec.formats._files.real_folder` gives them) payloads may
    lie in: the dump's own folder; a checked ``dump_data_dir`` is added to it when the reader uses one.
    """

    def __init__(self, source: DumpSource, problems: list[Problem], roots: list[str]) -> None:
        self.source = source
        self.folder = source.dump_json.parent
        self.problems = problems
        self.roots = roots
        self.non_tensor = 0
        self.calls: dict[str, dict[str, bool | int | float]] = {}  # op -> non-tensor argument values
        self.hierarchy: dict[str, str | None] = {}
        self.tensor_dir = self.folder / TENSOR_DIR
        # per op: its position in data, name, API, type, call index, direction, module
        self._op_order, self._op_call = array("q"), array("q")
        self._op_text: tuple[list[str], ...] = ([], [], [], [], [])
        self._n_ops = 0
        # per tensor: its op (an index into the per-op columns), then its own columns
        self._op_of = array("q")
        self._names: list[str] = []
        self._text: tuple[list[Any], ...] = ([], [], [], [], [])  # role, slot, dtype, shape, checksum
        self._numel = array("q")
        self._stats = (array("d"), array("d"), array("d"), array("d"))  # min, max, mean, norm
        self._payload = bytearray()  # 1: the row names a payload file
        self._payload_names: dict[int, str] = {}  # row -> payload file name, where it is not name + ".pt"
        # one object per distinct value: a dump repeats a few hundred shapes, APIs, slots and directions
        self._shapes: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._strings: dict[str, str] = {}

    def _intern(self, text: str) -> str:
        return self._strings.setdefault(text, text)

    def _problem(self, problem: str, record: str = "", file: Path | str | None = None) -> None:
        self.problems.append(Problem(str(file or self.source.dump_json), problem, record))

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

    # -- reading ---------------------------------------------------------------------------------------
    def read(self) -> tuple[pd.DataFrame, dict[str, Any]]:
        """The index columns of this dump.json's tensors (a DataFrame for ``make_index``) and its meta."""
        path = self.source.dump_json
        self._construct()
        meta: dict[str, Any] = {}
        has_data_object = False
        with JsonObjectStream(path) as stream:
            if stream.first_type() != "dict":
                found = stream.first_type()
                raise DumpFormatError(
                    path, f"not an msprobe dump.json: expected an object with a 'data' object, found {found}"
                )
            stream.begin_object()
            while (key := stream.next_key()) is not None:
                if key == "data" and stream.peek() == "{":
                    has_data_object = True
                    stream.begin_object()
                    while (op := stream.next_key()) is not None:
                        self._add_op(op, stream.value())
                    continue
                value = stream.value()
                if key == "data":
                    has_data_object = False
                elif not isinstance(value, (dict, list)):
                    meta[key] = value
            stream.end()
            if stream.bad_utf8 is not None:
                self._problem(
                    f"not valid UTF-8 (first bad byte at offset {stream.bad_utf8}): the bad bytes are kept in the "
                    "names as surrogate escapes"
                )
        if not has_data_object:
            raise DumpFormatError(
                path, "not an msprobe dump.json: expected an object with a 'data' object, found no 'data' object"
            )
        return self._frame(meta.get("dump_data_dir")), meta

    def _add_op(self, key: str, body: Any) -> None:
        order = self._n_ops  # the op's position in data, counting entries that are skipped
        self._n_ops += 1
        info = parse_op_key(key)
        if info is None:
            self._problem("op name does not follow msprobe's naming; API, call and direction unknown", key)
        if not isinstance(body, dict):
            self._problem(f"op entry is a {type(body).__name__}, expected an object; skipped", key)
            return
        module = info.module if info and info.module is not None else _module_path(self.hierarchy.get(key))
        op_index = len(self._op_order)
        self._op_order.append(order)
        self._op_call.append(info.call if info else -1)
        intern = self._intern
        for values, value in zip(
            self._op_text,
            (
                key,
                intern(info.api) if info else key,
                intern(info.op_type) if info else key,
                intern(info.direction) if info else "",
                intern(module),
            ),
            strict=True,
        ):
            values.append(value)
        for role, name_base, slot, entry in self._entries(key, body, info):
            if not _is_tensor_entry(entry):
                self.non_tensor += 1
                value = entry.get("value") if isinstance(entry, dict) else None
                if isinstance(value, (bool, int, float)):  # how the op was called (dropout p, training ...)
                    self.calls.setdefault(key, {})[intern(f"{role}.{slot}")] = value
                continue
            self._add_row(op_index, entry, f"{name_base}.{slot}", role, intern(slot))

    def _entries(self, key: str, body: Mapping[str, Any], info: _OpKey | None) -> list[tuple[str, str, str, Any]]:
        """(role, name base, slot, value) for every leaf of an op entry."""
        out: list[tuple[str, str, str, Any]] = []
        if info is not None and info.grads:
            for param, value in body.items():
                if isinstance(value, list) and len(value) == 1:
                    value = value[0]
                out.extend(("gradient", key, slot, leaf) for slot, leaf in _leaves(value, str(param), []))
            return out
        for section, value in sorted(body.items(), key=lambda item: _SECTION_RANK.get(item[0], len(_SECTIONS))):
            role = _SECTIONS.get(section)
            if role is None:
                self._problem(f"unknown section {section!r} in op entry; skipped", key)
                continue
            base = f"{key}.{'parameters' if role == 'parameter' else role}"
            out.extend((role, base, slot or "0", leaf) for slot, leaf in _leaves(value, "", []))
        return out

    def _add_row(self, op_index: int, entry: Mapping[str, Any], derived: str, role: str, slot: str) -> None:
        get = entry.get
        data_name = get("data_name")
        data_name = data_name if isinstance(data_name, str) and data_name else ""
        name = data_name.removesuffix(".pt") if data_name else derived
        raw_dtype = get("dtype")
        dtype = _canonical(raw_dtype) if isinstance(raw_dtype, str) and raw_dtype else ""
        if dtype not in NUMPY_DTYPES:
            self._problem(f"unknown dtype {_shown(raw_dtype)}; kept as written", name)
        shape = _shape(get("shape"))
        if shape is None:
            self._problem(f"shape {_shown(get('shape'))} is not a list of sizes; shape unknown", name)
            numel = -1
        elif (numel := math.prod(shape)) > _MAX_NUMEL:
            self._problem(f"shape {list(shape)} has more elements than an index can count; shape unknown", name)
            shape, numel = None, -1
        else:
            shape = self._shapes.setdefault(shape, shape)
        if data_name:
            why = _file_name_problem(data_name)
            if why:
                self._problem(why, name)
                data_name = ""
        row = len(self._op_of)
        self._op_of.append(op_index)
        self._names.append(name)
        roles, slots, dtypes, shapes, checksums = self._text
        roles.append(role)
        slots.append(slot)
        dtypes.append(dtype)
        shapes.append(shape or ())
        checksums.append(str(get("md5") or ""))
        self._numel.append(numel)
        mins, maxs, means, norms = self._stats
        mins.append(_to_float(get("Min")))
        maxs.append(_to_float(get("Max")))
        means.append(_to_float(get("Mean")))
        norms.append(_to_float(get("Norm")))
        if data_name:
            self._payload.append(1)
            if data_name != name + ".pt":
                self._payload_names[row] = data_name
        else:
            self._payload.append(0)

    # -- the payloads and the columns ------------------------------------------------------------------
    def _payload_folder(self, recorded: Any) -> PayloadFolder | str:
        """The listing of the tensor folder: ``dump_tensor_data`` beside dump.json, else the recorded
        ``dump_data_dir`` when it is a checked msprobe tensor folder; else why the payloads are unavailable."""
        missing = f"tensor folder not found ({printable(self.tensor_dir)})"
        if os.path.isdir(self.tensor_dir):
            if not inside(self.tensor_dir, self.roots):  # a symbolic link (of it, or of its step folder) leads out
                real = os.path.realpath(self.tensor_dir)
                return (
                    f"tensor folder {printable(self.tensor_dir)} lies outside the dump (at {printable(real)}): not read"
                )
            try:
                return PayloadFolder(self.tensor_dir, self.roots)
            except OSError as exc:
                return f"cannot list the tensor folder {printable(self.tensor_dir)} ({exc.strerror or exc})"
        if not (isinstance(recorded, str) and recorded) or not any(self._payload) or not os.path.isdir(recorded):
            return missing  # no recorded folder here either (the dump was moved)
        real = checked_data_dir(recorded)
        if not real:
            self._problem(
                f"dump_data_dir {recorded!r} is not an msprobe tensor folder (a {TENSOR_DIR} folder beside a "
                "dump.json): it lies outside the dump and was not read"
            )
            return missing
        try:
            folder = PayloadFolder(Path(real), [*self.roots, real_folder(real)])
        except OSError as exc:
            return f"cannot list the tensor folder {printable(recorded)} ({exc.strerror or exc})"
        self.roots.append(real_folder(real))
        self.tensor_dir = Path(recorded)
        return folder

    def _rename_duplicates(self) -> None:
        """Names are unique within one dump.json: a repeated one gets a ``#2``, ``#3`` ... suffix. An op key
        written twice in ``data`` (which ``json.loads`` would silently reduce to its last entry) is said too."""
        ops = self._op_text[0]
        for position in np.flatnonzero(pd.Series(ops, dtype=object).duplicated().to_numpy()).tolist():
            self._problem("op appears twice in dump.json's data; both entries kept", ops[position])
        names = self._names
        repeated = pd.Series(names, dtype=object).duplicated().to_numpy()
        if not repeated.any():
            return
        taken = set(names)
        for row in np.flatnonzero(repeated).tolist():
            name = names[row]
            self._problem("duplicate tensor name in one dump.json; renamed with a '#' suffix", name)
            n = 2
            while f"{name}#{n}" in taken:
                n += 1
            names[row] = f"{name}#{n}"
            taken.add(names[row])
            if self._payload[row] and row not in self._payload_names:
                self._payload_names[row] = name + ".pt"

    def _frame(self, recorded: Any) -> pd.DataFrame:
        """The columns, as a DataFrame for ``make_index``; the reader's own buffers are released."""
        n = len(self._op_of)
        self._rename_duplicates()
        folder = self._payload_folder(recorded)
        prefix = os.path.join(self.tensor_dir, "")
        names = self._names
        files: list[str] = [""] * n
        has_data = np.zeros(n, dtype=bool)
        unavailable = 0
        for row in np.flatnonzero(np.array(self._payload, dtype=np.uint8)).tolist():
            data_name = self._payload_names.get(row) or names[row] + ".pt"
            files[row] = prefix + data_name  # str: a Path per tensor is slow
            if isinstance(folder, str):
                unavailable += 1
                continue
            why = folder.problem(data_name)
            if why:
                where = self.tensor_dir if why.startswith("payload file missing") else files[row]
                self._problem(why, names[row], where)
            else:
                has_data[row] = True
        if unavailable:
            self._problem(f"{folder}: {unavailable} payloads listed in dump.json are unavailable", file=self.tensor_dir)
        op_of = np.array(self._op_of, dtype=np.int64)
        frame = pd.DataFrame({"name": pd.Series(names, dtype=None if names else object)})
        frame["step"] = np.full(n, self.source.step, dtype=np.int64)
        frame["rank"] = np.full(n, self.source.rank, dtype=np.int64)
        frame["order"] = np.array(self._op_order, dtype=np.int64)[op_of]
        frame["call"] = np.array(self._op_call, dtype=np.int64)[op_of]
        for column, values in zip(("op", "api", "op_type", "direction", "module"), self._op_text, strict=True):
            frame[column] = np.fromiter(values, dtype=object, count=len(values))[op_of]
        for column, values in zip(("role", "slot", "dtype", "shape", "checksum"), self._text, strict=True):
            frame[column] = np.fromiter(values, dtype=object, count=n)
            values.clear()
        frame["numel"] = np.array(self._numel, dtype=np.int64)
        for column, numbers in zip(("min", "max", "mean", "norm"), self._stats, strict=True):
            frame[column] = np.array(numbers, dtype=np.float64)
        mn, mx = frame["min"].to_numpy(), frame["max"].to_numpy()
        frame["abs_max"] = np.where(np.isnan(mn) | np.isnan(mx), np.nan, np.maximum(np.abs(mn), np.abs(mx)))
        frame["file"] = np.fromiter(files, dtype=object, count=n)
        frame["has_data"] = has_data
        del files, names
        self._release()
        return frame

    def _release(self) -> None:
        """Drop the per-row buffers (the frame holds copies): a reader's index memory is freed at once."""
        self._names, self._payload_names, self._op_text = [], {}, ([], [], [], [], [])
        self._op_order, self._op_call, self._op_of, self._numel = array("q"), array("q"), array("q"), array("q")
        self._stats = (array("d"), array("d"), array("d"), array("d"))
        self._payload = bytearray()


__all__ = ["DumpSourceReader", "checked_data_dir", "parse_op_key"]
