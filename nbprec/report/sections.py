"""The report's text sections as escaped HTML: what the report notebook displays around the widgets.

Each function takes core objects (a :class:`~nbprec.compare.Comparison`, an overflow report) and returns an
:class:`Html` object that a notebook displays. Every string that comes from the user (op names, paths, dump
metadata) goes through :func:`html.escape`, and every section's markup and text through
:func:`~nbprec.safe_text.visible_text`: bytes of a name that were not UTF-8 show as ``\\xNN`` escapes.
"""

from __future__ import annotations

import html
from typing import Any

import pandas as pd

from nbprec.compare.runs import op_at
from nbprec.safe_text import visible_text

_STYLE = "style='border-collapse:collapse;font-size:13px'"
_FLOAT = "{:.6g}".format


class Html:
    """A piece of HTML a notebook displays (with a plain-text form for consoles)."""

    def __init__(self, markup: str, text: str = "") -> None:
        self.markup = visible_text(markup)
        self.text = visible_text(text)

    def _repr_html_(self) -> str:
        return self.markup

    def __repr__(self) -> str:
        return self.text or "<nbprec report section>"


def esc(value: object) -> str:
    """HTML-escaped text of any value (surrogates as visible escapes)."""
    return html.escape(visible_text(str(value)), quote=True)


def _table(frame: pd.DataFrame, max_rows: int = 30) -> str:
    return frame.head(max_rows).to_html(index=False, escape=True, float_format=_FLOAT, border=0, na_rep="")


def _kv(rows: list[tuple[str, object]]) -> str:
    body = "".join(
        f"<tr><th style='text-align:left;padding:2px 10px 2px 0'>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows
    )
    return f"<table class='nbprec-kv' {_STYLE}>{body}</table>"


def header(comparison: Any, title: str = "") -> Html:
    """The report's title line: both runs and the rule."""
    s = comparison.summary()
    heading = title or "nbprec precision report"
    markup = (
        f"<h1 class='nbprec-title'>{esc(heading)}</h1>"
        f"<p>Target <code>{esc(s['target'])}</code> against benchmark <code>{esc(s['bench'])}</code>, "
        f"judged by {esc(s['rule'])}.</p>"
    )
    return Html(markup, f"{heading}: {s['target']} vs {s['bench']}")


def summary(comparison: Any) -> Html:
    """Counts, matching coverage and the three named ops (first failing, first introduced, onset); over several
    steps and ranks, each op with its (step, rank), followed by the :func:`runs` section."""
    s = comparison.summary()
    several = comparison.several_runs
    status = ", ".join(f"{k}: {v}" for k, v in s["tensor_status"].items())
    coverage = ", ".join(f"{k}: {v}" for k, v in s["coverage"].items() if v)
    rows: list[tuple[str, object]] = [
        ("tensors compared", f"{s['tensors']} ({status})"),
        ("matching", coverage or "-"),
        ("ops", s["ops"]),
        ("failing ops", s["failing_ops"]),
        ("first failing op", op_at(comparison.first_failing_op(), several)),
        ("first introduced op", op_at(comparison.first_introduced_op(), several)),
        ("divergence onset", op_at(comparison.onset(), several)),
    ]
    if several:
        rows.insert(3, ("steps, ranks", f"{s['steps_ranks']} (step, rank)s, below"))
    if s["explained_failing_ops"]:
        explained = f"{s['explained_failing_ops']} op" + ("" if s["explained_failing_ops"] == 1 else "s")
        rows.append(("explained differences", f"{explained} (randomness, discontinuous ops)"))
    if s["random_ops_differing"]:
        rows.append(("random ops differing", ", ".join(s["random_ops_differing"][:5])))
    failing = f"{s['failing_ops']} failing op" + ("" if s["failing_ops"] == 1 else "s")
    verdict = "PASS: no op fails the rule" if comparison else f"FAIL: {failing}"
    colour = "#2e7d32" if comparison else "#c62828"
    words = comparison.verdict()  # the same sentences the CLI and the dashboard open with
    markup = (
        words.to_html()
        + f"<p class='nbprec-status' style='font-weight:bold;color:{colour}'>{esc(verdict)}</p>"
        + _kv(rows)
    )
    first = op_at(comparison.first_failing_op(), several)
    if several:
        steps = runs(comparison)
        return Html(markup + steps.markup, f"{words.text}\n{verdict}; first failing op: {first}\n{steps.text}")
    return Html(markup, f"{words.text}\n{verdict}; first failing op: {first}")


