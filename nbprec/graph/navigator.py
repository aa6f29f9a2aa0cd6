"""Navigate a whole model as Model Explorer does: module blocks collapsed, opened by click, never too many drawn.

A :class:`ModelNavigator` holds the module tree of a model (from an :class:`~nbprec.graph.OpGraph`'s hierarchy,
or from the module paths of a comparison's ops) with the ops as leaves, in depth-first order so that every
block is one contiguous run of leaves. The view starts with the top blocks; :meth:`~ModelNavigator.expand`
opens one, :meth:`~ModelNavigator.reveal` opens the path to an op (and to its direct producers and
consumers). :meth:`~ModelNavigator.view` returns what to draw: the visible blocks and ops, the expanded
blocks as containers around them, and the data-flow edges lifted to them, never more than ``max_elements``
nodes plus edges. A block with more than ``max_children`` children shows them in groups (runs in execution
order), so a flat 100,000-op model is navigated in a few clicks too. When the open blocks exceed the budget,
the least recently opened ones off the selected op's path are closed again.

Every block carries roll-ups of its ops: the worst metric, the worst status (``op_status`` of the Model
Explorer export: introduced, fail, explained, pass, n/a), the failing count and its first failing op.

Examples
--------
>>> import pandas as pd
>>> ops = pd.DataFrame({"op": ["a", "b", "c"], "order": [0, 1, 2], "module": ["enc.l0", "enc.l0", "head"],
...                     "status": ["pass", "fail", "pass"], "out_cosine": [1.0, 0.5, 0.99]})
>>> nav = ModelNavigator.from_ops(ops)
>>> [(n["label"], n["failing"]) for n in nav.view().nodes]
[('enc', 1), ('head', 0)]
>>> nav.reveal("b", neighbours=0)
>>> sorted(n["id"] for n in nav.view().nodes if n["kind"] == "op")
['a', 'b']
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nbprec.graph.exports import metric_color, node_label
from nbprec.graph.hierarchy import describe_module_call, module_chains, path_chain
from nbprec.graph.model_explorer_rollup import _RANK, STATUS_COLORS, op_status

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from nbprec.graph.model import OpGraph

ROOT = ""
#: Most nodes plus edges a view returns (ipycytoscape makes one widget, one comm, per element).
MAX_ELEMENTS = 300
#: Most children a block shows at once; more are shown in groups.
MAX_CHILDREN = 12
#: Metrics a view can colour by: node attribute -> (ops column, True when higher is better).
METRICS = {
    "cosine": ("out_cosine", True),
    "rel_euclidean": ("out_rel_euclidean", False),
    "max_abs_err": ("out_max_abs_err", False),
}
_STATUS_NAMES = [s for s, _ in sorted(_RANK.items(), key=lambda kv: kv[1])]
_GROUP = "#"


@dataclass
class NavigatorView:
    """What to draw: nodes (blocks, groups, ops, containers) and edges, as plain dicts, within the budget.

    Node keys: ``id``, ``label``, ``kind`` (``"block"``, ``"group"``, ``"op"``), ``parent`` (the id of the
    expanded container it sits in, ``""`` at the top), ``expanded``, ``members``, ``failing``, ``status``,
    ``value`` (worst metric), ``color``, ``first_failing``, ``selected``, ``neighbour``. Edge keys: ``id``,
    ``source``, ``target``, ``count`` (op-level edges merged), ``near`` (touches the selected op).
    """

    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    metric: str
    truncated: bool = False
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.nodes) + len(self.edges)


class ModelNavigator:
    """The module tree of a model, with the expanded blocks and the selected op (see the module doc).

    Parameters
    ----------
    names
        Op names (the leaves).
    chains
        For each op, its enclosing module calls (ids, outermost first).
    src, dst
        Data-flow edges as positions into ``names``.
    order
        Execution order of each op (children of a block are shown in it).
    labels
        Module call id -> label (:func:`~nbprec.graph.hierarchy.describe_module_call` when missing).
    edge_source
        Where the edges come from, for the legend.
    max_elements, max_children
        The drawing budget and the most children shown before grouping.
    """

    def __init__(
        self,
        names: Sequence[str],
        chains: Sequence[Sequence[str]],
        src: Iterable[int],
        dst: Iterable[int],
        order: Sequence[int] | None = None,
        *,
        labels: dict[str, str] | None = None,
        edge_source: str = "data flow",
        max_elements: int = MAX_ELEMENTS,
        max_children: int = MAX_CHILDREN,
    ) -> None:
        if max_children < 2 or max_elements < 20:
            raise ValueError(f"max_children must be >= 2 and max_elements >= 20 (got {max_children}, {max_elements})")
        self.max_elements, self.max_children = int(max_elements), int(max_children)
        self.edge_source = edge_source
        self._labels = dict(labels or {})
        n = len(names)
        order = np.arange(n) if order is None else np.asarray(order)
        self._children: dict[str, list[str]] = {ROOT: []}
        self._parent: dict[str, str] = {}
        op_ids = {}
        last_chain: Sequence[str] | None = None
        parent = ROOT
        for i in np.argsort(order, kind="stable").tolist():
            name, chain = str(names[i]), chains[i]
            if chain is not last_chain:  # consecutive ops of one module share one chain object
                last_chain, parent = chain, ROOT
                for call in chain:
                    if call not in self._children:
                        self._children[call] = []
                        self._children[parent].append(call)
                        self._parent[call] = parent
                    parent = call
            op_ids[name] = i
            self._children[parent].append(name)
            self._parent[name] = parent
        # depth-first leaf order: every block is the run of leaves [lo, hi)
        self._span: dict[str, tuple[int, int]] = {}
        leaves: list[str] = []
        stack: list[tuple[str, bool]] = [(ROOT, False)]
        while stack:
            node, done = stack.pop()
            if node in self._children:
                if done:
                    self._span[node] = (self._span[node][0], len(leaves))
                    continue
                self._span[node] = (len(leaves), -1)
                stack.append((node, True))
                stack.extend((c, False) for c in reversed(self._children[node]))
            else:
                self._span[node] = (len(leaves), len(leaves) + 1)
                leaves.append(node)
        self.leaves = leaves
        self._index = {kid: i for kids in self._children.values() for i, kid in enumerate(kids)}
        self._pos = {name: k for k, name in enumerate(leaves)}
        perm = np.array([op_ids[name] for name in leaves], dtype=np.int64)  # leaf position -> input position
        where = np.empty(n, dtype=np.int64)
        where[perm] = np.arange(n)
        src, dst = np.fromiter(src, np.int64), np.fromiter(dst, np.int64)
        keep = src != dst
        self._src, self._dst = where[src[keep]], where[dst[keep]]
        self._rank = np.zeros(n, dtype=np.int8)
        self._values = {m: np.full(n, np.nan) for m in METRICS}
        self._has_metrics = False
        self.expanded: dict[str, int] = {}  # block -> when it was opened (least recently opened closes first)
        self._clock = 0
        self.selected: str | None = None

    # -- construction ------------------------------------------------------------------------------------
    @classmethod
    def from_graph(cls, graph: OpGraph, **kwargs: Any) -> ModelNavigator:
        """The module tree of an op graph (its hierarchy, else its module paths), with its data edges."""
        names = list(graph.nx)
        chains_of = module_chains(graph)
        index = {name: i for i, name in enumerate(names)}
        pairs = [(index[u], index[v]) for u, v, d in graph.nx.edges(data=True) if d.get("kind") != "control"]
        order = [graph.nx.nodes[n]["order"] for n in names]
        inferred = any(d.get("inferred") for _, _, d in graph.nx.edges(data=True))
        nav = cls(
            names,
            [chains_of[n] for n in names],
            (p[0] for p in pairs),
            (p[1] for p in pairs),
            order,
            edge_source="data flow (some edges inferred from tensor statistics)" if inferred else "data flow",
            **kwargs,
        )
        return nav

    @classmethod
    def from_ops(cls, ops: pd.DataFrame, **kwargs: Any) -> ModelNavigator:
        """The module tree of a comparison's ops (their module paths), consecutive ops joined in execution
        order (no data-flow record), with the ops' metrics attached."""
        ops = ops.sort_values("order", kind="stable")
        modules = ops["module"].fillna("").astype(str).tolist() if "module" in ops else [""] * len(ops)
        cache: dict[str, list[str]] = {}
        for m in set(modules):
            cache[m] = path_chain(m)
        chains = [cache[m] for m in modules]
        n = len(ops)
        nav = cls(
            ops["op"].astype(str).tolist(),
            chains,
            range(n - 1),
            range(1, n),
            np.arange(n),
            edge_source="execution order (edges join consecutive ops)",
            **kwargs,
        )
        nav.set_metrics(ops)
        return nav

    def set_metrics(self, ops: pd.DataFrame) -> None:
        """Per-op status and metrics from ``Comparison.ops`` (or a table model's ops): ops not in it get n/a."""
        frame = ops.drop_duplicates("op").set_index("op").reindex(self.leaves)
        status = frame["status"].fillna("n/a").to_numpy(object)
        origin = frame["origin"].fillna("").to_numpy(object) if "origin" in frame else np.full(len(frame), "")
        explained = (
            frame["explained"].fillna(False).to_numpy(bool) if "explained" in frame else np.zeros(len(frame), bool)
        )
        self._rank = np.array(
            [
                _RANK[op_status({"status": s, "origin": o, "explained": e})]
                for s, o, e in zip(status, origin, explained, strict=True)
            ],
            dtype=np.int8,
        )
        for metric, (column, _) in METRICS.items():
            if column in frame:
                self._values[metric] = frame[column].to_numpy(np.float64, na_value=np.nan)
        self._has_metrics = True

    # -- the tree ------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.leaves)

    def __contains__(self, name: object) -> bool:
        return name in self._pos

    def is_leaf(self, node: str) -> bool:
        """Whether ``node`` is an op (not a block or group)."""
        return node in self._pos

    def children(self, node: str) -> list[str]:
        """What opening ``node`` shows: its children, or groups of them when there are more than
        ``max_children`` (a group's id is ``<block>#<first>-<last>``, positions into the block's children)."""
        block, a, b = self._slice(node)
        kids = self._children[block]
        b = len(kids) if b < 0 else b
        if b - a <= self.max_children:
            return kids[a:b]
        size = math.ceil((b - a) / self.max_children)
        return [f"{block}{_GROUP}{i}-{min(i + size, b) - 1}" for i in range(a, b, size)]

    def _slice(self, node: str) -> tuple[str, int, int]:
        block, sep, rest = node.rpartition(_GROUP)
        if sep and block in self._children and "-" in rest:
            a, _, b = rest.partition("-")
            if a.isdigit() and b.isdigit():
                return block, int(a), int(b) + 1
        return node, 0, -1

    def _range(self, node: str) -> tuple[str, int, int]:
        """``node`` as a run of its block's children: (block, first, last + 1)."""
        block, a, b = self._slice(node)
        if b >= 0:
            return block, a, b
        i = self._index[node]
        return self._parent.get(node, ROOT), i, i + 1

    def parent(self, node: str) -> str:
        """The block (or group) ``node`` is shown in; ``""`` at the top."""
        if node == ROOT:
            return ROOT
        block, a, b = self._range(node)
        up = block
        while True:  # the innermost group of ``block`` holding the node
            inner = None
            for c in self.children(up):
                if c == node:
                    return up
                cb, ca, cz = self._slice(c)
                if cz >= 0 and cb == block and ca <= a and b <= cz:
                    inner = c
                    break
            if inner is None:
                return up
            up = inner

    def span(self, node: str) -> tuple[int, int]:
        """The leaf positions ``[lo, hi)`` inside ``node``."""
        block, a, b = self._slice(node)
        if b < 0:
            return self._span[node]
        kids = self._children[block]
        return self._span[kids[a]][0], self._span[kids[b - 1]][1]

    def path(self, node: str) -> list[str]:
        """The blocks and groups enclosing ``node``, outermost first."""
        out, up = [], self.parent(node)
        while up != ROOT:
            out.append(up)
            up = self.parent(up)
        return out[::-1]

    def label(self, node: str) -> str:
        """A short label: an op's name without its API prefix, a block's path relative to its parent block."""
        if self.is_leaf(node):
            return node_label(node, {})
        block, a, b = self._slice(node)
        if b >= 0:
            kids = self._children[block]
            return f"{self.label(kids[a])} … {self.label(kids[b - 1])}"
        text = self._labels.get(node) or describe_module_call(node)["label"]
        parent = self._parent.get(node, ROOT)
        if parent:
            prefix = describe_module_call(parent)["path"]
            if prefix and text.startswith(prefix + "."):
                text = text[len(prefix) + 1 :]
        return text

    # -- roll-ups ----------------------------------------------------------------------------------------
    def rollup(self, node: str, metric: str = "cosine") -> dict[str, Any]:
        """Ops inside ``node`` (``members``), failing ones (introduced or fail), the worst status and metric,
        and the first failing op in depth-first (module) order."""
        lo, hi = self.span(node)
        rank = self._rank[lo:hi]
        failing = np.flatnonzero(rank >= _RANK["fail"])
        values = self._values[metric][lo:hi]
        finite = values[np.isfinite(values)]
        worst = None
        if finite.size:
            worst = float(finite.min() if METRICS[metric][1] else finite.max())
        return {
            "members": hi - lo,
            "failing": int(failing.size),
            "status": _STATUS_NAMES[int(rank.max())] if rank.size else "n/a",
            "value": worst,
            "first_failing": self.leaves[lo + int(failing[0])] if failing.size else "",
        }

    def failing_blocks(self, node: str = ROOT) -> list[tuple[str, int]]:
        """The children of ``node`` holding failing ops, with their counts (the overview of where they are)."""
        return [(c, r["failing"]) for c in self.children(node) if (r := self.rollup(c))["failing"]]

    # -- state ---------------------------------------------------------------------------------------------
    def expand(self, node: str) -> None:
        """Open block or group ``node`` (and every block around it)."""
        if self.is_leaf(node):
            return
        for block in [*self.path(node), node]:
            self._clock += 1
            self.expanded[block] = self._clock

    def collapse(self, node: str) -> None:
        """Close ``node`` and everything open inside it."""
        self.expanded = {b: t for b, t in self.expanded.items() if b != node and node not in self.path(b)}

    def collapse_all(self) -> None:
        """Back to the top blocks."""
        self.expanded = {}

    def up(self) -> str | None:
        """Close the innermost open block around the selected op (else the most recently opened one)."""
        around = [b for b in self.path(self.selected) if b in self.expanded] if self.selected in self else []
        target = around[-1] if around else max(self.expanded, key=self.expanded.__getitem__, default=None)
        if target is not None:
            self.collapse(target)
        return target

    def reveal(self, op: str, neighbours: int = 4) -> None:
        """Select ``op`` and open the blocks down to it, and to up to ``neighbours`` of its direct producers
        and consumers each (opened first, so they are the first closed again when over budget)."""
        if op not in self._pos:
            raise KeyError(f"no op named {op!r} among the {len(self)} ops of the model")
        k = self._pos[op]
        for near in (self._src[self._dst == k][:neighbours], self._dst[self._src == k][:neighbours]):
            for j in near:
                self.expand(self.parent(self.leaves[int(j)]))
        self.selected = op
        parent = self.parent(op)
        if parent != ROOT:
            self.expand(parent)

    # -- what to draw --------------------------------------------------------------------------------------
    def _visible(self) -> tuple[list[str], list[str]]:
        items, containers = [], []
        stack = [ROOT]
        while stack:
            node = stack.pop()
            for child in reversed(self.children(node)):
                if child in self.expanded:
                    containers.append(child)
                    stack.append(child)
                else:
                    items.append(child)
        items.sort(key=lambda c: self.span(c)[0])
        return items, containers

    def _lifted_edges(self, items: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        starts = np.array([self.span(c)[0] for c in items], dtype=np.int64)
        a = np.searchsorted(starts, self._src, side="right") - 1
        b = np.searchsorted(starts, self._dst, side="right") - 1
        cross = a != b
        pairs, counts = np.unique(a[cross] * len(items) + b[cross], return_counts=True)
        return pairs // len(items), pairs % len(items), counts

    def _fit(self) -> tuple[list[str], list[str], tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Visible items and containers and their edges, closing blocks off the selected op's path until
        they fit in ``max_elements``."""
        keep = set(self.path(self.selected)) if self.selected in self else set()
        while True:
            items, containers = self._visible()
            edges = self._lifted_edges(items)
            if len(items) + len(containers) + len(edges[0]) <= self.max_elements:
                return items, containers, edges
            closable = [b for b in self.expanded if b not in keep]
            if not closable:
                return items, containers, edges
            self.collapse(min(closable, key=self.expanded.__getitem__))

    def view(self, metric: str = "cosine") -> NavigatorView:
        """The nodes and edges to draw now, coloured by ``metric`` (``"cosine"``, ``"rel_euclidean"``,
        ``"max_abs_err"`` or ``"status"``), never more than ``max_elements`` of them."""
        measure = metric if metric in METRICS else "cosine"
        items, containers, (a, b, counts) = self._fit()
        notes, truncated = [], False
        budget = self.max_elements - len(containers)
        if len(items) > budget:  # only when the selected op's own path is too wide: keep the nearest items
            centre = self._pos.get(self.selected or "", 0)
            nearest = sorted(range(len(items)), key=lambda i: abs(self.span(items[i])[0] - centre))[:budget]
            kept = np.zeros(len(items), bool)
            kept[nearest] = True
            ok = kept[a] & kept[b]
            a, b, counts = a[ok], b[ok], counts[ok]
            notes.append(f"{len(items) - len(nearest)} blocks or ops left out to stay within {self.max_elements}")
            items = [c for i, c in enumerate(items) if kept[i]]
            remap = np.cumsum(kept) - 1
            a, b = remap[a], remap[b]
            truncated = True
        room = self.max_elements - len(items) - len(containers)
        if len(a) > room:
            heaviest = np.argsort(-counts, kind="stable")[: max(room, 0)]
            a, b, counts = a[heaviest], b[heaviest], counts[heaviest]
            notes.append(f"only the {room} heaviest edges drawn to stay within {self.max_elements} elements")
            truncated = True
        selected = self.selected if self.selected in self else None
        near: set[int] = set()
        if selected is not None and selected in items:
            k = items.index(selected)
            near = {int(j) for j in np.concatenate([b[a == k], a[b == k]])}
        nodes = [self._node(c, metric, measure, expanded=True) for c in containers]
        nodes += [self._node(c, metric, measure, neighbour=i in near) for i, c in enumerate(items)]
        if selected is not None:
            for node in nodes:
                node["selected"] = node["id"] == selected
        edges = [
            {
                "id": f"{items[int(u)]}->{items[int(v)]}",
                "source": items[int(u)],
                "target": items[int(v)],
                "count": int(c),
                "near": selected is not None and selected in (items[int(u)], items[int(v)]),
            }
            for u, v, c in zip(a, b, counts, strict=True)
        ]
        return NavigatorView(nodes, edges, metric, truncated, notes)

    def _node(
        self, node: str, metric: str, measure: str, *, expanded: bool = False, neighbour: bool = False
    ) -> dict[str, Any]:
        r = self.rollup(node, measure)
        leaf = self.is_leaf(node)
        color = STATUS_COLORS[r["status"]] if metric == "status" else metric_color(r["value"], measure)
        parent = self.parent(node)
        return {
            "id": node,
            "label": self.label(node),
            "kind": "op" if leaf else "group" if self._slice(node)[2] >= 0 else "block",
            "parent": parent if parent in self.expanded else ROOT,
            "expanded": expanded,
            "selected": False,
            "neighbour": neighbour,
            "color": color,
            **r,
        }
