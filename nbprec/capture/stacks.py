"""User call stacks: the frames of the user's code that led to an op, without torch's or nbprec's own."""

from __future__ import annotations

import linecache
import os
import sys
from types import FrameType


class StackCollector:
    """Walks the interpreter stack, keeping user frames; formatted frames are cached per code line.

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

    def collect(self, start: FrameType | None = None) -> list[str]:
        """User frames of the current stack, outermost first."""
        frame = start if start is not None else sys._getframe(1)
        frames: list[str] = []
        while frame is not None and len(frames) < self._limit:
            code = frame.f_code
            if self._is_user(code.co_filename):
                frames.append(self._format(code.co_filename, frame.f_lineno, code.co_name))
            frame = frame.f_back
        frames.reverse()
        return frames
