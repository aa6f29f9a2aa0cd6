"""What an Ascend NPU's own overflow detection recorded: overflow debug files, decoded and linked to their ops.

With overflow detection on, every overflowing task writes an ``Opdebug.Node_OpDebug.*`` file beside its normal
dump (FORMATS.md section 3). :func:`npu_overflow_table` decodes each one
(:mod:`nbprec.formats.cann_opdebug`) and links every record whose status is not 0 to the op that overflowed:
the earliest dump file of the same step and device with the same task and stream ids (and context and thread
ids where the record sets them), as msaccucmp's overflow analysis does. :func:`mark_npu_overflow` then
feeds the findings into an overflow scan's op table, so the first op the hardware flagged whose inputs were
normal becomes the first critical op.

Examples
--------
>>> table = npu_overflow_table(nbprec.open("npu_dump/"))   # doctest: +SKIP
>>> table[["op", "op_type", "unit", "conditions"]]          # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from nbprec.dump import Dump
from nbprec.errors import NbprecError
from nbprec.formats.cann_opdebug import INVALID_ID, read_opdebug_file

#: Columns of :func:`npu_overflow_table`.
NPU_OVERFLOW_COLUMNS = (
    "debug_file",
    "step",
    "rank",
    "timestamp",
    "unit",
    "task_id",
    "stream_id",
    "context_id",
    "thread_id",
    "status",
    "conditions",
    "op",
    "op_type",
    "order",
    "note",
)


def _link(index: pd.DataFrame, step: int, rank: int, record: object) -> pd.Series | None:
    """The first (in time) op row of ``step`` / ``rank`` with the record's task and stream ids."""
    rows = index[
        (index["step"] == step)
        & (index["rank"] == rank)
        & (index["task_id"] == record.task_id)
        & (index["stream_id"] == record.stream_id)
    ]
    if rows.empty:
        return None
    return rows.sort_values(["timestamp", "order"], kind="stable").iloc[0]


def npu_overflow_table(dump: Dump) -> pd.DataFrame:
    """One row per overflowed record of the dump's overflow debug files, linked to its op.

    Columns :data:`NPU_OVERFLOW_COLUMNS`: the debug file, its step, device and timestamp, the accelerator
    (``unit``), its ids, the status word (hex), the named ``conditions`` (``; ``-joined), the linked ``op``,
    ``op_type`` and ``order`` (``""`` / -1 when no dump file has those ids), and a ``note`` on anything that
    could not be read or linked. A file that cannot be decoded is a row with its reason in ``note``, never
    dropped. Rows are in time order.
    """
    rows = []
    index = dump.index
    linkable = {"task_id", "stream_id", "timestamp"} <= set(index.columns)
    for debug in dump.meta.get("opdebug", []):
        base = {
            "debug_file": debug["file"],
            "step": debug["step"],
            "rank": debug["rank"],
            "timestamp": debug["timestamp"],
        }
        try:
            info = read_opdebug_file(debug["file"])
        except NbprecError as exc:
            rows.append({**base, "note": f"could not decode: {exc}"})
            continue
        flagged = info.overflowed()
        if not flagged:
            rows.append({**base, "note": "; ".join(("no section has a non-zero status", *info.problems))})
            continue
        for record in flagged:
            row = {
                **base,
                "unit": record.unit,
                "task_id": record.task_id,
                "stream_id": record.stream_id,
                "context_id": record.context_id,
                "thread_id": record.thread_id,
                "status": f"{record.status:#x}",
                "conditions": "; ".join(record.conditions),
                "note": "; ".join(info.problems),
            }
            op = _link(index, debug["step"], debug["rank"], record) if linkable else None
            if op is None:
                row["note"] = "; ".join(
                    n for n in (row["note"], f"no dump file has task {record.task_id}, stream {record.stream_id}") if n
                )
            else:
                row.update(op=op["op"], op_type=op["op_type"], order=int(op["order"]))
            rows.append(row)
    table = pd.DataFrame(rows, columns=list(NPU_OVERFLOW_COLUMNS))
    for column in ("op", "op_type", "unit", "status", "conditions", "note"):
        table[column] = table[column].astype(object).fillna("")
    for column in ("order", "task_id", "stream_id", "context_id", "thread_id"):
        table[column] = table[column].fillna(-1).astype(np.int64)
    table.loc[table["context_id"] == INVALID_ID, "context_id"] = -1
    table.loc[table["thread_id"] == INVALID_ID, "thread_id"] = -1
    return table.sort_values(["step", "rank", "timestamp"], kind="stable").reset_index(drop=True)


def mark_npu_overflow(ops: pd.DataFrame, npu: pd.DataFrame) -> pd.DataFrame:
    """The op table of a scan with the NPU's own findings: an ``npu_overflow`` column (the conditions) and,
    for an op the hardware flagged, level ``critical`` when its inputs were normal (``high`` otherwise)."""
    ops = ops.copy()
    ops["npu_overflow"] = ""
    linked = npu[npu["op"] != ""]
    if linked.empty:
        return ops
    found: dict[tuple, list[str]] = {}
    for step, rank, op, unit, conditions, task, stream in linked[
        ["step", "rank", "op", "unit", "conditions", "task_id", "stream_id"]
    ].itertuples(index=False):
        found.setdefault((step, rank, op), []).append(f"{unit} {conditions} (task {task}, stream {stream})")
    keys = list(zip(ops["step"], ops["rank"], ops["op"], strict=True))
    for i, key in enumerate(keys):
        if key not in found:
            continue
        text = "; ".join(found[key])
        ops.at[ops.index[i], "npu_overflow"] = text
        in_bad = bool(ops["in_abnormal"].iat[i])
        level = "high" if in_bad else "critical"
        current = ops["level"].iat[i]
        if current not in ("critical", "high") or (current == "high" and level == "critical"):
            ops.at[ops.index[i], "level"] = level
        reason = ops["reason"].iat[i] or ("inputs abnormal" if in_bad else "inputs normal, outputs look finite")
        ops.at[ops.index[i], "reason"] = f"NPU overflow detection: {text}; {reason}"
    return ops


__all__ = ["NPU_OVERFLOW_COLUMNS", "mark_npu_overflow", "npu_overflow_table"]
