"""Compare a target dump with a benchmark dump: matching, metrics, rules, and the first failing op.

The entry point is :func:`compare`; it returns a :class:`Comparison`. They are imported on first use, so that
the package's numpy-free modules (:mod:`nbprec.compare.early`, :mod:`nbprec.compare._sums`) load without numpy.
"""

from __future__ import annotations

from nbprec._lazy import lazy_names

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nbprec.compare.comparison import Comparison
    from nbprec.compare.engine import compare
    from nbprec.compare.rules import Rule, Threshold, get_rule, preset_names

#: What this package offers, and the module each comes from (imported when first asked for).
_FROM = {
    "Comparison": "nbprec.compare.comparison",
    "compare": "nbprec.compare.engine",
    "Rule": "nbprec.compare.rules",
    "Threshold": "nbprec.compare.rules",
    "get_rule": "nbprec.compare.rules",
    "preset_names": "nbprec.compare.rules",
}


__getattr__ = lazy_names(__name__, _FROM, globals())


__all__ = ["Comparison", "Rule", "Threshold", "compare", "get_rule", "preset_names"]
