"""A dump for the overflow scan's tests: large payloads of every status among small ones (tests/overflow)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pandas as pd

from nbprec.formats.native import NativeDumpWriter

#: Elements of the large payloads: 200,000 float16 values hold 400 KB, beyond PARALLEL_FROM.
LARGE = 200_000


def mixed_run(folder: Path) -> Path:
    """Ten ops of large float16, bfloat16 and float32 payloads (normal, saturated, NaN, inf), small ones between,
    an integer and an empty tensor."""
    rng = np.random.default_rng(5)
    with NativeDumpWriter(folder, mode="tensor") as w:
        for order in range(10):
            op = f"Tensor.op{order}.0.forward"
            x = rng.standard_normal(LARGE).astype(np.float16)
            out = (x * 8).astype([np.float16, ml_dtypes.bfloat16, np.float32][order % 3])
            if order == 3:
                out[17] = np.float16(65504)  # saturated
            if order == 5:
                out[::1000] = np.nan
            if order == 7:
                out[9] = np.inf
            tensors = {"input.0": x, "input.1": x[:50].copy(), "output.0": out}
            if order == 2:
                tensors["output.1"] = np.arange(7, dtype=np.int64)
                tensors["output.2"] = np.zeros((0, 3), np.float16)
            for key, array in tensors.items():
                role, slot = key.split(".")
                record = {"name": f"{op}.{key}", "op": op, "op_type": f"op{order}", "order": order}
                record.update(role=role, slot=slot, direction="forward", api=f"Tensor.op{order}")
                w.write_tensor(record, array)
    return folder


def assert_report_of_one_thread(got, serial, calls: list[tuple[int, int]]) -> None:
    """``got``, the report of :func:`mixed_run`'s dump read in parallel, is ``serial``'s (read on one thread) to
    the bit, with the fixture's statuses, and ``calls``, its progress, count up to every tensor."""
    pd.testing.assert_frame_equal(got.tensors, serial.tensors, check_exact=True)
    pd.testing.assert_frame_equal(got.ops, serial.ops, check_exact=True)
    status = dict(zip(got.tensors["name"], got.tensors["status"], strict=True))
    assert status["Tensor.op3.0.forward.output.0"] == "saturated"
    assert status["Tensor.op5.0.forward.output.0"] == "nan"
    assert status["Tensor.op7.0.forward.output.0"] == "inf"
    assert status["Tensor.op2.0.forward.output.1"] == "n/a"
    assert status["Tensor.op2.0.forward.output.2"] == "empty"
    assert got.first_critical()["op"] == "Tensor.op3.0.forward"
    total = len(got.tensors)
    done = [d for d, _ in calls]
    assert done == sorted(done) and done[-1] == total and {t for _, t in calls} == {total}
