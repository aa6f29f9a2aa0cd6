"""Isolation: re-run one op on the target's own inputs in high precision, to measure that op's own error.

A low cosine at an op can be inherited from its inputs or introduced by its kernel. When the target run was
captured by nbprec from PyTorch, the dump holds the op's inputs and how it was called, so the op can be
re-run on exactly those inputs in float64 (or float32). The difference between the target's recorded
output and that re-run is the op's own error, free of anything upstream: rounding-sized for a healthy
kernel, larger for a faulty one.

Examples
--------
>>> result = isolate("runs/bf16_faulty", "Functional.gelu.1.forward")   # doctest: +SKIP
>>> result.verdict                                                       # doctest: +SKIP
'kernel error'
"""

from __future__ import annotations

import difflib
import html
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from nbprec._optional import require
from nbprec.compare.metrics import tensor_metrics
from nbprec.compare.rules import lower_precision
from nbprec.dump import Dump
from nbprec.errors import ComparisonError
from nbprec.safe_text import visible_text

#: Relative Euclidean distance one correctly rounded op may show against an exact re-run, per output dtype
#: (a few units of roundoff: bfloat16 2^-8, float16 2^-11, float32 2^-24). Healthy bfloat16 kernels of the
#: tiny demo (linear, gelu, layer_norm, softmax) measure RED ~0.0017; the planted faulty GELU 0.27.
OWN_ERROR_TOLERANCE: dict[str, float] = {
    "float64": 1e-12,
    "float32": 1e-5,
    "float16": 2e-3,
    "bfloat16": 1.5e-2,
    "float8_e4m3fn": 0.25,
    "float8_e5m2": 0.5,
}


@dataclass(frozen=True)
class IsolationResult:
    """The own error of one op: its recorded outputs against a high-precision re-run on its own inputs.

    Attributes
    ----------
    op : str
        The op that was re-run.
    api : str
        The torch API called.
    dtype : str
        The precision of the re-run.
    table : pandas.DataFrame
        One row per output slot: target dtype, cosine, rel_euclidean, max_abs_err, tolerance, within.
    verdict : str
        ``"kernel error"`` when an output's own error exceeds the rounding tolerance of its dtype, else
        ``"within rounding"``.
    """

    op: str
    api: str
    dtype: str
    table: pd.DataFrame
    verdict: str

    def __str__(self) -> str:
        rows = self.table[["slot", "target_dtype", "cosine", "rel_euclidean", "tolerance"]]
        return f"{self.op} ({self.api}) re-run in {self.dtype} on its own inputs: {self.verdict}\n" + rows.to_string(
            index=False, float_format=lambda v: f"{v:.6g}"
        )

    def _repr_html_(self) -> str:
        return visible_text(
            f"<p><b>{html.escape(self.op)}</b> ({html.escape(self.api)}) re-run in {html.escape(self.dtype)} "
            f"on its own inputs: <b>{html.escape(self.verdict)}</b></p>"
            + self.table.to_html(index=False, escape=True, float_format=lambda v: f"{v:.6g}")
        )


def _to_torch(torch: Any, array: np.ndarray, dtype: Any) -> Any:
    if array.dtype.kind == "f" or str(array.dtype) in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        return torch.from_numpy(np.asarray(array, dtype=np.float64)).to(dtype)
    return torch.from_numpy(np.array(array))


def isolate(target: Dump | str | os.PathLike[str], op: str, *, dtype: str = "float64") -> IsolationResult:
    """Re-run ``op`` on the target's own recorded inputs in ``dtype`` and measure the op's own error.

    Parameters
    ----------
    target
        A dump captured by nbprec from PyTorch in tensor mode (it records inputs and call signatures).
    op
        A forward API op, e.g. ``"Functional.gelu.1.forward"``.
    dtype
        ``"float64"`` (default) or ``"float32"``: the precision of the reference re-run.

    Raises
    ------
    ComparisonError
        When the dump does not record the call, lacks the input payloads, or the op is not replayable.
    """
    from nbprec.capture.signature import NotReplayableError, decode_call
    from nbprec.formats import open_dump

    torch = require("torch", "re-running an op in isolation")
    dump = target if isinstance(target, Dump) else open_dump(target)
    if dtype not in ("float64", "float32"):
        raise ComparisonError(f"isolation re-runs in float64 or float32, not {dtype!r}")
    call = dump.calls.get(op)
    if call is None:
        raise ComparisonError(_no_call_message(dump, op))
    rows = dump.index[dump.index["op"] == op]
    inputs, outputs = rows[rows["role"] == "input"], rows[rows["role"] == "output"]
    if not inputs["has_data"].all() or not outputs["has_data"].all():
        raise ComparisonError(f"{dump.path}: {op} has no tensor payloads (statistics mode?); isolation needs tensors")
    torch_dtype = getattr(torch, dtype)
    tensors = {row["slot"]: _to_torch(torch, dump.tensor(row), torch_dtype) for _, row in inputs.iterrows()}
    try:
        func, args, kwargs = decode_call(call, torch, tensors)
    except NotReplayableError as exc:
        raise ComparisonError(f"{dump.path}: {op} cannot be re-run: {exc}") from exc
    with torch.no_grad():
        try:
            result = func(*args, **kwargs)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise ComparisonError(f"{op}: re-running {call['api']} in {dtype} failed: {exc}") from exc
    from nbprec.capture.tensors import iter_tensors

    reference = {slot: t for slot, t in iter_tensors(torch, result)}
    records = []
    for _, row in outputs.iterrows():
        ref = reference.get(row["slot"])
        if ref is None:
            records.append({"slot": row["slot"], "target_dtype": row["dtype"], "reason": "re-run gave no such output"})
            continue
        metrics = tensor_metrics(dump.tensor(row), ref.detach().to(torch.float64).numpy())
        tol = OWN_ERROR_TOLERANCE.get(lower_precision(row["dtype"]) or "float64", 1e-12)
        red = metrics.values.get("rel_euclidean", np.nan)
        records.append(
            {
                "slot": row["slot"],
                "target_dtype": row["dtype"],
                "cosine": metrics.values.get("cosine", np.nan),
                "rel_euclidean": red,
                "max_abs_err": metrics.values.get("max_abs_err", np.nan),
                "tolerance": tol,
                "within": bool(red <= tol),
                "reason": metrics.reason,
            }
        )
    table = pd.DataFrame(records)
    judged = table.dropna(subset=["rel_euclidean"]) if "rel_euclidean" in table else table.iloc[0:0]
    verdict = "not measurable" if judged.empty else ("within rounding" if judged["within"].all() else "kernel error")
    return IsolationResult(op=op, api=str(call["api"]), dtype=dtype, table=table, verdict=verdict)


def _no_call_message(dump: Dump, op: str) -> str:
    """Why ``op`` cannot be re-run: a module or backward op, or no such op (with the nearest names)."""
    message = f"{dump.path}: no recorded call for {op!r}"
    if op in set(dump.index["op"]):
        if not op.endswith(".forward") or op.startswith("Module."):
            message += " (it is a module or backward op; isolation re-runs forward API ops)"
        return message + "; isolation needs a dump captured by nbprec from PyTorch"
    near = difflib.get_close_matches(op, list(dump.calls) or dump.index["op"].unique().tolist(), n=3, cutoff=0.6)
    if near:
        return f"{message}: no op of that name; did you mean {' or '.join(repr(n) for n in near)}?"
    if not dump.calls:
        return message + "; isolation needs a dump captured by nbprec from PyTorch"
    return f"{message}: no op of that name (nbprec.open(TARGET).calls lists the ops that can be re-run)"
