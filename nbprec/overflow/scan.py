"""Find overflowing tensors and ops in a dump: :func:`scan` returns an :class:`OverflowReport`.

Per tensor, a *status*: ``nan``, ``inf``, ``saturated`` (a finite ``|x|`` at or beyond the dtype's largest
finite value: float16 65504, bfloat16 and float8 maxima, the signature of Ascend's saturation mode),
``suspicious`` (float16 abs max equal to 65500, 38400 or 51200, values Ascend's detection calls abnormally
large), ``normal``, ``empty`` or ``n/a`` (integer, bool and complex tensors are not checked). The first three
are *abnormal*. The payload is read when the dump holds one (streamed, bounded memory); otherwise the index
statistics decide (``nan_count``/``inf_count``, non-finite ``max``/``min``, ``abs_max`` against the maximum).

Per op, a *level* (inputs are the ``input`` and ``parameter`` tensors, outputs the ``output`` and ``gradient``
tensors; an op with no input rows takes its inputs from the dump's dataflow edges when it has them):

- ``critical``: inputs normal, an output abnormal: the op produced the overflow.
- ``high``: inputs and outputs abnormal, or the output norm is at least ``amplification`` (default 1000,
  about 10 bits of dynamic range spent in one op, as a loss-scale multiply or an ``exp`` does) times the
  largest input norm.
- ``medium``: an input abnormal, every output normal (the op absorbed it: a ``where``, ``masked_fill`` or
  ``clamp``).
- ``low``: only suspicious values.

The first critical op in execution order is the answer (a module call is skipped in favour of a critical op
inside it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from nbprec.compare.culprit import INPUT_ROLES, OUTPUT_ROLES
from nbprec.dtypes import FINITE_MAX, FLOAT_DTYPES, canonical_dtype
from nbprec.dump import Dump
from nbprec.errors import NbprecError
from nbprec.overflow.numerics import SUSPICIOUS_FP16, profile_array
from nbprec.overflow.payloads import Parallel, judge_rows
from nbprec.overflow.report import LEVELS, OverflowReport

#: Output norm over largest input norm from which an op with finite values is ranked ``high``.
AMPLIFICATION_FACTOR = 1000.0

ABNORMAL = ("nan", "inf", "saturated")
_STATUS_RANK = {"nan": 5, "inf": 4, "saturated": 3, "suspicious": 2, "normal": 1, "empty": 0, "n/a": 0}
_RANKED_STATUS = {rank: status for status, rank in _STATUS_RANK.items() if rank}  # (one status a rank above 0)
_TENSOR_KEYS = ["step", "rank", "order", "op", "op_type", "api", "module", "direction", "role", "slot", "name"]


def _as_dump(source: Dump | str | os.PathLike[str]) -> Dump:
    if isinstance(source, Dump):
        return source
    from nbprec.formats import open_dump

    return open_dump(source)


def _status(nan: float, inf: float, saturated: float, suspicious: bool) -> str:
    if nan > 0:
        return "nan"
    if inf > 0:
        return "inf"
    if saturated > 0:
        return "saturated"
    return "suspicious" if suspicious else "normal"


def _from_payload(array: np.ndarray, check: str, fmax: float) -> dict[str, Any]:
    exact = SUSPICIOUS_FP16 if check == "float16" else ()
    p = profile_array(array, upper=[fmax], exact=exact)
    suspicious = bool(exact) and math.isfinite(p.abs_max) and p.abs_max in exact
    return {
        "source": "payload",
        "nan_count": p.nan_count,
        "inf_count": p.inf_count,
        "saturated_count": p.at_least[0],
        "suspicious": suspicious,
        "abs_max": p.abs_max,
        "norm": p.norm,
        "status": _status(p.nan_count, p.inf_count, p.at_least[0], suspicious),
    }


def _from_statistics(row: Any, check: str, fmax: float, stats_recorded: bool) -> dict[str, Any]:
    mx, mn, mean, norm = (float(row.max), float(row.min), float(row.mean), float(row.norm))
    nan, inf = float(row.nan_count), float(row.inf_count)
    note = ""
    if np.isnan(nan) and np.isnan(inf):  # the format records no counts: read them off max/min/mean
        nan = 1.0 if (np.isnan(mean) and not np.isnan(mx)) or (stats_recorded and np.isnan(mx)) else 0.0
        inf = 1.0 if np.isinf(mx) or np.isinf(mn) or np.isinf(mean) else 0.0
        if nan or inf:
            note = "non-finite statistics (max/min/mean); counts unknown"
        if stats_recorded and np.isnan(mx):
            note = "max is NaN: the tensor holds NaN (or its statistics are missing)"
    finite = [abs(v) for v in (mx, mn) if np.isfinite(v)]
    abs_max = float(row.abs_max) if np.isfinite(row.abs_max) else (max(finite) if finite else math.nan)
    saturated = 1.0 if np.isfinite(abs_max) and abs_max >= fmax else 0.0
    suspicious = check == "float16" and abs_max in SUSPICIOUS_FP16
    return {
        "source": "statistics",
        "nan_count": nan,
        "inf_count": inf,
        "saturated_count": math.nan,  # statistics do not count them
        "suspicious": suspicious,
        "abs_max": abs_max,
        "norm": norm,
        "status": _status(nan, inf, saturated, suspicious),
        "note": note,
    }


def scan_tensors(
    dump: Dump,
    *,
    dtype: str | None = None,
    payload: bool = True,
    parallel: Parallel = "auto",
    progress: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """The tensor table of :func:`scan`: one row per tensor of ``dump``, in execution order.

    Columns: the index keys, ``dtype``, ``check_dtype`` (whose maximum applies), ``numel``, ``source``
    (``payload``, ``statistics`` or ``none``), ``nan_count``, ``inf_count``, ``saturated_count`` (NaN when
    only statistics say it), ``suspicious``, ``abs_max``, ``norm``, ``max_finite``, ``status``, ``abnormal``,
    ``note``. The payloads are read and counted on forked processes, on threads or on this thread as ``parallel``
    says (:mod:`nbprec.overflow.payloads`: ``"auto"`` forks in a single-threaded process, a script or the command,
    when the payloads are worth it, and takes threads elsewhere); the table is the same either way, and
    ``progress`` counts the tensors done.
    """
    index = dump.index
    stats_recorded = bool(index["max"].notna().any())
    override = canonical_dtype(dtype) if dtype else ""
    names = dump.columns.columns
    # each row's Python values from the columns at once (a row looked up by position makes a scalar of every
    # column: 15 us a tensor); a payload is read from the row's own mapping of them
    values = list(dump.columns.itertuples())

    def judge(row: Any) -> dict[str, Any]:
        name = str(row.dtype)
        check = override or name
        out: dict[str, Any] = {"check_dtype": check, "source": "none", "note": ""}
        if name not in FLOAT_DTYPES or check not in FINITE_MAX:
            out.update(status="n/a", note=f"{name or 'unknown'} tensor: not checked for overflow")
        elif int(row.numel) == 0:
            out.update(status="empty", nan_count=0, inf_count=0, saturated_count=0, note="empty tensor")
        else:
            fmax = FINITE_MAX[check]
            done = False
            if payload and bool(row.has_data):
                try:
                    out.update(_from_payload(dump.tensor(dict(zip(names, row, strict=True))), check, fmax))
                    done = True
                except (NbprecError, MemoryError, ValueError, TypeError) as exc:
                    out["note"] = f"payload unreadable, statistics used: {exc}"
            if not done:
                note = out["note"]
                out.update(_from_statistics(row, check, fmax, stats_recorded))
                out["note"] = "; ".join(n for n in (note, out.get("note", "")) if n)
            out["max_finite"] = fmax
        return out

    rows = judge_rows(values, judge, payload=payload, parallel=parallel, progress=progress)
    table = pd.DataFrame(rows, index=index.index)
    for column in ("check_dtype", "source", "status", "note"):  # a dump with no tensor (only Opdebug files)
        if column not in table:
            table[column] = pd.Series(dtype=object)
    for column, default in (
        ("nan_count", math.nan),
        ("inf_count", math.nan),
        ("saturated_count", math.nan),
        ("abs_max", math.nan),
        ("norm", math.nan),
        ("max_finite", math.nan),
        ("suspicious", False),
    ):
        table[column] = table[column].fillna(default) if column in table else default
    table["suspicious"] = table["suspicious"].astype(bool)
    result = index[[*_TENSOR_KEYS, "dtype", "numel"]].copy()
    for column in ("check_dtype", "source", "nan_count", "inf_count", "saturated_count", "suspicious"):
        result[column] = table[column]
    for column in ("abs_max", "norm", "max_finite", "status", "note"):
        result[column] = table[column]
    result["abnormal"] = result["status"].isin(ABNORMAL)
    return result.reset_index(drop=True)


def _worst_status(tensors: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Each group's worst tensor status (by ``keys``, in order of appearance): the one of highest
    :data:`_STATUS_RANK`, and where every status ranks 0 (``empty``, ``n/a``), the group's first; in groupby's
    compiled aggregations (a Python call per group cost 20 us an op)."""
    statuses = tensors["status"]
    by = [tensors[k] for k in keys]
    rank = statuses.map(_STATUS_RANK).fillna(0).astype(np.int64)
    top = rank.groupby(by, sort=False).max()
    first = statuses.groupby(by, sort=False).first()
    named = top.map(_RANKED_STATUS)
    return named.where(top > 0, first.reindex(top.index))


