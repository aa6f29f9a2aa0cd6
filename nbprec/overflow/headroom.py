"""Predict, from a float32 run alone, which ops would overflow or lose precision in a lower-precision dtype.

For every float tensor and every target dtype (float16, bfloat16, float8 e4m3fn and e5m2 by default):

- ``headroom_<dt>``: bits of headroom, ``log2(max_finite / abs_max)`` over the finite values. Negative means
  the tensor does not fit; ``inf`` for an all-zero tensor.
- ``overflow_<dt>``: ``abs_max`` reaches the value from which a round-to-nearest cast gives inf (or NaN for
  e4m3fn): ``max_finite`` plus half an ulp, 65520 for float16.
- ``underflow_<dt>``: the share of the non-zero values that would become zero (``|x|`` at most half the
  smallest subnormal).
- ``subnormal_<dt>``: the share of the non-zero values below the smallest normal (they keep fewer
  significant bits; includes the underflowing ones).

The two shares need payloads; from statistics alone only the overflow columns are known (shares are NaN).
Per op, the outputs decide: ``verdict_<dt>`` is ``overflow`` (the op's outputs would overflow from
inputs that fit: the op to blame), ``inherits overflow`` (its inputs would overflow too), ``precision loss``
(at least ``underflow_share`` of an output's non-zero values would flush to zero) or ``''``.
"""

from __future__ import annotations

import html
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nbprec.compare.culprit import INPUT_ROLES, OUTPUT_ROLES
from nbprec.dtypes import FLOAT_DTYPES, canonical_dtype
from nbprec.dump import Dump
from nbprec.errors import NbprecError
from nbprec.overflow.numerics import HEADROOM_DTYPES, dtype_limits, profile_array
from nbprec.overflow.payloads import Parallel, judge_rows
from nbprec.overflow.scan import encloses
from nbprec.safe_text import restore_frame, write_table_csv

