"""Read a tensor saved with ``torch.save`` without torch and without unpickling anything.

A ``torch.save`` file of one tensor is a zip archive: ``<name>/data.pkl`` describes the tensor (a call of
``torch._utils._rebuild_tensor_v2`` on a storage reference, an offset, a size, a stride) and
``<name>/data/<key>`` holds the storage's raw bytes. :func:`read_pt_tensor` walks the pickle's opcodes
statically (``pickletools.genops``, nothing is executed or imported), accepts only that one shape of
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

import functools
import math
import os
import pickletools
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nbprec.dtypes import NUMPY_DTYPES
from nbprec.errors import DumpFormatError
from nbprec.formats._files import open_regular
from nbprec.formats._payload import payload_array
from nbprec.formats._ptzip import _entry_bytes, _small_archive, _Unsupported, _zip_entries

#: torch storage class -> canonical dtype
STORAGE_DTYPES = {
    "FloatStorage": "float32",
    "DoubleStorage": "float64",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "Float8_e4m3fnStorage": "float8_e4m3fn",
    "Float8_e5m2Storage": "float8_e5m2",
}
_REBUILD = ("torch._utils", "_rebuild_tensor_v2")
_REBUILD_V3 = ("torch._utils", "_rebuild_tensor_v3")  # dtype passed explicitly (float8 and newer dtypes)
_UNTYPED = ("global", "torch.storage", "UntypedStorage")
_ORDERED_DICT = ("collections", "OrderedDict")


class _Mark:
    pass


# A pure function of the bytes: tensors of one shape and dtype have the same data.pkl (it does not name the
# archive), so a model's repeated layers parse it once. The cache holds descriptions, never objects.
@functools.lru_cache(maxsize=4096)
def _describe(pickle_bytes: bytes) -> tuple[str, str, int, tuple[int, ...], tuple[int, ...]]:
    """(storage key, dtype, offset, size, stride) from a one-tensor ``data.pkl``, executing nothing."""
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    mark = _Mark()
    for op, arg, _pos in pickletools.genops(pickle_bytes):
        name = op.name
        if name in ("PROTO", "FRAME"):
            continue
        if name == "GLOBAL":
            module, _, attr = str(arg).partition(" ")
            stack.append(("global", module, attr))
        elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
            memo[int(arg)] = stack[-1]
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif name in ("BINGET", "LONG_BINGET", "GET"):
            stack.append(memo[int(arg)])
        elif name == "MARK":
            stack.append(mark)
        elif name == "TUPLE":
            i = len(stack) - 1 - stack[::-1].index(mark)
            items = tuple(stack[i + 1 :])
            del stack[i:]
            stack.append(items)
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            items = tuple(stack[-n:])
            del stack[-n:]
            stack.append(items)
        elif name == "EMPTY_TUPLE":
            stack.append(())
        elif name in ("BINUNICODE", "SHORT_BINUNICODE", "UNICODE", "BININT", "BININT1", "BININT2", "LONG1"):
            stack.append(arg)
        elif name in ("NEWTRUE", "NEWFALSE", "NONE"):
            stack.append({"NEWTRUE": True, "NEWFALSE": False, "NONE": None}[name])
        elif name == "BINPERSID":
            stack.append(("persistent", stack.pop()))
        elif name == "REDUCE":
            args, func = stack.pop(), stack.pop()
            if func == ("global", *_ORDERED_DICT) and args == ():
                stack.append({})
            elif func == ("global", *_REBUILD) and isinstance(args, tuple) and len(args) >= 4:
                stack.append(("tensor", args, None))
            elif func == ("global", *_REBUILD_V3) and isinstance(args, tuple) and len(args) >= 7:
                stack.append(("tensor", args, args[6]))
            else:
                raise _Unsupported(f"call of {func!r}")
        elif name == "STOP":
            break
        else:
            raise _Unsupported(f"opcode {name}")
    if len(stack) != 1 or not (isinstance(stack[0], tuple) and stack[0][:1] == ("tensor",)):
        raise _Unsupported("not a single tensor")
    storage, offset, size, stride = stack[0][1][:4]
    explicit_dtype = stack[0][2]
    if not (isinstance(storage, tuple) and storage[0] == "persistent"):
        raise _Unsupported("no storage reference")
    ref = storage[1]
    if not (isinstance(ref, tuple) and len(ref) >= 4 and ref[0] == "storage" and isinstance(ref[1], tuple)):
        raise _Unsupported("unexpected storage reference")
    storage_class = ref[1]
    if explicit_dtype is not None:  # v3: an untyped storage and a torch dtype global such as torch.float8_e4m3fn
        if storage_class != _UNTYPED or not (
            isinstance(explicit_dtype, tuple) and explicit_dtype[:2] == ("global", "torch")
        ):
            raise _Unsupported(f"storage {storage_class!r} with dtype {explicit_dtype!r}")
        dtype = str(explicit_dtype[2])
        if dtype not in NUMPY_DTYPES:
            raise _Unsupported(f"dtype {dtype}")
    elif storage_class[:2] == ("global", "torch") and storage_class[2] in STORAGE_DTYPES:
        dtype = STORAGE_DTYPES[storage_class[2]]
    else:
        raise _Unsupported(f"storage type {storage_class!r}")
    if not all(isinstance(v, int) for v in (offset, *size, *stride)) or len(size) != len(stride):
        raise _Unsupported("non-integer geometry")
    return str(ref[2]), dtype, offset, tuple(size), tuple(stride)


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


def _tensor_entry(fd: int, file_size: int, head: bytes, entries: dict) -> tuple[tuple, tuple[int, int]] | None:
    """(description, (storage offset, storage bytes)) of a plain little-endian one-tensor archive whose first
    bytes are ``head`` and whose directory is ``entries``; None for any other archive."""
    try:
        for pkl in entries:  # torch.save writes it first
            if pkl.endswith(b"/data.pkl") or pkl == b"data.pkl":
                break
        else:
            return None
        prefix = pkl[: -len(b"data.pkl")]
        order = entries.get(prefix + b"byteorder")
        if order is not None and _entry_bytes(fd, order, file_size, head).strip() != b"little":
            return None
        description = _describe(_entry_bytes(fd, entries[pkl], file_size, head))
        storage = entries.get(prefix + b"data/" + description[0].encode())
        if storage is None or storage[0] < 0:
            return None
    except (_Unsupported, KeyError, UnicodeError, struct.error, ValueError, IndexError, EOFError, TypeError):
        return None
    return description, storage


def read_small_pt(path: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray | None:
    """The tensor of a small plain archive ``path`` (under :data:`~nbprec.formats._payload.MAP_FROM` bytes, a
    regular file, not a symbolic link, contiguous), when it is a tensor of ``dtype`` and ``shape``; None for
    anything else, which :func:`read_pt_tensor` then reads (or refuses) with its checks and messages. The usual
    payload of a dump with many small tensors in the fewest steps: one open, one read."""
    try:
        small = _small_archive(path)
    except (OSError, _Unsupported):
        return None
    if small is None:
        return None
    head, entries = small
    try:  # (the head is the whole file: nothing is read past it, and the file is closed)
        found = _tensor_entry(-1, len(head), head, entries)
    except OSError:
        return None
    if found is None:
        return None
    (_key, dtype_name, offset, size, stride), (start, nbytes) = found
    np_dtype = NUMPY_DTYPES.get(dtype_name)
    if np_dtype is None or np_dtype != dtype or size != shape or start + nbytes > len(head):
        return None
    numel, last, contiguous = _geometry(offset, size, stride)
    if not contiguous or numel == 0 or nbytes % np_dtype.itemsize or not 0 <= last < nbytes // np_dtype.itemsize:
        return None
    return np.frombuffer(head, np_dtype, numel, start + offset * np_dtype.itemsize).reshape(size)


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
    np_dtype = NUMPY_DTYPES[description[1]]
    count = storage[1] // np_dtype.itemsize
    try:
        return description, payload_array(fd, path, np_dtype, storage[0], count, file_size, head)
    except OSError as exc:  # mapping failed (no address space left)
        raise DumpFormatError(path, f"cannot map or read the storage: {exc.strerror or exc}") from exc


def _storage_dtype(path: str | Path, dtype: str, nbytes: int) -> np.dtype:
    """The numpy dtype of a storage of ``nbytes`` bytes, which must hold a whole number of values."""
    np_dtype = NUMPY_DTYPES[dtype]
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
            np_dtype = NUMPY_DTYPES[description[1]]
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


@functools.lru_cache(maxsize=4096)  # a model's tensors come in a few geometries, like their data.pkl
def _geometry(offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> tuple[int, int, bool]:
    """(element count, last storage element the tensor reaches or -1 when an offset or stride is negative,
    whether it is C-contiguous)."""
    if offset < 0 or any(s < 0 for s in stride):
        return math.prod(size), -1, False
    last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    return math.prod(size), last, stride == _contiguous_strides(size)


def _contiguous_strides(size: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-contiguous tensor of this size."""
    strides, step = [], 1
    for n in reversed(size):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))