#: The tensor columns :func:`_tensor_detail` reads, in its arguments' order.
_DETAIL_COLUMNS = (
    "status", "suspicious", "nan_count", "inf_count", "source", "saturated_count", "max_finite", "abs_max", "role",
    "slot", "dtype",
)  # fmt: skip


def _tensor_detail(
    status: str, suspicious: bool, nan: float, inf: float, source: str, saturated: float, max_finite: float,
    abs_max: float, role: str, slot: Any, dtype: str,
) -> str:  # fmt: skip
    """What an op's reason says of one of its tensors ('' for a normal one): its counts of NaN, inf and saturated
    values, or its suspicious abs max."""
    if not (status in ABNORMAL or suspicious):
        return ""
    counts = []
    if nan and not math.isnan(nan):
        counts.append(f"{int(nan)} NaN" if source == "payload" else "NaN")
    if inf and not math.isnan(inf):
        counts.append(f"{int(inf)} inf" if source == "payload" else "inf")
    if status == "saturated":
        n = "" if math.isnan(saturated) else f"{int(saturated)} "
        counts.append(f"{n}at |x| >= {max_finite:g}")
    if suspicious:
        counts.append(f"abs max {abs_max:g} (suspicious)")
    return f"{role}.{slot} {dtype}: {', '.join(counts)}"


