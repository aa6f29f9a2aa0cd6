"""An independent writer of CANN dump files for tests: raw protobuf wire bytes from FORMATS.md, no nbprec code.

It shares nothing with nbprec's schema or writer (no protobuf package, no ``nbprec.formats``), so a reader
bug cannot hide behind a writer with the same bug. Field numbers (FORMATS.md section 2): DumpData version=1,
dump_time=2, output=3, input=4, buffer=5, op_name=6; OpOutput data_type=1, format=2, shape=3, original_op=4,
data=5, size=6, original_shape=7, sub_format=8; OpInput data_type=1, format=2, shape=3, data=4, size=5,
original_shape=6, sub_format=7; OriginalOp name=1, output_index=2, data_type=3, format=4; Shape dim=1.
"""

from __future__ import annotations

import struct
from pathlib import Path


def varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def key(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def int_field(number: int, value: int) -> bytes:
    return key(number, 0) + varint(value)


def bytes_field(number: int, value: bytes) -> bytes:
    return key(number, 2) + varint(len(value)) + value


def shape(dims: list[int]) -> bytes:
    return b"".join(int_field(1, d) for d in dims)


def tensor_entry(
    *,
    role: str,
    data_type: int,
    fmt: int,
    dims: list[int],
    size: int,
    original_dims: list[int] | None = None,
    original_op: tuple[str, int, int, int] | None = None,
    unknown: bytes = b"",
) -> bytes:
    """An OpInput or OpOutput message; ``unknown`` is appended as-is (fields a newer CANN might add)."""
    size_no, orig_no = (6, 7) if role == "output" else (5, 6)
    body = int_field(1, data_type) + int_field(2, fmt) + bytes_field(3, shape(dims))
    if original_op is not None and role == "output":
        name, index, dtype, ofmt = original_op
        op = bytes_field(1, name.encode()) + int_field(2, index) + int_field(3, dtype) + int_field(4, ofmt)
        body += bytes_field(4, op)
    body += int_field(size_no, size)
    if original_dims is not None:
        body += bytes_field(orig_no, shape(original_dims))
    return body + unknown


def dump_file(
    path: Path,
    *,
    op_name: str,
    inputs: list[tuple[bytes, bytes]] = (),
    outputs: list[tuple[bytes, bytes]] = (),
    buffers: list[bytes] = (),
    dump_time: int = 1,
    extra_header: bytes = b"",
    trailing: bytes = b"",
) -> Path:
    """Write a dump file: ``inputs`` / ``outputs`` are (entry message, payload) pairs."""
    header = bytes_field(1, b"2.0") + int_field(2, dump_time)
    for entry, _ in outputs:
        header += bytes_field(3, entry)
    for entry, _ in inputs:
        header += bytes_field(4, entry)
    for data in buffers:
        header += bytes_field(5, int_field(1, 0) + int_field(3, len(data)))
    header += bytes_field(6, op_name.encode()) + extra_header
    payload = b"".join(p for _, p in inputs) + b"".join(p for _, p in outputs) + b"".join(buffers)
    path.write_bytes(struct.pack("<Q", len(header)) + header + payload + trailing)
    return path
