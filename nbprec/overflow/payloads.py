"""Where the overflow scan reads and counts the payloads: on this thread, on threads, or on forked processes.

:func:`judge_rows` runs the scan's judgement of each tensor (``judge``: read its payload and count it, or read its
statistics) over the rows of a dump's index and returns what it gave for each, in the rows' order; the table is
the same whichever way it ran (``tests/overflow/test_scan_threads.py``, ``test_scan_processes.py``):

- **forked processes** (``parallel="processes"``, or ``"auto"`` in a single-threaded process when they take
  enough work off one thread: :func:`serial_seconds`, :func:`nbprec.compare.workers.fork_pays`): every row with a
  payload, in batches, on this process and a forked one (:func:`nbprec.compare.workers.run_processes`, as
  ``nbprec.compare`` measures its pairs). A process runs the per-tensor Python too, which threads cannot run in
  parallel: on 2 cores ``scan`` of a 4,035-tensor msprobe dump (164 MB) took 186 against 238 ms on threads. Only
  positions go to the forked process and the rows' values (floats, counts, words) come back, through a pipe;
- **threads** (a notebook's kernel runs threads of its own, and forking such a process is not safe): payloads of
  :data:`PARALLEL_FROM` bytes or more on a thread per usable core (up to :data:`MAX_THREADS`; the reader and the
  count release the GIL), then the other rows in order on this thread;
- **this thread** alone with one usable core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from nbprec._cores import usable_cores
from nbprec.dtypes import NUMPY_DTYPES

Parallel = Literal["auto", "processes", "threads"]
PARALLEL_MODES = ("auto", "processes", "threads")

#: Payloads of at least this many bytes are read and counted on several threads (the reader and the count release
#: the GIL; a smaller payload's Python costs about as much as its reading and counting, and threads contending for
#: the GIL then lose more than they gain). On 2 cores (scan_tensors, medians of 7): 86 -> 63 ms for the 629 tensors
#: (134 MB) of an msprobe bfloat16 dump, 225 -> 182 ms for one of 4,035 tensors (360 of them of 128 KiB or more).
PARALLEL_FROM = 128 << 10
#: Payloads a thread reads at a time (a result handed over per payload wakes the waiting thread each time).
_CHUNK = 16
#: The threads of that at the most (each wake-up for the GIL costs more with more of them).
MAX_THREADS = 4
#: A batch of the forked processes ends after this many tensors or :data:`BATCH_BYTES` of payloads.
BATCH_TENSORS = 32
BATCH_BYTES = 8 << 20
#: The cost model of ``parallel="auto"``: a payload's own cost (opening and reading its file, the Python around the
#: count: about 40 us on 2026-12-05's Zen 4 machine) and each byte's (read and counted at about 2 GB/s). Forked
#: processes are used when they take more than ``PROCESS_WORK_SECONDS`` of it off one thread (:func:`_processes_pay`).
TENSOR_SECONDS = 40e-6
BYTE_SECONDS = 0.5e-9


def judge_rows(
    values: list[Any],
    judge: Callable[[Any], dict[str, Any]],
    *,
    payload: bool,
    parallel: Parallel = "auto",
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """``judge(row)`` of every row of ``values`` (the index's rows as named tuples: ``dtype``, ``numel``,
    ``has_data`` read here), in their order; the payloads read where ``parallel`` says (module docstring).
    ``progress(done, total)`` counts the rows judged."""
    if parallel not in PARALLEL_MODES:
        raise ValueError(f"parallel must be one of {', '.join(PARALLEL_MODES)}, not {parallel!r}")
    total = len(values)
    rows: list[dict[str, Any] | None] = [None] * total
    done = 0

    def took(count: int) -> None:
        nonlocal done
        done += count
        if progress:
            progress(done, total)

    batches = _process_batches(values, payload) if parallel != "threads" else []
    if batches and _processes_pay(parallel, values, batches):
        _on_processes(values, judge, batches, rows, took)
    else:
        _on_threads(values, judge, large_payloads(values, payload), rows, took)
    for position in range(total):
        if rows[position] is None:
            rows[position] = judge(values[position])
            took(1)
    return rows  # type: ignore[return-value]


def _payload_bytes(row: Any) -> int:
    """The bytes of a row's payload by its dtype and element count; 0 when it has none, or they are unknown."""
    dtype = NUMPY_DTYPES.get(row.dtype) if type(row.dtype) is str else None
    numel = row.numel
    if dtype is None or not row.has_data or numel != numel:
        return 0
    return int(numel) * dtype.itemsize


