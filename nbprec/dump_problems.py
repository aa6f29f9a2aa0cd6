"""What a reader could not read or understand in a dump: :class:`Problem`, kept with the dump, never dropped.

Readers record a problem per file or entry they had to leave out or read in part (a truncated payload, a file
that breaks the naming rule, a symbolic link out of the dump); :attr:`nbprec.dump.Dump.problems` shows them. This
module imports neither numpy nor pandas, so that code that indexes a dump without numpy (the ``nbprec compare``
command's early worker) can record problems as the readers do.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nbprec._record import Record

PROBLEM_COLUMNS = ("file", "record", "problem")


class Problem(Record):
    """Something in a dump that could not be read or understood; kept, never silently dropped."""

    file: str
    problem: str
    record: str = ""


def first_problem(problems: list[Problem], after: int = 0) -> str:
    """The first of ``problems`` as the tail of a message that says nothing could be read (``"; the first, FILE:
    PROBLEM"``), or "" when there is none: an error that names only a count leaves the user to guess why. The
    first from position ``after`` on is told when there is one (a reader's problems with the files named as dump
    files, which tell more than those its listing found: a stray readme that breaks the naming rule)."""
    told = problems[after:] or problems
    if not told:
        return ""
    first = told[0]
    return f"; the first, {first.file}: {first.problem}"


def problems_frame(problems: Iterable[Problem]) -> Any:
    """A DataFrame of problems, with the columns :data:`PROBLEM_COLUMNS`."""
    import pandas as pd

    return pd.DataFrame([(p.file, p.record, p.problem) for p in problems], columns=list(PROBLEM_COLUMNS))


def problem_list(problems: Iterable[Problem] | Any) -> list[Problem]:
    """Problems as a list of :class:`Problem` (from problems, or a DataFrame of :data:`PROBLEM_COLUMNS`)."""
    if hasattr(problems, "itertuples"):
        return [Problem(str(f), str(p), str(r)) for f, r, p in problems[list(PROBLEM_COLUMNS)].itertuples(index=False)]
    return list(problems)


__all__ = ["PROBLEM_COLUMNS", "Problem", "first_problem", "problem_list", "problems_frame"]
