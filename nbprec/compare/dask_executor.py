"""A Dask cluster as an executor: ``compare(..., client=distributed.Client(...))``.

Each batch of pairs is one Dask task (named ``nbprec-measure-step{s}-rank{r}-...``: a batch holds the pairs
of one step and rank), a :class:`nbprec.compare.tasks.BatchCall` holding the batch's index rows and both
dumps' payload sources (path, format, loader): the workers read the payload files themselves from the path
the index names, so the dumps must lie on a file system every worker sees at the same path. No tensor data
goes through the scheduler, only index rows out and metric values back. Matching, the table and the verdict
are made in the calling process, as in a local run, and the results are identical.

A worker that dies (killed, out of memory) loses nothing: the scheduler runs its tasks again elsewhere (up to
its ``distributed.scheduler.allowed-failures``), and results are taken as they complete.
"""

from __future__ import annotations

import uuid
from typing import Any

from nbprec._optional import require
from nbprec._progress import ProgressCallback, TextProgress
from nbprec.compare.executors import BatchRun, BatchTask, Executor
from nbprec.compare.workers import BatchLimits, Job
from nbprec.errors import ComparisonError


def _distributed() -> Any:
    return require("distributed", "comparing on a Dask cluster", extra="dask")


def _call(call: Any) -> Any:
    """Run a task's portable call (on a worker)."""
    return call()


class DaskExecutor(Executor):
    """Measures batches as tasks of a ``distributed.Client``'s cluster.

    Parameters
    ----------
    client
        A connected ``distributed.Client``.
    retries
        How often a task that raised is run again (a worker's death is handled by the scheduler anyway).

    Examples
    --------
    >>> from distributed import Client                                         # doctest: +SKIP
    >>> comp = nbprec.compare("runs/bf16", "runs/fp32", client=Client("tcp://scheduler:8786"))  # doctest: +SKIP
    """

    # Tasks of about 0.1 s of work (a Dask task costs about 1 ms of scheduling), shrinking towards the end;
    # one step and rank a task
    limits = BatchLimits(jobs=512, elements=1 << 25, tail=1 << 20, by_rank=True)

    def __init__(self, client: Any, *, retries: int = 1) -> None:
        distributed = _distributed()
        if not isinstance(client, distributed.Client):
            raise ComparisonError(f"client must be a distributed.Client, not {type(client).__name__}")
        self.client, self.retries = client, retries
        self._widget = False

    @property
    def slots(self) -> int:  # type: ignore[override]
        """The threads of the cluster's workers (at least 1)."""
        return max(1, sum(self.client.nthreads().values()))

    def progress_bar(self, label: str) -> ProgressCallback | None:
        """In a notebook, Dask's own progress widget (shown when the tasks are submitted); elsewhere nbprec's
        text bar, fed from completed tasks."""
        import importlib.util

        from distributed.utils import is_kernel

        if is_kernel() and importlib.util.find_spec("ipywidgets") is not None:  # dask's widget is an ipywidget
            self._widget = True
            return None
        return TextProgress(label)

    def submit_batches(self, batches: list[list[Job]], task: BatchTask) -> BatchRun:
        distributed = _distributed()
        run = uuid.uuid4().hex[:8]
        label = getattr(task, "label", lambda batch: "pairs")
        calls = [task.portable(batch) for batch in batches]
        keys = [f"nbprec-measure-{label(batch)}-{run}-{k}" for k, batch in enumerate(batches)]
        # one graph for all (submit() one by one costs a round through the client's event loop each)
        futures = self.client.map(_call, calls, key=keys, pure=False, retries=self.retries) if calls else []
        if self._widget and futures:
            from IPython.display import display

            display(distributed.progress(futures, notebook=True, multi=False))
        pending = {future.key: future for future in futures}
        completed = distributed.as_completed(futures, with_results=True)
        del futures  # the cluster forgets each result once taken: only the pending ones are held

        def results() -> Any:
            for future, result in completed:
                pending.pop(future.key, None)
                yield result

        return BatchRun(results(), close=lambda: self.client.cancel(list(pending.values())))
