"""The comparison run: open, match, measure every pair, and wrap the result in a :class:`Comparison`."""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from nbprec._gc import paused_gc, spare
from nbprec._progress import ProgressCallback
from nbprec.compare import early
from nbprec.compare.carried_noise import carried_noise_scale
from nbprec.compare.comparison import Comparison
from nbprec.compare.culprit import random_calls
from nbprec.compare.early_meeting import MeetingExecutor, measured, start_for_call
from nbprec.compare.executors import Executor, Results, ThreadExecutor, local_executor, requested_executor
from nbprec.compare.fusion import FusionMatcher, automatic_fusion, benchmark_key, read_graph_model
from nbprec.compare.matching import FusionHook, match_tensors, read_mapping
from nbprec.compare.metrics import METRIC_COLUMNS, STAT_METRIC_COLUMNS, tensor_metrics
from nbprec.compare.pair_table import (
    CompareMode,
    checksum_pairs,
    choose_modes,
    contradicted_statistics,
    fill_checksums,
    fill_results,
    fill_statistics,
    noise_reasons,
    nonfinite_reasons,
    op_codes,
    op_input_scale,
    pair_table,
    recorded_problems,
    statistics_pairs,
)
from nbprec.compare.rules import Rule, column, get_rule, running_precision
from nbprec.compare.small_pairs import RECENT, Item, Measured, mapped_pair, small_pair, small_pairs
from nbprec.compare.tasks import ExtremeHints as _ExtremeHints
from nbprec.compare.tasks import PairTask, RowJob
from nbprec.compare.workers import Job, Result, batches, default_workers, in_turns
from nbprec.dump import Dump
from nbprec.errors import ComparisonError, NbprecError
from nbprec.formats._files import forget_ahead, read_ahead

MODES: tuple[str, ...] = ("auto", "tensor", "statistics", "checksum")


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


#: Results put into the table's columns at a time (a column each, rather than a value each).
_RESULT_BATCH = 4096


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


def _measure(
    job: RowJob, t_dump: Dump, b_dump: Dump, hints: _ExtremeHints, small: bool = True, wait: bool = True
) -> Result | None:
    """The metric values of one tensor job (a pair of payloads), and why one is missing ('' if none is);
    ``small=False``: not by :func:`~nbprec.compare.small_pairs.small_pair` (the caller found that it gives nothing
    for this pair). ``wait=False``: None for a small pair whose payloads are not all in the page cache yet (see
    :func:`_measure_cached_first`). Pairs compared by statistics or checksums never come here:
    :func:`~nbprec.compare.pair_table.statistics_pairs` and :func:`~nbprec.compare.pair_table.checksum_pairs`
    compare them all at once."""
    i, mode, t_row, b_row = job
    if mode != "tensor":
        raise ComparisonError(f"internal: a {mode} pair was handed to a worker; such pairs are compared at once")
    try:
        extremes = hints.extremes(t_row, b_row)
        item = _small_item(t_dump, b_dump, t_row, b_row, extremes) if small else None
        measured = small_pair(*item[0], item[1], wait=wait) if item is not None else None
        if measured is None and item is None:
            mapped = _mapped_item(t_dump, b_dump, t_row, b_row, extremes)
            measured = mapped_pair(mapped, wait=wait) if mapped is not None else None
        if measured is False:
            return None
        if measured is not None:  # the usual pair, measured without making its arrays
            return _small_result(i, measured, hints)
        result = tensor_metrics(t_dump.tensor(t_row), b_dump.tensor(b_row), extremes=extremes)
        hints.record(result.extremes_held)
        found = result.values  # (made for this call: extended in place)
        if result.nonfinite is not None:  # the payloads' own NaN/inf counts override what statistics said
            found["target_nonfinite"], found["bench_nonfinite"] = map(float, result.nonfinite)
        return i, found, result.reason
    except NbprecError as exc:
        return i, {}, f"could not read: {exc}"
    except (MemoryError, ValueError, TypeError) as exc:
        return i, {}, f"could not compare: {type(exc).__name__}: {exc}"


