"""The msprobe reader's tensor columns made in C (``nbprec.formats._msprobescan``): recorded shapes given their ids
(``shape_ids``: the same ids, the same shapes added in the same order and the same problems as the Python way, on
the shapes msprobe writes and on shapes it does not: not lists, bools, negative or huge sizes, too many elements,
floats, nesting), and the names of tensors without payloads (``derived_names``: the Python way's names)."""

from __future__ import annotations

import random

import numpy as np
import pytest

import nbprec.formats.msprobe_columns as msprobe_columns
from nbprec.formats.msprobe_columns import TensorColumns

try:
    from nbprec.formats._msprobescan import derived_names, shape_ids
except ImportError:
    derived_names = shape_ids = None

pytestmark = pytest.mark.skipif(shape_ids is None, reason="nbprec.formats._msprobescan is not built")

#: Shapes msprobe does not write: each must get the id, or the problem, the Python way gives it.
ODD_SHAPES = [
    None,
    "2, 3",
    7,
    (2, 3),  # a tuple: JSON gives none, a Python caller could
    [True, 2],  # a bool is not a size, though (True, 2) == (1, 2)
    [1, 2.0],
    [-1, 4],
    [2**63, 1],  # beyond a size
    [2**62, 4],  # each size fine, too many elements
    [[2], 3],
    ["2", 3],
    [],
    [0],
    [1, 2],
]


def _usual_shapes(rng: random.Random, n: int) -> list:
    pool = [[rng.randint(1, 64) for _ in range(rng.randint(0, 4))] for _ in range(12)]
    return [list(rng.choice(pool)) for _ in range(n)]


def _columns_of(batches: list[list], in_c: bool, monkeypatch) -> tuple[list, list, list, dict, list]:
    """Shape ids, shapes, numels, the cache and the problems of a TensorColumns that took ``batches``."""
    monkeypatch.setattr(msprobe_columns, "_shape_ids_in_c", shape_ids if in_c else None)
    columns = TensorColumns(lambda problem, name: None)  # (the problems are the found list here)
    found: list = []
    first = 0
    for raw in batches:
        columns._shape_column(raw, first, found)
        first += len(raw)
    return list(columns.shape_ids), list(columns.shapes), list(columns.numels), dict(columns._shape_ids), found


@pytest.mark.parametrize("seed", range(6))
def test_shapes_get_the_ids_of_the_python_way(seed, monkeypatch):
    rng = random.Random(seed)
    batches = []
    for _ in range(4):
        batch = _usual_shapes(rng, 200)
        for _ in range(seed * 3):  # odd shapes among usual ones, some repeated across batches
            batch.insert(rng.randrange(len(batch) + 1), rng.choice(ODD_SHAPES))
        batches.append(batch)
    in_c = _columns_of(batches, True, monkeypatch)
    in_python = _columns_of(batches, False, monkeypatch)
    assert in_c == in_python
    assert len(in_c[0]) == sum(map(len, batches))


def test_every_odd_shape_alone_and_twice(monkeypatch):
    for shape in ODD_SHAPES:
        batches = [[shape], [[1, 2], shape, shape]]
        assert _columns_of(batches, True, monkeypatch) == _columns_of(batches, False, monkeypatch), shape
    ids, shapes, _numels, _cache, found = _columns_of([ODD_SHAPES], True, monkeypatch)
    assert shapes == [(), (0,), (1, 2)]
    assert ids == [-1] * 11 + [0, 1, 2]
    assert [row for row, _field, _problem in found] == list(range(11))
    assert "more elements than an index can count" in found[8][2]
    assert "is not a list of sizes" in found[4][2]  # [True, 2]


def test_known_shapes_are_read_and_new_valid_ones_added():
    known = {None: -1, (1, 2): 0, (3,): -2}
    shapes, numels = [(1, 2)], [2]
    raw = [[1, 2], [3], [True, 2], None, [], [4, 5], (1, 2), [-1], [2**62, 4], [2**62, 4, 0], [4, 5]]
    ids = np.frombuffer(shape_ids(raw, known, shapes, numels, -3), dtype=np.int64)
    # what the table holds; new lists of sizes added; anything else (a bool, a tuple, a negative size, an element
    # count that overflows, even before a zero) left to the caller
    assert ids.tolist() == [0, -2, -3, -3, 1, 2, -3, -3, -3, -3, 2]
    assert shapes == [(1, 2), (), (4, 5)] and numels == [2, 1, 20]
    assert known == {None: -1, (1, 2): 0, (3,): -2, (): 1, (4, 5): 2}
    assert shape_ids([], known, shapes, numels, -3) == b""
    with pytest.raises(TypeError):
        shape_ids(([1],), known, shapes, numels, -3)  # a tuple of shapes: the reader always passes a list
    with pytest.raises(TypeError):
        shape_ids([[1]], [], shapes, numels, -3)


def _names_of(in_c: bool, monkeypatch, ops: list[str], rows: list[tuple[int, int, str]], first: int, count: int):
    monkeypatch.setattr(msprobe_columns, "_derived_names_in_c", derived_names if in_c else None)
    columns = TensorColumns(lambda problem, name: None)
    for op, role, slot in rows:
        columns.add({}, op, role, slot)
    return columns._derived_names(ops, first, count)


def test_names_without_payloads_are_the_python_ways(monkeypatch):
    ops = ["Functional.linear.0.forward", "Module.enc.Linear.backward.3", "Tensor.caf\u00e9.0.forward", ""]
    rng = random.Random(3)
    slots = ["0", "1", "12", "x\u00ff", ""]
    rows = [(rng.randrange(len(ops)), rng.randrange(4), rng.choice(slots)) for _ in range(300)]
    for first, count in ((0, 300), (17, 100), (300, 0), (299, 1)):
        in_c = _names_of(True, monkeypatch, ops, rows, first, count)
        assert in_c == _names_of(False, monkeypatch, ops, rows, first, count)
        assert len(in_c) == count
    assert _names_of(True, monkeypatch, ops, rows[:2], 0, 2) == [
        ops[op] + (".input.", ".parameters.", ".output.", ".")[role] + slot for op, role, slot in rows[:2]
    ]


def test_names_beyond_the_columns_are_refused():
    from array import array

    ops, op_of, roles, slots = ["a"], array("q", [0, 1]), bytes([0, 0]), ["0", "1"]
    words = (".input.", ".parameters.", ".output.", ".")
    with pytest.raises(IndexError):
        derived_names(ops, op_of, roles, slots, words, 0, 2)  # op 1 of one op
    with pytest.raises(IndexError):
        derived_names(ops, op_of, roles, slots, words, 1, 5)  # rows beyond the columns
    with pytest.raises(IndexError):
        derived_names(ops, array("q", [0]), bytes([9]), ["0"], words, 0, 1)  # a role beyond the words
    with pytest.raises(TypeError):
        derived_names([b"a"], array("q", [0]), bytes([0]), ["0"], words, 0, 1)  # not str
    assert derived_names(ops, array("q", [0]), bytes([2]), ["7"], words, 0, 1) == ["a.output.7"]
