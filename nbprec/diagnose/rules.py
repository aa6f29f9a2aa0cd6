"""The known failures, as data: one :class:`Rule` per failure, all in :data:`RULES`.

A rule is a pattern searched in every line, a function reading values from a match, the names of the values
that identify one event (lines of the same event, such as the kernel's ``oom-kill:`` and ``Killed process``
lines of one pid, merge into one finding), and a function computing the finding's message and remedy from
those values. Adding the next known failure is a pattern, two small functions and one entry in
:data:`RULES` (and a line in ``docs/diagnose.md``, which a test checks)::

    Rule(
        kind="hccl-timeout",
        title="HCCL communication timed out",
        pattern=re.compile(r"HCCL .{0,80}timeout\\[(?P<seconds>\\d+)\\]"),
        needles=("HCCL",),
        extract=lambda m: {"seconds": int(m["seconds"])},
        key=("seconds",),
        explain=lambda v: Verdict("error", f"HCCL timed out after {v['seconds']} s", "raise HCCL_EXEC_TIMEOUT"),
        doc="...",
    )
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from nbprec.diagnose.remedies import Verdict, explain_ge_memory, explain_host_oom


@dataclass(frozen=True)
class Rule:
    """One known failure: how to find it in a line, what to read from it, and what to do about it.

    Parameters
    ----------
    kind
        Stable short name, the ``kind`` of its findings.
    title
        One line saying what the failure is.
    pattern
        Searched in every line (every window of a long line); keep it bounded (``[^\\n]{0,200}``, not ``.*``).
    needles
        Substrings one of which every match holds: a line without any is skipped without running the pattern.
    extract
        Values (JSON-ready) from one match; ``None`` when the match is not this failure after all.
    key
        Names of the values that identify one event: matches with equal key values in one source merge (later
        lines fill the values earlier ones lacked) into one finding.
    explain
        The :class:`~nbprec.diagnose.remedies.Verdict` (severity, message, remedy, computed values) of the
        merged values of one event.
    doc
        What the rule reads and computes, for ``docs/diagnose.md``.
    """

    kind: str
    title: str
    pattern: re.Pattern[str]
    needles: tuple[str, ...]
    extract: Callable[[re.Match[str]], dict[str, Any] | None]
    key: tuple[str, ...]
    explain: Callable[[dict[str, Any]], Verdict]
    doc: str = ""

    def matches(self, text: str) -> Iterator[re.Match[str]]:
        """The matches of :attr:`pattern` in ``text`` (none when no needle is in it)."""
        if any(map(text.__contains__, self.needles)):
            yield from self.pattern.finditer(text)


# -- host out-of-memory (kernel OOM killer) -------------------------------------------------------------------
_OOM = re.compile(
    r"(?P<scope>Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?)?:?[ \t]*"
    r"Killed process (?P<pid>\d+) \((?P<name>[^\n]{1,64}?)\)(?=[\s,]|$)(?P<rest>[^\n]{0,600})"
    r"|oom-kill:(?P<fields>[^\s]{1,2000})"
    r"|Out of memory: Kill process (?P<pid2>\d+) \((?P<name2>[^\n]{1,64}?)\) score (?P<score>\d+)"
)
_KB_FIELD = re.compile(r"(total-vm|anon-rss|file-rss|shmem-rss):(\d+)kB")
_STAMP = re.compile(r"^\s*(?:<\d+>)?(?:\[\s*(\d+\.\d+)\]|(\w{3} [ \d]\d \d\d:\d\d:\d\d)|(\d{4}-\d\d-\d\dT[\d:.]+))")


def _stamp(match: re.Match[str]) -> str | None:
    stamp = _STAMP.match(match.string[: match.start()] or "")
    return next((g for g in stamp.groups() if g), None) if stamp else None


def _extract_oom(m: re.Match[str]) -> dict[str, Any] | None:
    values: dict[str, Any] = {}
    if m["pid"]:
        values.update(pid=int(m["pid"]), name=m["name"])
        values.update({k: int(v) for k, v in _KB_FIELD.findall(m["rest"])})
        if m["scope"] and m["scope"].startswith("Memory cgroup"):
            values["cgroup"] = True
    elif m["fields"]:
        fields = dict(f.split("=", 1) for f in m["fields"].split(",") if "=" in f)
        if not fields.get("pid", "").isdigit():
            return None
        values.update(pid=int(fields["pid"]), name=fields.get("task"), constraint=fields.get("constraint"))
        if fields.get("constraint") == "CONSTRAINT_MEMCG" or "oom_memcg" in fields:
            values["cgroup"] = True
    else:
        values.update(pid=int(m["pid2"]), name=m["name2"], oom_score=int(m["score"]))
    stamp = _stamp(m)
    if stamp:
        values["time"] = stamp
    return values


HOST_OOM = Rule(
    kind="host-oom",
    title="a process (aoe, atc, a training job) killed by the host's out-of-memory killer",
    pattern=_OOM,
    needles=("Killed process", "oom-kill:", "Kill process"),
    extract=_extract_oom,
    key=("pid",),
    explain=explain_host_oom,
    doc=(
        "Kernel lines `Out of memory: Killed process PID (NAME) total-vm:..kB, anon-rss:..kB, file-rss:..kB, "
        "shmem-rss:..kB, ...` (also `Memory cgroup out of memory: ...`, a bare `Killed process ...`, the "
        "`oom-kill:constraint=...,task=NAME,pid=PID,...` line and old kernels' `Kill process PID (NAME) score N "
        "or sacrifice child`), with or without the `[seconds]` or syslog prefix; the lines of one pid make one "
        "finding. Reads the name and pid, and the resident memory anon-rss + file-rss + shmem-rss (kB, shown in "
        "GiB). Remedy: a host (or, for a cgroup kill, a container limit) with more memory than that, or fewer "
        "parallel jobs; for aoe: TUNING_PARALLEL_NUM in aoe.ini, TE_PARALLEL_COMPILER, one aoe at a time."
    ),
)


# -- graph-engine memory limits ---------------------------------------------------------------------------------
def _ge_pattern(what: str) -> re.Pattern[str]:
    return re.compile(
        rf"current {what} size\s*\[\s*(?P<current>\d+)\s*\]\s*exceeds total {what} size\s*\[\s*(?P<total>\d+)\s*\]",
        re.IGNORECASE,
    )


def _ge_extractor(what: str) -> Callable[[re.Match[str]], dict[str, Any]]:
    def extract(m: re.Match[str]) -> dict[str, Any]:
        return {"what": what, "current": int(m["current"]), "total": int(m["total"])}

    return extract


GE_VAR_MEMORY = Rule(
    kind="ge-var-memory",
    title="graph engine out of variable memory",
    pattern=_ge_pattern("var"),
    needles=("exceeds total", "EXCEEDS TOTAL", "Exceeds total"),
    extract=_ge_extractor("var"),
    key=("current", "total"),
    explain=explain_ge_memory,
    doc=(
        "`... current var size[X] exceeds total var size[Y]` (X, Y in bytes, as GE prints them). Remedy: "
        "`variable_memory_max_size = X + 1 GiB` and `graph_memory_max_size = 31 GiB - variable_memory_max_size`"
        ", printed for TF 1 sess.run, Estimator and TF 2; when X + 1 GiB exceeds 31 GiB, no setting fits."
    ),
)

GE_GRAPH_MEMORY = Rule(
    kind="ge-graph-memory",
    title="graph engine out of graph memory",
    pattern=_ge_pattern("graph"),
    needles=("exceeds total", "EXCEEDS TOTAL", "Exceeds total"),
    extract=_ge_extractor("graph"),
    key=("current", "total"),
    explain=explain_ge_memory,
    doc=(
        "`... current graph size[X] exceeds total graph size[Y]`. Remedy: `graph_memory_max_size = X + 1 GiB` "
        "and `variable_memory_max_size = 31 GiB - graph_memory_max_size`, in the three styles; when X + 1 GiB "
        "exceeds 31 GiB, no setting fits."
    ),
)

#: every known log failure, in the order their findings are listed
RULES: tuple[Rule, ...] = (HOST_OOM, GE_VAR_MEMORY, GE_GRAPH_MEMORY)
