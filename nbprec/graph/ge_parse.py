"""Schema-free readers of protobuf text format and of its Ascend JSON form, for GE graph dumps.

Both give the same plain structure: a message is a ``dict`` mapping each field name to the *list* of its
values in file order (a singular field is a one-element list); a value is a nested message (``dict``), a
``str`` (string literals, decoded from their bytes as UTF-8 with ``errors="replace"``, and bare enum names),
an ``int``, a ``float`` or a ``bool``. Map fields stay lists of ``{"key": [...], "value": [...]}`` entries, as
protobuf writes them. :mod:`nbprec.graph.ge` turns this structure into GE ops.

The text reader is a regular-expression tokeniser driven by a loop over tokens with an explicit stack: no
recursion, so a hostile file cannot exhaust the Python stack, and nesting deeper than :data:`MAX_DEPTH`
is an error. Every error names the file, the line and the column. When the C extension
``nbprec.graph._textformat`` is built, it parses well-formed text first, about ten times faster, and leaves
whatever it does not read (and every error) to the tokeniser, which then parses the whole text.

Examples
--------
>>> parse_text('op { name: "a" input: "b:0" input: "c:-1" }', "x.txt")
{'op': [{'name': ['a'], 'input': ['b:0', 'c:-1']}]}
"""

from __future__ import annotations

import codecs
import json
import re
from pathlib import Path
from typing import Any

from nbprec._gc import paused_gc
from nbprec.formats._files import long_number
from nbprec.graph.model import GraphError

try:
    from nbprec.graph import _textformat as _C
except ImportError:  # built without a C compiler: the Python tokeniser alone
    _C = None

#: Deepest nesting of messages accepted (GE graphs nest a few tens of levels at most).
MAX_DEPTH = 1000


class GeGraphError(GraphError):
    """A GE graph dump (protobuf text or JSON) or a ``fusion_result.json`` cannot be read."""


# -- tokens ------------------------------------------------------------------------------------------------
_WS = r"\s*+(?:\#[^\n]*+\s*+)*+"  # whitespace and comments, possessive: never given back
_NAME = r"([A-Za-z_]\w*+|\[[\w.]+(?:/[\w.]+)*\])"  # a field, an extension or an Any type URL
_DQ = r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
_SQ = r"'[^'\\\n]*(?:\\.[^'\\\n]*)*'"
_STR = rf"(?:{_DQ}|{_SQ})(?:\s*(?:{_DQ}|{_SQ}))*"  # adjacent literals concatenate
_SCALAR = r"-?(?:[A-Za-z_]\w*|0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fF]?)(?![\w.])"
#: Groups: 1 field name, 2 colon, then its value: 3 scalar, 4 string, 5 message open, 6 list open. Alone: 7 message
#: close, 8 list close, 9 separator, 10 message open in a list, 11 string in a list, 12 scalar in a list,
#: 13 anything else. No group: end of text. ``lastindex`` tells them apart (the value group closes last).
_TOKEN = re.compile(
    rf"{_WS}(?:{_NAME}\s*+(:)?{_WS}(?:({_SCALAR})|({_STR})|([{{<])|(\[))"
    rf"|([}}>])|(\])|([,;])|([{{<])|({_STR})|({_SCALAR})|(\S)|\Z)",
    re.ASCII,
)
_LITERAL = re.compile(rf"{_DQ}|{_SQ}", re.ASCII)
_CLOSER = {"{": "}", "<": ">"}
_OCTAL = re.compile(r"-?0[0-7]+", re.ASCII)
_FLOAT_WORDS = {"inf": float("inf"), "infinity": float("inf"), "nan": float("nan")}
_BOOL_WORDS = {"true": True, "True": True, "false": False, "False": False}

# escapes of C / protobuf text format
_ESCAPE = re.compile(
    r"\\(?:([0-7]{1,3})|[xX]([0-9a-fA-F]{1,2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|([ntrabfv\\'\"?])|(.?))",
    re.ASCII | re.DOTALL,
)
_SIMPLE = {"n": b"\n", "t": b"\t", "r": b"\r", "a": b"\a", "b": b"\b", "f": b"\f", "v": b"\v"}
# escapes codecs.escape_decode treats like protobuf (anything else goes the slow, exact way)
_NOT_FAST = re.compile(r"\\(?:[^0-7xntrabfv\\'\"]|[4-7][0-7]{2}|[xX](?![0-9a-fA-F]{2}))", re.ASCII)


