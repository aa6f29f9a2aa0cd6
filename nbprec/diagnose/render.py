"""A diagnosis as text (the command line) and as static HTML (notebooks without widgets; every string escaped)."""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nbprec.diagnose.findings import Diagnosis, Finding

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_COLOURS = {"error": "#fde0dc", "warning": "#fff3cd", "info": "#e8f0fe"}


def printable(text: str) -> str:
    """``text`` with control characters (NUL, ESC, ...) shown as ``\\xNN``, so a log cannot drive the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


def esc(text: object) -> str:
    """HTML-escaped, printable text."""
    return html.escape(printable(str(text)), quote=True)


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line else "" for line in text.splitlines())


def finding_text(finding: Finding, short: bool = False) -> str:
    """One finding as ``severity  kind  where`` / message / remedy lines."""
    lines = [
        f"{finding.severity:<7} {finding.kind}  {printable(finding.where)}",
        _indent(printable(finding.message), "  "),
    ]
    remedy = finding.values.get("change", "") if short and finding.kind == "kb-mismatch" else finding.remedy
    if remedy:
        lines += ["  remedy:", _indent(printable(str(remedy)))]
    return "\n".join(lines)


def diagnosis_text(diagnosis: Diagnosis) -> str:
    """What ``nbprec diagnose`` prints: the findings, the corrected atc command once, then the counts."""
    blocks = [finding_text(f, short=bool(diagnosis.corrected_command)) for f in diagnosis.findings]
    if diagnosis.corrected_command:
        blocks.append("corrected atc command (its other arguments kept):\n  " + printable(diagnosis.corrected_command))
    counts = diagnosis.counts()
    read = diagnosis.notes[0] if diagnosis.notes else ""
    if diagnosis.findings:
        tail = f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)"
    else:
        tail = "no problems found"
    blocks.append("\n".join([f"{tail}{f' ({read})' if read else ''}", *(f"note: {n}" for n in diagnosis.notes[1:])]))
    return "\n\n".join(blocks) + "\n"


def pre_html(text: str) -> str:
    """``text`` as an escaped ``<pre>`` one click selects whole (to copy); empty for empty text."""
    if not text:
        return ""
    return (
        "<pre class='nbprec-remedy' style='user-select:all;white-space:pre-wrap;background:#f6f8fa;"
        f"padding:4px 6px;margin:2px 0;font-size:12px'>{esc(text)}</pre>"
    )


def diagnosis_html(diagnosis: Diagnosis, max_rows: int = 200) -> str:
    """The findings as an HTML table (severity, kind, where, message, remedy to copy); every string escaped."""
    counts = diagnosis.counts()
    if not diagnosis.findings:
        head = "<p><b>No problems found.</b>"
    else:
        head = f"<p><b>{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)</b>"
    notes = "".join(f"<br><span style='color:#555'>{esc(n)}</span>" for n in diagnosis.notes)
    cell = "style='text-align:left;vertical-align:top;padding:2px 6px'"
    rows = []
    for f in diagnosis.findings[:max_rows]:
        colour = _COLOURS.get(f.severity, "")
        rows.append(
            f"<tr style='background:{colour}'><td {cell}>{esc(f.severity)}</td><td {cell}>{esc(f.kind)}</td>"
            f"<td {cell}>{esc(f.where)}</td><td {cell}>{esc(f.message)}</td><td {cell}>{pre_html(f.remedy)}</td></tr>"
        )
    more = len(diagnosis.findings) - max_rows
    table = ""
    if rows:
        header = "".join(f"<th {cell}>{h}</th>" for h in ("severity", "kind", "where", "message", "remedy"))
        table = (
            "<table class='nbprec-diagnosis' style='border-collapse:collapse;font-size:12px'>"
            f"<thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        ) + (f"<p>… {more} more findings</p>" if more > 0 else "")
    fixed = ""
    if diagnosis.corrected_command:
        fixed = "<p><b>Corrected atc command</b> (its other arguments kept):</p>" + pre_html(
            diagnosis.corrected_command
        )
    return f"<div class='nbprec-diagnose'>{head}{notes}</p>{table}{fixed}</div>"
