"""The opcodes of a pickle, read without executing it and without importing :mod:`pickle` or :mod:`pickletools`.

:func:`opcodes` walks a pickle's bytes and yields each opcode's name (the names :mod:`pickletools` gives them)
with its argument. It decodes the arguments of the opcodes a ``torch.save`` archive's ``data.pkl`` holds
(protocol 2, and the protocol-0 forms of the same operations); any other opcode is yielded with ``None`` as its
argument and the walk ends there, since a reader that meets one refuses the pickle
(:func:`nbprec.formats._ptzip._describe`). Importing :mod:`pickletools` costs a process about 8 ms (it imports
:mod:`pickle`, :mod:`re` and :mod:`enum`): too much for the ``nbprec compare`` command's early worker, which
reads these archives before anything else is imported (:mod:`nbprec.compare.early`).

Every length read from the bytes is checked against what is left of them. Truncated or malformed bytes raise
:class:`ValueError` (as :func:`pickletools.genops` does); an argument that does not decode raises
:class:`UnicodeError`, a subclass of it.
"""

from __future__ import annotations

from collections.abc import Iterator

#: Every opcode of pickle protocols 0-5: its byte and its name as :mod:`pickletools` spells it.
OPCODE_NAMES = {
    b"("[0]: "MARK", b"."[0]: "STOP", b"0"[0]: "POP", b"1"[0]: "POP_MARK", b"2"[0]: "DUP",
    b"F"[0]: "FLOAT", b"I"[0]: "INT", b"J"[0]: "BININT", b"K"[0]: "BININT1", b"L"[0]: "LONG",
    b"M"[0]: "BININT2", b"N"[0]: "NONE", b"P"[0]: "PERSID", b"Q"[0]: "BINPERSID", b"R"[0]: "REDUCE",
    b"S"[0]: "STRING", b"T"[0]: "BINSTRING", b"U"[0]: "SHORT_BINSTRING", b"V"[0]: "UNICODE",
    b"X"[0]: "BINUNICODE", b"a"[0]: "APPEND", b"b"[0]: "BUILD", b"c"[0]: "GLOBAL", b"d"[0]: "DICT",
    b"}"[0]: "EMPTY_DICT", b"e"[0]: "APPENDS", b"g"[0]: "GET", b"h"[0]: "BINGET", b"i"[0]: "INST",
    b"j"[0]: "LONG_BINGET", b"l"[0]: "LIST", b"]"[0]: "EMPTY_LIST", b"o"[0]: "OBJ", b"p"[0]: "PUT",
    b"q"[0]: "BINPUT", b"r"[0]: "LONG_BINPUT", b"s"[0]: "SETITEM", b"t"[0]: "TUPLE", b")"[0]: "EMPTY_TUPLE",
    b"u"[0]: "SETITEMS", b"G"[0]: "BINFLOAT",
    0x80: "PROTO", 0x81: "NEWOBJ", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4", 0x85: "TUPLE1",
    0x86: "TUPLE2", 0x87: "TUPLE3", 0x88: "NEWTRUE", 0x89: "NEWFALSE", 0x8A: "LONG1", 0x8B: "LONG4",
    0x42: "BINBYTES", 0x43: "SHORT_BINBYTES", 0x8C: "SHORT_BINUNICODE", 0x8D: "BINUNICODE8",
    0x8E: "BINBYTES8", 0x8F: "EMPTY_SET", 0x90: "ADDITEMS", 0x91: "FROZENSET", 0x92: "NEWOBJ_EX",
    0x93: "STACK_GLOBAL", 0x94: "MEMOIZE", 0x95: "FRAME", 0x96: "BYTEARRAY8", 0x97: "NEXT_BUFFER",
    0x98: "READONLY_BUFFER",
}  # fmt: skip

#: Opcodes whose argument is an unsigned little-endian integer of this many bytes.
_UNSIGNED = {"PROTO": 1, "FRAME": 8, "BINPUT": 1, "LONG_BINPUT": 4, "BINGET": 1, "LONG_BINGET": 4,
             "BININT1": 1, "BININT2": 2}  # fmt: skip
#: Opcodes without an argument that a one-tensor ``data.pkl`` may hold.
_BARE = frozenset({"MARK", "STOP", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_TUPLE", "NEWTRUE", "NEWFALSE",
                   "NONE", "BINPERSID", "REDUCE", "MEMOIZE"})  # fmt: skip


def opcodes(data: bytes) -> Iterator[tuple[str, object]]:
    """Each opcode of the pickle ``data`` as ``(name, argument)``, up to and including ``STOP``; an opcode whose
    argument this walk does not decode comes with ``None`` and ends it. Raises ValueError when the bytes end
    before ``STOP`` or an argument runs past them, or at a byte that is no opcode."""
    view = memoryview(data)
    end = len(view)
    pos = 0

    def take(n: int) -> memoryview:
        nonlocal pos
        if n > end - pos:
            raise ValueError(f"pickle truncated: an argument of {n} bytes at offset {pos} runs past its end")
        part = view[pos : pos + n]
        pos += n
        return part

    def line() -> bytes:
        nonlocal pos
        stop = data.find(b"\n", pos)
        if stop < 0:
            raise ValueError(f"pickle truncated: no end of line after offset {pos}")
        part = bytes(view[pos:stop])
        pos = stop + 1
        return part

    while pos < end:
        code = view[pos]
        name = OPCODE_NAMES.get(code)
        if name is None:
            raise ValueError(f"not a pickle opcode: byte {code:#04x} at offset {pos}")
        pos += 1
        if name in _BARE:
            yield name, None
            if name == "STOP":
                return
        elif name in _UNSIGNED:
            yield name, int.from_bytes(take(_UNSIGNED[name]), "little")
        elif name == "BININT":
            yield name, int.from_bytes(take(4), "little", signed=True)
        elif name == "LONG1":
            yield name, int.from_bytes(take(take(1)[0]), "little", signed=True)
        elif name == "BINUNICODE":
            yield name, str(take(int.from_bytes(take(4), "little")), "utf-8", "surrogatepass")
        elif name == "SHORT_BINUNICODE":
            yield name, str(take(take(1)[0]), "utf-8", "surrogatepass")
        elif name == "UNICODE":
            yield name, str(line(), "raw-unicode-escape")
        elif name == "GLOBAL":
            module, attribute = _global_part(line()), _global_part(line())
            yield name, f"{module} {attribute}"
        elif name in ("PUT", "GET"):
            yield name, _decimal(line())
        else:
            yield name, None
            return
    raise ValueError("pickle truncated: its bytes end before STOP")


def _global_part(raw: bytes) -> str:
    """A module or attribute name of GLOBAL: printable ASCII. (pickletools would first undo backslash escapes,
    which the unpickler itself does not: a name holding one is refused.)"""
    if not raw.isascii() or b"\\" in raw or not all(32 < c < 127 for c in raw):
        raise ValueError(f"not a plain name in a GLOBAL opcode: {raw[:40]!r}")
    return raw.decode("ascii")


def _decimal(raw: bytes) -> int:
    """The decimal integer of PUT and GET (ASCII digits only)."""
    if not raw.isdigit() or len(raw) > 18:
        raise ValueError(f"not a memo index: {raw[:40]!r}")
    return int(raw)