def unescape(body: str, *, strict: bool = True) -> bytes:
    """The bytes of a C-escaped string body (no quotes): ``\\ooo``, ``\\xHH``, ``\\n``, ``\\"``, ``\\u...``.

    Parameters
    ----------
    body
        The text between the quotes; characters that are not escapes stand for their UTF-8 bytes.
    strict
        Raise ``ValueError`` on an unknown escape (protobuf does); else keep it as written.

    Examples
    --------
    >>> unescape(r"caf\\303\\251 \\x41\\n")
    b'caf\\xc3\\xa9 A\\n'
    """
    if "\\" not in body:
        return body.encode("utf-8", "surrogatepass")
    if not _NOT_FAST.search(body):  # octal <= \\377, \\xHH, simple escapes: all in C
        return codecs.escape_decode(body.encode("utf-8", "surrogatepass"))[0]
    out = bytearray()
    pos = 0
    for m in _ESCAPE.finditer(body):
        out += body[pos : m.start()].encode("utf-8", "surrogatepass")
        octal, hexa, u4, u8, simple, _unknown = m.groups()
        if octal:
            out.append(int(octal, 8) & 0xFF)
        elif hexa:
            out.append(int(hexa, 16))
        elif u4 or u8:
            out += chr(min(int(u4 or u8, 16), 0x10FFFF)).encode("utf-8", "surrogatepass")
        elif simple:
            out += _SIMPLE.get(simple, simple.encode())
        elif strict:
            raise ValueError(f"invalid escape {m.group(0)!r}")
        else:
            out += m.group(0).encode("utf-8", "surrogatepass")
        pos = m.end()
    out += body[pos:].encode("utf-8", "surrogatepass")
    return bytes(out)


def decode_string(data: bytes) -> str:
    """Bytes as text: UTF-8, invalid sequences and lone surrogates replaced by U+FFFD."""
    return data.decode("utf-8", "replace")


def _string_value(token: str) -> str:
    quote = token[0]
    if token[-1] == quote and token.count(quote) == 2 and "\\" not in token:  # one literal, no escapes: the usual
        return token[1:-1]
    return decode_string(b"".join(unescape(lit[1:-1]) for lit in _LITERAL.findall(token)))


def _scalar_value(token: str) -> Any:
    if (token[0] == "0" and len(token) > 1) or (token[:2] == "-0" and len(token) > 2):
        if token.lstrip("-")[:2] in ("0x", "0X"):
            return int(token, 16)
        if _OCTAL.fullmatch(token):
            return int(token, 8)
    try:
        return int(token)
    except ValueError:
        pass
    word = token.lstrip("-")
    if word[:1].isalpha() or word[:1] == "_":
        low = word.lower()
        if low in _FLOAT_WORDS:
            return -_FLOAT_WORDS[low] if token[0] == "-" else _FLOAT_WORDS[low]
        if token in _BOOL_WORDS:
            return _BOOL_WORDS[token]
        return token  # an enum name
    return float(token.rstrip("fF"))


# -- errors --------------------------------------------------------------------------------------------
def line_col(text: str, pos: int) -> tuple[int, int]:
    """1-based line and column of character ``pos`` of ``text``."""
    return text.count("\n", 0, pos) + 1, pos - text.rfind("\n", 0, pos)


def _error(path: str, text: str, pos: int, problem: str, *, depth: int = 0) -> GeGraphError:
    """The error at character ``pos``, ``depth`` messages deep (too few closers after it: a truncated file)."""
    line, col = line_col(text, pos)
    end = text.find("\n", pos)
    rest = text[pos : len(text) if end < 0 else end]
    quote = re.match(rf"(?:{_NAME}\s*:?\s*)?([\"'])", rest, re.ASCII)
    if quote and not re.match(rf"(?:{_NAME}\s*:?\s*)?(?:{_DQ}|{_SQ})", rest, re.ASCII):
        col += quote.start(2)
        problem = "unterminated string (a string must close on the line it opens)"
    if depth and text.count("}", pos) + text.count(">", pos) < depth:
        problem += f" (and the file ends before closing the {depth} message(s) open there: truncated file?)"
    return GeGraphError(f"{path}: line {line}, column {col}: {problem}")


def _where(text: str, pos: int) -> str:
    line, col = line_col(text, pos)
    return f"line {line}, column {col}"


def _append(message: dict[str, list[Any]], name: str, value: Any) -> None:
    values = message.get(name)
    if values is None:
        message[name] = [value]
    else:
        values.append(value)


