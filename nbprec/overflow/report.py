"""The result of an overflow scan: a tensor table, an op table, the first critical op and the impact verdict."""

from __future__ import annotations

import html
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from nbprec._version import __version__
from nbprec.errors import NbprecError
from nbprec.safe_text import restore_frame, visible_text, write_table_csv

#: Op levels, most severe first ('' = nothing found).
LEVELS = ("critical", "high", "medium", "low", "")
_LEVEL_RANK = {level: i for i, level in enumerate(LEVELS)}
_SAVE_FORMAT = "nbprec-overflow-report"

VERDICT_HARMFUL = "harmful"
VERDICT_HARMLESS = "transient, harmless"
VERDICT_UNKNOWN = "unknown"
VERDICT_NONE = "no overflow"


@dataclass(frozen=True)
class Impact:
    """Whether an overflow changed the results.

    Attributes
    ----------
    verdict
        ``"harmful"``, ``"transient, harmless"``, ``"unknown"`` or ``"no overflow"``.
    overflow_op
        The overflowing op judged (the first critical op).
    first_divergent_op
        The first op at or after the overflow whose results fail the comparison (or, without a benchmark,
        whose outputs are abnormal), ``""`` when none.
    final_ops
        The ops taken as the final outputs, each ``{"op", "status", "out_cosine", "abnormal"}``.
    failing_after
        How many ops at or after the overflow fail.
    message
        The verdict in one sentence.
    rule
        The comparison rule used (``""`` without a benchmark).
    """

    verdict: str
    overflow_op: str = ""
    first_divergent_op: str = ""
    final_ops: list[dict[str, Any]] = field(default_factory=list)
    failing_after: int = 0
    message: str = ""
    rule: str = ""

    @property
    def harmful(self) -> bool | None:
        """True when harmful, False when harmless, None when unknown or there was no overflow."""
        return {VERDICT_HARMFUL: True, VERDICT_HARMLESS: False}.get(self.verdict)


