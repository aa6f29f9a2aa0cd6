"""Reading a large JSON object one member at a time, in bounded memory.

``json.loads`` of an msprobe ``dump.json`` of 10^6 ops holds the whole text and every parsed dict at once
(5-6 GB). :class:`JsonObjectStream` reads the file in chunks and decodes one member value at a time with
:meth:`json.JSONDecoder.raw_decode`, so memory holds a chunk of text and the value at hand; a caller descends
into a member whose value is itself a large object (``data``) and takes its members one by one too.

The reading is as lenient as msprobe's files need (bare ``NaN`` / ``Infinity``), bytes that are not UTF-8
become surrogate escapes (the first one is reported in :attr:`JsonObjectStream.bad_utf8`), and errors are
:class:`~nbprec.errors.DumpFormatError` naming the file, the line, the column and the character, with a hint
when the file ends early. Garbage after the object is an error, found from at most 1 MiB after it: a huge
(sparse) file is never read to its end.

Examples
--------
>>> with JsonObjectStream("tests/fixtures/msprobe/fp32_tensor_mix/step0/rank0/dump.json") as s:  # doctest: +SKIP
...     s.begin_object()
...     while (key := s.next_key()) is not None:
...         value = s.value()
"""

from __future__ import annotations

import codecs
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from nbprec.errors import DumpFormatError
from nbprec.formats._files import open_regular

_CHUNK = 1 << 22  # bytes read at a time (4 MiB)
_TRAILING = 1 << 20  # bytes after the object checked to be whitespace
_AHEAD = 1 << 18  # members() reads on when less text than this is left in the buffer
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_SURROGATE = re.compile("[\udc80-\udcff]")
_TYPE_OF_FIRST = {"[": "list", '"': "str", "t": "bool", "f": "bool", "n": "NoneType"}
# a member's key and colon when the key holds no escape or control character (its text is its value): the
# first member of an object, and the next ones (after a comma)
_FIRST_MEMBER = re.compile(r'[ \t\n\r]*"([^"\\\x00-\x1f]*)"[ \t\n\r]*:[ \t\n\r]*')
_NEXT_MEMBER = re.compile(r'[ \t\n\r]*,[ \t\n\r]*"([^"\\\x00-\x1f]*)"[ \t\n\r]*:[ \t\n\r]*')


def int_or_float(text: str) -> int | float:
    """A JSON integer's value: an ``int``, or when it has too many digits for ``int()``
    (:func:`~nbprec.formats._files.long_number`), its ``float`` (infinite: it is over 10**308), as the same number
    written with an exponent is read. (No limit, ``sys.set_int_max_str_digits(0)``: always an ``int``.)"""
    limit = sys.get_int_max_str_digits()
    return int(text) if not limit or len(text) <= limit else float(text)


#: Decodes what the plain decoder refuses for a too long integer (slower: a Python call per integer).
LENIENT = json.JSONDecoder(parse_int=int_or_float)


