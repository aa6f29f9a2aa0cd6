"""nbprec.floattext: float64 values as repr writes them, by the C formatter (and by repr without it)."""

from __future__ import annotations

import numpy as np
import pytest
from fresh_python import run_python

from nbprec import floattext
from nbprec.floattext import float_texts

needs_c = pytest.mark.skipif(floattext._C is None, reason="nbprec._floattext is not built")


def _reprs(values: np.ndarray, nan: str) -> list[str]:
    return [nan if v != v else repr(v) for v in values.tolist()]


_SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 2.2250738585072014e-308, 2.225073858507201e-308]
_SPECIAL += [1.7976931348623157e308, 0.1, 0.2, 0.3, 1 / 3, 2 / 3, 9007199254740993.0, 1e22, 1e23, 1.5e-323, -1.0]


def _hard_values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(21)
    powers_of_two = np.ldexp(1.0, np.arange(-1074, 1024))
    powers_of_ten = np.array([float(f"1e{e}") for e in range(-323, 309)])
    with np.errstate(over="ignore"):
        return {
            # every finite double is equally likely: all exponents, subnormals, NaN and inf included
            "random bit patterns": rng.integers(0, 2**64, size=300_000, dtype=np.uint64).view(np.float64),
            "uniform in [0, 1)": rng.random(100_000),
            "float32 values": rng.standard_normal(100_000).astype(np.float32).astype(np.float64),
            "float16 and bfloat16-like values": rng.standard_normal(50_000).astype(np.float16).astype(np.float64),
            "integers": np.arange(-20_000, 20_000, dtype=np.float64) * 37,
            "short decimals": rng.integers(1, 10**6, size=50_000) * 10.0 ** rng.integers(-30, 30, size=50_000),
            "17-digit decimals": rng.integers(10**16, 10**17, size=50_000) * 10.0 ** rng.integers(-300, 290, 50_000),
            # where the rounding interval is lopsided (below a power of two) and the neighbours of both kinds
            "powers of two": powers_of_two,
            "above powers of two": np.nextafter(powers_of_two, np.inf),
            "below powers of two": np.nextafter(powers_of_two, 0.0),
            "powers of ten": powers_of_ten,
            "above powers of ten": np.nextafter(powers_of_ten, np.inf),
            "below powers of ten": np.nextafter(powers_of_ten, 0.0),
            "notation boundaries": np.array([1e-5, 9.999e-5, 1e-4, 0.00012, 1e15, 9.99e15, 1e16, 1.5e16, 123.0, -0.5]),
            "special": np.array(_SPECIAL),
        }


def test_the_c_formatter_is_built():
    # `make install` compiles it (setup.py); without it every CSV export formats its numbers with repr, slower
    assert floattext._C is not None, "nbprec._floattext was not built: reinstall with a C compiler (make install)"


@pytest.mark.parametrize("case", list(_hard_values()))
def test_texts_are_exactly_reprs(case):
    values = _hard_values()[case]
    assert float_texts(values, "NaN") == _reprs(values, "NaN")


def test_python_fallback_gives_the_same_texts(monkeypatch):
    values = np.concatenate([_hard_values()["random bit patterns"][:20_000], [np.nan, -0.0]])
    fast = float_texts(values, "")
    monkeypatch.setattr(floattext, "_C", None)
    assert float_texts(values, "") == fast == _reprs(values, "")


def test_any_array_is_flattened_and_widened():
    grid = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2] / 7  # 2-d, strided, float32
    assert float_texts(grid) == [repr(float(v)) for v in grid.ravel()]
    assert float_texts([]) == []
    assert float_texts([1.5, float("nan")], nan="n/a") == ["1.5", "n/a"]


