"""What :func:`nbprec.remedy.bisect` returns: the keep-in-float32 set it found, and how it was found."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from nbprec.remedy.cost import Cost
from nbprec.remedy.judge import Judgement
from nbprec.remedy.remedy import Remedy
from nbprec.remedy.setup import Setup


@dataclass
class BisectResult:
    """The smallest keep-in-float32 set found, what it cost to find, and what it costs to run.

    Attributes
    ----------
    keep
        The ops (or module paths) to keep in float32, in execution order.
    granularity
        ``"ops"`` or ``"modules"``.
    remedy
        :attr:`keep` as a :class:`Remedy` (with the loss scale bisected under).
    passed
        Whether the target with :attr:`keep` passes (the check of the final outputs).
    minimal
        Whether 1-minimality was verified: removing any one element makes the check fail.
    runs
        Model runs made (reference runs included).
    candidates
        The candidate list the search ran on, and ``stage`` the stage it came from (``"blamed"``,
        ``"failing kinds"``, ``"all ops"``, or ``"none needed"`` when the target already passes).
    cost
        FLOPs and time share of the kept ops (:class:`~nbprec.remedy.cost.Cost`).
    history
        One row per run: ``run``, ``size`` (ops kept), ``passed``, ``why`` (what the run tested) and
        ``failing`` (what failed).
    judgement
        The final outputs with :attr:`keep` against the benchmark.
    notes
        What a reader should know (budget reached, a non-monotone step, ...).
    """

    keep: list[str]
    granularity: str
    remedy: Remedy
    passed: bool
    minimal: bool
    runs: int
    candidates: list[str]
    stage: str
    cost: Cost
    history: pd.DataFrame
    judgement: Judgement | None
    setup: Setup
    notes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.passed

    def headline(self) -> str:
        """The result in one sentence."""
        what = f"{len(self.keep)} {'op' if self.granularity == 'ops' else 'module'}" + (
            "s" if len(self.keep) != 1 else ""
        )
        if self.stage == "none needed":
            return f"Nothing to keep: the {self.setup.description} run already passes ({self.runs} runs)."
        minimal = "1-minimal" if self.minimal else "not proven minimal"
        return (
            f"Keep {what} in float32 ({minimal}; {self.cost.describe()}), found in {self.runs} runs from "
            f"{len(self.candidates)} candidates ({self.stage}): {', '.join(self.keep) or '-'}."
        )

    def to_text(self) -> str:
        """The headline, the notes and the run history."""
        lines = [self.headline(), *(f"  note: {n}" for n in self.notes)]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<nbprec.remedy.BisectResult keep={self.keep} runs={self.runs} minimal={self.minimal}>"

    def _repr_html_(self) -> str:
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
        return (
            f"<p><b>{html.escape(self.headline())}</b></p>" + (f"<ul>{notes}</ul>" if notes else "")
            + self.history.to_html(index=False, escape=True)
        )  # fmt: skip

    def verify(self, **options: Any) -> Any:
        """Verify :attr:`remedy` with captures (:func:`nbprec.remedy.verify`)."""
        from nbprec.remedy.verify import verify

        return verify(self.setup, self.remedy, **options)

    def fix(self, **options: Any) -> Any:
        """The fix in the forms users paste (:func:`nbprec.remedy.emit_fix`)."""
        from nbprec.remedy.fixes import emit_fix

        return emit_fix(self.remedy, self.setup, profile=self.cost.profile, **options)

    def view(self) -> Any:
        """The notebook remedy view on this result (needs ``nbprec[widgets]``)."""
        from nbprec._optional import require

        require("ipywidgets", "the nbprec remedy view")
        from nbprec.widgets.remedy import RemedyView

        return RemedyView(self.setup, bisection=self)


__all__ = ["BisectResult"]
