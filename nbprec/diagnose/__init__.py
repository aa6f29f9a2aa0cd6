"""Diagnose Ascend tuning and model-conversion failures from logs and command lines, with computed remedies.

Before precision work can start, known failures cost days. This package turns them into findings:

- :func:`diagnose`: logs (files, folders, ``-`` for standard input, pasted text) streamed line by line through
  the rules of :data:`RULES` (a process killed by the host's out-of-memory killer; the graph engine's
  variable or graph memory limit, with the ``graph_memory_max_size`` / ``variable_memory_max_size`` to set),
  every other error and warning line summarised (codes, counts), and any aoe and atc commands found compared;
- :func:`compare_commands`: an aoe tuning command against an atc conversion command: every parameter that
  keeps atc from hitting the tuned knowledge base, and the corrected atc command;
- :func:`explore`: the diagnosis widget (paste or load a log; findings with their remedies to copy);
- :func:`add_diagnose_parser`: the ``nbprec diagnose`` command.

Only the standard library is needed (pandas for :attr:`Diagnosis.frame`). See ``docs/diagnose.md``.

Examples
--------
>>> from nbprec.diagnose import diagnose
>>> d = diagnose("[ERROR] GE(9,python3):... Out of memory: current var size[13962468864] "
...              "exceeds total var size[13958643712]")
>>> d.findings[0].values["variable_memory_max_size"], d.findings[0].values["graph_memory_max_size"]
(15036210688, 18249785856)
"""

from __future__ import annotations

from typing import Any

from nbprec.diagnose.cli import add_diagnose_parser
from nbprec.diagnose.commands import Command, find_commands, parse_command
from nbprec.diagnose.compare import compare_commands
from nbprec.diagnose.engine import diagnose
from nbprec.diagnose.findings import COLUMNS, DiagnoseError, Diagnosis, Finding
from nbprec.diagnose.kb import PARAMETERS, Parameter
from nbprec.diagnose.remedies import DEVICE_TOTAL, GIB, Verdict
from nbprec.diagnose.rules import RULES, Rule


def explore(*sources: Any) -> Any:
    """The diagnosis widget (:class:`nbprec.widgets.diagnose.DiagnosisView`) over ``sources`` (may be none: paste
    or load a log in it). Needs the ``[widgets]`` extra to display live; it renders as static HTML without."""
    from nbprec.widgets.diagnose import DiagnosisView

    return DiagnosisView(*sources)


__all__ = [
    "COLUMNS",
    "DEVICE_TOTAL",
    "GIB",
    "PARAMETERS",
    "RULES",
    "Command",
    "DiagnoseError",
    "Diagnosis",
    "Finding",
    "Parameter",
    "Rule",
    "Verdict",
    "add_diagnose_parser",
    "compare_commands",
    "diagnose",
    "explore",
    "find_commands",
    "parse_command",
]
