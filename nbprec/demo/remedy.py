"""The demo's last step: find the remedy of its faulty run, verify it, and write the fix.

- tiny: the bfloat16 run with the planted faulty GELU (wrong in low precision only): bisect to the smallest set
  of ops to keep in float32 (:func:`nbprec.remedy.bisect`), verify it with captures, emit the fix;
- minilm: the float16 fine-tuning step at loss scale 2**24: the loss-scale bound ``nbprec overflow`` prints
  for the float32 run, passed straight to :func:`nbprec.remedy.verify`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _setups(model: str) -> Any:
    from nbprec.remedy import Setup

    if model == "tiny":
        from nbprec.demo.tiny import F, build_tiny

        clean, ids, labels = build_tiny("float32")
        faulty, _, _ = build_tiny("float32", faulty=True)
        return Setup(clean, lambda m: F.cross_entropy(m(ids).float(), labels), dtype="bfloat16", target_model=faulty)
    from nbprec.demo.minilm import LOSS_SCALE, F, build_minilm

    net, inputs, labels = build_minilm("float32")
    return Setup(net, lambda m: F.cross_entropy(m(**inputs).float(), labels), dtype="float16", loss_scale=LOSS_SCALE)


def demo_remedy(out: str | os.PathLike[str], model: str = "tiny") -> list[str]:
    """Find, verify and write the remedy of the demo's faulty run into ``out/remedy``; returns the lines to print.

    Examples
    --------
    >>> print("\\n".join(demo_remedy("demo-output")))   # doctest: +SKIP
    """
    import nbprec.overflow as ov
    from nbprec.remedy import bisect, emit_fix, verify

    root = Path(out) / "remedy"
    setup = _setups(model)
    if model == "tiny":
        found = bisect(setup, progress=False, workdir=str(root / "bisect"))
        remedy, profile = found.remedy, found.cost.profile
        how = [
            f"the remedy, bisected in {found.runs} runs: keep {', '.join(found.keep)} in float32 "
            f"({'1-minimal' if found.minimal else 'not proven minimal'}; {found.cost.describe()})"
        ]
        target = "tiny_bf16_faulty"
    else:
        fixes = ov.remedies(ov.scan(Path(out) / "minilm_fp32"), device_type="cpu")
        remedy, profile = fixes, None
        how = [f"the remedy nbprec overflow prints for minilm_fp32, passed straight in: {fixes.loss_scale.snippet()}"]
        target = "minilm_fp16"
    checked = verify(setup, remedy, out=root, mode="tensor" if model == "tiny" else "statistics")  # as the demo runs
    b, a = checked.before, checked.after
    written = emit_fix(checked.remedy, setup, profile=profile).write(root / "fix")
    return [
        f"verifying the remedy of {target} ({setup.description}):",
        *(f"  {line}" for line in how),
        f"  before: {b.failing_ops} failing ops of {b.ops}, first failing op {b.first_failing_op or 'none'}, "
        f"first overflow {b.first_overflow or 'none'}",
        f"  after:  {a.failing_ops} failing ops of {a.ops}, first failing op {a.first_failing_op or 'none'}, "
        f"first overflow {a.first_overflow or 'none'}",
        f"  {checked.headline()}",
        f"  the fix: {written['runtime']} (KeepFloat32), {written['text']}"
        + (f", {written['mixlist']} (CANN modify_mixlist)" if "mixlist" in written else ""),
    ]
