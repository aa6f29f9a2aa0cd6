"""An msprobe ``dump.json`` read by the C scanner (``nbprec/formats/_msprobescan.c``), checked and put in row order
for :class:`~nbprec.formats.msprobe_index.DumpSourceReader`.

The scanner reads the usual layout straight into per-tensor fields and steps aside (None) for anything else; so
does :func:`scan_dump_json` when the file is larger than :data:`SCAN_BELOW` (read in chunks instead, in bounded
memory), cannot be opened as a regular file, or when the scanner took an op key for parameter gradients that
:func:`~nbprec.formats.msprobe_keys.parse_op_key` does not (or the other way round). The reader then reads the
file itself, and words every problem. In ``nbprec compare`` the scan of a file often comes ready from the
command's early worker (:mod:`nbprec.formats._prescan`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from nbprec.errors import DumpFormatError
from nbprec.formats import _prescan as prescan
from nbprec.formats._files import read_regular
from nbprec.formats.msprobe_columns import SLOTS
from nbprec.formats.msprobe_keys import parse_op_key

try:
    from nbprec.formats._msprobescan import scan as _scan
except ImportError:  # built without a C compiler: the Python reader reads every dump.json
    _scan = None

#: dump.json files the C scanner reads, whole (a 194 MB one of 10^6 tensors: 3.3 s and 634 MB of peak memory for
#: the open, against 5.7 s and 498 MB read in chunks); larger ones are read in chunks, in bounded memory.
SCAN_BELOW = 1 << 28
#: Fields of the scanner's result (a scan from elsewhere is checked against it).
_SCANNED_FIELDS = 14


class ScannedDump(NamedTuple):
    """A dump.json as the scanner read it, its tensors in row order (each op's inputs, parameters, outputs).

    ``fields`` are the tensors' (op_of, roles, slots, data_names, dtypes, shapes, md5s, stats): bytes of int64,
    bytes of role codes, lists, and an (n, 4) float64 array of Min, Max, Mean, Norm
    (:meth:`~nbprec.formats.msprobe_columns.TensorColumns.extend` takes them).
    """

    meta: dict[str, Any]  # the top object's scalar members
    keys: list[str]  # the op keys of data, in order
    grads: bytes  # per op: 1 when its key names parameter gradients (as parse_op_key reads it: checked)
    fields: tuple
    per_op: list[int]  # tensors of each op
    calls: list[tuple[int, int, int | str, Any, int]]  # (op, role, slot, value, rank) of scalar arguments, in row order
    non_tensor: int  # arguments that are not tensors


def scan_dump_json(path: Path) -> ScannedDump | None:
    """``path`` read by the C scanner, or None (see the module docstring)."""
    if _scan is None:
        return None
    scanned = prescan.take(path)  # (the early worker's scan of this very file, in ``nbprec compare``)
    if type(scanned) is not tuple or len(scanned) != _SCANNED_FIELDS:
        try:
            text = read_regular(path, limit=SCAN_BELOW, what="dump.json")
        except (OSError, DumpFormatError):
            return None
        scanned = _scan(text, SLOTS)
        del text
        if scanned is None:
            return None
    meta, keys, grads, op_of, roles, ranks, slots, data_names, dtypes, shapes, md5s, stats, calls, others = scanned
    if not _gradients_agree(keys, grads):
        return None
    ops = np.frombuffer(op_of, dtype=np.int64)
    stats = np.frombuffer(stats, dtype=np.float64).reshape(-1, 4)
    place = ops * 8 + np.frombuffer(ranks, dtype=np.uint8)
    if (place[1:] < place[:-1]).any():  # sections come in the file's order: each op's rows put in row order
        order = np.argsort(place, kind="stable")
        take = order.tolist()
        ops, stats = ops[order], stats[order]
        roles = bytes(np.frombuffer(roles, dtype=np.uint8)[order])
        slots, data_names, dtypes, shapes, md5s = (
            [column[i] for i in take] for column in (slots, data_names, dtypes, shapes, md5s)
        )
        calls = sorted(calls, key=lambda call: (call[0], call[4]))
    per_op = np.bincount(ops, minlength=len(keys)).tolist() if len(ops) else [0] * len(keys)
    fields = (ops.tobytes(), roles, slots, data_names, dtypes, shapes, md5s, stats)
    return ScannedDump(meta, keys, grads, fields, per_op, calls, others)


def batch_ends(scanned: ScannedDump, batch: int) -> list[int]:
    """The positions of the ops after which the Python reader (``DumpSourceReader._add_ops``) takes a batch of
    tensors (once ``batch`` are pending, at an op that is not parameter gradients), and the end of the last: the
    scanned dump's ops and tensors are added in the same batches, so that problems come in the same order."""
    ends, pending, grads = [], 0, scanned.grads
    for order, count in enumerate(scanned.per_op):
        pending += count
        if pending >= batch and not grads[order]:
            ends.append(order + 1)
            pending = 0
    if not ends or ends[-1] < len(scanned.keys):
        ends.append(len(scanned.keys))
    return ends


def _gradients_agree(keys: list[str], grads: bytes) -> bool:
    """Whether the scanner read as parameter gradients exactly the keys :func:`parse_op_key` says are."""
    for key, scanned in zip(keys, grads, strict=True):
        if scanned or "parameters_grad" in key:
            info = parse_op_key(key)
            if bool(scanned) != (info is not None and info.grads):
                return False
    return True


__all__ = ["SCAN_BELOW", "ScannedDump", "batch_ends", "scan_dump_json"]
