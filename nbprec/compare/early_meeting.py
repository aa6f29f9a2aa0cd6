"""The ``nbprec compare`` command's side of its early worker: taking what it measured, and meeting it.

The early worker (:mod:`nbprec.compare.early`, numpy-free, forked as the command starts) measures the pairs in the
target's order and sends a record per pair. Once the command has opened and matched the dumps, :func:`measured`
takes the records sent so far for the jobs they fit: the same payload files, dtypes, shape and recorded extremes
as the job's index rows, and payloads the dump's own loader reads whole or maps for one kernel call (inside the
dump, of that dtype and shape). Every other job is measured as usual, so the results are those of a comparison
without the worker, to the bit.

Then, rather than stop the worker and fork a process from the command's own to measure the rest beside it (whose
pages, shared with the fork, each side would copy as it touches them, with a core idle while one process stops and
the other starts), :class:`MeetingExecutor` leaves the worker measuring: the command measures the jobs left from
the last one back, a few at a time, taking the worker's records in between (:class:`Beside`), and they stop where
they meet. Both take the jobs in one order: the table's, the target's, with the jobs of a step's ranks in turns
(:func:`~nbprec.compare.workers.in_turns`). Each job is measured once, by the worker or here. Jobs the worker passed
by without a record that fits (pairs it does not measure: another shape, an integer dtype, payloads not in the page
cache) are measured after the meeting, here or on a forked process when they are many
(:func:`nbprec.compare.executors.local_executor`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from operator import itemgetter
from typing import Any

import numpy as np

from nbprec.compare import early
from nbprec.compare.executors import BatchRun, BatchTask, Executor, local_executor
from nbprec.compare.workers import (
    JOB_COST,
    TAIL_ELEMENTS,
    Job,
    Result,
    RowValues,
    batches,
    default_workers,
    fork_pays,
    in_turns,
)


def start_for_call(target: Any, bench: Any, mode: str, parallel: str, workers: int | None, run_on: Any) -> bool:
    """Start the early worker for a library call of :func:`nbprec.compare` on the paths ``target`` and ``bench``,
    where the call would fork a process to measure beside it anyway (``parallel`` ``"auto"`` in a single-threaded
    process, or ``"processes"``; two workers; no executor or Dask client; tensor or auto mode; Linux) and the
    worker has pairs to measure (:func:`~nbprec.compare.early.has_pairs`). It then measures while the dumps are
    opened and matched, and the call meets it (:class:`MeetingExecutor`) instead of forking: the same results,
    one fork as before, made earlier. Whether it was started (not when a command's process started one already:
    that one serves this call)."""
    if run_on is not None or mode not in ("auto", "tensor") or workers not in (None, 2):
        return False
    if early.current() is not None or not all(isinstance(path, (str, os.PathLike)) for path in (target, bench)):
        return False
    if not fork_pays(parallel, default_workers() if workers is None else workers, 2, math.inf):
        return False  # (threads asked for, one core, no fork here, or a threaded process and "auto")
    paths = os.fspath(target), os.fspath(bench)
    if not early.has_pairs(*paths):
        return False
    early.start(*paths)
    return early.current() is not None


def measured(
    jobs: list[tuple], t_dump: Any, b_dump: Any, go_on: bool = False
) -> tuple[list[Result], list[tuple], Beside | None]:
    """The results of the ``jobs`` (engine jobs ``(table row, mode, target row, bench row)``) the worker measured,
    the jobs left to measure, and the worker going on beside this process (a :class:`Beside`, with ``go_on``) or
    None (stopped); every job is left when no worker ran for these dumps.

    The records sent so far are matched to the jobs while the worker goes on. Then, unless ``go_on``, it is
    stopped, and the jobs still left are matched to the records it sent meanwhile; with ``go_on`` it measures on
    while this process measures the jobs left from the last one back, until they meet
    (:class:`MeetingExecutor`): no other process is forked for them."""
    worker = early.current()
    if worker is None:
        return [], jobs, None
    if worker.roots != (os.path.realpath(str(t_dump.path)), os.path.realpath(str(b_dump.path))):
        early.discard()  # (another comparison than the one it was started for)
        return [], jobs, None
    loaders = t_dump._loader, b_dump._loader
    if not all(hasattr(loader, "reads_whole") for loader in loaders):
        early.discard()
        return [], jobs, None
    messages = early.Messages()
    match = _Matcher(t_dump, b_dump, loaders)
    data, ended = early.read_now(worker)
    done, left = match(jobs, messages.feed(data), messages.columns)
    if go_on and not ended:
        return done, left, Beside(worker, messages, match)
    more = messages.feed(early.stop(worker))
    if more:
        late, left = match(left, more, messages.columns)
        done += late
    return done, left, None


class Beside:
    """The worker measuring on beside this process, as :func:`measured` leaves it with ``go_on``: what it sends
    is taken job by job (:meth:`expect`, :meth:`take`), and :meth:`stop` ends it."""

    def __init__(self, worker: early.Worker, messages: early.Messages, match: _Matcher) -> None:
        self._worker: early.Worker | None = worker
        self._messages, self._match = messages, match
        self._jobs: list[tuple] = []
        self._positions: dict[tuple[str, str], int] = {}

    def expect(self, jobs: list[tuple]) -> None:
        """The jobs the worker's records are matched to, by their payload files (tensor jobs only)."""
        t_file, b_file = self._match.t_rows.file, self._match.b_rows.file
        self._jobs = jobs
        self._positions = {
            (t_file[t_pos], b_file[b_pos]): k for k, (_i, mode, t_pos, b_pos) in enumerate(jobs) if mode == "tensor"
        }

    def in_turns(self, jobs: list[tuple]) -> list[tuple]:
        """:func:`in_turns` of ``jobs`` with this comparison's target payload files."""
        return in_turns(jobs, self._match.t_rows.file)

    def take(self, wait: bool = False) -> tuple[list[tuple[int, Result | None]], bool]:
        """``([(job position, its result or None), ...], ended)``: the records sent since the last call (all the
        worker sends until it ends, stopping it first, with ``wait``), each with the position of the job it is
        for (those for no job left out) and its result, None when it does not fit the job (measured here then);
        ``ended``: the worker is gone (it measured every pair it could, or failed, or was stopped)."""
        worker = self._worker
        if worker is None:
            return [], True
        data, ended = (b"", True) if wait else early.read_now(worker)
        if ended:
            self._worker = None
            data += early.stop(worker)
        records = self._messages.feed(data)
        columns = self._messages.columns
        found: list[tuple[int, Result | None]] = []
        if columns is None:
            return found, ended
        positions, jobs, fit = self._positions, self._jobs, self._match.result
        for record in records:
            k = positions.get((record[0], record[1]))
            if k is not None:
                found.append((k, fit(jobs[k], record, columns)))
        return found, ended

    def stop(self) -> None:
        """End the worker now, whatever it is measuring (its results are not wanted)."""
        if self._worker is not None:
            self._worker = None
            early.discard()


