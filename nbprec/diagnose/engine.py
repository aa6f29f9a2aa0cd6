""":func:`diagnose`: every source streamed once through the rules, the command finder and the log summary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nbprec.diagnose.commands import Command, CommandFinder
from nbprec.diagnose.compare import compare_pair
from nbprec.diagnose.findings import DiagnoseError, Diagnosis, Finding, SourceInfo
from nbprec.diagnose.reading import Counter, Source, resolve_sources
from nbprec.diagnose.rules import RULES, Rule
from nbprec.diagnose.summary import LogSummary

#: distinct events (rule and key) kept; more are counted in a note
MAX_EVENTS = 1000


@dataclass
class _Event:
    rule: Rule
    values: dict[str, Any]
    where: str
    count: int = 1


def _merge(event: _Event, values: dict[str, Any]) -> None:
    """Fill the values an event lacked from another line of it; a line adding nothing is a repeat."""
    new = {k: v for k, v in values.items() if v is not None and event.values.get(k) is None}
    if new:
        event.values.update(new)
    else:
        event.count += 1


def _finding(event: _Event) -> Finding:
    verdict = event.rule.explain(dict(event.values))
    message = verdict.message + (f" (seen {event.count} times)" if event.count > 1 else "")
    values = {**event.values, **verdict.values, "count": event.count}
    return Finding(event.rule.kind, verdict.severity, event.where, message, values, verdict.remedy)


def diagnose(*sources: Any, rules: Sequence[Rule] = RULES) -> Diagnosis:
    """Diagnose logs and command lines: known failures with computed remedies, and a summary of the rest.

    Parameters
    ----------
    *sources
        Each a log file or a folder of logs (``str`` or :class:`~pathlib.Path`; ``.gz`` is read through gzip),
        ``"-"`` for standard input, the text itself (a ``str`` holding a space or a line break, or ``bytes``),
        or an open stream. Every source is streamed line by line, never loaded whole.
    rules
        The known failures to look for (default :data:`~nbprec.diagnose.rules.RULES`; add your own
        :class:`~nbprec.diagnose.rules.Rule` to extend it).

    Returns
    -------
    Diagnosis
        One finding per known failure event (``host-oom``, ``ge-var-memory``, ``ge-graph-memory``), one per
        parameter on which an aoe command and an atc command found in the sources differ (``kb-mismatch``), and
        one per distinct error or warning line no rule explains (``log-error``, ``log-warning``), counted.

    Examples
    --------
    >>> d = diagnose("[ERROR] GE(1,python3): current graph size[30064771072] exceeds total graph size[27917287424]")
    >>> f = d.findings[0]
    >>> f.kind, f.values["graph_memory_max_size"], f.values["variable_memory_max_size"]
    ('ge-graph-memory', 31138512896, 2147483648)
    """
    if not sources:
        raise DiagnoseError("nothing to diagnose: give a log file or folder, the text itself, or - (standard input)")
    scan = _Scan(rules)
    for index, source in enumerate(resolve_sources(sources)):
        scan.read(index, source)
    infos = scan.infos
    findings = [_finding(e) for e in scan.events.values()]
    notes = [f"read {sum(i.lines for i in infos)} lines ({sum(i.bytes for i in infos)} bytes) from "
             f"{len(infos)} source{'s' if len(infos) != 1 else ''}"]  # fmt: skip
    long_lines = sum(i.long_lines for i in infos)
    if long_lines:
        notes.append(f"{long_lines} lines longer than 256 KiB were scanned in overlapping windows")
    if scan.dropped:
        notes.append(f"{scan.dropped} more failure lines beyond the first {MAX_EVENTS} distinct events not listed")
    corrected, compared = _compare(scan.commands, notes)
    findings += compared
    findings += scan.summary.findings()
    findings += scan.problems
    return Diagnosis(tuple(findings), tuple(infos), corrected, tuple(notes))


class _Scan:
    """What one diagnosis gathers while its sources are read once, line by line."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        self.needles = tuple(dict.fromkeys(n for rule in self.rules for n in rule.needles))
        self.summary = LogSummary()
        self.events: dict[tuple[Any, ...], _Event] = {}
        self.dropped = 0
        self.commands: list[Command] = []
        self.infos: list[SourceInfo] = []
        self.problems: list[Finding] = []

    def read(self, index: int, source: Source) -> None:
        """Stream one source through the rules, the command finder and the summary."""
        counter = Counter()
        finder = CommandFinder()
        label, needles, summary = source.label, self.needles, self.summary
        try:
            for number, text, first, skip in source.windows(counter):
                # most lines hold no rule's needle: one pass of substring tests, then the summary
                matched = any(map(text.__contains__, needles)) and self._match(index, label, number, text, skip)
                if first and not finder.feed(text, label, number) and not matched:
                    summary.feed(text, label, number)
        except (DiagnoseError, OSError, EOFError) as exc:  # unreadable, or a damaged .gz: said, the rest is read
            problem = str(exc) if isinstance(exc, DiagnoseError) else f"{label}: {type(exc).__name__}: {exc}"
            message = f"{problem} (read {counter.lines} lines before)"
            self.problems.append(Finding("unreadable", "error", f"{label}:{counter.lines}", message))
        finder.close()
        self.commands += finder.commands
        self.infos.append(SourceInfo(label, counter.lines, counter.bytes, counter.long_lines))

    def _match(self, index: int, label: str, number: int, text: str, skip: int) -> bool:
        matched = False
        for rule in self.rules:
            for match in rule.matches(text):
                if match.end() <= skip:  # seen at the end of the previous window of this line
                    continue
                values = rule.extract(match)
                if values is None:
                    continue
                matched = True
                key = (index, rule.kind, *(values.get(k) for k in rule.key))
                event = self.events.get(key)
                if event is not None:
                    _merge(event, values)
                elif len(self.events) < MAX_EVENTS:
                    self.events[key] = _Event(rule, dict(values), f"{label}:{number}")
                else:
                    self.dropped += 1
        return matched


def _compare(commands: list[Command], notes: list[str]) -> tuple[str, list[Finding]]:
    """Each atc command against the last aoe command found (the knowledge-base comparison)."""
    tunings = [c for c in commands if c.tool == "aoe"]
    conversions = [c for c in commands if c.tool == "atc"]
    if not tunings or not conversions:
        if tunings or conversions:
            have, missing = ("aoe", "atc") if tunings else ("atc", "aoe")
            notes.append(f"found an {have} command but no {missing} command: nothing to compare")
        return "", []
    tuning = tunings[-1]
    findings: list[Finding] = []
    corrected = ""
    for conversion in conversions:
        found, corrected = compare_pair(tuning, conversion)
        findings += found
        notes.append(f"compared the atc command at {conversion.where} with the aoe command at {tuning.where}: "
                     f"{len(found) or 'no'} difference{'s' if len(found) != 1 else ''}")  # fmt: skip
    return corrected, findings
