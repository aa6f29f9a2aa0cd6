"""Read a tensor saved with ``torch.save`` without torch and without unpickling anything.

A ``torch.save`` file of one tensor is a zip archive: ``<name>/data.pkl`` describes the tensor (a call of
``torch._utils._rebuild_tensor_v2`` on a storage reference, an offset, a size, a stride) and
``<name>/data/<key>`` holds the storage's raw bytes. :func:`read_pt_tensor` walks the pickle's opcodes
statically (``pickletools.genops``, nothing is executed or imported), accepts only that one shape of
content, and builds the numpy array from the raw bytes. Anything else returns ``None`` so the caller can fall
back to ``torch.load(weights_only=True)``.

Examples
--------
>>> read_pt_tensor("not-a-file.pt") is None
True
"""

from __future__ import annotations

import pickletools
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from nbprec.dtypes import NUMPY_DTYPES
from nbprec.errors import DumpFormatError

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


class _Unsupported(Exception):
    """The pickle is not the plain one-tensor shape this reader accepts."""


class _Mark:
    pass


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


def read_pt_tensor(path: str | Path) -> np.ndarray | None:
    """The tensor in a ``torch.save`` file as a numpy array (original dtype), or ``None`` when the file is not
    a plain one-tensor zip archive this reader understands (the caller then uses ``torch.load``).

    Raises :class:`~nbprec.errors.DumpFormatError` when the file is a recognised archive whose tensor does not
    fit its storage (a corrupt or hostile file).
    """
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            pkl = next((n for n in names if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if pkl is None:
                return None
            prefix = pkl[: -len("data.pkl")]
            if f"{prefix}byteorder" in names and archive.read(f"{prefix}byteorder").strip() != b"little":
                return None
            key, dtype, offset, size, stride = _describe(archive.read(pkl))
            raw = archive.read(f"{prefix}data/{key}")
    except (OSError, zipfile.BadZipFile, KeyError, _Unsupported, ValueError, IndexError, EOFError):
        return None
    np_dtype = NUMPY_DTYPES[dtype]
    if len(raw) % np_dtype.itemsize:
        raise DumpFormatError(path, f"storage of {len(raw)} bytes is not a whole number of {dtype} values")
    flat = np.frombuffer(raw, dtype=np_dtype)
    numel = int(np.prod(size)) if size else 1
    if numel == 0:
        return np.zeros(size, dtype=np_dtype)
    if offset < 0 or any(s < 0 for s in stride):
        raise DumpFormatError(path, "negative offset or stride in the tensor's description")
    last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    if last >= flat.size:
        raise DumpFormatError(path, f"the tensor reaches element {last} of a storage of {flat.size}")
    view = np.lib.stride_tricks.as_strided(
        flat[offset:], shape=size, strides=[s * np_dtype.itemsize for s in stride], writeable=False
    )
    return view.copy()  # C-contiguous, owns its data (0-d stays 0-d, unlike np.ascontiguousarray)
