"""Verify a remedy: re-run the target with it, capture, compare with the benchmark, before and after side by side.

>>> v = nbprec.remedy.verify(setup, ov.remedies(report))   # doctest: +SKIP
>>> v.passed, v.table()                                     # doctest: +SKIP

Four captured runs (statistics mode by default): the benchmark and the target as they are (before), the
target with the remedy (after) and, when the remedy changes the loss scale, the benchmark at that scale (the
gradients of both sides then carry the same scale). Each side reports the comparison's first failing op and
failing count, the final outputs judged in memory (:mod:`nbprec.remedy.judge`: loss, outputs, gradients) and
the overflow scan of the target dump (first critical op, or none). The remedy *passes* when the final
outputs pass the rule and no op overflows.
"""

from __future__ import annotations

import html
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from nbprec.remedy.judge import Judgement, compare_runs, judge
from nbprec.remedy.remedy import Remedy
from nbprec.remedy.setup import RemedyError, RunResult, Setup


@dataclass
class Side:
    """One side of the before/after view: a captured target run judged against its benchmark.

    Attributes
    ----------
    label
        ``"before"`` or ``"after"``.
    run, bench
        The target and benchmark runs (their dumps are ``run.dump`` and ``bench.dump``).
    comparison
        ``nbprec.compare(run.dump, bench.dump, rule=...)``.
    judgement
        The final outputs judged in memory.
    overflow
        The overflow scan of the target dump (:class:`~nbprec.overflow.OverflowReport`).
    """

    label: str
    run: RunResult
    bench: RunResult
    comparison: Any
    judgement: Judgement
    overflow: Any

    @property
    def first_failing_op(self) -> str | None:
        """The comparison's first failing op (None when nothing unexplained fails)."""
        first = self.comparison.first_failing_op()
        return None if first is None else str(first["op"])

    @property
    def failing_ops(self) -> int:
        """How many ops fail (unexplained failures)."""
        return len(self.comparison.failing_ops())

    @property
    def ops(self) -> int:
        """How many ops were compared."""
        return len(self.comparison.ops)

    @property
    def first_overflow(self) -> str | None:
        """The first critical overflowing op of the target dump (None: no overflow)."""
        first = self.overflow.first_critical()
        if first is None and not self.overflow:  # abnormal values with no critical producer recorded
            first = self.overflow.first_abnormal()
        return None if first is None else str(first["op"])

    @property
    def passed(self) -> bool:
        """Final outputs pass and no op overflows."""
        return self.judgement.passed and self.first_overflow is None

    def row(self) -> dict[str, Any]:
        """The side's figures as plain values (the columns of :meth:`Verification.table`)."""
        j = self.judgement
        loss_err = abs(self.run.loss - self.bench.loss) / abs(self.bench.loss) if self.bench.loss else math.nan
        return {
            "loss scale": self.run.loss_scale,
            "first failing op": self.first_failing_op or "none",
            "failing ops": f"{self.failing_ops} of {self.ops}",
            "first overflow": self.first_overflow or "none",
            "loss (target / float32)": f"{self.run.loss:.6g} / {self.bench.loss:.6g}",
            "loss relative error": loss_err,
            "outputs": ", ".join(f"{n} {s}" for n, s in zip(j.table["name"], j.table["status"], strict=True)),
            "gradients cosine": j.metric("gradients", "cosine"),
            "gradients RED": j.metric("gradients", "rel_euclidean"),
            "non-finite gradients": f"{self.run.nonfinite_gradients} of {self.run.parameters}",
            "verdict": "pass" if self.passed else "fail",
        }


