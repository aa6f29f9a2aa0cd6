"""A payload's bytes in an open file as a numpy array: a read-only view of the mapped file when large, else
read. Shared by the readers of formats that store raw tensor bytes at a known offset (nbprec's ``.npy``
payloads, the storages inside ``torch.save`` archives)."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from nbprec.errors import DumpFormatError

#: Payloads of at least this many bytes are memory-mapped and read in place as the comparison reaches them;
#: smaller ones are read. Mapping costs page faults and an unmap (about 40 us for a file of a few hundred
#: KiB), more than reading it: on an msprobe dump with many 64 KiB - 1 MiB payloads, reading those cut the
#: compare's CPU time by 6%. Read payloads are copies, so this also bounds what a read holds in memory.
MAP_FROM = 1 << 20


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
