"""How pairs are batched and what they cost, and the forked worker processes of the local engine.

The engine (:mod:`nbprec.compare.engine`) makes the jobs; :mod:`nbprec.compare.executors` runs their batches
on one executor (this thread, threads, forked processes, a Dask cluster). This module holds what every
executor shares, once:

- the cost model (:data:`PAIR_SECONDS`, :data:`ELEMENT_SECONDS`) and :func:`batches`, which cuts the jobs into
  batches within an executor's :class:`BatchLimits`, largest first and shrinking towards the end, and
  :func:`in_turns`, the jobs of a step's ranks taken in turns (each executor's order);
- the choice of the local executor for ``compare(parallel=...)`` (:func:`fork_pays`, :func:`use_threads`);
- the forked processes (:func:`run_processes`), beside which this process measures too: they also run the
  per-pair Python in parallel, which wins on many small tensors; they inherit the opened dumps and the
  batches, and only batch numbers and results cross the process boundary, through one pair of pipes per
  worker (no helper threads, no locks).

Memory stays bounded by a few tensors per worker whichever executor is used.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import pickle
import select
import signal
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from nbprec._cores import usable_cores
from nbprec._record import Record
from nbprec.compare.metrics import KERNEL

Job = tuple[int, str, Any, Any]  # (table row, mode, target row, bench row); rows as mappings or index positions


class RowValues:
    """A pair's metric values as one tuple in the order of ``columns`` (shared by many rows), with each side's count
    of NaN and infinities: a :data:`Result`'s values that :func:`nbprec.compare.pair_table.fill_results` puts into the
    table's columns a batch of rows at a time, where a dict per row would be made, read key by key and freed. The
    command's early worker sends its records so (:mod:`nbprec.compare.early_meeting`)."""

    __slots__ = ("columns", "counts", "values")

    def __init__(self, columns: tuple[str, ...], values: tuple[float, ...], counts: tuple[int, int]) -> None:
        self.columns, self.values, self.counts = columns, values, counts


#: (table row, metric values, why a value is missing or ''): the values a dict, or a :class:`RowValues`.
Result = tuple[int, "dict[str, Any] | RowValues", str]
BATCH_ELEMENTS = 1 << 22  # a process batch ends after this cost (elements; see batches) at the most ...
BATCH_JOBS = 32  # ... or this many pairs
TAIL_ELEMENTS = 1 << 18  # the smallest element budget of a batch, near the end
_NUMBER = struct.Struct("<I")  # a batch number, or the length of a batch's pickled results
PROCESS_WORK_SECONDS = 0.05  # parallel="auto" forks processes for pairs estimated to take longer
# The cost model of batches and of parallel="auto": a pair takes PAIR_SECONDS besides its elements (opening and
# reading its files, the Python around the kernel) and each element ELEMENT_SECONDS in the kernel in use.
PAIR_SECONDS = 100e-6
ELEMENT_SECONDS = 7e-9 if KERNEL == "numpy" else 3e-9
JOB_COST = round(PAIR_SECONDS / ELEMENT_SECONDS)  # a pair's own cost, in elements
# Batches a forked worker holds: the one it measures and the ones queued behind it. The parent hands out the
# next one when a result comes back, which waits while the parent measures a batch itself.
_QUEUED = 2
_EXITING: list[int] = []  # pids of workers told to stop and not yet waited for (see reap_workers)


class BatchLimits(Record):
    """The bounds of the batches one executor runs (see :func:`batches`).

    Attributes
    ----------
    jobs
        Pairs in a batch at the most.
    elements
        Cost of a batch (elements, plus :data:`JOB_COST` per pair) at the most ...
    tail
        ... and at the least, near the end, where batches shrink.
    by_rank
        Whether a batch holds the pairs of one (step, rank) only (a remote worker then reads one rank's files,
        and its task is named after them).
    """

    jobs: int
    elements: int
    tail: int
    by_rank: bool = False


