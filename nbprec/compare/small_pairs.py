"""The usual pair measured without making arrays: two small plain payloads (msprobe's ``.pt`` archives, nbprec's
own ``.npy`` files), read whole, through the compiled kernel in one call.

Most payloads are small (under :data:`~nbprec.formats._files.MAP_FROM` bytes) and of a float dtype.
:func:`small_pair` reads both (:func:`~nbprec.formats._ptzip.small_tensor`, :func:`~nbprec.formats._npyfile.small_npy`:
one open and one read each) and measures them with the compiled ``pair_metrics``
(``nbprec/compare/_fused_metrics.c``): what :func:`~nbprec.compare.metrics.tensor_metrics` does on their arrays (the
same kernel calls on the same bytes, and :mod:`nbprec.compare._sums`'s ``direct_sums`` and ``sums_values`` in C,
to the bit), without the arrays and without numpy, in a few microseconds of Python. That includes a pair without
usable recorded extremes (the kernel finds them first, as ``fused_sums`` does) and one holding NaN or inf (counted
from the bits, as ``_nonfinite_reason`` counts them). It gives None for any other pair and for a pair whose sums
need the arrays again (a standard deviation that needs an exact second pass, squares that overflow float64); the
caller then measures it the general way.

The engine (:func:`nbprec.compare.engine._measure`) and the command's early worker (:mod:`nbprec.compare.early`)
use it; threads take a batch's pairs together with :func:`small_pairs` (one kernel call for all of them,
:func:`nbprec.compare.engine._measure_batch`).

The same tensors twice: msprobe writes a tensor at each end of each API call it records, so the output of one call
is usually written again as the input of the next (half the payload bytes of a level ``mix`` training step, a
third of a level ``L1`` one). Data-parallel ranks hold many tensors alike too: the parameters, and the gradients
an all-reduce gave every rank (a third of the payload bytes of a two-rank level ``L1`` training step, most of them
in mapped payloads), which the command and the worker take rank by rank in turns
(:func:`nbprec.compare.workers.in_turns`). A pair whose two payloads hold, byte for byte, the bytes of a
pair this process measured shortly before (:class:`_Recent`: the same kernel types, sizes and recorded extremes,
then the bytes compared), read whole or mapped, takes that pair's values instead of a kernel pass: the same values
to the bit, as the kernel's result depends on nothing else. Comparing the bytes costs a tenth of measuring them.
"""

from __future__ import annotations

import math
from _thread import allocate_lock
from collections import deque

from nbprec.compare._sums import EPS_BENCH, FUSED, KERNEL_TYPES, usable_hints
from nbprec.formats._files import MAP_FROM, RELEASE_FROM
from nbprec.formats._npyfile import small_npy
from nbprec.formats._ptzip import ITEMSIZES, mapped_tensor, small_tensor

TYPE_CHECKING = False  # (the early worker imports this module: typing is not needed at run time)
if TYPE_CHECKING:
    from typing import Literal

#: What :func:`small_pair` gives: (metric columns, why a column is missing or '', whether the extremes held (None
#: when none were usable), each side's count of NaN and infinities), as :class:`~nbprec.compare.metrics.MetricResult`
#: has them.
Measured = tuple[dict[str, float], str, bool | None, tuple[int, int]]
#: A pair :func:`small_pairs` measures: (target file, target dtype, bench file, bench dtype, shape, extremes or
#: None).
Item = tuple[str, str, str, str, tuple[int, ...], tuple[float, float, float, float] | None]


def small_pair(
    t_file: str,
    t_dtype: str,
    b_file: str,
    b_dtype: str,
    shape: tuple[int, ...],
    extremes: tuple[float, float, float, float] | None,
    kind: str = "pt",
    wait: bool = True,
) -> Measured | Literal[False] | None:
    """:data:`Measured` of the pair of payload files ``t_file`` and ``b_file``, each a tensor of ``shape`` and its
    canonical dtype, measured with the recorded ``extremes`` (target min, max, benchmark min, max) as the kernel's
    hints (None, or ones not finite: the kernel finds the extremes first); None when this pair is not one
    :func:`small_pair` measures (see the module docstring). ``kind`` says what the files are: ``"pt"``, msprobe's
    archives (:func:`~nbprec.formats._ptzip.small_tensor`), or ``"npy"``, nbprec's own payloads
    (:func:`~nbprec.formats._npyfile.small_npy`, stored as the dtypes the index names are).

    ``wait=False``: False, without waiting, when part of a payload is not in the page cache yet (its
    reading from the disk has started: the caller measures other pairs meanwhile and then asks again, see
    :func:`nbprec.compare.engine._measure_cached_first`)."""
    pair = _read_pair(t_file, t_dtype, b_file, b_dtype, shape, kind, wait)
    return _measured_once(pair, extremes) if pair else pair


