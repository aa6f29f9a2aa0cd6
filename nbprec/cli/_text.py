"""Small text helpers shared by the command-line commands: counts, byte sizes, metadata lines."""

from __future__ import annotations

import argparse


def _human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _count(n: int, noun: str, plural: str = "") -> str:
    """``n`` and ``noun``, in the plural unless ``n`` is 1 (``1 failing op``, ``3 failing ops``)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def _meta_text(meta: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in meta.items() if isinstance(v, (str, int, float)))


def _counts_text(counts: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in counts.items()) or "-"


def _rule_arg(args: argparse.Namespace) -> str:
    """The rule from --rule, or from --threshold (and --metric) when given."""
    if getattr(args, "threshold", None) is not None:
        return f"{args.metric}={args.threshold}"
    return args.rule
