"""File names and folder trees of CANN NPU dumps: which files are dumps, overflow debug files or GE graphs.

A dump file is named ``{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}`` (FORMATS.md section 2):
``stream_id`` is absent in old versions (two numbers), and newer ones append up to four numbers, the 2nd and
3rd of them ``context_id`` and ``thread_id``. In names, ``.``, ``/``, ``\\`` and spaces became ``_``. A name
too long for the file system is replaced by a short one that the folder's ``mapping.csv`` (``short,original``
rows) maps back. The tree is ``dump/{time}/{device}/{model_name}/{model_id}/{step}/<files>``.

Examples
--------
>>> parse_file_name("TransData.trans_TransData_4.41.0.1675157077176648").task_id
41
>>> parse_file_name("notes.txt")
'does not follow the naming rule {op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}'
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path
from typing import Any

from nbprec._record import Factory, Record, asdict, replace
from nbprec.dump_problems import Problem
from nbprec.formats._prescan import identity_of

_UNSAFE = re.compile(r"[./\\ ]")
_NAME = re.compile(r"^([A-Za-z0-9_-]+)\.([^.]+)((?:\.[0-9]+){2,7})$")
_OPDEBUG = re.compile(r"^opdebug\.node_opdebug((?:\.[0-9]+){2,7})$", re.IGNORECASE)
_GRAPH = re.compile(r"^ge_proto_\d+_.*\.(txt|json)$", re.IGNORECASE)
#: Files beside dump files that are not dumps (graphs, mappings, logs, converted arrays): not reported.
_OTHER_FILES = (".txt", ".json", ".csv", ".npy", ".pkl", ".log", ".pb", ".om", ".py", ".md", ".bin", ".pbtxt")
MAX_DEPTH = 8
_MAPPING = "mapping.csv"
_MAPPING_MAX = 100 << 20
_NAMING_RULE = "does not follow the naming rule {op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}"


class FileName(Record):
    """The fields of a dump file's name (-1 for numbers the name does not carry)."""

    op_type: str
    op_name: str
    task_id: int
    stream_id: int
    timestamp: int
    context_id: int = -1
    thread_id: int = -1


def safe_name(op_name: str) -> str:
    """An op name as dump file names spell it: ``.``, ``/``, ``\\`` and spaces replaced by ``_``.

    >>> safe_name("conv1/Conv2D")
    'conv1_Conv2D'
    """
    return _UNSAFE.sub("_", op_name)


def _numbers(tail: str) -> tuple[int, int, int, int, int] | str:
    """(task, stream, timestamp, context, thread) from the ``.n.n.n...`` tail of a name."""
    numbers = [int(n) for n in tail.split(".")[1:]]
    if len(numbers) == 2:  # old versions: no stream id
        return numbers[0], -1, numbers[1], -1, -1
    extra = numbers[3:]
    if len(extra) > 4:
        return "more numeric fields than the naming rule allows"
    context = extra[1] if len(extra) > 1 else -1
    thread = extra[2] if len(extra) > 2 else -1
    return numbers[0], numbers[1], numbers[2], context, thread


def parse_file_name(name: str) -> FileName | str:
    """The fields of a dump file name, or the reason ``name`` is not one."""
    m = _NAME.match(name)
    if m is None or name.lower().endswith(_OTHER_FILES):
        return _NAMING_RULE
    numbers = _numbers(m[3])
    if isinstance(numbers, str):
        return numbers
    return FileName(m[1], m[2], *numbers)


def parse_opdebug_name(name: str) -> FileName | None:
    """The fields of an overflow debug file name (``Opdebug.Node_OpDebug.{task}.{stream}.{timestamp}...``)."""
    m = _OPDEBUG.match(name)
    if m is None:
        return None
    numbers = _numbers(m[1])
    return None if isinstance(numbers, str) else FileName("Opdebug", "Node_OpDebug", *numbers)


class DumpFile(Record):
    """A dump file found in the tree, with the step, device (rank) and model its folders name."""

    path: Path
    name: FileName
    step: int = -1
    rank: int = -1
    model: str = ""
    suffix: str = ""  # "#k" for the k-th repeated dump of an op, when every occurrence is kept

    @property
    def op_type(self) -> str:
        return self.name.op_type

    @property
    def op_name(self) -> str:
        return self.name.op_name

    @property
    def op_key(self) -> str:
        return f"{self.name.op_type}.{self.name.op_name}"

    @property
    def task_id(self) -> int:
        return self.name.task_id

    @property
    def stream_id(self) -> int:
        return self.name.stream_id

    @property
    def timestamp(self) -> int:
        return self.name.timestamp

    def renamed(self, k: int) -> DumpFile:
        """This file as the ``k``-th repeated dump of its op."""
        return replace(self, suffix=f"#{k}")

    def as_record(self) -> dict[str, Any]:
        """Plain values: file, step, rank, model and the name's numbers."""
        return {
            "file": str(self.path),
            "step": self.step,
            "rank": self.rank,
            "model": self.model,
            **{k: v for k, v in asdict(self.name).items() if k not in ("op_type", "op_name")},
        }


