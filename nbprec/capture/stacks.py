"""User call stacks: the frames of the user's code that led to an op, without torch's or nbprec's own."""

from __future__ import annotations

import bisect
import json
import linecache
import os
from types import CodeType, FrameType
from typing import Any, ClassVar

#: A stack as the collector keys it: ``(id(code), offset, ...)`` for each user frame, innermost first.
StackKey = tuple[int, ...]

_encode_string = json.encoder.encode_basestring  # type: ignore[attr-defined]  # what json.dumps uses, in C

try:  # the walk of StackCollector.key in C (nbprec/capture/_walks.c); without it, the Python loop below
    from nbprec.capture._walks import stack_key as _c_key
except ImportError:
    _c_key = None


class StackCollector:
    """Walks the interpreter stack, keeping user frames; a formatted frame is cached per code object and
    instruction offset, and a whole stack's JSON text per sequence of them (a model's ops recur with the same
    stacks). A code object seen for the first time has its file's lines read afresh (an edited module).

    A walk can stop at a frame whose key is known already (the frame that called a module the op runs in:
    everything outward from it is that module call's stack), which keeps the walks of a deep model short.

    A collector holds nothing of one capture, so captures share one per setting (:meth:`shared`): the
    caches then stay warm from one capture to the next (a notebook that captures one step at a time pays for
    formatting its stacks once). They are emptied when they pass :attr:`MAX_STACKS` stacks.

    Parameters
    ----------
    skip_dirs
        Folders whose files are internals (torch's package folder, nbprec's capture package).
    limit
        At most this many (innermost) user frames are kept.
    """

    #: Distinct stacks cached before every cache is emptied (bounds the memory of a long-lived process).
    MAX_STACKS = 100_000

    _registry: ClassVar[dict[tuple[tuple[str, ...], int], StackCollector]] = {}

    @classmethod
    def shared(cls, skip_dirs: list[str], limit: int = 30) -> StackCollector:
        """The process's collector for these settings (made on first use)."""
        key = (tuple(skip_dirs), limit)
        found = cls._registry.get(key)
        if found is None:
            found = cls._registry[key] = cls(skip_dirs, limit)
        return found

    def __init__(self, skip_dirs: list[str], limit: int = 30) -> None:
        self._skip = tuple(os.path.normcase(os.path.abspath(d)) + os.sep for d in skip_dirs)
        self._limit = limit
        self._files: dict[str, bool] = {}
        self._json: dict[StackKey, str] = {}
        self._codes: dict[int, CodeType] = {}
        self._places: dict[tuple[int, int], int] = {}  # (id(code), offset) -> line number
        self._tables: dict[int, tuple[tuple[Any, ...], ...]] = {}  # id(code) -> its line table, column-wise
        self._frame_texts: dict[tuple[int, int], str] = {}  # (id(code), offset) -> the frame as a JSON string

    def _is_user(self, filename: str) -> bool:
        keep = self._files.get(filename)
        if keep is None:
            norm = os.path.normcase(os.path.abspath(filename)) if not filename.startswith("<") else filename
            keep = not norm.startswith(self._skip) and not filename.startswith("<frozen")
            self._files[filename] = keep
        return keep

    @staticmethod
    def _format(filename: str, lineno: int, func: str) -> str:
        code = linecache.getline(filename, lineno).strip()
        return f'File "{filename}", line {lineno}, in {func}' + (f": {code}" if code else "")

    def key(self, frame: FrameType | None, stop: FrameType | None = None, outer: StackKey = ()) -> StackKey:
        """The user frames from ``frame`` outwards as ``(id(code), offset, ...)``: innermost first.

        ``offset`` is the frame's instruction offset (``f_lasti``, read as it is: ``f_lineno`` would decode
        the code's line table). Reaching ``stop``, the walk ends with ``outer``, the key of the frames from
        ``stop`` outwards. Code objects are keyed by ``id`` (hashing one hashes its whole body) and kept
        alive, so that an ``id`` is never reused. The walk runs in C where nbprec's extensions are built.
        """
        if _c_key is not None:
            return _c_key(frame, stop, outer, self._files, self._codes, 2 * self._limit, self._is_user)
        key: list[int] = []
        append = key.append
        files = self._files
        codes = self._codes
        size = 2 * self._limit
        while frame is not None:
            if frame is stop:
                key.extend(outer)
                break
            code = frame.f_code
            keep = files.get(code.co_filename)
            if keep is None:
                keep = self._is_user(code.co_filename)
            if keep:
                ident = id(code)
                append(ident)
                append(frame.f_lasti)
                if ident not in codes:
                    codes[ident] = code
                if len(key) >= size:
                    break
            frame = frame.f_back
        return tuple(key[:size])

    def _line(self, ident: int, offset: int) -> int:
        """The line number of the instruction at byte ``offset`` of code object ``ident`` (as ``f_lineno``):
        PyCode_Addr2Line's answer, the first line before any instruction and -1 where there is none."""
        line = self._places.get((ident, offset))
        if line is None:
            table = self._tables.get(ident)
            if table is None:  # the code's line table, read once: range starts, ends and lines
                linecache.checkcache(self._codes[ident].co_filename)  # new code: its file may have been edited
                table = self._tables[ident] = tuple(zip(*self._codes[ident].co_lines(), strict=True)) or ((), (), ())
            starts, ends, lines = table
            k = bisect.bisect_right(starts, offset) - 1
            found = lines[k] if k >= 0 and offset < ends[k] else None
            line = self._codes[ident].co_firstlineno if offset < 0 else -1 if found is None else found
            self._places[(ident, offset)] = line
        return line

    def _frames(self, key: StackKey) -> list[str]:
        """The formatted frames of a :meth:`key`, outermost first."""
        codes = self._codes
        return [
            self._format(codes[ident].co_filename, self._line(ident, offset), codes[ident].co_name)
            for ident, offset in zip(key[-2::-2], key[::-2], strict=True)
        ]

    def text(self, key: StackKey) -> str:
        """A stack's frames as a JSON list (the text the dump writer stores), cached per key; each frame's JSON
        string is made once, and a new stack joins them."""
        text = self._json.get(key)
        if text is None:
            if len(self._json) >= self.MAX_STACKS:
                self._forget()
            texts = self._frame_texts
            parts = []
            for place in zip(key[-2::-2], key[::-2], strict=True):
                part = texts.get(place)
                if part is None:
                    code = self._codes[place[0]]
                    frame = self._format(code.co_filename, self._line(*place), code.co_name)
                    part = texts[place] = _encode_string(frame)
                parts.append(part)
            text = "[" + ",".join(parts) + "]"  # what json.dumps(frames, ensure_ascii=False) writes
            if not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:  # file names that are not UTF-8: \u escapes
                    text = json.dumps(self._frames(key), separators=(",", ":"))
            self._json[key] = text
        return text

    def _forget(self) -> None:
        """Empty the caches that grow with the stacks seen. The code objects stay: keys name them by ``id``, and a
        key may outlive this call (a running module's); a process has only so many code objects."""
        for cache in (self._json, self._places, self._tables, self._frame_texts):
            cache.clear()
