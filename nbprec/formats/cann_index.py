"""A CANN dump's index rows, from its file names and headers, without numpy: what opening one reads.

:func:`index_rows` walks the dump tree (:func:`~nbprec.formats.cann_tree.walk_dump_tree`), keeps one file per op,
step and device (:func:`select_occurrences`), reads each file's header (:func:`read_header`: a protobuf
``DumpData`` message) and plans each input's and output's layout (:mod:`nbprec.formats.cann_layout`): a row of
:data:`COLUMNS` per tensor. :class:`~nbprec.formats.cann.CannDumpReader` makes the dump's index of them.

The ``nbprec compare`` command's early worker (:mod:`nbprec.compare.early`), forked before the command imports
numpy, makes the rows of a CANN target while the command imports numpy, and sends them (:func:`ship_rows`): the
walk, the header reads, protobuf's own import and the layout plans are 40-50 ms of the command's opening of an NPU
comparison otherwise. The reader takes them (:func:`shipped_rows`) for the same path, options and GE graph file
when every folder the worker listed and every file it read is as the worker saw it (the same device, inode, size,
modification and change times); else it reads the dump itself. This module imports neither numpy nor pandas.
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from nbprec._record import Record
from nbprec.dtypes import DTYPE_NAMES, ITEMSIZES
from nbprec.dump_problems import Problem, first_problem
from nbprec.errors import DumpFormatError, EmptyDumpError
from nbprec.formats import _prescan
from nbprec.formats._dumpdata import CANN_DTYPES, parse_header
from nbprec.formats._files import open_regular
from nbprec.formats._probe import find_first_file
from nbprec.formats.cann_layout import TensorLayout, plan_key, plan_layout
from nbprec.formats.cann_tree import DumpFile, parse_file_name, read_name_mapping, safe_name, walk_dump_tree

#: Header length above which a file is refused: real headers are a few KiB (a malicious one could ask for GiBs).
MAX_HEADER = 64 << 20
#: Bytes read at once from the start of a file: the length and, nearly always, the whole header.
_HEAD_READ = 8192
OCCURRENCES = ("last", "first", "all")
LAYOUTS = ("origin", "storage")
_SCOPE = re.compile(r"^(.*)/[^/]*$")

#: The index columns of a CANN dump's rows: the common ones, then this format's own.
COLUMNS = (
    "name", "step", "rank", "op", "op_type", "module", "role", "slot", "dtype", "shape", "numel", "file", "has_data",
    "storage_format", "storage_shape", "origin_format", "origin_name", "origin_index", "task_id", "stream_id",
    "timestamp", "model", "offset", "nbytes",
)  # fmt: skip

#: The kind of the rows the command's early worker sends (:mod:`nbprec.formats._prescan`).
SHIPPED_KIND = "cann-index"


class CannHeader(Record):
    """A parsed dump file: its header message, where the payloads start, the file's size, and its identity as
    it was read (:func:`nbprec.formats._prescan.identity`)."""

    message: Any
    payload_start: int
    file_size: int
    identity: tuple = ()


def read_header(path: str | Path) -> CannHeader:
    """Read and check the header of the dump file ``path`` (payloads are not read).

    Raises :class:`~nbprec.errors.DumpFormatError` naming the file when it is not a regular file, is too
    short, declares a header past its end, holds no valid ``DumpData`` message, or declares payloads that
    add up past its end (a truncated file).
    """
    file = str(path)
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise DumpFormatError(file, f"cannot open the file: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DumpFormatError(file, "not a regular file (a device, FIFO or socket): not read")
        size = info.st_size
        head = os.pread(fd, _HEAD_READ, 0)
        if size <= 8 or len(head) < 8:
            raise DumpFormatError(file, f"too short for a CANN dump file ({size} bytes; the header length alone is 8)")
        header_len = int.from_bytes(head[:8], "little")
        if header_len > size - 8:
            raise DumpFormatError(
                file,
                f"header length {header_len} runs past the end of the file ({size} bytes): truncated or not a dump",
            )
        if header_len > MAX_HEADER:
            raise DumpFormatError(file, f"header length {header_len} is implausibly large (over {MAX_HEADER} bytes)")
        raw = head[8 : 8 + header_len]
        if len(raw) < header_len:
            raw += os.pread(fd, header_len - len(raw), 8 + len(raw))
    finally:
        os.close(fd)
    message = parse_header(raw, file)
    header = CannHeader(message, 8 + header_len, size, _prescan.identity(info))
    declared = sum(int(t.size) for group in (message.input, message.output, message.buffer) for t in group)
    if header.payload_start + declared > size:
        raise DumpFormatError(
            file,
            f"the header declares {declared} payload bytes after byte {header.payload_start}, but the file has "
            f"{size} bytes: the file was cut short",
        )
    return header


class IndexRows(Record):
    """What opening a CANN dump reads: a row of :data:`COLUMNS` per tensor (as one list per column), the
    problems met, and the dump's models, overflow debug files (:meth:`DumpFile.as_record
    <nbprec.formats.cann_tree.DumpFile.as_record>` each) and GE graph files."""

    columns: dict[str, list]
    problems: list[Problem]
    models: list[str]
    opdebug: list[dict[str, Any]]
    graphs: list[str]


def index_rows(
    path: Path,
    *,
    steps: set[int] | None = None,
    occurrence: str = "last",
    hints: GraphHints | None = None,
    layout: str = "origin",
    progress: Any = None,
    seen: list[tuple[str, tuple | None]] | None = None,
) -> IndexRows:
    """The :class:`IndexRows` of the CANN dump at ``path`` (a folder of the tree, or one file), as
    :meth:`CannDumpReader.open <nbprec.formats.cann.CannDumpReader.open>` describes its options; ``progress(done,
    total)`` after each file; ``seen``, when given, gets the identity of every folder listed and file read, with its
    path (:func:`shipped_rows` checks them).

    Raises :class:`~nbprec.errors.DumpFormatError` for a single file that is not a readable dump file, and
    :class:`~nbprec.errors.EmptyDumpError` when no file could be used."""
    problems: list[Problem] = []
    tree = walk_dump_tree(path, problems, steps=steps, listed=seen)
    if path.is_file() and not tree.files and not tree.opdebug:
        raise DumpFormatError(path, "not a CANN dump file: the name does not follow {op_type}.{op_name}.{task_id}...")
    files = select_occurrences(tree.files, occurrence, problems)
    rows: list[tuple] = []
    plans: dict[tuple, TensorLayout] = {}
    listed = len(problems)  # (the walk's: names that break the naming rule, links out of the dump, ...)
    for done, found in enumerate(files, 1):
        try:
            header = read_header(found.path)
        except DumpFormatError as exc:
            if path.is_file():
                raise
            problems.append(Problem(str(found.path), exc.problem))
            continue
        if seen is not None:
            seen.append((str(found.path), header.identity))
        _add_rows(found, header, layout, hints, problems, plans, rows)
        if progress is not None:
            progress(done, len(files))
    if not rows and not tree.opdebug:
        raise EmptyDumpError(
            path,
            f"no readable CANN dump file ({len(problems)} files or folders could not be used"
            f"{first_problem(problems, after=listed)})",
        )
    # one list per column, transposed once here (a list per column, appended to per tensor, cost twice as much)
    if rows:
        columns = {name: list(values) for name, values in zip(COLUMNS, zip(*rows, strict=True), strict=True)}
    else:
        columns = {name: [] for name in COLUMNS}
    return IndexRows(
        columns,
        problems,
        sorted({f.model for f in files if f.model}),
        [f.as_record() for f in tree.opdebug],
        [str(g) for g in tree.graphs],
    )


def _scope(name: str) -> str:
    m = _SCOPE.match(name)
    return m[1] if m else ""


def _add_rows(
    found: DumpFile,
    header: CannHeader,
    layout: str,
    hints: GraphHints | None,
    problems: list[Problem],
    plans: dict[tuple, TensorLayout],
    rows: list[tuple],
) -> None:
    """The rows (in :data:`COLUMNS`' order) of one dump file's inputs and outputs, appended to ``rows``.
    ``plans`` holds the layout plans made so far, by :func:`~nbprec.formats.cann_layout.plan_key`."""
    message = header.message
    op = message.op_name or (hints.real_name(found.op_name) if hints is not None else found.op_name)
    op += found.suffix
    offset = header.payload_start
    file, module = str(found.path), _scope(op)  # the same for every tensor of the file
    step, rank, op_type, task_id, stream_id = found.step, found.rank, found.op_type, found.task_id, found.stream_id
    timestamp, model, storage = found.timestamp, found.model, layout == "storage"
    tensors = [("input", i, t) for i, t in enumerate(message.input)]
    tensors += [("output", i, t) for i, t in enumerate(message.output)]
    for role, slot, tensor in tensors:
        nbytes = int(tensor.size)
        start, offset = offset, offset + nbytes
        dtype = CANN_DTYPES.get(int(tensor.data_type), f"cann_dtype_{int(tensor.data_type)}")
        name = f"{op}:{role}:{slot}"
        origin = tensor.original_op if role == "output" else None
        hint = hints.layout(op, role, slot) if hints is not None else None
        key = plan_key(tensor, dtype, origin, hint, storage)
        plan: TensorLayout | None = plans.get(key)
        if plan is None:
            plan = plans[key] = plan_layout(tensor, dtype, origin, hint, keep_storage=storage)
        has_data = dtype in DTYPE_NAMES
        note = plan.problem
        if not has_data:
            note = f"dtype {dtype} has no numpy equivalent: indexed, payload not loadable"
        elif plan.storage_numel is not None and plan.storage_numel * ITEMSIZES[dtype] != nbytes:
            note = (
                f"declared size {nbytes} bytes does not match shape {list(plan.storage_shape)} x {dtype} "
                f"({plan.storage_numel * ITEMSIZES[dtype]} bytes): payload not loadable"
            )
            has_data = False
        if note:
            problems.append(Problem(file, note, name))
        named = origin is not None and origin.name
        row = (
            name, step, rank, op, op_type, module, role, str(slot), dtype, plan.shape, math.prod(plan.shape), file,
            has_data, plan.storage_format, plan.storage_shape, plan.origin_format,
            origin.name if origin is not None else "", int(origin.output_index) if named else -1, task_id, stream_id,
            timestamp, model, start, nbytes,
        )  # fmt: skip
        rows.append(row)


def select_occurrences(files: list[DumpFile], occurrence: str, problems: list[Problem]) -> list[DumpFile]:
    """One file per op, step and device (the last or first in time), or all of them renamed ``op#k``."""
    groups: dict[tuple, list[DumpFile]] = {}
    for f in files:
        groups.setdefault((f.step, f.rank, f.model, f.op_key), []).append(f)
    chosen: list[DumpFile] = []
    repeated = 0
    for group in groups.values():
        group.sort(key=lambda f: (f.timestamp, f.task_id))
        if len(group) == 1:
            chosen.append(group[0])
        elif occurrence == "all":
            chosen.extend(f if k == 0 else f.renamed(k) for k, f in enumerate(group))
        else:
            repeated += len(group) - 1
            chosen.append(group[-1] if occurrence == "last" else group[0])
    if repeated:
        problems.append(
            Problem(
                "",
                f"{repeated} dump files repeat an op already dumped in the same step and device; the {occurrence} "
                "of each was kept (open with occurrence='all' to keep every one)",
            )
        )
    return chosen


class GraphHints:
    """What a GE graph tells the reader: each op's real name (a dump file without ``op_name`` in its header has
    only the sanitised one of its file name) and each tensor's original layout."""

    def __init__(self, graph: Any) -> None:
        from nbprec.graph.ge import GeModel, read_ge_model

        model = graph if isinstance(graph, GeModel) else read_ge_model(graph)
        self.ops = model.by_name
        sanitised: dict[str, list[str]] = {}
        for name in self.ops:
            sanitised.setdefault(safe_name(name), []).append(name)
        self.names = {safe: names[0] for safe, names in sanitised.items() if len(names) == 1}

    def real_name(self, op: str) -> str:
        """The graph's name of ``op`` (itself when the graph has it, or cannot tell)."""
        return op if op in self.ops else self.names.get(op, op)

    def layout(self, op: str, role: str, slot: int) -> tuple[str, tuple[int, ...] | None] | None:
        """(origin format, origin shape) of a tensor from the graph's descriptor, None when unknown."""
        ge_op = self.ops.get(op)
        if ge_op is None:
            return None
        descs = ge_op.input_descs if role == "input" else ge_op.output_descs
        if slot >= len(descs):
            return None
        desc = descs[slot]
        fmt = desc.attrs.get("_datadump_origin_format") or desc.origin_format or ""
        return str(fmt), desc.origin_shape


# -- guessing ----------------------------------------------------------------------------------------------------


#: Dump files of a folder looked at when its first one does not start as a dump file does (:func:`looks_like_dump`).
_GUESS_SAMPLE = 16


def looks_like_dump(path: Path) -> bool:
    """A dump file, or a folder with one within six levels, whose name and first bytes look right
    (:meth:`CannDumpReader.guess_can_open <nbprec.formats.cann.CannDumpReader.guess_can_open>`). When the first
    such file found is cut short or damaged (a run stopped while dumping), the next few dump files of its folder
    are looked at too: the dump is opened, and that file's problem recorded."""
    try:
        first = _first_dump_file(path)
        if first is None or path.is_file():
            return first is not None and _plausible(first)
        return _plausible(first) or any(_plausible(f) for f in _more_dump_files(first))
    except OSError:
        return False


def _first_dump_file(path: Path) -> Path | None:
    """``path`` itself when it is a file named as a dump file; in a folder, the first such file within six levels
    (through a name mapping, when long names were replaced by short ones); None when there is none."""
    if path.is_file():
        return None if isinstance(parse_file_name(path.name), str) else path
    first = find_first_file(path, dump_or_mapping, max_depth=6)
    if first is not None and first.name == "mapping.csv":
        mapped = read_name_mapping(first.parent, [])
        first = first.parent / next(iter(mapped)) if mapped else None
    return first


def near_miss(path: Path) -> str | None:
    """Why ``path``, which :func:`looks_like_dump` turned down, may still be a CANN dump: a sentence naming a
    file of it named as a dump file and what is wrong with it (every one looked at is cut short or damaged: a run
    stopped while dumping, a copy cut off), or None when nothing in it is named as one."""
    try:
        first = _first_dump_file(path)
        if first is None:
            return None
        read_header(first)
    except DumpFormatError as exc:
        return (
            f"it holds files named as CANN dump files, but none of those looked at starts as one (the first, "
            f"{first}: {exc.problem}); if it is a CANN dump, copy it again whole, or dump again (a run stopped "
            "while dumping leaves files cut short)"
        )
    except OSError:
        return None
    return None


def _more_dump_files(first: Path) -> list[Path]:
    """Up to :data:`_GUESS_SAMPLE` other dump files of ``first``'s folder, in the folder's order."""
    found: list[Path] = []
    with os.scandir(first.parent) as entries:
        for entry in entries:
            if entry.name != first.name and entry.name != "mapping.csv" and dump_or_mapping(entry.name):
                found.append(Path(entry.path))
                if len(found) >= _GUESS_SAMPLE:
                    break
    return found


def dump_or_mapping(name: str) -> bool:
    """Whether ``name`` is a dump file's (an overflow debug file's too) or a name mapping's."""
    if name == "mapping.csv":
        return True
    if not name.rstrip("\n")[-1:].isdigit():  # (the naming rule ends with a number: a folder of other files,
        return False  # a TensorFlow dump's .npy files say, is looked through without the parser)
    return not isinstance(parse_file_name(name), str)  # Opdebug files are dump files too


def _plausible(file: Path) -> bool:
    """Whether ``file`` starts with a header length that fits in it (8 bytes read)."""
    try:
        fd, size = open_regular(file)  # never blocks on a FIFO, never reads a device
    except (OSError, DumpFormatError):
        return False
    try:
        head = os.pread(fd, 8, 0)
    except OSError:
        return False
    finally:
        os.close(fd)
    return len(head) == 8 and 0 < int.from_bytes(head, "little") <= min(size - 8, MAX_HEADER)


# -- the rows the command's early worker makes ---------------------------------------------------------------------


def ship_rows(target: str, graph: Any, graph_key: tuple | None, ship: Any, beat: Any = None) -> bool:
    """In ``nbprec compare``'s early worker: make the rows of the CANN dump ``target`` (the path as the command
    was given it) as the reader makes them with its defaults, with the GE graph model ``graph`` read from the file
    whose key is ``graph_key`` (None: no graph), and send them through ``ship`` (the worker's
    :class:`~nbprec.compare.early_msprobe.Shipper`); ``beat(done, total)`` after each file. Whether they were
    sent: not for a target that does not look like a CANN dump, nor when reading it fails (the command then reads
    it, and tells why)."""
    from nbprec.formats import check_dump_path

    try:
        path = check_dump_path(target)
        if not looks_like_dump(path):
            return False
        seen: list[tuple[str, tuple | None]] = []
        hints = GraphHints(graph) if graph is not None else None
        rows = index_rows(path, hints=hints, progress=beat, seen=seen)
        problems = [(p.file, p.problem, p.record) for p in rows.problems]
        record = (seen, rows.columns, problems, rows.models, rows.opdebug, rows.graphs)
        ship(_key(path, None, "last", "origin", graph_key), record)
        return True
    except Exception:
        return False


def shipped_rows(path: Path, steps: set[int] | None, occurrence: str, layout: str, graph: Any) -> IndexRows | None:
    """The rows the command's early worker made of the dump at ``path`` (:func:`ship_rows`) for these options and
    ``graph`` (a path or :class:`~nbprec.graph.ge.GeModel`, or None), when it made them and every folder it listed
    and file it read is as it saw them; else None (the reader reads the dump). Waits for a worker still making
    them (it started before this process needed them, and is ahead)."""
    if not _prescan.active():
        return None
    graph_key = _graph_key(graph)
    if graph is not None and graph_key is None:
        return None
    found = _prescan.take_key(_key(path, steps, occurrence, layout, graph_key), wait=True)
    if not isinstance(found, tuple) or len(found) != 6:
        return None
    seen, columns, problems, models, opdebug, graphs = found
    if any(_prescan.identity_of(where) != identity for where, identity in seen):  # (marshal keeps tuples)
        return None
    return IndexRows(columns, [Problem(*p) for p in problems], models, opdebug, graphs)


def _key(path: Path, steps: set[int] | None, occurrence: str, layout: str, graph_key: tuple | None) -> tuple:
    """The key of a dump's rows: the path as given and where it leads, the options, and the graph file's key."""
    return (
        SHIPPED_KIND,
        str(path),
        os.path.realpath(path),
        None if steps is None else tuple(sorted(steps)),
        occurrence,
        layout,
        graph_key,
    )


def _graph_key(graph: Any) -> tuple | None:
    """The key of the GE graph file ``graph`` (a path, or a :class:`~nbprec.graph.ge.GeModel` read from one) as it
    is now, in the form :func:`nbprec.graph.ge.shipped_record` keys it; None without one."""
    from nbprec.graph.ge import SHIPPED_KIND as GRAPH_KIND
    from nbprec.graph.ge import GeModel, graph_file

    try:
        file = graph.path if isinstance(graph, GeModel) else graph_file(graph) if graph is not None else None
        return _prescan.key(os.stat(file), GRAPH_KIND) if file else None
    except Exception:  # (no such file, or one the reader will refuse with its own error)
        return None


__all__ = [
    "COLUMNS",
    "LAYOUTS",
    "MAX_HEADER",
    "OCCURRENCES",
    "CannHeader",
    "GraphHints",
    "IndexRows",
    "dump_or_mapping",
    "index_rows",
    "looks_like_dump",
    "read_header",
    "select_occurrences",
    "ship_rows",
    "shipped_rows",
]
