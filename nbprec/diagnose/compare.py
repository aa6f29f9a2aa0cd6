""":func:`compare_commands`: an aoe tuning command against an atc conversion command, with the corrected atc."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nbprec.diagnose.commands import Command, find_commands, parse_command
from nbprec.diagnose.findings import DiagnoseError, Diagnosis, Finding
from nbprec.diagnose.kb import mismatch_values, mismatches, tune_bank_finding
from nbprec.diagnose.reading import resolve_sources

_PLAIN = re.compile(r"[\w@%+=:,./-]+")
_OPTION = re.compile(r"^(-{1,2}[\w-]+=)(.*)$", re.DOTALL)


def _quote(value: str) -> str:
    if not re.search(r'["$`\\!]', value):
        return f'"{value}"'
    return shlex.quote(value)


def shell_word(token: str) -> str:
    """``token`` quoted for a POSIX shell, an option's value quoted alone (``--input_shape="x:1,3;y:1"``)."""
    if token and _PLAIN.fullmatch(token):
        return token
    option = _OPTION.match(token)
    if option:
        return option.group(1) + (option.group(2) if _PLAIN.fullmatch(option.group(2)) else _quote(option.group(2)))
    return _quote(token)


def corrected_command(atc: Command, changes: Sequence[tuple[str | None, Sequence[str]]], env: dict[str, str]) -> str:
    """``atc`` with each ``(name=value to set or None, names to remove)`` applied, its other tokens kept.

    An option atc already has is rewritten in place (in its own ``--key=value`` or ``--key value`` form); a new
    one is appended as ``--key=value``; ``env`` assignments are written (or rewritten) in front.
    """
    tokens: list[str | None] = list(atc.tokens)
    appended: list[str] = []
    for set_to, remove in changes:
        for name in remove:
            option = atc.options[name]
            tokens[option.start : option.stop] = [None] * (option.stop - option.start)
        if set_to is None:
            continue
        name, _, value = set_to.partition("=")
        option = atc.options.get(name)
        if option is None or name in remove:
            appended.append(f"--{name}={value}")
        elif option.joined:
            tokens[option.start] = f"{option.spelling}={value}"
        else:
            tokens[option.start + 1] = value
    head = [t for t in tokens[: atc.start] if t is not None]
    for key, value in env.items():
        assignment = f"{key}={value}"
        position = next((i for i, t in enumerate(head) if t.startswith(f"{key}=")), None)
        if position is None:
            head.insert(0, assignment)
        else:
            head[position] = assignment
    words = head + [t for t in tokens[atc.start :] if t is not None] + appended
    return " ".join(shell_word(w) for w in words)


def _commands_of(spec: Any) -> tuple[list[Command], str]:
    if isinstance(spec, Command):
        return [spec], spec.where or spec.tool
    if isinstance(spec, (list, tuple)):
        command = parse_command([str(w) for w in spec], "<command>")
        return ([command] if command else []), "<command>"
    if isinstance(spec, (str, os.PathLike)):
        text = str(spec)
        if isinstance(spec, os.PathLike) or ("\n" not in text and len(text) < 4096 and Path(text).is_file()):
            found: list[Command] = []
            for source in resolve_sources((Path(text),)):
                found += find_commands((w.text for w in source.windows() if w.first), source.label)
            return found, text
        return find_commands(text.splitlines(), "<command>"), "<command>"
    raise DiagnoseError(f"cannot read a command from a {type(spec).__name__}: give a string, a path or a list of words")


def _pick(spec: Any, tool: str, other: str) -> tuple[Command | None, Command | None, str]:
    found, label = _commands_of(spec)
    mine = [c for c in found if c.tool == tool]
    theirs = [c for c in found if c.tool == other]
    return (mine[-1] if mine else None), (theirs[-1] if theirs else None), label


