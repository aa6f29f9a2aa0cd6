"""bench/capture.py's held-out models (``cnn``, ``rnn``): built the same way each time, captured by nbprec like
the transformers, and timed end to end by the bench (no timing is asserted)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from bench_support import BENCH, bench_module

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name", ["cnn", "rnn"])
def test_a_held_out_model_is_the_same_model_in_every_worker(name):
    bench = bench_module("capture")
    (_, first), (_, second) = bench.build(name), bench.build(name)
    loss = first()
    assert torch.isfinite(loss)
    assert loss.item() == second().item()  # same seed, same images and labels: both workers run the same step
    assert first().item() == loss.item()  # and every step does the same work (no optimizer step: same weights)


def test_nbprec_captures_the_cnn_step(tmp_path):
    import nbprec
    from nbprec.capture import capture

    model, step = bench_module("capture").build("cnn")
    with capture(model, tmp_path / "dump", mode="statistics"):
        step()
    dump = nbprec.open(tmp_path / "dump")
    types = set(dump.index["op_type"].tolist())
    assert {"conv2d", "batch_norm", "relu"} <= types, types
    directions = set(dump.index["direction"].tolist())
    assert directions == {"forward", "backward"}, directions
    convs = dump.index[dump.index["op_type"] == "conv2d"]
    calls = convs.groupby("direction")["op"].nunique().to_dict()
    assert calls == {"forward": 9, "backward": 9}, calls  # the stem, two a block and two shortcuts, both ways


def test_nbprec_captures_every_time_step_of_the_rnn(tmp_path):
    import nbprec
    from nbprec.capture import capture

    model, step = bench_module("capture").build("rnn")
    with capture(model, tmp_path / "dump", mode="statistics"):
        step()
    index = nbprec.open(tmp_path / "dump").index
    calls = index.groupby(["op_type", "direction"])["op"].nunique().to_dict()
    for op_type in ("gru_cell", "GRUCell", "tanh", "linear"):  # the hand-stepped cell: one call a time step
        assert calls[(op_type, "forward")] == calls[(op_type, "backward")] == 24, (op_type, calls)
    for op_type in ("lstm", "LSTM", "embedding", "cross_entropy"):
        assert calls[(op_type, "forward")] == calls[(op_type, "backward")] == 1, (op_type, calls)


def test_the_bench_times_the_held_out_models(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(BENCH / "capture.py"), "--models", "cnn,rnn", "--repeat", "1", "--skip-msprobe",
         "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("cnn", "rnn"):
        assert re.search(rf"^{name}: medians of 1 interleaved rounds", proc.stdout, re.M), proc.stdout
    assert re.search(r"^machine: \d+ cores, ", proc.stdout, re.M), proc.stdout  # the figures say where they came from
    for label in ("nbprec statistics", "nbprec tensor"):
        line = next(line for line in proc.stdout.splitlines() if line.strip().startswith(label))
        assert re.search(r"[0-9.]+x plain .* \d+ ops +\d+ records +hook cost +[0-9.-]+ us/op", line), line
