"""NPU overflow debug files (``Opdebug.Node_OpDebug.{task}.{stream}.{timestamp}``): decode the status record.

An overflow debug file is a CANN dump file (:mod:`nbprec.formats.cann`) whose ``output[0]`` payload is a
status record, in one of two versions (FORMATS.md section 3):

- **old**: exactly 2048 bytes of little-endian ``uint64``: sections "DHA Atomic Add" at 0, "L2 Atomic Add" at
  128 and "AI Core" at 256, each ``model_id, stream_id, task_id, task_type, pc_start, para_base``; their status
  words at 512 (DHA) and 768 (L2); at 1024 the AI Core's ``kernel_code, block_idx, status``.
- **new**: ``uint32`` magic ``0x5A5A5A5A``, ``uint32`` version, then records of ``uint32 valid, acc_type,
  rsv, data_len`` and ``data_len`` bytes of ``uint64`` fields, by accelerator: AIC/AIV ``model_id, stream_id,
  task_id, task_type, context_id, thread_id, pc_start, para_base, core_id, block_id, status`` (version 1: the
  status is four words), AICPU ``model_id, stream_id, task_id, task_type, context_id, cpu_id, thread_id,
  status``, SDMA ``model_id, stream_id, task_id, task_type, context_id, thread_id, src_addr, dst_addr,
  channel_id, status``.

A section overflowed when its status is not 0; :func:`status_conditions` names the bits.

Examples
--------
>>> status_conditions("AI Core", 0x20 | 0x100)
('floating-point overflow', 'float32/int32 to float16 conversion overflow')
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from nbprec.errors import DumpFormatError
from nbprec.formats._files import open_regular

OLD_SIZE = 2048
MAGIC = 0x5A5A5A5A
#: a context or thread id of this value means "not set"
INVALID_ID = 65535

#: AI Core (and AIC / AIV) status bits.
AI_CORE_BITS = MappingProxyType(
    {
        0x8: "signed integer negative overflow",
        0x10: "integer overflow",
        0x20: "floating-point overflow",
        0x80: "float to unsigned conversion of a negative value",
        0x100: "float32/int32 to float16 conversion overflow",
        0x400: "cube accumulation overflow",
    }
)
#: DHA atomic add: the status code in bits 8-15.
DHA_CODES = MappingProxyType(
    {0x9: "overflow", 0xA: "underflow", 0xB: "source NaN", 0xC: "destination NaN", 0xD: "both NaN"}
)
#: L2 atomic add: the status code in bits 16-18.
L2_CODES = MappingProxyType({1: "overflow", 2: "underflow", 3: "source NaN", 4: "destination NaN", 5: "both NaN"})

ACC_TYPES = MappingProxyType({0: "AIC", 1: "AIV", 2: "AICPU", 3: "SDMA"})
_ACC_FIELDS = MappingProxyType(
    {
        "AIC": (
            "model_id",
            "stream_id",
            "task_id",
            "task_type",
            "context_id",
            "thread_id",
            "pc_start",
            "para_base",
            "core_id",
            "block_id",
            "status",
        ),
        "AICPU": ("model_id", "stream_id", "task_id", "task_type", "context_id", "cpu_id", "thread_id", "status"),
        "SDMA": (
            "model_id",
            "stream_id",
            "task_id",
            "task_type",
            "context_id",
            "thread_id",
            "src_addr",
            "dst_addr",
            "channel_id",
            "status",
        ),
    }
)
_OLD_SECTIONS = (("DHA Atomic Add", 0, 512), ("L2 Atomic Add", 128, 768), ("AI Core", 256, 1024 + 16))
_OLD_FIELDS = ("model_id", "stream_id", "task_id", "task_type", "pc_start", "para_base")
_STATUS_WORDS_V1 = 4


@dataclass(frozen=True)
class OverflowRecord:
    """One accelerator's section of an overflow debug file.

    Attributes
    ----------
    unit
        ``"AI Core"``, ``"DHA Atomic Add"`` or ``"L2 Atomic Add"`` (old files), ``"AIC"``, ``"AIV"``,
        ``"AICPU"`` or ``"SDMA"`` (new files).
    task_id, stream_id, context_id, thread_id
        Which task overflowed (``-1`` where the record has none; :data:`INVALID_ID` means unset).
    status
        The status word (the first one when the record has several).
    conditions
        The named conditions the status bits say (empty when the status is 0).
    fields
        Every field of the record, as integers.
    """

    unit: str
    task_id: int
    stream_id: int
    status: int
    conditions: tuple[str, ...]
    context_id: int = -1
    thread_id: int = -1
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def overflowed(self) -> bool:
        return self.status != 0


def status_conditions(unit: str, status: int) -> tuple[str, ...]:
    """Names of the conditions a status word of ``unit`` reports (unknown bits named by their value)."""
    if status == 0:
        return ()
    if unit in ("AI Core", "AIC", "AIV"):
        named = tuple(text for bit, text in AI_CORE_BITS.items() if status & bit)
        rest = status & ~sum(AI_CORE_BITS)
        return named + ((f"unknown status bits {rest:#x}",) if rest else ())
    if unit == "DHA Atomic Add":
        code = (status >> 8) & 0xFF
        return (f"atomic add {DHA_CODES.get(code, f'status code {code:#x}')} (DHA)",)
    if unit == "L2 Atomic Add":
        code = (status >> 16) & 0x7
        return (f"atomic add {L2_CODES.get(code, f'status code {code:#x}')} (L2)",)
    return (f"{unit} overflow (status {status:#x})",)


@dataclass(frozen=True)
class OpDebugInfo:
    """A decoded overflow debug file: its version (``"old"`` or ``"new"``), records, and problems found."""

    path: str
    version: str
    records: tuple[OverflowRecord, ...]
    problems: tuple[str, ...] = ()

    def overflowed(self) -> list[OverflowRecord]:
        """The records whose status is not 0."""
        return [r for r in self.records if r.overflowed]


def _u64(data: bytes, offset: int, count: int) -> tuple[int, ...]:
    return struct.unpack_from(f"<{count}Q", data, offset)


def _decode_old(path: str, data: bytes) -> OpDebugInfo:
    records = []
    for unit, info_at, status_at in _OLD_SECTIONS:
        values = dict(zip(_OLD_FIELDS, _u64(data, info_at, len(_OLD_FIELDS)), strict=True))
        if unit == "AI Core":
            values["kernel_code"], values["block_idx"] = _u64(data, 1024, 2)
        status = _u64(data, status_at, 1)[0]
        values["status"] = status
        conditions = status_conditions(unit, status)
        records.append(OverflowRecord(unit, values["task_id"], values["stream_id"], status, conditions, fields=values))
    return OpDebugInfo(path, "old", tuple(records))


def _decode_new(path: str, data: bytes) -> OpDebugInfo:
    version = struct.unpack_from("<I", data, 4)[0]
    records, problems = [], []
    offset = 8
    while offset + 16 <= len(data):
        valid, acc, _rsv, data_len = struct.unpack_from("<4I", data, offset)
        offset += 16
        if valid == 0 and data_len == 0:
            break  # the unused rest of the record area
        unit = ACC_TYPES.get(acc)
        if unit is None:
            problems.append(f"record at byte {offset - 16}: unknown accelerator type {acc}")
            break
        if offset + data_len > len(data) or data_len % 8:
            problems.append(f"record at byte {offset - 16}: data length {data_len} does not fit the payload")
            break
        names = _ACC_FIELDS["AIC" if unit in ("AIC", "AIV") else unit]
        words = _u64(data, offset, data_len // 8)
        offset += data_len
        status_words = 1
        if unit in ("AIC", "AIV") and len(words) >= len(names) + _STATUS_WORDS_V1 - 1:
            status_words = _STATUS_WORDS_V1
        elif len(words) < len(names):
            problems.append(f"{unit} record: {len(words)} fields, expected {len(names)}")
            continue
        values: dict[str, Any] = dict(zip(names[:-1], words, strict=False))
        status_list = list(words[len(names) - 1 : len(names) - 1 + status_words])
        values["status"] = status_list if status_words > 1 else status_list[0]
        if valid != 1:
            problems.append(f"{unit} record: valid flag is {valid}, not 1")
        status = next((s for s in status_list if s), 0)
        records.append(
            OverflowRecord(
                unit,
                int(values["task_id"]),
                int(values["stream_id"]),
                status,
                status_conditions(unit, status),
                context_id=int(values.get("context_id", -1)),
                thread_id=int(values.get("thread_id", -1)),
                fields=values,
            )
        )
    if not records and not problems:
        problems.append("no accelerator record in the payload")
    return OpDebugInfo(path, f"new (version {version})", tuple(records), tuple(problems))


def decode_opdebug(payload: bytes, path: str | Path = "") -> OpDebugInfo:
    """Decode the status record ``payload`` (an overflow debug file's ``output[0]``).

    Raises :class:`~nbprec.errors.DumpFormatError` naming ``path`` when the payload is neither version: not
    2048 bytes and no ``0x5A5A5A5A`` magic.
    """
    path = str(path)
    if len(payload) >= 8 and struct.unpack_from("<I", payload, 0)[0] == MAGIC:
        return _decode_new(path, payload)
    if len(payload) == OLD_SIZE:
        return _decode_old(path, payload)
    magic = payload[:4].hex() if len(payload) >= 4 else "none"
    raise DumpFormatError(
        path,
        f"not an overflow status record: {len(payload)} bytes with magic {magic} (expected 2048 bytes, or the "
        f"magic {MAGIC:#x} of the new version)",
    )


def read_opdebug_file(path: str | Path) -> OpDebugInfo:
    """Read and decode an overflow debug file (a CANN dump file whose ``output[0]`` is the status record)."""
    from nbprec.formats.cann import read_header

    header = read_header(path)
    if not header.message.output:
        raise DumpFormatError(path, "an overflow debug file holds its status record in output 0, and it has no output")
    offset = header.payload_start + sum(int(t.size) for t in header.message.input)
    size = int(header.message.output[0].size)
    try:
        fd, _file_size = open_regular(path)
    except FileNotFoundError:
        raise DumpFormatError(path, "no such file") from None
    try:
        payload = os.pread(fd, size, offset)
    except OSError as exc:
        raise DumpFormatError(path, f"cannot read the file: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    return decode_opdebug(payload, path)


__all__ = [
    "ACC_TYPES",
    "AI_CORE_BITS",
    "DHA_CODES",
    "INVALID_ID",
    "L2_CODES",
    "MAGIC",
    "OLD_SIZE",
    "OpDebugInfo",
    "OverflowRecord",
    "decode_opdebug",
    "read_opdebug_file",
    "status_conditions",
]
