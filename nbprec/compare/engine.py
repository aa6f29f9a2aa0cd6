"""The comparison run: open, match, measure every pair, and wrap the result in a :class:`Comparison`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from nbprec._progress import ProgressCallback
from nbprec.columns import Columns, group_codes, text_in
from nbprec.compare.comparison import Comparison
from nbprec.compare.culprit import random_by_call
from nbprec.compare.executors import Executor, Results, local_executor
from nbprec.compare.fusion import FusionMatcher, benchmark_key, wants_fusion
from nbprec.compare.matching import FusionHook, match_tensors, read_mapping
from nbprec.compare.metrics import (
    METRIC_COLUMNS,
    STAT_METRIC_COLUMNS,
    checksum_equal,
    statistics_metrics,
    tensor_metrics,
)
from nbprec.compare.rules import Rule, bench_magnitude, column, get_rule, one_run, running_precision
from nbprec.compare.tasks import ExtremeHints as _ExtremeHints
from nbprec.compare.tasks import PairTask
from nbprec.compare.workers import Job, batches, default_workers
from nbprec.dtypes import FLOAT_DTYPES
from nbprec.dump import Dump
from nbprec.errors import ComparisonError, NbprecError

CompareMode = Literal["auto", "tensor", "statistics", "checksum"]
MODES: tuple[str, ...] = ("auto", "tensor", "statistics", "checksum")

_STAT_KEYS = ("max", "min", "mean", "norm")


def _as_dump(source: Dump | str | os.PathLike[str], step: int | None, rank: int | None, graph: Any = None) -> Dump:
    from nbprec.formats import guess_format, open_dump

    if isinstance(source, Dump):
        dump = source
    elif graph is not None and guess_format(source) == "cann":  # the graph says each tensor's original layout
        dump = open_dump(source, format="cann", graph=graph)
    else:
        dump = open_dump(source)
    # a dump that records no step or rank (-1 throughout, as a TensorFlow dump) is not filtered by them
    step = None if dump.steps == [-1] else step
    rank = None if dump.ranks == [-1] else rank
    if step is not None or rank is not None:
        dump = dump.select(step=step, rank=rank)
    return dump


def _graph_model(graph: Any) -> Any:
    """The GE graph ``graph`` as a :class:`nbprec.graph.ge.GeModel` (read when a path), or None."""
    if graph is None:
        return None
    from nbprec.graph.ge import GeModel, read_ge_model

    return graph if isinstance(graph, GeModel) else read_ge_model(graph)


def _auto_fusion(t_dump: Dump, b_dump: Dump, graph_model: Any, notes: list[str]) -> FusionMatcher | None:
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


_BASE_COLUMNS = ("step", "rank", "order", "op", "op_type", "api", "module", "direction", "role", "slot")


def _take(values: np.ndarray, take: np.ndarray, missing: np.ndarray | None, fill: Any) -> np.ndarray:
    """``values[take]``, with ``fill`` where ``missing``."""
    out = values[take] if len(values) else np.full(len(take), fill, dtype=values.dtype)
    if missing is not None:
        out[missing] = fill
    return out


def _side(index: Columns, positions: np.ndarray, prefix: str) -> dict[str, Any]:
    """Columns describing one side of each pair ('' / None / NaN where the position is -1), by column name."""
    missing = positions < 0
    missing = missing if missing.any() else None
    take = np.where(positions >= 0, positions, 0)
    out: dict[str, Any] = {}
    out[f"{prefix}_name"] = _take(index["name"].astype(object), take, missing, "")
    for name in ("op", "dtype"):
        out[f"{prefix}_{name}"] = _take(index[name].astype(object), take, missing, "")
    out[f"{prefix}_shape"] = _take(index["shape"], take, missing, None)
    stats = {
        key: _take(column(index, key, np.float64), take, missing, np.nan)
        for key in (*_STAT_KEYS, "nan_count", "inf_count")
    }
    for key in _STAT_KEYS:
        out[f"{prefix}_{key}"] = stats[key]
    if (~np.isnan(column(index, "mean", np.float64))).any():  # the dump's own mean (a tensor comparison
        out[f"{prefix}_recorded_mean"] = stats["mean"].copy()  # replaces _mean with the payload's)
    checksums = index["checksum"]
    if len(checksums) and any(checksums.tolist()):  # what msprobe's md5 layout shows beside the verdict
        out[f"{prefix}_checksum"] = _take(checksums.astype(object), take, missing, "")
    nans, infs = stats["nan_count"], stats["inf_count"]
    counted = np.where(np.isnan(nans), 0.0, nans) + np.where(np.isnan(infs), 0.0, infs)
    from_stats = _nonfinite_statistics(index, take, stats)  # counts unknown: the statistics tell
    nonfinite = np.where(np.isnan(nans) & np.isnan(infs), from_stats.astype(np.float64), counted)
    if missing is not None:
        nonfinite[missing] = np.nan
    out[f"{prefix}_nonfinite"] = nonfinite
    return out


def _nonfinite_statistics(index: Columns, take: np.ndarray, stats: dict[str, np.ndarray]) -> np.ndarray:
    """Whether each tensor's recorded statistics say it holds NaN or inf.

    An infinite max/min/mean/norm always does; a NaN one does for a non-empty float tensor when the dump
    records that statistic (msprobe writes NaN for a tensor holding NaN; a statistic a dump never records is
    NaN everywhere and says nothing).
    """
    four = np.stack([stats[k] for k in _STAT_KEYS])
    infinite = np.isinf(four).any(axis=0)
    recorded = [k for k in _STAT_KEYS if (~np.isnan(column(index, k, np.float64))).any()]  # recorded at all
    if not recorded:
        return infinite
    floats = text_in(index["dtype"], FLOAT_DTYPES)[take] if len(index) else np.zeros(len(take), dtype=bool)
    numel = index["numel"][take] if len(index) else np.zeros(len(take))
    nan = np.stack([np.isnan(stats[k]) for k in recorded]).any(axis=0)
    return infinite | (nan & floats & (numel != 0))


def _nonfinite_reasons(reasons: np.ndarray, table: Columns, b_positions: np.ndarray) -> None:
    """Rows whose target holds NaN/inf where the benchmark is finite: that is the reason (the rule fails them),
    not a missing statistic."""
    target = np.nan_to_num(table["target_nonfinite"], nan=0.0) > 0
    bench = np.nan_to_num(table["bench_nonfinite"], nan=0.0) > 0
    for i in np.flatnonzero(target & ~bench & (b_positions >= 0)):
        old = str(reasons[i])
        generic = not old or old.startswith(("statistics missing", "neither payloads"))  # what NaN statistics cause
        kept = "" if generic else f"; {old}"
        reasons[i] = f"target has non-finite values{kept}"


#: How many of a dump's problems a comparison keeps as examples (all are counted).
PROBLEM_EXAMPLES = 20


def _problem_summary(dump: Dump) -> dict[str, Any]:
    """A dump's problems for the comparison's meta: how many, and the first few (file, record, problem)."""
    problems = dump.problem_list
    return {
        "count": len(problems),
        "examples": [
            {"file": str(p.file), "record": str(p.record), "problem": str(p.problem)}
            for p in problems[:PROBLEM_EXAMPLES]
        ],
    }


def _contradicted_statistics(reasons: np.ndarray, table: Columns, recorded: dict[str, np.ndarray]) -> None:
    """Rows whose dump records NaN/inf statistics while the payload read is finite: the statistics are wrong
    (a damaged or edited dump.json); the payload is what was judged, and the reason says so."""
    for side, label in (("target", "target"), ("bench", "benchmark")):
        said = np.nan_to_num(recorded[side], nan=0.0) > 0
        read = table[f"{side}_nonfinite"] == 0
        for i in np.flatnonzero(said & read):
            note = f"the {label} dump records non-finite statistics but its payload is finite: statistics not used"
            reasons[i] = f"{reasons[i]}; {note}" if reasons[i] else note


def _pair_table(t_idx: Columns, b_idx: Columns, pairs: Columns) -> Columns:
    """Both sides' names, ops, dtypes, shapes and statistics, and the target's op fields, a row per pair."""
    target = _side(t_idx, pairs["t"], "target")
    columns = {"target_name": target.pop("target_name"), "target_op": target.pop("target_op")}
    columns["match"] = pairs["match"]
    columns.update(target)
    columns.update(_side(b_idx, pairs["b"], "bench"))
    for name in _BASE_COLUMNS:
        columns[name] = t_idx[name]
    columns["numel"] = t_idx["numel"]
    return Columns(columns, len(pairs))


def _op_input_scale(table: Columns) -> np.ndarray:
    """Per row, the largest benchmark magnitude among its op's inputs (the scale rounding errors live at)."""
    is_input = text_in(table["role"], ("input", "parameter"))
    inputs = np.where(is_input, bench_magnitude(table), np.nan)
    if not len(inputs):
        return inputs
    if one_run(table):  # one step and rank: group by op
        codes, n_groups = group_codes(table["op"])
    else:
        codes, n_groups = group_codes(table["step"], table["rank"], table["op"])
    largest = np.full(n_groups, np.nan)
    np.fmax.at(largest, codes, inputs)  # fmax: NaN (not an input) is skipped, as groupby's max skips it
    return largest[codes]


