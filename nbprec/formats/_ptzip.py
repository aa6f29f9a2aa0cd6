"""A ``torch.save`` archive of one tensor, read without numpy or torch: its zip directory, and the tensor its
``data.pkl`` describes.

Reading one tensor of a ``torch.save`` archive needs the archive's directory and the local headers of the entries
used: the end-of-central-directory record (ZIP64 included), then the central directory, then each local header.
:func:`_zip_entries` does it with :mod:`nbprec.formats._zipdir` (C) when that is built and with its pure-Python
twin :func:`_zip_entries_py` otherwise; the two give the same result for every input (tests hold them to it).
Every offset and length read from the file is checked before it is used: the file may be truncated or hostile.

:func:`_describe` reads the tensor's description (storage, dtype, offset, size, stride) from ``data.pkl`` by
walking its opcodes (:mod:`nbprec.formats._pickleops`), executing nothing; :func:`small_tensor` gives the bytes
of a small archive's tensor, which a thread may have read ahead with others
(:func:`nbprec.formats._files.read_ahead`). :mod:`nbprec.formats._pt` makes numpy arrays of them;
:mod:`nbprec.compare.early` uses them before numpy is loaded."""

from __future__ import annotations

import functools
import math
import mmap
import os
import struct

from nbprec.dtypes import ITEMSIZES  # (bytes per element of each canonical dtype, without numpy)
from nbprec.formats._files import MAP_FROM, open_plain_file, taken_ahead
from nbprec.formats._pickleops import opcodes

TYPE_CHECKING = False  # (without importing typing: see the module docstring)
if TYPE_CHECKING:
    from typing import Any, Literal


class _Unsupported(Exception):
    """The archive or its pickle is not the plain one-tensor shape :mod:`nbprec.formats._pt` accepts."""


# -- the archive's directory ------------------------------------------------------------------------

_EOCD = struct.Struct("<4s4H2LH")  # end of central directory
_EOCD64_LOCATOR = struct.Struct("<4sLQL")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s4s4H3L5H2L")  # one central directory entry (46 bytes)
_LOCAL = struct.Struct("<4s5H3L2H")  # one local file header (30 bytes)
_TAIL = 8192  # bytes read from the end of the file: the directory of a one-tensor archive fits easily


_MAX_DIRECTORY = 64 << 20  # bytes of central directory read at most (a hostile size is refused)
_HEAD = 4096  # bytes read from the start: the small entries and the local headers sit there
Entries = dict[bytes, tuple[int, int]]  # name -> (where its bytes start, or -1 when compressed; its size)


def _pread(fd: int, n: int, offset: int) -> bytes:
    data = os.pread(fd, n, offset)
    if len(data) != n:
        raise _Unsupported(f"short read: {len(data)} of {n} bytes at offset {offset}")
    return data