class _Matcher:
    """Matches the worker's records to the engine's jobs, as :func:`measured` describes."""

    def __init__(self, t_dump: Any, b_dump: Any, loaders: tuple) -> None:
        self.t_rows, self.b_rows = _Rows(t_dump.columns, loaders[0]), _Rows(b_dump.columns, loaders[1])

    def __call__(
        self, jobs: list[tuple], records: list[tuple], columns: tuple[str, ...] | None
    ) -> tuple[list[Result], list[tuple]]:
        if columns is None or not records:  # (the header is the first message: records come after it)
            return [], jobs
        by_files = {(record[0], record[1]): record for record in records}
        t_file, b_file, fit = self.t_rows.file, self.b_rows.file, self.result
        done: list[Result] = []
        left: list[tuple] = []
        for job in jobs:
            _i, mode, t_pos, b_pos = job
            record = by_files.get((t_file[t_pos], b_file[b_pos])) if mode == "tensor" else None
            result = None if record is None else fit(job, record, columns)
            if result is None:
                left.append(job)
            else:
                done.append(result)
        return done, left

    def result(self, job: tuple, record: tuple, columns: tuple[str, ...]) -> Result | None:
        """The engine's result ``(table row, values, reason)`` of a tensor ``job`` from the worker's record of its
        payload files, or None when the record does not fit the job's index rows (another dtype, shape or
        recorded extremes, or payloads the dump's loader does not read as the worker read them)."""
        i, _mode, t_pos, b_pos = job
        _t_file, _b_file, t_dtype, b_dtype, shape, hints, values, reason, counts = record
        if not (
            self.t_rows.fits(t_pos, t_dtype, shape, hints[0], hints[1])
            and self.b_rows.fits(b_pos, b_dtype, shape, hints[2], hints[3])
        ):
            return None
        return i, RowValues(columns, values, counts), reason