_LABELS = {"float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
_SAVE_FORMAT = "nbprec-headroom-report"
_KEYS = ["step", "rank", "order", "op", "op_type", "api", "module", "direction", "role", "slot", "name"]


def dtype_label(dtype: str) -> str:
    """The short column label of a dtype (``fp16``, ``bf16``, ``e4m3``, ``e5m2``)."""
    name = canonical_dtype(dtype)
    return _LABELS.get(name, name)


class HeadroomReport:
    """Headroom of every tensor and op of a run against lower-precision dtypes (see :func:`headroom`).

    Attributes
    ----------
    tensors, ops : pandas.DataFrame
        Per tensor / per op columns ``headroom_<dt>``, ``overflow_<dt>``, ``underflow_<dt>``,
        ``subnormal_<dt>`` (ops also ``in_overflow_<dt>`` and ``verdict_<dt>``), ``<dt>`` a label of
        :func:`dtype_label`.
    dtypes : tuple of str
        The dtypes judged.
    meta : dict
        Path, format, thresholds.
    """

    def __init__(self, tensors: pd.DataFrame, ops: pd.DataFrame, *, dtypes: tuple[str, ...], meta: dict[str, Any]):
        self.tensors = tensors
        self.ops = ops
        self.dtypes = tuple(dtypes)
        self.meta = dict(meta)

    def _label(self, dtype: str) -> str:
        name = canonical_dtype(dtype)
        if name not in self.dtypes:
            raise NbprecError(f"dtype {dtype!r} was not judged; this report covers {', '.join(self.dtypes)}")
        return dtype_label(name)

    def would_overflow(self, dtype: str = "float16", *, inherited: bool = False) -> pd.DataFrame:
        """Ops whose outputs would overflow in ``dtype``: by default only those whose inputs fit (the op to blame)."""
        lab = self._label(dtype)
        mask = self.ops[f"overflow_{lab}"].astype(bool)
        if not inherited:
            mask &= self.ops[f"verdict_{lab}"] == "overflow"
        return self.ops[mask]

    def losing_precision(self, dtype: str = "float16") -> pd.DataFrame:
        """Ops with at least ``underflow_share`` of an output's non-zero values flushed to zero in ``dtype``."""
        lab = self._label(dtype)
        return self.ops[self.ops[f"verdict_{lab}"] == "precision loss"]

    def first_overflow(self, dtype: str = "float16") -> pd.Series | None:
        """The first op in execution order that would produce an overflow in ``dtype``.

        A module call is skipped in favour of the op inside it that overflows.
        """
        hits = self.would_overflow(dtype)
        column = f"encloses_overflow_{self._label(dtype)}"
        inner = hits[~hits[column].astype(bool)] if column in hits else hits
        hits = inner if not inner.empty else hits
        return None if hits.empty else hits.iloc[0]

    def summary(self) -> dict[str, Any]:
        """Per dtype: ops that would overflow (first one named), ops losing precision, smallest headroom."""
        out: dict[str, Any] = {"path": self.meta.get("path", ""), "ops": len(self.ops), "dtypes": {}}
        for dt in self.dtypes:
            lab = dtype_label(dt)
            first = self.first_overflow(dt)
            bits = self.ops[f"headroom_{lab}"].replace([np.inf, -np.inf], np.nan).dropna()
            out["dtypes"][dt] = {
                "overflowing_ops": len(self.would_overflow(dt)),
                "overflowing_ops_incl_inherited": len(self.would_overflow(dt, inherited=True)),
                "first_overflow_op": None if first is None else str(first["op"]),
                "precision_loss_ops": len(self.losing_precision(dt)),
                "min_headroom_bits": None if bits.empty else float(bits.min()),
            }
        return out

    def __repr__(self) -> str:
        parts = [f"{dt}: {v['overflowing_ops']} overflow" for dt, v in self.summary()["dtypes"].items()]
        return f"<nbprec.HeadroomReport {len(self.ops)} ops; {', '.join(parts)}>"

    def _repr_html_(self) -> str:
        esc = html.escape
        s = self.summary()
        rows = "".join(
            f"<tr><td>{esc(dt)}</td><td>{v['overflowing_ops']}</td><td>{esc(str(v['first_overflow_op'] or '-'))}</td>"
            f"<td>{v['precision_loss_ops']}</td><td>{esc(str(v['min_headroom_bits']))}</td></tr>"
            for dt, v in s["dtypes"].items()
        )
        head = (
            f"<p><b>nbprec headroom</b>: {esc(str(s['path']))}, {s['ops']} ops</p><table><tr><th>dtype</th>"
            "<th>ops that overflow</th><th>first</th><th>ops losing precision</th><th>min headroom (bits)</th></tr>"
        )
        return head + rows + "</table>"

    def save(self, path: str | Path) -> Path:
        """Write ``headroom.json``, ``tensors.csv`` and ``ops.csv`` into folder ``path``."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        header = {"format": _SAVE_FORMAT, "dtypes": list(self.dtypes), "meta": self.meta, "summary": self.summary()}
        (folder / "headroom.json").write_text(json.dumps(header, indent=1, default=str), encoding="utf-8")
        write_table_csv(self.tensors, folder / "tensors.csv", exact=True)  # names byte for byte, spreadsheet-safe
        write_table_csv(self.ops, folder / "ops.csv", exact=True)
        return folder

    @classmethod
    def load(cls, path: str | Path) -> HeadroomReport:
        """Read a report written by :meth:`save`."""
        folder = Path(path)
        try:
            header = json.loads((folder / "headroom.json").read_text(encoding="utf-8"))
            kw: dict[str, Any] = {"keep_default_na": False, "na_values": [""], "encoding_errors": "surrogateescape"}
            tensors, ops = (restore_frame(pd.read_csv(folder / f, **kw)) for f in ("tensors.csv", "ops.csv"))
        except (OSError, ValueError) as exc:
            raise NbprecError(f"{folder}: not a saved nbprec headroom report ({exc})") from exc
        if header.get("format") != _SAVE_FORMAT:
            raise NbprecError(f"{folder / 'headroom.json'}: format is {header.get('format')!r}, not {_SAVE_FORMAT}")
        for frame in (tensors, ops):
            for column in frame.columns:
                if frame[column].dtype == object:
                    frame[column] = frame[column].fillna("").astype(str)
        return cls(tensors, ops, dtypes=tuple(header["dtypes"]), meta=header.get("meta", {}))


def _tensor_rows(dump: Dump, dtypes: tuple[str, ...], payload: bool, parallel: Parallel) -> pd.DataFrame:
    """One row per tensor of ``dump``: its absolute maximum, headroom and shares below each dtype's limits; the
    payloads read where ``parallel`` says (:func:`~nbprec.overflow.payloads.judge_rows`)."""
    limits = [dtype_limits(d) for d in dtypes]
    overflow_at = [lim.overflow_at for lim in limits]
    flush = [lim.flush_to_zero_below for lim in limits]
    normal = [lim.smallest_normal for lim in limits]
    names = dump.columns.columns

    def judge(row: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"source": "none", "abs_max": math.nan, "nonzero": math.nan, "note": ""}
        shares: list[tuple[float, float]] = [(math.nan, math.nan)] * len(limits)
        if str(row.dtype) not in FLOAT_DTYPES:
            out["note"] = f"{row.dtype or 'unknown'} tensor: not a float"
        elif int(row.numel) == 0:
            out.update(source="empty", abs_max=0.0, nonzero=0, note="empty tensor")
        else:
            if payload and bool(row.has_data):
                try:
                    key = dict(zip(names, row, strict=True))
                    p = profile_array(dump.tensor(key), lower=normal, lower_inclusive=flush)
                    out.update(source="payload", abs_max=p.abs_max, nonzero=p.nonzero)
                    if p.nan_count or p.inf_count:
                        out["note"] = f"{p.nan_count} NaN, {p.inf_count} inf in this run already"
                    if p.nonzero:
                        shares = [(p.at_most[i] / p.nonzero, p.below[i] / p.nonzero) for i in range(len(limits))]
                    else:
                        shares = [(0.0, 0.0)] * len(limits)
                except (NbprecError, MemoryError, ValueError, TypeError) as exc:
                    out["note"] = f"payload unreadable, statistics used: {exc}"
            if out["source"] == "none":
                finite = [abs(float(v)) for v in (row.max, row.min) if np.isfinite(v)]
                known = float(row.abs_max) if np.isfinite(row.abs_max) else (max(finite) if finite else math.nan)
                out.update(source="statistics" if not np.isnan(known) else "none", abs_max=known)
        for lim, at, (under, sub) in zip(limits, overflow_at, shares, strict=True):
            lab = dtype_label(lim.name)
            am = out["abs_max"]
            out[f"headroom_{lab}"] = math.inf if am == 0 else math.log2(lim.max_finite / am) if am > 0 else math.nan
            out[f"overflow_{lab}"] = bool(am >= at) if not np.isnan(am) else False
            out[f"underflow_{lab}"] = under
            out[f"subnormal_{lab}"] = sub
        return out

    rows = judge_rows(list(dump.columns.itertuples()), judge, payload=payload, parallel=parallel)
    table = pd.DataFrame(rows, index=dump.index.index)
    return pd.concat([dump.index[[*_KEYS, "dtype", "numel"]], table], axis=1).reset_index(drop=True)


def _op_rows(
    tensors: pd.DataFrame, dtypes: tuple[str, ...], underflow_share: float, hierarchy: dict[str, str | None]
) -> pd.DataFrame:
    keys = ["step", "rank", "op"]
    ops = tensors.groupby(keys, sort=False).agg(
        order=("order", "first"),
        op_type=("op_type", "first"),
        api=("api", "first"),
        module=("module", "first"),
        direction=("direction", "first"),
    )
    g_out = tensors[tensors["role"].isin(OUTPUT_ROLES)].groupby(keys, sort=False)
    g_in = tensors[tensors["role"].isin(INPUT_ROLES)].groupby(keys, sort=False)
    ops["out_abs_max"] = g_out["abs_max"].max().reindex(ops.index)
    for dt in dtypes:
        lab = dtype_label(dt)
        ops[f"headroom_{lab}"] = g_out[f"headroom_{lab}"].min().reindex(ops.index)
        ops[f"overflow_{lab}"] = g_out[f"overflow_{lab}"].any().reindex(ops.index).fillna(False).astype(bool)
        ops[f"in_overflow_{lab}"] = g_in[f"overflow_{lab}"].any().reindex(ops.index).fillna(False).astype(bool)
        ops[f"underflow_{lab}"] = g_out[f"underflow_{lab}"].max().reindex(ops.index)
        ops[f"subnormal_{lab}"] = g_out[f"subnormal_{lab}"].max().reindex(ops.index)
        over, inherited = ops[f"overflow_{lab}"], ops[f"in_overflow_{lab}"]
        loss = ops[f"underflow_{lab}"].fillna(0) >= underflow_share
        ops[f"verdict_{lab}"] = np.select(
            [over & ~inherited, over & inherited, loss], ["overflow", "inherits overflow", "precision loss"], ""
        )
    ops = ops.reset_index().sort_values(["step", "rank", "order"], kind="stable").reset_index(drop=True)
    for dt in dtypes:
        lab = dtype_label(dt)
        ops[f"encloses_overflow_{lab}"] = encloses(ops, (ops[f"verdict_{lab}"] == "overflow").to_numpy(), hierarchy)
    return ops


def headroom(
    dump: Dump | str | os.PathLike[str],
    *,
    dtypes: tuple[str, ...] | list[str] = HEADROOM_DTYPES,
    payload: bool = True,
    underflow_share: float = 0.01,
    parallel: Parallel = "auto",
) -> HeadroomReport:
    """Predict from a (float32) run which ops would overflow or underflow if cast down to ``dtypes``.

    Parameters
    ----------
    dump
        The run (a :class:`~nbprec.dump.Dump` or a path), ideally float32.
    dtypes
        Target dtypes (default float16, bfloat16, float8_e4m3fn, float8_e5m2).
    payload
        Read payloads where present (needed for the underflow shares); ``False`` uses statistics only.
    underflow_share
        Share of an output's non-zero values flushing to zero from which an op is listed as losing precision.
    parallel
        Where the payloads are read: ``"auto"``, ``"processes"`` or ``"threads"``, as :func:`~nbprec.overflow.scan`
        takes it (:mod:`nbprec.overflow.payloads`); the report is the same either way.

    Returns
    -------
    HeadroomReport

    Examples
    --------
    >>> hr = nbprec.overflow.headroom("runs/fp32")                  # doctest: +SKIP
    >>> hr.would_overflow("float16")[["op", "headroom_fp16"]]       # doctest: +SKIP
    """
    if isinstance(dump, Dump):
        source = dump
    else:
        from nbprec.formats import open_dump

        source = open_dump(dump)
    names = tuple(canonical_dtype(d) for d in dtypes)
    for name in names:
        dtype_limits(name)  # raises for an unknown dtype
    tensors = _tensor_rows(source, names, payload, parallel)
    ops = _op_rows(tensors, names, underflow_share, source.hierarchy)
    meta = {
        "path": str(source.path),
        "format": source.format,
        "payload": payload,
        "underflow_share": underflow_share,
        "limits": {n: dtype_limits(n).__dict__ for n in names},
    }
    return HeadroomReport(tensors, ops, dtypes=names, meta=meta)
