"""Compare a target dump with a benchmark dump: matching, metrics, rules, and the first failing op.

The entry point is :func:`compare`; it returns a :class:`Comparison`.
"""

from __future__ import annotations

from nbprec.compare.comparison import Comparison
from nbprec.compare.engine import compare
from nbprec.compare.rules import Rule, Threshold, get_rule, preset_names

__all__ = ["Comparison", "Rule", "Threshold", "compare", "get_rule", "preset_names"]
