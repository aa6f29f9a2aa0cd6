"""The plain data model of a GE graph dump: :class:`GeModel` -> :class:`GeGraph` -> :class:`GeOp`.

Everything is plain Python: names and types are ``str``, attributes are dicts of ``str``/``int``/``float``/
``bool``/lists (and dicts for tensor descriptors, tensors and named attributes inside attributes), dtypes
are nbprec's canonical names (``"float16"``, ``"bfloat16"``). Built by :func:`nbprec.graph.ge.read_ge_model`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from nbprec._record import Factory, Record
from nbprec.dtypes import canonical_dtype
from nbprec.graph.ge_parse import GeGraphError
from nbprec.graph.model import OpNotFoundError

#: ``ge.proto.DataType`` numbers and names (ge_ir.proto).
GE_DTYPES: dict[int, str] = {
    0: "DT_UNDEFINED",
    1: "DT_FLOAT",
    2: "DT_FLOAT16",
    3: "DT_INT8",
    4: "DT_UINT8",
    5: "DT_INT16",
    6: "DT_UINT16",
    7: "DT_INT32",
    8: "DT_INT64",
    9: "DT_UINT32",
    10: "DT_UINT64",
    11: "DT_BOOL",
    12: "DT_DOUBLE",
    13: "DT_STRING",
    14: "DT_DUAL_SUB_INT8",
    15: "DT_DUAL_SUB_UINT8",
    16: "DT_COMPLEX64",
    17: "DT_COMPLEX128",
    18: "DT_QINT8",
    19: "DT_QINT16",
    20: "DT_QINT32",
    21: "DT_QUINT8",
    22: "DT_QUINT16",
    23: "DT_RESOURCE",
    24: "DT_STRING_REF",
    25: "DT_DUAL",
    26: "DT_VARIANT",
    27: "DT_BF16",
    28: "DT_INT4",
    29: "DT_UINT1",
    30: "DT_INT2",
    31: "DT_UINT2",
}


def ge_dtype(value: Any) -> str:
    """nbprec's canonical dtype name for a GE ``DataType`` given by name or number.

    Examples
    --------
    >>> ge_dtype("DT_FLOAT16"), ge_dtype(27), ge_dtype("DT_FLOAT"), ge_dtype(None)
    ('float16', 'bfloat16', 'float32', 'undefined')
    """
    if value is None:
        value = 0
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        value = GE_DTYPES.get(value, f"DT_{value}")
    return canonical_dtype(str(value))


class GeInput(NamedTuple):
    """One entry of an op's ``input`` list: ``"src_op:idx"``.

    ``index`` is the producer's output, ``-1`` for a control edge, ``None`` when the input is unused (an
    empty string: an optional input left out) or malformed (then ``op`` holds the text as written and the
    model's ``problems`` say so).
    """

    op: str
    index: int | None

    @property
    def is_control(self) -> bool:
        """True for a control edge (``"src:-1"``)."""
        return self.index == -1

    @property
    def is_data(self) -> bool:
        """True for a data input from an op output."""
        return self.index is not None and self.index >= 0

    def __str__(self) -> str:
        return self.op if self.index is None else f"{self.op}:{self.index}"


class GeTensorDesc(Record):
    """An op input or output as GE describes it (``TensorDescriptor``).

    Attributes
    ----------
    name : str
        The port name (``"x"``, ``"filter"``), often empty for outputs.
    dtype : str
        Canonical dtype (``"float16"``).
    layout : str
        The device format (``"NC1HWC0"``, ``"FRACTAL_NZ"``, ``"ND"``).
    shape : tuple of int
        The device shape (-1 for a dynamic dimension).
    attrs : dict
        Attributes as plain values (``origin_format``, ``origin_shape``, ``_datadump_origin_name``, ...).
    extra : dict
        The other fields as written (``size``, ``real_dim_cnt``, ``data_offset``, ...).
    """

    name: str = ""
    dtype: str = "undefined"
    layout: str = ""
    shape: tuple[int, ...] = ()
    attrs: dict[str, Any] = Factory(dict)
    extra: dict[str, Any] = Factory(dict)

    def __init__(
        self,
        name: str = "",
        dtype: str = "undefined",
        layout: str = "",
        shape: tuple[int, ...] = (),
        attrs: dict[str, Any] | None = None,  # (None: a new empty dict, as for extra)
        extra: dict[str, Any] | None = None,
    ) -> None:
        # (the fields' __init__ written out: a graph makes a thousand descriptors, in half the time of Record's)
        attrs = {} if attrs is None else attrs
        extra = {} if extra is None else extra
        self.__dict__.update(name=name, dtype=dtype, layout=layout, shape=shape, attrs=attrs, extra=extra)

    @property
    def origin_format(self) -> str:
        """The framework's format (``"NHWC"``): attr ``origin_format``, else ``_datadump_origin_format``."""
        return str(self.attrs.get("origin_format", self.attrs.get("_datadump_origin_format", "")))

    @property
    def datadump_origin_format(self) -> str:
        """Attr ``_datadump_origin_format`` as written ("" when absent)."""
        return str(self.attrs.get("_datadump_origin_format", ""))

    @property
    def origin_shape(self) -> tuple[int, ...] | None:
        """The framework's shape (attr ``origin_shape``), None when not recorded."""
        shape = self.attrs.get("origin_shape")
        return tuple(int(d) for d in shape) if isinstance(shape, list) else None

    @property
    def origin_name(self) -> str:
        """The framework op whose output this tensor equals (attr ``_datadump_origin_name``), "" if none."""
        return str(self.attrs.get("_datadump_origin_name", ""))

    @property
    def origin_output_index(self) -> int | None:
        """Which output of :attr:`origin_name` (attr ``_datadump_origin_output_index``)."""
        index = self.attrs.get("_datadump_origin_output_index")
        return int(index) if isinstance(index, (int, float)) else None


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


class GeOp(Record):
    """One op (``OpDef``) of a GE graph.

    Attributes
    ----------
    name, type : str
        As in the graph (``"conv1/Conv2D"``, ``"Conv2D"``).
    id : int or None
        GE's op id (the execution order of a Build graph), None when absent.
    inputs : tuple of GeInput
        Every entry of the ``input`` list in order: data inputs first (slot = position), then control
        inputs (index -1).
    attrs : dict
        Attributes as plain Python values.
    input_descs, output_descs : tuple of GeTensorDesc
        Descriptors of the inputs and outputs.
    graph : str
        The graph holding the op.
    subgraph_names : tuple of str
        Subgraphs of a control-flow op (``If``, ``While``, ``PartitionedCall``).
    extra : dict
        The other fields as written (``stream_id``, ``input_name``, ``workspace``, ...).
    """

    name: str
    type: str = ""
    id: int | None = None
    inputs: tuple[GeInput, ...] = ()
    attrs: dict[str, Any] = Factory(dict)
    input_descs: tuple[GeTensorDesc, ...] = ()
    output_descs: tuple[GeTensorDesc, ...] = ()
    graph: str = ""
    subgraph_names: tuple[str, ...] = ()
    extra: dict[str, Any] = Factory(dict)

    def __init__(
        self,
        name: str,
        type: str = "",
        id: int | None = None,
        inputs: tuple[GeInput, ...] = (),
        attrs: dict[str, Any] | None = None,  # (None: a new empty dict, as for extra)
        input_descs: tuple[GeTensorDesc, ...] = (),
        output_descs: tuple[GeTensorDesc, ...] = (),
        graph: str = "",
        subgraph_names: tuple[str, ...] = (),
        extra: dict[str, Any] | None = None,
    ) -> None:
        # (written out, as GeTensorDesc's)
        self.__dict__.update(
            name=name,
            type=type,
            id=id,
            inputs=inputs,
            attrs={} if attrs is None else attrs,
            input_descs=input_descs,
            output_descs=output_descs,
            graph=graph,
            subgraph_names=subgraph_names,
            extra={} if extra is None else extra,
        )

    @property
    def data_inputs(self) -> list[tuple[int, GeInput]]:
        """``(slot, input)`` of the data inputs."""
        return [(slot, i) for slot, i in enumerate(self.inputs) if i.is_data]

    @property
    def control_inputs(self) -> list[str]:
        """Ops this op waits for (control edges)."""
        return [i.op for i in self.inputs if i.is_control]

    @property
    def pass_names(self) -> list[str]:
        """The fusion passes that made this op (attr ``pass_name``, a string or a list), [] if none."""
        return _as_list(self.attrs.get("pass_name"))

    @property
    def pass_name(self) -> str:
        """:attr:`pass_names` joined with ``", "`` ("" when the op was not fused)."""
        return ", ".join(self.pass_names)

    @property
    def original_op_names(self) -> list[str]:
        """The framework ops fused into this op (attr ``_datadump_original_op_names``)."""
        return _as_list(self.attrs.get("_datadump_original_op_names"))

    @property
    def is_multiop(self) -> bool | None:
        """Attr ``_datadump_is_multiop`` (None when absent)."""
        value = self.attrs.get("_datadump_is_multiop")
        return None if value is None else bool(value)

    @property
    def l1_fusion_sub_graph_no(self) -> Any:
        """Attr ``_L1_fusion_sub_graph_no`` (None when absent)."""
        return self.attrs.get("_L1_fusion_sub_graph_no")

    @property
    def fusion(self) -> dict[str, Any] | None:
        """The fusion record ``{"pass_name", "original_ops"}`` when the op has either, else None."""
        if "pass_name" not in self.attrs and "_datadump_original_op_names" not in self.attrs:
            return None
        return {"pass_name": self.pass_name, "original_ops": self.original_op_names}


class GeGraph(Record):
    """One graph (``GraphDef``): its ops in file order.

    ``parent_op`` is the op whose subgraph this is ("" for a top-level graph); ``parent_attr`` the attribute
    holding it when it was written inside an attribute (``g``), "" when the op names it in ``subgraph_name``.
    """

    name: str
    ops: tuple[GeOp, ...] = ()
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    attrs: dict[str, Any] = Factory(dict)
    parent_op: str = ""
    parent_attr: str = ""
    _index: dict[str, GeOp]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Record.__init__(self, *args, **kwargs)
        index: dict[str, GeOp] = {}  # (not a field: left out of the repr and of comparisons)
        for op in self.ops:
            index.setdefault(op.name, op)
        self.__dict__["_index"] = index

    def __len__(self) -> int:
        return len(self.ops)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def op(self, name: str) -> GeOp:
        """The op called ``name`` (the first, if the name repeats)."""
        try:
            return self._index[name]
        except KeyError:
            raise OpNotFoundError(f"no op named {name!r} in GE graph {self.name!r} ({len(self.ops)} ops)") from None


class GeModel(Record, uncompared=("path", "format")):
    """A GE graph dump (``ModelDef``): its graphs, and what could not be resolved while reading it.

    Attributes
    ----------
    name : str
        The model name (the graph's name when the file held a single GraphDef).
    graphs : tuple of GeGraph
        The graphs in file order; a subgraph written inside an attribute follows the graph holding it.
    attrs : dict
        Model attributes.
    problems : list of str
        Inputs naming no op, repeated op names, malformed inputs, ...: each names the op.
    path, format : str
        Where the model was read from, and ``"text"`` or ``"json"``.
    extra : dict
        The other fields (``version``, ``custom_version``).
    """

    name: str
    graphs: tuple[GeGraph, ...] = ()
    attrs: dict[str, Any] = Factory(dict)
    problems: list[str] = Factory(list)
    path: str = ""
    format: str = ""
    extra: dict[str, Any] = Factory(dict)
    _ops: tuple[GeOp, ...]
    _index: dict[str, GeOp]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        Record.__init__(self, *args, **kwargs)
        ops = tuple(op for g in self.graphs for op in g.ops)
        index: dict[str, GeOp] = {}  # (neither is a field: left out of the repr and of comparisons)
        for op in ops:
            index.setdefault(op.name, op)
        self.__dict__.update(_ops=ops, _index=index)

    def __len__(self) -> int:
        return len(self._ops)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    @property
    def ops(self) -> tuple[GeOp, ...]:
        """Every op of every graph (subgraphs included), graph by graph in file order."""
        return self._ops

    @property
    def by_name(self) -> Mapping[str, GeOp]:
        """Op name -> op (the first op of that name, graphs in file order), a read-only view."""
        return MappingProxyType(self._index)

    def op(self, name: str, graph: str | None = None) -> GeOp:
        """The op called ``name`` (in ``graph`` when given; else the first op of that name)."""
        if graph is not None:
            return self.graph(graph).op(name)
        try:
            return self._index[name]
        except KeyError:
            import difflib  # (here: the command's early worker and the readers load this module, and never need it)

            similar = difflib.get_close_matches(name, list(self._index), n=5, cutoff=0.7)
            hint = f"; similar: {similar}" if similar else ""
            raise OpNotFoundError(f"{self.path or self.name}: no op named {name!r} in the GE graph{hint}") from None

    def graph(self, name: str) -> GeGraph:
        """The graph called ``name``."""
        for g in self.graphs:
            if g.name == name:
                return g
        known = [g.name for g in self.graphs][:10]
        raise GeGraphError(f"{self.path or self.name}: no graph named {name!r} (graphs: {known})")

    def producer(
        self, op_name: str, input_slot: int, *, skip_types: tuple[str, ...] = (), graph: str | None = None
    ) -> tuple[GeOp, int] | None:
        """The op and output index feeding input ``input_slot`` of ``op_name``.

        Parameters
        ----------
        op_name, input_slot
            The consumer and its input position (a position of :attr:`GeOp.inputs`).
        skip_types
            Op types to look through (``("Cast", "TransData")``): their own input 0 is followed instead.
        graph
            The consumer's graph, when its name repeats across graphs.

        Returns
        -------
        tuple or None
            ``(producer op, output index)`` (index -1 for a control input); None for an unused optional
            input or a producer that is not in the model (listed in :attr:`problems`).

        Examples
        --------
        >>> model.producer("fc/MatMul", 0, skip_types=("Cast", "TransData"))  # doctest: +SKIP
        (GeOp(name='relu', ...), 0)
        """
        op = self.op(op_name, graph)
        seen = {(op.graph, op.name)}
        while True:
            if not 0 <= input_slot < len(op.inputs):
                raise GeGraphError(f"op {op.name!r} has {len(op.inputs)} inputs, not an input {input_slot}")
            inp = op.inputs[input_slot]
            if inp.index is None:
                return None
            home = next((g for g in self.graphs if g.name == op.graph), None)
            src = home._index.get(inp.op) if home is not None else None
            src = src or self._index.get(inp.op)
            if src is None:
                return None
            if src.type not in skip_types or not src.inputs or (src.graph, src.name) in seen:
                return src, inp.index
            seen.add((src.graph, src.name))
            op, input_slot = src, 0
