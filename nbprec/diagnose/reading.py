"""Sources of a diagnosis (files, folders, standard input, text) read as a stream of bounded line windows.

A log of many gigabytes is never loaded whole: it is read one line at a time, and a line longer than
:data:`LINE_CAP` bytes (a megabyte of garbage, a gigabyte without a newline) is read in windows of that size
that overlap by :data:`OVERLAP` bytes, so that a message cut by a window boundary is still found once.
Bytes that are not UTF-8 are decoded as U+FFFD; CRLF endings are dropped, and a bare CR (progress bars)
splits a line into the pieces a terminal would show.
"""

from __future__ import annotations

import gzip
import io
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple

from nbprec.diagnose.findings import DiagnoseError

#: bytes of one line scanned at once (longer lines are read in windows of this size)
LINE_CAP = 256 * 1024
#: bytes two consecutive windows of a long line share (longer than any message a rule reads)
OVERLAP = 4096
#: the longest text argument checked as a possible path
_MAX_PATH = 4096


class Window(NamedTuple):
    """A line, or one window of a long line.

    Attributes
    ----------
    line
        1-based line number in the source.
    text
        The decoded text, without its line ending.
    first
        Whether this is the line itself or its first window (the summary and the command finder read only those).
    skip
        Characters at the start already seen at the end of the previous window: a match ending there was found.
    """

    line: int
    text: str
    first: bool = True
    skip: int = 0


@dataclass(frozen=True)
class Source:
    """One thing to read: a label for ``file:line`` and a way to open it as a binary stream."""

    label: str
    open: Callable[[], IO[bytes]]
    kind: str = "file"  # "file", "stdin", "text", "stream"

    def windows(self, counter: Counter | None = None) -> Iterator[Window]:
        """The windows of this source (see :func:`windows`); ``counter`` counts what was read."""
        stream = self.open()
        try:
            yield from windows(stream, counter)
        finally:
            if self.kind in ("file", "text"):
                stream.close()


class Counter:
    """Bytes and lines read, and lines longer than the cap (filled in while :func:`windows` runs)."""

    def __init__(self) -> None:
        self.lines = 0
        self.bytes = 0
        self.long_lines = 0


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def windows(stream: IO[bytes], counter: Counter | None = None, cap: int = LINE_CAP) -> Iterator[Window]:
    """The lines of a binary stream as :class:`Window` objects, holding at most ``cap + OVERLAP`` bytes of it.

    Examples
    --------
    >>> [w.text for w in windows(io.BytesIO(b"a\\r\\nb\\rc\\n"))]
    ['a', 'b', 'c']
    """
    counter = counter if counter is not None else Counter()
    overlap = min(OVERLAP, cap // 2)
    make = tuple.__new__  # Window(...) without the keyword handling: this loop runs once per line
    number = counter.lines
    try:
        for chunk in iter(lambda: stream.readline(cap), b""):
            number += 1
            counter.bytes += len(chunk)
            if chunk[-1:] == b"\n" or len(chunk) < cap:
                text = chunk.decode("utf-8", "replace").rstrip("\r\n")
                if "\r" in text:
                    for piece in text.split("\r"):
                        if piece:
                            yield make(Window, (number, piece, True, 0))
                else:
                    yield make(Window, (number, text, True, 0))
                continue
            counter.long_lines += 1  # a long line: windows of `cap` bytes sharing `overlap` bytes
            tail = b""
            first = True
            while chunk:
                ended = chunk.endswith(b"\n")
                text = _decode(tail + chunk).rstrip("\r\n")
                yield Window(number, text, first=first, skip=len(_decode(tail)))
                if ended:
                    break
                first = False
                tail = chunk[-overlap:]
                chunk = stream.readline(cap)
                counter.bytes += len(chunk)
    finally:
        counter.lines = number


def _open_file(path: Path) -> IO[bytes]:
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise DiagnoseError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    if handle.peek(2)[:2] == b"\x1f\x8b":  # a gzip-compressed log (*.log.gz): streamed through gzip
        handle.close()
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return handle


def _file_sources(path: Path) -> list[Source]:
    if path.is_dir():
        try:
            files = sorted(p for p in path.rglob("*") if p.is_file())
        except OSError as exc:
            raise DiagnoseError(f"{path}: the folder cannot be listed ({exc.strerror or exc})") from exc
        return [Source(str(p), lambda p=p: _open_file(p)) for p in files]
    return [Source(str(path), lambda: _open_file(path))]


def _is_path(text: str) -> Path | None:
    if not text or len(text) > _MAX_PATH or "\n" in text or "\x00" in text:
        return None
    path = Path(text).expanduser()
    try:
        return path if path.exists() else None
    except OSError:  # a name too long for the file system, or not readable: text
        return None


def resolve_sources(items: tuple[Any, ...]) -> list[Source]:
    """What :func:`nbprec.diagnose.diagnose` reads for each argument.

    A :class:`~pathlib.Path` or an existing path is a file (a folder: every file under it, sorted); ``"-"`` is
    standard input; ``bytes`` and other strings are the text itself; an object with ``read`` is a binary or
    text stream (its ``name``, when it has one, labels it). A string without any whitespace that is not an
    existing path is taken for a mistyped path and raises :class:`DiagnoseError`.
    """
    sources: list[Source] = []
    texts = sum(isinstance(i, (bytes, bytearray)) or (isinstance(i, str) and i != "-" and not _is_path(i))
                for i in items)  # fmt: skip
    text_number = 0
    for item in items:
        if isinstance(item, os.PathLike):
            path = Path(item)
            if not path.exists():
                raise DiagnoseError(f"{path}: no such file or folder")
            sources.extend(_file_sources(path))
        elif isinstance(item, (bytes, bytearray)) or (isinstance(item, str) and item != "-" and not _is_path(item)):
            if isinstance(item, str) and not any(c.isspace() for c in item.strip()):
                raise DiagnoseError(
                    f"{item!r}: no such file or folder (text to diagnose holds at least one space or line break)"
                )
            text_number += 1
            label = "<text>" if texts == 1 else f"<text {text_number}>"
            data = bytes(item) if isinstance(item, (bytes, bytearray)) else item.encode("utf-8", "surrogatepass")
            sources.append(Source(label, lambda data=data: io.BytesIO(data), kind="text"))
        elif isinstance(item, str) and item == "-":
            sources.append(Source("<stdin>", lambda: sys.stdin.buffer, kind="stdin"))
        elif isinstance(item, str):
            sources.extend(_file_sources(_is_path(item) or Path(item)))
        elif hasattr(item, "read"):
            label = str(getattr(item, "name", "") or "<stream>")
            sources.append(Source(label, lambda item=item: _binary(item), kind="stream"))
        else:
            raise DiagnoseError(f"cannot diagnose a {type(item).__name__}: give a path, text, bytes or a stream")
    return sources


def _binary(stream: Any) -> IO[bytes]:
    """A binary view of a stream (a text stream is encoded as UTF-8 line by line, never read whole)."""
    if isinstance(stream, io.TextIOBase) or isinstance(getattr(stream, "buffer", None), io.BufferedIOBase):
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            return buffer
        return _EncodedText(stream)  # type: ignore[return-value]
    return stream


class _EncodedText(io.RawIOBase):
    """A text stream read as UTF-8 bytes, one line at a time."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readline(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        limit = size if size is not None and size > 0 else -1
        return self._stream.readline(limit).encode("utf-8", "surrogatepass")
