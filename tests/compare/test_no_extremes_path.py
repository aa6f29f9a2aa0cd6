"""``tensor_metrics`` of a pair without usable recorded extremes (a CANN or TensorFlow dump records none) through
the compiled ``pair_metrics`` (one call: each side's extremes found first) gives what the general way gives on the
same arrays, to the bit (NaN and inf included; a NaN's sign aside, which ``repr`` does not show), for real
payloads and for the awkward ones (all zero, constant, NaN, inf, float16's range, subnormals)."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import nbprec
from nbprec.compare.metrics import tensor_metrics

metrics = importlib.import_module("nbprec.compare.metrics")
pytestmark = pytest.mark.skipif(metrics.FUSED is None, reason="the compiled kernel is not built")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]


def _awkward(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Values that take the kernel's other branches, as float64 (each cast to the pair's dtypes)."""
    base = rng.standard_normal(n)
    nan, inf = base.copy(), base.copy()
    nan[::7] = np.nan
    inf[::5] = np.inf
    inf[1::9] = -np.inf
    return [
        base,
        np.zeros(n),
        np.full(n, 3.25),
        nan,
        inf,
        base * 7e4,  # past float16's range: inf once cast
        base * 1e-41,  # float32 subnormals
        np.abs(base) + 1.0,  # KL's terms near each other
    ]


def _same(a, b) -> None:
    assert {k: repr(v) for k, v in a.values.items()} == {k: repr(v) for k, v in b.values.items()}
    assert (a.reason, a.extremes_held, a.nonfinite) == (b.reason, b.extremes_held, b.nonfinite)


def _general(monkeypatch, x, y, extremes=None):
    with monkeypatch.context() as m:
        m.setattr(metrics, "in_place_pair", lambda x, y: None)  # the general way (Flat sides, passes in Python)
        return tensor_metrics(x, y, extremes=extremes)


@pytest.mark.parametrize("t_dtype", DTYPES, ids=str)
@pytest.mark.parametrize("b_dtype", [np.float32, np.float64], ids=str)
def test_awkward_values_give_what_the_general_way_gives(monkeypatch, t_dtype, b_dtype):
    rng = np.random.default_rng(5)
    taken = 0
    for x64 in _awkward(rng, 3001):
        for y64 in (x64 * (1 + 1e-3 * rng.standard_normal(x64.size)), rng.standard_normal(x64.size), x64):
            with np.errstate(all="ignore"):
                x, y = x64.astype(t_dtype), y64.astype(b_dtype)
            counting = _Counting(metrics.FUSED)
            with monkeypatch.context() as m:
                m.setattr(metrics, "FUSED", counting)
                fast = tensor_metrics(x, y)
            taken += counting.calls
            _same(fast, _general(monkeypatch, x, y))
            one_sided = (math.nan, math.nan, float(np.nanmin(y64)), float(np.nanmax(y64)))  # a target that overflowed
            _same(tensor_metrics(x, y, extremes=one_sided), _general(monkeypatch, x, y, one_sided))
    assert taken == 24  # every pair went through pair_metrics


class _Counting:
    """The compiled kernel module, its pair_metrics calls counted."""

    def __init__(self, real) -> None:
        self._real, self.calls = real, 0

    def __getattr__(self, name):
        return getattr(self._real, name)

    def pair_metrics(self, *args):
        self.calls += 1
        return self._real.pair_metrics(*args)


def test_real_payloads_give_what_the_general_way_gives(monkeypatch):
    """Every pair of a real bfloat16 / float32 run, measured without its recorded extremes."""
    t_dump, b_dump = nbprec.open(FIXTURES / "bf16_tensor_mix"), nbprec.open(FIXTURES / "fp32_tensor_mix")
    b_pos = {name: i for i, name in enumerate(b_dump.columns["name"].tolist())}
    measured = 0
    for i, name in enumerate(t_dump.columns["name"].tolist()):
        t_row = t_dump.columns.row(i)
        if name not in b_pos or not t_row["has_data"]:
            continue
        b_row = b_dump.columns.row(b_pos[name])
        if not b_row["has_data"]:
            continue
        x, y = t_dump.tensor(t_row), b_dump.tensor(b_row)
        _same(tensor_metrics(x, y), _general(monkeypatch, x, y))
        measured += 1
    assert measured > 200
