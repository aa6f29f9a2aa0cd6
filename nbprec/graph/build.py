"""Build an :class:`~nbprec.graph.model.OpGraph` from a :class:`~nbprec.dump.Dump`.

Two cases:

- the dump records its dataflow (nbprec's PyTorch capture writes ``edges.jsonl``): each edge names the tensor
  an op consumed; its producer is the op that tensor belongs to. Edges are ``inferred=False``.
- it does not (msprobe, ptdbg): edges are reconstructed from execution order. An op's input is taken to be
  an earlier op's output when dtype, shape and every recorded statistic (max, min, mean, norm) or checksum
  agree (``match="exact"``); failing that, when they agree with the same element count but another shape
  (a reshape or transpose nobody dumped, ``match="numel"``). The latest such producer wins. Inputs only
  match outputs of the same direction (forward with forward, backward with backward). Edges are
  ``inferred=True``.

Module-level calls (``Module.*``/``Cell.*`` entries of a ``mix`` dump) repeat the tensors of the API calls
inside them; by default they are blocks of the hierarchy, not ops (``level="all"`` keeps both).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nbprec.dump import Dump
from nbprec.graph.model import GraphError, OpGraph

_MODULE_PREFIXES = ("Module.", "Cell.")
_KEY_STATS = ("max", "min", "mean", "norm")
LEVELS = ("auto", "api", "module", "all")


def is_module_call(op: str, api: str = "") -> bool:
    """Whether an op of a dump is a module-level call (``Module.enc.Linear.forward.0``).

    Examples
    --------
    >>> is_module_call("Module.head.Linear.forward.0"), is_module_call("Functional.linear.0.forward")
    (True, False)
    """
    return op.startswith(_MODULE_PREFIXES) or api.startswith(_MODULE_PREFIXES)


def _pick(values: list[int], what: str, asked: int | None, notes: list[str]) -> int | None:
    if asked is not None or len(values) <= 1:
        return asked
    notes.append(f"the dump holds {what}s {values}; the graph is of {what} {values[0]} (pass {what}=... for another)")
    return values[0]


def _select_ops(ops: pd.DataFrame, level: str, notes: list[str]) -> pd.DataFrame:
    if level not in LEVELS:
        raise GraphError(f"level must be one of {LEVELS}, not {level!r}")
    module = np.array([is_module_call(o, a) for o, a in zip(ops["op"], ops["api"], strict=True)], dtype=bool)
    if level == "auto":
        level = "module" if module.all() else "api"
    if level == "all":
        return ops
    keep = module if level == "module" else ~module
    dropped = int((~keep).sum())
    if dropped:
        kind = "API" if level == "module" else "module-level (Module.*)"
        notes.append(f"{dropped} {kind} calls are not ops of this graph (level={level!r}; level='all' keeps them)")
    return ops[keep]


def graph_from_dump(dump: Dump, *, step: int | None = None, rank: int | None = None, level: str = "auto") -> OpGraph:
    """The operator graph of one step and rank of ``dump``.

    Parameters
    ----------
    dump
        Any dump nbprec reads.
    step, rank
        Which step and rank (the first ones, with a note in ``graph.notes``, when the dump holds several).
    level
        ``"api"`` (API calls are ops, module calls are blocks), ``"module"`` (module calls are ops),
        ``"all"``, or ``"auto"`` (``"api"`` unless the dump holds module calls only).

    Examples
    --------
    >>> g = graph_from_dump(nbprec.open("tests/fixtures/msprobe/fp32_tensor_mix"))  # doctest: +SKIP
    >>> g.consumers("Functional.linear.0.forward")                                # doctest: +SKIP
    ['Torch.relu.0.forward']
    """
    notes: list[str] = []
    step = _pick(dump.steps, "step", step, notes)
    rank = _pick(dump.ranks, "rank", rank, notes)
    if step is not None or rank is not None:
        dump = dump.select(step=step, rank=rank)
    ops = _select_ops(dump.ops(), level, notes)
    nodes = [
        {
            "name": r.op,
            "type": r.op_type,
            "module": r.module,
            "direction": r.direction,
            "order": int(r.order),
            "attrs": {"api": r.api, "call": int(r.call)},
        }
        for r in ops.itertuples(index=False)
    ]
    node_set = set(ops["op"])
    recorded = len(dump.edges) > 0
    edges = recorded_edges(dump, node_set, notes) if recorded else inferred_edges(dump.index, node_set, notes)
    meta = {"path": str(dump.path), "format": dump.format, "step": step, "rank": rank}
    return OpGraph.from_records(nodes, edges, hierarchy=dump.hierarchy, source=dump.format, notes=notes, meta=meta)


def recorded_edges(dump: Dump, node_set: set[str], notes: list[str]) -> list[dict[str, Any]]:
    """Edges from the dump's recorded dataflow (``dump.edges``): producer op of each consumed tensor."""
    index = dump.index
    tensor_op = dict(zip(index["name"], index["op"], strict=True))
    inputs = index[index["role"] == "input"]
    input_name = {(o, str(s)): n for o, s, n in zip(inputs["op"], inputs["slot"], inputs["name"], strict=True)}
    edges, unknown, outside = [], 0, 0
    for src, dst_op, slot in zip(dump.edges["src"], dump.edges["dst_op"], dump.edges["dst_slot"], strict=True):
        producer = tensor_op.get(src)
        if producer is None:
            unknown += 1
            continue
        if producer not in node_set or dst_op not in node_set:
            outside += 1
            continue
        if producer == dst_op:
            continue
        edges.append(
            {
                "src": producer,
                "dst": dst_op,
                "tensor": src,
                "dst_tensor": input_name.get((dst_op, str(slot)), ""),
                "slot": str(slot),
                "inferred": False,
            }
        )
    if unknown:
        notes.append(f"{unknown} recorded edges name a tensor that is not in the dump's index; left out")
    if outside:
        notes.append(f"{outside} recorded edges join calls that are not ops of this graph (module blocks); left out")
    return edges


