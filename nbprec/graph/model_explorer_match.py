"""Match the ops of a comparison to the nodes of the graph Model Explorer shows.

A dump names ops its own way (``Functional.linear.3.forward``, module ``layers.0.attn.query``); an exported
program names them ``linear_3``, an ONNX export ``/layers.0/attn/query/Gemm``. Ops are matched in two passes:

1. **module + order**: within each module path, the dump's forward ops (in execution order) are aligned with
   the graph's units (the nodes of one framework call, in graph order) by a weighted longest common
   subsequence over their kinds: the same kind scores 3, a kind of the same family 1 (``linear`` and
   ``addmm``), and for ONNX each torch op scores the node types it becomes (``linear``: ``Gemm`` 3, ``Add`` 2,
   ``MatMul`` 1, so a bias-add is preferred over the matmul before it: the op's output is the add's).
2. **order**: what is left, over the whole graph, with the same kind only (method ``"order"``).

An op maps to its unit's last node (the node holding the call's output). Graphs whose node ids are op names
(GE graphs, nbprec's own graph) match by name. Backward ops, module calls (they are namespaces, see the roll-ups)
and ops of other steps or ranks are skipped with a reason; ops left unmatched are listed, never dropped.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from nbprec.graph.model_explorer_targets import TargetGraph, TargetNode

#: Largest ``ops x units`` of one alignment done exactly; larger ones are aligned greedily (noted).
EXACT_ALIGN_LIMIT = 400_000
_GREEDY_WINDOW = 64
_ALIASES = {
    "iadd": "add",
    "radd": "add",
    "isub": "sub",
    "rsub": "sub",
    "imul": "mul",
    "rmul": "mul",
    "truediv": "div",
    "itruediv": "div",
    "rtruediv": "div",
    "floordiv": "floor_divide",
    "rmatmul": "matmul",
    "ipow": "pow",
    "rpow": "pow",
    "safe_softmax": "softmax",
    "unsafe_view": "view",
    "to_copy": "to",
}
#: Kinds of one family: they may stand for each other (score 1).
TORCH_FAMILIES = (
    frozenset({"linear", "addmm", "mm", "matmul", "bmm", "baddbmm", "einsum"}),
    frozenset({"view", "reshape", "flatten", "view_as", "unflatten"}),
    frozenset({"transpose", "permute", "t", "swapaxes", "swapdims"}),
    frozenset({"getitem", "slice", "select", "index", "index_select", "narrow"}),
    frozenset({"layer_norm", "native_layer_norm"}),
    frozenset({"batch_norm", "native_batch_norm", "native_batch_norm_legit_no_training", "native_batch_norm_legit"}),
    frozenset({"group_norm", "native_group_norm"}),
    frozenset({"conv1d", "conv2d", "conv3d", "convolution", "conv_transpose2d"}),
    frozenset({"dropout", "native_dropout", "feature_dropout"}),
    frozenset({"to", "float", "half", "bfloat16", "double", "type", "type_as", "int", "long", "bool"}),
    frozenset({"contiguous", "clone"}),
    frozenset({"softmax", "log_softmax"}),
    frozenset({"scaled_dot_product_attention"})
    | {f"scaled_dot_product_{k}_attention" for k in ("flash", "efficient", "cudnn", "fused")},
)
#: torch op kind -> ONNX node types it becomes, scored (the type holding the op's output scores highest).
ONNX_SCORES: dict[str, dict[str, int]] = {
    "linear": {"Gemm": 3, "Add": 2, "MatMul": 1},
    "matmul": {"MatMul": 3, "Gemm": 2, "Einsum": 2},
    "bmm": {"MatMul": 3},
    "mm": {"MatMul": 3, "Gemm": 2},
    "addmm": {"Gemm": 3, "Add": 2, "MatMul": 1},
    "einsum": {"Einsum": 3, "MatMul": 1},
    "floor_divide": {"Floor": 2, "Div": 1},
    "gelu": {"Gelu": 3, "Mul": 1},
    "silu": {"Mul": 2, "Sigmoid": 1},
    "layer_norm": {"LayerNormalization": 3, "Add": 1},
    "rms_norm": {"RMSNormalization": 3, "SimplifiedLayerNormalization": 3, "Mul": 1},
    "group_norm": {"GroupNormalization": 3, "InstanceNormalization": 2, "Add": 1},
    "batch_norm": {"BatchNormalization": 3},
    "conv1d": {"Conv": 3},
    "conv2d": {"Conv": 3},
    "conv3d": {"Conv": 3},
    "conv_transpose2d": {"ConvTranspose": 3},
    "embedding": {"Gather": 3},
    "getitem": {"Slice": 3, "Gather": 2, "Squeeze": 1},
    "view": {"Reshape": 3, "Flatten": 2},
    "reshape": {"Reshape": 3, "Flatten": 2},
    "flatten": {"Flatten": 3, "Reshape": 3},
    "transpose": {"Transpose": 3},
    "permute": {"Transpose": 3},
    "t": {"Transpose": 3},
    "cat": {"Concat": 3},
    "stack": {"Concat": 2, "Unsqueeze": 1},
    "mean": {"ReduceMean": 3},
    "sum": {"ReduceSum": 3},
    "amax": {"ReduceMax": 3},
    "amin": {"ReduceMin": 3},
    "max": {"ReduceMax": 2, "Max": 2, "ArgMax": 1},
    "min": {"ReduceMin": 2, "Min": 2, "ArgMin": 1},
    "softmax": {"Softmax": 3},
    "log_softmax": {"LogSoftmax": 3},
    "dropout": {"Dropout": 3},
    "to": {"Cast": 3},
    "float": {"Cast": 3},
    "half": {"Cast": 3},
    "bfloat16": {"Cast": 3},
    "type": {"Cast": 3},
    "masked_fill": {"Where": 3},
    "rsqrt": {"Reciprocal": 2, "Sqrt": 1},
    "scaled_dot_product_attention": {"Attention": 3, "MatMul": 1},
    "pad": {"Pad": 3},
    "interpolate": {"Resize": 3},
    "max_pool2d": {"MaxPool": 3},
    "avg_pool2d": {"AveragePool": 3},
    "adaptive_avg_pool2d": {"GlobalAveragePool": 3, "AveragePool": 2},
}
_MODULE_CALL = "module call (a layer of the graph: see the module roll-ups)"
_FAMILY_OF = {kind: family for family in TORCH_FAMILIES for kind in family}


def normalize_kind(kind: str) -> str:
    """A framework op kind in a common spelling: ``__add__`` -> ``add``, ``add_`` -> ``add``, ``_softmax`` ->
    ``softmax``, ``_unsafe_view`` -> ``view``.

    Examples
    --------
    >>> normalize_kind("__iadd__"), normalize_kind("_unsafe_view"), normalize_kind("Tensor.add_")
    ('add', 'view', 'add')
    """
    kind = kind.rsplit(".", 1)[-1].strip("_").lower()
    return _ALIASES.get(kind, kind)


def kind_score(op_kind: str, node_kind: str, kinds: str) -> int:
    """How well a node of kind ``node_kind`` stands for an op of kind ``op_kind`` (0: it cannot).

    Examples
    --------
    >>> kind_score("linear", "linear", "torch"), kind_score("linear", "addmm", "torch")
    (3, 1)
    >>> kind_score("linear", "Add", "onnx"), kind_score("tanh", "Tanh", "onnx"), kind_score("relu", "Tanh", "onnx")
    (2, 3, 0)
    """
    if kinds == "onnx":
        table = ONNX_SCORES.get(op_kind)
        if table is not None and node_kind in table:
            return table[node_kind]
        return 3 if op_kind.replace("_", "") == node_kind.lower() else 0
    node_kind = normalize_kind(node_kind)
    if op_kind == node_kind:
        return 3
    family = _FAMILY_OF.get(op_kind)
    return 1 if family is not None and node_kind in family else 0


def align(
    op_kinds: list[str], unit_kinds: list[str], kinds: str, min_score: int = 1
) -> tuple[list[tuple[int, int]], bool]:
    """Pairs ``(op index, unit index)`` of a best-scoring order-preserving alignment, and whether it is exact.

    Examples
    --------
    >>> align(["linear", "gelu", "linear"], ["MatMul", "Add", "Gelu", "MatMul", "Add"], "onnx")
    ([(0, 1), (1, 2), (2, 4)], True)
    """
    n, m = len(op_kinds), len(unit_kinds)
    cache: dict[tuple[str, str], int] = {}

    def score(i: int, j: int) -> int:
        key = (op_kinds[i], unit_kinds[j])
        if key not in cache:
            s = kind_score(key[0], key[1], kinds)
            cache[key] = s if s >= min_score else 0
        return cache[key]

    if n == 0 or m == 0:
        return [], True
    if n * m > EXACT_ALIGN_LIMIT:
        pairs, j = [], 0
        for i in range(n):
            best, best_j = 0, -1
            for k in range(j, min(m, j + _GREEDY_WINDOW)):
                s = score(i, k)
                if s > best:
                    best, best_j = s, k
            if best_j >= 0:
                pairs.append((i, best_j))
                j = best_j + 1
        return pairs, False
    dp = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        row, prev = dp[i], dp[i - 1]
        for j in range(1, m + 1):
            best = prev[j] if prev[j] > row[j - 1] else row[j - 1]
            s = score(i - 1, j - 1)
            if s and prev[j - 1] + s > best:
                best = prev[j - 1] + s
            row[j] = best
    pairs = []
    i, j = n, m
    while i > 0 and j > 0:
        s = score(i - 1, j - 1)
        if s and dp[i][j] == dp[i - 1][j - 1] + s:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif dp[i - 1][j] == dp[i][j]:
            i -= 1
        else:
            j -= 1
    return pairs[::-1], True


@dataclass
class OpMatch:
    """Where the ops of a comparison land in a target graph.

    Attributes
    ----------
    nodes : dict
        op name -> the node it lands on (:class:`TargetNode`).
    method : dict
        op name -> ``"name"``, ``"module+order"`` or ``"order"``.
    unmatched : list of str
        Ops that should have a node but were given none, in execution order.
    skipped : dict
        Reason -> ops that have no node in this kind of graph by design (backward ops in a forward graph,
        module calls, other steps or ranks).
    notes : list of str
    """

    nodes: dict[str, TargetNode] = field(default_factory=dict)
    method: dict[str, str] = field(default_factory=dict)
    unmatched: list[str] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _units(nodes: list[TargetNode]) -> list[tuple[str, str, TargetNode]]:
    """(module, kind, output node) per unit, in graph order of the unit's output node."""
    last: dict[str, TargetNode] = {}
    singles = []
    for node in nodes:
        if not node.matchable:
            continue
        if node.unit:
            last[node.unit] = node  # nodes come in graph order: the last one holds the call's output
        else:
            singles.append(node)
    units = sorted([*last.values(), *singles], key=lambda n: n.order)
    return [(n.module, n.kind, n) for n in units]


