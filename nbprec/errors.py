"""The exceptions nbprec raises.

Every error nbprec raises derives from :class:`NbprecError`, so ``except NbprecError`` catches all of
them. Messages name the file (and the record inside it, where there is one), say what was found and what
was expected, and, where possible, what to do about it.
"""

from __future__ import annotations

from os import PathLike


class NbprecError(Exception):
    """Base class of every error nbprec raises."""


class DumpFormatError(NbprecError):
    """A file or folder could not be read as the dump format it claims (or was guessed) to be.

    Parameters
    ----------
    path
        The file or folder at fault.
    problem
        What is wrong with it, in words a user can act on.
    record
        The record inside the file, when the problem is local to one (a JSON key, a line number).
    """

    def __init__(self, path: str | PathLike[str], problem: str, record: str | None = None) -> None:
        self.path = str(path)
        self.problem = problem
        self.record = record
        where = f"{self.path} (record {record})" if record else self.path
        super().__init__(f"{where}: {problem}")


class UnknownFormatError(DumpFormatError):
    """No reader recognised the path."""


class EmptyDumpError(DumpFormatError):
    """The path exists and looks like a dump, but holds no tensor records."""


class TensorNotFoundError(NbprecError, KeyError):
    """A tensor asked for by name or position is not in the dump's index."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class TensorDataUnavailableError(NbprecError):
    """The index knows the tensor, but the dump holds no payload for it (statistics or checksum mode)."""


class MissingDependencyError(NbprecError, ImportError):
    """An optional package is needed for this call; the message names the exact pip command."""


class CaptureError(NbprecError):
    """A PyTorch capture could not start, write or finish."""


class OverflowDetectedError(CaptureError):
    """Raised by the capture's overflow-check mode after the configured number of overflows."""

    def __init__(self, message: str, op: str, dump_path: str) -> None:
        self.op = op
        self.dump_path = dump_path
        super().__init__(message)


class ComparisonError(NbprecError):
    """Two dumps, a mapping file or a rule could not be used for a comparison."""
