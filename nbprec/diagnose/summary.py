"""The summary of what no rule knows: error and warning lines with their codes, counted and deduplicated.

A line is an error or a warning by its own level: a bracketed tag (Ascend's ``[ERROR] GE(...)``,
``[WARNING] TBE(...)``), a level word near its start (``ERROR:``, ``- WARNING -``), a glog prefix
(``E0612 10:00:00.123 ...``), a Python traceback or exception line, an Ascend error code opening the line
(``E19999:``, ``EZ9999:``, ``W11001:``) or a crash (``Segmentation fault``, ``core dumped``). Lines tagged
``INFO``/``DEBUG``/``EVENT`` are never counted, whatever words they hold, so a clean log gives no finding.

Lines that differ only in numbers, hexadecimal addresses and ids (timestamps, pids, sizes) count as one; the
first is kept as the example. At most :data:`MAX_DISTINCT` different lines are kept; the others are counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from nbprec.diagnose.findings import Finding

#: different (masked) lines kept; more are only counted
MAX_DISTINCT = 2000
#: characters of an example line kept and shown
EXAMPLE_CHARS = 500

_LEVELS = {
    "ERROR": "error", "ERR": "error", "FATAL": "error", "CRITICAL": "error", "CRIT": "error", "EMERG": "error",
    "ALERT": "error", "WARNING": "warning", "WARN": "warning", "INFO": "info", "DEBUG": "info", "EVENT": "info",
    "TRACE": "info", "NOTICE": "info",
}  # fmt: skip
_TAG = re.compile(r"\[(ERROR|ERR|FATAL|CRITICAL|CRIT|WARNING|WARN|INFO|DEBUG|EVENT|TRACE|NOTICE)\]")
_GLOG = re.compile(r"^([EWIF])\d{4} \d\d:\d\d:\d\d\.\d+ ")
_WORD = re.compile(
    r"^\W{0,3}(?:\S+\s+){0,6}?(ERROR|FATAL|CRITICAL|WARNING|WARN|INFO|DEBUG|NOTICE|TRACE)(?=[\s:\]|>)-]|$)"
)
_SEPARATOR_AFTER = re.compile(r"\s*(?:[:|\]>]|-(?:\s|$)|$)")
_PY_ERROR = re.compile(r"^\s*(?:Traceback \(most recent call last\)|(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)(?::|$))")
_PY_WARNING = re.compile(r"^\s*(?:\S+:\d+: )?[A-Z]\w*Warning: ")
_CODE_START = re.compile(r"^\s*(E[0-9A-Z]\d{4}|W\d{5})(?::|\s|$)")
#: phrases of a crash or a failed tool run, on lines that say no level
CRASHES = ("Segmentation fault", "core dumped", "terminate called after", "std::bad_alloc", "ATC run failed",
           "AOE run failed", "Bus error (")  # fmt: skip
_LEVEL_WORDS = ("ERROR", "FATAL", "CRITICAL", "WARN", "INFO", "DEBUG", "NOTICE", "TRACE")
#: Ascend error (E19999, EE1001, EZ9999, E40021) and warning (W11001) codes
CODE = re.compile(r"(?<![\w.-])(E[0-9A-Z]\d{4}|W\d{5})(?![\w.-])")
_ERRNO = re.compile(r"ErrorNo:\s*(\d+)")
_MODULE = re.compile(r"\[(?:ERROR|WARNING|WARN|ERR|FATAL)\]\s*([A-Za-z_][\w-]*)\(")
_MASKS = (
    (re.compile(r"0[xX][0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}\b"), "#"),
    (re.compile(r"(?<![A-Za-z0-9])\d+"), "#"),
    (re.compile(r"\s+"), " "),
)


def line_level(text: str) -> str:
    """``"error"``, ``"warning"``, ``"info"`` or ``""`` (no level said) of one log line.

    Examples
    --------
    >>> line_level("[ERROR] GE(1,atc):2024-01-01 [graph.cc:1]2 Build: failed"), line_level("[INFO] all fine")
    ('error', 'info')
    >>> line_level("W11001: Op [conv1] does not hit the high-priority operator information library")
    'warning'
    """
    head = text[:2048]
    tag = _TAG.search(head)
    if tag:
        return _LEVELS[tag.group(1)]
    glog = _GLOG.match(head)
    if glog:
        return {"E": "error", "F": "error", "W": "warning"}.get(glog.group(1), "info")
    word = _WORD.match(head) if any(map(head.__contains__, _LEVEL_WORDS)) else None
    if word and _said_as_level(head, word):
        return _LEVELS[word.group(1)]
    if _PY_ERROR.match(head):
        return "error"
    if _PY_WARNING.match(head):
        return "warning"
    code = _CODE_START.match(head)
    if code:
        return "error" if code.group(1).startswith("E") else "warning"
    if any(map(head.__contains__, CRASHES)):
        return "error"
    return ""


def _said_as_level(head: str, word: re.Match[str]) -> bool:
    """Whether a level word near the start is the line's level (``2024-05-11 10:00:00 ERROR x``, ``- aoe - ERROR -``,
    ``ERROR: x``), not prose (``epoch 3: no ERROR seen``): the words before it are timestamps or separators, or a
    separator follows it."""
    if _SEPARATOR_AFTER.match(head, word.end(1)):
        return True
    return all(any(c.isdigit() for c in t) or not any(c.isalpha() for c in t) for t in head[: word.start(1)].split())


def mask(text: str) -> str:
    """``text`` with numbers, hexadecimal addresses and ids replaced by ``#`` (Ascend codes are kept).

    >>> mask("[ERROR] GE(685297,python3):2022-04-06-07:15:09.383.996 ErrorNo: 1343225857 E19999 at 0x7f3a")
    '[ERROR] GE(#,python3):#-#-#-#:#:#.#.# ErrorNo: # E19999 at <hex>'
    """
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text.strip()


@dataclass
class _Entry:
    level: str
    example: str
    first: str
    last: str
    count: int = 0
    codes: list[str] = field(default_factory=list)
    module: str = ""


class LogSummary:
    """Error and warning lines of one diagnosis, counted by their masked text (bounded memory)."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self.dropped = {"error": 0, "warning": 0}
        self._dropped_where = {"error": "", "warning": ""}

    def feed(self, text: str, label: str, number: int) -> bool:
        """Count line ``number`` of ``label`` if it is an error or warning line; returns whether it was counted."""
        level = line_level(text)
        if level not in ("error", "warning"):
            return False
        where = f"{label}:{number}"
        head = text[:EXAMPLE_CHARS]
        key = f"{level}\x00{mask(head)}"
        entry = self._entries.get(key)
        if entry is None:
            if len(self._entries) >= MAX_DISTINCT:
                self.dropped[level] += 1
                self._dropped_where[level] = self._dropped_where[level] or where
                return True
            codes = list(dict.fromkeys(CODE.findall(text[:4096])))[:10]
            errno = _ERRNO.search(head)
            if errno:
                codes.append(f"ErrorNo {errno.group(1)}")
            module = _MODULE.search(head)
            entry = _Entry(level, head, where, where, codes=codes, module=module.group(1) if module else "")
            self._entries[key] = entry
        entry.count += 1
        entry.last = where
        return True

    def findings(self) -> list[Finding]:
        """One finding per distinct line (errors and warnings in order of first appearance)."""
        out = []
        for key, e in self._entries.items():
            values: dict[str, Any] = {"count": e.count, "codes": e.codes, "module": e.module, "first": e.first,
                                      "last": e.last, "pattern": key.split("\x00", 1)[1]}  # fmt: skip
            times = f" ({e.count} lines like it, the last at {e.last})" if e.count > 1 else ""
            codes = f" [{', '.join(e.codes)}]" if e.codes else ""
            out.append(Finding(f"log-{e.level}", e.level, e.first, f"{e.example}{codes}{times}", values, _hint(e)))
        for level, count in self.dropped.items():
            if count:
                out.append(
                    Finding(
                        f"log-{level}",
                        level,
                        self._dropped_where[level],
                        f"{count} more {level} lines of {MAX_DISTINCT}+ other kinds (not listed one by one)",
                        {"count": count},
                    )
                )
        return out


def _hint(entry: _Entry) -> str:
    """What to look at for an error or warning no rule knows (empty when there is nothing specific)."""
    codes = [c for c in entry.codes if not c.startswith("ErrorNo")]
    if not codes:
        return ""
    hint = f"look up {', '.join(codes)} in the CANN error-code reference"
    if any(c in ("E19999", "EZ9999") for c in codes):
        hint += "; an inner error's cause is in the lines after it and in the process logs (plog)"
    return hint
