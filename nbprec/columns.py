"""A table as named numpy columns: what nbprec's core computes on, with pandas as a view of it.

The dump index, the comparison table and the per-op roll-up are :class:`Columns`: an ordered mapping of column
names to one-dimensional numpy arrays of one length (text columns are ``object`` arrays). The core (readers,
matching, metrics, rules, culprit finding, the verdict, the CSV exports and the command line) works on these
arrays directly, so a command such as ``nbprec compare`` never imports pandas (about 0.2 s of start-up, and a
per-call overhead that dominates tables of a few hundred rows). The Python API still hands users pandas objects
(``Dump.index``, ``Comparison.table``, ``Comparison.ops``): :meth:`Columns.to_frame` builds them on first use.

A :class:`Columns` reads like a DataFrame where the core needs it to (``table["cosine"]``, ``"cosine" in table``,
``len(table)`` rows, ``table.columns``), so functions written for it also accept a DataFrame through
:func:`as_columns`.

Examples
--------
>>> t = Columns({"op": np.array(["a", "b"], dtype=object), "cosine": np.array([1.0, 0.5])})
>>> len(t), t.columns, float(t["cosine"][1])
(2, ['op', 'cosine'], 0.5)
>>> t.take(np.array([1]))["op"].tolist()
['b']
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

try:
    from nbprec._csvjoin import shape_texts as _shape_texts
except ImportError:  # built without a C compiler
    _shape_texts = None

T = TypeVar("T")


class Columns:
    """Named numpy columns of one length (see the module docstring).

    Parameters
    ----------
    data
        Column name -> values (arrays, lists or scalars; scalars are repeated over ``n`` rows).
    n
        The row count; taken from the first array-like column when not given.
    """

    __slots__ = ("_data", "_n")

    def __init__(self, data: Mapping[str, Any] | None = None, n: int | None = None) -> None:
        self._data: dict[str, np.ndarray] = {}
        self._n = n
        for name, values in (data or {}).items():
            self[name] = values
        if self._n is None:
            self._n = 0

    # -- reading ---------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._n or 0)

    def __contains__(self, name: object) -> bool:
        return name in self._data

    def __getitem__(self, name: str) -> np.ndarray:
        return self._data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def get(self, name: str, default: Any = None) -> Any:
        """The column ``name``, or ``default`` when there is none."""
        return self._data.get(name, default)

    @property
    def columns(self) -> list[str]:
        """The column names, in order."""
        return list(self._data)

    @property
    def empty(self) -> bool:
        """Whether the table has no row."""
        return not len(self)

    def items(self) -> Iterable[tuple[str, np.ndarray]]:
        """(name, values) of every column, in order."""
        return self._data.items()

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i`` as a dict of Python values."""
        return {name: values[i] if values.dtype == object else values[i].item() for name, values in self._data.items()}

    def rows(self, names: Iterable[str] | None = None) -> list[tuple]:
        """Every row as a tuple of the ``names`` columns (default: all), as Python values."""
        cols = [self._data[n] for n in (self._data if names is None else names)]
        return list(zip(*(c.tolist() for c in cols), strict=True)) if cols else [() for _ in range(len(self))]

    def itertuples(self) -> Iterator[Any]:
        """Every row as a named tuple of Python values (``row.cosine``), as ``DataFrame.itertuples(index=False)``
        gives them."""
        row = collections.namedtuple("Row", self.columns, rename=True)  # type: ignore[misc]
        return map(row._make, zip(*(values.tolist() for values in self._data.values()), strict=True))

    # -- building ----------------------------------------------------------------------------------------
    def __setitem__(self, name: str, values: Any) -> None:
        if isinstance(values, np.ndarray) and values.ndim == 1:
            array = values
        elif isinstance(values, (str, bytes, bool, int, float, np.generic)) or values is None:
            if self._n is None:
                raise ValueError(f"column {name!r}: a scalar needs the row count")
            array = np.empty(self._n, dtype=object) if isinstance(values, str) or values is None else None
            if array is None:
                array = np.full(self._n, values)
            else:
                array.fill(values)
        else:
            array = _array(values)
        if self._n is None:
            self._n = len(array)
        elif len(array) != self._n:
            raise ValueError(f"column {name!r} has {len(array)} values, the table {self._n} rows")
        self._data[name] = array

    def pop(self, name: str) -> np.ndarray:
        """Remove the column ``name`` and return it."""
        return self._data.pop(name)

    def copy(self) -> Columns:
        """A new table sharing the column arrays (assigning a column to it leaves this one unchanged)."""
        return Columns(self._data, self._n)

    def select(self, names: Iterable[str]) -> Columns:
        """The ``names`` columns, in that order (those the table lacks are left out)."""
        return Columns({n: self._data[n] for n in names if n in self._data}, self._n)

    def take(self, positions: np.ndarray) -> Columns:
        """The rows at ``positions`` (integer positions, or a boolean mask), in that order."""
        positions = np.asarray(positions)
        if positions.dtype == bool:
            positions = np.flatnonzero(positions)
        return Columns({name: values[positions] for name, values in self._data.items()}, len(positions))

    def assign(self, **columns: Any) -> Columns:
        """A copy with ``columns`` added or replaced."""
        out = self.copy()
        for name, values in columns.items():
            out[name] = values
        return out

    @classmethod
    def concat(cls, parts: Iterable[Columns]) -> Columns:
        """The rows of ``parts`` one after another (the columns of the first, in its order)."""
        parts = list(parts)
        if not parts:
            return cls()
        names = parts[0].columns
        return cls({n: np.concatenate([p[n] for p in parts]) for n in names}, sum(len(p) for p in parts))

    # -- pandas -------------------------------------------------------------------------------------------
    def to_frame(self, *, categories: Iterable[str] = (), text: Iterable[str] = ()) -> Any:
        """The table as a pandas DataFrame (pandas is imported here).

        ``categories`` columns become categoricals ('' for missing); ``text`` columns take pandas' inferred
        string dtype; other text stays ``object``. Numbers and booleans keep their numpy dtypes.
        """
        import pandas as pd

        cats, texts = set(categories), set(text)
        out: dict[str, Any] = {}
        for name, values in self._data.items():
            if name in cats:
                out[name] = pd.Series(values, dtype=object).fillna("").astype(str).astype("category")
            elif values.dtype == object and name in texts:
                out[name] = pd.Series(values, dtype=None) if len(values) else pd.Series(values, dtype="str")
            elif values.dtype == object:
                out[name] = pd.Series(values, dtype=object, copy=False)
            else:
                out[name] = values
        return pd.DataFrame(out, index=pd.RangeIndex(len(self)), copy=False)

    @classmethod
    def from_frame(cls, frame: Any) -> Columns:
        """The columns of a pandas DataFrame (categoricals and pandas' string dtype become ``object`` arrays;
        nullable integers become float64 with NaN where missing)."""
        data: dict[str, np.ndarray] = {}
        for name in frame.columns:
            data[str(name)] = _from_series(frame[name])
        return cls(data, len(frame))

    def __repr__(self) -> str:
        return f"<Columns {len(self)} rows: {', '.join(self._data)}>"


