"""The index of one msprobe ``dump.json``, built column by column while the file is read op by op.

:class:`DumpSourceReader` streams ``dump.json`` (:class:`~nbprec.formats._jsonstream.JsonObjectStream`): one
op entry is decoded at a time and its tensors are appended to per-column arrays, never to one dict per row,
so a ``dump.json`` of 10^6 ops is indexed in bounded memory (the text of one 4 MiB chunk plus the columns).
Op-level values (op, api, call, module, ...) are stored once per op and spread to its tensors at the end.

Payload files are checked when the index is built, from one listing of the tensor folder: a payload is
usable only when it is a regular file whose real path lies inside the dump (or inside a checked
``dump_data_dir``); FIFOs, devices, folders, broken links and links leading out of the dump are problems and
their rows have no data (:mod:`nbprec.formats.msprobe_folder` finds the folder). See
:mod:`nbprec.formats.msprobe` for the index conventions.

A dump.json of the usual layout is read by the C scanner instead of the stream
(:mod:`nbprec.formats.msprobe_scan`), into the same columns, in the same batches.
"""

from __future__ import annotations

import json
import os
from array import array
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np

from nbprec._gc import paused_gc
from nbprec.dump import Problem
from nbprec.errors import DumpFormatError
from nbprec.formats._files import read_regular
from nbprec.formats._jsonstream import JsonObjectStream
from nbprec.formats._layout import DumpSource, read_json_file
from nbprec.formats.msprobe_columns import BATCH, ROLES, SLOTS, TensorColumns
from nbprec.formats.msprobe_folder import TENSOR_DIR, tensor_folder
from nbprec.formats.msprobe_keys import parse_op_key
from nbprec.formats.msprobe_scan import ScannedDump, batch_ends, scan_dump_json

try:
    from nbprec.formats._msprobescan import op_kinds as _op_kinds
except ImportError:  # built without a C compiler: the keys read in Python (_op_key)
    _op_kinds = None

# section of an op entry -> role; rows follow this order (inputs, parameters, outputs, as msprobe's compare CSV)
_SECTIONS = dict(input_args="input", input_kwargs="input", input="input", parameters="parameter", output="output")
_SECTION_RANK = {section: i for i, section in enumerate(_SECTIONS)}
_NO_TYPE = object()
_CALL_KEYS = tuple(tuple(f"{role}.{slot}" for slot in SLOTS) for role in ROLES)  # keys of dump.calls
_SCALARS = (bool, int, float)
_OP_COLUMNS = ("api", "op_type", "direction", "module")


def _repeats(values: list) -> list[int]:
    """Positions of the values that occurred before (every occurrence after the first)."""
    seen: set = set()
    out = []
    for i, value in enumerate(values):
        if value in seen:
            out.append(i)
        seen.add(value)
    return out


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


def _module_path(node: Any) -> str:
    if not isinstance(node, str):
        return ""
    key = parse_op_key(node)
    return key.module if key is not None and key.module is not None else ""


#: A construct.json below this size is parsed whole by the json module (in C: about a fifth of the time of reading
#: it member by member, 0.5 against 2.6 ms for 2,079 entries); a larger one member by member, in bounded memory.
_WHOLE_BELOW = 16 << 20


