"""Damaged copies of an msprobe dump, for the tests that hold a fast path to the general one: each damage must
make the fast path measure less, or measure what the general path would, never differently."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

#: The damages :func:`damaged_copy` makes.
DAMAGES = (
    "swapped_payloads",
    "wrong_extremes",
    "truncated_payload",
    "payload_linked_out",
    "folder_linked_out",
    "zero_tensor",
    "non_finite_extremes",
)


def damaged_copy(tmp_path: Path, source: Path, damage: str) -> Path:
    """A copy of the msprobe run ``source`` (one ``step0/rank0``) under ``tmp_path`` with ``damage`` done to it."""
    run = tmp_path / source.name
    shutil.copytree(source, run, symlinks=True)
    rank = run / "step0" / "rank0"
    payloads = rank / "dump_tensor_data"
    dump_json = rank / "dump.json"
    recorded = json.loads(dump_json.read_text())
    names = sorted(p.name for p in payloads.iterdir())
    if damage == "swapped_payloads":  # two files of other tensors (another shape) under each other's names
        by_size = sorted(names, key=lambda n: (payloads / n).stat().st_size)
        a, b = payloads / by_size[0], payloads / by_size[-1]
        a.rename(tmp_path / "a"), b.rename(a), (tmp_path / "a").rename(b)
    elif damage in ("wrong_extremes", "non_finite_extremes", "zero_tensor"):
        changed = 0
        for op in recorded["data"].values():
            for entry in op.get("output", []) if isinstance(op.get("output"), list) else []:
                if isinstance(entry, dict) and "Max" in entry and changed < 5:
                    if damage == "wrong_extremes":
                        entry["Max"] = entry["Max"] * 2 + 1
                    elif damage == "non_finite_extremes":
                        entry["Min"] = math.inf
                    changed += 1
        assert changed
        if damage == "zero_tensor":  # a target payload of zeros: cosine is undefined, and said why
            zero_payload(payloads / names[len(names) // 2])
        dump_json.write_text(json.dumps(recorded))
    elif damage == "truncated_payload":
        path = payloads / names[3]
        path.write_bytes(path.read_bytes()[:-100])
    elif damage == "payload_linked_out":
        outside = tmp_path / "outside.pt"
        shutil.copy(payloads / names[4], outside)
        (payloads / names[4]).unlink()
        (payloads / names[4]).symlink_to(outside)
    elif damage == "folder_linked_out":
        elsewhere = tmp_path / "elsewhere"
        payloads.rename(elsewhere)
        payloads.symlink_to(elsewhere, target_is_directory=True)
    else:
        raise ValueError(f"unknown damage {damage!r}")
    return run


def zero_payload(path: Path) -> None:
    """Overwrite the tensor bytes of a small ``.pt`` archive with zeros (the archive stays valid: no CRC check)."""
    from nbprec.formats._ptzip import _small_archive, _tensor_entry

    head, entries = _small_archive(str(path))
    (_key, _dtype, _offset, _size, _stride), (start, nbytes) = _tensor_entry(-1, len(head), head, entries)
    data = bytearray(head)
    data[start : start + nbytes] = bytes(nbytes)
    path.write_bytes(bytes(data))