def runs(comparison: Any) -> Html:
    """Steps and ranks: what one side lacks, where divergence and NaN/inf appear first, and one row per
    (step, rank) (core ``Comparison.runs()``); a note when the comparison holds a single (step, rank)."""
    summary = comparison.runs()
    if not summary.several:
        return note("One step and rank: no per-(step, rank) summary.")
    lines = "".join(f"<li>{esc(line)}</li>" for line in summary.lines())
    shown = summary.display_table()
    table = shown.to_html(index=False, escape=True, float_format=_FLOAT, border=0, na_rep="")
    markup = (
        "<h3 class='nbprec-runs-title'>Steps and ranks</h3>"
        f"<ul class='nbprec-runs-lines'>{lines}</ul><div class='nbprec-runs'>{table}</div>"
    )
    return Html(markup, summary.to_text())


def culprit(comparison: Any) -> str | None:
    """The op a reader should look at first: the first that introduced an error, else the first failing op
    (its name; see :func:`first_failing` for its step and rank)."""
    row = comparison.first_introduced_op()
    row = row if row is not None else comparison.first_failing_op()
    return None if row is None else str(row["op"])


def first_failing(comparison: Any) -> Html:
    """The first failing op and the first introduced op, each with its roll-up row."""
    ops = comparison.ops
    several = comparison.several_runs
    at = ("step", "rank") if several else ()
    parts = []
    for label, row in (("First failing op", comparison.first_failing_op()),
                       ("First op that introduced the error", comparison.first_introduced_op())):  # fmt: skip
        if row is None:
            parts.append(f"<p><b>{label}</b>: none under this rule.</p>")
            continue
        cols = [c for c in (*at, "order", "op", "op_type", "status", "origin", "in_cosine", "out_cosine",
                            "out_rel_euclidean", "out_max_abs_err") if c in ops]  # fmt: skip
        reason = f" &mdash; {esc(row['reason'])}" if row.get("reason") else ""
        where = f" at step {int(row['step'])}, rank {int(row['rank'])}" if several else ""
        parts.append(
            f"<p><b>{label}</b>: <code class='nbprec-op'>{esc(row['op'])}</code>{esc(where)}{reason}</p>"
            + _table(pd.DataFrame([row[cols]]))
        )
    return Html("".join(parts), f"first failing op: {op_at(comparison.first_failing_op(), several)}")


def worst_ops(comparison: Any, n: int = 15) -> Html:
    """The ``n`` ops with the worst output metric."""
    worst = comparison.worst_ops(n)
    at = ("step", "rank") if comparison.several_runs else ()
    cols = [c for c in (*at, "order", "op", "op_type", "status", "origin", "in_cosine", "out_cosine",
                        "out_rel_euclidean", "out_max_abs_err") if c in worst]  # fmt: skip
    return Html(_table(worst[cols], n), f"{len(worst)} worst op" + ("" if len(worst) == 1 else "s"))


def overflow(report: Any) -> Html:
    """The overflow scan: first critical op, its impact and the ranked flagged ops."""
    if report is None:
        return Html("<p>No overflow scan.</p>")
    s = report.summary()
    first = s["first_critical_op"]
    rows: list[tuple[str, object]] = [
        ("ops by level", ", ".join(f"{k}: {v}" for k, v in s["levels"].items()) or "-"),
        ("first critical op", f"{first} ({s['first_critical_reason']})" if first else "none"),
    ]
    if report.impact is not None:
        rows.append(("did it matter?", f"{report.impact.verdict}: {report.impact.message}"))
    ranked = report.ranked()
    cols = [c for c in ("order", "op", "op_type", "level", "out_status", "out_abs_max", "reason") if c in ranked]
    table = _table(ranked[cols], 15) if len(ranked) else "<p>No op produced NaN, inf or saturated values.</p>"
    return Html(_kv(rows) + table, f"first critical op: {first or 'none'}")


def node_text(info: Any) -> Html:
    """An op's node info (:func:`nbprec.graph.node_info`) as preformatted, escaped text."""
    text = info.to_text()
    return Html(f"<pre class='nbprec-node-info' style='font-size:12px'>{esc(text)}</pre>", text)


def view_html(view: Any) -> Html | None:
    """A dashboard view's static HTML (its live widget's controls need a kernel), or None for no view."""
    return None if view is None else Html(view.to_html(), repr(view))


def note(message: str) -> Html:
    """A one-line note (escaped)."""
    return Html(f"<p class='nbprec-note'><i>{esc(message)}</i></p>", message)
