"""What a statistics capture keeps of a gradient: its record's fields, read when the gradient's hook fires.

A backward watch (:mod:`nbprec.capture.backward`) reports once every hook of its call has fired; holding the
gradient tensors until then keeps a reference autograd does not expect. ``AccumulateGrad`` then clones a
parameter's gradient instead of making it the ``.grad`` (on MiniLM, 73 of a step's gradients: 44 MB of copies),
and a gradient cannot be summed in place. :class:`GradientKeeper` reads what the record needs at once (dtype,
shape, statistics, through the capture's memo so that every watch of the same tensor shares them) and lets the
tensor go.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nbprec.capture.lines import EncodedStats
from nbprec.capture.memo import TensorMemo


class KeptGradient:
    """One gradient's record fields: dtype name, shape, element count and encoded statistics."""

    __slots__ = ("dtype", "numel", "shape", "stats")

    def __init__(self, dtype: str, shape: tuple[int, ...], numel: int, stats: EncodedStats) -> None:
        self.dtype = dtype
        self.shape = shape
        self.numel = numel
        self.stats = stats


class GradientKeeper:
    """The ``take`` of a statistics capture's backward watches (see :data:`nbprec.capture.backward.Take`).

    Parameters
    ----------
    torch
        The torch module.
    memo
        The recorder's :class:`~nbprec.capture.memo.TensorMemo` (statistics per tensor object).
    stats
        Encoded statistics of a tensor (the recorder's).
    dtype_name
        The dump's dtype name of a torch dtype (cached by the recorder).
    """

    def __init__(
        self,
        torch: Any,
        memo: TensorMemo,
        stats: Callable[[Any], EncodedStats],
        dtype_name: Callable[[Any], str],
    ) -> None:
        self._memo = memo
        self._stats = stats
        self._dtype_name = dtype_name
        self._no_torch_function = torch._C.DisableTorchFunction

    def __call__(self, t: Any, like: KeptGradient | None = None) -> KeptGradient:
        """What the record of gradient ``t`` needs; ``like``: a kept gradient holding the same values."""
        with self._no_torch_function():
            dtype = self._dtype_name(t.dtype)
            numel = t.numel()
            if like is not None and like.numel == numel and like.dtype == dtype:
                same = like.stats  # a rearranging op's gradient: the values it received
                stats = self._memo.stats_or(t, lambda _: same)
            else:
                stats = self._memo.stats_or(t, self._stats)
            return KeptGradient(dtype, tuple(t.shape), numel, stats)


__all__ = ["GradientKeeper", "KeptGradient"]
