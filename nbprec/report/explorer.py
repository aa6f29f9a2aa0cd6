"""The offline report's operator explorer: threshold, filters, sorting, paging, trend and inspector, no kernel.

A report is read by a colleague who opens one HTML file with no kernel behind it, so every control of the
report's explorer works in the page itself. Nothing is judged in JavaScript: :func:`explorer_data` asks the
core to re-judge the comparison at every position of the threshold slider (``Comparison.with_threshold``)
and stores, per position, each op's status, origin and "explained" flag and the named ops (first failing,
first introduced, onset) the core computes. The page only looks these up; filtering, sorting and paging are
plain array operations over the op table. The inspector of the culprit and the worst ops is precomputed
HTML (the dashboard inspector's static form), so the tensor details of what matters are in the page.

The data travel gzip-compressed and base64-encoded inside the page; ``explorer.js`` (inlined, no network)
decompresses them with the browser's ``DecompressionStream`` and draws the views. Op names only ever reach
the page as text (``textContent``), never as markup.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nbprec.report.assets import script_safe
from nbprec.report.sections import Html
from nbprec.safe_text import visible_text

_HERE = Path(__file__).resolve().parent / "templates" / "explorer"
#: Metrics the slider can move (as the dashboard's slider); the rule's primary metric when it is one of them.
SLIDER_METRICS = ("cosine", "rel_euclidean", "max_abs_err", "max_rel_err")
#: Most distinct threshold positions; fewer for very large comparisons (every position stores one code per op).
MAX_POSITIONS = 41
_CODES_BUDGET = 2_000_000  # ops x positions: ~20 positions (one core re-judging each) at 10^5 ops
_IDENTITY = ("order", "op", "op_type", "module")
_JUDGED = ("status", "origin")  # per slider position, in ``states``


def slider_metric(comparison: Any) -> str:
    """The metric the report's threshold slider moves: the rule's primary metric, else cosine."""
    metric = comparison.rule.primary_metric
    return metric if metric in SLIDER_METRICS and f"out_{metric}" in comparison.ops else "cosine"


def rule_value(comparison: Any, metric: str) -> float:
    """The rule's own bound on ``metric`` (where the slider starts)."""
    for t in comparison.rule.thresholds:
        if t.metric == metric:
            return float(t.value)
    return 0.99 if metric == "cosine" else 0.05


