"""What ``nbprec config check`` and ``nbprec diagnose`` findings share: a severity, checked, and their dict form."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

SEVERITIES = ("error", "warning", "info")


class Graded:
    """Mixin for a frozen dataclass with a ``severity`` field: validates it and answers :attr:`is_error`."""

    severity: str

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {', '.join(SEVERITIES)}, not {self.severity!r}")

    @property
    def is_error(self) -> bool:
        """Whether this finding is an error (the command then exits with status 1)."""
        return self.severity == "error"

    def to_dict(self) -> dict[str, Any]:
        """The finding as a plain dict (JSON-ready)."""
        return asdict(self)  # type: ignore[call-overload]
