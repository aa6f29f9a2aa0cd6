"""The msprobe scanner's own reading of decimal numbers (``decimal_double`` in nbprec/formats/_msprobescan.c): every
statistic it reads is the double ``float()`` reads from the same text, bit for bit, whether it worked the value out
itself or left the text to Python's reader; and its table of powers of five is the one integer arithmetic gives."""

from __future__ import annotations

import math
import random
import struct
from decimal import Decimal, localcontext
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import nbprec.formats.msprobe_scan as msprobe_scan
from nbprec.formats import _pow5_table
from nbprec.formats.msprobe_columns import SLOTS

pytestmark = pytest.mark.skipif(msprobe_scan._scan is None, reason="nbprec.formats._msprobescan is not built")


def _scanned_statistics(texts: list[str]) -> np.ndarray:
    """The scanner's Min, Max, Mean and Norm of a dump.json whose statistics are ``texts``, four a tensor, in order."""
    texts = texts + ["0.0"] * (-len(texts) % 4)
    ops = []
    for i in range(0, len(texts), 4):
        low, high, mean, norm = texts[i : i + 4]
        ops.append(
            f'"Functional.f.{i // 4}.forward": {{"output": [{{"type": "torch.Tensor", "dtype": "torch.float32", '
            f'"shape": [1], "Min": {low}, "Max": {high}, "Mean": {mean}, "Norm": {norm}}}]}}'
        )
    scanned = msprobe_scan._scan(('{"task": "statistics", "data": {' + ", ".join(ops) + "}}").encode(), SLOTS)
    assert scanned is not None, "the scanner left the text to the Python reader"
    return np.frombuffer(scanned[11], dtype=np.float64)[: len(texts)]


def assert_read_as_float_reads(texts: list[str]) -> None:
    # (an integer's text is read as one, and one of more than 18 digits is left to the Python reader: a float's)
    texts = [text if any(c in text for c in ".eE") else text + ".0" for text in texts]
    got = _scanned_statistics(texts)
    want = np.array([float(text) for text in texts] + [0.0] * (len(got) - len(texts)))
    differ = np.flatnonzero(got.view(np.uint64) != want.view(np.uint64))  # (-0.0 told from 0.0)
    assert not len(differ), [(texts[i], float(got[i]), float(want[i])) for i in differ[:10]]


def _random_double(rng: random.Random) -> float:
    while True:
        value = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if math.isfinite(value):
            return value


def test_the_header_is_the_generators_output():
    header = Path(_pow5_table.__file__).with_name("_pow5.h").read_text()
    assert header == _pow5_table.header_text()


@pytest.mark.parametrize("q", [_pow5_table.Q_MIN, -28, -27, -1, 0, 1, 27, 55, 56, _pow5_table.Q_MAX])
def test_table_entries_bound_the_power_of_five(q):
    t, shift = _pow5_table.entry(q)
    s = q - shift
    assert 1 << 127 <= t < 1 << 128
    exact = Fraction(5) ** q * Fraction(2) ** s  # T is its floor, and equal to it just where the table says
    assert t <= exact < t + 1
    assert (t == exact) == (0 <= q <= _pow5_table.EXACT_MAX)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_doubles_as_python_and_numpy_write_them(seed):
    rng = random.Random(seed)
    texts = []
    for _ in range(15_000):
        value = _random_double(rng)
        texts += [repr(value), f"{value:.17g}", f"{value:.16e}", f"{value:.15g}", f"{value:.9g}", f"{value:.20g}"]
        texts.append(repr(float(np.float32(value))) if abs(value) < 3e38 else "1.0")  # a float32 run's statistics
    assert_read_as_float_reads(texts)


def test_random_decimal_texts_of_every_length_and_exponent():
    rng = random.Random(7)
    texts = []
    for _ in range(60_000):
        n = rng.randint(1, 19)
        digits = str(rng.randint(10 ** (n - 1), 10**n - 1))
        exponent = rng.randint(-360, 330)
        form = rng.randrange(4)
        if form == 0:
            texts.append(f"{digits}e{exponent}")
        elif form == 1:
            texts.append(f"-{digits[0]}.{digits[1:] or '0'}E{exponent:+d}")
        elif form == 2:
            texts.append("0." + "0" * rng.randint(0, 30) + digits)
        else:
            texts.append(digits + ".0")
    assert_read_as_float_reads(texts)


def test_decimals_that_are_exactly_doubles():
    """A bfloat16 or float16 run's statistics are short binary fractions (4.3125, -0.0078125): exact in binary."""
    rng = random.Random(3)
    texts = []
    with localcontext() as context:
        context.prec = 100
        while len(texts) < 40_000:
            k, j = rng.randint(1, 1 << rng.randint(1, 60)), rng.randint(1, 40)
            text = format(Decimal(k) / Decimal(2**j), "f")
            if len(text.replace(".", "").lstrip("0")) <= 19:
                texts += [text, "-" + text, f"{text}e-3", f"{text}e5"]
    texts += [repr(float(v)) for v in np.arange(-1024, 1024, dtype=np.float32).astype(np.float16)]
    assert_read_as_float_reads(texts)


def test_ties_round_to_even_and_the_limits_of_the_range():
    texts = [str((1 << k) + j) + ".0" for k in range(53, 64) for j in range(1, 64)]  # midpoints among them
    texts += [f"{((1 << 53) + 2 * j + 1) << 3}.0" for j in range(200)]
    for value in (5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1.7976931348623157e308, 1e23, 0.1):
        texts += [repr(value), f"{value:.17g}", f"{value:.25g}", f"{-value:.19e}"]
    texts += ["1.7976931348623159e308", "1e309", "-1e400", "1e-400", "2.4703282292062327e-324",
              "2.4703282292062328e-324", "0.0", "-0.0", "0e300", "-0.000e-999", "123456789012345678901.5",
              "9007199254740993.0", "9007199254740995.0", "0." + "0" * 40 + "1", "1" + "0" * 40 + ".0"]  # fmt: skip
    assert_read_as_float_reads(texts)
