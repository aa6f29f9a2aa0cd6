"""aoe and atc command lines: found in text (scripts, shell history, logs), tokenised and parsed.

Commands are split as a POSIX shell does (:mod:`shlex`: quotes, escapes), after joining ``\\`` line
continuations; leading ``VAR=value`` assignments, a ``$`` prompt and wrappers (``sudo``, ``nohup``, ``time``,
``env``, ...) are skipped, and ``&&``, ``||``, ``|``, ``;`` separate commands. Options are read as atc reads
them: ``--key=value`` or ``--key value``, one or two leading dashes, ``-`` or ``_`` inside the name
(``--soc-version`` is ``soc_version``); the last of a repeated option wins.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("aoe", "atc")
_WRAPPERS = frozenset({"sudo", "nohup", "time", "exec", "env", "command", "nice", "stdbuf", "ionice"})
_SEPARATORS = frozenset({"&&", "||", "|", ";", "&"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: a cheap test that a line may hold an aoe or atc command (the tokeniser decides)
_MAYBE = re.compile(r"(?:^|[\s;&|/$])(?:aoe|atc)(?:\s+-{1,2}\w|\s*\\\s*$)")
#: longest command kept (continuation lines joined)
MAX_COMMAND = 64 * 1024


@dataclass(frozen=True)
class Option:
    """One option of a command: its canonical name, value, and the tokens it took (for rewriting)."""

    name: str
    value: str
    start: int
    stop: int
    spelling: str  # the option as written, without the value ("--input_shape")
    joined: bool  # written --key=value (else --key value)


@dataclass(frozen=True)
class Command:
    """An aoe or atc command line.

    Attributes
    ----------
    tool
        ``"aoe"`` or ``"atc"``.
    tokens
        Every token of the command, including leading assignments and wrappers.
    start
        Position of the tool's token in :attr:`tokens`.
    options
        Canonical option name -> :class:`Option` (the last one when repeated).
    env
        ``VAR=value`` assignments written before the command.
    where
        ``file:line`` of its first line.
    """

    tool: str
    tokens: tuple[str, ...]
    start: int
    options: dict[str, Option]
    env: dict[str, str]
    where: str = ""

    def value(self, name: str) -> str | None:
        """The value of option ``name`` (canonical: ``input_shape``), ``None`` when not given."""
        option = self.options.get(name)
        return None if option is None else option.value

    @property
    def text(self) -> str:
        """The command as one shell-quoted line."""
        return shlex.join(self.tokens)


def canonical(name: str) -> str:
    """An option name as atc matches it: no leading dashes, ``-`` as ``_``, lower case."""
    return name.lstrip("-").replace("-", "_").lower()


def tokenize(line: str) -> list[str]:
    """Shell words of one logical line (quotes removed); unbalanced quotes fall back to splitting on spaces."""
    try:
        words = shlex.split(line, posix=True)
    except ValueError:
        words = line.split()
    for i, word in enumerate(words):
        if word.startswith("#"):  # a shell comment
            return words[:i]
    return words


def _segments(words: list[str]) -> Iterator[list[str]]:
    segment: list[str] = []
    for word in words:
        if word in _SEPARATORS:
            yield segment
            segment = []
        elif word.endswith(";") and len(word) > 1:
            segment.append(word[:-1])
            yield segment
            segment = []
        else:
            segment.append(word)
    yield segment


def parse_command(words: list[str], where: str = "") -> Command | None:
    """The aoe/atc command in one segment of shell words, or ``None`` when it is not one.

    Examples
    --------
    >>> c = parse_command(["atc", "--model=m.onnx", "--input_shape", "x:1,3", "-soc-version=Ascend310P3"])
    >>> c.tool, c.value("input_shape"), c.value("soc_version")
    ('atc', 'x:1,3', 'Ascend310P3')
    """
    env: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if i == 0 and (
            word in ("$", ">", "#") or (len(word) > 2 and word[-1] in "$#>" and ("@" in word or ":" in word))
        ):
            i += 1
        elif _ASSIGNMENT.match(word):
            key, _, value = word.partition("=")
            env[key] = value
            i += 1
        elif word in _WRAPPERS or (i > 0 and words[i - 1] in _WRAPPERS and word.startswith("-")):
            i += 1
        else:
            break
    if i >= len(words):
        return None
    tool = Path(words[i]).name
    if tool not in TOOLS:
        return None
    options: dict[str, Option] = {}
    j = i + 1
    while j < len(words):
        word = words[j]
        if len(word) > 1 and word.startswith("-") and not _is_number(word):
            spelling, eq, value = word.partition("=")
            if eq:
                options[canonical(spelling)] = Option(canonical(spelling), value, j, j + 1, spelling, True)
                j += 1
                continue
            following = words[j + 1] if j + 1 < len(words) else None
            if following is not None and (not following.startswith("-") or _is_number(following.split(",")[0])):
                options[canonical(spelling)] = Option(canonical(spelling), following, j, j + 2, spelling, False)
                j += 2
                continue
            options[canonical(spelling)] = Option(canonical(spelling), "", j, j + 1, spelling, False)
        j += 1
    return Command(tool, tuple(words), i, options, env, where)


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def commands_in_line(line: str, where: str = "") -> list[Command]:
    """The aoe/atc commands of one logical line (continuations already joined)."""
    if not _MAYBE.search(line):
        return []
    found = []
    for segment in _segments(tokenize(line)):
        command = parse_command(segment, where)
        if command is not None:
            found.append(command)
    return found


class CommandFinder:
    """Finds aoe/atc commands in a stream of lines, joining ``\\`` continuations (bounded to :data:`MAX_COMMAND`)."""

    def __init__(self, limit: int = 50) -> None:
        self.commands: list[Command] = []
        self.limit = limit
        self._pending = ""
        self._where = ""

    def feed(self, text: str, label: str, number: int) -> bool:
        """Read line ``number`` of ``label``; returns whether it belongs to a command (the summary skips it)."""
        if self._pending:
            body = text.rstrip()
            joined = self._pending + (" " if body.lstrip().startswith("-") else "") + body
            if len(joined) > MAX_COMMAND:
                self._pending = ""
                return False
            if body.endswith("\\"):
                self._pending = joined[:-1]
                return True
            self._pending = ""
            self._add(joined, self._where)
            return True
        if ("aoe" not in text and "atc" not in text) or not _MAYBE.search(text, 0, MAX_COMMAND):
            return False
        body = text.rstrip()
        if body.endswith("\\") and len(body) < MAX_COMMAND:
            self._pending, self._where = body[:-1], f"{label}:{number}"
            return True
        return self._add(body, f"{label}:{number}")

    def close(self) -> None:
        """End of the source: a command still waiting for its continuation is taken as it is."""
        if self._pending:
            self._add(self._pending, self._where)
            self._pending = ""

    def _add(self, line: str, where: str) -> bool:
        found = commands_in_line(line, where)
        self.commands.extend(found[: max(0, self.limit - len(self.commands))])
        return bool(found)


def find_commands(lines: Iterable[str], label: str = "<text>") -> list[Command]:
    """Every aoe/atc command in ``lines`` (a script, shell history, a log), labelled ``label:line``."""
    finder = CommandFinder()
    for number, line in enumerate(lines, 1):
        finder.feed(line.rstrip("\r\n"), label, number)
    finder.close()
    return finder.commands
