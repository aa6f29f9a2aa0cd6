"""The dump model: one object for every dump format.

A :class:`Dump` is an *index* (a pandas DataFrame with one row per tensor, columns listed in
:data:`INDEX_COLUMNS`) plus lazy access to tensor payloads. Readers build the index from metadata only;
payloads are read when :meth:`Dump.tensor` asks for one, memory-mapped where the format allows.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nbprec.dtypes import NUMPY_DTYPES, canonical_dtype
from nbprec.errors import DumpFormatError, NbprecError, TensorDataUnavailableError, TensorNotFoundError
from nbprec.stats import STAT_COLUMNS

#: Columns of every dump index, in order, with their meaning.
INDEX_COLUMNS: dict[str, str] = {
    "name": "unique tensor name within the dump, e.g. 'Functional.linear.0.forward.output.0'",
    "run": "name of the run (the dump folder's name unless given)",
    "step": "training step (iteration) the tensor belongs to; -1 when the format has none",
    "rank": "device rank; -1 when the format has none",
    "order": "execution order of the op within its step and rank, from 0",
    "op": "the op call the tensor belongs to, e.g. 'Functional.linear.0.forward'",
    "op_type": "the op's type or API, e.g. 'linear', 'MatMul'",
    "api": "normalised API name without call index or direction, e.g. 'Functional.linear'",
    "call": "how many earlier calls of the same API and direction there were (-1 if unknown)",
    "module": "module path (e.g. 'enc.layers.0.linear1'), '' when unknown",
    "direction": "'forward', 'backward' or '' when the format does not say",
    "role": "'input', 'output', 'parameter' or 'gradient'",
    "slot": "position of the tensor among the op's tensors of that role, e.g. '0', '1.0', 'weight'",
    "dtype": "original dtype, canonical name ('bfloat16', 'float16', 'float8_e4m3fn', ...)",
    "shape": "shape as a tuple of ints",
    "numel": "number of elements",
    **{c: f"{c.replace('_', ' ')} of the tensor (float64), NaN when unknown" for c in STAT_COLUMNS},
    "checksum": "checksum string recorded by the format ('' when none)",
    "file": "payload file, '' when the dump holds none for this tensor",
    "has_data": "whether a payload can be loaded",
}

_DEFAULTS: dict[str, Any] = {
    "run": "",
    "step": -1,
    "rank": -1,
    "order": -1,
    "op": "",
    "op_type": "",
    "api": "",
    "call": -1,
    "module": "",
    "direction": "",
    "role": "output",
    "slot": "0",
    "dtype": "",
    "shape": (),
    "numel": -1,
    "checksum": "",
    "file": "",
    "has_data": False,
}
_INT_COLUMNS = ("step", "rank", "order", "call", "numel")
_COUNT_COLUMNS = ("nan_count", "inf_count", "zero_count")

PROBLEM_COLUMNS = ("file", "record", "problem")


@dataclass(frozen=True)
class Problem:
    """Something in a dump that could not be read or understood; kept, never silently dropped."""

    file: str
    problem: str
    record: str = ""


def make_index(
    records: Iterable[Mapping[str, Any]] | pd.DataFrame | Mapping[str, Any], run: str = "", *, typed: bool = False
) -> pd.DataFrame:
    """Build a dump index from reader records, filling defaults and fixing column types.

    Records need at least ``name``; every other column of :data:`INDEX_COLUMNS` is optional. ``records``
    may also be a DataFrame of such columns (faster for column-wise formats). With ``typed``, ``records`` is a
    mapping (or DataFrame) of columns that already have their index type and no missing value (a reader that
    builds its columns itself, as the msprobe reader does): they are taken as they are, without a copy, and only
    the columns it lacks are filled (an index of 10^6 tensors costs no pass over each column).
    """
    if typed:
        return _typed_frame(records, run)
    if isinstance(records, pd.DataFrame):
        return _fix_frame(records.reindex(columns=list(INDEX_COLUMNS)), run)
    rows = list(records)
    by_column = _transpose(rows)
    columns: dict[str, Any] = {}
    for column in INDEX_COLUMNS:
        # the rows' keys known (by_column): a column they lack is all missing
        values = by_column.get(column, [None] * len(rows)) if by_column else [row.get(column) for row in rows]
        default = _DEFAULTS.get(column)
        if column == "name":  # as pandas infers it (its string dtype for text)
            columns[column] = pd.Series(values, dtype=None if values else object)
        elif column == "shape":
            shapes = [tuple(v) if isinstance(v, (list, tuple, np.ndarray)) else () for v in values]
            columns[column] = _object_array(shapes)
        elif column == "run":
            columns[column] = _object_array([v if v is not None and v == v and v != "" else run for v in values])
        elif column in _INT_COLUMNS:
            columns[column] = np.array([default if v is None or v != v else v for v in values], dtype=np.int64)
        elif column in STAT_COLUMNS:
            columns[column] = _floats(values)
        elif column == "has_data":
            columns[column] = np.array([bool(v) if v is not None and v == v else False for v in values], dtype=bool)
        else:  # text columns (an all-missing one would be float64 in pandas: fill as object)
            columns[column] = _object_array([default if v is None or v != v else v for v in values])
    frame = pd.DataFrame(columns, index=pd.RangeIndex(len(rows)), copy=False)
    return _finish_index(frame)


def _transpose(rows: list[Mapping[str, Any]]) -> dict[str, list]:
    """Column -> values of rows that all hold the same keys in the same order (a reader's records usually
    come from one dict literal), transposed in one pass; ``{}`` when they do not (the caller then takes each
    column row by row)."""
    if not rows or not all(type(row) is dict for row in rows):
        return {}
    keys = tuple(rows[0])
    if any(tuple(row) != keys for row in rows):
        return {}
    return dict(zip(keys, map(list, zip(*map(dict.values, rows), strict=True)), strict=True))


def _object_array(values: list) -> pd.Series:
    """An object column of exactly these values (tuples stay elements; text stays ``object``, not the string
    dtype pandas would infer)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return pd.Series(out, dtype=object, copy=False)


