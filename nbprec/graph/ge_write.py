"""Write GE graph dumps (``ge.proto.ModelDef``) as protobuf text or as Ascend's JSON form.

For tests and tutorials that need realistic graphs, and to save a :class:`~nbprec.graph.ge_data.GeModel`
back. Text follows protobuf's printer: fields in schema order, attribute maps as repeated
``attr { key: ... value { ... } }`` entries sorted by key, strings C-escaped with non-ASCII bytes as octal
(``\\303\\251``). JSON follows Ascend's converter: field names as in the schema, maps as lists of
``{"key", "value"}``, enums by name, singular ``s`` values C-escaped (repeated ones raw).

Examples
--------
>>> ops = [
...     {"name": "data", "type": "Data", "output_descs": [tensor_desc("float16", (1, 16))]},
...     {"name": "fc/MatMul", "type": "MatMulV2", "inputs": ["data:0"],
...      "pass_name": "MatMulBiasAddFusionPass", "original_ops": ["fc/MatMul", "fc/BiasAdd"],
...      "output_descs": [tensor_desc("float16", (1, 1, 16, 16), "FRACTAL_NZ", origin_name="fc/BiasAdd",
...                                   origin_output_index=0, origin_format="ND", origin_shape=(1, 16))]},
... ]
>>> write_ge_graph("ge_proto_00000001_Build.txt", ops)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nbprec.graph.ge_data import GE_DTYPES, GeGraph, GeInput, GeModel, GeOp, GeTensorDesc, ge_dtype
from nbprec.graph.ge_parse import GeGraphError

FORMATS = ("text", "json")


class _Enum(str):
    """An enum value: written bare in text (``DT_FLOAT16``), as a string in JSON."""


# A message is a list of (field, value, repeated); a value is a scalar, an _Enum or a message.
Message = list[tuple[str, Any, bool]]


def _escape_table() -> list[str]:
    table = [chr(b) if 0x20 <= b < 0x7F else f"\\{b:03o}" for b in range(256)]
    for char, escaped in (('"', '\\"'), ("'", "\\'"), ("\\", "\\\\"), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t")):
        table[ord(char)] = escaped
    return table


def c_escape(value: str | bytes, table: Sequence[str] | None = None) -> str:
    """C-escape a string's UTF-8 bytes as protobuf does (quotes, backslash, ``\\n``, octal for the rest).

    Examples
    --------
    >>> c_escape('caf\\u00e9 "x"\\n')
    'caf\\\\303\\\\251 \\\\"x\\\\"\\\\n'
    """
    if isinstance(value, str):
        if value.isascii() and value.isprintable() and not any(c in value for c in "\"'\\"):
            return value
        value = value.encode("utf-8", "surrogatepass")
    table = table or _escape_table()
    return "".join(table[b] for b in value)


def tensor_desc(
    dtype: str = "float16",
    shape: Iterable[int] = (),
    layout: str = "ND",
    *,
    name: str = "",
    origin_name: str | None = None,
    origin_output_index: int | None = None,
    origin_format: str | None = None,
    origin_shape: Iterable[int] | None = None,
    attrs: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A tensor descriptor for :func:`write_ge_graph`, with the origin records GE writes on fused outputs.

    ``origin_name`` / ``origin_output_index`` become ``_datadump_origin_name`` /
    ``_datadump_origin_output_index``; ``origin_format`` and ``origin_shape`` the attrs of those names.
    """
    out = dict(attrs or {})
    for key, value in (
        ("_datadump_origin_name", origin_name),
        ("_datadump_origin_output_index", origin_output_index),
        ("origin_format", origin_format),
        ("origin_shape", None if origin_shape is None else [int(d) for d in origin_shape]),
    ):
        if value is not None:
            out[key] = value
    return {
        "name": name,
        "dtype": dtype,
        "layout": layout,
        "shape": [int(d) for d in shape],
        "attrs": out,
        "extra": dict(extra or {}),
    }


def _all_of(kinds: Any, items: Iterable[Any]) -> bool:
    """Whether every item is of ``kinds`` (a bool counts as a bool only, not as an int)."""
    return all(isinstance(x, kinds) and (kinds is bool or not isinstance(x, bool)) for x in items)


def _is_desc(value: Any) -> bool:
    """A tensor descriptor as attribute values hold them (``td``): a dict with ``dtype``."""
    return (
        isinstance(value, Mapping) and "dtype" in value and set(value) <= {"name", "dtype", "layout", "shape", "attrs"}
    )


def _is_tensor(value: Any) -> bool:
    """A tensor as attribute values hold them (``t``): ``{"desc": ..., "has_data": ...}``."""
    return isinstance(value, Mapping) and "desc" in value and set(value) <= {"desc", "has_data"}


