"""What a diagnosis reports: :class:`Finding` rows gathered in a :class:`Diagnosis`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from nbprec._severity import SEVERITIES, Graded
from nbprec.errors import NbprecError

if TYPE_CHECKING:
    import pandas as pd

#: the columns of :attr:`Diagnosis.frame`
COLUMNS = ("kind", "severity", "where", "message", "values", "remedy")


class DiagnoseError(NbprecError):
    """A source could not be read (a missing file, an unreadable folder): the message names it and says why."""


@dataclass(frozen=True)
class Finding(Graded):
    """One thing found in a log or a pair of commands.

    Parameters
    ----------
    kind
        The rule that found it (``"host-oom"``, ``"ge-var-memory"``, ``"kb-mismatch"``, ``"log-error"``, ...;
        ``docs/diagnose.md`` lists them).
    severity
        ``"error"`` (the run failed or will not do what was meant), ``"warning"`` or ``"info"``.
    where
        ``file:line`` of the (first) line that shows it; text and standard input are ``<text>`` and ``<stdin>``.
    message
        What happened, with the numbers read from the log.
    values
        The numbers and names read and computed (JSON-ready): bytes, pids, the parameter values compared.
    remedy
        What to do, as text to copy (snippets, a corrected command); empty when there is nothing to change.

    Examples
    --------
    >>> f = Finding("ge-var-memory", "error", "train.log:12", "variable memory exhausted", {"current": 1}, "...")
    >>> f.is_error, f.to_dict()["where"]
    (True, 'train.log:12')
    """

    kind: str
    severity: str
    where: str
    message: str
    values: dict[str, Any] = field(default_factory=dict)
    remedy: str = ""


@dataclass(frozen=True)
class SourceInfo:
    """What was read of one source: its label, lines and bytes, and how many lines were longer than the cap
    (those are scanned in overlapping windows, never held whole)."""

    label: str
    lines: int = 0
    bytes: int = 0
    long_lines: int = 0


@dataclass(frozen=True)
class Diagnosis:
    """The findings of :func:`nbprec.diagnose.diagnose` or :func:`nbprec.diagnose.compare_commands`.

    Truthy when no finding is an error (like a passing result). :attr:`frame` is the table (one row per finding,
    the columns of :data:`COLUMNS`); :attr:`corrected_command` is the atc command with the tuning parameters of
    the aoe command (empty when there was nothing to compare or nothing to correct).

    Examples
    --------
    >>> from nbprec.diagnose import diagnose
    >>> d = diagnose("[INFO] GE(1,atc):2024-01-01 build graph ok")
    >>> bool(d), len(d.frame)
    (True, 0)
    """

    findings: tuple[Finding, ...] = ()
    sources: tuple[SourceInfo, ...] = ()
    corrected_command: str = ""
    notes: tuple[str, ...] = ()

    @property
    def has_errors(self) -> bool:
        """Whether any finding is an error."""
        return any(f.is_error for f in self.findings)

    def __bool__(self) -> bool:
        return not self.has_errors

    def __len__(self) -> int:
        return len(self.findings)

    def counts(self) -> dict[str, int]:
        """How many findings of each severity."""
        return {s: sum(f.severity == s for f in self.findings) for s in SEVERITIES}

    @property
    def frame(self) -> pd.DataFrame:
        """The findings as a DataFrame: kind, severity, where, message, values (a dict per row), remedy."""
        import pandas as pd

        return pd.DataFrame([f.to_dict() for f in self.findings], columns=list(COLUMNS))

    def of_kind(self, kind: str) -> list[Finding]:
        """The findings of one rule (``d.of_kind("host-oom")``)."""
        return [f for f in self.findings if f.kind == kind]

    def to_dict(self) -> dict[str, Any]:
        """The whole diagnosis as a plain dict (JSON-ready)."""
        return {
            "findings": [f.to_dict() for f in self.findings],
            "sources": [asdict(s) for s in self.sources],
            "corrected_command": self.corrected_command,
            "notes": list(self.notes),
            "counts": self.counts(),
        }

    def to_json(self, indent: int | None = 1) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, default=str)

    def to_text(self) -> str:
        """What ``nbprec diagnose`` prints."""
        from nbprec.diagnose.render import diagnosis_text

        return diagnosis_text(self)

    def to_html(self) -> str:
        """A static HTML table of the findings with their remedies (every string from the logs escaped)."""
        from nbprec.diagnose.render import diagnosis_html

        return diagnosis_html(self)

    def _repr_html_(self) -> str:
        return self.to_html()
