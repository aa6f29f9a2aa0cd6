"""The protobuf schema of a CANN dump file's header (``toolkit.dumpdata.DumpData``), and CANN's dtype enum.

The schema lives in ``dumpdata.proto`` beside this module, written from the field numbers CANN documents.
It is compiled here at first use, without protoc: the few ``message { [repeated] type name = number; }``
lines are read into a ``FileDescriptorProto`` and added to a private descriptor pool (so another package that
registers ``toolkit.dumpdata`` in protobuf's default pool, as msprobe does, cannot clash with it).

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


def _protobuf(module: str) -> Any:
    """``google.protobuf.<module>``, or an error saying how to install protobuf."""
    try:
        return importlib.import_module(f"google.protobuf.{module}")
    except ImportError as exc:
        raise MissingDependencyError(
            "reading CANN NPU dumps needs the package 'protobuf', which is not installed. "
            "Install it with: pip install protobuf"
        ) from exc


def _file_descriptor(text: str) -> Any:
    """A ``FileDescriptorProto`` for the messages of ``text`` (a proto3 file of plain messages and fields)."""
    descriptor_pb2 = _protobuf("descriptor_pb2")
    field_types = descriptor_pb2.FieldDescriptorProto
    package = re.search(r"^package\s+([\w.]+)\s*;", text, re.MULTILINE)
    proto = descriptor_pb2.FileDescriptorProto(
        name="nbprec/" + PROTO_FILE.name, package=package[1] if package else "", syntax="proto3"
    )
    body = _COMMENT.sub("", text)
    for name, fields in _MESSAGE.findall(body):
        message = proto.message_type.add(name=name)
        for repeated, kind, field_name, number in _FIELD.findall(fields):
            field = message.field.add(name=field_name, number=int(number), json_name=field_name)
            field.label = field_types.LABEL_REPEATED if repeated else field_types.LABEL_OPTIONAL
            if kind in _SCALARS:
                field.type = _SCALARS[kind]
            else:
                field.type = field_types.TYPE_MESSAGE
                field.type_name = f".{proto.package}.{kind}"
    return proto


@functools.lru_cache(maxsize=1)
def dump_data_class() -> type:
    """The generated message class of ``toolkit.dumpdata.DumpData`` (built once per process)."""
    descriptor_pool, message_factory = _protobuf("descriptor_pool"), _protobuf("message_factory")
    pool = descriptor_pool.DescriptorPool()
    file_proto = _file_descriptor(PROTO_FILE.read_text(encoding="utf-8"))
    pool.Add(file_proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{file_proto.package}.DumpData"))


def parse_header(raw: bytes, path: str) -> Any:
    """Parse the protobuf header ``raw`` of the dump file ``path``; :class:`DumpFormatError` when it is not one."""
    message = dump_data_class()()
    try:
        message.ParseFromString(raw)
    except Exception as exc:  # protobuf's DecodeError, and RuntimeError from upb on deep nesting
        raise DumpFormatError(path, f"the header is not a valid DumpData protobuf message ({exc})") from None
    return message


__all__ = ["CANN_DTYPES", "CANN_DTYPE_IDS", "PROTO_FILE", "dump_data_class", "parse_header"]
