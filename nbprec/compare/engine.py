"""The comparison run: open, match, measure every pair, and wrap the result in a :class:`Comparison`."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from nbprec._progress import ProgressCallback
from nbprec.compare.comparison import Comparison
from nbprec.compare.matching import FusionMatcher, match_tensors, read_mapping
from nbprec.compare.metrics import (
    METRIC_COLUMNS,
    STAT_METRIC_COLUMNS,
    checksum_equal,
    statistics_metrics,
    tensor_metrics,
)
from nbprec.compare.rules import Rule, get_rule, running_precision
from nbprec.dump import Dump
from nbprec.errors import ComparisonError, NbprecError

CompareMode = Literal["auto", "tensor", "statistics", "checksum"]
MODES: tuple[str, ...] = ("auto", "tensor", "statistics", "checksum")

_STAT_KEYS = ("max", "min", "mean", "norm")


def _as_dump(source: Dump | str | os.PathLike[str], step: int | None, rank: int | None) -> Dump:
    from nbprec.formats import open_dump

    dump = source if isinstance(source, Dump) else open_dump(source)
    if step is not None or rank is not None:
        dump = dump.select(step=step, rank=rank)
    return dump


def _side(index: pd.DataFrame, positions: np.ndarray, prefix: str) -> pd.DataFrame:
    """Columns describing one side of each pair (NaN/'' where the position is -1)."""
    valid = positions >= 0
    take = np.where(valid, positions, 0)
    src = index.iloc[take].reset_index(drop=True) if len(index) else index.reindex(range(len(positions)))
    out = pd.DataFrame(
        {
            f"{prefix}_name": src["name"].where(valid, ""),
            f"{prefix}_op": src["op"].where(valid, ""),
            f"{prefix}_dtype": src["dtype"].where(valid, ""),
            f"{prefix}_shape": [s if v else None for s, v in zip(src["shape"], valid, strict=True)],
        }
    )
    for key in _STAT_KEYS:
        out[f"{prefix}_{key}"] = src[key].where(valid, np.nan).to_numpy(np.float64)
    nonfinite = src["nan_count"].fillna(0) + src["inf_count"].fillna(0)
    unknown = src["nan_count"].isna() & src["inf_count"].isna()
    stat_nonfinite = ~np.isfinite(src[["max", "min"]].to_numpy(np.float64)).all(axis=1) & src["max"].notna()
    out[f"{prefix}_nonfinite"] = np.where(unknown, stat_nonfinite.astype(float), nonfinite).astype(np.float64)
    out.loc[~valid, f"{prefix}_nonfinite"] = np.nan
    return out


def _op_input_scale(table: pd.DataFrame) -> np.ndarray:
    """Per row, the largest benchmark magnitude among its op's inputs (the scale rounding errors live at)."""
    bench_abs = np.fmax(table["bench_max"].abs().to_numpy(np.float64), table["bench_min"].abs().to_numpy(np.float64))
    is_input = table["role"].isin(("input", "parameter")).to_numpy()
    keys = [table["step"].to_numpy(), table["rank"].to_numpy(), table["op"].to_numpy()]
    scale = pd.Series(np.where(is_input, bench_abs, np.nan)).groupby(keys).transform("max")
    return scale.to_numpy(np.float64)


class _Rows:
    """Index rows by position: ``index.iloc[i]`` about twice as fast, and single fields without a row.

    The per-row ``iloc`` (and Series look-ups) of a mixed-dtype frame dominated the set-up of dumps with
    many small tensors; here the values are boxed once, up front.
    """

    def __init__(self, index: pd.DataFrame) -> None:
        self._values = index.to_numpy(dtype=object)
        self._columns, self._labels = index.columns, index.index
        self._position = {column: k for k, column in enumerate(index.columns)}

    def row(self, i: int) -> pd.Series:
        """``index.iloc[i]``."""
        return pd.Series(self._values[i], index=self._columns, dtype=object, name=self._labels[i], copy=False)

    def fields(self, i: int, names: tuple[str, ...]) -> dict[str, Any]:
        """``{name: index.iloc[i][name]}`` for a few columns."""
        return {name: self._values[i, self._position[name]] for name in names}


_MODE_FIELDS = ("has_data", "max", "checksum")


def _choose_mode(mode: CompareMode, t_row: Mapping[str, Any], b_row: Mapping[str, Any]) -> tuple[str, str]:
    """(compare mode, reason) for one matched pair."""
    both_data = bool(t_row["has_data"] and b_row["has_data"])
    both_stats = not (np.isnan(t_row["max"]) or np.isnan(b_row["max"]))
    both_sums = bool(t_row["checksum"] and b_row["checksum"])
    if mode == "tensor" or (mode == "auto" and both_data):
        if both_data:
            return "tensor", ""
        missing = "target" if not t_row["has_data"] else "benchmark"
        return "none", f"no payload on the {missing} side (statistics or checksum dump?)"
    if mode == "statistics" or (mode == "auto" and both_stats):
        return ("statistics", "") if both_stats else ("none", "statistics missing on one side")
    if mode == "checksum" or (mode == "auto" and both_sums):
        return ("checksum", "") if both_sums else ("none", "checksum missing on one side")
    return "none", "neither payloads, statistics nor checksums are available on both sides"


def _measure(job: tuple[int, str, pd.Series, pd.Series], t_dump: Dump, b_dump: Dump) -> tuple[int, dict[str, Any], str]:
    i, mode, t_row, b_row = job
    try:
        if mode == "tensor":
            result = tensor_metrics(t_dump.tensor(t_row), b_dump.tensor(b_row))
            return i, dict(result.values), result.reason
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