def _counting_from(progress: ProgressCallback, done: int) -> ProgressCallback:
    """``progress`` fed the pairs measured before the workers started (``done``) besides theirs."""

    def report(measured: int, total: int) -> None:
        progress(done + measured, done + total)

    return report


def _small_item(
    t_dump: Dump, b_dump: Dump, t_row: Mapping[str, Any], b_row: Mapping[str, Any], extremes: tuple | None
) -> tuple[Item, str] | None:
    """(the :func:`~nbprec.compare.small_pairs.small_pair` arguments, the payloads' kind) of a job whose payloads
    both dumps' loaders read whole (:func:`_read_whole`: msprobe's ``.pt`` archives or nbprec's ``.npy`` files);
    None for any other job (measured by :func:`tensor_metrics` on its arrays, with the same result where both
    apply). ``extremes``: the usable recorded ones, or None."""
    kind = _read_whole(t_dump, b_dump, t_row, b_row)
    if kind is None:
        return None
    item = (str(t_row["file"]), t_row["dtype"], str(b_row["file"]), b_row["dtype"], tuple(t_row["shape"]), extremes)
    return item, kind


def _mapped_item(
    t_dump: Dump, b_dump: Dump, t_row: Mapping[str, Any], b_row: Mapping[str, Any], extremes: tuple | None
) -> Item | None:
    """The :func:`~nbprec.compare.small_pairs.mapped_pair` argument of a job of msprobe ``.pt`` payloads of one shape
    that both dumps' loaders read whole (``reads_whole``) or map (``reads_mapped``), one side mapped at least: the
    pair measured from the mapped bytes in the one kernel call :func:`tensor_metrics` makes on their arrays (the
    same values), without the arrays (nor ``ml_dtypes``, for bfloat16 ones). None for any other job."""
    t_loader, b_loader = t_dump._loader, b_dump._loader
    t_mapped, b_mapped = getattr(t_loader, "reads_mapped", None), getattr(b_loader, "reads_mapped", None)
    if t_mapped is None or b_mapped is None:  # (msprobe's loader only)
        return None
    if not _both_payloads(t_row, b_row):
        return None
    t_map, b_map = t_mapped(t_row), b_mapped(b_row)
    if not (t_map or b_map) or not (t_map or t_loader.reads_whole(t_row)) or not (b_map or b_loader.reads_whole(b_row)):
        return None
    return str(t_row["file"]), t_row["dtype"], str(b_row["file"]), b_row["dtype"], tuple(t_row["shape"]), extremes


def _small_result(i: int, measured: Measured, hints: _ExtremeHints) -> Result:
    """The result of table row ``i`` from what the small-pair path measured, its payloads' NaN/inf counts
    included (as :func:`_measure` takes them from :func:`tensor_metrics`)."""
    values, reason, held, (t_nonfinite, b_nonfinite) = measured
    hints.record(held)
    values["target_nonfinite"], values["bench_nonfinite"] = float(t_nonfinite), float(b_nonfinite)
    return i, values, reason


def _read_whole(t_dump: Dump, b_dump: Dump, t_row: Mapping[str, Any], b_row: Mapping[str, Any]) -> str | None:
    """The kind of payload (``"pt"``, ``"npy"``: the loaders' ``small_payloads``) when both of a pair of one
    shape are ones both dumps' loaders read whole, in one read (the ``reads_whole`` of msprobe's and of nbprec's
    own loader); else None."""
    t_loader, b_loader = t_dump._loader, b_dump._loader
    kind = getattr(t_loader, "small_payloads", None)
    if kind is None or getattr(b_loader, "small_payloads", None) != kind or not _both_payloads(t_row, b_row):
        return None
    return kind if t_loader.reads_whole(t_row) and b_loader.reads_whole(b_row) else None


