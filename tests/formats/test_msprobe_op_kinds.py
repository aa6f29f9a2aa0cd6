"""The op keys of a scanned dump.json read in C (``nbprec.formats._msprobescan.op_kinds``): the same op-kind codes,
call indices and gradient flags as the reader's Python loop (``DumpSourceReader._op_key``), the same caches
filled in the same order, the same problems, on keys of every form msprobe writes and of forms it does not."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import nbprec.formats.msprobe_index as msprobe_index
from nbprec.formats._files import real_folder
from nbprec.formats._layout import DumpSource

try:
    from nbprec.formats._msprobescan import op_kinds
except ImportError:
    op_kinds = None

pytestmark = pytest.mark.skipif(op_kinds is None, reason="nbprec.formats._msprobescan is not built")

FIXTURES = Path(__file__).parent.parent / "fixtures"

#: Keys msprobe does not write, or writes rarely: each must be read as the Python reader reads it.
ODD_KEYS = [
    "nodots",
    "Functional.linear.forward",  # no call index
    "Functional.linear.x1.forward",  # not digits
    "Functional.linear.1234567890123456789.forward",  # 19 digits: beyond an index
    "Functional.linear.123456789012345678.forward",  # 18 digits: an index
    "Functional.linear.\u0661.forward",  # an Arabic-Indic digit: not ASCII
    "Functional.lin\u00e9ar.0.forward",  # not ASCII
    "linear.0.forward",  # an API without a dot in it
    ".0.forward",
    "0.forward",
    "Functional..0.backward",
    "Module.Linear.forward.0",  # a module call with no path
    "Module.enc.Linear.parameters_grad.0",
    "Module.enc.Linear.parameters_grad",  # no call
    "Cell.enc.Dense.backward.3",
    "Module.enc.Linear.sideways.0",  # not a direction
    "Module.forward.0",  # no class
    "Other.enc.Linear.forward.0",  # not Module. nor Cell.
    "Module.a.b.c.Linear.forward.007",
    "Module.enc.Linear.forward.1234567890123456789",
    "Distributed.all_reduce.0.forward",
    "Tensor.__add__.2.backward",
    "",
    ".",
    "Functional.linear.0.forward.",
]


#: Parents a construct.json of another tool, or a damaged one, may name: none is a module call of the usual form.
ODD_PARENTS = [
    *ODD_KEYS,
    "Module.caf\u00e9.Linear.forward.0",  # not ASCII: the reader's own function reads it
    "Functional.linear.0.forward",  # an API call: no module
    "Module.blocks.0.attn.Attention.backward.2",
]


def _keys(rng: random.Random, n: int) -> tuple[list[str], dict[str, str | None]]:
    """Keys as a mixed-level dump has them (API calls inside module calls, module calls, their gradients, some
    odd ones) and a construct.json hierarchy naming most calls' parent module call."""
    apis = ["Functional.linear", "Tensor.__add__", "Torch.matmul", "Functional.dropout", "Tensor.view"]
    modules = [f"Module.layers.{i}.{name}" for i in range(6) for name in ("Linear", "LayerNorm")]
    keys, hierarchy, calls = [], {}, {}
    for _ in range(n):
        roll = rng.random()
        if roll < 0.55:
            api = rng.choice(apis)
            calls[api] = calls.get(api, -1) + 1
            key = f"{api}.{calls[api]}.{rng.choice(['forward', 'backward'])}"
        elif roll < 0.9:
            module = rng.choice(modules)
            kind = rng.choice(["forward", "backward", "parameters_grad"])
            path, cls = module.rsplit(".", 1)
            key = f"{path}.{cls}.{kind}.{rng.randrange(3)}"
        else:
            key = rng.choice(ODD_KEYS)
        keys.append(key)
        if rng.random() < 0.8:  # its parent: a module call, or (a damaged construct.json) anything else
            parent = rng.choice([*modules, None, "odd"])
            hierarchy[key] = (
                f"{parent}.forward.0" if parent not in (None, "odd") else parent and rng.choice(ODD_PARENTS)
            )
    return keys, hierarchy


def _reader(hierarchy: dict) -> msprobe_index.DumpSourceReader:
    source = DumpSource(FIXTURES / "dump.json", 0, 0)
    reader = msprobe_index.DumpSourceReader(source, [], [real_folder(str(FIXTURES))])
    reader.hierarchy = dict(hierarchy)
    return reader


def _python(reader: msprobe_index.DumpSourceReader, keys: list[str]) -> tuple:
    saved = msprobe_index._op_kinds
    msprobe_index._op_kinds = None
    try:
        return reader._op_kinds(keys)
    finally:
        msprobe_index._op_kinds = saved


def _state(reader: msprobe_index.DumpSourceReader) -> tuple:
    """The caches and problems, insertion order included."""
    return (
        list(reader._kinds.items()),
        list(reader._api_kinds.items()),
        list(reader._modules.items()),
        [(p.problem, p.record) for p in reader.problems],
    )


@pytest.mark.parametrize("seed", range(8))
def test_keys_of_every_form_are_read_as_the_python_loop_reads_them(seed):
    rng = random.Random(seed)
    keys, hierarchy = _keys(rng, 3000)
    c_reader, py_reader = _reader(hierarchy), _reader(hierarchy)
    assert msprobe_index._op_kinds is op_kinds
    got = c_reader._op_kinds(keys)
    assert got == _python(py_reader, keys)
    assert _state(c_reader) == _state(py_reader)
    more = [*ODD_KEYS, *keys[:50]]  # a second call on the filled caches (the next dump.json of a run)
    assert c_reader._op_kinds(more) == _python(py_reader, more)
    assert _state(c_reader) == _state(py_reader)


def test_every_odd_key_alone():
    for key in ODD_KEYS:
        c_reader, py_reader = _reader({}), _reader({})
        assert c_reader._op_kinds([key]) == _python(py_reader, [key]), key
        assert _state(c_reader) == _state(py_reader), key


def test_errors_in_the_readers_method_reach_the_caller():
    reader = _reader({})

    def failing(key: str):
        raise RuntimeError(f"no: {key}")

    with pytest.raises(RuntimeError, match="no: nodots"):
        op_kinds(["Functional.linear.0.forward", "nodots"], {}, {}, {}, {}, lambda parent: "", failing)
    with pytest.raises(TypeError, match="op_key must return"):
        op_kinds(["nodots"], {}, {}, {}, {}, lambda parent: "", lambda key: "x")
    with pytest.raises(TypeError):
        op_kinds(("Functional.linear.0.forward",), {}, {}, {}, {}, lambda parent: "", reader._op_key)
    assert op_kinds([], {}, {}, {}, {}, lambda parent: "", reader._op_key) == (b"", b"", b"")
