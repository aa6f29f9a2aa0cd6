"""Columns of numbers in CSV rows (nbprec.floattext.number_column): the C joiner formats them as the rows are
joined, the same text as repr() and str() of each value, and anything it does not take goes the Python way."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from fresh_python import run_python

from nbprec import safe_text
from nbprec.floattext import float_texts, is_number_column, number_column, number_texts
from nbprec.safe_text import write_csv_columns

try:
    from nbprec._csvjoin import join_rows
except ImportError:
    join_rows = None

needs_c = pytest.mark.skipif(join_rows is None, reason="nbprec._csvjoin is not built")
_SPECIALS = ',"\n'


def _floats() -> np.ndarray:
    """Every kind of double: random bit patterns (subnormals, NaN and inf among them), zeros of both signs, the
    extremes, the texts repr writes in fixed and in exponent notation."""
    rng = np.random.default_rng(55)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -2.225073858507201e-308, 1.7976931348623157e308]
    special += [1e16, 1e15, 123456789012345.6, 1e-4, 9.999e-5, 0.1, -1 / 3, 2.0**52, 1e22, 1e23, -1.0]
    return np.concatenate([rng.integers(0, 2**64, size=20_000, dtype=np.uint64).view(np.float64), special])


def _ints() -> np.ndarray:
    rng = np.random.default_rng(56)
    extremes = np.array([0, -1, 1, 9, 10, -10, np.iinfo(np.int64).min, np.iinfo(np.int64).max], dtype=np.int64)
    return np.concatenate([rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, size=5_000), extremes])


def _csv_writer_text(header: list[str], columns: list[list[str]], ending: str) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=ending)
    writer.writerow(header)
    writer.writerows(zip(*columns, strict=True))
    return out.getvalue()


@needs_c
@pytest.mark.parametrize("nan", ["", "NaN", "nan text"])
def test_numbers_are_joined_as_their_texts(nan):
    """A float64 column is written as repr() writes each value (nan_text for NaN), an integer column as str()
    does, beside text columns, whatever the row ending: the rows of the same columns given as texts."""
    floats, ints = _floats(), _ints()
    n = len(ints)
    floats = floats[:n]
    names = [f"op{i},x" if i % 7 == 0 else f"op{i}" for i in range(n)]  # (some cells quoted)
    as_numbers = [names, number_column(floats, nan), number_column(ints), number_column(floats[::-1].copy(), nan)]
    as_texts = [names, float_texts(floats, nan), [str(v) for v in ints.tolist()], float_texts(floats[::-1], nan)]
    assert as_texts[1] == [nan if v != v else repr(v) for v in floats.tolist()]
    for ending in ("\n", "\r\n"):
        joined = join_rows(as_numbers, ending, _SPECIALS + ending[:1])
        assert joined is not None
        assert joined == join_rows(as_texts, ending, _SPECIALS + ending[:1])
    header = ["name", "a", "b", "c"]
    ours = io.StringIO()
    write_csv_columns(ours, header, as_numbers, "\n", csv.QUOTE_MINIMAL)
    assert ours.getvalue() == _csv_writer_text(header, as_texts, "\n")


@needs_c
def test_all_the_hard_doubles_of_the_formatter_tests():
    """The joiner writes every value of the formatter's own hard cases as repr does (it calls the same
    formatter: this holds the two to each other, subnormals and powers of ten included)."""
    from tests.test_floattext import _hard_values

    for values in _hard_values().values():
        values = np.ascontiguousarray(values[:50_000], dtype=np.float64)
        expected = "".join(("" if v != v else repr(v)) + "\n" for v in values.tolist())
        assert join_rows([number_column(values, "")], "\n", _SPECIALS) == expected


@needs_c
@pytest.mark.parametrize(
    "column",
    [
        (np.arange(6, dtype=np.float32), ""),  # float32: not the joiner's (its texts differ)
        (np.arange(12, dtype=np.float64)[::2], ""),  # not contiguous
        (np.arange(6, dtype=np.int32), ""),  # not 8 bytes a value
        (np.arange(6, dtype=np.float64).reshape(2, 3), ""),  # two dimensions
        (np.arange(6, dtype=np.float64), "a,b"),  # a NaN text that would need quotes
        (np.arange(6, dtype=np.float64), "caf\u00e9"),  # not ASCII
        (["1", "2", "3", "4", "5", "6"], ""),  # a tuple that is not one of numbers
        ("123456", ""),
    ],
)
def test_columns_the_joiner_does_not_take_go_the_python_way(column):
    """Whatever the joiner does not take, it answers None for (no crash, no partial text), and
    write_csv_columns then writes the same rows in Python."""
    texts = [f"r{i}" for i in range(6)]
    assert join_rows([texts, column], "\n", _SPECIALS) is None
    if is_number_column(column) and column[0].ndim == 1:
        ours = io.StringIO()
        write_csv_columns(ours, ["r", "v"], [texts, column], "\n", csv.QUOTE_MINIMAL)
        cells = [str(v) if column[0].dtype.kind != "f" else repr(float(v)) for v in column[0].tolist()]
        assert ours.getvalue() == _csv_writer_text(["r", "v"], [texts, cells], "\n")


def test_columns_of_numbers_of_different_lengths_are_an_error():
    with pytest.raises(ValueError):
        write_csv_columns(io.StringIO(), ["a", "b"], [["1", "2"], number_column(np.ones(3))], "\n", csv.QUOTE_MINIMAL)
    if join_rows is not None:
        assert join_rows([number_column(np.ones(2)), number_column(np.arange(3))], "\n", _SPECIALS) is None


def test_number_columns_without_the_joiner_and_quoting_all(monkeypatch):
    """Without the C joiner, and with every cell quoted (a carriage return in a name), columns of numbers are
    written as their texts by Python's writer."""
    values = np.array([1.5, np.nan, -0.0, 1e300, 7.0])
    ints = np.array([3, -4, 0, 2**62, 5], dtype=np.int64)
    names = ["a", "b\rc", "d", "e", "f"]
    texts = [names, number_texts(number_column(values, "NaN")), [str(v) for v in ints.tolist()]]
    assert texts[1] == ["1.5", "NaN", "-0.0", "1e+300", "7.0"]
    for joiner in (join_rows, None):
        monkeypatch.setattr(safe_text, "_join_rows", joiner)
        for quoting in (csv.QUOTE_MINIMAL, csv.QUOTE_ALL):
            ours, theirs = io.StringIO(), io.StringIO()
            write_csv_columns(ours, ["n", "v", "i"], [names, number_column(values, "NaN"), number_column(ints)],
                              "\r\n", quoting)  # fmt: skip
            writer = csv.writer(theirs, lineterminator="\r\n", quoting=quoting)
            writer.writerow(["n", "v", "i"])
            writer.writerows(zip(*texts, strict=True))
            assert ours.getvalue() == theirs.getvalue()