def large_payloads(values: list[Any], payload: bool) -> list[int]:
    """Positions of the rows whose payload (to be read: ``payload``) holds :data:`PARALLEL_FROM` bytes or more."""
    if not payload:
        return []
    return [position for position, row in enumerate(values) if _payload_bytes(row) >= PARALLEL_FROM]


def _process_batches(values: list[Any], payload: bool) -> list[list[int]]:
    """The positions of the rows with a payload to read, in order, cut into batches of :data:`BATCH_TENSORS`
    tensors or :data:`BATCH_BYTES` bytes."""
    if not payload:
        return []
    batches: list[list[int]] = []
    batch: list[int] = []
    size = 0
    for position, row in enumerate(values):
        if not row.has_data:
            continue
        batch.append(position)
        size += _payload_bytes(row)
        if len(batch) >= BATCH_TENSORS or size >= BATCH_BYTES:
            batches.append(batch)
            batch, size = [], 0
    if batch:
        batches.append(batch)
    return batches


def serial_seconds(values: list[Any], batches: list[list[int]]) -> float:
    """What the threads would leave to one thread of the payloads in ``batches``, by the cost model: every
    payload's Python and the payloads under :data:`PARALLEL_FROM` bytes. Forked processes share that out too."""
    positions = [position for batch in batches for position in batch]
    small = sum(size for size in (_payload_bytes(values[p]) for p in positions) if size < PARALLEL_FROM)
    return len(positions) * TENSOR_SECONDS + small * BYTE_SECONDS


def _processes_pay(parallel: Parallel, values: list[Any], batches: list[list[int]]) -> bool:
    """Whether forked processes read the payloads: asked for, or ``auto`` when the work they take off a single
    thread (:func:`serial_seconds`) pays for them: on 2 cores, a 4,035-tensor dump (211 ms of it) took 186
    against 238 ms on threads; dumps of 372-749 tensors and 99-311 MB (15-30 ms of it) within 7% either way."""
    from nbprec.compare.workers import default_workers, fork_pays

    return fork_pays(parallel, default_workers(), len(batches), serial_seconds(values, batches))


def _on_processes(
    values: list[Any],
    judge: Callable[[Any], dict[str, Any]],
    batches: list[list[int]],
    rows: list[dict[str, Any] | None],
    took: Callable[[int], None],
) -> None:
    """Judge the rows of ``batches`` on this process and a forked one; a batch whose process died is judged here."""
    from nbprec.compare.workers import default_workers, reap_workers, run_processes

    def judge_batch(positions: list[int]) -> list[tuple[int, dict[str, Any]]]:
        return [(position, judge(values[position])) for position in positions]

    for judged in run_processes(batches, judge_batch, default_workers()):  # type: ignore[arg-type]
        for position, row in judged:
            rows[position] = row
        if judged:
            took(len(judged))
    reap_workers()


def _on_threads(
    values: list[Any],
    judge: Callable[[Any], dict[str, Any]],
    large: list[int],
    rows: list[dict[str, Any] | None],
    took: Callable[[int], None],
) -> None:
    """Judge the rows at ``large`` on threads, :data:`_CHUNK` at a time (none with one usable core or payload)."""
    threads = min(MAX_THREADS, usable_cores(), len(large))
    if threads <= 1:
        return
    from concurrent.futures import ThreadPoolExecutor

    def judge_all(positions: list[int]) -> list[dict[str, Any]]:
        return [judge(values[position]) for position in positions]

    chunks = [large[i : i + _CHUNK] for i in range(0, len(large), _CHUNK)]
    pool = ThreadPoolExecutor(threads, thread_name_prefix="nbprec-overflow")
    try:
        for positions, judged in zip(chunks, pool.map(judge_all, chunks), strict=True):
            for position, row in zip(positions, judged, strict=True):
                rows[position] = row
            took(len(positions))
    finally:  # (an error or Ctrl-C: the chunks not started are dropped, not read to the end)
        pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["PARALLEL_FROM", "PARALLEL_MODES", "Parallel", "judge_rows", "large_payloads"]
