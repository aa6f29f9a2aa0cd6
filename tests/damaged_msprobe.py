"""Damaged copies of an msprobe dump, for the tests that hold a fast path to the general one: each damage must
make the fast path measure less, or measure what the general path would, never differently."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
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
    "non_finite_values",
)

#: NaN, +inf and -inf in each dtype msprobe writes floats as (little-endian bytes).
NON_FINITE = {
    "torch.float32": (b"\x00\x00\xc0\x7f", b"\x00\x00\x80\x7f", b"\x00\x00\x80\xff"),
    "torch.float16": (b"\x00\x7e", b"\x00\x7c", b"\x00\xfc"),
    "torch.bfloat16": (b"\xc0\x7f", b"\x80\x7f", b"\x80\xff"),
}


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
    elif damage == "non_finite_values":  # NaN and inf in payloads, recorded as msprobe records them or not at all
        poisoned = 0
        for op in recorded["data"].values():
            for entry in op.get("output", []) if isinstance(op.get("output"), list) else []:
                name = entry.get("data_name") if isinstance(entry, dict) else None
                if name and entry.get("dtype") in NON_FINITE and poisoned < 6 and (payloads / name).is_file():
                    nan_first = poisoned % 2 == 0  # (one with NaN, the next with infinities only)
                    poison_payload(payloads / name, NON_FINITE[entry["dtype"]], nan_first)
                    if poisoned < 4:  # the statistics msprobe records (the last two keep their finite ones)
                        entry["Max"], entry["Min"] = (math.nan, math.nan) if nan_first else (math.inf, -math.inf)
                        entry["Mean"] = entry["Norm"] = math.nan if nan_first else math.inf
                    poisoned += 1
        assert poisoned == 6
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


def poison_payload(path: Path, specials: tuple[bytes, bytes, bytes], nan: bool) -> None:
    """Put non-finite values into the tensor of a small ``.pt`` archive: every seventh element NaN (``nan``),
    or +inf and -inf alternately; ``specials`` are NaN, +inf and -inf in its dtype."""
    size = len(specials[0])

    def poison(tensor: memoryview) -> None:
        for k, at in enumerate(range(0, len(tensor), 7 * size)):
            tensor[at : at + size] = specials[0] if nan else specials[1 + k % 2]

    _rewrite_tensor(path, poison)


def zero_payload(path: Path) -> None:
    """Overwrite the tensor bytes of a small ``.pt`` archive with zeros."""

    def zero(tensor: memoryview) -> None:
        tensor[:] = bytes(len(tensor))

    _rewrite_tensor(path, zero)


def _rewrite_tensor(path: Path, change: Callable[[memoryview], None]) -> None:
    """Change the tensor bytes of a small ``.pt`` archive in place (``change`` gets them, writable); the archive
    stays valid (no CRC check)."""
    from nbprec.formats._ptzip import _small_archive, _tensor_entry

    head, entries = _small_archive(str(path))
    _description, (start, nbytes) = _tensor_entry(-1, len(head), head, entries)
    data = bytearray(head)
    change(memoryview(data)[start : start + nbytes])
    path.write_bytes(bytes(data))