def _floor_log10(num: int, den: int) -> int:
    """floor(log10(num / den)), exactly."""
    k = len(str(num // den)) - 1 if num >= den else -len(str(den // num))
    while 10**k * den > num if k >= 0 else num * 10**-k < den:
        k -= 1
    while 10 ** (k + 1) * den <= num if k + 1 >= 0 else num * 10 ** -(k + 1) >= den:
        k += 1
    return k


def test_exponent_tables_match_integer_arithmetic():
    # the tables come from float64 logarithms: each value is checked here against exact arithmetic
    k_normal, k_closer, log2_tenth = floattext.exponent_tables()
    for q, kn, kc in zip(range(-1074, 972), k_normal.tolist(), k_closer.tolist(), strict=True):
        two_q = (1 << max(q, 0), 1 << max(-q, 0))
        assert kn == _floor_log10(*two_q), q
        if q > -1074:  # (below a power of two the interval is narrower: 3/4 2^q; never at the smallest q)
            assert kc == _floor_log10(3 * two_q[0], 4 * two_q[1]), q
    for k, log2 in zip(range(-324, 293), log2_tenth.tolist(), strict=True):
        num, den = (10**-k, 1) if k <= 0 else (1, 10**k)
        assert log2 == floattext._floor_log2(num, den), k


@needs_c
def test_powers_of_ten_in_the_tables_have_126_bits():
    _, g = floattext.tables()
    halves = np.frombuffer(g, dtype=np.uint64).tolist()
    for k, (g1, g0) in enumerate(zip(halves[::2], halves[1::2], strict=True), start=-324):
        g_value = (g1 << 63) | g0
        assert 1 << 125 <= g_value < 1 << 126, k
        num, den = (10**-k, 1) if k <= 0 else (1, 10**k)
        r = floattext._floor_log2(num, den) - 125
        assert g_value == ((num << -r) // den if r <= 0 else num // (den << r)) + 1, k  # floor(10^-k 2^-r) + 1


@needs_c
def test_bad_buffers_are_errors():
    with pytest.raises(ValueError, match="float64"):
        floattext._formatter().texts(b"1234567", "")
    with pytest.raises(ValueError, match="wrong size"):
        floattext._C.set_tables(b"", b"")


def _json_text(value: object) -> str:
    """What the dump writer's Python path writes (nbprec.formats.native.encode_float's meaning)."""
    from nbprec.capture.lines import json_float

    return str(value) if type(value) is int else json_float(value)


@needs_c
def test_json_texts_are_the_writers_texts():
    json_texts = floattext.json_texts_function()
    values = _hard_values()
    floats = np.concatenate([values["random bit patterns"][:50_000], values["special"], values["powers of ten"]])
    chunk = tuple(floats.tolist()) + (None, 0, -7, 2**70)
    texts = json_texts(chunk)
    assert texts == tuple(_json_text(v) for v in chunk)
    assert set(json_texts((float("nan"), float("inf"), -float("inf"), None))) == {
        '"NaN"',
        '"Infinity"',
        '"-Infinity"',
        "null",
    }


@needs_c
@pytest.mark.parametrize("bad", [(np.float64(1.5),), (True,), ("1",), [1.5]])
def test_json_texts_refuse_other_types(bad):
    # numpy scalars and bools are left to the writer's Python path (it catches this TypeError)
    with pytest.raises(TypeError, match="json_texts"):
        floattext.json_texts_function()(bad)


@needs_c
def test_capture_statistics_are_encoded_alike_with_and_without_c(monkeypatch, tmp_path):
    from nbprec.capture import lines, writer

    monkeypatch.setattr(lines, "C_TEXTS", None)
    writer.CaptureWriter(tmp_path / "dump").close()
    assert lines.C_TEXTS is not None  # the first writer sets the C formatter up

    samples = [
        (-2.5, 3.25, 0.1, 1 / 3, 12.0, 3.25, 0, 0, 17),
        (None, None, None, None, None, None, 4, 2, 0),
        (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 8),
        (-1e300, 1e300, 0.0, float("inf"), float("inf"), 1e300, 0, 0, 0),
        (np.float64(1.5), 2.0, 1.75, 0.25, 2.5, 2.0, np.int64(0), 0, 0),
    ]
    fast = [lines.encode_stats(s).fragment for s in samples]
    monkeypatch.setattr(lines, "C_TEXTS", None)
    assert [lines.encode_stats(s).fragment for s in samples] == fast
    assert fast[0].startswith('"min":-2.5,"max":3.25,"mean":0.1,')


@needs_c
def test_prepare_sets_the_tables_once_before_any_use():
    """``prepare()`` (what ``nbprec compare`` calls before it forks its CSV writer) sets the formatter's tables in
    a process that has not formatted anything yet, and formatting afterwards gives repr's texts."""
    script = (
        "from nbprec import floattext\n"
        "assert not floattext._ready\n"
        "assert floattext.prepare() is True and floattext._ready\n"
        "print(floattext.float_texts([0.1, 1e300, 5e-324], ''))\n"
    )
    assert run_python(script) == str([repr(0.1), repr(1e300), repr(5e-324)])
