"""What a configuration check reports: :class:`Finding` rows, and :class:`ConfigError` for what cannot be generated."""

from __future__ import annotations

from dataclasses import dataclass

from nbprec._severity import Graded
from nbprec.errors import NbprecError


class ConfigError(NbprecError):
    """A dump or overflow configuration could not be generated or read: the message says why and how to fix it."""


@dataclass(frozen=True)
class Finding(Graded):
    """One thing a check found in a configuration.

    Parameters
    ----------
    severity
        ``"error"`` (CANN or msprobe rejects it, or nothing useful is dumped), ``"warning"`` (it runs, but
        probably not as meant: every step dumped, a disk that will fill) or ``"info"`` (worth knowing).
    message
        What was found, naming the parameter (and the line of a snippet, when known).
    fix
        What to write instead (empty when there is nothing to change).
    check
        A short stable name of the check (``"both-enabled"``, ``"step-syntax"``, ...), listed in
        ``docs/npu-config.md``.

    Examples
    --------
    >>> f = Finding("error", "dump_mode 'outputs' is not one of input, output, all", 'dump_mode="output"', "dump-mode")
    >>> bool(f.is_error), f.to_dict()["check"]
    (True, 'dump-mode')
    """

    severity: str
    message: str
    fix: str = ""
    check: str = ""

    def to_text(self) -> str:
        """``severity: message`` and, on the next line, the fix."""
        text = f"{self.severity}: {self.message}"
        return text + (f"\n  fix: {self.fix}" if self.fix else "")


def has_errors(findings: list[Finding]) -> bool:
    """Whether any finding is an error."""
    return any(f.is_error for f in findings)


def human_bytes(n: float) -> str:
    """``n`` bytes in the largest binary unit that keeps the number at least 1 (``1.5 GiB``)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns
