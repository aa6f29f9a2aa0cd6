"""The operator graph: ops as nodes, data flow (and control) as edges, networkx underneath.

An :class:`OpGraph` wraps a ``networkx.MultiDiGraph`` whose node keys are op names. Several edges may join
the same two ops (one op output read as three inputs of the next op), so each edge is keyed by the
consumer's input slot (``"control"`` for a control edge).

Node attributes (:data:`NODE_FIELDS`) and edge attributes (:data:`EDGE_FIELDS`) are plain Python values, so a
graph exports to JSON, DOT and Cytoscape.js without conversion. Builders live in :mod:`nbprec.graph.build`
(dumps), :mod:`nbprec.graph.onnx_source` (ONNX) and :mod:`nbprec.graph.ge` (Ascend GE graphs).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbprec._optional import require
from nbprec.errors import NbprecError

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx

    from nbprec.compare import Comparison
    from nbprec.dump import Dump
    from nbprec.graph.exports import CytoscapeExport
    from nbprec.graph.subgraph import Subgraph

#: Node attributes and their meaning (metrics appear after :meth:`OpGraph.attach_metrics`).
NODE_FIELDS: dict[str, str] = {
    "kind": "'op' for an op, 'block' for a collapsed module (see OpGraph.collapse)",
    "type": "op type ('linear', 'MatMul'); the module class for a block",
    "module": "module path the op belongs to ('enc.layers.0.linear1'), '' when unknown",
    "direction": "'forward', 'backward' or ''",
    "order": "execution order (the first member's order for a block), -1 when unknown",
    "attrs": "op attributes (dict) where the source records them",
    "fusion": "fusion record (dict: pass_name, original_ops) where known, else None",
    "members": "number of ops inside a block (1 for an op)",
    "status": "comparison status: 'pass', 'fail' or 'n/a' (worst member for a block)",
    "cosine": "worst (lowest) output cosine similarity",
    "in_cosine": "worst input cosine similarity",
    "rel_euclidean": "worst (highest) output relative Euclidean distance (RED)",
    "max_abs_err": "worst output max absolute error",
    "origin": "'introduced', 'inherited', 'random' or '' (see nbprec.compare.culprit)",
    "matched": "whether the op has a benchmark counterpart (None before metrics are attached)",
}

#: Edge attributes and their meaning.
EDGE_FIELDS: dict[str, str] = {
    "kind": "'data' or 'control'",
    "tensor": "name of the tensor on the edge (the producer's output), '' for control edges",
    "dst_tensor": "name of the consumer's input tensor, '' when unknown",
    "slot": "the consumer's input slot",
    "inferred": "True when the edge was reconstructed (matching statistics), False when recorded",
    "match": "how an inferred edge was found: 'exact' (shape, dtype, statistics) or 'numel' (reshaped)",
}

#: Per-op metric columns of ``Comparison.ops`` copied onto nodes: node attribute -> column.
OP_METRICS = {
    "status": "status",
    "cosine": "out_cosine",
    "in_cosine": "in_cosine",
    "rel_euclidean": "out_rel_euclidean",
    "max_abs_err": "out_max_abs_err",
    "origin": "origin",
}
#: Per-tensor metric columns of ``Comparison.table`` copied onto edges.
TENSOR_METRICS = ("status", "cosine", "rel_euclidean", "max_abs_err")


class GraphError(NbprecError):
    """The operator graph cannot be built or queried as asked."""


class OpNotFoundError(GraphError, KeyError):
    """No op of that name in the graph."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


def networkx() -> Any:
    """The networkx module, or :class:`~nbprec.errors.MissingDependencyError` naming ``nbprec[graph]``."""
    return require("networkx", "the operator graph")


def _node_defaults() -> dict[str, Any]:
    return {
        "kind": "op",
        "type": "",
        "module": "",
        "direction": "",
        "order": -1,
        "attrs": {},
        "fusion": None,
        "members": 1,
        "status": "n/a",
        "matched": None,
    }


