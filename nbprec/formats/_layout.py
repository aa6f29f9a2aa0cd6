"""Finding dump files in ``step{N}/rank{M}/`` folder layouts, and reading JSON files leniently.

Shared by the readers of PyTorch dump tools (msprobe writes ``<run>/step{N}/rank{M}/dump.json``, and
``<run>/step{N}/proc{pid}/dump.json`` for a process whose rank it does not know: a run on one device without
``torch.distributed``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from nbprec._record import Record
from nbprec.dump import Problem
from nbprec.errors import DumpFormatError
from nbprec.formats._files import not_regular, read_regular
from nbprec.formats._jsonstream import JsonObjectStream, loads

STEP_RE = re.compile(r"^step(\d*)$")
RANK_RE = re.compile(r"^rank(\d*)$")
#: msprobe's folder for a process that knows no rank, named by its process id. A step holds one per process: read
#: as its rank folders, ranked in process-id order (a single one is rank 0).
PROC_RE = re.compile(r"^proc(\d+)$")


class DumpSource(Record):
    """One ``dump.json`` with the step and rank its folders name (-1 when they do not)."""

    dump_json: Path
    step: int
    rank: int


def read_json_file(path: Path) -> Any:
    """Parse a JSON file leniently (bare ``NaN``/``Infinity`` accepted); errors name file and position.

    The file must be a regular file (a FIFO or a device is refused unread). A top-level object is read member
    by member (:class:`~nbprec.formats._jsonstream.JsonObjectStream`: bounded memory, however large the file);
    any other top-level value is read whole, from a file of at most ``MAX_SIDE_FILE`` bytes.
    """
    with JsonObjectStream(path) as stream:
        if stream.first_type() == "dict":
            stream.begin_object()
            content = {}
            while (key := stream.next_key()) is not None:
                content[key] = stream.value()
            stream.end()
            return content
    try:
        raw = read_regular(path, what="JSON file")
    except FileNotFoundError:
        raise DumpFormatError(path, "cannot read the file: no such file") from None
    if not raw.strip():
        raise DumpFormatError(path, "the file is empty (expected a JSON object)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DumpFormatError(path, f"not UTF-8 text: undecodable byte at offset {exc.start}") from exc
    try:
        return loads(text)
    except json.JSONDecodeError as exc:
        at_end = exc.pos >= len(text.rstrip())
        open_string = exc.msg.startswith("Unterminated string") and '"' not in text[exc.pos + 1 :]
        hint = "; the file ends early (truncated?)" if at_end or open_string else ""
        raise DumpFormatError(
            path, f"invalid JSON at line {exc.lineno}, column {exc.colno} (character {exc.pos}): {exc.msg}{hint}"
        ) from exc
    except RecursionError as exc:
        raise DumpFormatError(path, "invalid JSON: nested too deeply to parse") from exc


def folder_number(name: str, pattern: re.Pattern[str]) -> int | None:
    m = pattern.match(name)
    if m is None:
        return None
    return int(m.group(1)) if m.group(1) else -1


def is_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except OSError:
        return False


def child_folders(
    folder: Path, pattern: re.Pattern[str], problems: list[Problem], read: dict[str, str] | None = None
) -> list[tuple[int, Path]]:
    """Sub-folders of ``folder`` whose names match ``pattern``, sorted by their number.

    ``read`` maps the real paths of folders already taken to their names: a symbolic link to one of them
    (``step1 -> step0``) is skipped with a problem, so that no tensor is counted twice.
    """
    found = []
    try:
        entries = sorted(folder.iterdir())
    except OSError as exc:
        problems.append(Problem(str(folder), f"cannot list the folder: {exc.strerror or exc}"))
        return []
    for entry in entries:
        number = folder_number(entry.name, pattern)
        if number is None:
            continue
        if not is_dir(entry):
            if entry.is_symlink():
                problems.append(Problem(str(entry), "broken symlink or symlink loop; folder skipped"))
            continue
        found.append((number, entry))
    found.sort(key=lambda item: (item[0], item[1].name))
    if read is None:
        return found
    kept = []
    for number, entry in sorted(found, key=lambda item: (item[1].is_symlink(), item[0], item[1].name)):
        real = os.path.realpath(entry)
        if real in read:
            problems.append(
                Problem(
                    str(entry),
                    f"symbolic link to {read[real]}, which is read already: skipped (its tensors would count twice)",
                )
            )
            continue
        read[real] = str(entry)
        kept.append((number, entry))
    return sorted(kept, key=lambda item: (item[0], item[1].name))


def is_rank_folder(name: str) -> bool:
    """Whether ``name`` is a rank folder's: ``rank{M}`` (``rank``), or msprobe's ``proc{pid}``."""
    return RANK_RE.match(name) is not None or PROC_RE.match(name) is not None


def rank_folders(folder: Path, problems: list[Problem], read: dict[str, str] | None = None) -> list[tuple[int, Path]]:
    """The rank folders of ``folder`` with their ranks (as :func:`child_folders` gives them): its ``rank{M}/``
    folders; where it has none, its ``proc{pid}/`` ones, ranked 0, 1, ... in process-id order (a problem says so
    when there are several: which rank each process had is not recorded). A ``proc{pid}/`` folder beside rank
    folders is skipped, with a problem."""
    ranks = child_folders(folder, RANK_RE, problems, read)
    procs = child_folders(folder, PROC_RE, problems, None if ranks else read)
    if ranks:
        problems.extend(Problem(str(entry), "process folder beside rank folders; skipped") for _pid, entry in procs)
        return ranks
    if len(procs) > 1:
        problems.append(
            Problem(
                str(folder),
                f"{len(procs)} proc<pid> folders (msprobe names a process's folder by its id when it knows no rank): "
                f"read as ranks 0-{len(procs) - 1} in process-id order",
            )
        )
    return [(rank, entry) for rank, (_pid, entry) in enumerate(procs)]


def find_dump_files(path: Path, problems: list[Problem]) -> list[DumpSource]:
    """Every ``dump.json`` under ``path`` (a run, step or rank folder, or the file itself), with its step and rank
    (rank folders as :func:`rank_folders` takes them).

    Step and rank folders that are symbolic links to folders read already are skipped (a problem says so).
    """
    if not is_dir(path):
        rank = folder_number(path.parent.name, RANK_RE)
        if rank is None and PROC_RE.match(path.parent.name):
            rank = 0  # (a process's folder opened on its own: the step's only one, as msprobe writes them)
        step = folder_number(path.parent.parent.name, STEP_RE) if rank is not None else None
        return [DumpSource(path, -1 if step is None else step, -1 if rank is None else rank)]
    if (path / "dump.json").is_file():
        return find_dump_files(path / "dump.json", problems)
    sources = []
    read: dict[str, str] = {}
    own_step = folder_number(path.name, STEP_RE)
    for rank, rank_dir in rank_folders(path, problems, read):
        if (rank_dir / "dump.json").is_file():
            sources.append(DumpSource(rank_dir / "dump.json", -1 if own_step is None else own_step, rank))
    if sources:
        return sources
    for step, step_dir in child_folders(path, STEP_RE, problems, read):
        for rank, rank_dir in rank_folders(step_dir, problems, read):
            if (rank_dir / "dump.json").is_file():
                sources.append(DumpSource(rank_dir / "dump.json", step, rank))
            elif os.path.lexists(rank_dir / "dump.json"):
                problems.append(
                    Problem(str(rank_dir / "dump.json"), f"{_why_unusable(rank_dir / 'dump.json')}; skipped")
                )
            else:
                problems.append(Problem(str(rank_dir), "rank folder without dump.json; skipped"))
    return sources


def _why_unusable(path: Path) -> str:
    """Why ``path``, which exists, is not a regular file that can be read."""
    try:
        return not_regular(os.stat(path).st_mode)
    except OSError as exc:
        return f"cannot read the file: {exc.strerror or exc}"


def run_name(path: Path) -> str:
    """The run's name: the folder above ``step*/rank*/`` when the layout shows it, else the folder's name."""
    folder = path if is_dir(path) else path.parent
    if is_rank_folder(folder.name):
        folder = folder.parent
    if STEP_RE.match(folder.name):
        folder = folder.parent
    return folder.name