def _both_payloads(t_row: Mapping[str, Any], b_row: Mapping[str, Any]) -> bool:
    """Whether both rows of a pair have a payload to read, of one shape (what the paths without arrays need)."""
    return bool(t_row["has_data"] and b_row["has_data"]) and tuple(b_row["shape"]) == tuple(t_row["shape"])


def _measure_cached_first(jobs: list[RowJob], t_dump: Dump, b_dump: Dump, hints: _ExtremeHints) -> list[Result]:
    """:func:`_measure` of each job of a batch, the same results, a small pair whose payloads are not all in the
    page cache measured after the others: its read, which found pages missing, started reading them from the disk
    without waiting (``RWF_NOWAIT``), and they come in meanwhile. A dump part of whose pages were evicted (memory
    pressure; a kernel that pages idle page cache out, as this machine class's DAMON does within seconds) would
    otherwise stop the process at each such file for a disk read: with 30% of the payloads missing two pages
    each, the 313 MB msprobe pair took 0.18 s instead of 0.13 s on two processes, and 0.14 s this way."""
    results: list[Result] = []
    later = []
    for job in jobs:
        found = _measure(job, t_dump, b_dump, hints, wait=False)
        if found is None:
            later.append(job)
        else:
            results.append(found)
    return results + [_measure(job, t_dump, b_dump, hints) for job in later]  # type: ignore[misc]


def _measure_batch(jobs: list[RowJob], t_dump: Dump, b_dump: Dump, hints: _ExtremeHints) -> list[Result]:
    """:func:`_measure` of each job of a batch, the same results, with the small pairs taken together
    (:func:`~nbprec.compare.small_pairs.small_pairs`): their payloads read ahead in one call
    (:func:`nbprec.formats._files.read_ahead`) and their kernel passes made in another, neither holding the GIL.
    Threads measuring batches then hand the GIL over a few times a batch rather than a few times a pair (under
    contention, each hand-over costs both threads a sleep and a wake-up). Every other job, and a small pair that
    needs its arrays after all (an integer dtype, a standard deviation that needs an exact second pass), is
    measured as :func:`_measure` measures it."""
    results: list[Result | None] = [None] * len(jobs)
    positions, items, kind = [], [], None
    for k, (_i, mode, t_row, b_row) in enumerate(jobs):
        small = _small_item(t_dump, b_dump, t_row, b_row, hints.extremes(t_row, b_row)) if mode == "tensor" else None
        if small is not None:  # (one kind: the loaders')
            positions.append(k)
            items.append(small[0])
            kind = small[1]
    arrays = set()  # small pairs measured on their arrays (an integer dtype, an exact second pass)
    groups = [list(range(len(items)))]
    if len(items) > 1:  # (what the arrays' reads of those pairs take too)
        missing = read_ahead([path for item in items for path in (item[0], item[2])], archives=kind == "pt", wait=False)
        if missing:  # pairs not all in the page cache (see _measure_cached_first): after the others, read again
            later = {n for n, item in enumerate(items) if item[0] in missing or item[2] in missing}
            groups = [[n for n in groups[0] if n not in later], sorted(later)]
    try:
        for number, group in enumerate(groups):
            if not group:
                continue
            if number:
                read_ahead([path for n in group for path in (items[n][0], items[n][2])], archives=kind == "pt")
            try:
                found = small_pairs([items[n] for n in group], kind)
            except (NbprecError, MemoryError, ValueError, TypeError):
                found = [None] * len(group)  # (then each on its own, where such an error becomes its reason)
            else:
                arrays |= {positions[n] for n, got in zip(group, found, strict=True) if got is None}
            for n, got in zip(group, found, strict=True):
                if got is not None:
                    results[positions[n]] = _small_result(jobs[positions[n]][0], got, hints)
        return [
            result if result is not None else _measure(job, t_dump, b_dump, hints, small=k not in arrays)
            for k, (job, result) in enumerate(zip(jobs, results, strict=True))
        ]
    finally:
        forget_ahead()