class _Builder:
    """Messages of one write: knows the dtype names and, for a model, which attributes hold subgraphs."""

    def __init__(self, attr_graphs: Mapping[tuple[str, str], list[GeGraph]] | None = None) -> None:
        self.dt_names = {ge_dtype(n): n for n in reversed(GE_DTYPES.values())}
        self.attr_graphs = attr_graphs or {}

    def dtype(self, value: Any) -> _Enum:
        if isinstance(value, int) and not isinstance(value, bool):
            return _Enum(GE_DTYPES.get(value, "DT_UNDEFINED"))
        text = str(value)
        if text.startswith("DT_"):
            return _Enum(text)
        canon = ge_dtype(text)
        return _Enum(self.dt_names.get(canon, "DT_" + canon.upper()))

    # -- attributes ---------------------------------------------------------------------------------
    def attrs(self, attrs: Mapping[str, Any], where: str, owner: str | None = None) -> Message:
        """Attribute entries; ``owner`` (an op name, "" for graph and model) finds subgraphs held by them."""
        out: Message = []
        for key in sorted(attrs):
            graphs = self.attr_graphs.get((owner, key)) if owner is not None else None
            value = self.graph_value(attrs[key], graphs) if graphs else self.value(attrs[key], f"{where} attr {key!r}")
            out.append(("attr", [("key", str(key), False), ("value", value, False)], True))
        return out

    def graph_value(self, value: Any, graphs: list[GeGraph]) -> Message:
        msgs = [self.graph(g) for g in graphs]
        if isinstance(value, list):
            return [("list", [*(("g", m, True) for m in msgs), ("val_type", _Enum("VT_LIST_GRAPH"), False)], False)]
        return [("g", msgs[0], False)]

    def value(self, value: Any, where: str) -> Message:
        if isinstance(value, bool):
            return [("b", value, False)]
        if isinstance(value, int):
            return [("i", value, False)]
        if isinstance(value, float):
            return [("f", value, False)]
        if isinstance(value, (str, bytes)):
            return [("s", value, False)]
        if isinstance(value, Mapping) and set(value) <= {"name", "attrs"}:
            return [("func", self.named(value, where), False)]
        if _is_desc(value):
            return [("td", self.desc(value, where), False)]
        if _is_tensor(value):
            return [("t", self.tensor(value, where), False)]
        if isinstance(value, (list, tuple)) and value and all(isinstance(x, (list, tuple)) for x in value):
            return self.list_list(value, where)
        if isinstance(value, (list, tuple)):
            return [("list", self.list_value(list(value), where), False)]
        if value is None:
            return []
        raise GeGraphError(f"{where}: cannot write a {type(value).__name__} as a GE attribute value ({value!r:.60})")

    def named(self, value: Mapping[str, Any], where: str) -> Message:
        return [("name", str(value.get("name", "")), False), *self.attrs(value.get("attrs") or {}, where)]

    @staticmethod
    def list_list(rows: Iterable[Iterable[Any]], where: str) -> Message:
        rows = [list(r) for r in rows]
        if all(_all_of(int, r) for r in rows):
            return [("list_list_int", [("list_list_i", [("list_i", v, True) for v in r], True) for r in rows], False)]
        if all(_all_of((int, float), r) for r in rows):
            msg = [("list_list_f", [("list_f", float(v), True) for v in r], True) for r in rows]
            return [("list_list_float", msg, False)]
        raise GeGraphError(f"{where}: a list of lists must hold numbers only")

    def list_value(self, items: list[Any], where: str) -> Message:
        all_of = _all_of
        if not items:
            return [("val_type", _Enum("VT_LIST_NONE"), False)]
        if all_of(bool, items):
            field, vt = "b", "VT_LIST_BOOL"
        elif all_of(int, items):
            field, vt = "i", "VT_LIST_INT"
        elif all_of((int, float), items):
            field, vt, items = "f", "VT_LIST_FLOAT", [float(x) for x in items]
        elif all_of((str, bytes), items):
            field, vt = "s", "VT_LIST_STRING"
        elif all(isinstance(x, Mapping) and set(x) <= {"name", "attrs"} for x in items):
            return [
                *(("na", self.named(x, where), True) for x in items),
                ("val_type", _Enum("VT_LIST_NAMED_ATTRS"), False),
            ]
        elif all(_is_desc(x) for x in items):
            return [
                *(("td", self.desc(x, where), True) for x in items),
                ("val_type", _Enum("VT_LIST_TENSOR_DESC"), False),
            ]
        elif all(_is_tensor(x) for x in items):
            return [*(("t", self.tensor(x, where), True) for x in items), ("val_type", _Enum("VT_LIST_TENSOR"), False)]
        else:
            kinds = sorted({type(x).__name__ for x in items})
            raise GeGraphError(f"{where}: cannot write a list mixing {', '.join(kinds)} as a GE attribute")
        return [*((field, x, True) for x in items), ("val_type", _Enum(vt), False)]

    # -- descriptors, ops, graphs ------------------------------------------------------------------------
    def desc(self, desc: GeTensorDesc | Mapping[str, Any], where: str) -> Message:
        if isinstance(desc, GeTensorDesc):
            desc = {k: getattr(desc, k) for k in ("name", "dtype", "layout", "shape", "attrs", "extra")}
        out: Message = [("name", str(desc.get("name")), False)] if desc.get("name") else []
        out.append(("dtype", self.dtype(desc.get("dtype", "undefined")), False))
        shape = list(desc.get("shape") or ())
        if shape:
            out.append(("shape", [("dim", int(d), True) for d in shape], False))
        out.append(("layout", str(desc.get("layout", "ND")), False))
        out += self.attrs(desc.get("attrs") or {}, where)
        out += self.extra(desc.get("extra") or {})
        return out

    def tensor(self, value: Mapping[str, Any], where: str) -> Message:
        """A ``TensorDef`` of its descriptor only: payloads are not kept when reading, nor written."""
        desc = value.get("desc")
        return [("desc", self.desc(desc, where), False)] if desc else []

    @classmethod
    def extra(cls, extra: Mapping[str, Any]) -> Message:
        """Other fields as read (:attr:`GeOp.extra`): lists are repeated fields, dicts are messages."""
        out: Message = []
        for key, value in extra.items():
            for v in value if isinstance(value, list) else [value]:
                if v is not None:
                    out.append((key, cls.extra(v) if isinstance(v, Mapping) else v, isinstance(value, list)))
        return out

    def op(self, op: GeOp | Mapping[str, Any], position: int) -> Message:
        if isinstance(op, GeOp):
            fields: dict[str, Any] = {
                "name": op.name,
                "type": op.type,
                "inputs": [str(i) for i in op.inputs],
                "attrs": op.attrs,
                "input_descs": op.input_descs,
                "output_descs": op.output_descs,
                "id": op.id,
                "subgraph_names": op.subgraph_names,
                "extra": op.extra,
            }
        else:
            fields = {"id": position, **op}
        name = str(fields.get("name") or "")
        if not name:
            raise GeGraphError(f"op {position} has no name")
        attrs = dict(fields.get("attrs") or {})
        if fields.get("pass_name") is not None:
            attrs["pass_name"] = fields["pass_name"]
        if fields.get("original_ops") is not None:
            attrs["_datadump_original_op_names"] = [str(o) for o in fields["original_ops"]]
        out: Message = [("name", name, False), ("type", str(fields.get("type", "")), False)]
        for inp in fields.get("inputs") or ():
            text = f"{inp[0]}:{inp[1]}" if isinstance(inp, tuple) and not isinstance(inp, GeInput) else str(inp)
            out.append(("input", text, True))
        out += self.attrs(attrs, f"op {name!r}", owner=name)
        if fields.get("id") is not None:
            out.append(("id", int(fields["id"]), False))
        out += self.extra(fields.get("extra") or {})
        for key, field in (("input_descs", "input_desc"), ("output_descs", "output_desc")):
            out += [
                (field, self.desc(d, f"op {name!r} {field} {i}"), True) for i, d in enumerate(fields.get(key) or ())
            ]
        out += [("subgraph_name", str(s), True) for s in fields.get("subgraph_names") or ()]
        return out

    def graph(self, graph: GeGraph) -> Message:
        return self.graph_fields(graph.name, graph.ops, graph.inputs, graph.outputs, graph.attrs)

    def graph_fields(
        self,
        name: str,
        ops: Iterable[GeOp | Mapping[str, Any]],
        inputs: Iterable[str] = (),
        outputs: Iterable[str] = (),
        attrs: Mapping[str, Any] | None = None,
    ) -> Message:
        out: Message = [("name", name, False)]
        out += [("input", str(i), True) for i in inputs]
        out += [("output", str(o), True) for o in outputs]
        out += [("op", self.op(op, i), True) for i, op in enumerate(ops)]
        return out + self.attrs(attrs or {}, f"graph {name!r}", owner="")


