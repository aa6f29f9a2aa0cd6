"""Time the writing of a comparison's files: the C number formatter against ``repr``, same run.

Every CSV nbprec writes formats its float64 numbers with :func:`nbprec.floattext.float_texts` (C, exactly
``repr``'s text) where ``nbprec._floattext`` is built, else with ``repr``. This script times, in this process,
interleaved (the order rotates from round to round), medians of ``--runs``:

- ``float_texts`` against a ``repr`` list over ``--values`` metric-like float64 values (ns per value);
- with ``--dumps T B``: each file ``nbprec compare -o OUT`` writes (``Comparison.save``: comparison.json and
  tensors.csv; ops.csv; the msaccucmp and msprobe layouts), for the comparison of the two dumps, three ways: as
  nbprec writes it (columns of numbers formatted by the C row joiner as it joins them,
  :func:`nbprec.floattext.number_column`), with each number made a text first (``float_texts``, then joined: the
  way before the joiner took numbers), and with ``repr`` (the formatter switched off).

Usage::

    .venv/bin/python bench/writing.py [--values 500000] [--runs 7] [--dumps TARGET BENCH]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from timing import interleave, machine, median, runs_text

import nbprec
from nbprec import floattext, safe_text
from nbprec.compare import exports, msprobe_layout
from nbprec.safe_text import write_table_csv


def numbers(n: int) -> np.ndarray:
    """Values as a comparison's columns hold them: cosines near 1, errors over many decades, statistics, NaN."""
    rng = np.random.default_rng(0)
    parts = [
        1 - rng.random(n // 4) * 1e-4,
        10.0 ** rng.uniform(-12, 2, n // 4),
        rng.standard_normal(n // 4).astype(np.float32).astype(np.float64),
        rng.standard_normal(n - 3 * (n // 4)) * 50,
    ]
    values = np.concatenate(parts)
    values[::97] = np.nan
    return values


#: The modules that make columns of numbers for the row joiner (their ``number_column``, swapped for the texts way).
_NUMBER_COLUMN_USERS = (safe_text, exports, msprobe_layout)


def _as_texts(values: object, nan: str = "") -> list[str]:
    """:func:`nbprec.floattext.number_column`'s cells made texts first (the way before the joiner took numbers)."""
    return floattext.number_texts(floattext.number_column(values, nan))


def timed(work: Callable[[], object], c_formatter: bool, numbers_joined: bool = True) -> float:
    """Seconds of ``work()`` with the C formatter on or off, numbers joined as numbers or made texts first."""
    saved = floattext._C
    if not c_formatter:
        floattext._C = None
    if not numbers_joined:
        for module in _NUMBER_COLUMN_USERS:
            module.number_column = _as_texts
    try:
        start = time.perf_counter()
        work()
        return time.perf_counter() - start
    finally:
        floattext._C = saved
        for module in _NUMBER_COLUMN_USERS:
            module.number_column = floattext.number_column


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--values", type=int, default=500_000, help="float64 values to format")
    parser.add_argument("--runs", type=int, default=7, help="interleaved rounds (at least 5)")
    parser.add_argument("--dumps", nargs=2, metavar=("TARGET", "BENCH"), help="also time writing their comparison")
    args = parser.parse_args()
    runs = max(5, args.runs)
    if floattext._formatter() is None:
        raise SystemExit("nbprec._floattext is not built: nothing to compare with repr (make install)")
    print(f"machine: {machine()}")
    values = numbers(args.values)
    times = interleave(
        {
            "float_texts": lambda: timed(lambda: floattext.float_texts(values, ""), True),
            "repr": lambda: timed(lambda: ["" if v != v else repr(v) for v in values.tolist()], True),
        },
        runs,
        "format ",
    )
    fast, slow = median(times["float_texts"]), median(times["repr"])
    summary = [
        f"  {args.values} values: float_texts {fast / args.values * 1e9:.0f} ns, repr {slow / args.values * 1e9:.0f} ns"
        f" a value ({slow / fast:.2f}x)"
    ]
    if args.dumps:
        comp = nbprec.compare(*args.dumps)
        out = Path(tempfile.mkdtemp(prefix="nbprec-bench-writing-"))
        files: dict[str, Callable[[], object]] = {
            "save (comparison.json, tensors.csv)": lambda: comp.save(out / "saved"),
            "ops.csv": lambda: write_table_csv(comp._ops_columns, out / "ops.csv"),
            "compare_msaccucmp.csv": lambda: comp.to_csv(out / "msaccucmp.csv", layout="msaccucmp"),
            "compare_msprobe.csv": lambda: comp.to_csv(out / "msprobe.csv", layout="msprobe"),
        }
        try:
            for what, work in files.items():
                t = interleave(
                    {
                        "C": lambda w=work: timed(w, True),
                        "texts": lambda w=work: timed(w, True, numbers_joined=False),
                        "repr": lambda w=work: timed(w, False),
                    },
                    runs,
                    f"{what} ",
                )
                c, texts, slow = median(t["C"]), median(t["texts"]), median(t["repr"])
                summary.append(
                    f"  {what}: C {c:.4f} s, numbers made texts first {texts:.4f} s ({texts / c:.2f}x), repr"
                    f" {slow:.4f} s ({slow / c:.2f}x); runs C {runs_text(t['C'])}, texts first {runs_text(t['texts'])}"
                )
        finally:
            shutil.rmtree(out, ignore_errors=True)
        summary.insert(0, f"  comparison of {len(comp.columns)} tensors ({args.dumps[0]} vs {args.dumps[1]})")
    print(f"\nmedians of {runs} interleaved rounds, in-process:")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
