"""The ``nbprec compare`` command's early worker and its own process measuring the pairs together, until they meet.

The early worker (:mod:`nbprec.compare.early`) measures the pairs in the target's order from the command's start.
Once the command has opened and matched the dumps, it used to stop the worker and fork a process to measure the
rest beside it. :class:`MeetingExecutor` leaves the worker measuring instead: the command measures the jobs left
from the last one back, a few at a time, taking the worker's records in between, and they stop where they meet.
No process is forked from the command's (whose pages, shared with the fork, each side then copies as it touches
them), and neither core waits while the worker is stopped and another process starts.

The results are those of the comparison without the worker, to the bit: each job is measured once, by the worker
(its record fitting the job's index rows, as :func:`nbprec.compare.early.measured` checks them) or here, with the
engine's measuring task. Jobs the worker passed without a record that fits (pairs it does not measure: another
shape, an integer dtype, payloads not in the page cache) are measured after the meeting, here or on a forked
process when they are many (:func:`nbprec.compare.executors.local_executor`).
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter

import numpy as np

from nbprec.compare.early import Beside
from nbprec.compare.executors import BatchRun, BatchTask, Executor, local_executor
from nbprec.compare.workers import JOB_COST, TAIL_ELEMENTS, Job, Result, batches

#: Jobs the command measures between two looks at the worker's records, at the most ...
CHUNK_JOBS = 8
#: ... and their cost (elements, plus JOB_COST a pair) at the most, unless one pair costs more.
CHUNK_ELEMENTS = TAIL_ELEMENTS


class MeetingExecutor(Executor):
    """Measures the jobs with the early worker still measuring beside this process (see the module's text).

    Attributes
    ----------
    taken : int
        Jobs whose results came from the worker (after :func:`nbprec.compare.early.measured`).
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
        jobs.sort(key=itemgetter(0))  # the table's order, the target's: the worker's
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


__all__ = ["CHUNK_ELEMENTS", "CHUNK_JOBS", "MeetingExecutor"]