def batches(
    jobs: list[Job],
    numel: np.ndarray,
    limits: BatchLimits | None = None,
    slots: int = 2,
    groups: np.ndarray | None = None,
) -> list[list[Job]]:
    """Batches of pairs, largest pairs first, each ending after ``limits.jobs`` pairs or when its cost
    (elements, plus :data:`JOB_COST` per pair) reaches ``1 / (4 * slots)`` of what is left (``slots``: the
    batches measured at once; an eighth for one or two), kept between ``limits.tail`` and ``limits.elements``:
    large batches while much is left, small ones at the end, so the workers finish together (guided
    self-scheduling). ``limits`` defaults to the forked processes' (:data:`BATCH_JOBS`, :data:`BATCH_ELEMENTS`,
    :data:`TAIL_ELEMENTS`). ``groups``, a code per table row, keeps pairs of different codes (steps and ranks)
    in different batches."""
    if limits is None:
        limits = BatchLimits(BATCH_JOBS, BATCH_ELEMENTS, TAIL_ELEMENTS)
    share = max(8, 4 * slots)
    costs = _costs(jobs, numel)
    order = sorted(range(len(jobs)), key=lambda k: -costs[k])  # stable: equal pairs keep their order
    remaining = sum(costs)
    runs: list[list[Job]] = []
    filling: dict[Any, tuple[list[Job], list[int]]] = {}  # group -> (its batch being filled, [its cost])
    for k in order:
        job, cost = jobs[k], costs[k]
        group = groups[job[0]] if groups is not None else None
        cap = min(limits.elements, max(limits.tail, remaining // share))
        batch = filling.get(group)
        if batch is not None and (batch[1][0] >= cap or len(batch[0]) >= limits.jobs):
            runs.append(batch[0])
            batch = None
        if batch is None:
            batch = filling[group] = ([], [0])
        batch[0].append(job)
        batch[1][0] += cost
        remaining -= cost
    runs.extend(batch for batch, _ in filling.values())
    return runs


def in_turns(jobs: list[Job], t_file: Any) -> list[Job]:
    """Engine jobs (in the table's order) in the early worker's order: where the target's tensor payloads
    (``t_file[target row]``) lie in the folders of several ranks of a step (each rank's payload folder, two levels
    under its step's), one job of each rank in turn, the ranks in the order they come, the steps one after the
    other, as :func:`nbprec.compare.early_msprobe.candidates` takes the pairs of several dump.json files; else as
    they are. A rank's tensors then come beside the same tensors of the other ranks, which data-parallel ranks often
    hold alike (:mod:`nbprec.compare.small_pairs` takes such repeats). Steps are not taken in turns: a training
    step's tensors differ from the last one's, and the worker would scan every step's dump.json before it starts."""
    folders: dict[str | None, tuple[int, int]] = {}  # payload folder -> (its step's position, its own)
    steps: dict[str | None, int] = {}
    counts: list[int] = []
    keys = []
    sep = os.sep
    for _i, mode, t_pos, _b_pos in jobs:
        path = t_file[t_pos] if mode == "tensor" else None
        folder = path.rpartition(sep)[0] if isinstance(path, str) else None  # (os.path.dirname: slower)
        found = folders.get(folder)
        if found is None:
            step = os.path.dirname(os.path.dirname(folder)) if folder is not None else None
            found = folders[folder] = (steps.setdefault(step, len(steps)), len(counts))
            counts.append(0)
        step, own = found
        keys.append((step, counts[own], own))
        counts[own] += 1
    if len(folders) == len(steps):  # (one payload folder a step: the table's order)
        return jobs
    return [jobs[k] for k in sorted(range(len(jobs)), key=keys.__getitem__)]


def work_seconds(jobs: list[Job], numel: np.ndarray) -> float:
    """What measuring ``jobs`` costs, in seconds of one core, by the cost model."""
    return sum(_costs(jobs, numel)) * ELEMENT_SECONDS


def _costs(jobs: list[Job], numel: np.ndarray) -> list[int]:
    """Each job's estimated cost in elements: its target's elements plus :data:`JOB_COST`."""
    return [max(int(numel[job[0]]), 0) + JOB_COST for job in jobs]


def _read_exact(fd: int, n: int) -> bytes | None:
    """``n`` bytes from a pipe, or ``None`` at its end (the writer closed it or died)."""
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _process_worker(measure_batch: Callable[[list[Job]], list[Result]], batches: list, jobs: int, results: int) -> None:
    """Body of a forked worker: measure the batches whose numbers arrive on the pipe ``jobs`` (4 bytes each)
    until it ends, and send each one's results on the pipe ``results`` (length-prefixed pickles)."""
    while (number := _read_exact(jobs, 4)) is not None:
        data = pickle.dumps(measure_batch(batches[_NUMBER.unpack(number)[0]]), protocol=pickle.HIGHEST_PROTOCOL)
        _write_all(results, _NUMBER.pack(len(data)) + data)


class _Worker:
    """A forked worker as the parent sees it: its pid, its two pipes, the batch numbers it holds."""

    def __init__(self, pid: int, jobs: int, results: int) -> None:
        self.pid, self.jobs, self.results = pid, jobs, results
        self.held: collections.deque[int] = collections.deque()

    def send(self, number: int) -> bool:
        """Hand it batch ``number``; ``False`` when it is gone."""
        try:
            _write_all(self.jobs, _NUMBER.pack(number))
        except BrokenPipeError:
            return False
        self.held.append(number)
        return True

    def receive(self) -> list[Result] | None:
        """The results of its oldest batch, or ``None`` when it is gone (its pipe ended)."""
        size = _read_exact(self.results, 4)
        data = _read_exact(self.results, _NUMBER.unpack(size)[0]) if size is not None else None
        if data is None:
            return None
        self.held.popleft()
        return pickle.loads(data)  # written by the worker this process forked, never a user's file

    def close(self, kill: bool) -> None:
        """Close its pipes (it ends when it sees the end of its jobs), or kill it mid-batch."""
        for fd in (self.jobs, self.results):
            with contextlib.suppress(OSError):
                os.close(fd)
        if kill:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)

    def wait(self) -> None:
        with contextlib.suppress(OSError):
            os.waitpid(self.pid, 0)


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) back while a worker is forked and recorded: the KeyboardInterrupt then comes with
    every forked worker known, and they are all stopped."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _ignore_interrupts() -> None:
    """In a forked worker: ignore Ctrl-C (a terminal sends it to the whole process group), since the parent
    stops its workers itself, and no traceback of theirs shows."""
    with contextlib.suppress(ValueError, OSError):  # ValueError: not the main thread (cannot happen after fork)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _fork_worker(measure_batch: Callable[[list[Job]], list[Result]], batches: list, others: list[_Worker]) -> _Worker:
    jobs_r, jobs_w = os.pipe()
    results_r, results_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: never returns
        code = 1
        try:
            _ignore_interrupts()
            os.close(jobs_w)
            os.close(results_r)
            for other in others:  # the other workers' pipes: their ends must close when the parent closes them
                os.close(other.jobs)
                os.close(other.results)
            _process_worker(measure_batch, batches, jobs_r, results_w)
            code = 0
        finally:
            os._exit(code)  # no atexit handlers, no flushing of buffers inherited from the parent
    os.close(jobs_r)
    os.close(results_w)
    return _Worker(pid, jobs_w, results_r)