def _run_jobs(
    jobs: list[tuple[int, str, pd.Series, pd.Series]],
    t_dump: Dump,
    b_dump: Dump,
    workers: int,
    progress: ProgressCallback | None,
) -> Iterator[tuple[int, dict[str, Any], str]]:
    total = len(jobs)
    if workers <= 1:
        for done, job in enumerate(jobs, 1):
            yield _measure(job, t_dump, b_dump)
            if progress:
                progress(done, total)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        # submit in bounded windows so that at most a few tensors per worker are in flight
        window = workers * 4
        done = 0
        for start in range(0, total, window):
            for result in pool.map(lambda j: _measure(j, t_dump, b_dump), jobs[start : start + window]):
                done += 1
                yield result
                if progress:
                    progress(done, total)


def compare(
    target: Dump | str | os.PathLike[str],
    bench: Dump | str | os.PathLike[str],
    *,
    rule: str | Rule | None = None,
    mode: CompareMode = "auto",
    mapping: str | os.PathLike[str] | pd.DataFrame | None = None,
    fusion: FusionMatcher | None = None,
    by_order: bool = True,
    step: int | None = None,
    rank: int | None = None,
    workers: int | None = None,
    progress: ProgressCallback | bool | None = None,
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
        A fusion-record hook (see :mod:`nbprec.compare.matching`).
    by_order
        Align op streams by order for ops that names do not match.
    step, rank
        Restrict both dumps to one step / rank.
    workers
        Threads measuring pairs (default: up to 2). Memory stays bounded by a few tensors per worker.
    progress
        ``True`` for a progress bar on stderr, or a callback ``(done, total)``.

    Returns
    -------
    Comparison

    Examples
    --------
    >>> comp = nbprec.compare("runs/fp16", "runs/fp32")   # doctest: +SKIP
    >>> comp.first_failing_op()                            # doctest: +SKIP
    """
    t_dump = _as_dump(target, step, rank)
    b_dump = _as_dump(bench, step, rank)
    the_rule = get_rule(rule)
    if mode not in MODES:
        raise ComparisonError(f"unknown mode {mode!r}; use auto, tensor, statistics or checksum")
    if isinstance(mapping, (str, os.PathLike)):
        mapping = read_mapping(Path(mapping))
    matched = match_tensors(t_dump.index, b_dump.index, mapping=mapping, fusion=fusion, by_order=by_order)
    pairs = matched.pairs
    t_idx, b_idx = t_dump.index, b_dump.index

    base = t_dump.index[["step", "rank", "order", "op", "op_type", "api", "module", "direction", "role", "slot"]]
    base = base.reset_index(drop=True)
    table = pd.concat(
        [
            _side(t_idx, pairs["t"].to_numpy(), "target"),
            _side(b_idx, pairs["b"].to_numpy(), "bench"),
            base,
        ],
        axis=1,
    )
    table.insert(2, "match", pairs["match"].to_numpy())
    table["numel"] = t_idx["numel"].to_numpy()

    modes = np.full(len(table), "none", dtype=object)
    reasons = np.full(len(table), "", dtype=object)
    jobs = []
    b_positions = pairs["b"].to_numpy()
    t_rows, b_rows = _Rows(t_idx), _Rows(b_idx)
    for i in range(len(table)):
        b = b_positions[i]
        if b < 0:
            reasons[i] = "no benchmark counterpart"
            continue
        modes[i], reasons[i] = _choose_mode(mode, t_rows.fields(i, _MODE_FIELDS), b_rows.fields(b, _MODE_FIELDS))
        if modes[i] != "none":
            jobs.append((i, modes[i], t_rows.row(i), b_rows.row(b)))

    if progress is True:
        from nbprec._progress import TextProgress

        progress = TextProgress("comparing")
    n_workers = workers if workers is not None else min(2, os.cpu_count() or 1)
    values: dict[str, np.ndarray] = {c: np.full(len(table), np.nan) for c in (*METRIC_COLUMNS, *STAT_METRIC_COLUMNS)}
    checksum_match = np.full(len(table), None, dtype=object)
    for i, result, reason in _run_jobs(jobs, t_dump, b_dump, n_workers, progress or None):
        for key, value in result.items():
            if key == "checksum_match":
                checksum_match[i] = value
            elif key in values:
                values[key][i] = value
        if reason:
            reasons[i] = reason
            if reason.startswith(("could not", "element count")):
                modes[i] = "none" if not result else modes[i]

    table["compare_mode"] = modes
    for column, arr in values.items():
        if column in table:  # target_mean/bench_mean: keep the index statistics where no payload was read
            table[column] = np.where(np.isnan(arr), table[column].to_numpy(np.float64), arr)
        elif not np.isnan(arr).all() or column in METRIC_COLUMNS:
            table[column] = arr
    table["checksum_match"] = checksum_match
    table["reason"] = reasons
    table["precision"] = running_precision(table)
    table["op_input_scale"] = _op_input_scale(table)

    unmatched_bench = b_idx.iloc[matched.unmatched_bench].reset_index(drop=True)
    meta = {
        "target": str(t_dump.path),
        "bench": str(b_dump.path),
        "target_format": t_dump.format,
        "bench_format": b_dump.format,
        "mode": mode,
        "coverage": matched.coverage(),
    }
    return Comparison(table, unmatched_bench=unmatched_bench, rule=the_rule, meta=meta)


def comparison_progress(label: str = "comparing") -> Callable[[int, int], None]:
    """A stderr progress bar suitable for ``compare(progress=...)``."""
    from nbprec._progress import TextProgress

    return TextProgress(label)