@dataclass
class Verification:
    """Before and after a remedy, side by side (:func:`verify` returns it); truthy when the remedy passes.

    Attributes
    ----------
    remedy
        The remedy verified.
    setup
        The configuration it was verified in.
    before, after
        The two :class:`Side` objects.
    folder
        Where the four dumps are.
    """

    remedy: Remedy
    setup: Setup
    before: Side
    after: Side
    folder: Path

    @property
    def passed(self) -> bool:
        """Whether the target with the remedy passes: final outputs within the rule, no overflow."""
        return self.after.passed

    def __bool__(self) -> bool:
        return self.passed

    @property
    def overflow_gone(self) -> bool:
        """Whether the target overflowed before and does not after."""
        return self.before.first_overflow is not None and self.after.first_overflow is None

    def table(self) -> pd.DataFrame:
        """Before / after, one row per figure."""
        before, after = self.before.row(), self.after.row()
        return pd.DataFrame({"before": before, "after": after}).rename_axis("figure")

    def headline(self) -> str:
        """The result in one sentence."""
        b, a = self.before, self.after
        what = self.remedy.describe()
        if self.passed:
            gone = f"; the overflow at {b.first_overflow} is gone" if b.first_overflow else ""
            return (
                f"Verified: with the remedy ({what}) the {self.setup.dtype} run passes {a.judgement.rule}{gone}; "
                f"failing ops {b.failing_ops} -> {a.failing_ops}."
            )
        why = []
        if not a.judgement.passed:
            why.append(f"{', '.join(a.judgement.failing())} still fail")
        if a.first_overflow:
            why.append(f"{a.first_overflow} still overflows")
        return f"Not fixed: with the remedy ({what}) {' and '.join(why)}; first failing op {a.first_failing_op}."

    def to_text(self) -> str:
        """The headline, notes and the before/after table as text."""
        lines = [self.headline()]
        lines += [f"  note: {n}" for n in self.remedy.notes]
        table = self.table().map(lambda v: f"{v:.4g}" if isinstance(v, float) else v)
        lines += ["", table.to_string()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<nbprec.remedy.Verification {'pass' if self.passed else 'fail'}: {self.remedy.describe()}>"

    def _repr_html_(self) -> str:
        table = self.table().map(lambda v: f"{v:.4g}" if isinstance(v, float) else v)
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.remedy.notes)
        return (
            f"<p><b>{html.escape(self.headline())}</b></p>" + (f"<ul>{notes}</ul>" if notes else "")
            + table.to_html(escape=True)
        )  # fmt: skip

    def summary(self) -> dict[str, Any]:
        """Plain values (JSON-ready)."""
        return {
            "remedy": self.remedy.to_dict(),
            "setup": self.setup.description,
            "passed": self.passed,
            "overflow_gone": self.overflow_gone,
            "headline": self.headline(),
            "before": {k: _plain(v) for k, v in self.before.row().items()},
            "after": {k: _plain(v) for k, v in self.after.row().items()},
            "folder": str(self.folder),
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`summary` as JSON."""
        target = Path(path)
        target.write_text(json.dumps(self.summary(), indent=1) + "\n", encoding="utf-8")
        return target

    def fix(self, **options: Any) -> Any:
        """The fix in the forms users paste (:func:`nbprec.remedy.emit_fix`)."""
        from nbprec.remedy.fixes import emit_fix

        return emit_fix(self.remedy, self.setup, **options)

    def view(self) -> Any:
        """The notebook remedy view on this result (needs ``nbprec[widgets]``)."""
        from nbprec._optional import require

        require("ipywidgets", "the nbprec remedy view")
        from nbprec.widgets.remedy import RemedyView

        return RemedyView(self.setup, verification=self)


def _plain(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _side(label: str, setup: Setup, run: RunResult, bench: RunResult) -> Side:
    from nbprec.overflow import scan

    assert run.dump is not None
    comparison = compare_runs(run, bench, rule=setup.rule, precision=setup.dtype)
    judgement = judge(run, bench, rule=setup.rule, precision=setup.dtype, check=setup.check, comparison=comparison)
    return Side(label, run, bench, comparison, judgement, scan(run.dump))


def check_names(setup: Setup, remedy: Remedy, seen: list[str]) -> None:
    """Raise :class:`RemedyError` when the remedy names an op the target never called."""
    missing = [op for op in remedy.ops if op not in set(seen)]
    if missing:
        import difflib

        close = difflib.get_close_matches(missing[0], seen, n=3)
        hint = f" (close: {', '.join(close)})" if close else ""
        raise RemedyError(
            f"the target run never called {', '.join(missing)}{hint}: op names count calls per step as nbprec's "
            "capture does; take them from a capture of this same step"
        )


def verify(
    setup: Setup,
    remedy: Any = None,
    *,
    out: str | os.PathLike[str] | None = None,
    mode: str = "statistics",
    echo: Any = None,
) -> Verification:
    """Re-run ``setup``'s target with ``remedy``, capture, compare, and put before and after side by side.

    Parameters
    ----------
    setup
        The model, inputs and target configuration.
    remedy
        Anything :meth:`Remedy.of` reads: ``nbprec.overflow.remedies(...)``, a comparison or its verdict, the
        text nbprec printed, op names, module paths, a dict, a bisect result.
    out
        Folder for the dumps (``before/``, ``after/``, ``bench/``, ``bench_after/``); a new temporary folder
        when omitted.
    mode
        Capture mode, ``"statistics"`` (default) or ``"tensor"``.
    echo
        A callable receiving progress lines (e.g. ``print``).

    Returns
    -------
    Verification
    """
    fix = Remedy.of(remedy)
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="nbprec-remedy-"))
    folder.mkdir(parents=True, exist_ok=True)
    say = echo or (lambda _line: None)
    options = {"mode": mode}
    try:
        modules = setup.module_paths()
    except Exception as exc:  # the user's model factory failed: say so plainly
        raise RemedyError(f"could not build the model: {exc}") from exc
    unknown = [m for m in fix.modules if m not in modules]
    if unknown:
        raise RemedyError(f"no module {', '.join(map(repr, unknown))} in the model; its modules include {modules[1:9]}")
    say(f"verify: capturing the benchmark and the target as they are ({setup.description}) ...")
    bench = setup.run("bench", capture=folder / "bench", capture_options=options)
    before = setup.run("target", capture=folder / "before", capture_options=options)
    say(f"verify: capturing the target with the remedy ({fix.describe()}) ...")
    after = setup.run(
        "target",
        ops=fix.ops,
        modules=fix.modules,
        loss_scale=fix.loss_scale,
        capture=folder / "after",
        capture_options=options,
    )
    check_names(setup, fix, after.seen)
    bench_after = bench
    if after.loss_scale != bench.loss_scale and setup.backward:
        bench_after = setup.run(
            "bench", loss_scale=after.loss_scale, capture=folder / "bench_after", capture_options=options
        )
    say("verify: comparing ...")
    return Verification(
        fix, setup, _side("before", setup, before, bench), _side("after", setup, after, bench_after), folder
    )