def loads(text: str) -> Any:
    """``json.loads(text)``, an integer too long for ``int()`` read as a float (:func:`int_or_float`)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:
        return LENIENT.decode(text)


class JsonObjectStream:
    """A JSON file whose top value is an object, read member by member (see the module docstring).

    ``begin_object()`` enters an object (the top one, or a member value that is an object); ``next_key()``
    gives its next member's key (``None`` after its last member, the object then closed); ``value()`` decodes
    the current member's value whole; ``end()`` checks that nothing but whitespace follows the top object.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self._fd, self.size = open_regular(self.path)
        except FileNotFoundError:
            raise DumpFormatError(self.path, "cannot read the file: no such file") from None
        self._decoder = json.JSONDecoder()
        self._text = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        self._buf = ""
        self._pos = 0
        self._eof = False
        self._offset = 0  # bytes read so far
        self._base = 0  # characters dropped before _buf[0]
        self._lines = 0  # newlines dropped
        self._line_start = 0  # character offset where the line holding _buf[0] starts
        self._first: list[bool] = []  # per open object: no member read yet
        #: byte offset of the first byte that is not UTF-8 (kept as a surrogate escape), None when all are
        self.bad_utf8: int | None = None

    # -- the file --------------------------------------------------------------------------------------
    def __enter__(self) -> JsonObjectStream:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _fill(self, want: int = _CHUNK) -> bool:
        """Read up to ``want`` more bytes into the buffer (dropping what was consumed); False at the end."""
        if self._eof:
            return False
        try:
            raw = os.pread(self._fd, want, self._offset)
        except OSError as exc:
            raise DumpFormatError(self.path, f"cannot read the file: {exc.strerror or exc}") from exc
        self._eof = not raw
        text = self._text.decode(raw, final=self._eof)
        if not text and self._eof:  # nothing more: the buffer (and positions into it) stay as they are
            return False
        # (an ASCII text, which a str knows itself to be, holds no surrogate escape: no search)
        if self.bad_utf8 is None and not text.isascii() and (bad := _SURROGATE.search(text)) is not None:
            self.bad_utf8 = self._offset + len(text[: bad.start()].encode("utf-8", "surrogateescape"))
        self._offset += len(raw)
        newlines = self._buf.count("\n", 0, self._pos)  # in the text dropped now (for the errors' line numbers)
        if newlines:
            self._lines += newlines
            self._line_start = self._base + self._buf.rindex("\n", 0, self._pos) + 1
        self._base += self._pos
        self._buf = self._buf[self._pos :] + text
        self._pos = 0
        return True

    # -- errors ----------------------------------------------------------------------------------------
    def error(self, message: str, at: int | None = None, truncated: bool = False) -> DumpFormatError:
        """A :class:`DumpFormatError` for invalid JSON at buffer position ``at`` (default: the current one)."""
        at = self._pos if at is None else at
        before = self._buf[:at]
        newlines = before.count("\n")
        line = self._lines + newlines + 1
        column = at - before.rindex("\n") if newlines else self._base + at - self._line_start + 1
        hint = "; the file ends early (truncated?)" if truncated else ""
        where = f"line {line}, column {column} (character {self._base + at})"
        return DumpFormatError(self.path, f"invalid JSON at {where}: {message}{hint}")

    def _at_end(self, at: int) -> bool:
        return self._eof and at >= len(self._buf.rstrip())

    # -- tokens ----------------------------------------------------------------------------------------
    def peek(self) -> str:
        """The next character that is not whitespace, not consumed; ``""`` at the end of the file."""
        while True:
            self._pos = _WHITESPACE.match(self._buf, self._pos).end()
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._fill():
                return ""

    def _expect(self, char: str, message: str) -> None:
        if self.peek() != char:
            raise self.error(message, truncated=self._at_end(self._pos))
        self._pos += 1

    def begin_object(self) -> None:
        """Enter the object that starts here."""
        if not self._first and self.peek() == "":
            raise DumpFormatError(self.path, "the file is empty (expected a JSON object)")
        self._expect("{", "Expecting '{'")
        self._first.append(True)

    def next_key(self) -> str | None:
        """The key of the open object's next member (its ``:`` consumed), or None when the object ends."""
        char = self.peek()
        if char == "}":
            self._pos += 1
            self._first.pop()
            return None
        if not self._first[-1]:
            self._expect(",", "Expecting ',' delimiter")
            char = self.peek()
        if char != '"':
            raise self.error("Expecting property name enclosed in double quotes", truncated=self._at_end(self._pos))
        self._first[-1] = False
        key = self.value()
        self._expect(":", "Expecting ':' delimiter")
        return key

    def value(self) -> Any:
        """Decode the value that starts here, whole."""
        self.peek()
        want = _CHUNK
        decode = self._decoder.raw_decode
        while True:
            try:
                value, end = decode(self._buf, self._pos)
            except json.JSONDecodeError as exc:
                # the value may go on past the buffer (an unterminated string or an error at its very end)
                incomplete = exc.msg.startswith("Unterminated string") or exc.pos >= len(self._buf) - 6
                if incomplete and self._fill(want):
                    want *= 2  # a long value is read in growing chunks: not parsed again once per chunk
                    continue
                truncated = incomplete and self._eof
                raise self.error(exc.msg, exc.pos, truncated=truncated or self._at_end(exc.pos)) from None
            except RecursionError:
                raise self.error("nested too deeply to parse") from None
            except ValueError as exc:  # an integer too long for int() in this value: read as a float
                if decode == LENIENT.raw_decode:  # (no other ValueError is known: never a loop)
                    raise self.error(str(exc)) from None
                decode = LENIENT.raw_decode
                continue
            if end >= len(self._buf) and self._fill(want):  # a number may go on in the next chunk
                want *= 2
                continue
            self._pos = end
            return value

    def members(self) -> Iterator[tuple[str, Any]]:
        """``(key, value)`` of each remaining member of the open object, which is closed after its last one.

        The same as ``next_key()`` then ``value()`` in a loop, faster: a member whose key is plain text and
        whose value lies whole in the buffer is read with one pattern match and one decoder call; any other
        (an escaped key, a value running past the buffer, an error) goes the general way, which reads more of
        the file and words the errors.
        """
        decode = self._decoder.raw_decode
        while True:
            if len(self._buf) - self._pos < _AHEAD:  # read on before a member may run past the buffer's end
                self._fill()
            pattern = _FIRST_MEMBER if self._first[-1] else _NEXT_MEMBER
            match = pattern.match(self._buf, self._pos)
            if match is not None and match.end() < len(self._buf):
                try:
                    value, end = decode(self._buf, match.end())
                except (ValueError, RecursionError):  # (the general way below words the error)
                    end = len(self._buf)
                if end < len(self._buf):  # whole (a number ending at the buffer's end may go on)
                    self._first[-1] = False
                    self._pos = end
                    yield match[1], value
                    continue
            key = self.next_key()
            if key is None:
                return
            yield key, self.value()

    def first_type(self) -> str:
        """The Python type name of the value that starts here (from its first character), not consumed."""
        char = self.peek()
        return "dict" if char == "{" else _TYPE_OF_FIRST.get(char, "float" if char else "nothing")

    def end(self) -> None:
        """Check that only whitespace follows the top object (at most 1 MiB of it is looked at)."""
        start = self._base + self._pos
        while True:
            self._pos = _WHITESPACE.match(self._buf, self._pos).end()
            if self._pos < len(self._buf):
                raise self.error("Extra data after the JSON object")
            if self._base + len(self._buf) - start > _TRAILING:
                raise self.error(f"more than {_TRAILING} bytes of whitespace after the JSON object")
            if not self._fill(_TRAILING):
                return
