"""A pair whose payloads repeat, byte for byte, those of a pair measured shortly before takes that pair's values
(``nbprec.compare.small_pairs``: msprobe writes each tensor at both ends of the API calls it records): the same
table to the bit as measuring it, never for bytes that differ, and no payload held once a comparison ends."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import numpy as np
import pytest

import nbprec
from nbprec.compare._sums import FUSED
from nbprec.compare.metrics import tensor_metrics
from nbprec.compare.small_pairs import RECENT, small_pair, small_pairs

small_pairs_module = importlib.import_module("nbprec.compare.small_pairs")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
PAIRS = [
    (FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix"),
    (FIXTURES / "fp16_tensor_mix", FIXTURES / "fp32_tensor_mix"),
    (FIXTURES / "autocast_bf16_tensor_mix", FIXTURES / "fp32_tensor_mix"),
]
needs_fused = pytest.mark.skipif(FUSED is None, reason="the compiled kernel is not built")


def _same_tables(a, b) -> None:
    assert list(a.columns) == list(b.columns)
    for column in a.columns:
        x, y = a[column].to_numpy(), b[column].to_numpy()
        if x.dtype.kind == "f":
            assert np.array_equal(x, y, equal_nan=True), column
        else:
            assert [str(v) for v in x] == [str(v) for v in y], column


RUNS_ON = {"inline": {"workers": 1}, "processes": {"workers": 2, "parallel": "processes"},
           "threads": {"workers": 2, "parallel": "threads"}}  # fmt: skip


@needs_fused
@pytest.mark.parametrize(("target", "bench"), PAIRS, ids=lambda p: p.name)
@pytest.mark.parametrize("runs_on", list(RUNS_ON))
def test_a_comparison_is_the_same_with_repeats_taken(target, bench, runs_on, monkeypatch):
    """Real msprobe runs (each tensor written at both ends of its calls): two thirds of their pairs repeat an
    earlier one's bytes; with them taken, every column of the table is what measuring each pair gives, inline,
    on forked processes (each keeping its own payloads) and on threads (sharing this process's)."""
    RECENT.reused = 0
    taken = nbprec.compare(target, bench, **RUNS_ON[runs_on]).table
    reused = RECENT.reused
    monkeypatch.setattr(RECENT, "find", lambda *args: None)
    measured = nbprec.compare(target, bench, **RUNS_ON[runs_on]).table
    _same_tables(taken, measured)
    if runs_on != "processes":  # (a forked worker counts the repeats it takes in its own process)
        assert reused > len(taken) // 2
    assert RECENT.nbytes == 0 and not RECENT.by_key and not RECENT.order  # nothing held after the comparison


def _npy(path: Path, values: np.ndarray) -> str:
    np.save(path, values)
    return str(path)


@needs_fused
def test_only_the_same_bytes_are_taken(tmp_path):
    """Pairs with the recorded extremes of one measured before but other bytes (the same values in another order,
    one side changed) are measured; a pair of other files holding the same bytes is taken, and its values are
    those ``tensor_metrics`` gives on its arrays."""
    RECENT.clear()
    rng = np.random.default_rng(5)
    y = rng.standard_normal(4096).astype(np.float32)
    x = (y * (1 + rng.normal(0, 3e-3, y.size))).astype(np.float32)
    shape = (y.size,)
    extremes = (float(x.min()), float(x.max()), float(y.min()), float(y.max()))
    changed = x.copy()
    changed[100] = x[101]  # (within the extremes: only the bytes tell)
    assert (changed.min(), changed.max()) == (x.min(), x.max())
    cases = {
        "first": (x, y),
        "reversed": (x[::-1].copy(), y[::-1].copy()),
        "target changed": (changed, y),
        "the same bytes again": (x.copy(), y.copy()),
    }
    RECENT.reused = 0
    for n, (label, (a, b)) in enumerate(cases.items()):
        t_file, b_file = _npy(tmp_path / f"t{n}.npy", a), _npy(tmp_path / f"b{n}.npy", b)
        values, reason, _held, counts = small_pair(t_file, "float32", b_file, "float32", shape, extremes, "npy")
        expected = tensor_metrics(a, b, extremes=extremes)
        for column, value in expected.values.items():
            assert values[column] == value or (math.isnan(value) and math.isnan(values[column])), (label, column)
        assert reason == expected.reason and counts == (0, 0)
        assert RECENT.reused == (1 if label == "the same bytes again" else 0), label
    RECENT.clear()


@needs_fused
def test_a_batch_takes_its_own_repeats(tmp_path):
    """``small_pairs`` (a thread's batch, one kernel call) measures a pair once when the batch holds it twice, and
    gives both what ``small_pair`` gives."""
    RECENT.clear()
    rng = np.random.default_rng(6)
    y = rng.standard_normal(2048).astype(np.float32)
    x = (y + rng.normal(0, 1e-3, y.size)).astype(np.float32)
    extremes = (float(x.min()), float(x.max()), float(y.min()), float(y.max()))
    files = [(_npy(tmp_path / f"t{n}.npy", x), _npy(tmp_path / f"b{n}.npy", y)) for n in range(3)]
    items = [(t, "float32", b, "float32", (y.size,), extremes) for t, b in files]
    calls = []
    real = FUSED.pair_metrics_many
    small_pairs_module.FUSED = type("Counting", (), {
        "pair_metrics_many": staticmethod(lambda batch: calls.append(len(batch)) or real(batch)),
        "same_bytes": staticmethod(FUSED.same_bytes),
    })  # fmt: skip
    try:
        batch = small_pairs(items, "npy")
    finally:
        small_pairs_module.FUSED = FUSED
    assert calls == [1]  # one pair measured, two taken
    RECENT.clear()
    single = small_pair(*items[0], "npy")
    for found in batch:
        assert found[0] == single[0] and found[1:] == single[1:]
    assert batch[0][0] is not batch[1][0]  # each its own dict: the engine adds columns to it
    RECENT.clear()


def test_what_is_kept_stays_bounded():
    """At most ``PAIRS`` pairs and ``BYTES`` bytes are kept, the oldest let go first; ``clear`` lets all go."""
    kept = type(RECENT)()
    measured = ({"cosine": 1.0}, "", True, (0, 0))
    for n in range(kept.PAIRS + 10):
        data = memoryview(bytes([n % 256]) * 1000)
        kept.add((1, 1, 1000, (0.0, float(n), 0.0, 1.0)), data, data, measured)
    assert len(kept.order) == kept.PAIRS and kept.nbytes == kept.PAIRS * 2000
    assert (1, 1, 1000, (0.0, 0.0, 0.0, 1.0)) not in kept.by_key  # the oldest went first
    big = memoryview(bytes(kept.BYTES // 8))
    for n in range(6):
        kept.add((1, 1, len(big), (0.0, float(n), 0.0, 1.0)), big, big, measured)
    assert kept.nbytes <= kept.BYTES
    kept.add((1, 1, 1000, None), data, data, measured)  # no recorded extremes: not kept
    assert (1, 1, 1000, None) not in kept.by_key
    kept.clear()
    assert kept.nbytes == 0 and not kept.order and not kept.by_key


@needs_fused
def test_same_bytes():
    data = bytes(range(256)) * 512
    assert FUSED.same_bytes(data, bytearray(data)) and FUSED.same_bytes(b"", b"")
    assert not FUSED.same_bytes(data, data[:-1])  # other lengths
    changed = bytearray(data)
    changed[-1] ^= 1
    assert not FUSED.same_bytes(data, changed) and not FUSED.same_bytes(memoryview(data)[1:], memoryview(data)[:-1])
    with pytest.raises(TypeError):
        FUSED.same_bytes(data)
