"""Finding the tensors among a call's arguments (``nbprec/capture/tensors.py``), in every kind of container."""

from __future__ import annotations

import types
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

torch = pytest.importorskip("torch")


class Fields(Mapping):
    """A mapping that is not a dict (as some libraries' output objects are)."""

    def __init__(self, **items: Any) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def test_tensors_are_found_in_every_container_and_only_there() -> None:
    from nbprec.capture.tensors import call_tensors, is_nested

    a, b, c, d, e = (torch.full((1,), float(k)) for k in range(5))
    args = (a, [1, (b,)], Fields(x=c, n=3), "text", 7, None, types.MappingProxyType({"y": d}))
    found = call_tensors(torch, args, {"mask": OrderedDict(z=e), "scale": 2.0, "name": "ab"})
    assert [(slot, t) for slot, t in found] == [
        ("0", a),
        ("1.1.0", b),
        ("2.x", c),
        ("6.y", d),
        ("mask.z", e),
    ]
    # asked twice for each type (the answer is kept per type): the same answers
    for _ in range(2):
        assert [is_nested(x) for x in (Fields(), {}, [], (), torch.Size([2]), "s", b"b", 1, 1.5, True, None)] == [
            *[True] * 5,
            *[False] * 6,
        ]


def test_a_mapping_argument_is_recorded_as_a_dict() -> None:
    from nbprec.capture.signature import encode_call

    encoded = encode_call("Functional.op", (Fields(k=1, t=torch.ones(1)),), {"s": slice(0, 2)}, torch)
    assert encoded["args"] == [{"$dict": {"k": 1, "t": {"$tensor": "0.t"}}}]
    assert encoded["kwargs"] == {"s": {"$slice": [0, 2, None]}}
