"""The numpy-column table of nbprec's core (:mod:`nbprec.columns`): what it computes and writes is what pandas
computes and writes from the same values (the pandas views the Python API returns are built from it)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hostile_names import hostile_pair

from nbprec.columns import (
    Columns,
    as_columns,
    factorize,
    factorize_here,
    group_codes,
    text_in,
    text_table,
    value_counts,
)
from nbprec.compare import Comparison, compare
from nbprec.safe_text import write_table_csv

FIXTURES = Path(__file__).parent / "fixtures" / "msprobe"


def _mixed() -> Columns:
    return Columns(
        {
            "order": np.array([1, 22, 333, -4]),
            "op": np.array(["a.b.c", "x", "longer_name_here", "=SUM(1)"], dtype=object),
            "cosine": np.array([0.999999123, np.nan, 1.0, -0.5]),
            "tiny": np.array([1e-7, 0.5, np.inf, 2.25]),
            "flag": np.array([True, False, True, False]),
            "shape": np.array([(2, 8), (), None, (1,)], dtype=object),
        }
    )


def test_a_table_reads_like_a_frame():
    t = _mixed()
    assert len(t) == 4 and t.columns[:2] == ["order", "op"] and "cosine" in t and "nope" not in t
    assert t.take(np.array([False, True, False, True]))["op"].tolist() == ["x", "=SUM(1)"]
    assert t.row(2) == {"order": 333, "op": "longer_name_here", "cosine": 1.0, "tiny": np.inf, "flag": True,
                        "shape": None}  # fmt: skip
    assert [r.op for r in t.itertuples()] == t["op"].tolist()
    both = Columns.concat([t, t.take(np.array([0]))])
    assert len(both) == 5 and both["order"].tolist()[-1] == 1
    with pytest.raises(ValueError, match="3 values, the table 4 rows"):
        t["bad"] = np.zeros(3)
    t2 = t.assign(status="pass")
    assert t2["status"].tolist() == ["pass"] * 4 and "status" not in t  # assign copies


def test_text_is_what_pandas_prints():
    frame = _mixed().to_frame()
    for na in ("NaN", ""):
        expected = frame.drop(columns="shape").to_string(index=False, float_format=lambda v: f"{v:.6g}", na_rep=na)
        assert text_table(_mixed().select(["order", "op", "cosine", "tiny", "flag"]), na_rep=na) == expected


def test_csv_is_what_pandas_writes(tmp_path):
    """A real comparison table (hostile names included) written from columns and from the DataFrame of the same
    columns: the same bytes."""
    target, bench = hostile_pair(tmp_path)
    comp = compare(target, bench)
    for exact in (False, True):
        a = write_table_csv(comp.columns, tmp_path / f"cols{exact}.csv", exact=exact)
        b = write_table_csv(comp.columns.to_frame(), tmp_path / f"frame{exact}.csv", exact=exact)
        assert a.read_bytes() == b.read_bytes()
    rng = np.random.default_rng(0)
    numbers = np.concatenate([rng.standard_normal(500), 10.0 ** rng.uniform(-30, 30, 500), [np.nan, -0.0, 1e16, 1e-5]])
    mixed = _mixed().take(np.arange(4).repeat(251)).assign(f64=numbers, f32=numbers.astype(np.float32))
    written = write_table_csv(mixed, tmp_path / "mixed.csv").read_bytes()
    assert written == write_table_csv(mixed.to_frame(), tmp_path / "mixed2.csv").read_bytes()


def test_codes_are_pandas_groups_and_factors():
    rng = np.random.default_rng(0)
    step = rng.integers(0, 3, 500)
    op = np.array([f"op{i}" for i in rng.integers(0, 40, 500)], dtype=object)
    op[::17] = None
    codes, n = group_codes(step, op)
    expected = pd.DataFrame({"s": step, "o": op}).groupby(["s", "o"], sort=False, dropna=False).ngroup()
    assert n == expected.max() + 1 and (codes == expected.to_numpy()).all()
    for key in (op, np.array([f"op{i}" for i in rng.integers(0, 40, 500)], dtype=object)):  # one key
        codes, n = group_codes(key)  # (with missing values, and without: where factorize gives the groups)
        expected = pd.DataFrame({"o": key}).groupby("o", sort=False, dropna=False).ngroup()
        assert n == expected.max() + 1 and codes.tolist() == expected.tolist()
    mine, uniques = factorize_here(op)
    theirs, their_uniques = pd.factorize(op, use_na_sentinel=True)
    assert (mine == theirs).all() and uniques == list(their_uniques) and (factorize(op)[0] == theirs).all()
    mixed = np.array([2.5, None, float("nan"), "a", 2.5, np.float64("nan"), "a", 1, True, 1.0], dtype=object)
    mine, uniques = factorize_here(mixed)  # NaN objects, None, and values equal across types (1, True, 1.0)
    theirs, their_uniques = pd.factorize(mixed, use_na_sentinel=True)
    assert mine.tolist() == theirs.tolist() == [0, -1, -1, 1, 0, -1, 1, 2, 2, 2] and uniques == list(their_uniques)
    assert text_in(op, ("op1", "op2")).tolist() == pd.Series(op).isin(["op1", "op2"]).tolist()


def test_frames_round_trip_with_their_dtypes():
    frame = pd.DataFrame(
        {
            "name": pd.Series(["a", "b"], dtype="str"),
            "role": pd.Series(["input", "output"], dtype="category"),
            "order": pd.array([1, None], dtype="Int64"),
            "x": [0.5, np.nan],
        }
    )
    cols = as_columns(frame)
    assert cols["name"].dtype == object and cols["role"].tolist() == ["input", "output"]
    assert np.isnan(cols["order"][1]) and cols["order"][0] == 1.0
    back = cols.to_frame(categories=("role",), text=("name",))
    assert str(back["role"].dtype) == "category" and back["x"].equals(frame["x"])


def test_a_comparison_from_a_frame_is_the_comparison_from_its_columns():
    """Comparison accepts the table as columns (the engine) or as a DataFrame (users, saved comparisons):
    same statuses, ops, verdict and summary."""
    comp = compare(FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix")
    again = Comparison(comp.table, unmatched_bench=comp.unmatched_bench, rule=comp.rule, meta=comp.meta)
    assert (again.status == comp.status).all()
    pd.testing.assert_frame_equal(again.ops, comp.ops)
    assert again.summary() == comp.summary() and again.verdict() == comp.verdict()


def test_a_column_is_plain_unless_a_cell_starts_as_a_formula():
    from nbprec.safe_text import csv_cell, plain_cells

    names = [f"Functional.linear.{i}.forward" for i in range(1000)]
    assert plain_cells(names) and plain_cells([*names, "-1.5e-3", "+2", None, 3.5])
    for odd in ("=cmd|' /C calc'!A0", "+A1", "-x", "@SUM(1)", "\tx", "'quoted", "caf\u00e9", "cr\rhere", "two\nlines"):
        for position in (0, 500, 1000):  # the first line, one in the middle, the last
            cells = [*names[:position], odd, *names[position:]]
            assert not plain_cells(cells), (odd, position)  # so each cell goes through csv_cell:
            changed = [csv_cell(c) for c in cells] != cells
            assert changed or odd in ("'quoted", "caf\u00e9", "cr\rhere", "two\nlines")  # (a false alarm, or quoted)


@pytest.mark.parametrize("joiner", ["C", "Python"])
@pytest.mark.parametrize("text", ["ascii", "any"])
def test_joined_rows_are_what_the_csv_writer_writes(monkeypatch, joiner, text):
    """write_csv_columns joins rows itself in the usual case (QUOTE_MINIMAL): the same text as csv.writer, cells
    with commas, quotes and line breaks quoted, whatever the row ending; in C (nbprec._csvjoin) when every cell is
    ASCII, else in Python."""
    import csv
    import io

    from nbprec import safe_text
    from nbprec.safe_text import write_csv_columns

    if joiner == "Python":
        monkeypatch.setattr(safe_text, "_join_rows", None)
    elif safe_text._join_rows is None:
        pytest.skip("nbprec._csvjoin is not built")
    cells = ["plain", "a,b", 'say "hi"', "two\nlines", "cr\rhere", "", "[2, 8]", "=SUM(1)", '""', "x;y"]
    if text == "any":
        cells += ["\udcff", "caf\u00e9"]
    elif joiner == "C":  # (the C joiner takes these: it is what is tested)
        assert safe_text._join_rows([cells, cells], "\n", ',"\n') is not None
    header = ["name", "value,with comma", "x"]
    columns = [cells, list(reversed(cells)), [str(i) for i in range(len(cells))]]
    for ending in ("\n", "\r\n", ";"):
        for quoting in (csv.QUOTE_MINIMAL, csv.QUOTE_ALL):
            ours, theirs = io.StringIO(), io.StringIO()
            write_csv_columns(ours, header, columns, ending, quoting)
            writer = csv.writer(theirs, lineterminator=ending, quoting=quoting)
            writer.writerow(header)
            writer.writerows(zip(*columns, strict=True))
            assert ours.getvalue() == theirs.getvalue()
    lone = io.StringIO()
    write_csv_columns(lone, ["only"], [["", "x"]], "\n", csv.QUOTE_MINIMAL)
    assert lone.getvalue() == 'only\n""\nx\n'  # a lone empty cell is quoted, as the writer does


def test_columns_of_different_lengths_are_an_error_whoever_joins():
    import csv
    import io

    from nbprec.safe_text import write_csv_columns

    with pytest.raises(ValueError):
        write_csv_columns(io.StringIO(), ["a", "b"], [["1", "2"], ["3"]], "\n", csv.QUOTE_MINIMAL)
    with pytest.raises(ValueError):  # (a tuple: not the C joiner's; the same error)
        write_csv_columns(io.StringIO(), ["a", "b"], [("1", "2"), ["3"]], "\n", csv.QUOTE_MINIMAL)


def test_cell_texts_are_str_of_each_cell_and_empty_where_missing():
    from nbprec.columns import cell_texts

    mixed = np.array(["a", None, float("nan"), 3, 2.5, "", True], dtype=object)
    assert cell_texts(mixed) == ["a", "", "", "3", "2.5", "", "True"]
    words = np.array(["x", "=1", "y"], dtype=object)
    assert cell_texts(words) == ["x", "=1", "y"]
    assert cell_texts(np.array([], dtype=object)) == []


def test_missing_mask_is_none_or_nan_as_pandas_isna_finds_them():
    from nbprec.columns import missing_mask

    mixed = np.array(["a", None, float("nan"), np.float64("nan"), 3, 0.0, "", False, (1, 2), [None]], dtype=object)
    assert missing_mask(mixed).tolist() == pd.isna(pd.Series(mixed)).tolist()
    assert missing_mask(mixed).tolist() == [False, True, True, True, False, False, False, False, False, False]
    assert missing_mask(["x", None]).tolist() == [False, True]  # a list as well as an array
    assert missing_mask(np.array([], dtype=object)).tolist() == []


@pytest.mark.parametrize("pandas_loaded", [True, False])
def test_value_counts_is_pandas_value_counts(pandas_loaded, monkeypatch):
    """Most frequent first, ties in order of first appearance, None and NaN left out, as pandas counts them;
    with pandas loaded (its factorize) and without (nbprec's own)."""
    cases = [
        np.array(["c", "a", "b", "b", "a", "c", "d"], dtype=object),
        np.array(["x", None, "y", float("nan"), "y", None, "x", "z"], dtype=object),
        np.array([name for k in range(150) for name in (f"v{k}", f"u{k}", f"v{k}")], dtype=object),  # long ties
        np.array([3, 1, 2, 1, 3, 3], dtype=np.int64),
        np.array([], dtype=object),
    ]
    expected = [[(k, int(v)) for k, v in pd.Series(values).value_counts().items()] for values in cases]
    if not pandas_loaded:
        monkeypatch.delitem(sys.modules, "pandas")
    for values, counts in zip(cases, expected, strict=True):
        assert list(value_counts(values).items()) == counts, values