class OpGraph:
    """Ops and the data flowing between them, with the module hierarchy around them.

    Parameters
    ----------
    graph
        A ``networkx.MultiDiGraph`` to wrap (a new empty one when omitted).
    hierarchy
        Node or module call -> parent module call (``None`` at the top), as :attr:`nbprec.Dump.hierarchy`.
        A dict is shared with the caller (and with subgraphs and collapsed views), not copied.
    source
        Where the graph came from (``"nbprec"``, ``"msprobe"``, ``"onnx"``, ...).
    notes
        Facts a user should know (edges that could not be resolved, ops left out, ...): never silent.
    meta
        Free-form facts (path, step, rank, ...).

    Examples
    --------
    >>> g = OpGraph()
    >>> g.add_op("a", type="linear")
    >>> g.add_op("b", type="relu")
    >>> g.add_edge("a", "b", tensor="a.output.0", slot="0")
    >>> g.consumers("a")
    ['b']
    """

    def __init__(
        self,
        graph: nx.MultiDiGraph | None = None,
        *,
        hierarchy: Mapping[str, str | None] | None = None,
        source: str = "",
        notes: Iterable[str] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.nx = graph if graph is not None else networkx().MultiDiGraph()
        # a dict is shared, not copied: subgraphs and collapsed views of a 100,000-op graph stay cheap
        self.hierarchy: dict[str, str | None] = hierarchy if isinstance(hierarchy, dict) else dict(hierarchy or {})
        self.source = source
        self.notes: list[str] = list(notes)
        self.meta: dict[str, Any] = dict(meta or {})

    # -- building ----------------------------------------------------------------------------------
    def add_op(self, name: str, **attrs: Any) -> None:
        """Add (or update) op ``name``; attributes as in :data:`NODE_FIELDS`."""
        if name in self.nx:
            self.nx.nodes[name].update(attrs)
            return
        data = _node_defaults()
        data.update(attrs)
        self.nx.add_node(name, **data)

    def add_edge(
        self,
        src: str,
        dst: str,
        *,
        tensor: str = "",
        slot: str = "",
        kind: str = "data",
        inferred: bool = False,
        match: str = "",
        dst_tensor: str = "",
    ) -> None:
        """Add a data (or ``kind="control"``) edge from op ``src`` to op ``dst``; both must exist."""
        for op in (src, dst):
            if op not in self.nx:
                raise OpNotFoundError(f"cannot add an edge {src!r} -> {dst!r}: no op named {op!r} in the graph")
        key = "control" if kind == "control" else str(slot)
        self.nx.add_edge(
            src,
            dst,
            key=key,
            kind=kind,
            tensor=tensor,
            dst_tensor=dst_tensor,
            slot=str(slot),
            inferred=bool(inferred),
            match=match,
        )

    @classmethod
    def from_records(
        cls,
        nodes: Iterable[Mapping[str, Any]],
        edges: Iterable[Mapping[str, Any]],
        *,
        hierarchy: Mapping[str, str | None] | None = None,
        source: str = "",
        notes: Iterable[str] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> OpGraph:
        """Build a graph from plain records: every builder (dump, ONNX, GE) ends here.

        ``nodes`` are dicts with ``name`` plus any :data:`NODE_FIELDS`; ``edges`` are dicts with ``src``,
        ``dst`` plus any :data:`EDGE_FIELDS`. An edge naming an unknown op is left out and counted in
        :attr:`notes`.

        Examples
        --------
        >>> g = OpGraph.from_records([{"name": "x", "type": "relu"}, {"name": "y"}], [{"src": "x", "dst": "y"}])
        >>> len(g), g.nx.number_of_edges()
        (2, 1)
        """
        nxg = networkx().MultiDiGraph()
        defaults = _node_defaults()
        nxg.add_nodes_from((n["name"], {**defaults, **{k: v for k, v in n.items() if k != "name"}}) for n in nodes)
        kept, missing = [], []
        for e in edges:
            src, dst = e["src"], e["dst"]
            if src not in nxg or dst not in nxg:
                missing.append((src, dst))
                continue
            kind = e.get("kind", "data")
            slot = str(e.get("slot", ""))
            attrs = {
                "kind": kind,
                "tensor": e.get("tensor", ""),
                "dst_tensor": e.get("dst_tensor", ""),
                "slot": slot,
                "inferred": bool(e.get("inferred", False)),
                "match": e.get("match", ""),
            }
            kept.append((src, dst, "control" if kind == "control" else slot, attrs))
        nxg.add_edges_from(kept)
        notes = list(notes)
        if missing:
            src, dst = missing[0]
            notes.append(f"{len(missing)} edges name ops outside the graph and were left out (e.g. {src!r} -> {dst!r})")
        return cls(nxg, hierarchy=hierarchy, source=source, notes=notes, meta=meta)

    @classmethod
    def from_dump(cls, dump: Dump, *, step: int | None = None, rank: int | None = None, level: str = "auto") -> OpGraph:
        """Build the graph of one step and rank of a dump (see :func:`nbprec.graph.build.graph_from_dump`)."""
        from nbprec.graph.build import graph_from_dump

        return graph_from_dump(dump, step=step, rank=rank, level=level)

    @classmethod
    def from_onnx(cls, path: str | Path) -> OpGraph:
        """Build the graph of an ONNX model (needs ``onnx``; see :mod:`nbprec.graph.onnx_source`)."""
        from nbprec.graph.onnx_source import graph_from_onnx

        return graph_from_onnx(path)

    @classmethod
    def from_ge(cls, path: str | Path) -> OpGraph:
        """Build the graph of a GE graph dump (see :mod:`nbprec.graph.ge`)."""
        from nbprec.graph.ge import graph_from_ge

        return graph_from_ge(path)

    # -- looking ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.nx.number_of_nodes()

    def __contains__(self, name: object) -> bool:
        return name in self.nx

    def __iter__(self) -> Iterator[str]:
        return iter(self.nx)

    def op(self, name: str) -> dict[str, Any]:
        """The attributes of op ``name`` (a live dict: edit with care)."""
        try:
            return self.nx.nodes[name]
        except KeyError:
            raise OpNotFoundError(f"no op named {name!r} in the graph ({len(self)} ops)") from None

    def producers(self, name: str) -> list[str]:
        """Ops feeding ``name`` (data edges), in execution order."""
        self.op(name)
        found = {u for u, _, d in self.nx.in_edges(name, data=True) if d["kind"] == "data"}
        return sorted(found, key=lambda n: (self.nx.nodes[n]["order"], n))

    def consumers(self, name: str) -> list[str]:
        """Ops reading an output of ``name`` (data edges), in execution order."""
        self.op(name)
        found = {v for _, v, d in self.nx.out_edges(name, data=True) if d["kind"] == "data"}
        return sorted(found, key=lambda n: (self.nx.nodes[n]["order"], n))

    def edges(self, *, data: bool = True) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """Every edge as ``(src, dst, attributes)``."""
        yield from self.nx.edges(data=True)

    def module_chain(self, name: str) -> list[str]:
        """Module calls enclosing ``name``, outermost first (from :attr:`hierarchy`)."""
        chain: list[str] = []
        seen = {name}
        parent = self.hierarchy.get(name)
        while parent is not None and parent not in seen:
            chain.append(parent)
            seen.add(parent)
            parent = self.hierarchy.get(parent)
        return chain[::-1]

    def find(self, pattern: str) -> list[str]:
        """Op names containing ``pattern`` (case-insensitive), in execution order."""
        p = pattern.lower()
        hits = [n for n in self.nx if p in n.lower()]
        return sorted(hits, key=lambda n: (self.nx.nodes[n]["order"], n))

    def __repr__(self) -> str:
        inferred = sum(1 for _, _, d in self.nx.edges(data=True) if d["inferred"])
        return (
            f"<nbprec.OpGraph {self.source or 'graph'}: {len(self)} ops, {self.nx.number_of_edges()} edges "
            f"({inferred} inferred), {len(self.notes)} notes>"
        )

    # -- comparison results ----------------------------------------------------------------------
    def attach_metrics(self, comparison: Comparison) -> OpGraph:
        """Copy comparison results onto nodes (from ``Comparison.ops``) and edges (from ``Comparison.table``).

        Nodes get :data:`OP_METRICS` plus ``matched``; edges get ``status``, ``cosine``, ``rel_euclidean`` and
        ``max_abs_err`` of the tensor they carry. Only rows of the graph's step and rank are used. The graph
        is changed in place and returned.

        Examples
        --------
        >>> g = OpGraph.from_dump(target).attach_metrics(nbprec.compare(target, bench))  # doctest: +SKIP
        """
        from nbprec.graph.annotate import attach_metrics

        attach_metrics(self, comparison)
        return self

    # -- views -----------------------------------------------------------------------------------
    def collapse(self, depth: int = 1, *, expand: Iterable[str] = ()) -> OpGraph:
        """Module blocks ``depth`` levels down (see :func:`nbprec.graph.hierarchy.collapse`)."""
        from nbprec.graph.hierarchy import collapse

        return collapse(self, depth=depth, expand=expand)

    def subgraph(
        self,
        op: str,
        up: int = 2,
        down: int = 2,
        *,
        stop_types: Iterable[str] = (),
        control_edges: bool = True,
        max_nodes: int = 300,
    ) -> Subgraph:
        """The neighbourhood of ``op`` (see :func:`nbprec.graph.subgraph.neighbourhood`)."""
        from nbprec.graph.subgraph import neighbourhood

        return neighbourhood(
            self, op, up=up, down=down, stop_types=stop_types, control_edges=control_edges, max_nodes=max_nodes
        )

    # -- exports ---------------------------------------------------------------------------------
    def to_cytoscape(self, metric: str = "cosine", *, max_elements: int = 300) -> CytoscapeExport:
        """Cytoscape.js elements and style (see :func:`nbprec.graph.exports.to_cytoscape`)."""
        from nbprec.graph.exports import to_cytoscape

        return to_cytoscape(self, metric=metric, max_elements=max_elements)

    def to_dot(self, metric: str = "cosine") -> str:
        """Graphviz DOT text (see :func:`nbprec.graph.exports.to_dot`)."""
        from nbprec.graph.exports import to_dot

        return to_dot(self, metric=metric)

    def to_svg(self, path: str | Path | None = None, metric: str = "cosine") -> str:
        """SVG drawn by Graphviz ``dot`` (see :func:`nbprec.graph.exports.to_svg`)."""
        from nbprec.graph.exports import to_svg

        return to_svg(self, path, metric=metric)

    def to_json(self, path: str | Path | None = None) -> dict[str, Any]:
        """Node and edge data as JSON (see :func:`nbprec.graph.exports.to_json`)."""
        from nbprec.graph.exports import to_json

        return to_json(self, path)
