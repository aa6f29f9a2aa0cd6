"""Remedy view: verify a remedy on the model at hand, bisect to the smallest keep-in-float32 set, see the fix.

A thin view over :mod:`nbprec.remedy`: the text box holds a remedy in any form :meth:`~nbprec.remedy.Remedy.of`
reads (op names, module paths, ``loss_scale=N``), "verify" calls :func:`nbprec.remedy.verify`, "bisect" calls
:func:`nbprec.remedy.bisect` and puts the set it found in the box; the view shows the core objects' own
before/after table, headline and fix. It computes nothing itself.

>>> view = RemedyView(setup, remedy=ov.remedies(report))   # doctest: +SKIP
>>> view.verify(); view                                     # doctest: +SKIP
"""

from __future__ import annotations

import re
from typing import Any

from nbprec.errors import NbprecError
from nbprec.remedy import BisectResult, Remedy, Setup, Verification, bisect, emit_fix, verify
from nbprec.widgets.base import View
from nbprec.widgets.static import esc, html_table

_SCALE = re.compile(r"\bloss_scale\s*=\s*([^\s,;]+)")


def parse_remedy(text: str) -> Remedy:
    """The remedy typed in the box: names separated by commas, spaces or new lines, and ``loss_scale=N``
    (``2**16`` allowed); or any text nbprec printed.

    >>> parse_remedy("Functional.gelu.1.forward, head loss_scale=2**16").describe()
    'keep in float32: op Functional.gelu.1.forward, module head; loss scale 2**16'
    """
    scale = None
    match = _SCALE.search(text)
    if match:
        value = match.group(1)
        base, _, exponent = value.partition("**")
        try:
            scale = float(base) ** float(exponent) if exponent else float(value)
        except ValueError:
            raise NbprecError(f"bad loss_scale {value!r}: write e.g. loss_scale=65536 or loss_scale=2**16") from None
        text = text[: match.start()] + text[match.end() :]
    if "\n#" in text or "for path in" in text or "is the first op that fails" in text:
        return Remedy.of(text).with_loss_scale(scale) if scale is not None else Remedy.of(text)
    names = [n for n in re.split(r"[\s,;]+", text) if n]
    return Remedy.of(names).with_loss_scale(scale) if names or scale is not None else Remedy()


def remedy_text(remedy: Remedy) -> str:
    """What the box shows for a remedy (the inverse of :func:`parse_remedy`)."""
    parts = [*remedy.ops, *remedy.modules]
    if remedy.loss_scale is not None:
        parts.append(f"loss_scale={remedy.loss_scale:g}")
    return ", ".join(parts)


