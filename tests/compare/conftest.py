"""Dumps made in memory from a real numpy network, for comparison tests."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nbprec.dump import Dump
from nbprec.dump_index import make_index


def mlp_dump(
    tmp_path,
    *,
    dtype=np.float32,
    fault_at: int | None = None,
    name: str = "run",
    layers: int = 6,
    prefix: str = "Functional",
    extra_call_at: int | None = None,
) -> Dump:
    """Forward pass of a seeded 6-layer MLP (linear + gelu-ish), one op per layer step, in ``dtype``.

    ``fault_at`` perturbs the output of that op (a planted faulty kernel); ``extra_call_at`` inserts an extra
    ``Tensor.clone`` op (a call the other run does not make) before that op.
    """
    rng = np.random.default_rng(7)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    weights = [rng.standard_normal((32, 32)).astype(np.float32) / np.sqrt(32) for _ in range(layers)]
    records, arrays = [], {}
    h = x.astype(dtype)
    order = 0
    calls: dict[str, int] = {}

    def emit(api, inputs, output):
        nonlocal order
        n = calls.get(api, 0)
        calls[api] = n + 1
        op = f"{prefix}.{api}.{n}.forward"
        for role, slot, arr in [*(("input", str(i), a) for i, a in enumerate(inputs)), ("output", "0", output)]:
            tname = f"{op}.{role}.{slot}"
            arrays[tname] = np.ascontiguousarray(arr)
            records.append(
                {
                    "name": tname,
                    "op": op,
                    "op_type": api,
                    "api": f"{prefix}.{api}",
                    "call": n,
                    "direction": "forward",
                    "role": role,
                    "slot": slot,
                    "dtype": np.dtype(arr.dtype).name if arr.dtype != ml_dtypes.bfloat16 else "bfloat16",
                    "shape": arr.shape,
                    "order": order,
                    "has_data": True,
                    "file": tname,
                    "max": float(np.asarray(arr, np.float64).max()),
                    "min": float(np.asarray(arr, np.float64).min()),
                    "mean": float(np.asarray(arr, np.float64).mean()),
                    "norm": float(np.linalg.norm(np.asarray(arr, np.float64))),
                }
            )
        order += 1

    for i, w in enumerate(weights):
        if extra_call_at is not None and i == extra_call_at:
            emit("clone", [h], h.copy())
        wd = w.astype(dtype)
        y = (h.astype(np.float32) @ wd.astype(np.float32)).astype(dtype)
        if fault_at == 2 * i:
            y = (y.astype(np.float32) * 1.5 + 0.3).astype(dtype)
        emit("linear", [h, wd], y)
        z = np.tanh(y.astype(np.float32)).astype(dtype)
        if fault_at == 2 * i + 1:
            z = (z.astype(np.float32) * -1).astype(dtype)
        emit("tanh", [y], z)
        h = z
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    return Dump(make_index(records, run=name), path=folder, format="memory", loader=lambda r: arrays[r["file"]])


@pytest.fixture
def make_mlp_dump(tmp_path):
    return lambda **kw: mlp_dump(tmp_path, **kw)