def _details(tensors: pd.DataFrame, keys: list[str]) -> dict[tuple, str]:
    """Each op's abnormal and suspicious tensors in words (:func:`_tensor_detail`, in the table's order, joined by
    '; '), by the op's ``keys``: one pass over those rows' values (a frame per op cost 2 ms an op)."""
    rows = tensors[tensors["abnormal"] | tensors["suspicious"]]
    found: dict[tuple, list[str]] = {}
    ops = zip(*(rows[k].tolist() for k in keys), strict=True)
    texts = map(_tensor_detail, *(rows[c].tolist() for c in _DETAIL_COLUMNS))
    for key, text in zip(ops, texts, strict=True):
        if text:
            found.setdefault(key, []).append(text)
    return {key: "; ".join(parts) for key, parts in found.items()}


def rollup_levels(tensors: pd.DataFrame, dump: Dump, amplification: float = AMPLIFICATION_FACTOR) -> pd.DataFrame:
    """The op table of :func:`scan`: one row per op call in execution order, with its level and reason."""
    keys = ["step", "rank", "op"]
    is_in = tensors["role"].isin(INPUT_ROLES)
    is_out = tensors["role"].isin(OUTPUT_ROLES)
    grouped = tensors.groupby(keys, sort=False)
    ops = grouped.agg(
        order=("order", "first"),
        op_type=("op_type", "first"),
        api=("api", "first"),
        module=("module", "first"),
        direction=("direction", "first"),
    )
    t_in, t_out = tensors[is_in], tensors[is_out]
    g_in, g_out = t_in.groupby(keys, sort=False), t_out.groupby(keys, sort=False)
    ops["inputs"] = g_in.size().reindex(ops.index).fillna(0).astype(int)
    ops["outputs"] = g_out.size().reindex(ops.index).fillna(0).astype(int)
    ops["in_abnormal"] = g_in["abnormal"].any().reindex(ops.index).fillna(False).astype(bool)
    ops["out_abnormal"] = g_out["abnormal"].any().reindex(ops.index).fillna(False).astype(bool)
    ops["in_status"] = _worst_status(t_in, keys).reindex(ops.index).fillna("")
    ops["out_status"] = _worst_status(t_out, keys).reindex(ops.index).fillna("")
    ops["in_norm"] = g_in["norm"].max().reindex(ops.index)
    ops["out_norm"] = g_out["norm"].max().reindex(ops.index)
    ops["out_abs_max"] = g_out["abs_max"].max().reindex(ops.index)
    ops["suspicious"] = g_out["suspicious"].any().reindex(ops.index).fillna(False).astype(bool)
    ops["inputs_from"] = np.where(ops["inputs"] > 0, "index", "")
    _inputs_from_edges(ops, tensors, dump)
    with np.errstate(divide="ignore", invalid="ignore"):
        amp = ops["out_norm"] / ops["in_norm"]
    ops["amplification"] = amp.where(ops["in_norm"] > 0)
    ops["forward_abnormal"] = _forward_abnormal(ops)
    in_bad, out_bad = ops["in_abnormal"], ops["out_abnormal"]
    came_in = in_bad | ops["forward_abnormal"]  # (a backward op's abnormal values may come from its forward call)
    amplified = (ops["amplification"] >= amplification) & ~out_bad
    # parameter-gradient records (msprobe's parameters_grad) have no inputs of their own: what they hold was
    # produced by a backward op, so they are never where an overflow arose
    roles = (tensors["role"] == "gradient").groupby([tensors[k] for k in keys], sort=False).all()
    gradient_only = roles.reindex(ops.index).fillna(False).astype(bool)
    level = np.select(
        [out_bad & ~came_in & ~gradient_only, out_bad, amplified, in_bad, ops["suspicious"]],
        ["critical", "high", "high", "medium", "low"],
        default="",
    )
    ops["inherited"] = (out_bad & gradient_only).to_numpy()
    ops["level"] = pd.Categorical(level, categories=list(LEVELS), ordered=False).astype(str)
    reasons = _details(tensors, keys)
    ops["reason"] = [
        _reason(row, reasons.get(key, ""), amplification) for key, row in zip(ops.index, ops.itertuples(), strict=True)
    ]
    ops = ops.reset_index().sort_values(["step", "rank", "order"], kind="stable").reset_index(drop=True)
    ops["contains_critical"] = _contains_critical(ops, dump.hierarchy)
    _inherit_in_containers(ops, dump.hierarchy)
    return ops