def _measured_once(
    pair: tuple[memoryview, int, memoryview, int], extremes: tuple | None, mapped: bool = False
) -> Measured:
    """The kernel's values of a pair read (``mapped``: one side mapped at least), or those of a kept pair whose
    payloads hold the same bytes (see the module docstring)."""
    key = _key(pair, extremes)
    seen = RECENT.find(key, pair[0], pair[2])
    if seen is not None:
        return seen
    measured = FUSED.pair_metrics(*pair, extremes, EPS_BENCH[pair[3]])
    RECENT.add(key, pair[0], pair[2], measured, mapped)
    return measured


def mapped_pair(item: Item, wait: bool = True) -> Measured | Literal[False] | None:
    """:func:`small_pair` of a pair of msprobe ``.pt`` payloads ``item`` (as :func:`small_pairs` takes them) of
    which one or both are too large to be read whole (:data:`~nbprec.formats._files.MAP_FROM` bytes or more, and
    under :data:`~nbprec.formats._files.RELEASE_FROM`): each side taken as the dump's loader takes it, a large one
    mapped (:func:`~nbprec.formats._ptzip.mapped_tensor`), a small one read, and the pair measured in the one kernel
    call :func:`~nbprec.compare.metrics.tensor_metrics` makes on such arrays. For the command's early worker, which
    would otherwise run out of work while the command loads on a pair whose bytes are mostly in such payloads. None
    for any other pair; False as :func:`small_pair` says."""
    *files, extremes = item
    pair = _read_pair(*files, "pt", wait, mapped=True)
    return _measured_once(pair, extremes, mapped=True) if pair else pair


def small_pairs(items: list[Item], kind: str = "pt") -> list[Measured | None]:
    """:func:`small_pair` of each item ``(t_file, t_dtype, b_file, b_dtype, shape, extremes)``, the same values to
    the bit, with every pair measured in one call (``pair_metrics_many``): threads measuring batches of small
    pairs give up and take back the GIL once per batch for the kernel rather than once per pair (each hand-over
    between two threads costs both a sleep and a wake-up). The payloads are read as :func:`small_pair` reads them
    (from what :func:`~nbprec.formats._files.read_ahead` read, when it did)."""
    found: list[Measured | None] = [None] * len(items)
    positions, calls, keys = [], [], []  # each pair read and not seen before, its pair_metrics arguments, its key
    again: list[tuple[int, int]] = []  # (item, position of the pair of this batch whose bytes it repeats)
    for k, (t_file, t_dtype, b_file, b_dtype, shape, extremes) in enumerate(items):
        pair = _read_pair(t_file, t_dtype, b_file, b_dtype, shape, kind)
        if pair is None:
            continue
        key = _key(pair, extremes)
        seen = RECENT.find(key, pair[0], pair[2])
        if seen is not None:
            found[k] = seen
            continue
        earlier = next(
            (n for n, c in enumerate(calls) if keys[n] == key and same_pair(pair[0], pair[2], c[0], c[2])), None
        )
        if earlier is not None:
            again.append((k, earlier))
            continue
        positions.append(k)
        calls.append((*pair, extremes, EPS_BENCH[pair[3]]))
        keys.append(key)
    for k, call, key, measured in zip(
        positions, calls, keys, FUSED.pair_metrics_many(calls) if calls else [], strict=True
    ):
        found[k] = measured
        RECENT.add(key, call[0], call[2], measured)
    for k, n in again:
        found[k] = RECENT.copy(found[positions[n]])
        RECENT.reused += found[k] is not None
    return found


def same_pair(t: memoryview, b: memoryview, t_seen: memoryview, b_seen: memoryview) -> bool:
    """Whether a pair's two payloads hold the bytes of another pair's (``same_bytes``, C's memcmp)."""
    return FUSED.same_bytes(t, t_seen) and FUSED.same_bytes(b, b_seen)


def _key(pair: tuple[memoryview, int, memoryview, int], extremes: tuple | None) -> tuple:
    """The :data:`RECENT` key of a pair read whole: both kernel types, the target's size in bytes, and the recorded
    extremes when both sides' are usable, else None (and such a pair is not kept: see :meth:`_Recent.add`). A pair
    with one side's hints only (a float16 run that overflowed) is measured with them, but not kept: on the
    float16 pair of ``bench/README.md``, keeping them made the comparison 5% slower (their bytes, compared and
    held, cost more than the repeats they found saved)."""
    return pair[1], pair[3], len(pair[0]), extremes if usable_hints(extremes) else None


