"""The command's own process and its early worker measuring the jobs left from both ends
(:class:`nbprec.compare.early_meeting.MeetingExecutor`): every job is measured once, by one or the other, whatever
the worker sends. The worker here is scripted (what it sends at each look); ``tests/compare/test_early.py`` runs
the real one.
"""

from __future__ import annotations

import numpy as np
import pytest

from nbprec.compare.early_meeting import CHUNK_JOBS, MeetingExecutor


class ScriptedWorker:
    """Stands for :class:`nbprec.compare.early_meeting.Beside`: at each look it has measured ``pace`` more jobs in order
    (records for the jobs ``fits`` refuses say None, as a record that does not fit the job's rows), skipping the
    jobs in ``skips``; it ends after ``ends_after`` looks, or when stopped, or past the last job."""

    def __init__(self, pace: int, skips=(), fits=lambda k: True, ends_after: int | None = None) -> None:
        self.pace, self.skips, self.fits, self.ends_after = pace, set(skips), fits, ends_after
        self.next = 0
        self.looks = 0
        self.stopped = False
        self.jobs: list = []

    def in_turns(self, jobs):  # (one payload folder: the table's order)
        return jobs

    def expect(self, jobs):
        self.jobs = jobs

    def take(self, wait=False):
        self.looks += 1
        found = []
        for _ in range(self.pace):
            if self.next >= len(self.jobs):
                break
            k = self.next
            self.next += 1
            if k not in self.skips:
                found.append((k, (self.jobs[k][0], {"by": "worker"}, "") if self.fits(k) else None))
        ended = wait or self.next >= len(self.jobs) or (self.ends_after is not None and self.looks >= self.ends_after)
        return found, ended

    def stop(self):
        self.stopped = True


class Here:
    """The engine's measuring task, as the executor sees it: it measures a batch here."""

    def __init__(self) -> None:
        self.batches: list[list] = []

    def __call__(self, batch):
        self.batches.append(batch)
        return [(job[0], {"by": "here"}, "") for job in batch]

    def portable(self, batch):  # (not used locally)
        raise AssertionError("measured elsewhere")


def _run(worker: ScriptedWorker, n: int, parallel: str = "threads"):
    jobs = [(i, "tensor", i, i) for i in range(n)]
    numel = np.full(n, 100.0)
    executor = MeetingExecutor(worker, numel, parallel)  # type: ignore[arg-type]
    here = Here()
    run = executor.submit_batches([jobs[n // 2 :], jobs[: n // 2]], here)  # (batches come in any order)
    results = [result for batch in run for result in batch]
    run.close()
    run.wait()
    return executor, here, results


@pytest.mark.parametrize("pace", [1, 3, 8, 50])
def test_every_job_is_measured_once(pace):
    worker = ScriptedWorker(pace)
    executor, here, results = _run(worker, 40)
    rows = [i for i, _values, _reason in results]
    assert sorted(rows) == list(range(40))  # each job once
    by_worker = {i for i, values, _ in results if values["by"] == "worker"}
    assert executor.taken == len(by_worker) and executor.measured_here == 40 - len(by_worker)
    if pace < 40:
        assert by_worker and executor.measured_here  # both measured some
        # the worker from the first job, this process from the last: they meet
        assert max(by_worker) < min(set(range(40)) - by_worker)
    assert all(len(batch) <= CHUNK_JOBS for batch in here.batches)
    assert worker.stopped


def test_jobs_the_worker_passed_by_are_measured_here():
    """Jobs it skipped, and jobs whose records do not fit their rows, are measured by this process."""
    worker = ScriptedWorker(4, skips={1, 5}, fits=lambda k: k != 2)
    _executor, _here, results = _run(worker, 30)
    by = {i: values["by"] for i, values, _ in results}
    assert sorted(by) == list(range(30))
    assert by[1] == by[2] == by[5] == "here"
    assert by[0] == by[3] == "worker"


def test_a_worker_that_ends_early_leaves_the_rest_here():
    """A worker gone after two looks (it died, or measured every pair it could): the jobs between it and this
    process are measured here after all, each once."""
    worker = ScriptedWorker(2, ends_after=2)
    executor, _here, results = _run(worker, 60)
    assert sorted(i for i, _, _ in results) == list(range(60))
    assert executor.taken == 4 and executor.measured_here == 56


def test_records_for_jobs_measured_here_are_dropped():
    """The worker's records for jobs this process has measured meanwhile (both reached them) are not taken."""

    class Late(ScriptedWorker):
        def take(self, wait=False):
            found, ended = super().take(wait)
            if wait:  # as it stops, it sends a record for every job (those measured here too)
                found += [(k, (self.jobs[k][0], {"by": "worker"}, "")) for k in range(len(self.jobs))]
            return found, ended

    executor, _here, results = _run(Late(2), 20)
    assert sorted(i for i, _, _ in results) == list(range(20))
    assert executor.taken + executor.measured_here == 20


def test_an_executor_that_orders_its_jobs_gets_them_as_one_batch_in_the_tables_order():
    """``Executor.orders_jobs``: the engine hands every job at once, in the table's order, instead of its batches
    (largest pairs first), and the comparison is the one its batches give."""
    from pathlib import Path

    import nbprec
    from nbprec.compare.executors import InlineExecutor

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
    target, bench = fixtures / "bf16_tensor_mix", fixtures / "fp32_tensor_mix"

    class Ordering(InlineExecutor):
        orders_jobs = True

        def __init__(self) -> None:
            self.given: list[list] = []

        def submit_batches(self, batches, task):
            self.given = batches
            return super().submit_batches(batches, task)

    ordering = Ordering()
    ordered = nbprec.compare(target, bench, executor=ordering)
    ((jobs),) = ordering.given
    rows = [job[0] for job in jobs]
    assert len(rows) > 100 and rows == sorted(rows)
    batched = nbprec.compare(target, bench, executor=InlineExecutor())
    assert list(ordered.columns) == list(batched.columns)
    for name in batched.columns:  # (repr: NaN equals NaN)
        assert [repr(v) for v in ordered.columns[name].tolist()] == [repr(v) for v in batched.columns[name].tolist()]