class _Rows:
    """One side's index columns that :func:`measured` reads, as lists (a row of the index is slow to make, one by
    one), and its dump's loader."""

    def __init__(self, columns: Any, loader: Any) -> None:
        self.file, self.dtype, self.shape, self.numel, self.min, self.max, self.has_data = (
            columns[name].tolist() for name in ("file", "dtype", "shape", "numel", "min", "max", "has_data")
        )
        self.loader = loader
        #: the loader's answer does not depend on the payload's size (``reads_whole_any_size``: nbprec's own)
        self.any_size = bool(getattr(loader, "reads_whole_any_size", False))
        self.as_is: dict[tuple, bool] = {}  # (dtype, numel or -1, folder) -> whether the loader reads it as-is

    def fits(self, i: int, dtype: str, shape: tuple[int, ...], low: float, high: float) -> bool:
        """Whether row ``i`` has a payload of this dtype and shape and these recorded extremes (equal, or both NaN),
        one the dump's loader reads as the worker did (:meth:`reads_as_is`)."""
        if not self.has_data[i] or self.dtype[i] != dtype or tuple(self.shape[i]) != shape:
            return False
        a, b = self.min[i], self.max[i]
        if not ((a == low or (a != a and low != low)) and (b == high or (b != b and high != high))):
            return False
        file, numel = self.file[i], self.numel[i]
        key = (dtype, -1 if self.any_size else numel, file[: file.rfind(os.sep)])
        answer = self.as_is.get(key)
        if answer is None:
            answer = self.as_is[key] = self.reads_as_is({"dtype": dtype, "numel": numel, "file": file})
        return answer

    def reads_as_is(self, row: dict[str, Any]) -> bool:
        """Whether the dump's loader reads ``row``'s payload whole (``reads_whole``) or maps it for one kernel call
        (``reads_mapped``, msprobe's loader only), as the worker does. :meth:`fits` asks once per dtype, size and
        folder (the worker reads payloads of a folder by their names alone, never through a subfolder), or once per
        dtype and folder of a loader whose answer does not depend on the size (``reads_whole_any_size``: nbprec's
        own, whose dumps may hold as many sizes as tensors)."""
        mapped = getattr(self.loader, "reads_mapped", None)
        return bool(self.loader.reads_whole(row) or (mapped is not None and mapped(row)))


#: Jobs the command measures between two looks at the worker's records, at the most ...
CHUNK_JOBS = 8
#: ... and their cost (elements, plus JOB_COST a pair) at the most, unless one pair costs more.
CHUNK_ELEMENTS = TAIL_ELEMENTS


class MeetingExecutor(Executor):
    """Measures the jobs with the early worker still measuring beside this process (see the module's text).

    Attributes
    ----------
    taken : int
        Jobs whose results came from the worker (after :func:`measured`).
    measured_here : int
        Jobs measured by this process (and by the process it forked for the jobs left after the meeting).
    """

    slots = 2
    orders_jobs = True  # (the engine's batches, largest pairs first, would only be undone: 4 ms for 4,035 jobs)

    def __init__(self, beside: Beside, numel: np.ndarray, parallel: str) -> None:
        self._beside, self._numel, self._parallel = beside, numel, parallel
        self._after: BatchRun | None = None
        self.taken = self.measured_here = 0

    def submit_batches(self, batches: list[list[Job]], task: BatchTask) -> BatchRun:
        """Measure the jobs of ``batches`` (one, from the engine: :attr:`orders_jobs`), meeting the worker."""
        return BatchRun(self._meet([job for batch in batches for job in batch], task), self._close, self._wait)

    def _meet(self, jobs: list[Job], task: BatchTask) -> Iterator[list[Result]]:
        beside, numel = self._beside, self._numel
        jobs.sort(key=itemgetter(0))  # the table's order, the target's ...
        jobs = beside.in_turns(jobs)  # ... a step's ranks in turns, as the worker takes them
        beside.expect(jobs)
        done = bytearray(len(jobs))  # 1: measured (here, or its record taken)
        back = len(jobs)  # this process measures jobs[:back] from the end; the worker went up to `reached`
        reached = -1
        wait = False
        while True:
            found, ended = beside.take(wait)
            taken = []
            for k, result in found:
                reached = max(reached, k)
                if result is not None and k < back and not done[k]:
                    done[k] = 1
                    taken.append(result)
            if taken:
                self.taken += len(taken)
                yield taken
            if ended:
                break
            if back <= reached + 1:  # met: stop it and take what it sends as it stops
                wait = True
                continue
            chunk: list[Job] = []
            cost = 0
            while back > reached + 1 and len(chunk) < CHUNK_JOBS and cost < CHUNK_ELEMENTS:
                back -= 1
                if not done[back]:
                    done[back] = 1
                    chunk.append(jobs[back])
                    cost += max(int(numel[jobs[back][0]]), 0) + JOB_COST
            if chunk:
                chunk.reverse()  # (the measuring task reads a batch in order)
                self.measured_here += len(chunk)
                yield task(chunk)
        left = [jobs[k] for k in range(back) if not done[k]]
        if left:  # pairs the worker passed by: here, or on a forked process when they are many
            self.measured_here += len(left)
            after = local_executor(self._parallel, 2, left, numel)
            self._after = after.submit_batches(batches(left, numel, after.limits, after.slots), task)
            yield from self._after

    def _close(self) -> None:
        self._beside.stop()
        if self._after is not None:
            self._after.close()

    def _wait(self) -> None:
        if self._after is not None:
            self._after.wait()


__all__ = ["CHUNK_ELEMENTS", "CHUNK_JOBS", "Beside", "MeetingExecutor", "measured", "start_for_call"]
