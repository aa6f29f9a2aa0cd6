"""A payload's bytes in an open file as a numpy array: a read-only view of the mapped file when large, else
read. Shared by the readers of formats that store raw tensor bytes at a known offset (nbprec's ``.npy``
payloads, the storages inside ``torch.save`` archives).

A mapped payload larger than memory is read in bounded memory: the comparison reads it window by window and
hands each window's pages back when it is done with them (:class:`MappedPages`), so that they leave the
process (they stay in the page cache, which the system reclaims as it needs) instead of adding up to the whole
tensor in its resident memory.
"""

from __future__ import annotations

import mmap
import os
import sys
import tokenize
from pathlib import Path

import numpy as np

from nbprec.errors import DumpFormatError
from nbprec.formats._files import MAP_FROM, RELEASE_FROM  # (mapped from MAP_FROM bytes; see there)

#: What numpy raises for a damaged or hostile ``.npy`` header (its parser tokenizes and evaluates the header
#: text: ValueError, SyntaxError, tokenize.TokenError, TypeError, ...), besides OSError and EOFError on reads.
NPY_HEADER_ERRORS = (
    ValueError, TypeError, SyntaxError, tokenize.TokenError, OverflowError, MemoryError, RecursionError, EOFError,
)  # fmt: skip

#: Pages are handed back this many bytes at a time.
RELEASE_STEP = 16 << 20
#: ``MADV_POPULATE_READ`` (Linux 5.14; not among Python 3.11's ``mmap`` constants): map a range's pages at once.
_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22 if sys.platform == "linux" else 0)


def payload_array(
    fd: int, path: str | Path, dtype: np.dtype, offset: int, count: int, file_size: int, head: bytes = b""
) -> np.ndarray:
    """``count`` values of ``dtype`` at byte ``offset`` of the open file ``fd``, flat and read-only.

    ``head`` is the file's first bytes when the caller has read them already: a payload within them is not
    read again, and the array is a view of them. A payload that runs past the end of the file (``file_size`` bytes) is a
    :class:`~nbprec.errors.DumpFormatError` naming ``path``.
    """
    nbytes = count * dtype.itemsize
    if offset < 0 or offset + nbytes > file_size:
        raise DumpFormatError(
            path,
            f"payload truncated: {nbytes} bytes at offset {offset} runs past the end of the file ({file_size} bytes);"
            " the file was cut short (an interrupted copy or run?): copy or dump it again",
        )
    if nbytes >= MAP_FROM:  # only the payload's pages are mapped: a huge (sparse) file costs no address space
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        mapped = mmap.mmap(fd, offset + nbytes - start, access=mmap.ACCESS_READ, offset=start)
        return np.frombuffer(mapped, dtype, count, offset - start)
    if offset + nbytes <= len(head):  # read already (a small file is read whole): a view, not a copy
        return np.frombuffer(head, dtype, count, offset)
    data = os.pread(fd, nbytes, offset)
    if len(data) != nbytes:  # the file shrank since its size was taken
        raise DumpFormatError(path, f"payload truncated: read {len(data)} of {nbytes} bytes at offset {offset}")
    return np.frombuffer(data, dtype, count)


class MappedPages:
    """The read-only file mapping under an array, whose pages can be handed back once read.

    :meth:`release` drops the process's mapping of the pages before a byte offset of the array
    (``madvise(MADV_DONTNEED)``): the process no longer counts them in its resident memory, the page cache
    keeps them, and reading them again maps them again from the file. That is only safe on a read-only shared
    file mapping (nothing can be lost), which is the only kind :meth:`of` accepts: ``payload_array``'s maps and
    ``np.load(mmap_mode="r")``'s.
    """

    def __init__(self, mapped: mmap.mmap, start: int, nbytes: int) -> None:
        self._mapped = mapped
        self._start = start  # offset of the array's first byte in the mapping
        self._end = start + nbytes
        self._done = start  # pages before this offset were handed back in the current pass
        self._ready = start  # pages before this offset were mapped ahead of the reading
        self._ahead = start  # pages before this offset were asked to be read from disk ahead of the reading

    @classmethod
    def of(cls, array: np.ndarray) -> MappedPages | None:
        """The pages of a C-contiguous ``array`` read from a read-only file mapping of at least
        :data:`RELEASE_FROM` bytes; ``None`` for anything else (memory that is not a file's, small maps)."""
        if array.nbytes < RELEASE_FROM or not array.flags.c_contiguous or not hasattr(mmap, "MADV_DONTNEED"):
            return None
        base = array
        while isinstance(base, np.ndarray):
            base = base.base
        if isinstance(base, memoryview):
            base = base.obj
        if not isinstance(base, mmap.mmap):
            return None
        try:
            with memoryview(base) as view:
                if not view.readonly:  # a private (copy-on-write) or writable map: changes would be lost
                    return None
                probe = np.frombuffer(view, np.uint8, 1)
                start = array.ctypes.data - probe.ctypes.data
                del probe
        except (ValueError, TypeError, BufferError):  # closed, or not exporting a buffer
            return None
        if start < 0 or start + array.nbytes > len(base):
            return None
        return cls(base, start, array.nbytes)

    def begin(self) -> None:
        """Start a new pass from the array's first byte."""
        self._done = self._ready = self._ahead = self._start
        self._prepare(self._start)

    def release(self, stop: int, *, final: bool = False) -> None:
        """Hand back the pages before byte ``stop`` of the array once :data:`RELEASE_STEP` bytes are read
        (or at once with ``final``), and prepare the pages that come next."""
        end = self._start + stop
        if end - self._done < RELEASE_STEP and not final:
            return
        low = self._done - self._done % mmap.PAGESIZE
        high = end - end % mmap.PAGESIZE if end < self._end else len(self._mapped)
        if high > low and self._advise(mmap.MADV_DONTNEED, low, high):
            self._done = high
        if not final:
            self._prepare(end)

    def _prepare(self, end: int) -> None:
        """Map the next step's pages in one call (``MADV_POPULATE_READ``, cheaper than a page fault each), and
        ask for the two steps after it to be read from disk meanwhile (``MADV_WILLNEED``)."""
        ready = min(end + RELEASE_STEP, self._end)
        if _POPULATE_READ and ready > self._ready:
            self._advise(_POPULATE_READ, max(self._ready, end), ready)
            self._ready = ready
        ahead = min(end + 3 * RELEASE_STEP, self._end)
        if ahead > self._ahead:
            self._advise(getattr(mmap, "MADV_WILLNEED", 0), max(self._ahead, ready), ahead)
            self._ahead = ahead

    def _advise(self, option: int, low: int, high: int) -> bool:
        """``madvise(option)`` on bytes ``low:high`` of the mapping (rounded out to pages); False when refused."""
        low -= low % mmap.PAGESIZE
        if not option or high <= low:
            return False
        try:
            self._mapped.madvise(option, low, high - low)
        except (OSError, ValueError):  # closed meanwhile, or an option this system does not know: no harm done
            return False
        return True