def _inherit_in_containers(ops: pd.DataFrame, hierarchy: dict[str, str | None]) -> None:
    """A module call whose abnormal output comes from an op inside it (one with an abnormal output) only
    encloses the overflow: it is ``high`` and ``inherited``, never ``critical``."""
    if not hierarchy:
        return
    bad_inside = encloses(ops, ops["out_abnormal"].to_numpy(bool) & ~ops["inherited"].to_numpy(bool), hierarchy)
    container = bad_inside & ops["out_abnormal"].to_numpy(bool)
    if not container.any():
        return
    critical = container & (ops["level"] == "critical").to_numpy()
    ops.loc[critical, "level"] = "high"
    ops.loc[container, "inherited"] = True
    ops.loc[critical, "reason"] = [
        f"inherited: a module call enclosing the op that produced it ({r})" for r in ops.loc[critical, "reason"]
    ]


def _forward_abnormal(ops: pd.DataFrame) -> pd.Series:
    """Per op, whether it is a backward call whose forward call (``X.N.backward`` of ``X.N.forward``,
    ``M.backward.N`` of ``M.forward.N``, same step and rank) had an abnormal input or output. A backward op also
    computes from what its forward call saved (``pow``'s input, ``exp``'s output), which its own record does not
    hold: NaN there is inherited, not produced."""
    names = ops.index.get_level_values("op").astype(str)
    backward = np.asarray(ops["direction"] == "backward") & names.str.contains("backward", regex=False)
    out = pd.Series(False, index=ops.index)
    if not backward.any():
        return out
    bad = (ops["in_abnormal"] | ops["out_abnormal"]).to_dict()
    steps, ranks = ops.index.get_level_values("step"), ops.index.get_level_values("rank")
    for i in np.flatnonzero(backward):
        head, _, tail = names[i].rpartition("backward")
        out.iat[i] = bool(bad.get((steps[i], ranks[i], f"{head}forward{tail}"), False))
    return out


