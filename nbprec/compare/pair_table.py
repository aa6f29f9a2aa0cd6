"""The table of matched pairs before anything is measured: both sides' columns side by side, how each pair
will be compared (payloads, statistics or checksums) and, for a pair that is not, or whose dump contradicts
itself, the reason the result gives; and the measured values put into its columns (:func:`fill_results`)."""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Literal

import numpy as np

from nbprec.columns import Columns, group_codes, text_in
from nbprec.compare.culprit import rounding_noise
from nbprec.compare.metrics import STAT_KEYS, checksum_equal, statistics_columns
from nbprec.compare.rules import bench_magnitude, column, one_run
from nbprec.compare.workers import RowValues
from nbprec.dtypes import FLOAT_DTYPES
from nbprec.dump import Dump

CompareMode = Literal["auto", "tensor", "statistics", "checksum"]

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
        for key in (*STAT_KEYS, "nan_count", "inf_count")
    }
    for key in STAT_KEYS:
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
    four = np.stack([stats[k] for k in STAT_KEYS])
    infinite = np.isinf(four).any(axis=0)
    recorded = [k for k in STAT_KEYS if (~np.isnan(column(index, k, np.float64))).any()]  # recorded at all
    if not recorded:
        return infinite
    floats = text_in(index["dtype"], FLOAT_DTYPES)[take] if len(index) else np.zeros(len(take), dtype=bool)
    numel = index["numel"][take] if len(index) else np.zeros(len(take))
    nan = np.stack([np.isnan(stats[k]) for k in recorded]).any(axis=0)
    return infinite | (nan & floats & (numel != 0))


def nonfinite_reasons(reasons: np.ndarray, table: Columns, b_positions: np.ndarray) -> None:
    """Rows whose target holds NaN/inf where the benchmark is finite: that is the reason (the rule fails them),
    not a missing statistic."""
    target = np.nan_to_num(table["target_nonfinite"], nan=0.0) > 0
    bench = np.nan_to_num(table["bench_nonfinite"], nan=0.0) > 0
    for i in np.flatnonzero(target & ~bench & (b_positions >= 0)):
        old = str(reasons[i])
        generic = not old or old.startswith(("statistics missing", "neither payloads"))  # what NaN statistics cause
        kept = "" if generic else f"; {old}"
        reasons[i] = f"target has non-finite values{kept}"


def contradicted_statistics(reasons: np.ndarray, table: Columns, recorded: dict[str, np.ndarray]) -> None:
    """Rows whose dump records NaN/inf statistics while the payload read is finite: the statistics are wrong
    (a damaged or edited dump.json); the payload is what was judged, and the reason says so."""
    for side, label in (("target", "target"), ("bench", "benchmark")):
        said = np.nan_to_num(recorded[side], nan=0.0) > 0
        read = table[f"{side}_nonfinite"] == 0
        for i in np.flatnonzero(said & read):
            note = f"the {label} dump records non-finite statistics but its payload is finite: statistics not used"
            reasons[i] = f"{reasons[i]}; {note}" if reasons[i] else note


def noise_reasons(reasons: np.ndarray, table: Columns) -> None:
    """Rows whose two sides are rounding noise next to their op (:func:`~nbprec.compare.culprit.rounding_noise`):
    the reason says why their cosine and relative errors, however bad, say nothing of the op."""
    note = "both sides are rounding noise next to the op's input scale: cosine and relative errors compare noise"
    carried = column(table, "noise_from", object) if "noise_from" in table else np.full(len(table), "", dtype=object)
    said = {"": note}  # (the text for each op the noise was carried from, made once)
    for i in np.flatnonzero(rounding_noise(table)).tolist():
        source = carried[i]
        if source not in said:
            said[source] = f"both sides are rounding noise carried from {source} (judged at the pass's scale)"
        reasons[i] = f"{reasons[i]}; {said[source]}" if reasons[i] else said[source]


def pair_table(t_idx: Columns, b_idx: Columns, pairs: Columns) -> Columns:
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


def op_codes(table: Columns) -> tuple[np.ndarray, int]:
    """A code per row for its op (within its step and rank: ``group_codes`` of them, the op alone for one run),
    numbered in order of first appearance, and how many ops there are."""
    if one_run(table):
        return group_codes(table["op"])
    return group_codes(table["step"], table["rank"], table["op"])


