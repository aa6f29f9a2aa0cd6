"""Writing a payload of nbprec's dump format block by block, for tensors larger than memory.

:meth:`NativeDumpWriter.write_tensor_blocks <nbprec.formats.native.NativeDumpWriter.write_tensor_blocks>`
uses :func:`write_blocks`: the ``.npy`` header first, then each block as it comes, while :class:`BlockStats`
gathers the statistics :func:`~nbprec.stats.tensor_stats` gives (minimum, maximum and counts exactly; mean,
standard deviation and norm to rounding, from per-block sums combined as Chan et al. combine variances).
Nothing holds more than one block.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from nbprec.dtypes import canonical_dtype
from nbprec.errors import CaptureError
from nbprec.formats.native_read import RAW_BITS_STORAGE
from nbprec.stats import STAT_COLUMNS, as_float64


class BlockStats:
    """The statistics of :func:`nbprec.stats.tensor_stats`, gathered block by block.

    Examples
    --------
    >>> acc = BlockStats()
    >>> for block in (np.array([1.0, np.nan]), np.array([-3.0, 0.0, np.inf])):
    ...     acc.add(block)
    >>> s = acc.result()
    >>> s["min"], s["max"], s["nan_count"], s["inf_count"], s["zero_count"]
    (-3.0, 1.0, 1, 1, 1)
    """

    def __init__(self) -> None:
        self.n = self.n_finite = self.nans = self.zeros = 0
        self.low, self.high = math.inf, -math.inf
        self.mean = self.m2 = self.squares = 0.0

    def add(self, block: np.ndarray) -> None:
        """Add the values of one block (any shape, any numeric dtype)."""
        x = as_float64(np.asarray(block)).ravel()
        finite = np.isfinite(x)
        k = int(np.count_nonzero(finite))
        self.n += x.size
        self.nans += int(np.count_nonzero(np.isnan(x))) if k < x.size else 0
        self.zeros += x.size - int(np.count_nonzero(x))
        if k == 0:
            return
        f = x if k == x.size else x[finite]
        self.low, self.high = min(self.low, float(f.min())), max(self.high, float(f.max()))
        mean = float(f.mean())
        centred = f - mean
        m2 = float(np.dot(centred, centred))
        total = self.n_finite + k
        delta = mean - self.mean
        self.mean += delta * k / total
        self.m2 += m2 + delta * delta * self.n_finite * k / total
        self.squares += float(np.dot(f, f))
        self.n_finite = total

    def result(self) -> dict[str, float | int | None]:
        """The statistics, keyed by :data:`nbprec.stats.STAT_COLUMNS`."""
        counts = {
            "nan_count": self.nans,
            "inf_count": self.n - self.n_finite - self.nans,
            "zero_count": self.zeros,
        }
        if self.n_finite == 0:
            return {**dict.fromkeys(STAT_COLUMNS[:6]), **counts}
        return {
            "min": self.low,
            "max": self.high,
            "mean": self.mean,
            "std": math.sqrt(max(self.m2 / self.n_finite, 0.0)),
            "norm": math.sqrt(self.squares),
            "abs_max": max(abs(self.low), abs(self.high)),
            **counts,
        }


def write_blocks(
    target: Path | None, blocks: Iterable[np.ndarray], dtype: np.dtype, shape: list[int], *, want_stats: bool
) -> dict[str, float | int | None] | None:
    """Write ``blocks`` (flat, C order) as the ``.npy`` file ``target`` of ``dtype`` and ``shape``; return their
    statistics when ``want_stats``. ``target`` None writes nothing (statistics only).

    Raises :class:`~nbprec.errors.CaptureError` (and removes the partial file) when the blocks do not hold
    exactly ``prod(shape)`` values or cannot be cast to ``dtype`` safely.
    """
    count = math.prod(shape)
    storage = RAW_BITS_STORAGE.get(canonical_dtype(dtype), dtype)
    stats = BlockStats() if want_stats else None
    if target is not None:  # a name left by an earlier dump may be a hard link: replaced, never written through
        Path(target).unlink(missing_ok=True)
    handle = open(target, "xb") if target is not None else None  # noqa: SIM115 - closed below, removed on error
    written = 0
    try:
        if handle is not None:
            header = {"descr": np.lib.format.dtype_to_descr(storage), "fortran_order": False, "shape": tuple(shape)}
            np.lib.format.write_array_header_1_0(handle, header)
        for block in blocks:
            values = np.asarray(block)
            if values.dtype != dtype:
                if not np.can_cast(values.dtype, dtype, "same_kind"):
                    raise CaptureError(f"{target}: a block of {values.dtype} cannot be written as {dtype}")
                values = values.astype(dtype)
            values = np.ascontiguousarray(values).reshape(-1)
            written += values.size
            if written > count:
                raise CaptureError(f"{target}: the blocks hold more than the {count} values of shape {list(shape)}")
            if stats is not None:
                stats.add(values)
            if handle is not None:
                handle.write(memoryview(values.view(storage)).cast("B"))
        if written != count:
            raise CaptureError(f"{target}: the blocks hold {written} values, shape {list(shape)} needs {count}")
    except BaseException:
        if handle is not None:
            handle.close()
            target.unlink(missing_ok=True)
        raise
    if handle is not None:
        handle.close()
    return stats.result() if stats is not None else None


__all__ = ["BlockStats", "write_blocks"]
