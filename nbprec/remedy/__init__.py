"""Close the loop: apply a remedy, prove it works, find the smallest set of ops to keep in float32, emit the fix.

- :class:`Setup`: the model, its inputs (a ``forward(model)`` callable) and the target configuration
  (float16, bfloat16 or autocast, loss scale) next to its float32 benchmark.
- :func:`verify`: re-run the target with a :class:`Remedy` (ops/modules kept in float32, a loss scale),
  capture, compare, before and after side by side (:class:`Verification`).
- :func:`bisect`: the smallest (1-minimal) set of ops or modules to keep in float32 (:class:`BisectResult`).
- :func:`emit_fix`: the fix as users paste it: a PyTorch snippet, a loss-scale setting, CANN's mixlist and
  keep_dtype files (:class:`Fix`).
- :func:`targeted_dump`: from an overflow to a small dump of only the overflowing ops, in both configurations,
  and whether the overflow mattered (:class:`TargetedDump`).

torch is imported when a model runs. See ``docs/remedy.md``.
"""

from __future__ import annotations

from nbprec.remedy.bisect import GRANULARITIES, BisectResult, bisect
from nbprec.remedy.cost import Cost, cost_of
from nbprec.remedy.fixes import Fix, emit_fix
from nbprec.remedy.judge import Judgement, judge
from nbprec.remedy.remedy import Remedy
from nbprec.remedy.setup import NotComparableError, RemedyError, RunResult, Setup
from nbprec.remedy.targeted import TargetedDump, targeted_dump
from nbprec.remedy.verify import Side, Verification, verify

__all__ = [
    "GRANULARITIES",
    "BisectResult",
    "Cost",
    "Fix",
    "Judgement",
    "NotComparableError",
    "Remedy",
    "RemedyError",
    "RunResult",
    "Setup",
    "Side",
    "TargetedDump",
    "Verification",
    "bisect",
    "cost_of",
    "emit_fix",
    "judge",
    "targeted_dump",
    "verify",
]
