"""Where an msprobe dump's payload files are: ``dump_tensor_data`` beside its dump.json, else the
``dump_data_dir`` the dump.json records, when that is an msprobe tensor folder; never a folder outside the dump
otherwise (a symbolic link leading out, or a recorded path that is not a tensor folder, is a problem)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nbprec.formats._files import PayloadFolder, inside, printable, real_folder

TENSOR_DIR = "dump_tensor_data"


def checked_data_dir(recorded: str) -> str:
    """The real path of a ``dump_data_dir`` recorded in dump.json when it is an msprobe tensor folder (a
    ``dump_tensor_data`` folder beside a ``dump.json``), '' otherwise."""
    real = os.path.realpath(recorded)
    if os.path.basename(real) != TENSOR_DIR or not os.path.isdir(real):
        return ""
    beside = os.path.join(os.path.dirname(real), "dump.json")
    with contextlib.suppress(OSError):
        if stat.S_ISREG(os.stat(beside).st_mode):
            return real
    return ""


def tensor_folder(
    tensor_dir: Path, recorded: Any, roots: list[str], named_any: bool, problem: Callable[[str], None]
) -> tuple[PayloadFolder | str, Path]:
    """(the listing of the tensor folder, or why the payloads are unavailable; the folder's path).

    ``tensor_dir`` is the folder beside dump.json, ``recorded`` the ``dump_data_dir`` dump.json records (used
    when there is none beside it and ``named_any`` payload is named), ``roots`` the real folders payloads may lie
    in (a checked recorded folder is appended to it); ``problem(sentence)`` records a recorded folder refused.
    """
    missing = f"tensor folder not found ({printable(tensor_dir)})"
    if os.path.isdir(tensor_dir):
        if not inside(tensor_dir, roots):  # a symbolic link (of it, or of its step folder) leads out
            real = os.path.realpath(tensor_dir)
            return (
                f"tensor folder {printable(tensor_dir)} lies outside the dump (at {printable(real)}): not read",
                tensor_dir,
            )
        try:
            return PayloadFolder(tensor_dir, roots), tensor_dir
        except OSError as exc:
            return f"cannot list the tensor folder {printable(tensor_dir)} ({exc.strerror or exc})", tensor_dir
    if not (isinstance(recorded, str) and recorded) or not named_any or not os.path.isdir(recorded):
        return missing, tensor_dir  # no recorded folder here either (the dump was moved)
    real = checked_data_dir(recorded)
    if not real:
        problem(
            f"dump_data_dir {recorded!r} is not an msprobe tensor folder (a {TENSOR_DIR} folder beside a "
            "dump.json): it lies outside the dump and was not read"
        )
        return missing, tensor_dir
    try:
        folder = PayloadFolder(Path(real), [*roots, real_folder(real)])
    except OSError as exc:
        return f"cannot list the tensor folder {printable(recorded)} ({exc.strerror or exc})", tensor_dir
    roots.append(real_folder(real))
    return folder, Path(recorded)


__all__ = ["TENSOR_DIR", "checked_data_dir", "tensor_folder"]