def op_input_scale(table: Columns, grouping: tuple[np.ndarray, int] | None = None) -> np.ndarray:
    """Per row, the largest benchmark magnitude among its op's float inputs (the scale rounding errors live at:
    integer inputs are indices and sizes, such as an embedding's token ids); of an op with two or more float
    arguments, the smallest of theirs. A sum that cancels is small next to each of its terms; a product with a
    small factor (``x * rsqrt(mean(x**2))`` of inputs near 1e5: 4 from 1.2e5 and 3.8e-5) is small next to the
    other factor only, and is signal, not noise.

    A parameter-gradient record (msprobe's ``parameters_grad``: gradients, no inputs of its own) takes its largest
    gradient instead: the gradients of a module's parameters are made from the same gradient flowing back, so a
    linear layer's bias gradient is judged next to its weight gradient (attention's key bias has a gradient that
    is mathematically zero: rounding noise in both runs, which its relative errors cannot judge)."""
    role = table["role"]
    is_input = text_in(role, ("input", "parameter")) & text_in(table["bench_dtype"], FLOAT_DTYPES)
    magnitude = bench_magnitude(table)
    if not len(magnitude):
        return magnitude
    codes, n_groups = grouping or op_codes(table)  # (``grouping``: op_codes of the table, if made already)
    largest = np.full(n_groups, np.nan)
    np.fmax.at(largest, codes, np.where(is_input, magnitude, np.nan))  # fmax: NaN (not an input) is skipped
    arguments = is_input & text_in(role, ("input",))
    several = np.bincount(codes, weights=arguments, minlength=n_groups) >= 2
    if several.any():
        smallest = np.full(n_groups, np.nan)
        np.fmin.at(smallest, codes, np.where(arguments, magnitude, np.nan))
        largest = np.where(several & ~np.isnan(smallest), smallest, largest)
    is_gradient = text_in(role, ("gradient",))
    if is_gradient.any():
        gradient_only = np.bincount(codes, weights=~is_gradient, minlength=n_groups) == 0
        gradients = np.full(n_groups, np.nan)
        np.fmax.at(gradients, codes, np.where(is_gradient, magnitude, np.nan))
        largest = np.where(gradient_only, gradients, largest)
    return largest[codes]


