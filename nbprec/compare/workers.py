"""How a comparison measures its pairs: worker threads, forked worker processes, or this thread.

The engine (:mod:`nbprec.compare.engine`) makes the jobs and the function that measures one; this module
only runs them. Which way is chosen (``compare(parallel=...)``):

- threads (:class:`ThreadResults`): the compiled kernel releases the GIL while it measures, so threads
  overlap; each thread takes the next job when it finishes one;
- forked processes (:func:`run_processes`): they also run the per-pair Python in parallel, which wins on
  many small tensors; they inherit the opened dumps, and only jobs and results cross the process boundary;
- this thread, when the work is too small to pay for either.

Memory stays bounded by a few tensors per worker whichever is used.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from nbprec._progress import ProgressCallback
from nbprec.compare.metrics import KERNEL

Job = tuple[int, str, Any, Any]  # (table row, mode, target row, bench row); rows as mappings or index positions
Result = tuple[int, dict[str, Any], str]
BATCH_ELEMENTS = 1 << 22  # a process batch ends after this many target elements ...
BATCH_JOBS = 128  # ... or this many pairs
POLL_SECONDS = 1.0
PROCESS_WORK_SECONDS = 0.05  # parallel="auto" forks processes for pairs estimated to take longer


def batches(jobs: list[Job], numel: np.ndarray) -> list[list[Job]]:
    """Consecutive runs of jobs of about 4 M elements (or 128 pairs) each."""
    runs: list[list[Job]] = [[]]
    size = 0
    for job in jobs:
        if runs[-1] and (size >= BATCH_ELEMENTS or len(runs[-1]) >= BATCH_JOBS):
            runs.append([])
            size = 0
        runs[-1].append(job)
        size += max(int(numel[job[0]]), 0)
    return runs if runs[0] else []


def _process_worker(measure_batch: Callable[[list[Job]], list[Result]], inbox: Any, outbox: Any) -> None:
    """Body of a forked worker: measure batches ``(id, jobs)`` from ``inbox`` until ``None``."""
    while (item := inbox.get()) is not None:
        number, batch = item
        outbox.put((number, measure_batch(batch)))


def run_processes(
    batches: list[list[Job]], measure_batch: Callable[[list[Job]], list[Result]], workers: int
) -> Iterator[list[Result]]:
    """Measure batches with ``measure_batch`` in ``workers`` forked processes; yields each batch's results as
    it arrives.

    The processes inherit ``measure_batch`` and what it holds, the opened dumps (fork: nothing is pickled but
    the jobs, as index positions, and the metric values). At most two batches per worker are queued, so
    memory stays bounded by a few tensors per worker. A batch lost with a worker that died (killed, out of
    memory) is measured here instead. The first item yielded is an empty list, once the workers have
    started (``next()`` starts them early).
    """
    ctx = multiprocessing.get_context("fork")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    procs = [
        ctx.Process(target=_process_worker, args=(measure_batch, inbox, outbox), daemon=True) for _ in range(workers)
    ]
    for proc in procs:
        proc.start()
    pending: set[int] = set()
    sent = 0
    try:
        while sent < len(batches) and len(pending) < 2 * workers:
            inbox.put((sent, batches[sent]))
            pending.add(sent)
            sent += 1
        yield []
        while sent < len(batches) or pending:
            while sent < len(batches) and len(pending) < 2 * workers:
                inbox.put((sent, batches[sent]))
                pending.add(sent)
                sent += 1
            try:
                number, results = outbox.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if all(proc.is_alive() for proc in procs):
                    continue
                for proc in procs:  # a worker is gone (killed, out of memory): finish here, without them
                    proc.terminate()
                for number in sorted(pending):
                    yield measure_batch(batches[number])
                pending.clear()
                for number in range(sent, len(batches)):
                    yield measure_batch(batches[number])
                sent = len(batches)
                continue
            pending.discard(number)
            yield results
    finally:
        for _ in procs:
            inbox.put(None)
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join()
        inbox.close()
        outbox.close()


def use_processes(parallel: str, workers: int, batches: list[list[Job]], numel: np.ndarray) -> bool:
    """Whether forked processes are used: asked for, or ``auto`` with work large enough to pay for them."""
    if parallel == "threads" or workers <= 1 or len(batches) < 2:
        return False
    if "fork" not in multiprocessing.get_all_start_methods() or sys.platform == "darwin":
        return False
    if parallel == "processes":
        return True
    # auto: only from a single-threaded process (forking a threaded one can copy a held lock, so notebooks
    # get threads), and only when the pairs cost clearly more than starting the workers (about 10 ms).
    # Processes also run the per-pair Python (reading the files, about 100 us a pair) in parallel, which
    # threads cannot; and with threads a worker back from the kernel can wait for the GIL while the main
    # thread builds the table. On a 526-pair msprobe dump (27 M elements, about 0.13 s of work) processes
    # took 0.16 s, threads 0.19 s.
    jobs = sum(len(batch) for batch in batches)
    elements = sum(max(int(numel[job[0]]), 0) for batch in batches for job in batch)
    per_element = 7e-9 if KERNEL == "numpy" else 3e-9
    return threading.active_count() == 1 and jobs * 100e-6 + elements * per_element > PROCESS_WORK_SECONDS


def use_threads(parallel: str, workers: int, jobs: int) -> bool:
    """Threads: asked for, or ``auto`` with the compiled kernel, which releases the GIL while it measures."""
    return workers > 1 and jobs > 1 and (parallel == "threads" or (parallel == "auto" and KERNEL != "numpy"))


_DONE = object()


class ThreadResults:
    """``workers`` threads measuring ``jobs``, started at construction; iterating yields results as they
    complete. Each thread takes the next job when it finishes one, so at most ``workers`` pairs are open at
    once (memory stays bounded by a few tensors) and the caller can do other work meanwhile. :meth:`close`
    stops them after their current pair."""

    def __init__(self, jobs: list[Job], measure: Any, workers: int) -> None:
        self._results: queue.SimpleQueue = queue.SimpleQueue()
        self._todo = iter(jobs)
        self._take = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._work, args=(measure,), name=f"nbprec-compare-{k}", daemon=True)
            for k in range(workers)
        ]
        self._running = len(self._threads)
        for thread in self._threads:
            thread.start()

    def _work(self, measure: Any) -> None:
        try:
            while not self._stop.is_set():
                with self._take:
                    job = next(self._todo, None)
                if job is None:
                    break
                self._results.put(measure(job))
        except BaseException as exc:  # a bug, not bad input (_measure turns that into reasons): re-raised
            self._results.put(exc)
        finally:
            self._results.put(_DONE)

    def __iter__(self) -> ThreadResults:
        return self

    def __next__(self) -> Result:
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


def default_workers() -> int:
    """Usable cores, at most 2."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(2, cores))


class Results:
    """Results of the workers, reporting progress as they are taken; :meth:`close` stops the workers
    (whether or not iteration has begun)."""

    def __init__(
        self,
        source: Iterable[Result],
        total: int,
        progress: ProgressCallback | None,
        close: Callable[[], None] | None = None,
    ) -> None:
        self._source, self._total, self._progress, self._close = source, total, progress, close

    def __iter__(self) -> Iterator[Result]:
        for done, result in enumerate(self._source, start=1):
            yield result
            if self._progress:
                self._progress(done, self._total)

    def close(self) -> None:
        if self._close is not None:
            self._close()
