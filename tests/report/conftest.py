"""Report fixtures: the tiny demo runs (real torch captures), their report, and runs with a hostile op name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

HOSTILE_OP = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory):
    """(target, benchmark): the tiny encoder in bfloat16 with the planted faulty GELU, and in float32."""
    pytest.importorskip("torch")
    from nbprec.demo import tiny_runs

    runs = {r.name: r.path for r in tiny_runs(tmp_path_factory.mktemp("tiny"))}
    return runs["tiny_bf16_faulty"], runs["tiny_fp32"]


@pytest.fixture(scope="session")
def tiny_report(tiny_pair, tmp_path_factory):
    """The report of the tiny pair, written with the fetched assets (skips when they cannot be had)."""
    pytest.importorskip("nbclient")
    from nbprec.report import write_report

    out = tmp_path_factory.mktemp("report") / "tiny report.html"
    return write_report(*tiny_pair, out, title="Tiny encoder <b>bf16</b> vs fp32")


def write_mlp_run(path: Path, dtype: type, fault: bool) -> Path:
    """A 3-op MLP computed in numpy and written in nbprec's dump format; its middle op has a hostile name.

    ``fault`` perturbs the middle op's output (the culprit a report must name).
    """
    from nbprec.formats.native import NativeDumpWriter

    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    w1 = (rng.standard_normal((32, 32)) / 6).astype(np.float32)
    w2 = (rng.standard_normal((32, 8)) / 6).astype(np.float32)
    h = (x.astype(dtype) @ w1.astype(dtype)).astype(dtype)
    g = np.tanh(h).astype(dtype)
    if fault:
        g = (g + rng.standard_normal(g.shape).astype(dtype) * dtype(0.5)).astype(dtype)
    y = (g @ w2.astype(dtype)).astype(dtype)
    ops = [
        ("Functional.linear.0.forward", "linear", [x.astype(dtype)], h, []),
        (HOSTILE_OP, "tanh", [h], g, [("0", "Functional.linear.0.forward")]),
        ("Functional.linear.1.forward", "linear", [g], y, [("0", HOSTILE_OP)]),
    ]
    with NativeDumpWriter(path, run=path.name, meta={"dtype": np.dtype(dtype).name}) as w:
        for order, (op, op_type, inputs, output, edges) in enumerate(ops):
            base = {"step": 0, "rank": 0, "order": order, "op": op, "op_type": op_type, "api": op_type,
                    "module": "mlp", "direction": "forward"}  # fmt: skip
            for slot, arr in enumerate(inputs):
                w.write_tensor({**base, "name": f"{op}.input.{slot}", "role": "input", "slot": str(slot)}, arr)
            w.write_tensor({**base, "name": f"{op}.output.0", "role": "output", "slot": "0"}, output)
            for slot, producer in edges:
                w.write_edge(f"{producer}.output.0", op, slot)
    return path


@pytest.fixture(scope="session")
def hostile_pair(tmp_path_factory):
    """(target, benchmark) whose failing op is named ``<img src=x onerror=alert(1)>``, in folders with HTML names."""
    root = tmp_path_factory.mktemp("hostile")
    target = write_mlp_run(root / "fp16 <b onmouseover=alert(2)>run", np.float16, fault=True)
    bench = write_mlp_run(root / "fp32 & <i>bench</i>", np.float32, fault=False)
    return target, bench