def _reason(row: Any, detail: str, amplification: float) -> str:
    if row.level == "high" and row.out_abnormal and row.inputs == 0 and not row.inputs_from:
        return f"inherited: parameter gradients, made by a backward op before it ({detail})"
    if row.level == "high" and row.out_abnormal and row.forward_abnormal and not row.in_abnormal:
        return f"inputs normal, but its forward call's were abnormal: what it saved carried them ({detail})"
    if row.level == "critical":
        inputs = "inputs normal" if row.inputs or row.inputs_from else "no inputs recorded"
        return f"{inputs}, output abnormal: the op produced it ({detail})"
    if row.level == "high" and row.out_abnormal:
        return f"inputs and outputs abnormal ({detail})"
    if row.level == "high":
        return f"output norm {row.amplification:.3g}x the input norm (>= {amplification:g}x)"
    if row.level == "medium":
        return f"abnormal input absorbed, outputs normal ({detail})"
    if row.level == "low":
        return f"suspicious values ({detail})"
    return ""


def _inputs_from_edges(ops: pd.DataFrame, tensors: pd.DataFrame, dump: Dump) -> None:
    """For ops without input rows, judge their inputs by the producers' tensors named in ``dump.edges``."""
    edges = dump.edges
    missing = ops["inputs"] == 0
    if edges is None or edges.empty or not missing.any():
        return
    status = {
        (s, r, n): (a, nm)
        for s, r, n, a, nm in tensors[["step", "rank", "name", "abnormal", "norm"]].itertuples(index=False)
    }
    sources: dict[str, list[str]] = {}
    for src, dst in edges[["src", "dst_op"]].itertuples(index=False):
        sources.setdefault(str(dst), []).append(str(src))
    for key in ops.index[missing]:
        step, rank, op = key
        found = [status[(step, rank, s)] for s in sources.get(op, ()) if (step, rank, s) in status]
        if found:
            ops.loc[key, "in_abnormal"] = any(a for a, _ in found)
            norms = [nm for _, nm in found if not np.isnan(nm)]
            ops.loc[key, "in_norm"] = max(norms) if norms else np.nan
            ops.loc[key, "inputs_from"] = "edges"


def _contains_critical(ops: pd.DataFrame, hierarchy: dict[str, str | None]) -> np.ndarray:
    """Whether each op is a module call enclosing a critical op."""
    return encloses(ops, (ops["level"] == "critical").to_numpy(), hierarchy)