# -- serialisation -----------------------------------------------------------------------------------------
def _float_text(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def _text(message: Message, lines: list[str], indent: str, table: Sequence[str]) -> None:
    for name, value, _ in message:
        if isinstance(value, list):
            lines.append(f"{indent}{name} {{")
            _text(value, lines, indent + "  ", table)
            lines.append(f"{indent}}}")
        elif isinstance(value, _Enum):
            lines.append(f"{indent}{name}: {value}")
        elif isinstance(value, (str, bytes)):
            lines.append(f'{indent}{name}: "{c_escape(value, table)}"')
        elif isinstance(value, bool):
            lines.append(f"{indent}{name}: {'true' if value else 'false'}")
        elif isinstance(value, float):
            lines.append(f"{indent}{name}: {_float_text(value)}")
        else:
            lines.append(f"{indent}{name}: {int(value)}")


def to_text(message: Message) -> str:
    """Protobuf text format of a message built by this module."""
    lines: list[str] = []
    _text(message, lines, "", _escape_table())
    return "\n".join(lines) + "\n"


def _json(message: Message, table: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value, repeated in message:
        if isinstance(value, list):
            value = _json(value, table)
        elif isinstance(value, _Enum):
            value = str(value)
        elif isinstance(value, (str, bytes)):
            # Ascend's converter C-escapes singular bytes fields (s, bt) and writes repeated ones raw
            if name in ("s", "bt") and not repeated:
                value = c_escape(value, table)
            elif isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
        elif isinstance(value, float) and not math.isfinite(value):
            value = _float_text(value)
        if repeated:
            out.setdefault(name, []).append(value)
        else:
            out[name] = value
    return out


def to_json(message: Message) -> dict[str, Any]:
    """The JSON form (as a dict) of a message built by this module."""
    return _json(message, _escape_table())


def _write(path: str | Path, message: Message, fmt: str) -> Path:
    if fmt not in FORMATS:
        raise GeGraphError(f"{path}: fmt must be one of {FORMATS}, not {fmt!r}")
    path = Path(path)
    text = to_text(message) if fmt == "text" else json.dumps(to_json(message), indent=1, ensure_ascii=False) + "\n"
    try:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    except OSError as exc:
        raise GeGraphError(f"{path}: cannot write the graph: {exc.strerror or exc}") from None
    return path


def write_ge_graph(
    path: str | Path,
    ops: Iterable[GeOp | Mapping[str, Any]],
    *,
    model_name: str = "ge_default",
    graph_name: str | None = None,
    fmt: str = "text",
    subgraphs: Mapping[str, Iterable[GeOp | Mapping[str, Any]]] | None = None,
    inputs: Iterable[str] = (),
    outputs: Iterable[str] = (),
) -> Path:
    """Write ops as a GE ``ModelDef`` holding one graph (plus ``subgraphs``), as text or JSON.

    Parameters
    ----------
    path
        The file to write (``ge_proto_00000001_Build.txt`` by GE's naming).
    ops
        :class:`GeOp` objects or dicts with ``name``, ``type``, ``inputs`` (``"src:idx"`` strings or
        ``(src, idx)`` pairs; ``-1`` a control edge, ``""`` an unused optional input), ``attrs``,
        ``input_descs`` / ``output_descs`` (:func:`tensor_desc` dicts or :class:`GeTensorDesc`), ``id``
        (default: the position), ``subgraph_names``, ``extra`` (other OpDef fields such as ``stream_id``).
        Shortcuts for fused ops: ``pass_name`` and ``original_ops`` (-> ``_datadump_original_op_names``).
        Attribute values: str, int, float, bool, lists of one of those, lists of lists of numbers, and
        ``{"name", "attrs"}`` dicts (named attributes).
    model_name, graph_name
        Names of the model and of its graph (default ``f"{model_name}_1"``).
    fmt
        ``"text"`` (protobuf text format) or ``"json"`` (Ascend's JSON form).
    subgraphs
        Graph name -> its ops, for control-flow ops naming them in ``subgraph_names``.
    inputs, outputs
        The graph's ``input`` / ``output`` fields.

    Returns
    -------
    Path
        ``path``.
    """
    b = _Builder()
    graphs = [("graph", b.graph_fields(graph_name or f"{model_name}_1", ops, inputs, outputs), True)]
    graphs += [("graph", b.graph_fields(name, sub), True) for name, sub in (subgraphs or {}).items()]
    return _write(path, [("name", model_name, False), *graphs], fmt)


def write_ge_model(path: str | Path, model: GeModel, *, fmt: str = "text") -> Path:
    """Write a :class:`GeModel` back (subgraphs held by attributes go back inside them).

    Examples
    --------
    >>> write_ge_model("copy.json", read_ge_model("ge_proto_00000001_Build.txt"), fmt="json")  # doctest: +SKIP
    """
    attr_graphs: dict[tuple[str, str], list[GeGraph]] = {}
    for g in model.graphs:
        if g.parent_attr:
            attr_graphs.setdefault((g.parent_op, g.parent_attr), []).append(g)
    b = _Builder(attr_graphs)
    message: Message = [("name", model.name, False)]
    message += [("graph", b.graph(g), True) for g in model.graphs if not g.parent_attr]
    message += b.attrs(model.attrs, "model", owner="")
    message += b.extra(model.extra)
    return _write(path, message, fmt)
