"""Read a tensor saved with ``torch.save`` without torch and without unpickling anything.

A ``torch.save`` file of one tensor is a zip archive: ``<name>/data.pkl`` describes the tensor (a call of
``torch._utils._rebuild_tensor_v2`` on a storage reference, an offset, a size, a stride) and
``<name>/data/<key>`` holds the storage's raw bytes. :func:`read_pt_tensor` walks the pickle's opcodes
statically (:mod:`nbprec.formats._pickleops`: nothing is executed or imported), accepts only that one shape of
content, and builds the numpy array from the raw bytes. Anything else returns ``None`` so the caller can fall
back to ``torch.load(weights_only=True)``.

The archive's directory is parsed by :mod:`nbprec.formats._ptzip` (end-of-central-directory record, ZIP64
included, then the central directory and the local headers), in C when ``nbprec.formats._zipdir`` is built
and by its pure-Python twin otherwise; it costs two small reads per file where :mod:`zipfile` costs about
ten, and a file under :data:`~nbprec.formats._payload.MAP_FROM` is read whole in one (its tensor is then a
view of that read). Large storages are memory-mapped, not copied: the array returned is a read-only view of
the file's pages, read when the comparison reaches them. Like ``torch.load(mmap=True)``, the payload's CRC-32 is
not verified (it would cost a full extra pass over every byte); the structure, sizes and bounds are checked.

Examples
--------
>>> read_pt_tensor("README.md") is None  # not a zip archive: left to torch.load
True
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nbprec import dtypes
from nbprec.errors import DumpFormatError
from nbprec.formats._files import open_regular
from nbprec.formats._payload import payload_array
from nbprec.formats._ptzip import (
    _describe,
    _geometry,
    _tensor_entry,
    _Unsupported,
    _zip_entries,
    small_tensor,
)

#: Checks a tensor's description before its storage is read: called with the description's canonical dtype
#: and shape, it raises (a :class:`~nbprec.errors.DumpFormatError`) when they are not what the caller expects.
DescriptionCheck = Callable[[str, tuple[int, ...]], None]
_MAX_SMALL_ENTRY = 1 << 20  # bytes of data.pkl (a few hundred in practice) or byteorder inflated at most


def _planned(path: str | Path, description: tuple, check: DescriptionCheck | None, storage_bytes: int) -> int:
    """Check the tensor a description declares against ``check`` and against its storage (``storage_bytes``
    bytes), before anything of the storage is read; the number of storage elements the tensor reaches."""
    _key, dtype, offset, size, stride = description
    if check is not None:
        check(dtype, size)
    np_dtype = _storage_dtype(path, dtype, storage_bytes)
    if any(n < 0 for n in size):
        raise DumpFormatError(path, f"negative size {list(size)} in the tensor's description")
    numel, last, _contiguous = _geometry(offset, size, stride)
    if numel == 0:
        return 0
    if last < 0:
        raise DumpFormatError(path, "negative offset or stride in the tensor's description")
    count = storage_bytes // np_dtype.itemsize
    if last >= count:
        raise DumpFormatError(path, f"the tensor reaches element {last} of a storage of {count}")
    return last + 1


def read_small_pt(path: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray | None:
    """The tensor of a small plain archive ``path`` (under :data:`~nbprec.formats._files.MAP_FROM` bytes, a
    regular file, not a symbolic link, contiguous), when it is a tensor of ``dtype`` and ``shape``; None for
    anything else, which :func:`read_pt_tensor` then reads (or refuses) with its checks and messages. The usual
    payload of a dump with many small tensors in the fewest steps: one open, one read
    (:func:`~nbprec.formats._ptzip.small_tensor`)."""
    name = dtype.name if dtype.isnative and dtype.name in dtypes.DTYPE_NAMES else None  # (a dtype nbprec names)
    found = None if name is None else small_tensor(path, name, shape)
    if found is None:
        return None
    head, start, numel = found
    return np.frombuffer(head, dtype, numel, start).reshape(shape)


def _read_storage(
    fd: int, path: str | Path, file_size: int, check: DescriptionCheck | None
) -> tuple[tuple, np.ndarray] | None:
    """(description, raw storage as a flat array of its dtype) by parsing the archive here, or None when the
    file is not a plain stored (uncompressed) little-endian one-tensor archive.

    ``torch.save`` streams its entries (sizes in data descriptors after the data), so they are located
    through the central directory at the end of the file; the small records (pickle, byte order) and the
    storage's local header sit in the first KiB, read once. The storage is mapped or read only after the
    description passed ``check`` and fits in the storage, whose declared size must fit in the file.
    """
    try:
        head, entries = _zip_entries(fd, file_size)
    except _Unsupported:
        return None
    found = _tensor_entry(fd, file_size, head, entries)
    if found is None:
        return None
    description, storage = found
    _planned(path, description, check, storage[1])
    np_dtype = dtypes.numpy_dtype(description[1])
    count = storage[1] // np_dtype.itemsize
    try:
        return description, payload_array(fd, path, np_dtype, storage[0], count, file_size, head)
    except OSError as exc:  # mapping failed (no address space left)
        raise DumpFormatError(path, f"cannot map or read the storage: {exc.strerror or exc}") from exc


def _storage_dtype(path: str | Path, dtype: str, nbytes: int) -> np.dtype:
    """The numpy dtype of a storage of ``nbytes`` bytes, which must hold a whole number of values."""
    np_dtype = dtypes.numpy_dtype(dtype)
    if nbytes % np_dtype.itemsize:
        raise DumpFormatError(path, f"storage of {nbytes} bytes is not a whole number of {dtype} values")
    return np_dtype


# What zipfile raises on a damaged archive: besides BadZipFile, NotImplementedError for an unknown version or
# method, RuntimeError for an encrypted entry, zlib.error for a corrupt deflate stream, struct.error, EOFError.
# (zipfile, imported by the functions that use it: the usual archive never needs it)
_ZIPFILE_ERRORS = (
    OSError, KeyError, _Unsupported, ValueError, IndexError, EOFError, NotImplementedError,
    RuntimeError, zlib.error, struct.error, TypeError,
)  # fmt: skip


def _zip_errors() -> tuple[type[BaseException], ...]:
    """:data:`_ZIPFILE_ERRORS` and ``zipfile.BadZipFile``."""
    import zipfile

    return (*_ZIPFILE_ERRORS, zipfile.BadZipFile)


def _inflate(archive: Any, name: str, limit: int) -> bytes:
    """The first ``limit`` bytes of an entry: a deflated entry is inflated no further (a zip bomb cannot
    fill memory)."""
    with archive.open(name) as entry:
        return entry.read(limit)


def _compressed(fd: int) -> bool:
    """Whether the file open as ``fd`` is a zip archive holding a compressed entry (its directory only is read)."""
    import zipfile

    try:
        with os.fdopen(os.dup(fd), "rb") as handle, zipfile.ZipFile(handle) as archive:
            return any(info.compress_type != zipfile.ZIP_STORED for info in archive.infolist())
    except _zip_errors():
        return False


def _read_storage_zipfile(fd: int, path: str | Path, check: DescriptionCheck | None) -> tuple[tuple, np.ndarray] | None:
    """What :func:`_read_storage` returns, through :mod:`zipfile` (compressed or unusual archives).

    Nothing is inflated past what it needs: the pickle and byte order up to 1 MiB, the storage up to the
    bytes the checked description reaches (a storage declared smaller than that is an error).
    """
    import zipfile

    try:
        with os.fdopen(os.dup(fd), "rb") as handle, zipfile.ZipFile(handle) as archive:
            names = archive.namelist()
            pkl = next((n for n in names if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if pkl is None:
                return None
            prefix = pkl[: -len("data.pkl")]
            if f"{prefix}byteorder" in names and _inflate(archive, f"{prefix}byteorder", 64).strip() != b"little":
                return None
            pickle_bytes = _inflate(archive, pkl, _MAX_SMALL_ENTRY + 1)
            if len(pickle_bytes) > _MAX_SMALL_ENTRY:
                return None
            description = _describe(pickle_bytes)
            info = archive.getinfo(f"{prefix}data/{description[0]}")
            np_dtype = dtypes.numpy_dtype(description[1])
            needed = _planned(path, description, check, info.file_size) * np_dtype.itemsize
            raw = _inflate(archive, info.filename, needed)
    except _zip_errors():
        return None
    if len(raw) != needed:
        raise DumpFormatError(path, f"the storage inflates to {len(raw)} bytes, its directory says {info.file_size}")
    return description, np.frombuffer(raw, dtype=np_dtype)


def read_pt_tensor(
    path: str | Path, *, check: DescriptionCheck | None = None, record: str | None = None
) -> np.ndarray | None:
    """The tensor in a ``torch.save`` file as a numpy array (original dtype), or ``None`` when the file is not
    a plain one-tensor zip archive this reader understands (the caller then uses ``torch.load``).

    A contiguous tensor comes back read-only: a view of the memory-mapped file from 1 MiB, else a view of the
    bytes read. A strided one comes back as a fresh C-contiguous copy, except a view that repeats storage
    elements (a stride of 0, as ``expand`` makes), which comes back as a read-only strided view: its copy could
    be far larger than the file.

    ``check`` (a :data:`DescriptionCheck`) sees the dtype and shape the archive declares before its storage is
    read, so a file declaring another tensor than expected is refused without reading or allocating it.

    Raises :class:`~nbprec.errors.DumpFormatError` (naming ``path`` and ``record``) when the file is missing,
    empty or not a regular file (a FIFO, a device), or is a recognised archive whose tensor does not fit its
    storage or fails ``check`` (a corrupt or hostile file).
    """
    try:
        fd, file_size = open_regular(path, record)
    except FileNotFoundError:
        raise DumpFormatError(path, "no such file", record) from None
    try:
        return read_pt_open(fd, file_size, path, check=check, record=record)
    finally:
        os.close(fd)


def read_pt_open(
    fd: int, file_size: int, path: str | Path, *, check: DescriptionCheck | None = None, record: str | None = None
) -> np.ndarray | None:
    """:func:`read_pt_tensor` of the regular file ``path``, open as ``fd`` (``file_size`` bytes; the caller
    closes it)."""
    try:
        if file_size == 0:
            raise DumpFormatError(path, "empty file (0 bytes): not a torch.save archive", record)
        found = _read_storage(fd, path, file_size, check)
        if found is None:
            found = _read_storage_zipfile(fd, path, check)
    except DumpFormatError as exc:
        if exc.record or not record:
            raise
        raise DumpFormatError(exc.path, exc.problem, record) from exc
    if found is None:
        if _compressed(fd):  # left to torch.load, it would inflate every entry whole
            raise DumpFormatError(
                path, "a zip archive with compressed entries, which torch.save never writes: not read", record
            )
        return None
    (_key, _dtype, offset, size, stride), flat = found
    numel, last, contiguous = _geometry(offset, size, stride)
    if numel == 0:
        try:
            return np.zeros(size, dtype=flat.dtype)
        except ValueError as exc:  # a dimension numpy cannot represent
            raise DumpFormatError(path, f"unusable empty shape {list(size)}: {exc}", record) from exc
    if contiguous:
        return flat[offset : offset + numel].reshape(size)  # a view (of the mapped file when it is large)
    view = np.lib.stride_tricks.as_strided(
        flat[offset:], shape=size, strides=[s * flat.dtype.itemsize for s in stride], writeable=False
    )
    if numel > last + 1 - offset:  # storage elements repeat (stride 0): copying could take far more memory
        return view
    return view.copy()  # C-contiguous, owns its data (0-d stays 0-d, unlike np.ascontiguousarray)
