"""Cheap probing of folders for format detection: find a first matching file without listing deep trees.

``Path.glob("*/*.pkl")`` stats every entry of a folder to see whether it is a folder, which costs seconds
on a flat dump of 100,000 tensor files. These helpers use ``os.scandir`` (whose entries know their type)
and descend only into sub-folders.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

_shared = threading.local()  # .listings: folder -> its entries, while shared_listings() is active


@contextlib.contextmanager
def shared_listings() -> Iterator[None]:
    """Within the block (in this thread), :func:`find_first_file` lists each folder once: the readers'
    guesses, probing one folder in turn, share its listing (five probes of a flat folder of 800 files took
    5 ms, most of it listing it again)."""
    outer = getattr(_shared, "listings", None)
    if outer is None:
        _shared.listings = {}
    try:
        yield
    finally:
        if outer is None:
            _shared.listings = None


def _entries(folder: Path) -> Listing:
    """The entries of ``folder`` (:class:`Listing`), listed once in a :func:`shared_listings` block; raises
    OSError."""
    listings = getattr(_shared, "listings", None)
    if listings is None:
        return _scan(folder)
    key = os.fspath(folder)
    if key not in listings:
        listings[key] = _scan(folder)
    return listings[key]


class Listing:
    """A folder's entries, sorted once by kind, each kind in the order the folder lists them: ``files`` (the names
    of files and of links to files) and ``file_paths``; ``folders`` (``(name, path)`` of sub-folders, links not
    followed); ``others`` (``(name, path)`` of the rest: links to folders, links that loop or dangle, FIFOs, ...).
    A probe then looks at the kind it wants only: a flat folder of 100,000 files is not walked entry by entry by
    each reader's guess."""

    __slots__ = ("file_paths", "files", "folders", "others")

    def __init__(self) -> None:
        self.files: list[str] = []
        self.file_paths: list[str] = []
        self.folders: list[tuple[str, str]] = []
        self.others: list[tuple[str, str]] = []

    def first_file(self, match: Callable[[str], bool] | str) -> str | None:
        """The path of the first file whose name is ``match`` (a str) or satisfies it (a predicate), or None."""
        files = self.files
        found = match if isinstance(match, str) else next(filter(match, files), None)
        try:
            return None if found is None else self.file_paths[files.index(found)]
        except ValueError:  # (a name the folder does not hold)
            return None


def _scan(folder: Path) -> Listing:
    listing = Listing()
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                listing.folders.append((entry.name, entry.path))
            elif _is_file(entry):
                listing.files.append(entry.name)
                listing.file_paths.append(entry.path)
            else:
                listing.others.append((entry.name, entry.path))
    return listing


def _is_file(entry: os.DirEntry) -> bool:
    """Whether an entry is a file or a link to one (a link loop or a dangling link is not)."""
    try:
        return entry.is_file()
    except OSError:
        return False


def find_first_file(
    root: Path,
    match: Callable[[str], bool] | str,
    *,
    max_depth: int,
    dir_pattern: str = "*",
) -> Path | None:
    """The first file (breadth first, up to ``max_depth`` folders down) whose name is ``match`` (a str) or
    satisfies it (a predicate).

    Only sub-folders whose names match ``dir_pattern`` (an ``fnmatch`` pattern) are entered; symlinked
    folders are not followed, so a symlink loop cannot hang the probe.

    Examples
    --------
    >>> find_first_file(Path("."), lambda n: n == "no-such-file", max_depth=0) is None
    True
    """
    level = [root]
    for depth in range(max_depth + 1):
        next_level = []
        for folder in level:
            try:
                listing = _entries(folder)
            except OSError:
                continue
            found = listing.first_file(match)
            if found is not None:
                return Path(found)
            if depth < max_depth:
                next_level += [Path(path) for name, path in listing.folders if fnmatch.fnmatch(name, dir_pattern)]
        level = sorted(next_level)
    return None


def subfolders(folder: Path) -> list[tuple[str, str]]:
    """``(name, path)`` of the entries of ``folder`` that are folders or links to folders (in a
    :func:`shared_listings` block, from its listing); raises OSError."""
    listing = _entries(folder)
    return listing.folders + [(name, path) for name, path in listing.others if os.path.isdir(path)]