def run_processes(
    batches: list[list[Job]], measure_batch: Callable[[list[Job]], list[Result]], workers: int
) -> Iterator[list[Result]]:
    """Measure batches with ``measure_batch`` in ``workers`` processes: this one and ``workers - 1`` forked
    ones; yields each batch's results as it arrives.

    The forked processes inherit ``measure_batch`` and what it holds (the opened dumps) and the batches
    themselves: only batch numbers go to them and metric values come back, through pipes. A worker measures
    one batch at a time (memory stays bounded by a few tensors per worker) with more queued, and gets the
    next one as it returns one. This process measures a batch whenever no worker has results waiting, between
    the items it yields; on a machine with ``workers`` cores no core is shared by two measuring processes.
    A batch held by a worker that died (killed, out of memory, a bug) is measured here instead, where an error
    shows; so is every batch when no worker could be forked. The first item yielded is an empty list, once
    the workers have started (``next()`` starts them early, and the caller can work before taking more).
    """
    reap_workers()  # any left by an earlier call
    started: list[_Worker] = []
    finished = False
    try:
        for _ in range(workers - 1):
            try:
                with _interrupts_deferred():
                    started.append(_fork_worker(measure_batch, batches, started))
            except OSError:  # no more processes or memory for one: fewer workers, or none (this process)
                break
        queued = iter(range(len(batches)))
        here: list[int] = []  # batches a worker could not take (it was gone): measured here
        for worker in started:
            here += [number for number in itertools.islice(queued, _QUEUED) if not worker.send(number)]
        yield []
        alive = {worker.results: worker for worker in started}
        while alive:
            ready, _, _ = select.select(list(alive), [], [], 0)  # a worker that dies ends its pipe
            if not ready:  # no results waiting: measure a batch here, else wait for one
                number = next(queued, None)
                if number is not None:
                    yield measure_batch(batches[number])
                    continue
                ready, _, _ = select.select(list(alive), [], [])
            for fd in ready:
                worker = alive[fd]
                results = worker.receive()
                if results is None:  # gone: what it held is measured here
                    del alive[fd]
                    here += worker.held
                    continue
                yield results
                number = next(queued, None)
                if number is not None and not worker.send(number):
                    here.append(number)
                if not worker.held:
                    del alive[fd]
            while here:
                yield measure_batch(batches[here.pop()])
        for number in queued:  # every worker is gone
            yield measure_batch(batches[number])
        finished = True
    finally:
        for worker in started:
            worker.close(kill=not finished)
        if finished:  # told to stop: their exit (tearing down a copy of this process, ~3 ms) overlaps the caller's
            _EXITING.extend(worker.pid for worker in started)  # work until reap_workers() waits for them
        else:
            for worker in started:
                worker.wait()


