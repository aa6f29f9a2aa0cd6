"""Turn a parsed GE ``ModelDef`` (the plain structure of :mod:`nbprec.graph.ge_parse`) into a :class:`GeModel`.

The schema is ge_ir.proto: ``ModelDef{name, version, custom_version, graph*, attr}``, ``GraphDef{name,
input*, output*, op*, attr}``, ``OpDef{name, type, input*, attr, id, input_desc*, output_desc*,
subgraph_name*, ...}``, ``TensorDescriptor{name, dtype, shape{dim*}, layout, attr, size, ...}`` and
``AttrDef`` with one of ``s i f b bt list func td t g list_list_int dt list_list_float``. Values the JSON
form writes as strings (64-bit integers, ``%g`` floats) are converted back. Nothing is dropped silently:
what cannot be resolved is a problem of the model, naming the op.
"""

from __future__ import annotations

import functools
from typing import Any

from nbprec.graph.ge_data import GeGraph, GeInput, GeModel, GeOp, GeTensorDesc, ge_dtype
from nbprec.graph.ge_parse import GeGraphError

#: Subgraphs and named attributes nested inside attributes deeper than this are not expanded (a problem).
MAX_NESTING = 32
_LIST_FIELDS = {  # ListValue.val_type -> the field holding the values
    "VT_LIST_NONE": "",
    "VT_LIST_STRING": "s",
    "VT_LIST_INT": "i",
    "VT_LIST_FLOAT": "f",
    "VT_LIST_BOOL": "b",
    "VT_LIST_BYTES": "bt",
    "VT_LIST_TENSOR_DESC": "td",
    "VT_LIST_TENSOR": "t",
    "VT_LIST_GRAPH": "g",
    "VT_LIST_NAMED_ATTRS": "na",
    "VT_LIST_DATA_TYPE": "dt",
}
_LIST_BY_NUMBER = dict(enumerate(_LIST_FIELDS.values()))
_LIST_ORDER = ("s", "i", "f", "b", "bt", "td", "t", "g", "na", "dt")
_ATTR_ONEOF = ("s", "i", "f", "b", "bt", "list", "func", "td", "t", "g", "list_list_int", "dt", "list_list_float")
_OP_FIELDS = {"name", "type", "input", "attr", "id", "input_desc", "output_desc", "subgraph_name"}
_OP_REPEATED = {
    "input_name",
    "src_name",
    "src_index",
    "dst_name",
    "dst_index",
    "input_i",
    "output_i",
    "workspace",
    "workspace_bytes",
    "is_input_const",
}
_DESC_FIELDS = {"name", "dtype", "shape", "layout", "attr"}
_TRUE = {"true", "t", "1", "True"}
_FALSE = {"false", "f", "0", "False", ""}


def _last(msg: dict[str, list[Any]], name: str, default: Any = None) -> Any:
    values = msg.get(name)
    return values[-1] if values else default


#: Where a value is, as problems name it: a text, or the parts of one made into a text only when a problem is
#: told (:func:`_place`), not for each of the thousands of values that have none.
Place = str | tuple


def _place(where: Place) -> str:
    """The text of ``where``: ``(op's place, attribute key)`` or ``(op's place, field, index)``."""
    if isinstance(where, str):
        return where
    if len(where) == 2:
        return f"{_place(where[0])}, attr {where[1]!r}"
    return f"{_place(where[0])} {where[1]} {where[2]}"


def _int(value: Any) -> int:
    if isinstance(value, str):
        value = value.strip()
        return int(value, 16) if value.lower().startswith(("0x", "-0x")) else int(float(value))
    return int(value)


def _float(value: Any) -> float:
    try:
        return float(value)
    except ValueError:  # "1.5f" as C and protobuf text write it
        if isinstance(value, str) and value.strip()[-1:] in ("f", "F") and value.strip()[-2:-1].isdigit():
            return float(value.strip()[:-1])
        raise


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        if value in _TRUE or value in _FALSE:
            return value in _TRUE
        raise ValueError(f"not a boolean: {value!r}")
    return bool(value)