# -- text format -------------------------------------------------------------------------------------------
def parse_text(text: str, path: str | Path = "<text>") -> dict[str, list[Any]]:
    """Parse protobuf text format without a schema (see the module docstring for the result).

    Parameters
    ----------
    text
        The whole file as text.
    path
        Named in errors.

    Raises
    ------
    GeGraphError
        Unbalanced braces or brackets, bad tokens, unterminated strings, invalid escapes, truncated text,
        nesting deeper than :data:`MAX_DEPTH`; the message names the file, line and column.
    """
    with paused_gc():
        if _C is not None:  # the C fast path: None for anything it leaves to the tokeniser below (errors too)
            fast = _C.parse(text, _scalar_at, _string_at, MAX_DEPTH)
            if fast is not None:
                return fast
        return _parse_text(text, str(path))


_SCALAR_AT = re.compile(_SCALAR, re.ASCII)
_STR_AT = re.compile(_STR, re.ASCII)


def _scalar_at(text: str, pos: int) -> tuple[Any, int] | None:
    """The C parser's way to the scalar token at ``pos``: (value, end), or None when there is none."""
    m = _SCALAR_AT.match(text, pos)
    return None if m is None else (_scalar_value(m[0]), m.end())


def _string_at(text: str, pos: int) -> tuple[str, int] | None:
    """The C parser's way to the string token at ``pos``: (value, end), or None (none, or a bad escape)."""
    m = _STR_AT.match(text, pos)
    if m is None:
        return None
    try:
        return _string_value(m[0]), m.end()
    except ValueError:
        return None


def _parse_text(text: str, path: str) -> dict[str, list[Any]]:
    root: dict[str, list[Any]] = {}
    cur = root
    # one frame per open message: (parent message, expected closer, where it opened, list field, its values)
    stack: list[tuple[dict, str, int, str | None, list | None]] = []
    list_name: str | None = None  # inside "name: [ ... ]": the field and its values
    list_values: list[Any] | None = None
    list_start = 0
    for m in _TOKEN.finditer(text):
        kind = m.lastindex
        if kind is not None and kind <= 6 and list_name is not None:
            raise _error(
                path,
                text,
                m.start(1),
                f"expected a value in the list of field {list_name!r}, found {m[1]!r}",
                depth=len(stack),
            )
        if kind == 3:  # name: scalar (the commonest token)
            if m[2] is None:
                raise _error(
                    path,
                    text,
                    m.start(1),
                    f"expected ':' between field {m[1]!r} and its value {m[3]!r}",
                    depth=len(stack),
                )
            token = m[3]
            try:
                value = int(token)
                if (token[0] == "0" and len(token) > 1) or token[:2] == "-0":
                    value = _scalar_value(token)
            except ValueError:
                value = _scalar_value(token)
            name = m[1]
            values = cur.get(name)
            if values is None:
                cur[name] = [value]
            else:
                values.append(value)
        elif kind == 7:  # close
            if list_name is not None:
                raise _error(path, text, m.start(7), f"{m[7]!r} inside the list of field {list_name!r} (missing ']')")
            if not stack:
                raise _error(path, text, m.start(7), f"unbalanced {m[7]!r}: no message is open")
            parent, closer, _, list_name, list_values = stack.pop()
            if m[7] != closer:
                opener = "{" if closer == "}" else "<"
                raise _error(path, text, m.start(7), f"{m[7]!r} closes a message opened with {opener!r}")
            cur = parent
        elif kind == 5:  # name {
            if len(stack) >= MAX_DEPTH:
                raise _error(path, text, m.start(1), f"messages nested deeper than {MAX_DEPTH} levels")
            value = {}
            stack.append((cur, _CLOSER[m[5]], m.start(1), None, None))
            _append(cur, m[1], value)
            cur = value
        elif kind == 4:  # name: "string"
            if m[2] is None:
                raise _error(
                    path, text, m.start(1), f"expected ':' between field {m[1]!r} and its value", depth=len(stack)
                )
            try:
                value = _string_value(m[4])
            except ValueError as exc:
                raise _error(path, text, m.start(4), f"field {m[1]!r}: {exc}", depth=len(stack)) from None
            _append(cur, m[1], value)
        elif kind == 6:  # name: [
            list_name, list_start = m[1], m.start(1)
            list_values = cur.get(list_name)
            if list_values is None:
                list_values = cur[list_name] = []
        elif kind in (11, 12) and list_values is not None:
            try:
                list_values.append(_scalar_value(m[12]) if kind == 12 else _string_value(m[11]))
            except ValueError as exc:
                raise _error(path, text, m.start(kind), f"field {list_name!r}: {exc}", depth=len(stack)) from None
        elif kind == 8:
            if list_name is None:
                raise _error(path, text, m.start(8), "unbalanced ']': no list is open")
            list_name = list_values = None
        elif kind == 10 and list_values is not None:
            if len(stack) >= MAX_DEPTH:
                raise _error(path, text, m.start(10), f"messages nested deeper than {MAX_DEPTH} levels")
            value = {}
            list_values.append(value)
            stack.append((cur, _CLOSER[m[10]], m.start(10), list_name, list_values))
            cur, list_name, list_values = value, None, None
        elif kind == 9:
            continue
        elif kind is not None:  # 10, 11, 12 outside a list, 13
            what = "unexpected character" if kind == 13 else "a value without a field name"
            raise _error(path, text, m.start(kind), f"{what}: {m[kind][:40]!r}", depth=len(stack))
        else:  # end of text
            if list_name is not None:
                raise _error(
                    path,
                    text,
                    len(text),
                    f"the file ends inside the list of field {list_name!r} opened at {_where(text, list_start)} "
                    "(truncated file?)",
                )
            if stack:
                raise _error(
                    path,
                    text,
                    len(text),
                    f"the file ends inside {len(stack)} open message(s), the innermost opened at "
                    f"{_where(text, stack[-1][2])} (truncated file?)",
                )
            break
    return root


