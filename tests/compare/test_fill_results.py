"""Measured values put into the comparison's columns (:func:`nbprec.compare.pair_table.fill_results`): values given
as a dict per row and as a tuple in a shared column order (:class:`~nbprec.compare.workers.RowValues`, what the
command's early worker sends) fill the same cells with the same numbers."""

from __future__ import annotations

import numpy as np

from nbprec.compare.pair_table import fill_results
from nbprec.compare.workers import RowValues

NAMES = ("cosine", "max_abs_err", "target_nonfinite", "bench_nonfinite")


def _columns(n: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    return {name: np.full(n, np.nan) for name in NAMES}, np.full(n, None, dtype=object)


def _as_dict(columns: tuple[str, ...], values: tuple[float, ...], counts: tuple[int, int]) -> dict[str, float]:
    found = dict(zip(columns, values, strict=True))
    found["target_nonfinite"], found["bench_nonfinite"] = float(counts[0]), float(counts[1])
    return found


def test_row_values_fill_what_dicts_fill():
    rng = np.random.default_rng(3)
    order = ("max_abs_err", "not_a_column", "cosine")  # (the worker's order; a value the table has no column for)
    other = ("cosine", "max_abs_err")  # a second order: its rows filled apart
    rows = []
    for i in range(9):
        columns = order if i % 4 else other
        values = tuple(float(v) for v in rng.standard_normal(len(columns)))
        values = (np.nan, *values[1:]) if i == 5 else values
        rows.append((i, columns, values, (i % 3, 2 * i)))
    by_dicts, checks = _columns(12)
    fill_results(by_dicts, checks, [(i, _as_dict(c, v, n)) for i, c, v, n in rows])
    by_rows, checks_rows = _columns(12)
    held = [(i, RowValues(c, v, n)) for i, c, v, n in rows[:6]] + [(i, _as_dict(c, v, n)) for i, c, v, n in rows[6:]]
    fill_results(by_rows, checks_rows, held)
    assert held == []  # emptied
    for name in NAMES:
        np.testing.assert_array_equal(by_rows[name], by_dicts[name])  # NaN where NaN, bit for bit elsewhere
    assert np.isnan(by_rows["cosine"][9:]).all()  # rows not held stay unfilled
    assert by_rows["bench_nonfinite"][7] == 14.0 and by_rows["target_nonfinite"][5] == 2.0
    assert np.isnan(by_rows["max_abs_err"][5]) and not np.isnan(by_rows["cosine"][5])
    assert list(checks_rows) == [None] * 12


def test_a_checksum_verdict_comes_from_a_dict():
    values, checks = _columns(3)
    fill_results(values, checks, [(1, {"checksum_match": True}), (2, RowValues(("cosine",), (0.5,), (0, 0)))])
    assert list(checks) == [None, True, None] and values["cosine"][2] == 0.5 and np.isnan(values["cosine"][1])
