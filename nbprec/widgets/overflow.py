"""Overflow view: the target dump's overflow report (:mod:`nbprec.overflow`), linked to the selection."""

from __future__ import annotations

import importlib
from typing import Any

import pandas as pd

from nbprec.errors import NbprecError
from nbprec.widgets.base import View, caption
from nbprec.widgets.model import Selection
from nbprec.widgets.static import esc, html_table
from nbprec.widgets.tensor_source import TensorSource

_COLUMNS = ("order", "op", "level", "reason")
#: What a view shows while a slow computation runs (the kernel is busy; this was sent before it started).
#: What the view says before its scan ran.
NOT_SCANNED_HTML = (
    "<p>The overflow scan reads every tensor of the target dump: it runs when this tab is first opened, or with the "
    "button.</p>"
)
PROGRESS_HTML = "<div class='nbprec-progress'><progress style='width:160px'></progress> <i>{what}...</i></div>"


def run_scan(dump: Any) -> tuple[Any, str]:
    """``nbprec.overflow.scan(dump)`` and '' , or ``None`` and why the report is unavailable."""
    try:
        module = importlib.import_module("nbprec.overflow")
        scan = getattr(module, "scan", None)
        if scan is None or not callable(scan):
            scan = importlib.import_module("nbprec.overflow.scan").scan
    except (ImportError, AttributeError) as exc:
        return None, f"nbprec.overflow is not available ({exc})"
    try:
        return scan(dump), ""
    except (NbprecError, OSError, ValueError) as exc:
        return None, f"overflow scan failed: {exc}"


class OverflowView(View):
    """First critical op and the ranked overflow table; picking a row selects the op everywhere.

    Parameters
    ----------
    selection
        The shared selection.
    source
        Where the target dump comes from (scanned on first use).
    report
        An already computed :class:`nbprec.overflow.OverflowReport` (optional).
    """

    title = "overflow view"

    def __init__(self, selection: Selection, source: TensorSource | None = None, report: Any = None) -> None:
        super().__init__()
        self.selection = selection
        self.source = source
        self._report = report
        self._scanned = report is not None
        self.note = ""
        selection.observe(self._on_selection)

    @property
    def scanned(self) -> bool:
        """Whether the report exists (the widget scans only on :meth:`load`: a scan reads every tensor)."""
        return self._scanned

    def load(self) -> None:
        """Scan now (once), showing a progress indicator in the widget while the scan runs."""
        if self._scanned:
            return
        if self.built:
            self._summary.value = PROGRESS_HTML.format(what="scanning the target dump for overflow")
            self._load.disabled = True
        self.report  # noqa: B018 - the scan
        self.refresh()

    @property
    def report(self) -> Any:
        """The overflow report (scanned on first access), or ``None`` with :attr:`note` saying why."""
        if not self._scanned:
            self._scanned = True
            dump = self.source.dump("target") if self.source is not None else None
            if dump is None:
                self.note = "no target dump to scan"
            else:
                self._report, self.note = run_scan(dump)
        return self._report

    def ranked(self) -> pd.DataFrame:
        """Flagged ops, first critical on top (empty when there is no report)."""
        report = self.report
        if report is None:
            return pd.DataFrame(columns=list(_COLUMNS))
        ranked = report.ranked()
        return ranked[[c for c in _COLUMNS if c in ranked]]

    def summary_html(self) -> str:
        """First critical op, counts, and the selected op's overflow level."""
        report = self.report
        if report is None:
            return f"<p>Overflow report unavailable: {esc(self.note)}</p>"
        first = report.first_critical()
        first_txt = "none" if first is None else f"<b>{esc(first['op'])}</b> ({esc(first.get('reason', ''))})"
        ops = report.ops
        levels = ops["level"].value_counts()
        counts = ", ".join(f"{esc(k)}: {int(v)}" for k, v in levels.items() if k)
        selected = ""
        if self.selection.op is not None:
            hit = ops[ops["op"] == self.selection.op]
            level = "" if hit.empty else str(hit.iloc[0]["level"])
            selected = f"<br>selected op {esc(self.selection.op)}: level <b>{esc(level or 'none')}</b>"
        npu = ""
        if getattr(report, "npu", None) is not None and len(report.npu):  # an NPU dump's overflow debug files
            cols = ["op", "op_type", "unit", "status", "conditions", "note"]
            npu = "<p>NPU overflow detection (Opdebug files):</p>" + html_table(report.npu[cols], max_rows=10)
        return f"<p>First critical op: {first_txt}<br>ops by level: {counts or 'no overflow'}{selected}</p>{npu}"

    def _build(self) -> Any:
        import ipywidgets as w

        self._summary = w.HTML()
        self._load = w.Button(description="scan for overflow", icon="", button_style="info")
        self._load.on_click(lambda _: self.load())
        self._list = w.Select(rows=8, tooltip="flagged", layout=w.Layout(flex="1 1 auto", width="auto"),
                              _dom_classes=("nbprec-mono",))  # fmt: skip
        self._list.observe(self._picked, names="value")
        self._updating = False
        self._flagged = w.HBox([caption("flagged"), self._list], layout=w.Layout(width="98%"))
        return w.VBox([self._summary, self._load, self._flagged])

    def _on_selection(self, op: str | None) -> None:
        """Only the selected op's line and the list's highlight change (the list is not resent)."""
        if not self.built or not self._scanned:
            return
        self._updating = True
        try:
            self._summary.value = self.summary_html()
            values = {v for _, v in self._list.options}
            self._list.value = op if op in values else None
        finally:
            self._updating = False

    def _picked(self, change: dict[str, Any]) -> None:
        if not self._updating and change["new"]:
            self.selection.select(change["new"])

    def refresh(self) -> None:
        """Push the report into the widgets (once built)."""
        if not self.built:
            return
        if not self._scanned:
            self._summary.value = NOT_SCANNED_HTML
            self._flagged.layout.display = "none"
            return
        self._load.layout.display = "none"
        self._flagged.layout.display = None
        self._updating = True
        try:
            ranked = self.ranked()
            self._summary.value = self.summary_html()
            self._list.options = [(f"{r['level']:<8} {r['op']}", str(r["op"])) for _, r in ranked.head(200).iterrows()]
            ops = set(self._list.options and [v for _, v in self._list.options])
            self._list.value = self.selection.op if self.selection.op in ops else None
        finally:
            self._updating = False

    def to_html(self) -> str:
        """The report as HTML once scanned; before that, what the widget says (displaying the view, which also
        builds this fallback, never starts the scan)."""
        if not self._scanned:
            return f"<div class='nbprec-overflow'>{NOT_SCANNED_HTML}</div>"
        return f"<div class='nbprec-overflow'>{self.summary_html()}{html_table(self.ranked(), max_rows=30)}</div>"
