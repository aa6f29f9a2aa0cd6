"""How a comparison measures its pairs: worker threads, forked worker processes, or this thread.

The engine (:mod:`nbprec.compare.engine`) makes the jobs and the function that measures one; this module
only runs them. Which way is chosen (``compare(parallel=...)``):

- threads (:class:`ThreadResults`): the compiled kernel releases the GIL while it measures, so threads
  overlap; each thread takes the next job when it finishes one;
- forked processes (:func:`run_processes`), beside which this process measures too: they also run the
  per-pair Python in parallel, which wins on many small tensors; they inherit the opened dumps and the
  batches, and only batch numbers and results cross the process boundary, through one pair of pipes per
  worker (no helper threads, no locks);
- this thread, when the work is too small to pay for either.

Memory stays bounded by a few tensors per worker whichever is used.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import pickle
import queue
import select
import signal
import struct
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from nbprec._progress import ProgressCallback
from nbprec.compare.metrics import KERNEL

Job = tuple[int, str, Any, Any]  # (table row, mode, target row, bench row); rows as mappings or index positions
Result = tuple[int, dict[str, Any], str]
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


def batches(jobs: list[Job], numel: np.ndarray) -> list[list[Job]]:
    """Batches of pairs, largest pairs first, each ending after :data:`BATCH_JOBS` pairs or when its cost
    (elements, plus :data:`JOB_COST` per pair) reaches an eighth of what is left, kept between
    :data:`TAIL_ELEMENTS` and :data:`BATCH_ELEMENTS`: large batches while much is left, small ones at the end,
    so the workers finish together (guided self-scheduling)."""
    costs = _costs(jobs, numel)
    order = sorted(range(len(jobs)), key=lambda k: -costs[k])  # stable: equal pairs keep their order
    ordered, costs = [jobs[k] for k in order], [costs[k] for k in order]
    remaining = sum(costs)
    runs: list[list[Job]] = [[]]
    size = 0
    for job, cost in zip(ordered, costs, strict=True):
        cap = min(BATCH_ELEMENTS, max(TAIL_ELEMENTS, remaining // 8))
        if runs[-1] and (size >= cap or len(runs[-1]) >= BATCH_JOBS):
            runs.append([])
            size = 0
        runs[-1].append(job)
        size += cost
        remaining -= cost
    return runs if runs[0] else []


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


def _fork_worker(measure_batch: Callable[[list[Job]], list[Result]], batches: list, others: list[_Worker]) -> _Worker:
    jobs_r, jobs_w = os.pipe()
    results_r, results_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: never returns
        code = 1
        try:
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
    """Whether forked processes are used: asked for, or ``auto`` with work large enough to pay for them."""
    if parallel == "threads" or workers <= 1 or len(batches) < 2:
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
    cost = sum(sum(_costs(batch, numel)) for batch in batches)
    return threading.active_count() == 1 and cost * ELEMENT_SECONDS > PROCESS_WORK_SECONDS


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
