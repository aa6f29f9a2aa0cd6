"""Whether a path holds a dump of a format: the readers' cheap guesses, apart from the readers themselves.

:func:`nbprec.formats.guess_format` asks the formats in turn; each guess here needs only the standard library,
so that telling a CANN or TensorFlow dump imports none of the readers probed before it (nbprec's, msprobe's and
ptdbg's: 7-9 ms of a command's start-up). Each reader's ``guess_can_open`` is the function here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from nbprec.errors import DumpFormatError
from nbprec.formats._files import open_regular
from nbprec.formats._probe import find_first_file, subfolders

#: The header of an nbprec run folder (:mod:`nbprec.formats.native_read`).
HEADER_FILE = "nbprec-dump.json"
MAX_RUNS = 65536  # nbprec run folders read at most (ranks x steps)
_RANK = re.compile(r"rank(\d+)")
_STEP = re.compile(r"step(\d+)")
_MSPROBE_BYTES = 8192  # of a dump.json looked at
_PTDBG_BYTES = 65536  # of a .pkl looked at


def nbprec_dump(path: Path) -> bool:
    """A folder holding ``nbprec-dump.json``, or run folders named ``rank{M}`` / ``step{N}/rank{M}``."""
    try:
        return Path(path).is_dir() and ((Path(path) / HEADER_FILE).is_file() or is_run_tree(Path(path)))
    except OSError:
        return False


def msprobe_dump(path: Path) -> bool:
    """Whether ``path`` is, or holds at depth <= 2, a ``dump.json`` whose first bytes name a ``data`` key."""
    # ./, rank*/ or proc*/, step*/rank*/ or step*/proc*/ (the patterns only narrow the search)
    searches = ((0, "*"), (1, "[rp][ar]*"), (2, "[srp][tar]*"))
    return _file_or_found(path, ".json", "dump.json", searches, _looks_like_dump_json)


def ptdbg_dump(path: Path) -> bool:
    """Whether ``path`` is, or holds within three folder levels, a ``.pkl`` whose first line is ptdbg's."""
    return _file_or_found(path, ".pkl", lambda name: name.endswith(".pkl"), ((3, "*"),), _looks_like_ptdbg_pkl)


def _file_or_found(
    path: Path,
    suffix: str,
    wanted: Callable[[str], bool] | str,
    searches: tuple[tuple[int, str], ...],
    looks_right: Callable[[Path], bool],
) -> bool:
    """Whether ``path`` is a file of ``suffix`` that ``looks_right``, or the first ``wanted`` file (a name, or a
    test of names) found under it (each search: the depth and the folders entered,
    :func:`~nbprec.formats._probe.find_first_file`) does."""
    try:
        if path.is_file():
            return path.suffix == suffix and looks_right(path)
        for depth, folders in searches:
            candidate = find_first_file(path, wanted, max_depth=depth, dir_pattern=folders)
            if candidate is not None:
                return looks_right(candidate)
    except (OSError, RuntimeError):
        return False
    return False


def _looks_like_dump_json(path: Path) -> bool:
    try:
        fd, _size = open_regular(path)
    except (OSError, DumpFormatError):
        return False
    try:
        head = os.pread(fd, _MSPROBE_BYTES, 0)
    except OSError:
        return False
    finally:
        os.close(fd)
    return head.lstrip().startswith(b"{") and b'"data"' in head


def _looks_like_ptdbg_pkl(path: Path) -> bool:
    from nbprec.formats._jsonstream import loads

    try:
        with path.open("rb") as f:
            head = f.read(_PTDBG_BYTES)
    except OSError:
        return False
    first = head.split(b"\n", 1)[0].strip()
    if not first.startswith(b'["'):
        return False
    try:
        item = loads(first)
    except (ValueError, RecursionError):  # (bad JSON or bytes)
        return False
    return isinstance(item, list) and len(item) in (2, 5, 6) and isinstance(item[0], str)


# -- nbprec run trees ------------------------------------------------------------------------------------------
def _is_run(path: Path) -> bool:
    try:
        return (path / HEADER_FILE).is_file()
    except OSError:
        return False


def _subfolders(path: Path, pattern: re.Pattern[str]) -> list[tuple[int, Path]]:
    """Subfolders named ``{prefix}{N}`` (links to folders too), with their numbers, in number order."""
    try:  # the folder's listing, shared with the other guesses: a flat folder's files are not looked at
        named = [(int(m.group(1)), name) for name, _path in subfolders(path) if (m := pattern.fullmatch(name))]
    except OSError:
        return []
    found = [(number, path / name) for number, name in named]
    return sorted(found, key=lambda item: (item[0], item[1].name))


def find_run_folders(path: Path) -> list[tuple[int | None, int, Path]]:
    """``(step, rank, folder)`` of each run folder under ``path``: ``rank{M}/`` or ``step{N}/rank{M}/``
    (``step`` is None for the first form); empty when ``path`` is not such a tree."""
    if _is_run(path):
        return []
    runs: list[tuple[int | None, int, Path]] = [(None, r, p) for r, p in _subfolders(path, _RANK) if _is_run(p)]
    for step, folder in _subfolders(path, _STEP):
        runs += [(step, r, p) for r, p in _subfolders(folder, _RANK) if _is_run(p)]
        if len(runs) > MAX_RUNS:
            break
    return runs


def is_run_tree(path: Path) -> bool:
    """Whether ``path`` is a folder of nbprec run folders named by rank (and step)."""
    try:
        return path.is_dir() and bool(find_run_folders(path))
    except OSError:
        return False


#: format name -> its guess, for the formats whose readers are costly to import (the others: the reader's own).
PROBES = {"nbprec": nbprec_dump, "msprobe": msprobe_dump, "ptdbg": ptdbg_dump}

__all__ = ["HEADER_FILE", "PROBES", "find_run_folders", "is_run_tree", "msprobe_dump", "nbprec_dump", "ptdbg_dump"]