def _array(values: Any) -> np.ndarray:
    """A one-dimensional array of ``values`` (a list of tuples stays a list of tuple elements)."""
    if hasattr(values, "to_numpy"):  # a pandas Series
        return _from_series(values)
    values = list(values) if not isinstance(values, (list, tuple)) else values
    if any(isinstance(v, (tuple, list)) for v in values):
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    array = np.asarray(values)
    if array.dtype.kind in "US":  # text: object, as the core compares and concatenates it
        array = array.astype(object)
    if array.ndim != 1:
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    return array


def _from_series(series: Any) -> np.ndarray:
    """A pandas Series as a numpy array the core computes on (see :meth:`Columns.from_frame`)."""
    dtype = series.dtype
    kind = getattr(dtype, "kind", "O")
    if str(dtype) == "category" or kind in "OUS" or str(dtype) in ("str", "string"):
        out = series.to_numpy(dtype=object)
        return out if out.dtype == object else out.astype(object)
    if str(dtype) in ("Int64", "Int32", "boolean"):
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    return series.to_numpy()


def as_columns(table: Any) -> Columns:
    """``table`` itself when it is :class:`Columns`, else the columns of a pandas DataFrame."""
    return table if isinstance(table, Columns) else Columns.from_frame(table)


def distinct(values: Any) -> np.ndarray:
    """The sorted distinct values of an array: ``np.unique(values)``, without the import of ``numpy.ma`` (about
    10 ms) that ``np.unique`` makes to check whether its argument is masked (asking for the first indices too
    takes its sort path, which does not check)."""
    return np.unique(np.asarray(values), return_index=True)[0]


def group_codes(*keys: np.ndarray) -> tuple[np.ndarray, int]:
    """A code per row for the distinct combinations of ``keys`` (numbered in order of first appearance), and
    how many there are: what ``groupby(keys, sort=False).ngroup()`` gives."""
    n = len(keys[0]) if keys else 0
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    if len(keys) == 1 and keys[0].dtype == object:  # one text key: factorize numbers by first appearance too
        codes, uniques = factorize(keys[0])
        if not (codes < 0).any():  # (None and NaN, one group of their own, need the general way)
            return codes, len(uniques)
    combined = np.zeros(n, dtype=np.int64)
    for key in keys:
        if key.dtype == object:
            codes, uniques = factorize(key)
        else:
            uniques, codes = np.unique(key, return_inverse=True)
        codes = np.asarray(codes, dtype=np.int64).reshape(-1) + 1  # -1 (missing) becomes 0
        width = len(uniques) + 1
        _, combined = np.unique(combined * width + codes, return_inverse=True)  # stays below n: no overflow
        combined = combined.reshape(-1)
    _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))  # numbered by first appearance
    return rank[inverse.reshape(-1)], len(first)


def _cell_text(value: Any, float_format: Any, na_rep: str) -> str:
    if isinstance(value, float):
        return na_rep if value != value else float_format(value)
    return str(value)


