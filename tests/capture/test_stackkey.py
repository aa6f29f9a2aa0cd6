"""The C walk of ``StackCollector.key`` (``nbprec/capture/_stackkey.c``) gives the Python walk's keys, and caches
the same files and code objects."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from nbprec.capture import stacks

_stackkey = pytest.importorskip("nbprec.capture._stackkey", reason="the C extensions are not built here")


def _walks(frame: Any, stop: Any, outer: tuple[int, ...], limit: int, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The key, the file cache and the code cache of a fresh collector, in C and then in Python."""
    results = []
    for walk in (_stackkey.key, None):
        monkeypatch.setattr(stacks, "_c_key", walk)
        collector = stacks.StackCollector([os.path.dirname(pytest.__file__)], limit=limit)  # pytest's are internal
        key = collector.key(frame, stop, outer)
        results.append((key, dict(collector._files), dict(collector._codes)))
    monkeypatch.undo()
    return results


def test_the_c_walk_gives_the_python_walks_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    def nested(depth: int, top: Any) -> list[list[Any]]:
        if depth:
            return nested(depth - 1, top)
        here = sys._getframe()
        return [
            _walks(here, None, (), 30, monkeypatch),  # to the outermost frame
            _walks(here, top, (11, 22, 33, 44), 30, monkeypatch),  # ends at `top` with its key
            _walks(here, None, (), 2, monkeypatch),  # the two innermost user frames only
            _walks(None, None, (), 30, monkeypatch),  # no frame
            _walks(here, here, (5, 6), 30, monkeypatch),  # the first frame is the stop
        ]

    def start() -> list[list[Any]]:
        return nested(4, sys._getframe())

    for c_walk, python_walk in start():
        assert c_walk == python_walk
    full = start()[0][0][0]
    assert len(full) >= 2 * 7 and all(isinstance(x, int) for x in full)  # nested x5, start, this test: user frames
    stopped = start()[1][0][0]
    assert stopped[-4:] == (11, 22, 33, 44) and len(stopped) == 2 * 5 + 4  # the five calls of nested
    assert len(start()[2][0][0]) == 4 and start()[3][0][0] == () and start()[4][0][0] == (5, 6)


def test_bad_arguments_are_type_errors() -> None:
    with pytest.raises(TypeError, match="7 arguments"):
        _stackkey.key(None, None, ())
    with pytest.raises(TypeError, match="a frame or None"):
        _stackkey.key("not a frame", None, (), {}, {}, 4, bool)
    failing = {}

    def is_user(filename: str) -> bool:
        failing[filename] = True
        raise RuntimeError("is_user failed")

    with pytest.raises(RuntimeError, match="is_user failed"):
        _stackkey.key(sys._getframe(), None, (), {}, {}, 4, is_user)
    assert failing
