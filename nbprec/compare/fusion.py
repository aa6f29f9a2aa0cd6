"""Fusion-aware matching: NPU ops (fused by the graph engine) to the framework ops of a benchmark run.

On an Ascend NPU the graph engine fuses framework ops (``Conv2D`` + ``BiasAdd`` + ``Relu`` become one op) and
inserts its own (``TransData``, ``Cast``), so names alone match little. The fusion records say what each NPU
tensor stands for (FORMATS.md section 4):

- an NPU op's **output** ``k`` equals the benchmark tensor named by the output's origin record
  (``_datadump_origin_name`` + ``_datadump_origin_output_index`` in the GE graph, or the dump's own
  ``original_op``); with no record, the op's single original op's output ``k``, or the op's own name;
- its **input** ``k`` equals the output of its producer in the graph (``input: "src:idx"``), followed up
  through ``Cast`` and ``TransData`` producers, and then mapped as that producer's output.

Benchmark names are compared after TensorFlow's file-name rule (every character outside ``[A-Za-z0-9_-]``
becomes ``_``), so ``scope/op`` in a graph meets ``scope_op.0.<ts>.npy`` in a TensorFlow dump. One benchmark
tensor may stand for several NPU tensors (an op's input and its producer's output). Each NPU op gets a
``ground_truth`` (its original ops, joined by ``,``; ``*`` when it has no counterpart, as msaccucmp writes)
and a ``relation``: ``one-to-one``, ``many-to-one`` (several framework ops fused into it), ``one-to-many`` (a
framework op split over several NPU ops), ``many-to-many``, or ``""`` without counterpart.

Examples
--------
>>> matcher = FusionMatcher.from_graph("ge_proto_00000001_Build.txt")        # doctest: +SKIP
>>> comp = nbprec.compare("npu_dump/", "tf_dump/", fusion=matcher)           # doctest: +SKIP
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nbprec.columns import Columns

#: The fusion matcher's ``source`` without a GE graph: outputs matched through the dump's ``original_op`` records.
FROM_DUMP_RECORDS = "dump original_op records"

if TYPE_CHECKING:
    from nbprec.dump import Dump

#: Producers an input is followed through to reach the op whose output the benchmark holds.
PASS_THROUGH_TYPES = frozenset({"Cast", "TransData", "TransDataRNN", "TransDataV2"})
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_HOPS = 64


def benchmark_key(name: str) -> str:
    """A framework op name as TensorFlow dump files spell it (``scope/op.x`` -> ``scope_op_x``)."""
    return _UNSAFE.sub("_", str(name))


class FusionMatcher:
    """Pairs NPU tensors with benchmark tensors through fusion records; pass it as ``compare(fusion=...)``.

    Parameters
    ----------
    graph
        The executed GE graph (a :class:`nbprec.graph.ge.GeModel`), or None to use the NPU dump's own
        ``original_op`` records (outputs only: without a graph, inputs have no known producer).
    """

    def __init__(self, graph: Any = None) -> None:
        from nbprec.formats.cann_tree import safe_name

        self.graph = graph
        self.source = str(getattr(graph, "path", "") or "") if graph is not None else FROM_DUMP_RECORDS
        self._ops: dict[str, Any] = {op.name: op for op in graph.ops} if graph is not None else {}
        # a dump file without op_name in its header has only its file name's sanitised op name
        sanitised: dict[str, list[str]] = {}
        for name in self._ops:
            sanitised.setdefault(safe_name(name), []).append(name)
        self._alias = {safe: names[0] for safe, names in sanitised.items() if len(names) == 1}
        self._owners: dict[str, int] = {}  # framework op -> how many NPU ops name it as their only original
        for op in self._ops.values():
            names = [n for n in op.original_op_names if n]
            if len(names) == 1:
                self._owners[names[0]] = self._owners.get(names[0], 0) + 1
        self._ground_truth: dict[str, tuple[str, ...]] = {}
        #: framework op -> the NPU op it was fused into (for ops fused with others), after a call
        self.absorbed: dict[str, str] = {}
        self.notes: list[str] = []
        problems = list(getattr(graph, "problems", None) or ())
        if problems:  # inputs naming missing ops, duplicate names: matching goes on, the user is told
            shown = "; ".join(problems[:3]) + (f"; ... ({len(problems) - 3} more)" if len(problems) > 3 else "")
            self.notes.append(f"the GE graph has {len(problems)} problem(s): {shown}")

    @classmethod
    def from_graph(cls, path: str | Path) -> FusionMatcher:
        """A matcher for the GE graph at ``path`` (protobuf text or JSON)."""
        from nbprec.graph.ge import read_ge_model

        return cls(read_ge_model(path))

    # -- mapping -----------------------------------------------------------------------------------
    def _op(self, name: str) -> Any:
        """The graph op called ``name``, or whose name a dump file's sanitised one stands for; None if none."""
        op = self._ops.get(name)
        return op if op is not None else self._ops.get(self._alias.get(name, ""))

    def _origin_of_output(
        self, op: str, slot: int, recorded: Mapping[tuple[str, int], tuple[str, int]], depth: int = 0
    ) -> tuple[str, int]:
        """(framework op, output index) that NPU op ``op``'s output ``slot`` equals."""
        ge_op = self._op(op)
        if ge_op is not None and slot < len(ge_op.output_descs):
            desc = ge_op.output_descs[slot]
            if desc.origin_name:
                index = desc.origin_output_index
                return desc.origin_name, int(index) if index is not None and index >= 0 else slot
        if (op, slot) in recorded:
            return recorded[op, slot]
        originals = list(getattr(ge_op, "original_op_names", None) or ())
        if len(originals) == 1 and originals[0] and self._owners.get(originals[0], 0) == 1:
            return originals[0], slot  # the only NPU op made of that framework op (else: split, see relations)
        if ge_op is not None and ge_op.type in PASS_THROUGH_TYPES and depth < _MAX_HOPS:
            # an inserted Cast / TransData holds its input's values (in another dtype or layout)
            producer = self._producer(op, 0)
            if producer is not None:
                return self._origin_of_output(*producer, recorded, depth + 1)
        return op, slot

    def _producer(self, op: str, slot: int) -> tuple[str, int] | None:
        """The (op, output index) feeding input ``slot`` of ``op``, through Cast / TransData; None if unknown."""
        ge_op = self._op(op)
        if ge_op is None:
            return None
        # the dump holds data inputs only: control inputs (-1) and unused optional ones ("") carry no tensor
        inputs = [i for i in ge_op.inputs if i.is_data]
        if slot >= len(inputs):
            return None
        src, index = inputs[slot]
        for _ in range(_MAX_HOPS):
            producer = self._op(src)
            if producer is None or producer.type not in PASS_THROUGH_TYPES:
                break
            data = [i for i in producer.inputs if i.is_data]
            if not data:
                break
            src, index = data[0]
        return src, int(index)

    #: ``match_tensors`` may hand this hook the indexes as :class:`~nbprec.columns.Columns` (no pandas frames).
    takes_columns = True

    def __call__(self, target: Any, bench: Any) -> Columns:
        """Pairs of positions (columns ``t``, ``b``) of target and benchmark index rows (``Dump.columns`` or
        ``Dump.index`` DataFrames), as :class:`~nbprec.columns.Columns` (no pandas)."""
        b_steps, b_ranks = bench["step"].tolist(), bench["rank"].tolist()
        b_keys: dict[tuple[int, int, str, str], int] = {}
        for pos, (step, rank, op, slot, role) in enumerate(
            zip(b_steps, b_ranks, bench["op"].tolist(), bench["slot"].tolist(), bench["role"].tolist(), strict=True)
        ):
            if role in ("output", "gradient"):
                b_keys.setdefault((step, rank, benchmark_key(op), str(slot)), pos)
        # one step and rank in the benchmark (a TensorFlow dump of one step): every target step meets it
        single = (b_steps[0], b_ranks[0]) if b_steps and len(set(b_steps)) == 1 and len(set(b_ranks)) == 1 else None
        recorded = _recorded_origins(target)
        t_list, b_list = [], []
        originals: dict[str, set[str]] = {}
        columns = ("step", "rank", "op", "role", "slot")
        for pos, (step, rank, op, role, slot) in enumerate(zip(*(target[c].tolist() for c in columns), strict=True)):
            try:
                k = int(slot)
            except ValueError:
                continue
            if role in ("output", "gradient"):
                origin = self._origin_of_output(op, k, recorded)
            else:
                producer = self._producer(op, k)
                origin = None if producer is None else self._origin_of_output(*producer, recorded)
            if origin is None:
                continue
            key_step, key_rank = single if single is not None else (step, rank)
            b = b_keys.get((key_step, key_rank, benchmark_key(origin[0]), str(origin[1])))
            if b is None:
                continue
            t_list.append(pos)
            b_list.append(b)
            inserted = getattr(self._op(op), "type", "") in PASS_THROUGH_TYPES
            if role in ("output", "gradient") and not inserted:  # an inserted op stands for no framework op
                originals.setdefault(op, set()).add(origin[0])
        self._ground_truth = self._originals(originals)
        self.absorbed = {name: op for op, names in self._ground_truth.items() if len(names) > 1 for name in names}
        return Columns({"t": np.array(t_list, dtype=np.int64), "b": np.array(b_list, dtype=np.int64)}, len(t_list))

    def _originals(self, matched: Mapping[str, set[str]]) -> dict[str, tuple[str, ...]]:
        """Each NPU op's original framework ops: the graph's fusion record (matched or not), else the origins
        its outputs were matched through."""
        out: dict[str, tuple[str, ...]] = {}
        for op, origins in matched.items():
            recorded = tuple(n for n in getattr(self._op(op), "original_op_names", ()) if n)
            out[op] = recorded or tuple(sorted(origins))
        covered = {getattr(self._op(op), "name", op) for op in out}
        for op, ge_op in self._ops.items():  # unmatched NPU ops keep the graph's record
            recorded = tuple(n for n in ge_op.original_op_names if n)
            if recorded and op not in covered and ge_op.type not in PASS_THROUGH_TYPES:
                out[op] = recorded
        return out

    # -- per-op facts for the comparison table -----------------------------------------------------
    def _truth(self, op: str) -> tuple[str, ...]:
        found = self._ground_truth.get(op)
        return found if found is not None else self._ground_truth.get(self._alias.get(op, ""), ())

    def ground_truth(self, ops: Iterable[str]) -> list[str]:
        """For each NPU op, its original ops joined by ``,`` (``*`` when none matched)."""
        return [",".join(self._truth(op)) or "*" for op in ops]

    def passes(self, ops: Iterable[str]) -> list[str]:
        """For each NPU op, the fusion pass(es) that made it (``""`` when not fused or without a graph)."""
        return [getattr(self._op(op), "pass_name", "") or "" for op in ops]

    def relations(self, ops: Iterable[str]) -> list[str]:
        """For each NPU op: ``one-to-one``, ``many-to-one``, ``one-to-many``, ``many-to-many`` or ``""``."""
        claimed: dict[str, int] = {}
        for names in self._ground_truth.values():
            for name in names:
                claimed[name] = claimed.get(name, 0) + 1
        out = []
        for op in ops:
            names = self._truth(op)
            if not names:
                out.append("")
                continue
            many_npu = any(claimed[n] > 1 for n in names)
            many_framework = len(names) > 1
            out.append(
                {(False, False): "one-to-one", (True, False): "many-to-one", (False, True): "one-to-many"}.get(
                    (many_framework, many_npu), "many-to-many"
                )
            )
        return out


