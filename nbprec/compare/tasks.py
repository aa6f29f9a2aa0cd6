"""What an executor runs: :class:`PairTask` measures a batch of pairs, here or elsewhere.

Here (this thread, a worker thread, a forked copy of this process) it reads the index rows of the opened
dumps by position. Elsewhere (a Dask worker, a process pool) it goes as a :class:`BatchCall`: the batch's own
index rows and, for each side, a :class:`PayloadSource` (the dump's path, format and payload loader). The
worker reads the payload files itself from the path the index names, so no tensor data and no whole index
cross the network; results come back as metric values.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from nbprec._optional import require
from nbprec._record import Record
from nbprec.columns import Columns
from nbprec.compare._sums import usable_side
from nbprec.compare.workers import Job, Result
from nbprec.dump import Dump
from nbprec.dump_index import index_columns
from nbprec.errors import ComparisonError

#: The measuring function of the engine: ``measure((row, mode, target row, bench row), target, bench, hints)``.
Measure = Callable[[tuple[int, str, Mapping[str, Any], Mapping[str, Any]], Dump, Dump, "ExtremeHints"], Result]

RowJob = tuple[int, str, Mapping[str, Any], Mapping[str, Any]]  # (table row, mode, target row, bench row)
#: How a task measures a batch here, when not job by job: ``measure_batch(jobs, target, bench, hints)``, the
#: results of ``measure`` on each job (the engine's :func:`nbprec.compare.engine._measure_batch`).
MeasureBatch = Callable[[list[RowJob], Dump, Dump, "ExtremeHints"], list[Result]]

#: A payload loader that pickles to more than this holds data, not a way to read files (see PayloadSource).
LOADER_BYTES = 1 << 20


class _Boxed(dict):
    """An index's columns as lists of Python values, each column boxed when it is first asked for."""

    __slots__ = ("index",)

    def __init__(self, index: Columns) -> None:
        super().__init__()
        self.index = index

    def __missing__(self, name: str) -> list[Any]:
        values = self[name] = self.index[name].tolist()  # (KeyError: no such column)
        return values


class Row(Mapping[str, Any]):
    """One index row, read from the columns as its values are asked for (a mapping, as readers' loaders take)."""

    __slots__ = ("_columns", "_i")

    def __init__(self, columns: _Boxed, i: int) -> None:
        self._columns, self._i = columns, i

    def __getitem__(self, name: str) -> Any:
        return self._columns[name][self._i]

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self._columns[name][self._i]
        except KeyError:
            return default

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns.index)

    def __len__(self) -> int:
        return len(self._columns.index.columns)


class Rows:
    """Index rows by position, as mappings of Python values.

    The per-row look-ups of a mixed-dtype table dominated the set-up of dumps with many small tensors; here a
    column is boxed once, when a row is first asked for its value (in each worker process, after the fork), and a
    row is a view of position ``i`` in them (:class:`Row`; :meth:`record` gives a dict, what crosses to other
    processes). Measuring a pair asks for 7 or 8 of a dump index's 28 columns: boxing them all took 3-4.5 ms a
    side for 10,015 tensors, and as much again to free.
    """

    def __init__(self, index: Columns) -> None:
        self._lists = _Boxed(index)

    def row(self, i: int) -> Row:
        """Row ``i`` of the index."""
        return Row(self._lists, i)

    def record(self, i: int) -> dict[str, Any]:
        """Row ``i`` of the index as a dict."""
        return dict(self.row(i))


#: A side's (min, max) hint when its recorded ones are not usable (the kernel finds that side's itself).
_UNKNOWN = (math.nan, math.nan)


class ExtremeHints:
    """Whether to hand the dumps' recorded minima and maxima to the kernel (``tensor_metrics(extremes=...)``),
    which then reads a pair once instead of twice. Formats whose statistics are exact (msprobe, nbprec's own)
    make them right; once they are wrong for more than a quarter of the pairs (a format that rounds them),
    they are no longer given. Statistics that are not usable (NaN, inf) do not count either way, and are not
    given: the kernel would not take them, and finds such a pair's extremes itself. Local to one :func:`compare`
    call (and to each worker: the results never depend on them, only the speed)."""

    def __init__(self) -> None:
        self.given = self.wrong = 0

    def extremes(self, t_row: Mapping[str, Any], b_row: Mapping[str, Any]) -> tuple[float, ...] | None:
        """The hints of a pair: both sides' recorded (min, max); a side's own pair NaN where they are not usable
        (an overflowed tensor's NaN or inf statistics), when the other side's are (the kernel then finds only
        that side's extremes first); None when neither side's are usable, or when they are no longer given."""
        if self.wrong > 4 and 4 * self.wrong > self.given:
            return None
        found = (t_row["min"], t_row["max"], b_row["min"], b_row["max"])
        t_usable, b_usable = usable_side(found[0], found[1]), usable_side(found[2], found[3])
        if t_usable and b_usable:
            return found
        if not (t_usable or b_usable):
            return None
        return (*(found[:2] if t_usable else _UNKNOWN), *(found[2:] if b_usable else _UNKNOWN))

    def record(self, held: bool | None) -> None:
        if held is not None:
            self.given += 1
            self.wrong += not held