def _zip64_fields(extra: bytes, size: int, stored: int, header: int) -> tuple[int, int, int]:
    """(size, stored size, header offset) with the ZIP64 extra field's values (tag 1) where the 32-bit fields
    say 0xFFFFFFFF; the field lists only those, in that order."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<2H", extra, pos)
        if pos + 4 + length > len(extra):
            break
        if tag == 1:
            values = list(struct.unpack_from(f"<{length // 8}Q", extra, pos + 4))
            out = []
            for value in (size, stored, header):
                out.append(values.pop(0) if value == 0xFFFFFFFF and values else value)
            return out[0], out[1], out[2]
        pos += 4 + length
    raise _Unsupported("ZIP64 sizes without a ZIP64 extra field")


def _zip_entries_py(fd: int, file_size: int, whole_below: int = 0) -> tuple[bytes, Entries]:
    """(the file's first 4 KiB, or all of it when shorter than ``whole_below`` bytes; its entries): the
    pure-Python twin of ``_zipdir.entries`` (see nbprec/formats/_zipdir.c), used when that is not built.
    Entries come from the central directory (a ZIP64 end record is followed); a stored entry's bytes start
    after its local header, whose name and extra lengths are its own."""
    tail_len = min(file_size, _TAIL)
    whole = _pread(fd, file_size, 0) if whole_below > 0 and file_size < whole_below else None
    tail = whole[file_size - tail_len :] if whole is not None else _pread(fd, tail_len, file_size - tail_len)
    end = tail.rfind(b"PK\x05\x06", 0, max(0, tail_len - _EOCD.size + 4))
    if end < 0:
        raise _Unsupported("no end-of-central-directory record in the last 8 KiB")
    _sig, _disk, _cd_disk, _n_here, n_entries, cd_size, cd_offset, _comment = _EOCD.unpack_from(tail, end)
    if 0xFFFFFFFF in (cd_size, cd_offset) or n_entries == 0xFFFF:
        loc = end - _EOCD64_LOCATOR.size
        if loc < 0 or tail[loc : loc + 4] != b"PK\x06\x07":
            raise _Unsupported("ZIP64 end record expected")
        eocd64_offset = _EOCD64_LOCATOR.unpack_from(tail, loc)[2]
        if eocd64_offset + _EOCD64.size > file_size:
            raise _Unsupported("bad ZIP64 end record")
        record = _pread(fd, _EOCD64.size, eocd64_offset)
        if record[:4] != b"PK\x06\x06":
            raise _Unsupported("bad ZIP64 end record")
        n_entries, cd_size, cd_offset = _EOCD64.unpack_from(record)[7:10]
    if cd_offset + cd_size > file_size or n_entries > 4096:
        raise _Unsupported("central directory outside the file")
    if cd_size > _MAX_DIRECTORY:
        raise _Unsupported("central directory of more than 64 MiB")
    start = file_size - tail_len
    if whole is not None:
        directory = whole[cd_offset : cd_offset + cd_size]
    else:
        directory = tail[cd_offset - start : cd_offset - start + cd_size] if cd_offset >= start else b""
        if len(directory) != cd_size:
            directory = _pread(fd, cd_size, cd_offset)
    head = whole if whole is not None else _pread(fd, min(file_size, _HEAD), 0)
    entries: Entries = {}
    pos, unpack, fixed = 0, _CENTRAL.unpack_from, _CENTRAL.size
    for _ in range(n_entries):
        if directory[pos : pos + 4] != b"PK\x01\x02" or pos + fixed > len(directory):
            raise _Unsupported("bad central directory entry")
        fields = unpack(directory, pos)
        method, stored, size, name_len, extra_len, comment_len, header = fields[3], *fields[7:12], fields[15]
        name_end = pos + fixed + name_len
        if name_end + extra_len > len(directory):
            raise _Unsupported("bad central directory entry")
        if 0xFFFFFFFF in (size, stored, header):
            size, stored, header = _zip64_fields(directory[name_end : name_end + extra_len], size, stored, header)
        offset = -1
        if method == 0 and stored == size:
            if header + _LOCAL.size > file_size:
                raise _Unsupported("short read: local header past the end of the file")
            local = head[header : header + _LOCAL.size]
            if len(local) != _LOCAL.size:
                local = _pread(fd, _LOCAL.size, header)
            local_fields = _LOCAL.unpack_from(local)
            if local_fields[0] != b"PK\x03\x04":
                raise _Unsupported("bad local file header")
            offset = header + _LOCAL.size + local_fields[9] + local_fields[10]
        entries[directory[pos + fixed : name_end]] = (offset, size)
        pos = name_end + extra_len + comment_len
    return head, entries


try:
    from nbprec.formats._zipdir import entries as _zip_entries_c
except ImportError:  # not built (no C compiler): the Python twin
    _zip_entries_c = None


def _zip_entries(fd: int, file_size: int) -> tuple[bytes, Entries]:
    """(the file's first 4 KiB, or the whole file when it is smaller than ``MAP_FROM``; its entries by
    undecoded name); raises _Unsupported for an archive this reader does not understand. A small archive is
    read in one go: one read instead of three (its end, its start, its payload, which is read, not mapped)."""
    if _zip_entries_c is None:
        return _zip_entries_py(fd, file_size, MAP_FROM)
    try:
        return _zip_entries_c(fd, file_size, MAP_FROM)
    except ValueError as exc:
        raise _Unsupported(str(exc)) from None


try:
    from nbprec.formats._zipdir import read_small as _read_small_c
except ImportError:  # not built
    _read_small_c = None


def _small_archive(path: str, wait: bool = True) -> tuple[bytes, Entries] | Literal[False] | None:
    """(the whole file, its entries) of ``path`` when it is a regular file, not a symbolic link, of 1 to
    ``MAP_FROM`` - 1 bytes; None when it is not, or cannot be opened (the caller's checked path then says why).
    One call: open, fstat, one read, close (or none: read ahead, :func:`~nbprec.formats._files.read_ahead`).
    ``wait=False``: False when part of the file is not in the page cache yet (the compiled reader has started
    reading it from the disk and did not wait). Raises _Unsupported for an archive this reader does not
    understand, OSError when reading fails."""
    small = taken_ahead(path)
    if small is not None:
        return small
    if _read_small_c is not None:
        try:
            return _read_small_c(path, MAP_FROM, wait)
        except ValueError as exc:
            raise _Unsupported(str(exc)) from None
    opened = open_plain_file(path)
    if opened is None:
        return None
    fd, file_size = opened
    try:
        return _zip_entries(fd, file_size) if 0 < file_size < MAP_FROM else None
    finally:
        os.close(fd)


def _entry_bytes(fd: int, entry: tuple[int, int], file_size: int, head: bytes) -> bytes:
    """A small stored entry's bytes (the pickle, the byte order)."""
    offset, size = entry
    if offset < 0:
        raise _Unsupported("compressed entry")
    if offset + size > file_size:
        raise _Unsupported(f"entry of {size} bytes at offset {offset} runs past the end of the file")
    data = head[offset : offset + size]
    return data if len(data) == size else _pread(fd, size, offset)


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
    for name, arg in opcodes(pickle_bytes):
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
        if dtype not in ITEMSIZES:
            raise _Unsupported(f"dtype {dtype}")
    elif storage_class[:2] == ("global", "torch") and storage_class[2] in STORAGE_DTYPES:
        dtype = STORAGE_DTYPES[storage_class[2]]
    else:
        raise _Unsupported(f"storage type {storage_class!r}")
    if not all(isinstance(v, int) for v in (offset, *size, *stride)) or len(size) != len(stride):
        raise _Unsupported("non-integer geometry")
    return str(ref[2]), dtype, offset, tuple(size), tuple(stride)


#: What reading ``data.pkl`` and finding its storage raises for an archive that is not a plain one-tensor one.
_NOT_A_TENSOR = (_Unsupported, KeyError, UnicodeError, struct.error, ValueError, IndexError, EOFError, TypeError)


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
    except _NOT_A_TENSOR:
        return None
    return description, storage


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


def small_tensor(
    path: str, dtype: str, shape: tuple[int, ...], wait: bool = True
) -> tuple[bytes, int, int] | Literal[False] | None:
    """``(the whole file, where the tensor's bytes start in it, its element count)`` of a small plain archive
    ``path`` (under :data:`MAP_FROM` bytes, a regular file, not a symbolic link) holding one C-contiguous,
    non-empty tensor of the canonical ``dtype`` and ``shape``; None for anything else (the callers then read the
    file with their checks and messages). One open and one read; numpy is not needed
    (:func:`nbprec.formats._pt.read_small_pt` makes the array, :mod:`nbprec.compare.early` reads the bytes).
    The tensor is found by ``_zipdir.tensor_start`` (C) when it is built, else by :func:`_tensor_start`: the
    same checks, the same answer (the tests hold the two to each other). ``wait=False``: False when part of the
    file is not in the page cache yet (see :func:`_small_archive`)."""
    try:
        small = _small_archive(path, wait)
    except (OSError, _Unsupported):
        return None
    if not small:
        return small
    head, entries = small
    if _tensor_start_c is not None and type(shape) is tuple:  # (a list of sizes: never the tensor's tuple)
        found = _tensor_start_c(head, entries, dtype, ITEMSIZES.get(dtype, 0), shape, _description)
    else:
        found = _tensor_start(head, entries, dtype, shape)
    return None if found is None else (head, *found)


def mapped_tensor(
    path: str, dtype: str, shape: tuple[int, ...], wait: bool = True
) -> tuple[mmap.mmap, int, int] | Literal[False] | None:
    """:func:`small_tensor` of a payload the readers map rather than read (:data:`MAP_FROM` bytes or more, see
    :func:`nbprec.formats._payload.payload_array`): ``(a read-only map of the tensor's pages, where its bytes start
    in the map, its element count)``, with :func:`small_tensor`'s checks, for the command's early worker
    (:mod:`nbprec.compare.early`). ``wait=False``: False when the first or the last page of the tensor is not in
    the page cache (its reading from the disk is then started, and the caller comes back to it later)."""
    opened = open_plain_file(path)
    if opened is None:
        return None
    fd, file_size = opened
    try:
        head, entries = _zip_entries(fd, file_size)
        found = _plain_start(_tensor_entry(fd, file_size, head, entries), dtype, shape, file_size)
        if found is None:
            return None
        start, numel = found
        nbytes = numel * ITEMSIZES[dtype]
        if not wait and not _cached(fd, start, nbytes):
            return False
        first = start - start % mmap.ALLOCATIONGRANULARITY  # only the tensor's pages: no address space for the rest
        return mmap.mmap(fd, start + nbytes - first, access=mmap.ACCESS_READ, offset=first), start - first, numel
    except (OSError, ValueError, _Unsupported):  # (ValueError: a file that shrank to nothing before its map)
        return None
    finally:
        os.close(fd)


def _cached(fd: int, start: int, nbytes: int) -> bool:
    """Whether the first and the last byte of ``nbytes`` at ``start`` of the open file are in the page cache (a
    read that does not wait, ``RWF_NOWAIT``); when not, the range is asked for from the disk. True where reads
    cannot be asked not to wait."""
    nowait = getattr(os, "RWF_NOWAIT", 0)
    if not nowait:
        return True
    try:
        for offset in (start, start + nbytes - 1):
            os.preadv(fd, [bytearray(1)], offset, nowait)
    except BlockingIOError:
        os.posix_fadvise(fd, start, nbytes, os.POSIX_FADV_WILLNEED)
        return False
    return True


def _tensor_start(head: bytes, entries: dict, dtype: str, shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(where the tensor starts in ``head``, the whole archive, its element count) when the archive whose directory
    is ``entries`` holds one C-contiguous, non-empty tensor of ``dtype`` and ``shape``; else None."""
    try:  # (the head is the whole file: nothing is read past it, and the file is closed)
        found = _tensor_entry(-1, len(head), head, entries)
    except OSError:
        return None
    return _plain_start(found, dtype, shape, len(head))


def _plain_start(found: tuple | None, dtype: str, shape: tuple[int, ...], file_size: int) -> tuple[int, int] | None:
    """(where the tensor starts in the file, its element count) of :func:`_tensor_entry`'s answer for an archive of
    ``file_size`` bytes, when it is one C-contiguous, non-empty tensor of ``dtype`` and ``shape``; else None."""
    if found is None:
        return None
    (_key, dtype_name, offset, size, stride), (start, nbytes) = found
    itemsize = ITEMSIZES.get(dtype_name)
    if itemsize is None or dtype_name != dtype or size != shape or start + nbytes > file_size:
        return None
    numel, last, contiguous = _geometry(offset, size, stride)
    if not contiguous or numel == 0 or nbytes % itemsize or not 0 <= last < nbytes // itemsize:
        return None
    return start + offset * itemsize, numel


def _description(pickle_bytes: bytes) -> tuple[str, str, int, tuple[int, ...], tuple[int, ...]] | None:
    """:func:`_describe`, or None for a pickle it does not read (as :func:`_tensor_entry` takes it)."""
    try:
        return _describe(pickle_bytes)
    except _NOT_A_TENSOR:
        return None


try:
    from nbprec.formats._zipdir import tensor_start as _tensor_start_c
except ImportError:  # not built
    _tensor_start_c = None