def _read_object(path: Path) -> Any:
    """:func:`read_json_file`, a top-level object read member by member the fast way (a construct.json holds
    an entry per op), or parsed whole when it is a small file that is plain UTF-8 JSON; anything else (a larger
    file, another kind of file, bad bytes or JSON) goes the member-by-member way, which words the problems."""
    try:
        whole = json.loads(read_regular(path, limit=_WHOLE_BELOW - 1, what="construct.json").decode("utf-8"))
    except (OSError, DumpFormatError, ValueError, RecursionError):  # (UnicodeDecodeError is a ValueError)
        whole = None
    if isinstance(whole, dict):
        return whole
    with JsonObjectStream(path) as stream:
        if stream.first_type() == "dict":
            stream.begin_object()
            content = dict(stream.members())
            stream.end()
            return content
    return read_json_file(path)


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
        self._op_order, self._op_call, self._op_kind = array("q"), array("q"), array("q")
        self._ops: list[str] = []
        self._n_ops = 0
        self._tensors = TensorColumns(self._tensor_problem)
        # an op's API, type, direction and module: one code per distinct combination (a few thousand in a dump
        # of millions of ops), found per API, direction and calling module call
        self._kinds: dict[tuple[str, str, str, str], int] = {}
        self._api_kinds: dict[tuple[str, str, Any], int] = {}
        self._modules: dict[Any, str] = {}  # construct.json parent -> module path
        self._section_orders: dict[tuple, tuple] = {}  # an op's section names -> (section, role) in row order
        self._tensor_types: dict[str, bool] = {}  # an entry's "type" -> whether it is a tensor
        self._strings: dict[str, str] = {}

    def _intern(self, text: str) -> str:
        return self._strings.setdefault(text, text)

    def _problem(self, problem: str, record: str = "", file: Path | str | None = None) -> None:
        self.problems.append(Problem(str(file or self.source.dump_json), problem, record))

    def _tensor_problem(self, problem: str, record: str) -> None:
        self.problems.append(Problem(str(self.source.dump_json), problem, record))

    def _construct(self) -> None:
        path = self.folder / "construct.json"
        if not path.exists():
            return
        try:
            tree = _read_object(path)
        except DumpFormatError as exc:
            self._problem(f"construct.json ignored: {exc.problem}", file=path)
            return
        if not isinstance(tree, dict):
            self._problem("construct.json ignored: expected a JSON object", file=path)
            return
        self.hierarchy = {str(k): v if isinstance(v, str) else None for k, v in tree.items()}

    # -- reading ---------------------------------------------------------------------------------------
    def read(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The index columns of this dump.json's tensors (for ``make_index(typed=True)``) and its meta."""
        path = self.source.dump_json
        self._construct()
        with paused_gc():  # (the scan makes an object or more per tensor, none in a cycle)
            scanned = scan_dump_json(path)
            if scanned is not None:
                self._add_scanned(scanned)
        if scanned is not None:
            return self._frame(scanned.meta.get("dump_data_dir")), scanned.meta
        meta: dict[str, Any] = {}
        has_data_object = False
        with JsonObjectStream(path) as stream, paused_gc():
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
                    self._add_ops(stream)
                    continue
                value = stream.value()
                if key == "data":
                    has_data_object = False
                elif not isinstance(value, (dict, list)):
                    meta[key] = value
            stream.end()
            self._tensors.flush(self._ops)
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

    def _add_ops(self, stream: JsonObjectStream) -> None:
        """Every op entry of ``data`` (the open object), its tensors' columns taken a batch at a time.

        The loop runs once per op of a dump that may hold millions: what an op key says is looked up per
        API and direction (per module call for modules) rather than parsed again, and the usual argument
        list (tensors, None, scalars) is walked here; anything else goes to the general helpers.
        """
        tensors = self._tensors
        entries = tensors.entries
        add_entry, add_op_of, add_role, add_slot = (
            entries.append,
            tensors.op_of.append,
            tensors.roles.append,
            (tensors.slots.append),
        )
        ops = self._ops
        add_key, add_order, add_call, add_kind = (
            ops.append, self._op_order.append, self._op_call.append, self._op_kind.append
        )  # fmt: skip
        sections_get = self._section_orders.get
        tensor_types, slots, n_slots = self._tensor_types, SLOTS, len(SLOTS)
        calls_setdefault, call_keys = self.calls.setdefault, _CALL_KEYS
        op_key = self._op_key
        order = -1
        for key, body in stream.members():
            order += 1  # the op's position in data, counting entries that are skipped
            kind, call, grads = op_key(key)
            if type(body) is not dict:
                self._problem(f"op entry is a {type(body).__name__}, expected an object; skipped", key)
                continue
            op_index = len(ops)
            add_key(key)
            add_order(order)
            add_call(call)
            add_kind(kind)
            if grads:
                self._add_gradients(key, op_index, body)
                continue
            sections = sections_get(tuple(body))
            if sections is None:
                sections = self._sections(key, body)
            for section, role in sections:
                value = body[section]
                if type(value) is not list:
                    self._add_leaves(key, op_index, role, _leaves(value, "", []))
                    continue
                for i, item in enumerate(value):  # the usual argument list: tensors, None and scalars
                    if type(item) is not dict:
                        if type(item) is list:
                            self._add_leaves(key, op_index, role, _leaves(item, str(i), []))
                        else:
                            self.non_tensor += 1
                        continue
                    kind_of = item.get("type", _NO_TYPE)
                    if type(kind_of) is str:
                        tensor = tensor_types.get(kind_of)
                        if tensor is None:
                            tensor = tensor_types[kind_of] = kind_of.endswith(("Tensor", "Parameter", "ndarray"))
                    elif kind_of is _NO_TYPE and not ("dtype" in item and "shape" in item):
                        self._add_leaves(key, op_index, role, _leaves(item, str(i), []))  # a dict of arguments
                        continue
                    else:
                        tensor = "dtype" in item and "shape" in item
                    if tensor:
                        add_entry(item)
                        add_op_of(op_index)
                        add_role(role)
                        add_slot(slots[i] if i < n_slots else str(i))
                    elif i < n_slots:  # a scalar argument: how the op was called (dropout p, training ...)
                        self.non_tensor += 1
                        value = item.get("value")
                        if type(value) in _SCALARS:
                            calls_setdefault(key, {})[call_keys[role][i]] = value
                    else:
                        self._non_tensor(key, role, str(i), item)
            if len(entries) >= BATCH:
                tensors.flush(ops)
        self._n_ops = order + 1

    def _add_scanned(self, scanned: ScannedDump) -> None:
        """The ops and tensors of a dump.json the C scanner read (:func:`scan_dump_json`), added as
        :meth:`_add_ops` adds them: ops in order, the tensors' columns in the same batches, so that the same
        problems come in the same order."""
        ops_of, roles, slots, *rest = scanned.fields
        fields = (ops_of, roles, list(map(self._strings.setdefault, slots, slots)), *rest)
        tensors, per_op, keys = self._tensors, scanned.per_op, scanned.keys
        start = first = 0
        for end in batch_ends(scanned, BATCH):
            kinds, calls, _ = self._op_kinds(keys[first:end])  # (their problems said before the batch's)
            self._ops.extend(keys[first:end])
            self._op_order.extend(range(first, end))
            self._op_call.frombytes(calls)
            self._op_kind.frombytes(kinds)
            stop = start + sum(per_op[first:end])
            if stop > start:
                tensors.extend(self._ops, fields, slice(start, stop))
            start, first = stop, end
        for op, role, slot, value, _rank in scanned.calls:
            name = _CALL_KEYS[role][slot] if type(slot) is int else self._intern(f"{ROLES[role]}.{slot}")
            self.calls.setdefault(scanned.keys[op], {})[name] = value
        self.non_tensor += scanned.non_tensor
        self._n_ops = len(scanned.keys)

    def _op_kinds(self, keys: list[str]) -> tuple[bytes, bytes, bytes]:
        """:meth:`_op_key` of each key: kind codes, call indices (bytes of int64), gradient flags (bytes); in C
        (nbprec/formats/_msprobescan_keys.c, on this reader's caches) but for the keys it leaves to _op_key."""
        if _op_kinds is not None:
            caches = self.hierarchy, self._api_kinds, self._kinds, self._modules
            return _op_kinds(keys, *caches, _module_path, self._op_key)
        kinds, calls, grads = zip(*map(self._op_key, keys), strict=True) if keys else ((), (), ())
        return array("q", kinds).tobytes(), array("q", calls).tobytes(), bytes(grads)

    def _op_key(self, key: str) -> tuple[int, int, bool]:
        """(op-kind code, call index, parameter gradients?) of an op key. The usual key, an API call
        (``{api}.{call}.{direction}``), is looked up per API, direction and calling module call."""
        head, _, last = key.rpartition(".")
        api, dot, call = head.rpartition(".")
        if (last == "forward" or last == "backward") and dot and call.isdigit() and len(call) <= 18 and call.isascii():
            parent = self.hierarchy.get(key)
            kind = self._api_kinds.get((api, last, parent))
            if kind is None:
                kind = self._api_kind(api, last, parent)
            return kind, int(call), False
        return self._other_kind(key)

    def _api_kind(self, api: str, direction: str, parent: Any) -> int:
        """The op-kind code of an API call of ``api`` in ``direction`` called from the module call ``parent``."""
        module = self._modules.get(parent)
        if module is None:
            module = self._modules[parent] = _module_path(parent)
        kind = self._kind(api, api.partition(".")[2], direction, module)
        self._api_kinds[(api, direction, parent)] = kind
        return kind

    def _other_kind(self, key: str) -> tuple[int, int, bool]:
        """(op-kind code, call index, parameter gradients?) of a key that is not an API call: a module call, or
        a name that follows no msprobe naming (a problem; its API and type are the key itself)."""
        info = parse_op_key(key)
        if info is None:
            self._problem("op name does not follow msprobe's naming; API, call and direction unknown", key)
            return self._kind(key, key, "", _module_path(self.hierarchy.get(key))), -1, False
        module = info.module if info.module is not None else _module_path(self.hierarchy.get(key))
        return self._kind(info.api, info.op_type, info.direction, module), info.call, info.grads

    def _kind(self, api: str, op_type: str, direction: str, module: str) -> int:
        """The code of an (API, op type, direction, module) combination, added when new."""
        combination = (api, op_type, direction, module)
        kind = self._kinds.get(combination)
        if kind is None:
            kind = self._kinds[combination] = len(self._kinds)
        return kind

    def _add_gradients(self, key: str, op_index: int, body: dict) -> None:
        """A ``parameters_grad`` entry: parameter name -> gradient (or a one-element list of it)."""
        for param, value in body.items():
            if type(value) is list and len(value) == 1:
                value = value[0]
            self._add_leaves(key, op_index, 3, _leaves(value, str(param), []))

    def _add_leaves(self, key: str, op_index: int, role: int, leaves: list) -> None:
        """The leaves of a nested argument: tensors to the columns, the others counted (and kept in calls)."""
        intern = self._intern
        for slot, leaf in leaves:
            if _is_tensor_entry(leaf):
                self._tensors.add(leaf, op_index, role, intern(slot or "0"))
            else:
                self._non_tensor(key, role, slot or "0", leaf)

    def _non_tensor(self, key: str, role: int, slot: str, entry: Any) -> None:
        self.non_tensor += 1
        value = entry.get("value") if isinstance(entry, dict) else None
        if isinstance(value, (bool, int, float)):  # how the op was called (dropout p, training ...)
            self.calls.setdefault(key, {})[self._intern(f"{ROLES[role]}.{slot}")] = value

    def _sections(self, key: str, body: dict) -> tuple:
        """``(section, role code)`` of an op entry's sections in row order (inputs, parameters, outputs);
        unknown sections are problems. Cached per tuple of section names when all are known."""
        out, unknown = [], False
        for section in sorted(body, key=lambda name: _SECTION_RANK.get(name, len(_SECTIONS))):
            role = _SECTIONS.get(section)
            if role is None:
                self._problem(f"unknown section {section!r} in op entry; skipped", key)
                unknown = True
                continue
            out.append((section, ROLES.index(role)))
        if not unknown:
            self._section_orders[tuple(body)] = tuple(out)
        return tuple(out)

    # -- the payloads and the columns ------------------------------------------------------------------
    def _rename_duplicates(self) -> None:
        """Names are unique within one dump.json: a repeated one gets a ``#2``, ``#3`` ... suffix. An op key
        written twice in ``data`` (which ``json.loads`` would silently reduce to its last entry) is said too."""
        ops = self._ops
        if len(set(ops)) < len(ops):
            for position in _repeats(ops):
                self._problem("op appears twice in dump.json's data; both entries kept", ops[position])
        tensors = self._tensors
        names = tensors.names
        if len(set(names)) == len(names):
            return
        taken = set(names)
        for row in _repeats(names):
            name = names[row]
            self._problem("duplicate tensor name in one dump.json; renamed with a '#' suffix", name)
            n = 2
            while f"{name}#{n}" in taken:
                n += 1
            names[row] = f"{name}#{n}"
            taken.add(names[row])
            if tensors.payload[row] and row not in tensors.payload_names:
                tensors.payload_names[row] = name + ".pt"

    def _frame(self, recorded: Any) -> dict[str, Any]:
        """The index columns (numpy arrays with their index types, for ``make_index(typed=True)``); the
        reader's own buffers are released."""
        tensors = self._tensors
        n = len(tensors)
        self._rename_duplicates()
        named_any = any(tensors.payload)
        folder, self.tensor_dir = tensor_folder(self.tensor_dir, recorded, self.roots, named_any, self._problem)
        prefix = os.path.join(self.tensor_dir, "")
        names = np.array(tensors.names, dtype=object) if n else np.empty(0, dtype=object)
        rows = np.flatnonzero(np.frombuffer(tensors.payload, dtype=np.uint8)) if n else np.empty(0, np.int64)
        exceptions = tensors.payload_names
        if exceptions:
            data_names = [exceptions.get(row) or names[row] + ".pt" for row in rows.tolist()]
        else:
            data_names = list(map(str.__add__, names[rows].tolist(), repeat(".pt")))
        files = np.full(n, "", dtype=object)
        files[rows] = list(map(str.__add__, repeat(prefix), data_names))  # str: a Path per tensor is slow
        has_data = np.zeros(n, dtype=bool)
        if isinstance(folder, str):
            if len(rows):
                why = f"{folder}: {len(rows)} payloads listed in dump.json are unavailable"
                self._problem(why, file=self.tensor_dir)
        else:
            found = np.fromiter(map(folder.regular.__contains__, data_names), dtype=bool, count=len(data_names))
            has_data[rows[found]] = True
            others = np.array(data_names, dtype=object)[~found].tolist()
            for row, name in zip(rows[~found].tolist(), others, strict=True):
                why = folder.problem(name)
                if why:
                    where = self.tensor_dir if why.startswith("payload file missing") else files[row]
                    self._problem(why, names[row], where)
                else:
                    has_data[row] = True
        del data_names
        op_of = np.frombuffer(tensors.op_of, dtype=np.int64) if n else np.empty(0, np.int64)
        frame: dict[str, Any] = {"name": names}
        frame["step"] = np.full(n, self.source.step, dtype=np.int64)
        frame["rank"] = np.full(n, self.source.rank, dtype=np.int64)
        frame["order"] = np.frombuffer(self._op_order, dtype=np.int64)[op_of] if n else op_of
        frame["call"] = np.frombuffer(self._op_call, dtype=np.int64)[op_of] if n else op_of
        frame["op"] = np.fromiter(self._ops, dtype=object, count=len(self._ops))[op_of]
        kind_of = np.frombuffer(self._op_kind, dtype=np.int64)[op_of] if n else op_of
        kinds = list(self._kinds)
        for i, column in enumerate(_OP_COLUMNS):
            table = np.empty(len(kinds), dtype=object)
            table[:] = [kind[i] for kind in kinds]
            frame[column] = table[kind_of]
        frame.update(tensors.columns())
        mn, mx = frame["min"], frame["max"]
        frame["abs_max"] = np.where(np.isnan(mn) | np.isnan(mx), np.nan, np.maximum(np.abs(mn), np.abs(mx)))
        frame["file"] = files
        frame["has_data"] = has_data
        del files, names
        self._release()
        return frame

    def _release(self) -> None:
        """Drop the per-row buffers (the frame holds copies): a reader's index memory is freed at once."""
        self._ops = []
        self._op_order, self._op_call, self._op_kind = array("q"), array("q"), array("q")
        self._tensors = TensorColumns(self._tensor_problem)


__all__ = ["DumpSourceReader"]
