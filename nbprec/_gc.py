"""Pausing Python's cyclic garbage collector while a reader builds millions of small objects; while a capture
runs, keeping a large heap out of its scans and running it less often; and, in a process that ends without freeing
anything (the command's), not freeing large structures on the way (:func:`spare`)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

#: Young containers left by a :func:`paused_gc` block above which they skip the young collections' scan.
PROMOTE_FROM = 10_000


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic collector for the ``with`` block and restore its previous state after.

    Parsing a large dump index or graph makes millions of containers that hold no cycles; the collector,
    triggered by the allocations alone, would scan them again and again (a third to a half of the time).
    Memory is unaffected: what is dropped is freed by reference counting.

    What the block made and kept (a parsed graph: tens of thousands of objects) would still be scanned once,
    by the first collection after it (the young generation's count grew while the collector was off: 12 ms
    for a 780 KB GE graph). When the block left more than :data:`PROMOTE_FROM` young containers, they are
    moved to the oldest generation without that scan instead (``gc.freeze`` then ``gc.unfreeze``, unless
    the program froze objects itself), where full collections see them; cycles among them are collected
    there, later than a young collection would have.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if gc.get_count()[0] > PROMOTE_FROM and gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects alive at entry out of the cyclic collector's scans for the ``with`` block.

    A capture makes thousands of small containers per step; the collector, triggered by them, now and then
    scans every object of the process (a model library's heap holds hundreds of thousands: a quarter of a
    second per full collection). :func:`gc.freeze` moves the objects alive at entry to the permanent
    generation, so that collections inside the block scan only what was made since; :func:`gc.unfreeze`
    puts them back at exit, where the next full collection sees them again. Nothing is freed later than it
    would be except cycles among those older objects, which wait for the end of the block. When the
    collector is off, or the program froze objects itself (:func:`gc.get_freeze_count`), nothing is done.
    """
    froze = gc.isenabled() and gc.get_freeze_count() == 0
    if froze:
        gc.freeze()
    try:
        yield
    finally:
        if froze:
            gc.unfreeze()


#: The young generation's threshold while a capture runs (Python's default: 700 allocations).
CAPTURE_YOUNG_THRESHOLD = 50_000


@contextlib.contextmanager
def rarer_collections(young: int = CAPTURE_YOUNG_THRESHOLD) -> Iterator[None]:
    """Let the young generation grow to ``young`` containers before the collector runs, for the ``with`` block.

    A capture allocates about 16,000 containers per MiniLM training step that outlive a young collection (the
    records of an op until its backward, hooks, closures) and holds no garbage cycles: at Python's default
    threshold the collector ran 22 young and 2 middle collections per step, collected nothing, and cost about
    4% of the captured step. At ``young`` it runs every few steps instead; garbage cycles the program makes are
    still collected, later by at most ``young`` allocations. The thresholds found at entry come back at exit,
    unless the program set others in the meantime (those are kept). A lower threshold than ``young`` at entry
    is raised; a higher one is left, and so is 0, with which the program turned automatic collection off.
    """
    before = gc.get_threshold()
    during = (max(before[0], young) if before[0] else 0, *before[1:])
    gc.set_threshold(*during)
    try:
        yield
    finally:
        if gc.get_threshold() == during:
            gc.set_threshold(*before)


#: What :func:`spare` keeps, in a process that ends without freeing it (:func:`spare_until_exit`); None elsewhere.
_SPARED: list[object] | None = None


def spare_until_exit() -> None:
    """Say that this process ends with :func:`os._exit`, freeing nothing: from now on :func:`spare` keeps what it is
    given. The ``nbprec`` command calls it (in its own process and in the process the command daemon forks)."""
    global _SPARED
    if _SPARED is None:
        _SPARED = []


def spare(*objects: object) -> None:
    """Keep ``objects`` until the process ends, where it ends without freeing them (:func:`spare_until_exit`);
    elsewhere do nothing, and they are freed when their last reference goes.

    Freeing a large structure costs as much as making it, object by object: the two opened dumps of a 10,015-tensor
    comparison (their indexes, caches and file listings) took 9-16 ms to free when :func:`nbprec.compare` returned,
    on the command's critical path, although the command's process ends a moment later without freeing anything.
    """
    if _SPARED is not None:
        _SPARED.append(objects)