# -- JSON form -------------------------------------------------------------------------------------------
#: Singular bytes fields that Ascend's converter (Pb2Json) writes C-escaped; repeated ones are written raw.
_ESCAPED_BYTES = frozenset({"s", "bt", "data"})
#: Map fields of ge_ir.proto (``map<string, AttrDef>``).
_MAP_FIELDS = frozenset({"attr"})


def _is_entry(value: Any) -> bool:
    return isinstance(value, dict) and "key" in value and set(value) <= {"key", "value"}


def normalise_json(obj: Any, path: str | Path = "<json>") -> dict[str, list[Any]]:
    """The JSON form of a message as :func:`parse_text` would give it.

    Scalars become one-element lists; singular ``s``/``bt`` strings are C-unescaped (Ascend's converter
    escapes them); a map field may be a list of ``{"key", "value"}`` objects or a plain JSON object.
    """
    path = str(path)
    if not isinstance(obj, dict):
        raise GeGraphError(f"{path}: expected a JSON object, found {type(obj).__name__}")
    root: dict[str, list[Any]] = {}
    todo: list[tuple[dict, dict, int]] = [(obj, root, 0)]  # (JSON object, message to fill, depth)
    while todo:
        src, dst, depth = todo.pop()
        if depth > MAX_DEPTH:
            raise GeGraphError(f"{path}: JSON objects nested deeper than {MAX_DEPTH} levels")
        for key, value in src.items():
            key = str(key)
            if key in _MAP_FIELDS and isinstance(value, dict) and not _is_entry(value):
                value = [{"key": k, "value": v} for k, v in value.items()]
            items = value if isinstance(value, list) else [value]
            out: list[Any] = []
            flat: list[Any] = []
            for item in items:  # a list inside a list (not protobuf) is flattened
                (flat.extend if isinstance(item, list) else flat.append)(item)
            for item in flat:
                if isinstance(item, dict):
                    msg: dict[str, list[Any]] = {}
                    todo.append((item, msg, depth + 1))
                    out.append(msg)
                elif item is None:
                    continue
                elif isinstance(item, str) and key in _ESCAPED_BYTES and not isinstance(value, list):
                    out.append(decode_string(unescape(item, strict=False)))
                else:
                    out.append(item)
            dst[key] = out
    return root


def load_json(text: str, path: str | Path = "<json>") -> dict[str, list[Any]]:
    """Parse the JSON form of a GE graph (a ModelDef, a GraphDef, or a list of GraphDefs)."""
    path = str(path)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GeGraphError(f"{path}: line {exc.lineno}, column {exc.colno}: not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise GeGraphError(f"{path}: JSON nested too deeply to be a GE graph") from None
    except ValueError:
        raise GeGraphError(f"{path}: not read: it holds {long_number()}") from None
    if isinstance(obj, list):
        if not all(isinstance(g, dict) for g in obj):
            raise GeGraphError(f"{path}: a JSON list must hold graph objects (GraphDef), found other values")
        obj = {"graph": obj}
    return normalise_json(obj, path)


def read_message(path: str | Path) -> tuple[dict[str, list[Any]], str]:
    """Read a GE dump file, text or JSON (told apart by content, not by extension).

    Returns
    -------
    tuple
        The message as plain structure, and ``"text"`` or ``"json"``.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise GeGraphError(f"{path}: cannot read the file: {exc.strerror or exc}") from None
    text = decode_string(data.removeprefix(codecs.BOM_UTF8))
    start = re.search(r"\S", text)
    first = start.group(0) if start else ""
    if not first:
        raise GeGraphError(f"{path}: the file is empty (expected a GE graph in protobuf text or JSON form)")
    if first in "{[":
        return load_json(text, path), "json"
    return parse_text(text, path), "text"
