"""Plain ``.npy`` files (a simple dtype, C or Fortran order: what numpy and nbprec's dump writer write) without
numpy: their header, and a small one's payload bytes.

The native reader (:mod:`nbprec.formats.native_read`) parses payload headers with it before mapping or reading a
payload, and the ``nbprec compare`` command's early worker (:mod:`nbprec.compare.early_native`), which runs before
numpy is imported, reads small payloads with :func:`small_npy`. Any other file is None here: the reader then hands
it to ``np.load``, and the worker leaves the pair to the reader.
"""

from __future__ import annotations

import math
import os
import re

from nbprec.formats._files import MAP_FROM, open_plain_file, read_small_file, taken_ahead

TYPE_CHECKING = False  # (the early worker imports this module: typing is not needed at run time)
if TYPE_CHECKING:
    from typing import Literal

MAGIC = b"\x93NUMPY"
#: The ``descr`` a native dump stores each dtype of the compiled metric kernel as (little-endian; bfloat16 as its
#: raw bits, :data:`nbprec.formats.native_read.RAW_BITS_STORAGE`).
KERNEL_DESCRS = {"float32": "<f4", "float16": "<f2", "float64": "<f8", "bfloat16": "<u2"}
#: The header dict numpy writes for a simple dtype (padded with spaces, ended by a line feed).
HEADER = re.compile(
    r"\{'descr': '([<>|=][a-zA-Z][0-9]*)', 'fortran_order': (True|False), 'shape': \(([0-9, ]*)\), *\} *\n?"
)


try:
    from nbprec.formats._zipdir import npy_start as _npy_start_c
    from nbprec.formats._zipdir import read_npy as _read_npy_c
except ImportError:  # not built: the Python path below
    _npy_start_c = _read_npy_c = None


def header_span(head: bytes) -> tuple[int, int] | None:
    """``(start, end)`` of the header dict in the first bytes ``head`` of a ``.npy`` file (format versions 1 to
    3), or None when they do not start one; ``end`` may lie past ``head``."""
    if head[:6] != MAGIC or len(head) < 12 or head[6] not in (1, 2, 3):
        return None
    start = 10 if head[6] == 1 else 12
    return start, start + int.from_bytes(head[8:start], "little")


def parse_header(text: bytes) -> tuple[str, bool, tuple[int, ...]] | None:
    """``(descr, Fortran order, shape)`` of a plain header dict, or None for another kind."""
    match = HEADER.fullmatch(text.decode("latin1"))
    if match is None:
        return None
    return match[1], match[2] == "True", tuple(int(v) for v in match[3].replace(" ", "").split(",") if v)


def small_npy(
    path: str, dtype: str, shape: tuple[int, ...], wait: bool = True
) -> tuple[bytes, int] | Literal[False] | None:
    """``(the whole file, where the payload starts in it)`` of ``path`` when it is a regular file, not a symbolic
    link, of 1 to :data:`~nbprec.formats._files.MAP_FROM` - 1 bytes, holding a plain C-order ``.npy`` payload of
    ``shape`` stored as the kernel dtype ``dtype`` is (:data:`KERNEL_DESCRS`), all its bytes there; None for
    anything else (the native reader then reads the file, with its checks and messages). One open, one read (or
    none: read ahead, :func:`~nbprec.formats._files.read_ahead`). ``wait=False``: False when part of the file is
    not in the page cache yet (its reading from the disk has started; the compiled reader is needed)."""
    descr = KERNEL_DESCRS.get(dtype)
    if descr is None:
        return None
    data = taken_ahead(path)
    if _read_npy_c is not None:  # the same checks in C: one call for the open, the read and the header
        try:
            if data is None:
                return _read_npy_c(path, MAP_FROM, descr, shape, int(descr[2:]), wait)
            if isinstance(data, bytes):
                start = _npy_start_c(data, descr, shape, int(descr[2:]))
                return None if start is None else (data, start)
        except (ValueError, TypeError):  # (a NUL byte in the name, a shape that is not ints: the reader says so)
            return None
    if data is None and not wait:
        data = read_small_file(path, wait=False)
        if data is False:  # not all in the page cache yet
            return False
    if data is None:
        opened = open_plain_file(path)
        if opened is None:
            return None
        fd, size = opened
        try:
            data = os.read(fd, size) if 0 < size < MAP_FROM else b""
        except OSError:
            return None
        finally:
            os.close(fd)
        if len(data) != size:  # (too large to read whole, or shrunk while read)
            return None
    elif not isinstance(data, bytes):  # (an archive read ahead for small_tensor: not this reader's)
        return None
    span = header_span(data)
    parsed = parse_header(data[span[0] : span[1]]) if span is not None and span[1] <= len(data) else None
    if parsed is None or parsed != (descr, False, tuple(shape)):
        return None
    if span[1] + math.prod(shape) * int(descr[2:]) > len(data):
        return None
    return data, span[1]


__all__ = ["HEADER", "KERNEL_DESCRS", "MAGIC", "header_span", "parse_header", "small_npy"]
