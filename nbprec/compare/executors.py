"""One small interface for running a comparison's measurements, locally or on a cluster.

An :class:`Executor` takes batches of pairs and a task that measures one batch
(:class:`nbprec.compare.tasks.PairTask`), starts measuring them at once, and gives back each batch's results
as it completes (a :class:`BatchRun`). Batching and the cost model exist once, in
:mod:`nbprec.compare.workers` (:func:`~nbprec.compare.workers.batches`); an executor only says how large its
batches may be (:attr:`Executor.limits`) and how many it measures at once (:attr:`Executor.slots`).

Backends:

- :class:`InlineExecutor`: this thread;
- :class:`ThreadExecutor`: threads, which overlap in the compiled kernel (it releases the GIL);
- :class:`ForkExecutor`: forked processes beside this one (:func:`nbprec.compare.workers.run_processes`);
- :class:`FuturesExecutor`: any :class:`concurrent.futures.Executor` (a process pool), whose workers read the
  payloads themselves;
- :class:`nbprec.compare.dask_executor.DaskExecutor`: a Dask cluster (``compare(..., client=...)``);
- :class:`nbprec.compare.early_meeting.MeetingExecutor`: this process beside the ``nbprec compare`` command's
  early worker, which goes on measuring (the command's own process only).

A new backend is a few lines: submit ``task.portable(batch)`` (a picklable call) for each batch wherever it
should run, and yield each batch's results; :class:`FuturesExecutor` is the example.
"""

from __future__ import annotations

import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import numpy as np

from nbprec._progress import ProgressCallback, TextProgress
from nbprec.compare.workers import (
    BATCH_ELEMENTS,
    TAIL_ELEMENTS,
    BatchLimits,
    Job,
    Result,
    fork_pays,
    reap_workers,
    run_processes,
    use_threads,
    work_seconds,
)
from nbprec.errors import ComparisonError

#: Pairs in a batch of :class:`ThreadExecutor` at the most.
THREAD_BATCH_JOBS = 8


class BatchTask(Protocol):
    """What an executor runs: ``task(batch)`` measures a batch here; ``task.portable(batch)`` is a picklable
    call without arguments that measures it elsewhere."""

    def __call__(self, batch: list[Job]) -> list[Result]: ...

    def portable(self, batch: list[Job]) -> Callable[[], list[Result]]: ...


class BatchRun:
    """Batches being measured: iterating yields each batch's results as it completes; :meth:`close` stops what
    is left (whether or not iteration began); :meth:`wait` waits for the workers to exit, once the results are
    used."""

    def __init__(
        self,
        results: Iterable[list[Result]],
        close: Callable[[], Any] | None = None,
        wait: Callable[[], Any] | None = None,
    ) -> None:
        self._results, self._close, self._wait = results, close, wait

    def __iter__(self) -> Iterator[list[Result]]:
        return iter(self._results)

    def close(self) -> None:
        if self._close is not None:
            self._close()

    def wait(self) -> None:
        if self._wait is not None:
            self._wait()


class Executor(ABC):
    """Measures batches of pairs somewhere.

    Attributes
    ----------
    limits : BatchLimits or None
        The bounds of the batches it takes; ``None``: the local engine's
        (:data:`~nbprec.compare.workers.BATCH_JOBS`, ...).
    slots : int
        How many batches it measures at once (batches shrink towards the end to keep them all busy).
    orders_jobs : bool
        Whether it takes every job as one batch, in the table's order, and orders its work itself
        (:class:`~nbprec.compare.early_meeting.MeetingExecutor`) rather than taking the engine's batches.
    """

    limits: BatchLimits | None = None
    slots: int = 1
    orders_jobs: bool = False

    @abstractmethod
    def submit_batches(self, batches: list[list[Job]], task: BatchTask) -> BatchRun:
        """Start measuring ``batches`` with ``task``; the run yields each batch's results as it completes."""

    def progress_bar(self, label: str) -> ProgressCallback | None:
        """The display of ``compare(progress=True)``: a callback fed ``(pairs done, pairs)``, or ``None`` when
        the executor shows one of its own."""
        return TextProgress(label)


class InlineExecutor(Executor):
    """This thread, batch after batch, as the caller takes the results."""

    def submit_batches(self, batches: list[list[Job]], task: BatchTask) -> BatchRun:
        return BatchRun(map(task, batches))


class ForkExecutor(Executor):
    """This process and ``workers - 1`` forked ones (Linux), which inherit the opened dumps; see
    :func:`nbprec.compare.workers.run_processes`."""

    def __init__(self, workers: int) -> None:
        self.slots = workers

    def submit_batches(self, batches: list[list[Job]], task: BatchTask) -> BatchRun:
        forked = run_processes(batches, task, self.slots)
        next(forked)  # the workers start now
        return BatchRun(forked, close=forked.close, wait=reap_workers)


