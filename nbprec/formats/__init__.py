"""Dump format readers, and :func:`open_dump` which picks the right one.

Each reader is one module holding one :class:`~nbprec.formats.base.DumpReader` subclass. Readers are
listed in :data:`READERS` by import path and imported only when probed, so a reader's heavy
dependencies (torch, protobuf) are never loaded unless its format is in use. Importing this package loads no
numpy either (the dump model is imported when a dump is opened), so that its numpy-free modules (the ``.pt``
archive layer, :mod:`nbprec.formats._ptzip`) serve code that runs before numpy is loaded
(:mod:`nbprec.compare.early`).
"""

from __future__ import annotations

import importlib
import os

from nbprec.errors import DumpFormatError, EmptyDumpError, UnknownFormatError

TYPE_CHECKING = False  # (without importing typing: see the module docstring)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from nbprec.dump import Dump
    from nbprec.formats.base import DumpReader

#: format name -> "module:ReaderClass", in probing order (most specific first).
READERS: dict[str, str] = {
    "nbprec": "nbprec.formats.native_read:NativeDumpReader",
    "msprobe": "nbprec.formats.msprobe:MsprobeDumpReader",
    "ptdbg": "nbprec.formats.ptdbg:PtdbgDumpReader",
    "cann": "nbprec.formats.cann:CannDumpReader",
    "tf_npy": "nbprec.formats.tf_npy:TfNpyDumpReader",
}


def reader_class(format: str) -> type[DumpReader]:
    """The reader class registered under ``format``."""
    try:
        target = READERS[format]
    except KeyError:
        raise UnknownFormatError(format, f"no reader named {format!r}; known formats: {', '.join(READERS)}") from None
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def check_dump_path(path: str | os.PathLike[str]) -> Path:
    """Resolve ``path``, raising clear errors for missing paths, symlink loops and empty folders."""
    from pathlib import Path

    p = Path(path).expanduser()
    try:
        resolved = p.resolve(strict=True)
    except RuntimeError as exc:  # Python < 3.13 raises RuntimeError on a symlink loop
        raise DumpFormatError(p, f"symlink loop: {exc}") from exc
    except FileNotFoundError:
        if p.is_symlink():
            raise DumpFormatError(p, "broken symlink (or symlink loop): its target does not exist") from None
        raise DumpFormatError(p, "no such file or folder") from None
    except OSError as exc:
        raise DumpFormatError(p, f"cannot resolve path: {exc.strerror or exc}") from exc
    if resolved.is_dir():
        try:
            with os.scandir(resolved) as entries:  # (the first entry: not a list of the whole folder)
                next(entries)
        except StopIteration:
            raise EmptyDumpError(p, "the folder is empty: there is no dump in it") from None
        except PermissionError as exc:
            raise DumpFormatError(p, "permission denied while listing the folder") from exc
    return resolved


def guess_format(path: str | os.PathLike[str]) -> str:
    """Name of the first reader that recognises ``path``; raises :class:`UnknownFormatError` if none does."""
    from nbprec.formats._probe import shared_listings

    p = check_dump_path(path)
    from nbprec.formats.probes import PROBES

    with shared_listings():  # the readers' probes list each folder once between them
        for name in READERS:
            probe = PROBES.get(name)  # (a reader costly to import is not imported to be told no)
            if probe(p) if probe is not None else reader_class(name).guess_can_open(p):
                return name
    hints = [hint for hint in (_near_miss(name, p) for name in NEAR_MISSES) if hint]
    raise UnknownFormatError(
        path,
        "not recognised as any dump format nbprec reads "
        f"({', '.join(READERS)}){''.join(f': {hint}' for hint in hints)}; pass format=... to choose a reader "
        "explicitly",
    )


#: format name -> "module:function" telling why a path that format's probe turned down may still be one of its
#: dumps (a sentence, or None), asked only when no reader recognised the path.
NEAR_MISSES: dict[str, str] = {"cann": "nbprec.formats.cann_index:near_miss"}


def _near_miss(format: str, path: Path) -> str | None:
    module_name, _, function = NEAR_MISSES[format].partition(":")
    return getattr(importlib.import_module(module_name), function)(path)


def open_dump(path: str | os.PathLike[str], format: str | None = None, **options: Any) -> Dump:
    """Open a dump of any supported format.

    Parameters
    ----------
    path
        A dump folder (or file, for single-file formats).
    format
        A reader name from :data:`READERS`; guessed from the content when omitted.
    **options
        Passed to the reader (for example ``step=`` or ``occurrence=`` for TensorFlow dumps).

    Examples
    --------
    >>> dump = nbprec.open("tests/fixtures/msprobe/fp32_tensor_mix")  # doctest: +SKIP
    >>> dump.format                                                    # doctest: +SKIP
    'msprobe'
    """
    from nbprec._gc import paused_gc

    p = check_dump_path(path)
    name = format or guess_format(p)
    with paused_gc():  # an index is many small objects in no cycle: the collector would scan them again and again
        return reader_class(name)().open(p, **options)


def __getattr__(name: str) -> Any:
    if name == "DumpReader":  # (the base class imports the dump model, and numpy: on first use)
        from nbprec.formats.base import DumpReader

        return DumpReader
    raise AttributeError(f"module 'nbprec.formats' has no attribute {name!r}")


__all__ = ["READERS", "DumpReader", "check_dump_path", "guess_format", "open_dump", "reader_class"]