class PayloadSource:
    """What a worker elsewhere needs to read one dump's payloads: the dump's path, its format and its payload
    loader, without the index (each batch brings its own rows).

    nbprec's readers give loaders that are a function of the index row, holding at most the dump's folder (a
    few hundred bytes to a few kB pickled), so the worker reads the files the rows name, from the same path:
    the dumps must lie on a file system every worker sees at the same path. A loader that pickles to more than
    :data:`LOADER_BYTES` holds payloads in memory rather than reading files, and is refused.
    """

    def __init__(self, path: str, format: str, loader: bytes) -> None:
        self.path, self.format = path, format
        self._loader = loader  # the loader, pickled (cloudpickle: readers' loaders may be closures)
        self._dump: Dump | None = None

    @classmethod
    def of(cls, dump: Dump) -> PayloadSource:
        """The payload source of an opened dump."""
        cloudpickle = require("cloudpickle", "sending a dump's payload reader to other processes", extra="dask")
        loader = dump._loader  # the reader's own loader (Dump keeps it private; nothing else reads payloads)
        try:
            blob = cloudpickle.dumps(loader)
        except Exception as exc:  # cloudpickle raises whatever the loader's state raises (locks, open files, ...)
            raise ComparisonError(
                f"{dump.path}: the payload loader of this {dump.format} dump cannot be sent to other processes "
                f"({type(exc).__name__}: {exc}); compare it locally (no client=/executor=)"
            ) from exc
        if len(blob) > LOADER_BYTES:
            raise ComparisonError(
                f"{dump.path}: the payload loader of this {dump.format} dump holds {len(blob) / 1e6:.1f} MB (payloads "
                "in memory, not files): remote workers read payloads from files; write the dump to a shared path "
                "and open it from there, or compare it locally"
            )
        return cls(str(dump.path), dump.format, blob)

    def dump(self) -> Dump:
        """A dump without index rows that reads payloads as the original does (``dump().tensor(row)``)."""
        if self._dump is None:
            loader = pickle.loads(self._loader)  # bytes this class wrote in the comparing process, not a user file
            self._dump = Dump(index_columns([]), path=self.path, format=self.format, loader=loader)
        return self._dump

    def __reduce__(self) -> tuple[Any, ...]:
        return (PayloadSource, (self.path, self.format, self._loader))


class BatchCall(Record, frozen=False):
    """A batch measured elsewhere: a picklable call without arguments, holding the batch's jobs with their
    index rows (``(table row, mode, target row, bench row)``) and both sides' payload sources."""

    measure: Measure
    target: PayloadSource
    bench: PayloadSource
    jobs: list[tuple[int, str, dict[str, Any], dict[str, Any]]]

    def __repr__(self) -> str:  # short: schedulers name tasks by it
        return f"BatchCall({len(self.jobs)} pairs)"

    def __call__(self) -> list[Result]:
        t_dump, b_dump = self.target.dump(), self.bench.dump()
        hints = ExtremeHints()
        return [self.measure(job, t_dump, b_dump, hints) for job in self.jobs]


class PairTask:
    """Measures batches of jobs ``(table row, mode, target position, bench position)`` of two opened dumps with
    ``measure`` (a module-level function, so that it pickles by name).

    Call it on a batch to measure it here; :meth:`portable` gives the same measurement as a picklable
    :class:`BatchCall` for executors whose workers do not share this process's memory.
    """

    def __init__(self, measure: Measure, target: Dump, bench: Dump, measure_batch: MeasureBatch | None = None) -> None:
        self._measure = measure
        self._measure_batch = measure_batch
        self._dumps = (target, bench)
        self._rows = (Rows(target.columns), Rows(bench.columns))
        self._hints = ExtremeHints()  # forked workers each get their own copy
        self._sources: tuple[PayloadSource, PayloadSource] | None = None
        self._places: tuple[np.ndarray, np.ndarray] | None = None  # the target's steps and ranks

    def __call__(self, batch: list[Job]) -> list[Result]:
        (t_rows, b_rows), (t_dump, b_dump), hints, measure = self._rows, self._dumps, self._hints, self._measure
        jobs = [(i, mode, t_rows.row(t), b_rows.row(b)) for i, mode, t, b in batch]
        if self._measure_batch is not None:
            return self._measure_batch(jobs, t_dump, b_dump, hints)
        return [measure(job, t_dump, b_dump, hints) for job in jobs]

    def target_files(self) -> Any:
        """The target index's payload file of each of its rows (a sequence indexed by target position)."""
        return self._dumps[0].columns["file"]

    def portable(self, batch: list[Job]) -> BatchCall:
        """``batch`` as a call that measures it in another process or machine (which reads the files)."""
        if self._sources is None:
            self._sources = (PayloadSource.of(self._dumps[0]), PayloadSource.of(self._dumps[1]))
        t_rows, b_rows = self._rows
        jobs = [(i, mode, t_rows.record(t), b_rows.record(b)) for i, mode, t, b in batch]
        return BatchCall(self._measure, *self._sources, jobs)

    def _steps_ranks(self) -> tuple[np.ndarray, np.ndarray]:
        if self._places is None:
            index = self._dumps[0].columns
            self._places = (index["step"].astype(np.int64), index["rank"].astype(np.int64))
        return self._places

    def groups(self) -> np.ndarray:
        """A code per target tensor (table row): its (step, rank)."""
        steps, ranks = self._steps_ranks()
        if not len(steps):
            return np.zeros(0, dtype=np.int64)
        return np.unique(np.stack([steps, ranks], axis=1), axis=0, return_inverse=True)[1].reshape(-1)

    def label(self, batch: list[Job]) -> str:
        """Where the batch's pairs come from, for task names: ``step0-rank3`` (its first pair's)."""
        if not batch:
            return "empty"
        steps, ranks = self._steps_ranks()
        return f"step{steps[batch[0][2]]}-rank{ranks[batch[0][2]]}"