def _mode_flags(index: Columns, take: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """(has a payload, has statistics, has a checksum) for each index row, or for the rows at ``take``."""
    flags = (
        index["has_data"].astype(bool),
        ~np.isnan(column(index, "max", np.float64)),
        np.asarray(index["checksum"], dtype=object).astype(bool),  # (truth of each text: '' has none)
    )
    if take is None:
        return flags
    return tuple(f[take] if len(f) else np.zeros(len(take), dtype=bool) for f in flags)


#: What :func:`statistics_pairs` measured: (table rows, metric columns of those rows, their reasons).
StatisticsDone = tuple[np.ndarray, dict[str, np.ndarray], list[str]]


def statistics_pairs(
    jobs: list[tuple[int, str, int, int]], t_idx: Columns, b_idx: Columns
) -> tuple[StatisticsDone, list[tuple[int, str, int, int]]]:
    """The jobs ``(row, mode, target position, benchmark position)`` compared by their recorded statistics,
    measured at once from both indexes' columns (:func:`~nbprec.compare.metrics.statistics_columns`), and the
    other jobs. What was measured (table rows, metric columns, reasons) goes into the comparison through
    :func:`fill_statistics`. Nothing is read for these pairs: handing each to a worker cost more than measuring
    it."""
    picked = [job for job in jobs if job[1] == "statistics"]
    if not picked:
        return (np.zeros(0, dtype=np.int64), {}, []), jobs
    rows, t_pos, b_pos = (np.fromiter((job[k] for job in picked), np.int64, len(picked)) for k in (0, 2, 3))
    target = {k: column(t_idx, k, np.float64)[t_pos] for k in STAT_KEYS}
    bench = {k: column(b_idx, k, np.float64)[b_pos] for k in STAT_KEYS}
    values, reasons = statistics_columns(target, bench)
    return (rows, values, reasons), [job for job in jobs if job[1] != "statistics"]


def fill_statistics(values: dict[str, np.ndarray], reasons: np.ndarray, done: StatisticsDone) -> None:
    """Put what :func:`statistics_pairs` measured into the comparison's metric columns and reasons."""
    rows, measured, why = done
    for name, column_values in measured.items():
        values[name][rows] = column_values
    for i, reason in zip(rows.tolist(), why, strict=True):
        if reason:
            reasons[i] = reason


#: What :func:`checksum_pairs` compared: (table rows, whether each pair's checksums agree: None where they cannot
#: be compared, and the reason they cannot: '' for the others).
ChecksumsDone = tuple[list[int], list[bool | None], list[str]]
#: The reason of a checksum pair whose checksums cannot be compared.
NOT_COMPARABLE = "checksums not comparable"


def checksum_pairs(
    jobs: list[tuple[int, str, int, int]], t_idx: Columns, b_idx: Columns
) -> tuple[ChecksumsDone, list[tuple[int, str, int, int]]]:
    """The jobs compared by their recorded checksums, compared at once from both indexes' ``checksum`` columns
    (:func:`~nbprec.compare.metrics.checksum_equal` of each pair's texts), and the other jobs; what was compared
    goes into the comparison through :func:`fill_checksums`. Nothing is read for these pairs: handing each to a
    worker cost more than comparing it (an msprobe md5 pair of 4,035 tensors: 92 against 59 ms for the same pair
    compared by its statistics, 2026-12-02).

    Checksums are of bytes: a pair of different dtypes (a bfloat16 run against its float32 benchmark) differs in
    every tensor whatever its values, so such a pair is not compared (None, and a reason that says to compare
    statistics instead); msprobe's md5 layout still shows msprobe's own verdict on it."""
    picked = [job for job in jobs if job[1] == "checksum"]
    if not picked:
        return ([], [], []), jobs
    t_sums, b_sums = t_idx["checksum"].tolist(), b_idx["checksum"].tolist()
    t_dtypes, b_dtypes = t_idx["dtype"].tolist(), b_idx["dtype"].tolist()
    equal: list[bool | None] = []
    reasons: list[str] = []
    for _row, _mode, t, b in picked:
        if t_dtypes[t] != b_dtypes[b]:
            equal.append(None)
            reasons.append(f"checksums of {t_dtypes[t]} and {b_dtypes[b]} cannot match: compare their statistics")
            continue
        equal.append(checksum_equal(str(t_sums[t]), str(b_sums[b])))
        reasons.append(NOT_COMPARABLE if equal[-1] is None else "")
    return ([job[0] for job in picked], equal, reasons), [job for job in jobs if job[1] != "checksum"]


def fill_checksums(checksum_match: np.ndarray, reasons: np.ndarray, done: ChecksumsDone) -> None:
    """Put what :func:`checksum_pairs` compared into the comparison's ``checksum_match`` column and reasons."""
    for i, equal, reason in zip(*done, strict=True):
        checksum_match[i] = equal
        if reason:
            reasons[i] = reason


def choose_modes(mode: CompareMode, t_idx: Columns, b_idx: Columns, b_pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def recorded_problems(reasons: np.ndarray, modes: np.ndarray, dump: Dump, side: str) -> None:
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


def fill_results(values: dict[str, np.ndarray], checksum_match: np.ndarray, held: list[tuple[int, Any]]) -> None:
    """Put the measured values of ``held`` (table row, the values of a :data:`~nbprec.compare.workers.Result`: a
    dict, or a :class:`~nbprec.compare.workers.RowValues`) into their columns, a column at a time, and empty it."""
    if not held:
        return
    rows: list[int] = []
    results: list[dict[str, Any]] = []
    row_values: list[tuple[int, RowValues]] = []
    for i, result in held:
        if result.__class__ is RowValues:
            row_values.append((i, result))
        else:
            rows.append(i)
            results.append(result)
    held.clear()
    start = 0
    while start < len(row_values):  # runs of rows whose values share their columns (all of them, as a rule)
        columns = row_values[start][1].columns
        end = start + 1
        while end < len(row_values) and row_values[end][1].columns is columns:
            end += 1
        _fill_row_values(values, columns, row_values[start:end])
        start = end
    if not results:
        return
    at = np.array(rows, dtype=np.int64)
    keys = set().union(*results)
    for key in keys & values.keys():
        try:  # the usual batch: every result has the key (pairs measured in the same mode)
            values[key][at] = list(map(itemgetter(key), results))
        except KeyError:
            picked = [(i, r[key]) for i, r in zip(rows, results, strict=True) if key in r]
            values[key][[i for i, _ in picked]] = [v for _, v in picked]
    if "checksum_match" in keys:
        for i, result in zip(rows, results, strict=True):
            if "checksum_match" in result:
                checksum_match[i] = result["checksum_match"]


def _fill_row_values(
    values: dict[str, np.ndarray], columns: tuple[str, ...], held: list[tuple[int, RowValues]]
) -> None:
    """:func:`fill_results` of rows whose values come in the order of ``columns``: a column at a time from one array
    of all their values (the same float64 values a dict per row gives)."""
    at = np.array([i for i, _ in held], dtype=np.int64)
    table = np.array([r.values for _, r in held], dtype=np.float64).reshape(len(held), len(columns))
    for j, name in enumerate(columns):
        column = values.get(name)
        if column is not None:
            column[at] = table[:, j]
    counts = np.array([r.counts for _, r in held], dtype=np.float64).reshape(len(held), 2)
    values["target_nonfinite"][at] = counts[:, 0]
    values["bench_nonfinite"][at] = counts[:, 1]