def match_ops(ops: Any, target: TargetGraph) -> OpMatch:
    """Match the ops of ``ops`` (rows of ``Comparison.ops`` of one step and rank) to ``target``'s nodes."""
    from nbprec.graph.build import is_module_call

    result = OpMatch()
    names, modules, types, directions = (ops[c].astype(str).tolist() for c in ("op", "module", "op_type", "direction"))
    if target.by_name:
        first: dict[str, TargetNode] = {}
        for node in target.nodes:
            first.setdefault(node.id, node)
        for name in names:
            node = first.get(name)
            if node is not None:
                result.nodes[name], result.method[name] = node, "name"
            elif is_module_call(name):
                result.skipped.setdefault(_MODULE_CALL, []).append(name)
            else:
                result.unmatched.append(name)
        return result
    candidates: dict[str, list[tuple[str, str]]] = defaultdict(list)  # module -> [(op, kind)]
    for name, module, op_type, direction in zip(names, modules, types, directions, strict=True):
        if is_module_call(name):
            result.skipped.setdefault(_MODULE_CALL, []).append(name)
        elif direction == "backward":
            result.skipped.setdefault("backward op (the graph is the forward pass)", []).append(name)
        else:
            candidates[module].append((name, normalize_kind(op_type)))
    units = _units(target.nodes)
    by_module: dict[str, list[int]] = defaultdict(list)
    for k, (module, _, _) in enumerate(units):
        by_module[module].append(k)
    used: set[int] = set()
    inexact = []
    for module, members in candidates.items():
        unit_ids = by_module.get(module, [])
        pairs, exact = align([k for _, k in members], [units[u][1] for u in unit_ids], target.kinds)
        if not exact:
            inexact.append(module or "<top>")
        for i, j in pairs:
            result.nodes[members[i][0]] = units[unit_ids[j]][2]
            result.method[members[i][0]] = "module+order"
            used.add(unit_ids[j])
    rest = [(n, k) for members in candidates.values() for n, k in members if n not in result.nodes]
    if rest:
        order = {n: i for i, n in enumerate(names)}
        rest.sort(key=lambda item: order[item[0]])
        free = [k for k in range(len(units)) if k not in used]
        pairs, exact = align([k for _, k in rest], [units[u][1] for u in free], target.kinds, min_score=3)
        if not exact:
            inexact.append("the order pass")
        for i, j in pairs:
            result.nodes[rest[i][0]] = units[free[j]][2]
            result.method[rest[i][0]] = "order"
    result.unmatched = [n for members in candidates.values() for n, _ in members if n not in result.nodes]
    order = {n: i for i, n in enumerate(names)}
    result.unmatched.sort(key=order.__getitem__)
    if inexact:
        result.notes.append(
            f"aligned greedily (more than {EXACT_ALIGN_LIMIT:,} op x node pairs): {', '.join(inexact[:5])}"
        )
    return result