class DumpTree(Record, frozen=False):
    """What a walk of a dump folder found."""

    files: list[DumpFile] = Factory(list)
    opdebug: list[DumpFile] = Factory(list)
    graphs: list[Path] = Factory(list)


def tree_position(folder: Path) -> tuple[int, int, str]:
    """(step, device, model) of a folder at the bottom of ``{time}/{device}/{model_name}/{model_id}/{step}``.

    ``(-1, -1, "")`` when the folder's path does not end that way (a flat folder of dump files).
    """
    parts = folder.parts
    if len(parts) >= 4 and parts[-1].isdigit() and parts[-2].isdigit() and parts[-4].isdigit():
        return int(parts[-1]), int(parts[-4]), f"{parts[-3]}/{parts[-2]}"
    return -1, -1, ""


def read_name_mapping(folder: Path, problems: list[Problem]) -> dict[str, str]:
    """The folder's ``mapping.csv`` (short file name -> original file name), ``{}`` when it has none."""
    path = folder / _MAPPING
    try:
        if not path.is_file():
            return {}
        if path.stat().st_size > _MAPPING_MAX:
            problems.append(Problem(str(path), f"larger than {_MAPPING_MAX >> 20} MiB: not read"))
            return {}
        with path.open(newline="", encoding="utf-8", errors="replace") as fh:
            rows = list(csv.reader(fh))
    except (OSError, csv.Error) as exc:
        problems.append(Problem(str(path), f"cannot read the file-name mapping: {exc}"))
        return {}
    mapping = {}
    for lineno, row in enumerate(rows, 1):
        if len(row) == 2:
            mapping[row[0].strip()] = row[1].strip()
        elif row:
            problems.append(
                Problem(str(path), f"expected 'short_name,original_name', got {len(row)} fields", str(lineno))
            )
    return mapping


def walk_dump_tree(
    root: Path, problems: list[Problem], *, steps: set[int] | None = None, listed: list | None = None
) -> DumpTree:
    """Every dump file, overflow debug file and GE graph under ``root`` (a folder or one file).

    Symlinked folders are not followed (a loop cannot hang the walk), the walk goes at most
    :data:`MAX_DEPTH` folders down, and anything that is not a regular file (a FIFO, a device) is reported,
    never opened. Files that are neither dumps nor known companions are listed in ``problems``. ``listed``,
    when given, gets ``(path, identity)`` of each folder listed and each name mapping read, taken before (None
    where there is none: :func:`nbprec.formats._prescan.identity_of`).
    """
    tree = DumpTree()
    if not root.is_dir():
        _classify(root, root.name, tree_position(root.parent), tree, problems, steps)
        return tree
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        position = tree_position(folder)
        if listed is not None:
            listed += [(str(folder), identity_of(folder)), (str(folder / _MAPPING), identity_of(folder / _MAPPING))]
        mapping = read_name_mapping(folder, problems)
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            problems.append(Problem(str(folder), f"cannot list the folder: {exc.strerror or exc}"))
            continue
        for entry in entries:
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                if depth < MAX_DEPTH:
                    stack.append((path, depth + 1))
                else:
                    problems.append(Problem(entry.path, f"more than {MAX_DEPTH} folders deep: not read"))
            elif entry.is_symlink() and entry.is_dir():
                problems.append(Problem(entry.path, "symlinked folder: not followed"))
            elif not entry.is_file():
                problems.append(Problem(entry.path, "not a regular file (a FIFO, device or broken link): not read"))
            else:
                _classify(path, mapping.get(entry.name, entry.name), position, tree, problems, steps)
    tree.files.sort(key=lambda f: (f.step, f.rank, f.timestamp, f.task_id, f.path.name))
    tree.opdebug.sort(key=lambda f: (f.step, f.rank, f.timestamp))
    return tree


def _classify(
    path: Path,
    name: str,
    position: tuple[int, int, str],
    tree: DumpTree,
    problems: list[Problem],
    steps: set[int] | None,
) -> None:
    step, rank, model = position
    if steps is not None and step >= 0 and step not in steps:
        return
    if _GRAPH.match(name):
        tree.graphs.append(path)
        return
    debug = parse_opdebug_name(name)
    if debug is not None:
        tree.opdebug.append(DumpFile(path, debug, step, rank, model))
        return
    parsed = parse_file_name(name)
    if isinstance(parsed, FileName):
        tree.files.append(DumpFile(path, parsed, step, rank, model))
    elif name == _MAPPING or name.lower().endswith(_OTHER_FILES) or name.startswith("."):
        return
    else:
        problems.append(Problem(str(path), parsed))


__all__ = [
    "MAX_DEPTH",
    "DumpFile",
    "DumpTree",
    "FileName",
    "parse_file_name",
    "parse_opdebug_name",
    "read_name_mapping",
    "safe_name",
    "tree_position",
    "walk_dump_tree",
]
