"""The C walks of ``nbprec/capture/_walks.c``: ``StackCollector.key``'s gives the Python walk's keys and caches the
same files and code objects; ``BackwardWatch._boundary``'s finds the Python walk's boundary."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from nbprec.capture import stacks

_c = pytest.importorskip("nbprec.capture._walks", reason="the C extensions are not built here")


def _stack_walks(
    frame: Any, stop: Any, outer: tuple[int, ...], limit: int, monkeypatch: pytest.MonkeyPatch
) -> list[Any]:
    """The key, the file cache and the code cache of a fresh collector, in C and then in Python."""
    results = []
    for walk in (_c.stack_key, None):
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
            _stack_walks(here, None, (), 30, monkeypatch),  # to the outermost frame
            _stack_walks(here, top, (11, 22, 33, 44), 30, monkeypatch),  # ends at `top` with its key
            _stack_walks(here, None, (), 2, monkeypatch),  # the two innermost user frames only
            _stack_walks(None, None, (), 30, monkeypatch),  # no frame
            _stack_walks(here, here, (5, 6), 30, monkeypatch),  # the first frame is the stop
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


def test_bad_arguments_to_the_stack_walk() -> None:
    with pytest.raises(TypeError, match="7 arguments"):
        _c.stack_key(None, None, ())
    with pytest.raises(TypeError, match="a frame or None"):
        _c.stack_key("not a frame", None, (), {}, {}, 4, bool)
    failing = {}

    def is_user(filename: str) -> bool:
        failing[filename] = True
        raise RuntimeError("is_user failed")

    with pytest.raises(RuntimeError, match="is_user failed"):
        _c.stack_key(sys._getframe(), None, (), {}, {}, 4, is_user)
    assert failing


def _graph() -> tuple[Any, Any, Any, list[Any]]:
    """A small autograd graph: two parameters (leaves), an input made before the call, and the call's nodes."""
    torch = pytest.importorskip("torch")

    weight = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 12).reshape(3, 4))
    bias = torch.nn.Parameter(torch.ones(3))
    x = torch.linspace(0.0, 2.0, 8).reshape(2, 4).requires_grad_() * 3.0  # an input with a grad_fn
    hidden = torch.nn.functional.linear(x, weight, bias)
    out = torch.tanh(hidden) * hidden + x.sum() + weight.sum()  # x and the weight reached by several paths
    return x, weight, bias, [out.grad_fn]


def test_the_c_graph_walk_finds_the_python_walks_boundary() -> None:
    from nbprec.capture.backward import LEAF, BackwardWatch

    x, weight, bias, starts = _graph()
    elsewhere = pytest.importorskip("torch").ones(1, requires_grad=True)  # a leaf the call does not use
    threshold = x.grad_fn._sequence_nr()
    maps = {
        "inputs and leaves": (
            {(id(x.grad_fn), x.output_nr): ["0"], (id(weight), LEAF): ["1"], (id(bias), LEAF): ["2"]},
            True,
        ),
        "no leaves": ({(id(x.grad_fn), x.output_nr): ["0"]}, False),
        "a leaf not reached": ({(id(elsewhere), LEAF): ["9"]}, True),
    }
    for what, (in_map, leaves) in maps.items():
        for t in (threshold, -1):
            c_walk = _c.graph_boundary(list(starts), in_map, t, leaves)
            python_walk = BackwardWatch._boundary(list(starts), in_map, t, leaves)
            assert c_walk == python_walk, what
    found = _c.graph_boundary(list(starts), maps["inputs and leaves"][0], threshold, True)
    links = sorted(slot for _, pairs in found.values() for _, slots in pairs for slot in slots)
    assert links == ["0", "0", "1", "1", "2"]  # x twice (linear, sum), the weight twice (linear, sum), the bias
    assert _c.graph_boundary(list(starts), {}, threshold, False) == {}


def test_bad_arguments_to_the_graph_walk() -> None:
    with pytest.raises(TypeError, match="4 arguments"):
        _c.graph_boundary([], {})
    with pytest.raises(TypeError, match="a list of nodes"):
        _c.graph_boundary((), {}, -1, False)
    with pytest.raises(AttributeError):
        _c.graph_boundary([object()], {}, -1, False)  # not an autograd node