def _floats(values: list) -> np.ndarray:
    """float64 values; None, and text that is not a number, become NaN (as ``pd.to_numeric(errors="coerce")``)."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(np.float64)


def _fix_frame(frame: pd.DataFrame, run: str) -> pd.DataFrame:
    """Defaults and column types for a column-wise index (readers that build a DataFrame themselves)."""
    for column, default in _DEFAULTS.items():
        if column == "shape":
            frame[column] = [tuple(s) if isinstance(s, (list, tuple, np.ndarray)) else () for s in frame[column]]
        elif column == "run" and run:
            frame[column] = frame[column].astype(object).fillna(run).replace("", run)
        elif isinstance(default, (str, bool)):  # an all-missing column is float64: fill as object
            frame[column] = frame[column].astype(object).fillna(default) if len(frame) else frame[column]
        else:
            frame[column] = frame[column].fillna(default) if len(frame) else frame[column]
    for column in _INT_COLUMNS:
        frame[column] = frame[column].astype(np.int64)
    for column in STAT_COLUMNS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(np.float64)
    frame["has_data"] = frame["has_data"].astype(bool)
    return _finish_index(frame)


def _typed_frame(columns: Mapping[str, Any] | pd.DataFrame, run: str) -> pd.DataFrame:
    """The index of columns that have their types already (see :func:`make_index`); missing ones are filled."""
    n = len(columns["name"])
    out: dict[str, Any] = {}
    for column in INDEX_COLUMNS:
        if column in columns:
            out[column] = columns[column]
        elif column == "run" or (column in _DEFAULTS and isinstance(_DEFAULTS[column], str)):
            out[column] = np.full(n, run if column == "run" else _DEFAULTS[column], dtype=object)
        elif column in STAT_COLUMNS:
            out[column] = np.full(n, np.nan)
        elif column == "shape":
            out[column] = np.empty(n, dtype=object)
            out[column].fill(())
        elif column == "has_data":
            out[column] = np.zeros(n, dtype=bool)
        else:
            out[column] = np.full(n, _DEFAULTS[column], dtype=np.int64)
    if run and "run" in columns:
        values = np.asarray(out["run"], dtype=object)
        out["run"] = np.where((values == "") | pd.isna(values), run, values)
    for column, values in out.items():  # text stays ``object``: pandas would infer its string dtype from arrays
        if isinstance(values, np.ndarray) and values.dtype == object and column != "name":
            out[column] = pd.Series(values, dtype=object, copy=False)
    return _finish_index(pd.DataFrame(out, index=pd.RangeIndex(n), copy=False))


def _finish_index(frame: pd.DataFrame) -> pd.DataFrame:
    """Canonical dtype names, and element counts from shapes where a reader gave none."""
    dtypes = frame["dtype"]
    canonical = {d: canonical_dtype(d) if d else "" for d in dtypes.unique()}  # once per distinct dtype
    if any(k != v for k, v in canonical.items()) or dtypes.dtype != object:
        frame["dtype"] = dtypes.map(canonical).astype(object)
    missing_numel = frame["numel"] < 0
    if missing_numel.any():
        frame.loc[missing_numel, "numel"] = [int(np.prod(s)) if s else 1 for s in frame.loc[missing_numel, "shape"]]
    return frame


def problems_frame(problems: Iterable[Problem]) -> pd.DataFrame:
    """A DataFrame of problems, with the columns :data:`PROBLEM_COLUMNS`."""
    return pd.DataFrame([(p.file, p.record, p.problem) for p in problems], columns=list(PROBLEM_COLUMNS))


TensorLoader = Callable[[Mapping[str, Any]], np.ndarray]


class Dump:
    """A dump of one run, in any format: an index of tensors plus lazy tensor access.

    Open one with :func:`nbprec.open`; readers construct it.

    Attributes
    ----------
    index : pandas.DataFrame
        One row per tensor; columns :data:`INDEX_COLUMNS`. Sorted by step, rank and execution order.
    problems : pandas.DataFrame
        Files or records that could not be read (columns ``file``, ``record``, ``problem``).
    path : pathlib.Path
        Where the dump was opened from.
    format : str
        The reader that opened it (``"msprobe"``, ``"tf_npy"``, ``"ptdbg"``, ``"nbprec"``, ...).
    meta : dict
        Format-specific facts (task, level, framework, ...).
    hierarchy : dict
        Module hierarchy: node (op or module call) -> parent module call (``None`` at the top).
    edges : pandas.DataFrame
        Dataflow edges where the format records them: ``src`` (tensor name), ``dst_op``, ``dst_slot``.
    calls : dict
        How each API op was called (its API and non-tensor arguments), where the format records it.

    Examples
    --------
    >>> dump = nbprec.open("runs/fp32")              # doctest: +SKIP
    >>> dump.index[["op", "role", "dtype", "shape"]]  # doctest: +SKIP
    >>> dump.tensor("Functional.linear.0.forward.output.0")  # doctest: +SKIP
    """

    def __init__(
        self,
        index: pd.DataFrame,
        *,
        path: str | Path,
        format: str,
        loader: TensorLoader | None = None,
        problems: Iterable[Problem] | pd.DataFrame = (),
        meta: Mapping[str, Any] | None = None,
        hierarchy: Mapping[str, str | None] | None = None,
        stacks: Mapping[str, list[str]] | Callable[[], Mapping[str, list[str]]] | None = None,
        edges: pd.DataFrame | None = None,
        calls: Mapping[str, dict] | Callable[[], Mapping[str, dict]] | None = None,
    ) -> None:
        index = index.sort_values(["step", "rank", "order"], kind="stable").reset_index(drop=True)
        self.index = index
        self.path = Path(path)
        self.format = format
        self._loader = loader
        self.problems = problems if isinstance(problems, pd.DataFrame) else problems_frame(problems)
        self.meta = dict(meta or {})
        self.hierarchy = dict(hierarchy or {})
        self._stacks = stacks
        self._calls = calls
        self.edges = edges if edges is not None else pd.DataFrame(columns=["src", "dst_op", "dst_slot"])
        self._positions: dict[str, int] | None = None

    # -- index views -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.index)

    @property
    def names(self) -> pd.Series:
        """Tensor names, in index order."""
        return self.index["name"]

    @property
    def steps(self) -> list[int]:
        """The steps present, sorted."""
        return sorted(int(s) for s in self.index["step"].unique())

    @property
    def ranks(self) -> list[int]:
        """The ranks present, sorted."""
        return sorted(int(r) for r in self.index["rank"].unique())

    @property
    def stacks(self) -> dict[str, list[str]]:
        """Call stack of each op where the format records one (loaded on first use)."""
        if callable(self._stacks):
            self._stacks = dict(self._stacks())
        return dict(self._stacks or {})

    @property
    def calls(self) -> dict[str, dict]:
        """How each API op was called (API and arguments), where the format records it (loaded on first use)."""
        if callable(self._calls):
            self._calls = dict(self._calls())
        return dict(self._calls or {})

    def ops(self) -> pd.DataFrame:
        """One row per op call in execution order: op, op_type, api, call, module, direction, tensors."""
        grouped = self.index.groupby(["step", "rank", "op"], sort=False)
        first = grouped.first()[["order", "op_type", "api", "call", "module", "direction"]]
        first["tensors"] = grouped.size()
        return first.reset_index().sort_values(["step", "rank", "order"], kind="stable").reset_index(drop=True)

    def select(self, *, step: int | None = None, rank: int | None = None) -> Dump:
        """A dump restricted to one step and/or rank, sharing the payloads."""
        mask = np.ones(len(self.index), dtype=bool)
        if step is not None:
            mask &= (self.index["step"] == step).to_numpy()
        if rank is not None:
            mask &= (self.index["rank"] == rank).to_numpy()
        return Dump(
            self.index[mask],
            path=self.path,
            format=self.format,
            loader=self._loader,
            problems=self.problems,
            meta=self.meta,
            hierarchy=self.hierarchy,
            stacks=self._stacks,
            edges=self.edges,
            calls=self._calls,
        )

    # -- tensors -----------------------------------------------------------------------------------
    def row(self, key: str | int) -> pd.Series:
        """The index row of a tensor, by name or by position."""
        if isinstance(key, (int, np.integer)):
            if not -len(self.index) <= key < len(self.index):
                raise TensorNotFoundError(f"{self.path}: no tensor at position {key} ({len(self)} tensors)")
            return self.index.iloc[int(key)]
        if self._positions is None:
            positions: dict[str, int] = {}
            for i, name in enumerate(self.index["name"]):
                positions[name] = -1 if name in positions else i  # -1: the name is in several steps/ranks
            self._positions = positions
        position = self._positions.get(key)
        if position is None:
            raise TensorNotFoundError(f"{self.path}: no tensor named {key!r}")
        if position < 0:
            where = self.index.loc[self.index["name"] == key, ["step", "rank"]].drop_duplicates()
            places = ", ".join(f"step {s} rank {r}" for s, r in where.itertuples(index=False))
            raise TensorNotFoundError(
                f"{self.path}: tensor name {key!r} occurs in several places ({places}); "
                "pick one with dump.select(step=..., rank=...) or pass a position"
            )
        return self.index.iloc[position]

    def tensor(self, key: str | int | Mapping[str, Any]) -> np.ndarray:
        """The payload of one tensor as a numpy array in its original dtype (memory-mapped if possible).

        ``key`` is a tensor name, a position in :attr:`index`, or an index row (a ``pd.Series`` or any
        mapping of the index columns). bfloat16 and float8 come back as ``ml_dtypes`` arrays; use
        ``.astype(np.float32)`` to compute with them.
        """
        row = key if isinstance(key, (pd.Series, Mapping)) else self.row(key)
        if not row["has_data"] or self._loader is None:
            recorded = self.problems[self.problems["record"] == row["name"]] if len(self.problems) else self.problems
            if len(recorded):  # the reader refused or could not find the payload: say why
                first = recorded.iloc[0]
                raise TensorDataUnavailableError(
                    f"{first['file']}: payload of tensor {row['name']!r} not read: {first['problem']}"
                )
            raise TensorDataUnavailableError(
                f"{self.path}: tensor {row['name']!r} has no payload in this dump "
                f"(format {self.format}, mode {self.meta.get('task', 'unknown')}); only its statistics are known"
            )
        try:
            return self._loader(row)
        except NbprecError:
            raise
        except (OSError, ValueError, EOFError, RuntimeError) as exc:
            raise DumpFormatError(row["file"] or self.path, f"cannot read tensor payload: {exc}", row["name"]) from exc

    # -- summaries ---------------------------------------------------------------------------------
    def nbytes(self) -> int:
        """Total payload bytes the index describes (element counts times original item sizes)."""
        sizes = self.index["dtype"].map(lambda d: NUMPY_DTYPES[d].itemsize if d in NUMPY_DTYPES else 0)
        return int((self.index["numel"].clip(lower=0) * sizes).sum())

    def summary(self) -> dict[str, Any]:
        """Facts about the dump as plain Python values (what ``nbprec info`` prints)."""
        idx = self.index
        return {
            "path": str(self.path),
            "format": self.format,
            "meta": self.meta,
            "steps": self.steps,
            "ranks": self.ranks,
            "ops": int(idx.groupby(["step", "rank", "op"]).ngroups) if len(idx) else 0,
            "tensors": len(idx),
            "with_payload": int(idx["has_data"].sum()),
            "by_dtype": {str(k): int(v) for k, v in idx["dtype"].value_counts().items()},
            "by_role": {str(k): int(v) for k, v in idx["role"].value_counts().items()},
            "by_direction": {str(k or "unknown"): int(v) for k, v in idx["direction"].value_counts().items()},
            "bytes": self.nbytes(),
            "problems": len(self.problems),
        }

    def __repr__(self) -> str:
        s = self.summary()
        return (
            f"<nbprec.Dump {s['format']} {str(self.path)!r}: {s['ops']} ops, {s['tensors']} tensors, "
            f"steps {s['steps']}, ranks {s['ranks']}, {len(self.problems)} problems>"
        )

    def _repr_html_(self) -> str:
        s = self.summary()
        esc = html.escape
        rows = "".join(
            f"<tr><th style='text-align:left'>{esc(k)}</th><td style='text-align:left'>{esc(str(v))}</td></tr>"
            for k, v in s.items()
            if k != "meta"
        )
        return f"<div class='nbprec-dump'><b>nbprec.Dump</b><table>{rows}</table></div>"