class _Recent:
    """The payloads of the pairs this process measured last, with what they measured, for a pair that repeats
    one's bytes (see the module docstring): pairs read whole (under 1 MiB a side), and pairs with a side mapped
    (:func:`mapped_pair`), whose views hold the maps open. At most :attr:`PAIRS` pairs, :attr:`BYTES` bytes read
    (copies this process holds) and :attr:`MAPPED_BYTES` bytes of pairs with a side mapped (the page cache's own
    pages, no copy: holding them only keeps them mapped) are kept, the oldest let go first. A key (both kernel
    types, the target's size in bytes, the recorded extremes) picks the pairs whose bytes are compared: most
    pairs share their key with none, and comparing differing bytes usually stops at the first ones. Threads
    measuring batches share it (under a lock; the bytes are compared outside it)."""

    PAIRS = 64
    BYTES = 16 << 20
    MAPPED_BYTES = 128 << 20

    def __init__(self) -> None:
        self.by_key: dict[tuple, list[tuple[memoryview, memoryview, Measured]]] = {}
        self.order: deque[tuple[tuple, int, bool]] = deque()  # (key, bytes, mapped) of each kept pair, oldest first
        self.nbytes = 0
        self.mapped_nbytes = 0
        self.reused = 0  # pairs that took another's values (for tests and benchmarks)
        self.lock = allocate_lock()

    def find(self, key: tuple, t: memoryview, b: memoryview) -> Measured | None:
        """A copy of what the kept pair of ``key`` whose payloads hold the bytes ``t`` and ``b`` measured, or None.
        (No lock: a dict's ``get`` and a list's copy are each one step that another thread's :meth:`add` cannot
        come between; most pairs find no key.)"""
        kept = self.by_key.get(key)
        if not kept:
            return None
        for t_seen, b_seen, measured in reversed(kept[:]):
            if same_pair(t, b, t_seen, b_seen):
                self.reused += 1
                return self.copy(measured)
        return None

    def clear(self) -> None:
        """Let every kept payload go (a comparison's end: its bytes are not held beyond it)."""
        with self.lock:
            self.by_key.clear()
            self.order.clear()
            self.nbytes = self.mapped_nbytes = 0

    def copy(self, measured: Measured | None) -> Measured | None:
        """``measured`` with a dict of its own (its taker adds columns to it)."""
        if measured is None:
            return None
        values, reason, held, counts = measured
        return dict(values), reason, held, counts

    def add(self, key: tuple, t: memoryview, b: memoryview, measured: Measured | None, mapped: bool = False) -> None:
        """Keep a measured pair (``mapped``: one side mapped at least; its size counts against
        :attr:`MAPPED_BYTES`, else against :attr:`BYTES`), unless it has no recorded extremes or is larger than a
        quarter of its budget."""
        if measured is None or key[3] is None:  # (no recorded extremes: no key worth keeping)
            return
        size = len(t) + len(b)
        if size > (self.MAPPED_BYTES if mapped else self.BYTES) // 4:
            return
        values, reason, held, counts = measured
        kept = (t, b, (dict(values), reason, held, counts))  # (the caller adds columns to its own dict)
        by_key, order = self.by_key, self.order
        with self.lock:
            pairs = by_key.get(key)
            if pairs is None:
                by_key[key] = [kept]
            else:
                pairs.append(kept)
            order.append((key, size, mapped))
            if mapped:
                self.mapped_nbytes += size
            else:
                self.nbytes += size
            while len(order) > self.PAIRS or self.nbytes > self.BYTES or self.mapped_nbytes > self.MAPPED_BYTES:
                old, old_size, old_mapped = order.popleft()
                pairs = by_key[old]
                if len(pairs) == 1:
                    del by_key[old]
                else:
                    del pairs[0]  # (a key's pairs are kept oldest first)
                if old_mapped:
                    self.mapped_nbytes -= old_size
                else:
                    self.nbytes -= old_size


#: This process's :class:`_Recent` (a forked worker starts from a copy of its parent's).
RECENT = _Recent()


def _read_pair(
    t_file: str,
    t_dtype: str,
    b_file: str,
    b_dtype: str,
    shape: tuple[int, ...],
    kind: str,
    wait: bool = True,
    mapped: bool = False,
) -> tuple[memoryview, int, memoryview, int] | Literal[False] | None:
    """``(target bytes, its kernel type, benchmark bytes, its kernel type)`` of a pair :func:`small_pair`
    measures, both payloads read (``mapped``: a pair :func:`mapped_pair` measures, its large payloads mapped); None
    for any other; False (``wait=False``) when a payload is not all in the page cache yet (the benchmark's is asked
    for too, so that both come from the disk together)."""
    t_code, b_code = KERNEL_TYPES.get(t_dtype), KERNEL_TYPES.get(b_dtype)
    if FUSED is None or t_code is None or b_code is None or (mapped and kind != "pt"):
        return None
    numel = math.prod(shape)
    t_bytes, b_bytes = numel * ITEMSIZES[t_dtype], numel * ITEMSIZES[b_dtype]
    largest = max(t_bytes, b_bytes)
    if numel <= 0 or not (MAP_FROM <= largest < RELEASE_FROM if mapped else largest < MAP_FROM):
        return None
    small = small_npy if kind == "npy" else small_tensor
    x = (mapped_tensor if t_bytes >= MAP_FROM else small)(t_file, t_dtype, shape, wait)
    y = (mapped_tensor if b_bytes >= MAP_FROM else small)(b_file, b_dtype, shape, wait) if x is not None else None
    if x is False or y is False:
        return False
    if x is None or y is None:
        return None
    return memoryview(x[0])[x[1] : x[1] + t_bytes], t_code, memoryview(y[0])[y[1] : y[1] + b_bytes], b_code
