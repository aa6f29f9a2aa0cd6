"""The C fast path of the protobuf text parser (nbprec/graph/_textformat.c) against the Python tokeniser.

Whatever the C parser returns, the Python one must return too (same fields, same values, same types: True is
not 1); where the Python one raises, the C one must hand the text back (None). Held to that on generated
texts: well-formed ones in every spelling the tokeniser reads, and the same texts cut short and damaged.
"""

from __future__ import annotations

import math
import random
import sys

import pytest

from nbprec.graph import ge_parse
from nbprec.graph.ge_parse import MAX_DEPTH, GeGraphError, parse_text

C = ge_parse._C
pytestmark = pytest.mark.skipif(C is None, reason="nbprec.graph._textformat is not built (no C compiler)")


def fast(text: str):
    return C.parse(text, ge_parse._scalar_at, ge_parse._string_at, MAX_DEPTH)


def slow(text: str):
    return ge_parse._parse_text(text, "t.txt")


def canon(value):
    """A comparable form that keeps types apart (bool from int) and NaN equal to itself."""
    if isinstance(value, dict):
        return ("m", [(k, canon(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("l", [canon(v) for v in value])
    if isinstance(value, float):
        return ("f", "nan" if math.isnan(value) else repr(value))
    return (type(value).__name__, value)


# Scalars and strings in the spellings the tokeniser reads; the C parser reads the plain ones itself and
# asks Python for the rest (floats, hexadecimal, octal, escapes, adjacent literals).
SCALARS = [
    "0", "7", "42", "123456789012345678", "1234567890123456789012", "-3", "-0", "00", "017", "0x1F", "-0X2a",
    "1.5", "-2e-3", ".5", "1.", "1.5f", "2E+10", "inf", "-inf", "Infinity", "nan", "NaN", "DT_FLOAT",
    "FORMAT_NC1HWC0", "_x", "true", "True", "false", "False", "TRUE", "information", "nano", "-DT_X",
]  # fmt: skip
STRINGS = [
    '""', '"abc"', "'abc'", '"it\'s"', "'say \"hi\"'", '"a\\nb"', '"caf\\303\\251"', '"\\x41\\101"', '"a" "b"',
    "'a'\n  'b'", '"\\u00e9"', '"conv1/Conv2D:0"', '"中文"', '"tab\there"', '"\\\\"',
]  # fmt: skip
NAMES = ["name", "op", "dim", "attr", "key", "value", "s", "i", "list", "_x", "A9"]
BLANKS = [" ", "\n", "  ", "\t", "\n  ", " # a comment\n", "\r\n", ""]
AFTER_COLON = [" ", "", "  ", " # c\n "]


def _message(rng: random.Random, depth: int, exotic: bool) -> str:
    parts = []
    for _ in range(rng.randint(0, 5)):
        name = rng.choice(NAMES)
        blank = rng.choice(BLANKS)
        roll = rng.random()
        if depth < 4 and roll < 0.3:
            colon = rng.choice(["", ":", ": "])
            opener, closer = ("<", ">") if exotic and rng.random() < 0.2 else ("{", "}")
            parts.append(f"{name}{colon} {opener}{blank}{_message(rng, depth + 1, exotic)}{blank}{closer}")
        elif exotic and roll < 0.4:
            items = ", ".join(rng.choice(SCALARS) for _ in range(rng.randint(0, 3)))
            parts.append(f"{name}: [{items}]")
        elif roll < 0.7:
            parts.append(f"{name}:{rng.choice(AFTER_COLON)}{rng.choice(SCALARS)}")
        else:
            parts.append(f"{name}: {rng.choice(STRINGS)}")
        if rng.random() < 0.1:
            parts.append(rng.choice([",", ";"]))
    return rng.choice(BLANKS[:-1]).join(parts) if parts else ""  # (never "": tokens would run together)


def _texts(seed: int, count: int, exotic: bool) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(BLANKS) + _message(rng, 0, exotic) + rng.choice(BLANKS) for _ in range(count)]


def _damaged(text: str, rng: random.Random) -> str:
    if not text:
        return "}"
    cut = rng.randrange(len(text))
    how = rng.random()
    if how < 0.4:
        return text[:cut]  # truncated
    if how < 0.7:
        return text[:cut] + text[cut + 1 :]  # a character lost
    return text[:cut] + rng.choice(list("{}[]<>:\"'#,;@\\.-x0 \n")) + text[cut:]  # one added


def check(text: str) -> bool:
    """Hold the two parsers to each other on ``text``; whether the C parser answered."""
    answer = fast(text)
    try:
        expected = slow(text)
    except GeGraphError:
        assert answer is None, text
        return False
    if answer is not None:
        assert canon(answer) == canon(expected), text
    return answer is not None


@pytest.mark.parametrize("seed", range(4))
def test_well_formed_texts_parse_alike_and_in_c(seed):
    texts = _texts(seed, 400, exotic=False)
    answered = [check(text) for text in texts]
    assert all(answered)  # fields, messages, scalars and strings in any spelling: all read in C


@pytest.mark.parametrize("seed", range(4))
def test_lists_and_angle_brackets_are_left_to_python(seed):
    for text in _texts(100 + seed, 400, exotic=True):
        check(text)
    assert fast("dim: [1, 2]") is None and fast("m < x: 1 >") is None


@pytest.mark.parametrize("seed", range(6))
def test_damaged_texts_never_answer_where_python_raises(seed):
    rng = random.Random(seed)
    for text in _texts(200 + seed, 300, exotic=seed % 2 == 1):
        for _ in range(3):
            check(_damaged(text, rng))


@pytest.mark.parametrize(
    "text",
    [
        "}",
        "a {",
        "a { b: 1 } }",
        "a 1",
        "a: ",
        "a:",
        "a: }",
        "a: 1.5.3",
        "a: DT.X",
        "a: 12abc",
        '"s"',
        "12",
        "a: '\\q'",
        'a: "unterminated\n"',
        "a { b { c: 1 }",
        "a: 1 @",
        "a: -",
    ],
)
def test_errors_are_left_to_python(text):
    assert fast(text) is None
    with pytest.raises(GeGraphError):
        parse_text(text, "t.txt")


def test_extension_names_are_left_to_python():
    assert fast("[ext.name]: 1") is None
    assert parse_text("[ext.name]: 1") == {"[ext.name]": [1]}


def test_nesting_limit_is_python_s():
    deep = "a { " * MAX_DEPTH + "}" * MAX_DEPTH
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * MAX_DEPTH))  # canon() takes a few frames per level
    try:
        assert canon(fast(deep)) == canon(slow(deep))
    finally:
        sys.setrecursionlimit(limit)
    deeper = "a { " * (MAX_DEPTH + 1) + "}" * (MAX_DEPTH + 1)
    assert fast(deeper) is None
    with pytest.raises(GeGraphError, match="nested deeper"):
        parse_text(deeper)


def test_text_of_every_width_and_the_npu_demo_graph(tmp_path):
    from nbprec.demo.npu import make_npu_demo

    demo = make_npu_demo(tmp_path / "demo", batch=1)
    graph = next((tmp_path / "demo").rglob("ge_proto_*_Build.txt")).read_text()
    assert demo is not None and fast(graph) is not None  # fused ops, descriptors, attributes: all in C
    for text in (graph, 'op { name: "中文" type: "Relu" }', 'op { name: "\U0001f600" }', "a: 1 b: é"):
        check(text)