def _plain(value: Any, depth: int = 0) -> Any:
    """An unknown message as a plain dict (one-element lists unwrapped)."""
    if not isinstance(value, dict):
        return value
    if depth > MAX_NESTING:
        return "<nested too deeply>"
    return {k: _plain(v[0], depth + 1) if len(v) == 1 else [_plain(x, depth + 1) for x in v] for k, v in value.items()}


def _dtype(value: Any) -> str:
    """:func:`ge_dtype`, remembered for the few names a graph's descriptors repeat."""
    try:
        return _dtype_of(value)
    except TypeError:  # unhashable: as written
        return ge_dtype(value)


@functools.lru_cache(maxsize=256, typed=True)  # typed: True is not the dtype number 1
def _dtype_of(value: Any) -> str:
    return ge_dtype(value)


class _Converter:
    """One conversion: collects the graphs (attribute subgraphs included) and the problems."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.graphs: list[GeGraph | None] = []

    # -- values --------------------------------------------------------------------------------------
    def _typed(self, convert: Any, value: Any, where: Place) -> Any:
        try:
            return convert(value)
        except (TypeError, ValueError, OverflowError):
            self.problems.append(
                f"{_place(where)}: cannot read {value!r} as {convert.__name__.strip('_')}; kept as written"
            )
            return value

    def attrs(self, msg: dict[str, list[Any]], where: Place, op: str, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        entries = msg.get("attr")
        if not entries:
            return out
        for entry in entries:
            if not isinstance(entry, dict):
                self.problems.append(f"{_place(where)}: an attribute entry is not a message ({entry!r}); left out")
                continue
            keys, values = entry.get("key"), entry.get("value")  # (each field's last value: _last, inline)
            key = keys[-1] if keys else ""
            if type(key) is not str:
                key = str(key)
            value = values[-1] if values else {}
            out[key] = self.value(value, (where, key), op, key, depth) if isinstance(value, dict) else value
        return out

    def value(self, av: dict[str, list[Any]], where: Place, op: str, key: str, depth: int) -> Any:
        if len(av) == 1:  # the usual AttrDef: one field set
            kind, values = next(iter(av.items()))
            if kind not in _ATTR_ONEOF or not values:
                return None
        else:
            kind = next((k for k in reversed(av) if k in _ATTR_ONEOF and av[k]), None)
            if kind is None:
                return None
            values = av[kind]
        raw = values[-1]
        if kind == "s" or kind == "bt":
            return raw if type(raw) is str else str(raw)
        if kind == "i" and type(raw) is int:
            return raw
        if kind == "i":
            return self._typed(_int, raw, where)
        if kind == "f":
            return self._typed(_float, raw, where)
        if kind == "b":
            return self._typed(_bool, raw, where)
        if kind == "dt":
            return ge_dtype(raw)
        if not isinstance(raw, dict):
            self.problems.append(f"{_place(where)}: {kind} should be a message, found {raw!r}; kept as written")
            return raw
        if depth >= MAX_NESTING:
            self.problems.append(f"{_place(where)}: nested more than {MAX_NESTING} levels deep; not expanded")
            return "<nested too deeply>"
        if kind == "list":
            return self.list_value(raw, where, op, key, depth + 1)
        if kind == "list_list_int":
            return [[self._typed(_int, x, where) for x in r.get("list_i", ())] for r in raw.get("list_list_i", ())]
        if kind == "list_list_float":
            return [[self._typed(_float, x, where) for x in r.get("list_f", ())] for r in raw.get("list_list_f", ())]
        return self.message(kind, raw, where, op, key, depth + 1)

    def message(self, kind: str, raw: dict[str, list[Any]], where: Place, op: str, key: str, depth: int) -> Any:
        if kind == "td":
            return self.desc_dict(self.desc(raw, where, op, depth))
        if kind == "t":
            desc = _last(raw, "desc")  # the payload is not kept, only whether there was one
            return {
                "desc": self.desc_dict(self.desc(desc, where, op, depth)) if isinstance(desc, dict) else None,
                "has_data": bool(_last(raw, "data", "")),
            }
        if kind in ("func", "na"):
            return {"name": str(_last(raw, "name", "")), "attrs": self.attrs(raw, where, op, depth)}
        return self.graph(raw, parent_op=op, parent_attr=key, depth=depth)  # "g": the graph's name

    def list_value(self, lv: dict[str, list[Any]], where: Place, op: str, key: str, depth: int) -> list[Any]:
        vt = _last(lv, "val_type")
        name = _LIST_BY_NUMBER.get(vt) if isinstance(vt, int) else _LIST_FIELDS.get(str(vt)) if vt else None
        if not name or not lv.get(name):  # no or wrong val_type: the field that has values
            name = next((k for k in _LIST_ORDER if lv.get(k)), "")
        items = lv.get(name, [])
        if name in ("s", "bt"):
            return [str(x) for x in items]
        if name in ("i", "f", "b", "dt"):
            if name == "i" and all(type(x) is int for x in items):  # the common case, already right
                return list(items)
            convert = {"i": _int, "f": _float, "b": _bool, "dt": ge_dtype}[name]
            return [self._typed(convert, x, where) for x in items]
        return [self.message(name, x, where, op, key, depth) if isinstance(x, dict) else x for x in items]

    # -- descriptors, ops, graphs ---------------------------------------------------------------------------
    def desc(self, raw: dict[str, list[Any]], where: Place, op: str, depth: int) -> GeTensorDesc:
        get = raw.get  # (each field's last value: _last, inline, a thousand descriptors a graph)
        shape_msg, name, dtype, layout = get("shape"), get("name"), get("dtype"), get("layout")
        shape_msg = shape_msg[-1] if shape_msg else None
        dims = shape_msg.get("dim", ()) if isinstance(shape_msg, dict) else ()
        extra = (
            {}
            if raw.keys() <= _DESC_FIELDS
            else {k: _plain(v[-1]) for k, v in raw.items() if k not in _DESC_FIELDS and v}
        )
        return GeTensorDesc(
            name=str(name[-1]) if name else "",
            dtype=_dtype(dtype[-1] if dtype else None),
            layout=str(layout[-1]) if layout else "",
            shape=tuple(dims)
            if all(type(d) is int for d in dims)
            else tuple(self._typed(_int, d, where) for d in dims),
            attrs=self.attrs(raw, where, op, depth),
            extra=extra,
        )

    def descs(
        self, raw: dict[str, list[Any]], field: str, where: Place, op: str, depth: int
    ) -> tuple[GeTensorDesc, ...]:
        return tuple(self.desc(d, (where, field, i), op, depth) for i, d in _msgs(raw, field))

    @staticmethod
    def desc_dict(desc: GeTensorDesc) -> dict[str, Any]:
        return {
            "name": desc.name,
            "dtype": desc.dtype,
            "layout": desc.layout,
            "shape": list(desc.shape),
            "attrs": desc.attrs,
        }

    def op(self, raw: dict[str, list[Any]], graph: str, position: int, depth: int) -> GeOp:
        names, types, op_ids = raw.get("name"), raw.get("type"), raw.get("id")  # (_last, inline)
        name = str(names[-1]) if names else ""
        if not name:
            name = f"<op {position}>"
            self.problems.append(f"op {position} of graph {graph!r} has no name; called {name!r}")
        where = f"op {name!r}"
        inputs = []
        for slot, text in enumerate(raw.get("input", ())):
            text = str(text)
            src, sep, idx = text.rpartition(":")
            digits = idx[1:] if idx[:1] == "-" else idx
            index = int(idx) if sep and src and digits.isascii() and digits.isdigit() else None
            if text and (index is None or index < -1):
                self.problems.append(f"{where} input {slot} {text!r}: not of the form 'op:index'; not an edge")
                index = None
            inputs.append(GeInput(src if index is not None else text, index))
        extra = {}
        for k, v in raw.items():
            if k not in _OP_FIELDS and v:
                extra[k] = [_plain(x) for x in v] if k in _OP_REPEATED else _plain(v[-1])
        op_id = op_ids[-1] if op_ids else None
        return GeOp(
            name=name,
            type=str(types[-1]) if types else "",
            id=None if op_id is None else op_id if type(op_id) is int else self._typed(_int, op_id, f"{where}, id"),
            inputs=tuple(inputs),
            attrs=self.attrs(raw, where, name, depth),
            input_descs=self.descs(raw, "input_desc", where, name, depth),
            output_descs=self.descs(raw, "output_desc", where, name, depth),
            graph=graph,
            subgraph_names=tuple(str(s) for s in raw.get("subgraph_name", ())),
            extra=extra,
        )

    def graph(self, raw: dict[str, list[Any]], *, parent_op: str = "", parent_attr: str = "", depth: int = 0) -> str:
        """Convert one GraphDef (and the subgraphs inside its attributes); returns its name."""
        slot = len(self.graphs)
        self.graphs.append(None)  # the graph comes before the subgraphs found inside it
        name = str(_last(raw, "name", "")) or f"<graph {slot}>"
        ops = tuple(self.op(op, name, i, depth) for i, op in _msgs(raw, "op"))
        self.graphs[slot] = GeGraph(
            name=name,
            ops=ops,
            inputs=tuple(str(x) for x in raw.get("input", ())),
            outputs=tuple(str(x) for x in raw.get("output", ())),
            attrs=self.attrs(raw, f"graph {name!r}", "", depth),
            parent_op=parent_op,
            parent_attr=parent_attr,
        )
        return name


def _msgs(raw: dict[str, list[Any]], name: str) -> list[tuple[int, dict[str, list[Any]]]]:
    return [(i, m) for i, m in enumerate(raw.get(name, ())) if isinstance(m, dict)]


def _link_subgraphs(graphs: list[GeGraph]) -> list[GeGraph]:
    owner = {}
    for g in graphs:
        for op in g.ops:
            for sub in op.subgraph_names:
                owner.setdefault(sub, op.name)
    return [
        GeGraph(g.name, g.ops, g.inputs, g.outputs, g.attrs, parent_op=owner[g.name])
        if not g.parent_op and g.name in owner
        else g
        for g in graphs
    ]


def _check(graphs: list[GeGraph], problems: list[str]) -> None:
    everywhere = {op.name for g in graphs for op in g.ops}
    names = [g.name for g in graphs]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"graph name {name!r} appears {names.count(name)} times; lookups by name give the first")
    for g in graphs:
        seen: dict[str, int] = {}
        for op in g.ops:
            seen[op.name] = seen.get(op.name, 0) + 1
        for name, count in seen.items():
            if count > 1:
                problems.append(f"op {name!r} appears {count} times in graph {g.name!r}; only the first is used")
        for op in g.ops:
            for slot, inp in enumerate(op.inputs):
                if inp.index is not None and inp.op not in everywhere:
                    problems.append(
                        f"op {op.name!r} (graph {g.name!r}) input {slot} {str(inp)!r}: no op named {inp.op!r}"
                    )
            for sub in op.subgraph_names:
                if sub not in names:
                    problems.append(
                        f"op {op.name!r} (graph {g.name!r}) names subgraph {sub!r}, which is not in the file"
                    )


def convert_model(raw: dict[str, list[Any]], *, path: str = "", fmt: str = "") -> GeModel:
    """The :class:`GeModel` of a parsed ``ModelDef`` (or a single ``GraphDef``).

    Raises
    ------
    GeGraphError
        When the message is neither (no ``graph`` and no ``op`` field).
    """
    conv = _Converter()
    if "graph" in raw:
        model_name = str(_last(raw, "name", ""))
        for i, g in enumerate(raw["graph"]):
            if isinstance(g, dict):
                conv.graph(g)
            else:
                conv.problems.append(f"graph entry {i} is not a message ({g!r}); left out")
        attrs = conv.attrs(raw, "model", "", 0)
        extra = {k: _plain(v[-1]) for k, v in raw.items() if k not in ("name", "graph", "attr") and v}
    elif "op" in raw:  # a single GraphDef
        model_name = conv.graph(raw)
        attrs, extra = {}, {}
    else:
        fields = sorted(raw)[:10]
        raise GeGraphError(
            f"{path}: not a GE graph: expected a ModelDef (with 'graph') or a GraphDef (with 'op'), "
            f"found fields {fields}"
        )
    graphs = _link_subgraphs([g for g in conv.graphs if g is not None])
    if not graphs:
        raise GeGraphError(f"{path}: the model holds no graph")
    _check(graphs, conv.problems)
    return GeModel(
        name=model_name, graphs=tuple(graphs), attrs=attrs, problems=conv.problems, path=path, format=fmt, extra=extra
    )