def text_table(table: Columns, *, float_format: Any = "{:.6g}".format, na_rep: str = "") -> str:
    """The table as plain text, a line per row (what ``DataFrame.to_string(index=False)`` prints): every cell
    right-justified under its column name, one space between columns; a number column is one wider than its
    name (room for a sign); floats through ``float_format``, NaN as ``na_rep``."""
    blocks = []
    for name, values in table.items():
        cells = [_cell_text(v, float_format, na_rep) for v in values.tolist()]
        numeric = values.dtype.kind in "biuf"
        width = max([len(name) + numeric, *map(len, cells)])
        blocks.append([name.rjust(width), *(c.rjust(width) for c in cells)])
    if not blocks:
        return ""
    return "\n".join(" ".join(line) for line in zip(*blocks, strict=True))


def once_per_object(values: list[Any], make: Callable[[Any], T]) -> list[T]:
    """``make(v)`` of each of ``values``, made once per distinct object (in order of first appearance): a table's
    shape columns hold a few tuples many times over (a dump's index keeps one tuple per distinct shape), and
    formatting a shape costs about a microsecond, looking one up a tenth of it. The objects are told apart by
    their ``id`` (``values`` keeps each alive meanwhile), so unhashable ones are fine."""
    ids = list(map(id, values))
    made = {key: make(value) for key, value in dict(zip(ids, values, strict=True)).items()}
    return list(map(made.__getitem__, ids))


def cell_texts(values: np.ndarray) -> list[str]:
    """A column's cells as text: ``str`` of each, ``''`` for None and NaN; a column of strings (the usual case)
    as it is, without a call per cell."""
    items = values.tolist()
    if list(map(type, items)).count(str) == len(items):
        return items
    return ["" if v is None or v != v else str(v) for v in items]


def texts_of_objects(values: list[Any], text: Callable[[Any], str]) -> list[str]:
    """``text(v)`` of each of ``values``, made once per distinct object (:func:`once_per_object`)."""
    return once_per_object(values, text)


def shape_cells(values: list[Any], text: Callable[[Any], str]) -> list[str]:
    """``text(v)`` of each shape of ``values``, where ``text`` writes a tuple of ints as ``[2, 8]`` (as ``str`` of
    its list and ``json.dumps`` do): those in C where it is built (``nbprec._csvjoin.shape_texts``, each distinct
    shape once; a comparison of many shapes spent more time on them than on the rest of its CSV files), the other
    values (None, tuples of floats) and all of them without C through ``text``, once per object."""
    if _shape_texts is None:
        return texts_of_objects(values, text)
    cells = _shape_texts(values)
    others = [i for i, cell in enumerate(cells) if cell is None]
    if others:
        for i, cell in zip(others, texts_of_objects([values[i] for i in others], text), strict=True):
            cells[i] = cell
    return cells


def factorize(values: Any) -> tuple[np.ndarray, list]:
    """A code per value (in order of first appearance; -1 for None and NaN) and the distinct values, as
    ``pandas.factorize`` gives them (which it uses when pandas is loaded already: faster on large columns)."""
    values = np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values
    if "pandas" in sys.modules:
        import pandas as pd

        codes, uniques = pd.factorize(values, use_na_sentinel=True)
        return np.asarray(codes, dtype=np.int64), list(uniques)
    return factorize_here(values)


def value_counts(values: Any) -> dict[Any, int]:
    """How often each value occurs, the most frequent first (ties in order of first appearance), None and NaN
    left out: what pandas' ``value_counts()`` gives, as a dict."""
    codes, uniques = factorize(values)
    counts = np.bincount(codes[codes >= 0], minlength=len(uniques))
    order = np.argsort(-counts, kind="stable")
    return {uniques[k]: int(counts[k]) for k in order.tolist()}


def factorize_here(values: np.ndarray) -> tuple[np.ndarray, list]:
    """:func:`factorize` without pandas (a dict of the values seen)."""
    items = values.tolist()
    codes: dict[Any, int] = {}  # each distinct value (in order of first appearance) -> its code
    uniques = []
    for value in dict.fromkeys(items):  # each NaN object is its own key, found again by identity
        if value is None or value != value:
            codes[value] = -1
        else:
            codes[value] = len(uniques)
            uniques.append(value)
    return np.fromiter(map(codes.__getitem__, items), np.int64, len(items)), uniques


def missing_mask(values: Any) -> np.ndarray:
    """Where an ``object`` column holds None or NaN (the one value not equal to itself), a bool per row: what
    ``v is None or v != v`` says of each value, found by numpy's elementwise comparisons."""
    values = np.asarray(values, dtype=object)
    return (values == None) | (values != values)  # noqa: E711 (elementwise)


def text_in(values: np.ndarray, choices: Iterable[str]) -> np.ndarray:
    """Whether each value of a text (``object``) column is one of ``choices`` (``np.isin`` for text, without
    sorting the column)."""
    wanted = frozenset(choices)
    return np.fromiter(map(wanted.__contains__, values.tolist()), bool, len(values))


__all__ = [
    "Columns",
    "as_columns",
    "cell_texts",
    "distinct",
    "factorize",
    "group_codes",
    "missing_mask",
    "text_in",
    "text_table",
]
