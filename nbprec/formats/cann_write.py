"""Write CANN NPU dump files and overflow debug files from numpy arrays (for tests, tutorials and examples).

The files follow FORMATS.md sections 2-3 byte for byte: a ``uint64`` header length, the ``DumpData``
protobuf header (payload ``data`` fields empty), then the payloads. Tensors are given in their original
layout and stored in the storage format asked for (:func:`nbprec.formats.storage.from_origin`), with the
original shape, the original format and (for outputs) the framework op they stand for recorded in the header,
as an NPU run records them.

Examples
--------
>>> import numpy as np
>>> folder = dump_folder("/tmp/npu", time="20240101120000", device=0, model="ge_default", model_id=1, step=0)
>>> x = np.ones((1, 8, 4, 4), np.float16)
>>> out = CannTensor(x, format="NC1HWC0", origin_format="NCHW", original_op=("conv1/Relu", 0))
>>> write_dump_file(folder, "conv1/Relu", "Relu", inputs=[x], outputs=[out], task_id=3, timestamp=1)  # doctest: +SKIP
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nbprec.dtypes import canonical_dtype
from nbprec.errors import NbprecError
from nbprec.formats._dumpdata import CANN_DTYPE_IDS, dump_data_class
from nbprec.formats.cann_opdebug import ACC_TYPES, MAGIC, OLD_SIZE
from nbprec.formats.cann_tree import safe_name
from nbprec.formats.storage import format_id, from_origin


@dataclass(frozen=True)
class CannTensor:
    """A tensor to write: ``array`` in its original layout, stored in ``format``.

    Parameters
    ----------
    array
        The tensor's values, in the original (framework) layout; its dtype is the dumped dtype.
    format
        The storage format in the file (``"ND"``, ``"NCHW"``, ``"NC1HWC0"``, ``"FRACTAL_NZ"``,
        ``"FRACTAL_Z"``, ``"NDC1HWC0"``, ...).
    origin_format
        The original layout's name (default ``"ND"``, or ``"NCHW"`` / ``"NCDHW"`` for 4-D / 5-D arrays).
    original_op
        ``(framework op name, output index)`` this output equals (outputs only; recorded as ``original_op``).
    record_original_shape
        Whether the header records ``original_shape`` (old dumps did not).
    """

    array: np.ndarray
    format: str = "ND"
    origin_format: str | None = None
    original_op: tuple[str, int] | None = None
    record_original_shape: bool = True


def dump_folder(
    root: str | Path,
    *,
    time: str = "20240101000000",
    device: int = 0,
    model: str = "ge_default",
    model_id: int = 1,
    step: int = 0,
) -> Path:
    """Create and return ``root/{time}/{device}/{model}/{model_id}/{step}``, the folder CANN dumps one step into."""
    folder = Path(root) / str(time) / str(device) / model / str(model_id) / str(step)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _default_origin(array: np.ndarray) -> str:
    return {4: "NCHW", 5: "NCDHW"}.get(array.ndim, "ND")


def _fill(entry: Any, spec: CannTensor | np.ndarray, role: str) -> bytes:
    """Fill a header entry (OpInput / OpOutput) for one tensor; return its payload bytes."""
    if not isinstance(spec, CannTensor):
        spec = CannTensor(np.asarray(spec))
    array = np.asarray(spec.array)
    dtype = canonical_dtype(array.dtype)
    if dtype not in CANN_DTYPE_IDS:
        raise NbprecError(f"dtype {dtype} has no CANN data type number; cannot write it")
    origin_format = spec.origin_format or _default_origin(array)
    stored = from_origin(array, spec.format, origin_format) if spec.format != origin_format else array
    payload = np.ascontiguousarray(stored).tobytes()
    entry.data_type = CANN_DTYPE_IDS[dtype]
    entry.format = format_id(spec.format)
    entry.shape.dim.extend(int(d) for d in stored.shape)
    entry.size = len(payload)
    if spec.record_original_shape:
        entry.original_shape.dim.extend(int(d) for d in array.shape)
        if not array.shape:
            entry.original_shape.SetInParent()
    if role == "output" and spec.original_op is not None:
        entry.original_op.name = spec.original_op[0]
        entry.original_op.output_index = int(spec.original_op[1])
        entry.original_op.data_type = CANN_DTYPE_IDS[dtype]
        entry.original_op.format = format_id(origin_format)
    return payload


def write_dump_file(
    folder: str | Path,
    op_name: str,
    op_type: str,
    *,
    inputs: Sequence[CannTensor | np.ndarray] = (),
    outputs: Sequence[CannTensor | np.ndarray] = (),
    buffers: Sequence[bytes] = (),
    task_id: int = 0,
    stream_id: int | None = 0,
    timestamp: int = 1,
    extra_numbers: Sequence[int] = (),
    file_name: str | None = None,
    dump_time: int | None = None,
    version: str = "2.0",
    record_op_name: bool = True,
) -> Path:
    """Write one op's dump file into ``folder`` and return its path.

    The name is ``{op_type}.{safe op_name}.{task_id}.{stream_id}.{timestamp}`` (no ``stream_id`` field when it
    is None, as old versions wrote; ``extra_numbers`` appended as newer versions do) unless ``file_name`` is
    given. ``record_op_name=False`` leaves the header's ``op_name`` empty.
    """
    message = dump_data_class()()
    message.version = version
    message.dump_time = int(timestamp if dump_time is None else dump_time)
    if record_op_name:
        message.op_name = op_name
    payloads = [_fill(message.input.add(), t, "input") for t in inputs]
    payloads += [_fill(message.output.add(), t, "output") for t in outputs]
    for data in buffers:
        buffer = message.buffer.add()
        buffer.buffer_type = 0
        buffer.size = len(data)
        payloads.append(bytes(data))
    header = message.SerializeToString()
    if file_name is None:
        numbers = [task_id] + ([] if stream_id is None else [stream_id]) + [timestamp, *extra_numbers]
        file_name = ".".join([op_type, safe_name(op_name), *(str(int(n)) for n in numbers)])
    path = Path(folder) / file_name
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(header)))
        fh.write(header)
        for data in payloads:
            fh.write(data)
    return path


@dataclass(frozen=True)
class OverflowStatus:
    """One accelerator record of an overflow debug file to write (see :mod:`nbprec.formats.cann_opdebug`)."""

    task_id: int
    stream_id: int
    status: int
    unit: str = "AIC"
    model_id: int = 1
    context_id: int = 65535
    thread_id: int = 65535


def opdebug_payload(records: Sequence[OverflowStatus], *, version: str = "new", record_version: int = 0) -> bytes:
    """The status record of an overflow debug file: ``"new"`` (magic, version, records) or ``"old"`` (2048 bytes)."""
    if version == "old":
        data = bytearray(OLD_SIZE)
        sections = {"DHA Atomic Add": (0, 512), "L2 Atomic Add": (128, 768), "AI Core": (256, 1024 + 16)}
        for r in records:
            if r.unit not in sections:
                raise NbprecError(f"old overflow files have the units {', '.join(sections)}, not {r.unit!r}")
            info_at, status_at = sections[r.unit]
            struct.pack_into("<6Q", data, info_at, r.model_id, r.stream_id, r.task_id, 0, 0x1000, 0x2000)
            struct.pack_into("<Q", data, status_at, r.status)
        return bytes(data)
    units = {name: number for number, name in ACC_TYPES.items()}
    out = bytearray(struct.pack("<2I", MAGIC, record_version))
    for r in records:
        if r.unit in ("AIC", "AIV"):
            status = [r.status, 0, 0, 0] if record_version == 1 else [r.status]
            words = [r.model_id, r.stream_id, r.task_id, 0, r.context_id, r.thread_id, 0x1000, 0x2000, 0, 0, *status]
        elif r.unit == "AICPU":
            words = [r.model_id, r.stream_id, r.task_id, 0, r.context_id, 0, r.thread_id, r.status]
        elif r.unit == "SDMA":
            words = [r.model_id, r.stream_id, r.task_id, 0, r.context_id, r.thread_id, 0x1000, 0x2000, 0, r.status]
        else:
            raise NbprecError(f"unknown accelerator {r.unit!r}; use one of {', '.join(units)}")
        out += struct.pack("<4I", 1, units[r.unit], 0, 8 * len(words)) + struct.pack(f"<{len(words)}Q", *words)
    return bytes(out)


def write_opdebug_file(
    folder: str | Path,
    records: Sequence[OverflowStatus],
    *,
    task_id: int = 0,
    stream_id: int = 0,
    timestamp: int = 1,
    version: str = "new",
    record_version: int = 0,
) -> Path:
    """Write an overflow debug file ``Opdebug.Node_OpDebug.{task_id}.{stream_id}.{timestamp}`` into ``folder``."""
    payload = np.frombuffer(opdebug_payload(records, version=version, record_version=record_version), np.uint8)
    return write_dump_file(
        folder,
        "Node_OpDebug",
        "Opdebug",
        outputs=[CannTensor(payload, format="ND")],
        task_id=task_id,
        stream_id=stream_id,
        timestamp=timestamp,
    )


__all__ = [
    "CannTensor",
    "OverflowStatus",
    "dump_folder",
    "opdebug_payload",
    "safe_name",
    "write_dump_file",
    "write_opdebug_file",
]
