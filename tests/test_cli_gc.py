"""``nbprec compare`` and ``nbprec.compare`` run with Python's cyclic garbage collector paused: they restore it
after, and a comparison leaves no garbage cycles per pair (so the pause cannot grow memory with the dump)."""

from __future__ import annotations

import gc
import importlib
from pathlib import Path

import numpy as np

from nbprec.cli import main
from nbprec.formats.native import NativeDumpWriter

FIXTURES = Path(__file__).parent / "fixtures"


def test_the_compare_command_pauses_the_collector_and_restores_it(tmp_path, monkeypatch):
    module = importlib.import_module("nbprec.compare")
    seen = []
    original = module.compare

    def watched(*args, **kwargs):
        seen.append(gc.isenabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(module, "compare", watched)
    target, bench = FIXTURES / "msprobe" / "bf16_tensor_mix", FIXTURES / "msprobe" / "fp32_tensor_mix"
    assert gc.isenabled()
    assert main(["compare", str(target), str(bench), "-o", str(tmp_path / "out"), "--no-progress"]) == 0
    assert seen == [False]
    assert gc.isenabled()


def _pair(root: Path, n: int) -> tuple[Path, Path]:
    """A target (float16) and benchmark (float32) nbprec dump of ``n`` linear ops."""
    values = np.random.default_rng(n).standard_normal((n, 32)).astype(np.float32)
    for run in ("target", "bench"):
        with NativeDumpWriter(root / run, run=run) as writer:
            for i, value in enumerate(values):
                record = {"name": f"Functional.linear.{i}.forward.output.0", "op": f"Functional.linear.{i}.forward"}
                record.update(order=i, api="linear", call=i, direction="forward", role="output", slot="0")
                writer.write_tensor(record, value if run == "bench" else value.astype(np.float16))
    return root / "target", root / "bench"


def _unreachable_after_compare(target: Path, bench: Path, out: Path) -> int:
    """Objects in garbage cycles that one ``nbprec compare`` command leaves, the collector off meanwhile."""
    gc.collect()
    gc.disable()
    try:
        assert main(["compare", str(target), str(bench), "-o", str(out), "--no-progress"]) in (0, 1)
        return gc.collect()
    finally:
        gc.enable()


def test_a_comparison_leaves_no_garbage_cycles_per_pair(tmp_path):
    """Comparing 600 pairs leaves about as many unreachable objects as comparing 30: what cycles there are
    come from the command's own set-up, not from each pair."""
    few = _pair(tmp_path / "few", 30)
    many = _pair(tmp_path / "many", 600)
    _unreachable_after_compare(*few, tmp_path / "warm")  # first-use caches
    counts = [_unreachable_after_compare(*pair, tmp_path / f"out{i}") for i, pair in enumerate((few, many))]
    assert counts[1] - counts[0] < 100, counts  # one cycle per pair would add 570 at the least


def test_the_library_call_pauses_the_collector_and_restores_the_state_it_found():
    import nbprec

    target, bench = FIXTURES / "msprobe" / "bf16_tensor_mix", FIXTURES / "msprobe" / "fp32_tensor_mix"
    during = []

    def progress(done: int, total: int) -> None:  # (called in the caller's thread as pairs are measured)
        during.append(gc.isenabled())

    assert gc.isenabled()
    comp = nbprec.compare(target, bench, progress=progress)
    assert len(comp.table) > 0
    assert during and not any(during)
    assert gc.isenabled()
    gc.disable()  # a program that turned the collector off keeps it off
    try:
        nbprec.compare(target, bench)
        assert not gc.isenabled()
    finally:
        gc.enable()
