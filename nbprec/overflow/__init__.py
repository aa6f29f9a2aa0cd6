"""Overflow analysis: find the first overflowing op, judge whether it mattered, predict and fix it.

- :func:`scan` a target dump: per-tensor NaN/inf/saturation, per-op level, the first critical op, and with a
  benchmark the "did it matter?" verdict (:class:`OverflowReport`).
- :func:`headroom` of a float32 run: which ops would overflow or underflow in float16/bfloat16/float8
  (:class:`HeadroomReport`).
- :func:`remedies`: snippets that keep the blamed ops in float32, a loss-scale bound, an Ascend mixlist.

Examples
--------
>>> report = nbprec.overflow.scan("runs/fp16", bench="runs/fp32")   # doctest: +SKIP
>>> report.first_critical()["op"], report.impact.verdict            # doctest: +SKIP
"""

from __future__ import annotations

from nbprec.overflow.headroom import HeadroomReport, headroom
from nbprec.overflow.impact import assess_impact
from nbprec.overflow.numerics import SUSPICIOUS_FP16, dtype_limits
from nbprec.overflow.remedies import Remedies, loss_scale_bound, remedies
from nbprec.overflow.report import LEVELS, Impact, OverflowReport
from nbprec.overflow.scan import AMPLIFICATION_FACTOR, scan

__all__ = [
    "AMPLIFICATION_FACTOR",
    "LEVELS",
    "SUSPICIOUS_FP16",
    "HeadroomReport",
    "Impact",
    "OverflowReport",
    "Remedies",
    "assess_impact",
    "dtype_limits",
    "headroom",
    "loss_scale_bound",
    "remedies",
    "scan",
]