class OverflowReport:
    """What :func:`nbprec.overflow.scan` found. Truthy when no op output holds NaN, inf or saturated values.

    Attributes
    ----------
    tensors : pandas.DataFrame
        One row per tensor in execution order: status (``nan``/``inf``/``saturated``/``suspicious``/
        ``normal``/``empty``/``n/a``), counts, ``abs_max``, ``norm``, ``source`` and ``note``.
    ops : pandas.DataFrame
        One row per op call in execution order: ``level``, ``reason``, input/output status and norms,
        ``amplification``, ``contains_critical`` (a module call around a critical op).
    meta : dict
        Path, format, dtype override, amplification factor, where the verdicts came from.
    impact : Impact or None
        The "did it matter?" verdict (see :func:`nbprec.overflow.impact.assess_impact`).
    npu : pandas.DataFrame or None
        For an Ascend NPU dump with overflow debug files: what the NPU's own detection recorded, a row per
        overflowed record, linked to its op (see :func:`nbprec.overflow.npu.npu_overflow_table`).

    Examples
    --------
    >>> report = nbprec.overflow.scan("runs/fp16")   # doctest: +SKIP
    >>> report.first_critical()["op"], report.summary()["levels"]  # doctest: +SKIP
    """

    def __init__(
        self,
        tensors: pd.DataFrame,
        ops: pd.DataFrame,
        *,
        meta: dict[str, Any] | None = None,
        impact: Impact | None = None,
        npu: pd.DataFrame | None = None,
    ) -> None:
        self.tensors = tensors
        self.ops = ops
        self.meta = dict(meta or {})
        self.impact = impact
        self.npu = npu

    # -- answers -----------------------------------------------------------------------------------
    def first_critical(self) -> pd.Series | None:
        """The first op in execution order that produced an overflow from normal inputs, or ``None``.

        A module call that merely encloses a critical op is skipped in favour of the op inside it.
        """
        hits = self.ops[(self.ops["level"] == "critical") & ~self.ops["contains_critical"].astype(bool)]
        if hits.empty:
            hits = self.ops[self.ops["level"] == "critical"]
        return None if hits.empty else hits.iloc[0]

    def first_abnormal(self) -> pd.Series | None:
        """The first op in execution order with NaN/inf/saturated values in an input or an output, leaving out
        what only inherits them (enclosing module calls, parameter-gradient records); ``None`` when none.

        When no op is critical, the overflow arose in an op the dump does not record (msprobe's default
        ``risk_level`` skips casts): this op is the first to receive it, and its ``note`` says so.
        """
        ops = self.ops
        inherited = ops["inherited"].astype(bool) if "inherited" in ops else pd.Series(False, index=ops.index)
        hits = ops[(ops["in_abnormal"].astype(bool) | ops["out_abnormal"].astype(bool)) & ~inherited]
        if hits.empty:
            return None
        first = hits.iloc[0].copy()
        if bool(first["in_abnormal"]):
            first["note"] = (
                "its inputs already hold NaN/inf/saturated values, and no op recorded before it produced them: "
                "they come from an op the dump does not record (a cast or layout op?)"
            )
        else:
            first["note"] = str(first["reason"])
        return first

    def origin(self) -> pd.Series | None:
        """Where the overflow arose: the first critical op, else the first op with abnormal values."""
        first = self.first_critical()
        return first if first is not None else self.first_abnormal()

    def by_level(self, level: str) -> pd.DataFrame:
        """Ops of one level, in execution order."""
        if level not in LEVELS:
            raise NbprecError(f"unknown level {level!r}; use one of {', '.join(repr(v) for v in LEVELS)}")
        return self.ops[self.ops["level"] == level]

    def ranked(self) -> pd.DataFrame:
        """Ops with a level, the first critical op on top, then by severity and execution order."""
        flagged = self.ops[self.ops["level"] != ""].copy()
        first = self.first_critical()
        flagged["_first"] = 0 if first is None else (flagged["op"] != first["op"]).astype(int)
        flagged["_rank"] = flagged["level"].map(_LEVEL_RANK)
        flagged = flagged.sort_values(["_first", "_rank", "step", "rank", "order"], kind="stable")
        return flagged.drop(columns=["_first", "_rank"]).reset_index(drop=True)

    def abnormal_tensors(self) -> pd.DataFrame:
        """Tensors with NaN, inf or saturated values, in execution order."""
        return self.tensors[self.tensors["abnormal"]]

    def __bool__(self) -> bool:
        npu_flagged = self.npu is not None and bool((self.npu["conditions"] != "").any())
        return not (self.ops["out_abnormal"].astype(bool).any() or npu_flagged)

    def summary(self) -> dict[str, Any]:
        """Counts and answers as plain Python values."""
        first = self.first_critical()
        levels = {lv: int((self.ops["level"] == lv).sum()) for lv in LEVELS if lv}
        status = {str(k): int(v) for k, v in self.tensors["status"].value_counts().items()}
        return {
            "path": self.meta.get("path", ""),
            "format": self.meta.get("format", ""),
            "tensors": len(self.tensors),
            "tensor_status": status,
            "ops": len(self.ops),
            "levels": levels,
            "first_critical_op": None if first is None else str(first["op"]),
            "first_critical_reason": None if first is None else str(first["reason"]),
            "first_abnormal_op": None if self.first_abnormal() is None else str(self.first_abnormal()["op"]),
            "impact": None if self.impact is None else asdict(self.impact),
            "npu_overflow_records": None if self.npu is None else len(self.npu),
        }

    def __repr__(self) -> str:
        s = self.summary()
        verdict = f"; {self.impact.verdict}" if self.impact else ""
        return (
            f"<nbprec.OverflowReport {s['tensors']} tensors, {s['ops']} ops, levels {s['levels']}; "
            f"first critical op: {s['first_critical_op']}{verdict}>"
        )

    def _repr_html_(self) -> str:
        s = self.summary()
        esc = html.escape
        first = s["first_critical_op"]
        head = (
            f"<p><b>nbprec overflow report</b>: {esc(str(s['path']))}<br>"
            f"{s['tensors']} tensors, {s['ops']} ops; "
            + ", ".join(f"{esc(k)} {v}" for k, v in s["levels"].items())
            + "<br>first critical op: "
            + (f"<code>{esc(first)}</code> ({esc(str(s['first_critical_reason']))})" if first else "none")
        )
        if self.impact is not None:
            head += f"<br>impact: <b>{esc(self.impact.verdict)}</b>: {esc(self.impact.message)}"
        head += "</p>"
        cols = ["order", "op", "op_type", "level", "in_status", "out_status", "out_abs_max", "reason"]
        table = self.ranked().head(20)[cols]
        out = head + table.to_html(index=False, escape=True, float_format=lambda v: f"{v:.6g}")
        if self.npu is not None and len(self.npu):
            npu_cols = ["timestamp", "op", "op_type", "unit", "status", "conditions", "note"]
            out += "<p><b>NPU overflow detection</b> (overflow debug files)</p>"
            out += self.npu[npu_cols].head(20).to_html(index=False, escape=True)
        return visible_text(out)

    # -- persistence -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The report header (meta, summary, impact) as JSON-ready values."""
        return {"format": _SAVE_FORMAT, "nbprec_version": __version__, "meta": self.meta, "summary": self.summary()}

    def save(self, path: str | Path) -> Path:
        """Write ``report.json``, ``tensors.csv`` and ``ops.csv`` into folder ``path``; :meth:`load` reads them."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        text = json.dumps(_clean(self.to_dict()), indent=1, default=str, allow_nan=False)
        (folder / "report.json").write_text(text + "\n", encoding="utf-8")
        write_table_csv(self.tensors, folder / "tensors.csv", exact=True)  # names byte for byte, spreadsheet-safe
        write_table_csv(self.ops, folder / "ops.csv", exact=True)
        if self.npu is not None:
            write_table_csv(self.npu, folder / "npu_overflow.csv", exact=True)
        return folder

    @classmethod
    def load(cls, path: str | Path) -> OverflowReport:
        """Read a report written by :meth:`save`."""
        folder = Path(path)
        try:
            header = json.loads((folder / "report.json").read_text(encoding="utf-8"))
            text = {"op": str, "name": str, "op_type": str, "api": str, "module": str, "direction": str}
            text.update(slot=str, role=str, reason=str, note=str, level=str, in_status=str, out_status=str)
            read = {"dtype": text, "keep_default_na": False, "na_values": [""], "encoding_errors": "surrogateescape"}
            tensors = restore_frame(pd.read_csv(folder / "tensors.csv", **read))
            ops = restore_frame(pd.read_csv(folder / "ops.csv", **read))
            npu_file = folder / "npu_overflow.csv"
            npu = restore_frame(pd.read_csv(npu_file, **read)) if npu_file.is_file() else None
        except (OSError, ValueError) as exc:
            raise NbprecError(f"{folder}: not a saved nbprec overflow report ({exc})") from exc
        if header.get("format") != _SAVE_FORMAT:
            raise NbprecError(f"{folder / 'report.json'}: format is {header.get('format')!r}, not {_SAVE_FORMAT}")
        for frame in (tensors, ops):
            for column, kind in text.items():
                if column in frame:
                    frame[column] = frame[column].fillna("").astype(kind)
        for column in ("dtype", "check_dtype", "source"):
            if column in tensors:
                tensors[column] = tensors[column].fillna("").astype(str)
        impact = header.get("summary", {}).get("impact")
        if npu is not None:
            for column in ("op", "op_type", "unit", "status", "conditions", "note", "debug_file"):
                npu[column] = npu[column].fillna("").astype(str)
        return cls(tensors, ops, meta=header.get("meta"), impact=Impact(**impact) if impact else None, npu=npu)


def _clean(value: Any) -> Any:
    """NaN/inf floats to None, recursively, for strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value