def encloses(ops: pd.DataFrame, flagged: np.ndarray, hierarchy: dict[str, str | None]) -> np.ndarray:
    """Whether each op is a module call enclosing a flagged op (walk the hierarchy up from every flagged op)."""
    enclosing: set[str] = set()
    for op in ops.loc[flagged, "op"]:
        parent, seen = hierarchy.get(op), 0
        while parent and seen < 10_000 and parent not in enclosing:
            enclosing.add(parent)
            parent, seen = hierarchy.get(parent), seen + 1
    return ops["op"].isin(enclosing).to_numpy()


def _recorded_loss_scale(meta: dict[str, Any]) -> float | None:
    """The loss scale a run's metadata records (``loss_scale`` at the top or under ``meta``), if any."""
    for where in (meta, meta.get("meta") if isinstance(meta.get("meta"), dict) else {}):
        value = where.get("loss_scale")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
    return None


def scan(
    dump: Dump | str | os.PathLike[str],
    *,
    bench: Dump | str | os.PathLike[str] | None = None,
    dtype: str | None = None,
    payload: bool = True,
    amplification: float = AMPLIFICATION_FACTOR,
    rule: Any = None,
    outputs: list[str] | None = None,
    parallel: Parallel = "auto",
    progress: Callable[[int, int], None] | None = None,
) -> OverflowReport:
    """Scan a dump for overflow: per-tensor status, per-op level, the first critical op.

    Parameters
    ----------
    dump
        The target run (a :class:`~nbprec.dump.Dump` or a path any reader opens).
    bench
        A benchmark run; when given, the report says whether the overflow changed the results
        (see :func:`nbprec.overflow.impact.assess_impact`).
    dtype
        Judge every float tensor against this dtype's maximum instead of its own (e.g. ``"float16"`` for a
        dump whose statistics were recorded in float32 from a float16 device run).
    payload
        Read payloads where the dump has them (``False``: statistics only, faster).
    amplification
        Output-over-input norm ratio from which an op is ranked ``high``.
    rule
        Comparison rule for the impact assessment (default: nbprec's dtype-aware rule).
    outputs
        Ops whose results count as the final outputs in the impact assessment (default: the last forward
        and the last backward op of the overflowing step).
    parallel
        Where the payloads are read and counted: ``"auto"`` (forked processes from a single-threaded process when
        the payloads are worth it, threads elsewhere, such as in a notebook), ``"processes"`` or ``"threads"``.
        The report is the same either way.
    progress
        A callback ``(done, total)``.

    Returns
    -------
    OverflowReport

    Examples
    --------
    >>> report = nbprec.overflow.scan("runs/fp16", bench="runs/fp32")  # doctest: +SKIP
    >>> report.first_critical()["op"]                                  # doctest: +SKIP
    'Tensor.__mul__.0.forward'
    """
    target = _as_dump(dump)
    tensors = scan_tensors(target, dtype=dtype, payload=payload, parallel=parallel, progress=progress)
    ops = rollup_levels(tensors, target, amplification)
    meta = {
        "path": str(target.path),
        "format": target.format,
        "dtype": dtype or "",
        "amplification": amplification,
        "payload": payload,
        "sources": {str(k): int(v) for k, v in tensors["source"].value_counts().items()},
        "loss_scale": _recorded_loss_scale(target.meta),
    }
    npu = None
    if target.meta.get("opdebug"):  # an Ascend NPU dump with overflow debug files: the hardware's own findings
        from nbprec.overflow.npu import mark_npu_overflow, npu_overflow_table

        npu = npu_overflow_table(target)
        ops = mark_npu_overflow(ops, npu)
        meta["npu_overflow_files"] = len(target.meta["opdebug"])
    report = OverflowReport(tensors, ops, meta=meta, npu=npu)
    if bench is not None or report.origin() is not None:
        from nbprec.overflow.impact import assess_impact

        report.impact = assess_impact(report, target, bench, rule=rule, outputs=outputs)
    return report