def _start(
    jobs: list[Job], task: PairTask, numel: np.ndarray, run_on: Executor, progress: ProgressCallback | None
) -> Results:
    """Batch the jobs for ``run_on`` and start measuring them (workers start at once); iterating the result
    yields the measurements. Close it when done (or on error), and wait for it once they are used."""
    if run_on.orders_jobs:
        run = run_on.submit_batches([jobs], task)
    else:  # (largest first; pairs of one cost in turns, each rank's beside the others': see in_turns)
        groups = task.groups() if run_on.limits is not None and run_on.limits.by_rank else None
        if groups is None:  # (batches by rank keep the ranks apart: no turn would bring twins together)
            jobs = in_turns(jobs, task.target_files())
        run = run_on.submit_batches(batches(jobs, numel, run_on.limits, run_on.slots, groups), task)
    return Results(run, len(jobs), progress)


# Python's cyclic collector is paused for the call and restored after (nbprec._gc.paused_gc): a comparison makes
# no garbage cycles to speak of (tests/test_cli_gc.py), and the collector's scans of what it allocates took 3-7% of
# the call (in-process against the same call with the collector on, 2026-12-07); the command pauses it too.
@paused_gc()
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
        tensors. For two msprobe dumps with payloads, or two nbprec dumps, given as paths, the other process is
        forked as the call starts, to measure while the dumps are opened (:mod:`nbprec.compare.early`).
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

    Notes
    -----
    Python's cyclic garbage collector, which serves the whole process, is paused during the call (a comparison
    makes no garbage cycles to speak of) and its state restored after.

    Examples
    --------
    >>> comp = nbprec.compare("runs/fp16", "runs/fp32")   # doctest: +SKIP
    >>> comp.first_failing_op()                            # doctest: +SKIP
    """
    the_rule = get_rule(rule)  # arguments first: a typo is reported before any dump is opened
    if mode not in MODES:
        raise ComparisonError(f"unknown mode {mode!r}; use auto, tensor, statistics or checksum")
    run_on = requested_executor(executor, client, parallel)
    started = start_for_call(target, bench, mode, parallel, workers, run_on)  # measuring while the dumps open
    try:
        graph_model = read_graph_model(graph)
        t_dump = _as_dump(target, step, rank, graph_model)
        b_dump = _as_dump(bench, step, rank)
        if isinstance(mapping, (str, os.PathLike)):
            mapping = read_mapping(Path(mapping))
        fusion_notes: list[str] = []
        if fusion is None:
            fusion = automatic_fusion(t_dump, b_dump, graph_model, fusion_notes)
        t_idx, b_idx = t_dump.columns, b_dump.columns
        matched = match_tensors(t_idx, b_idx, mapping=mapping, fusion=fusion, by_order=by_order)
        pairs = matched.pairs
        n_rows = len(t_idx)

        b_positions = pairs["b"]
        modes, reasons = choose_modes(mode, t_idx, b_idx, b_positions)
        recorded_problems(reasons, modes, t_dump, "target")
        mode_of, b_of = modes.tolist(), b_positions.tolist()
        jobs = [(i, mode_of[i], i, b_of[i]) for i in np.flatnonzero(modes != "none").tolist()]

        # pairs the early worker (the command's, or this call's) measured while the dumps opened; unless told how
        # to measure, it measures on beside this process (no other process forked): see early_meeting
        go_on = run_on is None and parallel != "threads" and workers in (None, 2)
        early_done, jobs, beside = measured(jobs, t_dump, b_dump, go_on=go_on)
        stats_done, jobs = statistics_pairs(jobs, t_idx, b_idx)  # pairs without payloads, all at once
        sums_done, jobs = checksum_pairs(jobs, t_idx, b_idx)

        numel = np.nan_to_num(column(t_idx, "numel", np.float64), nan=0.0)
        if beside is not None:
            run_on = MeetingExecutor(beside, numel, parallel)
        elif run_on is None:
            run_on = local_executor(parallel, workers if workers is not None else default_workers(), jobs, numel)
        if progress is True:
            progress = run_on.progress_bar("comparing")
        done = len(early_done) + len(stats_done[0]) + len(sums_done[0])
        if progress and done:
            progress = _counting_from(progress, done)
            progress(0, len(jobs))
        # the workers (threads, processes, a cluster) start measuring here; the table is built meanwhile
        # threads take a batch's small pairs together (see _measure_batch); a forked process, which holds no GIL to
        # hand over, reads and measures them one by one (reading a whole batch first costs it more page faults)
        task = PairTask(
            _measure,
            t_dump,
            b_dump,
            measure_batch=_measure_batch if isinstance(run_on, ThreadExecutor) else _measure_cached_first,
        )
        results = _start(jobs, task, numel, run_on, progress or None)

        try:  # while the workers measure: everything that does not need a metric
            table = pair_table(t_idx, b_idx, pairs)
            table["precision"] = running_precision(table)
            # the module call enclosing each op (the target's hierarchy): modules that enclose a failure are told
            # from the op inside them that caused it
            hierarchy = t_dump.hierarchy
            ops_column = table["op"].tolist()
            table["parent"] = np.array([hierarchy.get(op) or "" for op in ops_column] if hierarchy else [""] * n_rows,
                                       dtype=object)  # fmt: skip
            calls = t_dump.calls
            if calls:  # a dropout that was on (or off) by its arguments: random (or not) whatever its type says
                table["random_call"] = random_calls(ops_column, table["op_type"].tolist(), calls)
            grouping = op_codes(table)
            scale = op_input_scale(table, grouping)
            table["op_input_scale"], table["noise_from"] = carried_noise_scale(table, scale, grouping)
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
                        unmatched_bench["name"].tolist(),
                        map(benchmark_key, unmatched_bench["op"].tolist()),
                        strict=True,
                    )
                    if key in absorbed
                }
                meta["fusion"] = {
                    "graph": fusion.source,
                    "notes": fusion_notes + fusion.notes,
                    "fused_away": fused_away,
                }
            measured_columns = (*METRIC_COLUMNS, *STAT_METRIC_COLUMNS, "target_nonfinite", "bench_nonfinite")
            values: dict[str, np.ndarray] = {c: np.full(n_rows, np.nan) for c in measured_columns}
            checksum_match = np.full(n_rows, None, dtype=object)
            held: list[tuple[int, dict[str, Any]]] = []  # results not yet in the columns (a bounded batch)
            for i, result, reason in itertools.chain(early_done, results):
                held.append((i, result))
                if len(held) >= _RESULT_BATCH:
                    fill_results(values, checksum_match, held)
                if reason:
                    reasons[i] = reason
                    if reason.startswith(("could not", "element count")):
                        modes[i] = "none" if not result else modes[i]
            fill_results(values, checksum_match, held)
            fill_statistics(values, reasons, stats_done)
            fill_checksums(checksum_match, reasons, sums_done)
        finally:
            results.close()
            RECENT.clear()  # (the payloads kept for pairs that repeat another's bytes: see small_pairs)

        try:  # forked workers exit (results.wait() waits for them) while the table is assembled and judged
            recorded_nonfinite = {side: table[f"{side}_nonfinite"].copy() for side in ("target", "bench")}
            table["compare_mode"] = modes
            for name, arr in values.items():
                if name in table:  # target_mean/bench_mean: keep the index statistics where no payload was read
                    table[name] = np.where(np.isnan(arr), table[name], arr)
                elif not np.isnan(arr).all() or name in METRIC_COLUMNS:
                    table[name] = arr
            table["checksum_match"] = checksum_match
            nonfinite_reasons(reasons, table, b_positions)
            contradicted_statistics(reasons, table, recorded_nonfinite)
            noise_reasons(reasons, table)
            table["reason"] = reasons
            spare(task, results, t_dump, b_dump, early_done, jobs)  # (the command would free them on its way out)
            return Comparison(table, unmatched_bench=unmatched_bench, rule=the_rule, meta=meta)
        finally:
            results.wait()
    finally:
        if started:
            early.discard()  # (a call that failed before it met the worker)
