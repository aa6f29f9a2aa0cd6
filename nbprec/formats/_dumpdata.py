"""The protobuf schema of a CANN dump file's header (``toolkit.dumpdata.DumpData``), and CANN's dtype enum.

The schema lives in ``dumpdata.proto`` beside this module, written from the field numbers CANN documents.
It is compiled here at first use, without protoc: the few ``message { [repeated] type name = number; }``
lines are written as a serialized ``FileDescriptorProto`` and added to a private descriptor pool (so another
package that registers ``toolkit.dumpdata`` in protobuf's default pool, as msprobe does, cannot clash with it). On
protobuf's default implementation, upb, the class is made by upb's own module (``_upb_class``), as protobuf's
``message_factory`` makes it there, without the pure-Python implementation that module imports.

Examples
--------
>>> header = dump_data_class()()
>>> header.op_name = "conv1/Conv2D"
>>> parse_header(header.SerializeToString(), "x").op_name
'conv1/Conv2D'
"""

from __future__ import annotations

import functools
import importlib
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any

from nbprec.errors import DumpFormatError, MissingDependencyError

PROTO_FILE = Path(__file__).with_name("dumpdata.proto")

#: CANN ``OutputDataType`` enum -> nbprec's canonical dtype name (FORMATS.md section 2).
CANN_DTYPES = MappingProxyType(
    {
        0: "undefined",
        1: "float32",
        2: "float16",
        3: "int8",
        4: "uint8",
        5: "int16",
        6: "uint16",
        7: "int32",
        8: "int64",
        9: "uint32",
        10: "uint64",
        11: "bool",
        12: "float64",
        13: "string",
        16: "complex64",
        17: "complex128",
        27: "bfloat16",
        28: "int4",
        29: "uint1",
        33: "hifloat8",
        34: "float8_e5m2",
        35: "float8_e4m3fn",
    }
)
#: canonical dtype name -> CANN enum (for the writer).
CANN_DTYPE_IDS = MappingProxyType({name: number for number, name in CANN_DTYPES.items()})

_MESSAGE = re.compile(r"message\s+(\w+)\s*\{([^}]*)\}")
_FIELD = re.compile(r"^\s*(repeated\s+)?(\w+)\s+(\w+)\s*=\s*(\d+)\s*;", re.MULTILINE)
_COMMENT = re.compile(r"//[^\n]*")
#: proto scalar type -> ``FieldDescriptorProto.Type`` number
_SCALARS = MappingProxyType(
    {"double": 1, "float": 2, "int64": 3, "uint64": 4, "int32": 5, "bool": 8, "string": 9, "bytes": 12, "uint32": 13}
)
_TYPE_MESSAGE, _OPTIONAL, _REPEATED = 11, 1, 3  # FieldDescriptorProto's TYPE_MESSAGE, LABEL_OPTIONAL, LABEL_REPEATED


def _protobuf(module: str) -> Any:
    """``google.protobuf.<module>``, or an error saying how to install protobuf."""
    try:
        return importlib.import_module(f"google.protobuf.{module}")
    except ImportError as exc:
        raise MissingDependencyError(
            "reading CANN NPU dumps needs the package 'protobuf', which is not installed. "
            "Install it with: pip install protobuf"
        ) from exc


def _file_descriptor(text: str) -> bytes:
    """The serialized ``FileDescriptorProto`` of the messages of ``text`` (a proto3 file of plain messages and
    fields), written here field by field: protobuf's ``descriptor_pb2``, which could build it, costs a command
    reading a CANN dump about 10 ms to import."""
    package_match = re.search(r"^package\s+([\w.]+)\s*;", text, re.MULTILINE)
    package = package_match[1] if package_match else ""
    messages = []
    for name, fields in _MESSAGE.findall(_COMMENT.sub("", text)):
        parts = [_wire(1, name)]  # DescriptorProto: name = 1, field = 2
        for repeated, kind, field_name, number in _FIELD.findall(fields):
            # FieldDescriptorProto: name = 1, number = 3, label = 4, type = 5, type_name = 6, json_name = 10
            field = [_wire(1, field_name), _wire(3, int(number)), _wire(4, _REPEATED if repeated else _OPTIONAL)]
            if kind in _SCALARS:
                field.append(_wire(5, _SCALARS[kind]))
            else:
                field += [_wire(5, _TYPE_MESSAGE), _wire(6, f".{package}.{kind}")]
            field.append(_wire(10, field_name))
            parts.append(_wire(2, b"".join(field)))
        messages.append(_wire(4, b"".join(parts)))
    # FileDescriptorProto: name = 1, package = 2, message_type = 4, syntax = 12
    return b"".join([_wire(1, "nbprec/" + PROTO_FILE.name), _wire(2, package), *messages, _wire(12, "proto3")])


def _wire(number: int, value: int | str | bytes) -> bytes:
    """Field ``number`` of a protobuf message in its wire encoding: an integer as a varint, text and bytes
    length-delimited."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode("utf-8") if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@functools.lru_cache(maxsize=1)
def dump_data_class() -> type:
    """The generated message class of ``toolkit.dumpdata.DumpData`` (built once per process)."""
    serialized = _file_descriptor(PROTO_FILE.read_text(encoding="utf-8"))
    made = _upb_class(serialized)
    if made is not None:
        return made
    descriptor_pool, message_factory = _protobuf("descriptor_pool"), _protobuf("message_factory")
    pool = descriptor_pool.DescriptorPool()
    file = pool.AddSerializedFile(serialized)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{file.package}.DumpData"))


def _upb_class(serialized: bytes) -> type | None:
    """The class made directly by protobuf's default implementation, upb, as ``message_factory`` makes it there
    (the descriptor's class, of upb's metaclass): ``descriptor_pool`` and ``message_factory`` also import protobuf's
    pure-Python implementation, unused with upb (12 of the 22 ms a process without numpy took to make the class,
    2026-12-07). None with another implementation, or a protobuf whose upb module differs: the public way then."""
    try:
        from google.protobuf.internal import api_implementation

        if api_implementation.Type() != "upb":
            return None
        from google._upb import _message  # type: ignore[import-not-found]
        from google.protobuf import message

        pool = _message.DescriptorPool()
        file = pool.AddSerializedFile(serialized)
        descriptor = pool.FindMessageTypeByName(f"{file.package}.DumpData")
        return _message.MessageMeta("DumpData", (message.Message,), {"DESCRIPTOR": descriptor, "__module__": __name__})
    except Exception:  # (an ImportError or AttributeError of another protobuf: the public way works there)
        return None


def parse_header(raw: bytes, path: str) -> Any:
    """Parse the protobuf header ``raw`` of the dump file ``path``; :class:`DumpFormatError` when it is not one."""
    message = dump_data_class()()
    try:
        message.ParseFromString(raw)
    except Exception as exc:  # protobuf's DecodeError, and RuntimeError from upb on deep nesting
        raise DumpFormatError(path, f"the header is not a valid DumpData protobuf message ({exc})") from None
    return message


__all__ = ["CANN_DTYPES", "CANN_DTYPE_IDS", "PROTO_FILE", "dump_data_class", "parse_header"]