def compare_commands(aoe: Any, atc: Any) -> Diagnosis:
    """Compare a tuning command with a conversion command: why atc does not hit what aoe tuned.

    Parameters
    ----------
    aoe, atc
        Each a command line (``"aoe --model=m.onnx --framework=5 --job_type=1 ..."``), a script or log text
        holding one, a file holding one (the last such command is used), a list of words, or a
        :class:`~nbprec.diagnose.commands.Command`. Given swapped, they are swapped back.

    Returns
    -------
    Diagnosis
        One ``kb-mismatch`` finding per parameter that differs (what it affects, the two values, the change to
        make in atc), a ``kb-bank-path`` finding when the two command lines set ``TUNE_BANK_PATH`` (where the
        knowledge base is written and read) differently, and :attr:`~Diagnosis.corrected_command`: atc's
        command with aoe's values, its other arguments kept.

    Examples
    --------
    >>> d = compare_commands("aoe --framework=5 --model=m.onnx --job_type=1 --input_format=NCHW",
    ...                      "atc --framework=5 --model=m.onnx --output=m --soc_version=Ascend310P3 --input_format=ND")
    >>> d.frame["values"][0]["parameter"], d.corrected_command
    ('input_format', 'atc --framework=5 --model=m.onnx --output=m --soc_version=Ascend310P3 --input_format=NCHW')
    """
    tuning, swapped_conversion, aoe_label = _pick(aoe, "aoe", "atc")
    conversion, swapped_tuning, atc_label = _pick(atc, "atc", "aoe")
    if tuning is None and conversion is None and swapped_tuning is not None and swapped_conversion is not None:
        tuning, conversion = swapped_tuning, swapped_conversion
    if tuning is None:
        raise DiagnoseError(f"{aoe_label}: no aoe command found (a line starting with aoe and its --options)")
    if conversion is None:
        raise DiagnoseError(f"{atc_label}: no atc command found (a line starting with atc and its --options)")
    findings, fixed = compare_pair(tuning, conversion)
    return Diagnosis(findings=findings, corrected_command=fixed)


def compare_pair(aoe: Command, atc: Command) -> tuple[tuple[Finding, ...], str]:
    """The findings of one aoe/atc pair and the corrected atc command ('' when nothing is to correct)."""
    found = mismatches(aoe, atc)
    bank = tune_bank_finding(aoe, atc)
    env = {"TUNE_BANK_PATH": aoe.env["TUNE_BANK_PATH"]} if bank is not None and "TUNE_BANK_PATH" in aoe.env else {}
    fixed = corrected_command(atc, [(m.set_to, m.remove) for m in found], env) if found or env else ""
    findings: list[Finding] = []
    where = atc.where or "<atc>"
    for m in found:
        change = _change_text(m.set_to, m.remove, m.param.name)
        message = (
            f"{m.param.name} differs: aoe {m.aoe.shown}, atc {m.atc.shown}. It decides the {m.param.affects}, so atc "
            f"builds another graph than aoe tuned and does not hit the tuned knowledge base{m.note}"
        )
        values = mismatch_values(m, aoe, atc) | {"change": change, "corrected_command": fixed}
        findings.append(Finding("kb-mismatch", "error", where, message, values, f"{change}\n\n{fixed}"))
    if bank is not None:
        findings.append(Finding(bank.kind, bank.severity, bank.where, bank.message, bank.values,
                                f"{bank.remedy}\n\n{fixed}"))  # fmt: skip
    return tuple(findings), fixed


def _change_text(set_to: str | None, remove: Sequence[str], name: str) -> str:
    """The change to make in atc, in words."""
    parts = [f"set --{set_to} (aoe's value)"] if set_to else []
    dropped = [f"--{r}" for r in remove if not (set_to and set_to.startswith(f"{r}="))]
    if dropped:
        parts.append(f"remove {' and '.join(dropped)}" + ("" if set_to else " (aoe leaves it out: its default)"))
    return "in the atc command: " + (" and ".join(parts) or f"leave --{name} as aoe has it")