def _key_columns(frame: pd.DataFrame) -> list[list[Any]]:
    cols = []
    for c in _KEY_STATS:
        values = frame[c].to_numpy(np.float64)
        cols.append([None if v != v else float(v) for v in values])  # NaN -> None so that keys compare equal
    return cols


def inferred_edges(index: pd.DataFrame, node_set: set[str], notes: list[str]) -> list[dict[str, Any]]:
    """Reconstruct data edges from execution order and matching tensor statistics (see the module doc).

    Examples
    --------
    >>> notes = []
    >>> edges = inferred_edges(dump.index, set(dump.ops()["op"]), notes)  # doctest: +SKIP
    """
    frame = index[index["op"].isin(node_set) & index["role"].isin(("input", "output"))]
    frame = frame.sort_values(["order", "op"], kind="stable")
    ops = frame["op"].tolist()
    roles = frame["role"].tolist()
    names = frame["name"].tolist()
    slots = [str(s) for s in frame["slot"]]
    dirs = frame["direction"].tolist()
    dtypes = frame["dtype"].tolist()
    shapes = frame["shape"].tolist()
    numels = frame["numel"].tolist()
    sums = frame["checksum"].tolist()
    stats = list(zip(*_key_columns(frame), strict=True)) if len(frame) else []
    exact: dict[tuple, str] = {}
    by_numel: dict[tuple, str] = {}
    tensor_op: dict[str, str] = {}
    edges: list[dict[str, Any]] = []
    orphans = uninformative = 0
    n, i = len(ops), 0
    while i < n:
        j = i
        while j < n and ops[j] == ops[i]:
            j += 1
        op = ops[i]
        keys = []
        for k in range(i, j):
            informative = any(v is not None for v in stats[k]) or bool(sums[k])
            keys.append(
                (
                    (dirs[k], dtypes[k], tuple(shapes[k]), stats[k], sums[k]),
                    (dirs[k], dtypes[k], numels[k], stats[k], sums[k]),
                )
                if informative
                else None
            )
        for k in range(i, j):
            if roles[k] != "input":
                continue
            key = keys[k - i]
            if key is None:
                uninformative += 1
                continue
            match, tensor = "exact", exact.get(key[0])
            if tensor is None:
                match, tensor = "numel", by_numel.get(key[1])
            if tensor is None:
                orphans += 1
                continue
            src = tensor_op[tensor]
            edges.append(
                {
                    "src": src,
                    "dst": op,
                    "tensor": tensor,
                    "dst_tensor": names[k],
                    "slot": slots[k],
                    "inferred": True,
                    "match": match,
                }
            )
        for k in range(i, j):
            key = keys[k - i]
            if roles[k] == "output" and key is not None:
                exact[key[0]] = by_numel[key[1]] = names[k]
                tensor_op[names[k]] = op
        i = j
    notes.append(
        f"{len(edges)} data edges inferred from execution order and matching tensor statistics (inferred=True); "
        f"{orphans} inputs matched no earlier output (model inputs, parameters, or ops not dumped)"
    )
    if uninformative:
        notes.append(f"{uninformative} inputs have no statistics or checksum to match on; their producers are unknown")
    return edges
