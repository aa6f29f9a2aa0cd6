"""User call stacks: the frames of the user's code that led to an op, without torch's or nbprec's own."""

from __future__ import annotations

import json
import linecache
import os
import sys
from types import CodeType, FrameType


class StackCollector:
    """Walks the interpreter stack, keeping user frames; formatted frames are cached per code line, and a
    whole stack's JSON text per sequence of user code objects and instruction offsets (a model's ops recur
    with the same stacks).

    Parameters
    ----------
    skip_dirs
        Folders whose files are internals (torch's package folder, nbprec's capture package).
    limit
        At most this many (innermost) user frames are kept.
    """

    def __init__(self, skip_dirs: list[str], limit: int = 30) -> None:
        self._skip = tuple(os.path.normcase(os.path.abspath(d)) + os.sep for d in skip_dirs)
        self._limit = limit
        self._files: dict[str, bool] = {}
        self._lines: dict[tuple[str, int, str], str] = {}
        self._json: dict[tuple[int, ...], str] = {}
        self._codes: dict[int, CodeType] = {}

    def _is_user(self, filename: str) -> bool:
        keep = self._files.get(filename)
        if keep is None:
            norm = os.path.normcase(os.path.abspath(filename)) if not filename.startswith("<") else filename
            keep = not norm.startswith(self._skip) and not filename.startswith("<frozen")
            self._files[filename] = keep
        return keep

    def _format(self, filename: str, lineno: int, func: str) -> str:
        key = (filename, lineno, func)
        text = self._lines.get(key)
        if text is None:
            code = linecache.getline(filename, lineno).strip()
            text = f'File "{filename}", line {lineno}, in {func}' + (f": {code}" if code else "")
            self._lines[key] = text
        return text

    def _key(self, frame: FrameType | None, lines: bool = False) -> tuple[int, ...]:
        """The user frames from ``frame`` outwards as ``(id(code), place, ...)``: innermost first.

        ``place`` is the frame's instruction offset (``f_lasti``, read as it is), or with ``lines`` its line
        number (``f_lineno``, which decodes the code's line table: the slow part of a deep stack's walk).
        Code objects are keyed by ``id`` (hashing one hashes its whole body) and kept alive, so that an
        ``id`` is never reused.
        """
        key: list[int] = []
        files = self._files
        codes = self._codes
        size = 2 * self._limit
        while frame is not None and len(key) < size:
            code = frame.f_code
            keep = files.get(code.co_filename)
            if keep is None:
                keep = self._is_user(code.co_filename)
            if keep:
                key.append(id(code))
                key.append(frame.f_lineno if lines else frame.f_lasti)
                if id(code) not in codes:
                    codes[id(code)] = code
            frame = frame.f_back
        return tuple(key)

    def _frames(self, key: tuple[int, ...]) -> list[str]:
        """The formatted frames of a :meth:`_key` with ``lines``, outermost first."""
        codes = self._codes
        return [
            self._format(codes[ident].co_filename, line, codes[ident].co_name)
            for ident, line in zip(key[-2::-2], key[::-2], strict=True)
        ]

    def collect(self, start: FrameType | None = None) -> list[str]:
        """User frames of the current stack, outermost first."""
        return self._frames(self._key(start if start is not None else sys._getframe(1), lines=True))

    def collect_json(self, start: FrameType | None = None) -> str:
        """:meth:`collect`'s frames as a JSON list (the text the dump writer stores), cached per stack: per
        sequence of code objects and instruction offsets, so that line numbers are decoded only once."""
        frame = start if start is not None else sys._getframe(1)
        key = self._key(frame)
        text = self._json.get(key)
        if text is None:
            frames = self._frames(self._key(frame, lines=True))
            text = json.dumps(frames, ensure_ascii=False, separators=(",", ":"))
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:  # file names that are not UTF-8: \u escapes
                text = json.dumps(frames, separators=(",", ":"))
            self._json[key] = text
        return text