def _recorded_origins(target: Any) -> dict[tuple[str, int], tuple[str, int]]:
    """(NPU op, output slot) -> (framework op, output index) from a CANN dump's ``original_op`` columns."""
    if "origin_name" not in target.columns:
        return {}
    columns = ("op", "slot", "origin_name", "origin_index", "role")
    return {
        (op, int(slot)): (name, int(index) if index >= 0 else int(slot))
        for op, slot, name, index, role in zip(*(target[c].tolist() for c in columns), strict=True)
        if name != "" and role in ("output", "gradient")
    }


def wants_fusion(index: Any) -> bool:
    """Whether a target dump carries fusion records of its own (a CANN dump with ``original_op`` entries)."""
    return "origin_name" in index.columns and bool((index["origin_name"] != "").any())


def read_graph_model(graph: Any) -> Any:
    """The GE graph ``graph`` as a :class:`nbprec.graph.ge.GeModel` (read when a path), or None."""
    if graph is None:
        return None
    from nbprec.graph.ge import GeModel, read_ge_model

    return graph if isinstance(graph, GeModel) else read_ge_model(graph)


def automatic_fusion(t_dump: Dump, b_dump: Dump, graph_model: Any, notes: list[str]) -> FusionMatcher | None:
    """The fusion matcher an NPU target needs without being asked: from ``graph_model``, a Build graph in
    the dump's folder, or the dump's own origin records; None for other targets, and for an NPU benchmark
    (two NPU runs share their op names)."""
    if graph_model is not None:
        return FusionMatcher(graph_model)
    if t_dump.format != "cann" or b_dump.format == "cann":
        return None
    builds = [g for g in t_dump.meta.get("ge_graphs", []) if "_build" in Path(g).name.lower()]
    if len(builds) == 1:
        notes.append(f"fusion records and producers from the graph found in the dump: {builds[0]}")
        return FusionMatcher.from_graph(builds[0])
    if len(builds) > 1:
        notes.append(f"{len(builds)} Build graphs in the dump folder; none used (pass graph= to choose one)")
    if wants_fusion(t_dump.columns):
        notes.append("no GE graph: outputs matched through the dump's original_op records; inputs unmatched")
        return FusionMatcher(None)
    return None


__all__ = [
    "PASS_THROUGH_TYPES",
    "FusionMatcher",
    "automatic_fusion",
    "benchmark_key",
    "read_graph_model",
    "wants_fusion",
]