def _mode_flags(index: Columns, take: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """(has a payload, has statistics, has a checksum) for each index row, or for the rows at ``take``."""
    flags = (
        index["has_data"].astype(bool),
        ~np.isnan(column(index, "max", np.float64)),
        np.array([bool(c) for c in index["checksum"].tolist()], dtype=bool),
    )
    if take is None:
        return flags
    return tuple(f[take] if len(f) else np.zeros(len(take), dtype=bool) for f in flags)


def _choose_modes(
    mode: CompareMode, t_idx: Columns, b_idx: Columns, b_pos: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(compare mode, reason) arrays, a row per target tensor (``b_pos``: its benchmark position or -1)."""
    n = len(t_idx)
    matched = b_pos >= 0
    t_data, t_stats, t_sums = _mode_flags(t_idx)
    b_data, b_stats, b_sums = _mode_flags(b_idx, np.where(matched, b_pos, 0))
    both_data, both_stats, both_sums = t_data & b_data & matched, t_stats & b_stats & matched, t_sums & b_sums & matched
    modes = np.full(n, "none", dtype=object)
    reasons = np.full(n, "", dtype=object)
    if mode in ("tensor", "auto"):
        modes[both_data] = "tensor"
    if mode == "tensor":
        missing = np.where(t_data, "benchmark", "target")
        reasons[~both_data] = [
            f"no payload on the {side} side (statistics or checksum dump?)" for side in missing[~both_data]
        ]
    if mode in ("statistics", "auto"):
        modes[(modes == "none") & both_stats] = "statistics"
    if mode == "statistics":
        reasons[~both_stats] = "statistics missing on one side"
    if mode in ("checksum", "auto"):
        modes[(modes == "none") & both_sums] = "checksum"
    if mode == "checksum":
        reasons[~both_sums] = "checksum missing on one side"
    if mode == "auto":
        reasons[modes == "none"] = "neither payloads, statistics nor checksums are available on both sides"
    modes[~matched] = "none"
    reasons[~matched] = "no benchmark counterpart"
    return modes, reasons


def _recorded_problems(reasons: np.ndarray, modes: np.ndarray, dump: Dump, side: str) -> None:
    """Rows left uncompared whose tensor the reader recorded a problem for: that problem is the reason (an NPU
    tensor whose declared size does not match its shape says so, not "no payload")."""
    problems = dump.problem_list
    if not problems or not (modes == "none").any():
        return
    by_name = {p.record: p.problem for p in problems if p.record}
    if not by_name:
        return
    names = dump.columns["name"]
    for i in np.flatnonzero(modes == "none"):
        problem = by_name.get(names[i])
        if problem is not None and reasons[i] != "no benchmark counterpart":
            reasons[i] = f"{side} tensor unreadable: {problem}"


def _measure(
    job: tuple[int, str, Mapping[str, Any], Mapping[str, Any]], t_dump: Dump, b_dump: Dump, hints: _ExtremeHints
) -> tuple[int, dict[str, Any], str]:
    i, mode, t_row, b_row = job
    try:
        if mode == "tensor":
            extremes = hints.extremes(t_row, b_row)
            result = tensor_metrics(t_dump.tensor(t_row), b_dump.tensor(b_row), extremes=extremes)
            hints.record(result.extremes_held)
            found = dict(result.values)
            if result.nonfinite is not None:  # the payloads' own NaN/inf counts override what statistics said
                found["target_nonfinite"], found["bench_nonfinite"] = map(float, result.nonfinite)
            return i, found, result.reason
        if mode == "statistics":
            t_stats = {k: t_row[k] for k in _STAT_KEYS}
            b_stats = {k: b_row[k] for k in _STAT_KEYS}
            result = statistics_metrics(t_stats, b_stats)
            return i, dict(result.values), result.reason
        equal = checksum_equal(str(t_row["checksum"]), str(b_row["checksum"]))
        return i, {"checksum_match": equal}, "" if equal is not None else "checksums not comparable"
    except NbprecError as exc:
        return i, {}, f"could not read: {exc}"
    except (MemoryError, ValueError, TypeError) as exc:
        return i, {}, f"could not compare: {type(exc).__name__}: {exc}"


def _executor(executor: Executor | None, client: Any, parallel: str, workers: int | None) -> Executor | None:
    """The executor asked for (``executor=``, or a Dask ``client=``), checked; ``None``: a local one, chosen
    once the work is known (:func:`nbprec.compare.executors.local_executor`)."""
    if parallel not in ("auto", "processes", "threads"):
        raise ComparisonError(f"unknown parallel {parallel!r}; use auto, processes or threads")
    if client is not None and executor is not None:
        raise ComparisonError("pass client= (a Dask cluster) or executor=, not both")
    if client is not None:
        from nbprec.compare.dask_executor import DaskExecutor

        return DaskExecutor(client)
    if executor is not None and not isinstance(executor, Executor):
        raise ComparisonError(f"executor must be an nbprec.compare.executors.Executor, not {type(executor).__name__}")
    return executor


def _start(
    jobs: list[Job], task: PairTask, numel: np.ndarray, run_on: Executor, progress: ProgressCallback | None
) -> Results:
    """Batch the jobs for ``run_on`` and start measuring them (workers start at once); iterating the result
    yields the measurements. Close it when done (or on error), and wait for it once they are used."""
    groups = task.groups() if run_on.limits is not None and run_on.limits.by_rank else None
    run = run_on.submit_batches(batches(jobs, numel, run_on.limits, run_on.slots, groups), task)
    return Results(run, len(jobs), progress)


def compare(
    target: Dump | str | os.PathLike[str],
    bench: Dump | str | os.PathLike[str],
    *,
    rule: str | Rule | None = None,
    mode: CompareMode = "auto",
    mapping: str | os.PathLike[str] | Any = None,
    fusion: FusionHook | None = None,
    graph: str | os.PathLike[str] | Any = None,
    by_order: bool = True,
    step: int | None = None,
    rank: int | None = None,
    workers: int | None = None,
    parallel: Literal["auto", "processes", "threads"] = "auto",
    progress: ProgressCallback | bool | None = None,
    client: Any = None,
    executor: Executor | None = None,
) -> Comparison:
    """Compare a target dump with a benchmark dump, tensor by tensor.

    Parameters
    ----------
    target, bench
        Dumps, or paths that :func:`nbprec.open` reads (any supported format on either side).
    rule
        A preset name (``"default"``, ``"cann"``, ``"msprobe"``, ``"precision_tool"``, ``"ptdbg"``) or a
        :class:`~nbprec.compare.rules.Rule`. ``None`` means the dtype-aware default.
    mode
        ``"auto"`` compares payloads when both sides have them, else statistics, else checksums;
        ``"tensor"``, ``"statistics"`` or ``"checksum"`` force one.
    mapping
        A user mapping (CSV/YAML path or DataFrame with ``target``/``bench`` columns) applied before any
        automatic matching.
    fusion
        A fusion-record hook (see :mod:`nbprec.compare.matching`). For an Ascend NPU target (a CANN dump) a
        :class:`~nbprec.compare.fusion.FusionMatcher` is made automatically: from ``graph`` when given, else
        from a ``ge_proto_*_Build`` graph found in the dump's folder, else from the dump's own ``original_op``
        records (outputs only).
    graph
        The executed GE graph of the target run (``ge_proto_*_Build.txt`` or its JSON form, a path or a
        :class:`nbprec.graph.ge.GeModel`): fusion records for matching, original layouts for reading.
    by_order
        Align op streams by order for ops that names do not match.
    step, rank
        Restrict both dumps to one step / rank.
    workers
        Parallel workers measuring pairs (default: the usable cores, at most 2; 1 measures in this thread).
        Memory stays bounded by a few tensors per worker.
    parallel
        How ``workers > 1`` run. ``"threads"``: threads; the compiled kernel releases the GIL while it
        measures a pair, so they run in parallel (with the numpy kernel they contend for the GIL).
        ``"processes"``: this process and ``workers - 1`` forked ones, which inherit the opened dumps (Linux;
        elsewhere this thread). Processes also run the per-pair Python in parallel, so they win on many small
        tensors.
        ``"auto"`` (default): processes when the pairs are worth it (about 0.05 s of work or more) and this
        process runs a single thread (forking a threaded process can copy a held lock: in a notebook, threads);
        otherwise threads with the compiled kernel (:data:`nbprec.compare.metrics.KERNEL`), else this thread.
    progress
        ``True`` for a progress bar on stderr (with ``client=`` in a notebook: Dask's progress widget), or a
        callback ``(done, total)`` (pairs measured, pairs to measure).
    client
        A ``distributed.Client``: the pairs are measured on its Dask cluster, in batches of one step and rank
        whose workers read the payloads from the dumps' paths (they must see the same files at the same
        paths); ``workers`` and ``parallel`` are then not used. The results are those of a local run.
    executor
        Another :class:`nbprec.compare.executors.Executor` to measure the pairs on (for example a
        :class:`~nbprec.compare.executors.FuturesExecutor` over a process pool).

    Returns
    -------
    Comparison

    Examples
    --------
    >>> comp = nbprec.compare("runs/fp16", "runs/fp32")   # doctest: +SKIP
    >>> comp.first_failing_op()                            # doctest: +SKIP
    """
    the_rule = get_rule(rule)  # arguments first: a typo is reported before any dump is opened
    if mode not in MODES:
        raise ComparisonError(f"unknown mode {mode!r}; use auto, tensor, statistics or checksum")
    run_on = _executor(executor, client, parallel, workers)
    graph_model = _graph_model(graph)
    t_dump = _as_dump(target, step, rank, graph_model)
    b_dump = _as_dump(bench, step, rank)
    if isinstance(mapping, (str, os.PathLike)):
        mapping = read_mapping(Path(mapping))
    fusion_notes: list[str] = []
    if fusion is None:
        fusion = _auto_fusion(t_dump, b_dump, graph_model, fusion_notes)
    t_idx, b_idx = t_dump.columns, b_dump.columns
    matched = match_tensors(t_idx, b_idx, mapping=mapping, fusion=fusion, by_order=by_order)
    pairs = matched.pairs
    n_rows = len(t_idx)

    b_positions = pairs["b"]
    modes, reasons = _choose_modes(mode, t_idx, b_idx, b_positions)
    _recorded_problems(reasons, modes, t_dump, "target")
    jobs = [(i, modes[i], i, int(b_positions[i])) for i in np.flatnonzero(modes != "none").tolist()]

    numel = np.nan_to_num(column(t_idx, "numel", np.float64), nan=0.0)
    if run_on is None:
        run_on = local_executor(parallel, workers if workers is not None else default_workers(), jobs, numel)
    if progress is True:
        progress = run_on.progress_bar("comparing")
    # the workers (threads, processes, a cluster) start measuring here; the table is built meanwhile
    results = _start(jobs, PairTask(_measure, t_dump, b_dump), numel, run_on, progress or None)

    try:  # while the workers measure: everything that does not need a metric
        table = _pair_table(t_idx, b_idx, pairs)
        table["precision"] = running_precision(table)
        # the module call enclosing each op (the target's hierarchy): modules that enclose a failure are told
        # from the op inside them that caused it
        hierarchy = t_dump.hierarchy
        ops_column = table["op"].tolist()
        table["parent"] = np.array([hierarchy.get(op) or "" for op in ops_column] if hierarchy else [""] * n_rows,
                                   dtype=object)  # fmt: skip
        calls = t_dump.calls
        if calls:  # a dropout that was on (or off) by its arguments: random (or not) whatever its type says
            by_op = {op: random_by_call(kind, calls.get(op)) for op, kind in zip(ops_column, table["op_type"].tolist(),
                                                                                 strict=True)}  # fmt: skip
            random_call = np.empty(n_rows, dtype=object)
            random_call[:] = [by_op[op] for op in ops_column]
            table["random_call"] = random_call
        table["op_input_scale"] = _op_input_scale(table)
        unmatched_bench = b_idx.take(matched.unmatched_bench)
        meta = {
            "problems": {side: _problem_summary(d) for side, d in (("target", t_dump), ("bench", b_dump))},
            "target": str(t_dump.path),
            "bench": str(b_dump.path),
            "target_format": t_dump.format,
            "bench_format": b_dump.format,
            "mode": mode,
            "coverage": matched.coverage(),
        }
        if isinstance(fusion, FusionMatcher):
            ops_array = table["op"].astype(object)
            table["ground_truth"] = np.asarray(fusion.ground_truth(ops_array), dtype=object)
            table["relation"] = np.asarray(fusion.relations(ops_array), dtype=object)
            table["fusion_pass"] = np.asarray(fusion.passes(ops_array), dtype=object)
            absorbed = {benchmark_key(k): v for k, v in fusion.absorbed.items()}
            fused_away = {
                str(name): absorbed[key]
                for name, key in zip(
                    unmatched_bench["name"].tolist(), map(benchmark_key, unmatched_bench["op"].tolist()), strict=True
                )
                if key in absorbed
            }
            meta["fusion"] = {"graph": fusion.source, "notes": fusion_notes + fusion.notes, "fused_away": fused_away}
        measured_columns = (*METRIC_COLUMNS, *STAT_METRIC_COLUMNS, "target_nonfinite", "bench_nonfinite")
        values: dict[str, np.ndarray] = {c: np.full(n_rows, np.nan) for c in measured_columns}
        checksum_match = np.full(n_rows, None, dtype=object)
        for i, result, reason in results:
            for key, value in result.items():
                if key == "checksum_match":
                    checksum_match[i] = value
                elif key in values:
                    values[key][i] = value
            if reason:
                reasons[i] = reason
                if reason.startswith(("could not", "element count")):
                    modes[i] = "none" if not result else modes[i]
    finally:
        results.close()

    try:  # forked workers exit (results.wait() waits for them) while the table is assembled and judged
        recorded_nonfinite = {side: table[f"{side}_nonfinite"].copy() for side in ("target", "bench")}
        table["compare_mode"] = modes
        for name, arr in values.items():
            if name in table:  # target_mean/bench_mean: keep the index statistics where no payload was read
                table[name] = np.where(np.isnan(arr), table[name], arr)
            elif not np.isnan(arr).all() or name in METRIC_COLUMNS:
                table[name] = arr
        table["checksum_match"] = checksum_match
        _nonfinite_reasons(reasons, table, b_positions)
        _contradicted_statistics(reasons, table, recorded_nonfinite)
        table["reason"] = reasons
        return Comparison(table, unmatched_bench=unmatched_bench, rule=the_rule, meta=meta)
    finally:
        results.wait()