class ThreadExecutor(Executor):
    """``workers`` threads, each taking the next batch when it finishes one (a few pairs, largest first, smaller
    batches near the end): at most ``workers`` pairs are open at once and the caller can work meanwhile.

    Batches of several small pairs rather than one: each batch's hand-over (a lock, a queue, waking the caller's
    thread, which then competes for the GIL) cost about as much as a small pair's own Python; and the engine reads a
    batch's small payloads ahead in one call and makes their kernel passes in another, neither holding the GIL
    (:func:`nbprec.compare.engine._measure_batch`): under contention each time a thread gives the GIL up and takes
    it back costs both threads a sleep and a wake-up. In a Jupyter kernel (whose own threads make ``auto`` choose
    threads) the three changes took ``nbprec.compare`` from 1.43x to 1.11x its time in a plain interpreter on the
    1,038-pair msprobe pair of ``bench/notebook.py``, and from 1.67x to 1.23x on its 2,031-pair one."""

    limits = BatchLimits(jobs=THREAD_BATCH_JOBS, elements=BATCH_ELEMENTS, tail=TAIL_ELEMENTS)

    def __init__(self, workers: int) -> None:
        self.slots = workers

    def submit_batches(self, batches: list[list[Job]], task: BatchTask) -> BatchRun:
        threads = _Threads(batches, task, self.slots)
        return BatchRun(threads, close=threads.close)


class FuturesExecutor(Executor):
    """Any :class:`concurrent.futures.Executor` as a backend (a ``ProcessPoolExecutor``, loky, ...): each batch
    goes as a portable call (its index rows and the dumps' payload sources; the workers read the files), and
    results come back as they complete. ``slots``: how many batches the pool measures at once."""

    limits = BatchLimits(jobs=256, elements=1 << 24, tail=1 << 20)

    def __init__(self, pool: Any, slots: int) -> None:
        self.pool, self.slots = pool, slots

    def submit_batches(self, batches: list[list[Job]], task: BatchTask) -> BatchRun:
        from concurrent.futures import as_completed

        futures = [self.pool.submit(task.portable(batch)) for batch in batches]
        return BatchRun((f.result() for f in as_completed(futures)), close=lambda: [f.cancel() for f in futures])


def local_executor(parallel: str, workers: int, jobs: list[Job], numel: np.ndarray) -> Executor:
    """The executor of ``compare(parallel=..., workers=...)`` on this machine (see :func:`nbprec.compare`)."""
    if fork_pays(parallel, workers, len(jobs), work_seconds(jobs, numel)):
        return ForkExecutor(workers)
    if use_threads(parallel, workers, len(jobs)):
        return ThreadExecutor(workers)
    return InlineExecutor()


def requested_executor(executor: Executor | None, client: Any, parallel: str) -> Executor | None:
    """The executor ``compare`` was asked for (``executor=``, or a Dask ``client=``), checked with ``parallel``;
    ``None``: a local one, chosen once the work is known (:func:`local_executor`)."""
    if parallel not in ("auto", "processes", "threads"):
        raise ComparisonError(f"unknown parallel {parallel!r}; use auto, processes or threads")
    if client is not None and executor is not None:
        raise ComparisonError("pass client= (a Dask cluster) or executor=, not both")
    if client is not None:
        from nbprec.compare.dask_executor import DaskExecutor

        return DaskExecutor(client)
    if executor is not None and not isinstance(executor, Executor):
        raise ComparisonError(f"executor must be an nbprec.compare.executors.Executor, not {type(executor).__name__}")
    return executor


class Results:
    """The results of a :class:`BatchRun`, pair by pair, reporting progress (pairs done, pairs) as each batch
    comes in; :meth:`close` stops the run and :meth:`wait` waits for its workers to exit."""

    def __init__(self, run: BatchRun, total: int, progress: ProgressCallback | None) -> None:
        self._run, self._total, self._progress = run, total, progress

    def __iter__(self) -> Iterator[Result]:
        done = 0
        for batch in self._run:
            yield from batch
            done += len(batch)
            if self._progress and batch:
                self._progress(done, self._total)

    def close(self) -> None:
        self._run.close()

    def wait(self) -> None:
        self._run.wait()


_DONE = object()


class _Threads:
    """``workers`` threads measuring ``batches``, started at construction; iterating yields each batch's
    results as it completes. :meth:`close` stops them after their current batch; an exception in a thread
    (a bug: bad input becomes a reason) stops them all and is raised here."""

    def __init__(self, batches: list[list[Job]], task: BatchTask, workers: int) -> None:
        self._results: queue.SimpleQueue = queue.SimpleQueue()
        self._todo = iter(batches)
        self._take = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._work, args=(task,), name=f"nbprec-compare-{k}", daemon=True)
            for k in range(workers)
        ]
        self._running = len(self._threads)
        for thread in self._threads:
            thread.start()

    def _work(self, task: BatchTask) -> None:
        try:
            while not self._stop.is_set():
                with self._take:
                    batch = next(self._todo, None)
                if batch is None:
                    break
                self._results.put(task(batch))
        except BaseException as exc:  # re-raised by the caller's thread
            self._results.put(exc)
        finally:
            self._results.put(_DONE)

    def __iter__(self) -> _Threads:
        return self

    def __next__(self) -> list[Result]:
        while self._running:
            item = self._results.get()
            if item is _DONE:
                self._running -= 1
            elif isinstance(item, BaseException):
                self.close()
                raise item
            else:
                return item
        raise StopIteration

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
