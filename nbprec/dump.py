"""The dump model: one object for every dump format.

A :class:`Dump` is an *index* (one row per tensor, columns listed in :data:`~nbprec.dump_index.INDEX_COLUMNS`,
built by :mod:`nbprec.dump_index`) plus lazy access to tensor payloads. Readers build the index from metadata
only; payloads are read when :meth:`Dump.tensor` asks for one, memory-mapped where the format allows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from nbprec.columns import Columns, distinct, factorize, group_codes, value_counts
from nbprec.dtypes import ITEMSIZES
from nbprec.dump_index import execution_order, index_frame
from nbprec.dump_problems import PROBLEM_COLUMNS as PROBLEM_COLUMNS
from nbprec.dump_problems import Problem as Problem
from nbprec.dump_problems import problem_list as _problem_list
from nbprec.dump_problems import problems_frame
from nbprec.errors import DumpFormatError, NbprecError, TensorDataUnavailableError, TensorNotFoundError

#: Columns of :attr:`Dump.edges`.
EDGE_COLUMNS = ["src", "dst_op", "dst_slot"]


TensorLoader = Callable[[Mapping[str, Any]], np.ndarray]


class Dump:
    """A dump of one run, in any format: an index of tensors plus lazy tensor access.

    Open one with :func:`nbprec.open`; readers construct it.

    Attributes
    ----------
    index : pandas.DataFrame
        One row per tensor; columns :data:`~nbprec.dump_index.INDEX_COLUMNS`. Sorted by step, rank and execution
        order. Built on first use from :attr:`columns`.
    columns : nbprec.columns.Columns
        The same index as numpy columns (what nbprec's core reads; no pandas).
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
        Dataflow edges where the format records them: ``src`` (tensor name), ``dst_op``, ``dst_slot``. Readers
        may give them as a DataFrame, as records, or as a function returning either (read on first use).
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
        index: Columns | Any,
        *,
        path: str | Path,
        format: str,
        loader: TensorLoader | None = None,
        problems: Iterable[Problem] | Any = (),
        meta: Mapping[str, Any] | None = None,
        hierarchy: Mapping[str, str | None] | None = None,
        stacks: Mapping[str, list[str]] | Callable[[], Mapping[str, list[str]]] | None = None,
        edges: Any = None,
        calls: Mapping[str, dict] | Callable[[], Mapping[str, dict]] | None = None,
    ) -> None:
        frame = None if isinstance(index, Columns) else index  # a reader's DataFrame: kept as the index
        columns = index if frame is None else Columns.from_frame(index)
        order = execution_order(columns)
        self.columns = columns if order is None else columns.take(order)
        self._frame = frame if frame is None or order is None else frame.iloc[order]
        self._index: Any = None
        self.path = Path(path)
        self.format = format
        self._loader = loader
        self._problems = _problem_list(problems)
        self._problem_frame: Any = problems if hasattr(problems, "itertuples") else None
        self.meta = dict(meta or {})
        self.hierarchy = dict(hierarchy or {})
        self._stacks = stacks
        self._calls = calls
        self._edges = edges
        self._positions: dict[str, int] | None = None

    # -- index views -------------------------------------------------------------------------------
    @property
    def index(self) -> Any:
        """One row per tensor (a pandas DataFrame, built on first use from :attr:`columns`).

        A view: editing the frame in place does not change the dump. To change the index, assign an edited
        frame (``dump.index = dump.index.assign(call=...)``), which replaces :attr:`columns` too.
        """
        if self._index is None:
            if self._frame is not None:
                self._index = self._frame.reset_index(drop=True)
            else:
                self._index = index_frame(self.columns)
        return self._index

    @index.setter
    def index(self, frame: Any) -> None:
        columns = Columns.from_frame(frame)
        order = execution_order(columns)
        self.columns = columns if order is None else columns.take(order)
        self._frame, self._index, self._positions = (frame if order is None else frame.iloc[order]), None, None

    @property
    def problems(self) -> Any:
        """Files or records that could not be read (a pandas DataFrame: ``file``, ``record``, ``problem``)."""
        if self._problem_frame is None:
            self._problem_frame = problems_frame(self._problems)
        return self._problem_frame

    @property
    def problem_list(self) -> list[Problem]:
        """The problems as :class:`Problem` objects (no pandas)."""
        return list(self._problems)

    @property
    def edges(self) -> Any:
        """Dataflow edges (a pandas DataFrame: ``src``, ``dst_op``, ``dst_slot``), empty where not recorded."""
        if not hasattr(self._edges, "iloc"):  # None, records, or a function giving either (built on first use)
            import pandas as pd

            edges = self._edges() if callable(self._edges) else self._edges
            if not hasattr(edges, "iloc"):
                edges = pd.DataFrame(list(edges or []), columns=EDGE_COLUMNS)
            self._edges = edges
        return self._edges

    def __len__(self) -> int:
        return len(self.columns)

    @property
    def names(self) -> Any:
        """Tensor names, in index order."""
        return self.index["name"]

    @property
    def steps(self) -> list[int]:
        """The steps present, sorted."""
        return [int(s) for s in distinct(self.columns["step"])]

    @property
    def ranks(self) -> list[int]:
        """The ranks present, sorted."""
        return [int(r) for r in distinct(self.columns["rank"])]

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

    def ops(self) -> Any:
        """One row per op call in execution order: op, op_type, api, call, module, direction, tensors."""
        grouped = self.index.groupby(["step", "rank", "op"], sort=False)
        first = grouped.first()[["order", "op_type", "api", "call", "module", "direction"]]
        first["tensors"] = grouped.size()
        return first.reset_index().sort_values(["step", "rank", "order"], kind="stable").reset_index(drop=True)

    def select(self, *, step: int | None = None, rank: int | None = None) -> Dump:
        """A dump restricted to one step and/or rank, sharing the payloads."""
        mask = np.ones(len(self.columns), dtype=bool)
        if step is not None:
            mask &= self.columns["step"] == step
        if rank is not None:
            mask &= self.columns["rank"] == rank
        return Dump(
            self.columns.take(mask),
            path=self.path,
            format=self.format,
            loader=self._loader,
            problems=self._problems,
            meta=self.meta,
            hierarchy=self.hierarchy,
            stacks=self._stacks,
            edges=self._edges,
            calls=self._calls,
        )

    # -- tensors -----------------------------------------------------------------------------------
    def position(self, name: str) -> int:
        """The index position of the tensor ``name``; an error when there is none, or several (in several steps
        or ranks)."""
        if self._positions is None:
            positions: dict[str, int] = {}
            for i, each in enumerate(self.columns["name"].tolist()):
                positions[each] = -1 if each in positions else i  # -1: the name is in several steps/ranks
            self._positions = positions
        position = self._positions.get(name)
        if position is None:
            raise TensorNotFoundError(f"{self.path}: no tensor named {name!r}")
        if position < 0:
            where = self.columns["name"] == name
            steps, ranks = self.columns["step"][where].tolist(), self.columns["rank"][where].tolist()
            places = dict.fromkeys(zip(steps, ranks, strict=True))
            text = ", ".join(f"step {s} rank {r}" for s, r in places)
            raise TensorNotFoundError(
                f"{self.path}: tensor name {name!r} occurs in several places ({text}); "
                "pick one with dump.select(step=..., rank=...) or pass a position"
            )
        return position

    def row(self, key: str | int) -> Any:
        """The index row of a tensor (a pandas Series), by name or by position."""
        if isinstance(key, (int, np.integer)):
            if not -len(self) <= key < len(self):
                raise TensorNotFoundError(f"{self.path}: no tensor at position {key} ({len(self)} tensors)")
            return self.index.iloc[int(key)]
        return self.index.iloc[self.position(key)]

    def tensor(self, key: str | int | Mapping[str, Any]) -> np.ndarray:
        """The payload of one tensor as a numpy array in its original dtype (memory-mapped if possible).

        ``key`` is a tensor name, a position in :attr:`index`, or an index row (a ``pd.Series`` or any
        mapping of the index columns). bfloat16 and float8 come back as ``ml_dtypes`` arrays; use
        ``.astype(np.float32)`` to compute with them.
        """
        if isinstance(key, (int, np.integer)):
            if not -len(self) <= key < len(self):
                raise TensorNotFoundError(f"{self.path}: no tensor at position {key} ({len(self)} tensors)")
            row: Any = self.columns.row(int(key))
        elif isinstance(key, str):
            row = self.columns.row(self.position(key))
        else:
            row = key
        if not row["has_data"] or self._loader is None:
            recorded = next((p for p in self._problems if p.record == row["name"]), None)
            if recorded is not None:  # the reader refused or could not find the payload: say why
                raise TensorDataUnavailableError(
                    f"{recorded.file}: payload of tensor {row['name']!r} not read: {recorded.problem}"
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
        codes, dtypes = factorize(self.columns["dtype"])
        sizes = np.array([ITEMSIZES.get(d, 0) for d in dtypes] + [0], dtype=np.int64)
        return int(np.nansum(np.clip(self.columns["numel"], 0, None) * sizes[codes]))  # (code -1: the last, 0)

    def summary(self) -> dict[str, Any]:
        """Facts about the dump as plain Python values (what ``nbprec info`` prints; without pandas)."""
        cols = self.columns
        ops = group_codes(cols["step"], cols["rank"], cols["op"])[1]

        def counts(name: str, missing: str | None = None) -> dict[str, int]:
            return {str(k or missing) if missing else str(k): v for k, v in value_counts(cols[name]).items()}

        return {
            "path": str(self.path),
            "format": self.format,
            "meta": self.meta,
            "steps": self.steps,
            "ranks": self.ranks,
            "ops": ops,
            "tensors": len(cols),
            "with_payload": int(np.count_nonzero(cols["has_data"])),
            "by_dtype": counts("dtype"),
            "by_role": counts("role"),
            "by_direction": counts("direction", "unknown"),
            "bytes": self.nbytes(),
            "problems": len(self._problems),
        }

    def __repr__(self) -> str:
        s = self.summary()
        return (
            f"<nbprec.Dump {s['format']} {str(self.path)!r}: {s['ops']} ops, {s['tensors']} tensors, "
            f"steps {s['steps']}, ranks {s['ranks']}, {len(self.problems)} problems>"
        )

    def _repr_html_(self) -> str:
        s = self.summary()
        import html

        esc = html.escape
        rows = "".join(
            f"<tr><th style='text-align:left'>{esc(k)}</th><td style='text-align:left'>{esc(str(v))}</td></tr>"
            for k, v in s.items()
            if k != "meta"
        )
        return f"<div class='nbprec-dump'><b>nbprec.Dump</b><table>{rows}</table></div>"