def test_number_column_kinds():
    """Floats of any width are widened to float64, integers that fit to int64; uint64 and bools are texts."""
    column = number_column(np.array([1.5, 2.5], dtype=np.float32))
    assert is_number_column(column) or column == ["1.5", "2.5"]
    assert number_texts(number_column(np.array([1, 2], dtype=np.uint8))) == ["1", "2"]
    assert number_column(np.array([2**63 + 1], dtype=np.uint64)) == [str(2**63 + 1)]
    assert number_texts(["x"]) == ["x"]


@needs_c
def test_the_joiner_formats_without_the_tables_too(tmp_path):
    """In a process where the formatter's tables were never set (nbprec.floattext not imported), the joiner
    still writes repr's texts (Python's own formatter does them)."""
    script = (
        "import sys, numpy as np\n"
        "from nbprec._csvjoin import join_rows\n"
        "assert 'nbprec.floattext' not in sys.modules\n"
        "v = np.random.default_rng(3).integers(0, 2**64, size=3000, dtype=np.uint64).view(np.float64)\n"
        "out = join_rows([(v, 'NaN')], '\\n', ',\"\\n')\n"
        "assert out == ''.join(('NaN' if x != x else repr(x)) + '\\n' for x in v.tolist()), 'texts differ'\n"
        "print('ok')\n"
    )
    assert run_python(script) == "ok"


@needs_c
@pytest.mark.parametrize("ending", ["\n", "\r\n", "\t;|\r\n"])
def test_cells_of_every_short_length_are_copied_whole(ending):
    """The joiner copies a cell of up to 32 characters with a few fixed-size moves (overlapping ones for the
    sizes between): every length from 0 to 70, quoted or not, a NaN text of every length to 40 and row endings
    of 1 to 5 characters give csv.writer's rows, no character lost, doubled or written past its cell."""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_.:[]" * 2
    texts = [alphabet[n % 7 : n % 7 + n] for n in range(71)]
    quoted = [f"{t[: len(t) // 2]},{t[len(t) // 2 :]}" if t else '"' for t in texts]
    values = np.array([np.nan if i % 3 == 0 else i / 7 for i in range(71)])
    for nan_length in range(41):
        nan = "n" * nan_length
        columns = [texts, number_column(values, nan), quoted[::-1], texts[::-1]]
        cells = [nan if v != v else repr(v) for v in values.tolist()]
        expected = _csv_writer_text(["a", "b", "c", "d"], [texts, cells, quoted[::-1], texts[::-1]], ending)
        assert join_rows(columns, ending, _SPECIALS + ending) == expected.split(ending, 1)[1]