def threshold_positions(metric: str, value: float, n_ops: int) -> list[float]:
    """Slider positions: log-spaced over the metric's useful range (``1 - cosine`` for cosine) plus the rule's
    own value; fewer for very large comparisons."""
    count = int(max(9, min(MAX_POSITIONS, _CODES_BUDGET // max(n_ops, 1))))
    grid = 1.0 - np.logspace(-7, -0.3, count) if metric == "cosine" else np.logspace(-6, 0.5, count)
    values = {float(f"{v:.8g}") for v in grid} | {float(value)}
    return sorted(values)


def _cell(value: Any) -> Any:
    """A table value as JSON: numbers (non-finite as the strings ``inf``/``-inf``/``nan``), else text."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else ("inf" if v > 0 else "-inf")
    return visible_text(str(value))


def _column(series: pd.Series) -> list[Any]:
    if series.dtype.kind == "f":
        values = series.to_numpy(dtype=np.float64)
        out: list[Any] = [float(f"{v:.7g}") if math.isfinite(v) else None for v in values]
        for i in np.flatnonzero(np.isinf(values)):
            out[i] = "inf" if values[i] > 0 else "-inf"
        return out
    return [_cell(v) for v in series.tolist()]


def table_columns(comparison: Any, metric: str) -> list[str]:
    """The explorer's columns: op, status, origin and the rule's metrics first, then where the op sits."""
    ops = comparison.ops
    rule_metrics = [t.metric for t in comparison.rule.thresholds]
    metrics = [f"out_{m}" for m in dict.fromkeys([metric, *rule_metrics]) if f"out_{m}" in ops]
    where = ["step", "rank"] if comparison.several_runs else []
    extra = [c for c in (f"in_{metric}", "amplification", "out_max_abs_err") if c in ops and c not in metrics]
    return ["op", "status", "origin", *metrics, *extra, "order", "op_type", "module", *where]


def _position_index(ops: pd.DataFrame) -> dict[tuple[Any, ...], int]:
    keys = zip(ops["step"].tolist(), ops["rank"].tolist(), ops["op"].tolist(), strict=True)
    return {key: i for i, key in enumerate(keys)}


def _position(row: pd.Series | None, index: dict[tuple[Any, ...], int]) -> int | None:
    if row is None:
        return None
    return index.get((row["step"], row["rank"], row["op"]))


def judged_states(comparison: Any, metric: str, positions: list[float], start: int) -> dict[str, Any]:
    """Per slider position: one code per op (into ``codes``: status, origin, explained) and the core's facts.

    Position ``start`` is the comparison as judged by its own rule (a dtype-aware rule scales its bounds per
    dtype); every other position is ``comparison.with_threshold(metric, value)``, as the dashboard's slider.
    """
    ops = comparison.ops
    index = _position_index(ops)
    codes: dict[tuple[str, str, bool], int] = {}
    states, facts = [], []
    for k, value in enumerate(positions):
        judged = comparison if k == start else comparison.with_threshold(metric, value)
        j = judged.ops
        if len(j) != len(ops) or not (j["op"].to_numpy() == ops["op"].to_numpy()).all():
            order = [index[k] for k in zip(j["step"], j["rank"], j["op"], strict=True)]
            j = j.iloc[np.argsort(order)]
        explained = j["explained"].astype(bool) if "explained" in j else pd.Series(False, index=j.index)
        triples = list(zip(j["status"].astype(str), j["origin"].astype(str), explained.tolist(), strict=True))
        for t in set(triples):
            codes.setdefault(t, len(codes))
        states.append("".join(chr(48 + codes[t]) for t in triples))
        fails = (j["status"] == "fail").to_numpy() & ~explained.to_numpy()
        facts.append(
            {
                "flagged": int(fails.sum()),
                "first": _position(judged.first_failing_op(), index),
                "introduced": _position(judged.first_introduced_op(), index),
                "onset": _position(judged.onset(), index),
            }
        )
    if len(codes) > 200:  # pragma: no cover - status x origin x explained has a handful of values
        raise ValueError("too many distinct op states to encode")
    return {"codes": [list(t) for t in sorted(codes, key=codes.get)], "states": states, "facts": facts}


def inspected_ops(comparison: Any, culprit: str | None, n_worst: int = 10) -> list[str]:
    """The ops whose inspector the report precomputes: the culprit, the named ops and the ``n_worst`` worst."""
    names = [culprit]
    for row in (comparison.first_failing_op(), comparison.first_introduced_op(), comparison.onset()):
        names.append(None if row is None else str(row["op"]))
    worst = comparison.worst_ops(n_worst)
    names += [str(op) for op in worst["op"]] if len(worst) else []
    return [n for n in dict.fromkeys(names) if n]


def explorer_data(
    comparison: Any, *, culprit: str | None = None, inspections: dict[str, str] | None = None
) -> dict[str, Any]:
    """Everything the explorer page needs, as plain JSON-able values (see the module docstring)."""
    ops = comparison.ops
    metric = slider_metric(comparison)
    value = rule_value(comparison, metric)
    positions = threshold_positions(metric, value, len(ops))
    start = positions.index(float(value))
    columns = table_columns(comparison, metric)
    index = _position_index(ops)
    culprit_pos = None
    if culprit is not None:
        hits = np.flatnonzero(ops["op"].to_numpy() == culprit)
        culprit_pos = int(hits[0]) if hits.size else None
    return {
        "metric": metric,
        "rule": visible_text(str(comparison.rule.name)),
        "thresholds": positions,
        "start": start,
        "lower_is_worse": metric == "cosine",
        "several": bool(comparison.several_runs),
        "columns": columns,
        "ops": {
            c: _column(ops[c])
            for c in dict.fromkeys([*columns, *_IDENTITY, f"out_{metric}"])
            if c in ops and c not in _JUDGED
        },
        **judged_states(comparison, metric, positions, start),
        "culprit": culprit_pos,
        "base": {
            "first": _position(comparison.first_failing_op(), index),
            "introduced": _position(comparison.first_introduced_op(), index),
        },
        "inspected": {visible_text(k): visible_text(v) for k, v in (inspections or {}).items()},
    }


def precompute_inspections(dashboard: Any, ops: list[str]) -> dict[str, str]:
    """The dashboard inspector's static HTML for each of ``ops`` (selected in turn; the selection is left on the
    first). ``dashboard`` is an :func:`nbprec.explore` dashboard (built in the report's kernel)."""
    inspections = {}
    for op in ops:
        dashboard.select(op)
        inspections[op] = dashboard.inspector.to_html()
    if ops:
        dashboard.select(ops[0])
    return inspections


def _packed(data: dict[str, Any]) -> str:
    raw = json.dumps(data, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")
    return base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode("ascii")


def _asset(name: str) -> str:
    return (_HERE / name).read_text(encoding="utf-8")


def explorer(comparison: Any, *, culprit: str | None = None, inspections: dict[str, str] | None = None) -> Html:
    """The explorer as one self-contained HTML block (data, style and script inlined; no network).

    Parameters
    ----------
    comparison
        The comparison the report shows.
    culprit
        The op selected when the page opens (see :func:`nbprec.report.sections.culprit`).
    inspections
        Precomputed inspector HTML per op name (nbprec's own escaped markup), shown when that op is selected.
    """
    data = explorer_data(comparison, culprit=culprit, inspections=inspections)
    n = len(comparison.ops)
    markup = (
        f"<style>{_asset('explorer.css')}</style>"
        "<div class='nbprec-explorer' data-state='loading'>"
        f"<p class='nbprec-explorer-noscript'>The interactive operator table ({n} ops) needs JavaScript; the worst "
        "ops and the culprit's details are listed in the sections above and below.</p>"
        f"<script type='application/octet-stream' class='nbprec-explorer-data'>{_packed(data)}</script>"
        f"<script>{script_safe(_asset('explorer.js'))}</script>"
        "</div>"
    )
    first = comparison.first_failing_op()
    text = f"operator explorer: {n} ops; first failing op: {'none' if first is None else first['op']}"
    return Html(markup, html.unescape(text))