class RemedyView(View):
    """Verify, bisect and fix, on the model at hand.

    Parameters
    ----------
    setup
        The :class:`~nbprec.remedy.Setup` (model, inputs, target configuration); without it the view only
        shows the results it was given.
    remedy
        The remedy to start from (anything :meth:`Remedy.of` reads).
    verification, bisection
        Results computed already.
    out
        Folder for the verification's dumps (a new temporary one per verification when omitted).
    """

    title = "remedy view"

    def __init__(
        self,
        setup: Setup | None = None,
        remedy: Any = None,
        *,
        verification: Verification | None = None,
        bisection: BisectResult | None = None,
        out: str | None = None,
    ) -> None:
        super().__init__()
        self.setup = setup
        self.verification = verification
        self.bisection = bisection
        self.remedy = Remedy.of(remedy) if remedy is not None else Remedy.of(verification or bisection)
        self.out = out
        self.note = ""
        self.log: list[str] = []
        self._fixes: dict[Remedy, str] = {}

    # -- actions: each calls one core function -------------------------------------------------------------
    def set_text(self, text: str) -> Remedy | None:
        """Read the remedy from the box's text; None (and the error shown, the box left as typed) if unreadable."""
        try:
            self.remedy = parse_remedy(text)
        except NbprecError as exc:
            self.note = str(exc)
            self.refresh(keep_text=True)
            return None
        self.note = ""
        self.refresh()
        return self.remedy

    def verify(self) -> Verification | None:
        """Verify the current remedy (:func:`nbprec.remedy.verify`)."""
        if self.setup is None:
            self.note = "no setup: give RemedyView a nbprec.remedy.Setup to re-run the model"
        else:
            self.log = []
            try:
                self.verification = verify(self.setup, self.remedy, out=self.out, echo=self._echo)
                self.note = ""
            except NbprecError as exc:
                self.note = str(exc)
        self.refresh()
        return self.verification

    def bisect(self, **options: Any) -> BisectResult | None:
        """Bisect to the smallest keep-in-float32 set (:func:`nbprec.remedy.bisect`); the set becomes the remedy."""
        if self.setup is None:
            self.note = "no setup: give RemedyView a nbprec.remedy.Setup to re-run the model"
        else:
            self.log = []
            try:
                self.bisection = bisect(self.setup, progress=self._echo, **options)
                self.remedy = self.bisection.remedy
                self.note = ""
            except NbprecError as exc:
                self.note = str(exc)
        self.refresh()
        return self.bisection

    def fix_text(self) -> str:
        """The fix of the current remedy (:func:`nbprec.remedy.emit_fix`), without the runtime's source."""
        if self.remedy.empty:
            return ""
        if self.remedy not in self._fixes:  # a profiled run of the model, once per remedy
            profile = self.bisection.cost.profile if self.bisection is not None else None
            self._fixes[self.remedy] = emit_fix(self.remedy, self.setup, profile=profile).to_text()
        return self._fixes[self.remedy]

    def _echo(self, line: str) -> None:
        self.log.append(line)
        if self.built:
            self._log.value = f"<pre style='margin:0'>{esc(chr(10).join(self.log[-6:]))}</pre>"

    # -- display --------------------------------------------------------------------------------------------
    def summary_html(self) -> str:
        """Headline, before/after table, bisection result and notes, as HTML (the core objects' own words)."""
        parts = [f"<p>Remedy: <b>{esc(self.remedy.describe())}</b></p>"]
        parts += [f"<p style='color:#a00'>{esc(n)}</p>" for n in (self.note, *self.remedy.notes) if n]
        if self.bisection is not None:
            parts.append(f"<p>{esc(self.bisection.headline())}</p>")
        v = self.verification
        if v is not None:
            color = "#070" if v.passed else "#a00"
            parts.append(f"<p style='color:{color}'><b>{esc(v.headline())}</b></p>")
            parts.append(html_table(v.table(), index=True, max_rows=30))
        return "".join(parts)

    def _build(self) -> Any:
        import ipywidgets as w

        self._text = w.Textarea(
            value=remedy_text(self.remedy),
            placeholder="op names, module paths, loss_scale=2**16 (or paste what nbprec printed)",
            layout=w.Layout(width="95%", height="60px"),
        )
        self._verify = w.Button(description="verify", button_style="primary", disabled=self.setup is None)
        self._bisect = w.Button(description="bisect", disabled=self.setup is None)
        self._verify.on_click(lambda _b: self.set_text(self._text.value) is not None and self.verify())
        self._bisect.on_click(lambda _b: self.bisect())
        self._summary = w.HTML()
        self._log = w.HTML()
        self._fix = w.Textarea(layout=w.Layout(width="95%", height="200px"), disabled=True)
        head = w.HTML("<h3 style='margin:4px 0'>Remedy</h3>")
        return w.VBox([head, self._text, w.HBox([self._verify, self._bisect]), self._log, self._summary, self._fix])

    def refresh(self, keep_text: bool = False) -> None:
        """Push the state into the widgets (once built); ``keep_text`` leaves the box as the user typed it."""
        if not self.built:
            return
        if not keep_text:
            self._text.value = remedy_text(self.remedy)
        self._summary.value = self.summary_html()
        try:
            self._fix.value = self.fix_text()
        except NbprecError as exc:
            self._fix.value = f"# no fix: {exc}"

    def to_html(self) -> str:
        fix = self.fix_text()
        block = f"<pre style='font-size:11px'>{esc(fix)}</pre>" if fix else ""
        return f"<div class='nbprec-remedy'>{self.summary_html()}{block}</div>"

    def __repr__(self) -> str:
        return f"<nbprec remedy view: {self.remedy.describe()}>"


def remedy_view(setup: Setup | None = None, remedy: Any = None, **options: Any) -> RemedyView:
    """A :class:`RemedyView` (display it in a notebook cell)."""
    return RemedyView(setup, remedy, **options)
