"""Where the entries of a stored (uncompressed) zip archive start: the directory of a ``torch.save`` file.

Reading one tensor of a ``torch.save`` archive needs the archive's directory and the local headers of the entries
used: the end-of-central-directory record (ZIP64 included), then the central directory, then each local header.
:func:`_zip_entries` does it with :mod:`nbprec.formats._zipdir` (C) when that is built and with its pure-Python
twin :func:`_zip_entries_py` otherwise; the two give the same result for every input (tests hold them to it).
Every offset and length read from the file is checked before it is used: the file may be truncated or hostile.
"""

from __future__ import annotations

import os
import struct

from nbprec.formats._files import open_plain_file
from nbprec.formats._payload import MAP_FROM


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


def _small_archive(path: str) -> tuple[bytes, Entries] | None:
    """(the whole file, its entries) of ``path`` when it is a regular file, not a symbolic link, of 1 to
    ``MAP_FROM`` - 1 bytes; None when it is not, or cannot be opened (the caller's checked path then says why).
    One call: open, fstat, one read, close. Raises _Unsupported for an archive this reader does not understand,
    OSError when reading fails."""
    if _read_small_c is not None:
        try:
            return _read_small_c(path, MAP_FROM)
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