def reap_workers() -> None:
    """Wait for the workers :func:`run_processes` told to stop (their exit, not their results, which all came
    back). Call it when the results are used; by then they are usually gone and this returns at once."""
    while _EXITING:
        with contextlib.suppress(OSError):
            os.waitpid(_EXITING.pop(), 0)


def use_processes(parallel: str, workers: int, batches: list[list[Job]], numel: np.ndarray) -> bool:
    """Whether forked processes measure ``batches``: asked for, or ``auto`` with work large enough to pay for
    them (see :func:`fork_pays`)."""
    return fork_pays(parallel, workers, len(batches), work_seconds([j for b in batches for j in b], numel))


def fork_pays(parallel: str, workers: int, pieces: int, seconds: float) -> bool:
    """Whether forked processes are used for ``pieces`` batches (or jobs) costing ``seconds`` of work:
    asked for, or ``auto`` with work large enough to pay for them."""
    if parallel == "threads" or workers <= 1 or pieces < 2:
        return False
    if not hasattr(os, "fork") or sys.platform == "darwin":  # macOS: fork is unsafe with its system libraries
        return False
    if parallel == "processes":
        return True
    # auto: only from a single-threaded process (forking a threaded one can copy a held lock, so notebooks
    # get threads), and only when the pairs cost clearly more than starting the workers (about 10 ms).
    # Processes also run the per-pair Python (reading the files, about 100 us a pair) in parallel, which
    # threads cannot; and with threads a worker back from the kernel can wait for the GIL while the main
    # thread builds the table. On a 526-pair msprobe dump (27 M elements, about 0.13 s of work) processes
    # took 0.16 s, threads 0.19 s.
    return threading.active_count() == 1 and seconds > PROCESS_WORK_SECONDS


def use_threads(parallel: str, workers: int, jobs: int) -> bool:
    """Threads: asked for, or ``auto`` with the compiled kernel, which releases the GIL while it measures."""
    return workers > 1 and jobs > 1 and (parallel == "threads" or (parallel == "auto" and KERNEL != "numpy"))


def default_workers() -> int:
    """Usable cores, at most 2."""
    return min(2, usable_cores())
