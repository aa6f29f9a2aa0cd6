"""Diagnosis view: paste or load a log (or an aoe and an atc command), see the findings and copy the remedies.

A thin view over :func:`nbprec.diagnose.diagnose`: the view keeps what was pasted and loaded, calls the core on
each change, and shows the :class:`~nbprec.diagnose.Diagnosis` it returns. Without widgets it renders as the
core's static HTML (every string escaped).
"""

from __future__ import annotations

import io
from typing import Any

import pandas as pd

from nbprec.diagnose import Diagnosis, diagnose
from nbprec.diagnose.render import diagnosis_html, esc, pre_html
from nbprec.errors import NbprecError
from nbprec.widgets.base import View

_TABLE_COLUMNS = ["severity", "kind", "where", "message"]
_PASTED = "<pasted>"


class DiagnosisView(View):
    """Findings of the logs and commands given, pasted or loaded, with their remedies to copy.

    Parameters
    ----------
    *sources
        What to diagnose from the start (paths, text, ``bytes``), as :func:`nbprec.diagnose.diagnose` takes.

    Examples
    --------
    >>> view = DiagnosisView()
    >>> _ = view.paste("[ERROR] GE(1,python3):... current graph size[1073741824] exceeds total graph size[1]")
    >>> view.table()["kind"].tolist()
    ['ge-graph-memory']
    """

    title = "diagnosis"

    def __init__(self, *sources: Any) -> None:
        super().__init__()
        self.sources = tuple(sources)
        self.pasted = ""
        self.uploads: dict[str, bytes] = {}
        self.problem = ""
        self.diagnosis = Diagnosis()
        self.run()

    # -- state (callable without widgets, as the tests do) -------------------------------------------------
    def run(self) -> Diagnosis:
        """Diagnose the sources, the pasted text and the loaded files again; refresh the view."""
        items: list[Any] = list(self.sources)
        if self.pasted.strip():
            items.append(_named(_PASTED, self.pasted.encode("utf-8", "surrogatepass")))
        items += [_named(name, data) for name, data in self.uploads.items()]
        self.problem = ""
        if items:
            try:
                self.diagnosis = diagnose(*items)
            except NbprecError as exc:
                self.diagnosis, self.problem = Diagnosis(), str(exc)
        else:
            self.diagnosis = Diagnosis()
        self.refresh()
        return self.diagnosis

    def paste(self, text: str) -> Diagnosis:
        """Replace the pasted text (a log, dmesg output, an aoe and an atc command) and diagnose."""
        self.pasted = text
        return self.run()

    def load(self, name: str, content: bytes) -> Diagnosis:
        """Add a loaded file (``name`` labels its findings) and diagnose."""
        self.uploads[name] = bytes(content)
        return self.run()

    def clear(self) -> Diagnosis:
        """Forget the pasted text and the loaded files."""
        self.pasted, self.uploads = "", {}
        return self.run()

    def table(self) -> pd.DataFrame:
        """The findings shown: severity, kind, where, message."""
        return self.diagnosis.frame[_TABLE_COLUMNS]

    def remedies(self) -> list[tuple[str, str]]:
        """``(label, remedy)`` of each finding that has one, in table order."""
        return [(f"{f.kind} at {f.where}", f.remedy) for f in self.diagnosis.findings if f.remedy]

    # -- widgets -----------------------------------------------------------------------------------------
    def _build(self) -> Any:
        import ipywidgets as w

        self._text = w.Textarea(
            placeholder="Paste a log, dmesg output, or an aoe command and an atc command (one per line)",
            layout=w.Layout(width="98%", height="140px"),
        )
        self._upload = w.FileUpload(multiple=True, description="load logs")
        self._button = w.Button(description="diagnose", button_style="primary")
        self._clear = w.Button(description="clear")
        self._summary = w.HTML()
        self._remedy_box = w.VBox()
        self._button.on_click(lambda _b: self.paste(self._text.value))
        self._clear.on_click(self._cleared)
        self._upload.observe(self._uploaded, names="value")
        controls = w.HBox([self._button, self._upload, self._clear])
        header = w.HTML("<h3 style='margin:4px 0'>Diagnosis</h3>")
        return w.VBox([header, self._text, controls, self._summary, self._remedy_box])

    def _cleared(self, _button: Any = None) -> None:
        if self.built:
            self._text.value = ""
        self.clear()

    def _uploaded(self, change: dict[str, Any]) -> None:
        for name, content in _upload_files(change.get("new")):
            self.uploads[name] = content
        self.run()

    def refresh(self) -> None:
        """Push the diagnosis into the widgets (once built): the table, then one copyable remedy per finding."""
        if not self.built:
            return
        import ipywidgets as w

        self._summary.value = self.summary_html()
        self._remedy_box.children = tuple(
            w.HTML(f"<b>{esc(label)}</b>{pre_html(remedy)}") for label, remedy in self.remedies()
        )

    def summary_html(self) -> str:
        """The problem reading a source (if any) and the findings table without remedies."""
        note = f"<p style='color:#b71c1c'>{esc(self.problem)}</p>" if self.problem else ""
        table = diagnosis_html(_without_remedies(self.diagnosis))
        return note + table

    def to_html(self) -> str:
        note = f"<p style='color:#b71c1c'>{esc(self.problem)}</p>" if self.problem else ""
        return f"<div class='nbprec-diagnosis-view'>{note}{diagnosis_html(self.diagnosis)}</div>"

    def _repr_html_(self) -> str:
        return self.to_html()


def _named(name: str, data: bytes) -> io.BytesIO:
    stream = io.BytesIO(data)
    stream.name = name  # the label of its findings' "where"
    return stream


def _without_remedies(diagnosis: Diagnosis) -> Diagnosis:
    from dataclasses import replace

    return replace(diagnosis, findings=tuple(replace(f, remedy="") for f in diagnosis.findings))


def _upload_files(value: Any) -> list[tuple[str, bytes]]:
    """``(name, content)`` of a FileUpload value (ipywidgets 8: a tuple of dicts; 7: a dict by name)."""
    if not value:
        return []
    if isinstance(value, dict):
        return [(str(name), bytes(item.get("content", b""))) for name, item in value.items()]
    return [(str(item.get("name", "upload")), bytes(item.get("content", b""))) for item in value]
