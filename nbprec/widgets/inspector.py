"""Tensor inspector: the selected op's tensors, target against benchmark, prepared by :mod:`nbprec.inspect`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from nbprec.errors import NbprecError
from nbprec.inspect import PairInspection, inspect_pair, op_tensor_rows
from nbprec.widgets.base import View, caption
from nbprec.widgets.model import Selection
from nbprec.widgets.static import Series, esc, html_table, svg_histogram, svg_plot
from nbprec.widgets.tensor_plots import TensorPlotsView
from nbprec.widgets.tensor_source import TensorSource

_SUMMARY_COLUMNS = ("role", "slot", "target_dtype", "bench_dtype", "target_shape", "cosine", "rel_euclidean",
                    "max_abs_err", "status", "reason")  # fmt: skip
_TABLE_STATS = ("max", "min", "mean", "norm")


class InspectorView(View):
    """Statistics, worst elements and bits of one tensor pair; :attr:`plots` draws its histograms, scatter and
    error profiles.

    Parameters
    ----------
    table
        The comparison's tensor table (the view reads rows of the selected op from it).
    selection
        The shared selection; a new op selects its worst output tensor.
    source
        Where payloads come from.
    k
        How many worst elements to list.
    """

    title = "tensor inspector"

    def __init__(self, table: pd.DataFrame, selection: Selection, source: TensorSource, k: int = 10) -> None:
        super().__init__()
        self.table = table
        self.selection = selection
        self.source = source
        self.k = k
        self.rows = pd.DataFrame()
        self.tensor: str | None = None
        self.inspection: PairInspection | None = None
        self.problem = ""
        self.plots = TensorPlotsView(self)
        self._alone: Any = None
        selection.observe(self._on_selection)
        self._on_selection(selection.op)

    # -- state -------------------------------------------------------------------------------------------
    def _on_selection(self, op: str | None) -> None:
        rows = op_tensor_rows(self.table, op) if op else self.table.iloc[:0]
        if len(rows) and {"step", "rank"} <= set(rows.columns):  # one (step, rank): the chosen one, else the first
            run = self.selection.run
            step, rank = run if run is not None else rows.sort_values(["step", "rank"]).iloc[0][["step", "rank"]]
            rows = rows[(rows["step"] == step).to_numpy() & (rows["rank"] == rank).to_numpy()]
        self.rows = rows
        self.choose_tensor(_default_tensor(self.rows))

    def choose_tensor(self, name: str | None) -> None:
        """Inspect the tensor pair whose target tensor is ``name`` (one of the selected op's)."""
        self.tensor, self.inspection, self.problem = name, None, ""
        if name is not None:
            row = self.rows[self.rows["target_name"] == name]
            if row.empty:
                self.problem = f"{name} is not a tensor of the selected op"
            else:
                try:
                    target, bench = self.source.pair(row.iloc[0])
                    self.inspection = inspect_pair(target, bench, name=name, k=self.k)
                    self.problem = self.inspection.problem
                except (NbprecError, ValueError) as exc:
                    self.problem = f"element-wise views unavailable: {exc}"
        self.refresh()

    def header_html(self) -> str:
        """Which op and tensor are shown, and the op's tensors with their metrics."""
        op = self.selection.op
        if op is None:
            return "<p>Select an op in the table, the trend or the graph.</p>"
        cols = [c for c in ("target_name", *_SUMMARY_COLUMNS) if c in self.rows]
        shown = self.rows[cols].rename(columns={"target_name": "tensor"})
        note = f"<p style='color:#b71c1c'>{esc(self.problem)}</p>" if self.problem else ""
        return (
            f"<p class='nbprec-selected'>Selected op: <b>{esc(op)}</b>; tensor: <code>{esc(self.tensor)}</code></p>"
            f"{_fusion_html(self.rows)}{html_table(shown, max_rows=20)}{note}"
        )

    def stats_frame(self) -> pd.DataFrame:
        """Side-by-side statistics: from the payloads when read, else from the comparison table."""
        if self.inspection is not None:
            return self.inspection.stats.reset_index()
        row = self.rows[self.rows["target_name"] == self.tensor]
        if row.empty:
            return pd.DataFrame(columns=["statistic", "target", "bench"])
        r = row.iloc[0]
        return pd.DataFrame(
            [(k, r.get(f"target_{k}", np.nan), r.get(f"bench_{k}", np.nan)) for k in _TABLE_STATS],
            columns=["statistic", "target", "bench"],
        )

    # -- widget --------------------------------------------------------------------------------------
    def _build(self) -> Any:
        import ipywidgets as w

        self._header = w.HTML()
        self._tensor = w.Dropdown(tooltip="tensor", layout=w.Layout(flex="1 1 auto", width="auto"))
        self._tensor.observe(self._tensor_picked, names="value")
        self._stats = w.HTML()
        self._top = w.HTML()
        self._bits = w.HTML()
        self._updating = False
        wrap = w.Layout(flex_flow="row wrap", align_items="flex-start")
        tensor = w.HBox([caption("tensor"), self._tensor], layout=w.Layout(width="95%", align_items="center"))
        return w.VBox([self._header, tensor, self._stats, w.HBox([self._top, self._bits], layout=wrap)])

    def _displayed_widget(self) -> Any:
        """On its own (``dash.inspector`` as a cell's result) the inspector shows its plots below its tables; in
        the dashboard they have a tab of their own."""
        import ipywidgets as w

        if self._alone is None:
            self._alone = w.VBox([self.widget, self.plots.widget])
        self.plots.pin()
        return self._alone

    def _tensor_picked(self, change: dict[str, Any]) -> None:
        if not self._updating and change["new"] and change["new"] != self.tensor:
            self.choose_tensor(change["new"])

    def refresh(self) -> None:
        """Push the current inspection into the widgets (once built), and to :attr:`plots`."""
        self.plots.refresh()
        if not self.built:
            return
        self._updating = True
        try:
            names = [str(n) for n in self.rows.get("target_name", pd.Series(dtype=object))]
            labels = [
                (f"{r['role']} {r['slot']}: {r['target_name']}", str(r["target_name"])) for _, r in self.rows.iterrows()
            ]
            self._tensor.options = labels
            self._tensor.value = self.tensor if self.tensor in names else None
            self._header.value = self.header_html()
            self._stats.value = html_table(self.stats_frame(), caption="statistics")
            drawn = self.inspection is not None and not self.inspection.histogram.empty
            self._top.value = self.top_html() if drawn else ""
            self._bits.value = self.bits_html() if drawn else ""
        finally:
            self._updating = False

    def top_html(self) -> str:
        """The worst elements table."""
        if self.inspection is None:
            return ""
        top = self.inspection.top_k.reset_index()
        top["index"] = top["index"].map(str)
        return html_table(top, caption=f"top {len(top)} worst elements (by abs error)")

    def bits_html(self) -> str:
        """Sign/exponent/mantissa of the worst elements (float16/bfloat16/float8 targets)."""
        if self.inspection is None or self.inspection.bits.empty:
            return "<p>bit view: only for float16/bfloat16/float8 targets</p>"
        bits = self.inspection.bits[["position", "side", "value", "sign", "exponent", "mantissa", "kind"]]
        return (
            "<div style='font-family:monospace'>"
            + html_table(bits, max_rows=2 * self.k, caption="bits of the worst elements")
            + "</div>"
        )

    def to_svg(self) -> str | None:
        ins = self.inspection
        if ins is None or ins.histogram.empty:
            return None
        sc, bm = ins.scatter, ins.by_magnitude
        parts = [
            svg_histogram(ins.histogram, title="histogram", width=400),
            svg_plot(
                [Series(sc["bench"].to_numpy(), sc["target"].to_numpy(), "dots")],
                title="target vs benchmark",
                xlabel="benchmark",
                ylabel="target",
                width=400,
            ),
            svg_plot(
                [
                    Series(
                        np.log10(np.sqrt(bm["lo"] * bm["hi"]).to_numpy()),
                        bm["max_abs_err"].to_numpy(),
                        "line",
                        "#d62728",
                        "max",
                    )
                ],
                title="abs error vs log10 |benchmark|",
                width=400,
            ),
        ]
        return (
            "<svg xmlns='http://www.w3.org/2000/svg' width='1220' height='240'>"
            + "".join(f"<g transform='translate({i * 410},0)'>{p}</g>" for i, p in enumerate(parts))
            + "</svg>"
        )

    def to_html(self) -> str:
        body = [self.header_html(), html_table(self.stats_frame(), caption="statistics")]
        svg = self.to_svg()
        if svg:
            body += [svg, self.top_html(), self.bits_html()]
        return "<div class='nbprec-inspector'>" + "".join(body) + "</div>"


def _fusion_html(rows: pd.DataFrame) -> str:
    """For an NPU op (a comparison with fusion records): its type, fusion pass and original framework ops."""
    if rows.empty or "ground_truth" not in rows:
        return ""
    r = rows.iloc[0]
    truth = str(r["ground_truth"])
    relation = f" ({esc(str(r['relation']))})" if r.get("relation") else ""
    return (
        f"<p class='nbprec-fusion'>NPU op type <b>{esc(str(r.get('op_type', '')))}</b>; "
        f"fusion pass (PassName) <b>{esc(str(r.get('fusion_pass', '')) or '-')}</b>; "
        f"original ops (OriginOp) <b>{esc(truth if truth != '*' else '- (no framework counterpart)')}</b>{relation}</p>"
    )


def _default_tensor(rows: pd.DataFrame) -> str | None:
    """The op's worst output by cosine (else its first tensor)."""
    if rows.empty:
        return None
    outputs = rows[rows["role"].isin(["output", "gradient"])]
    pool = outputs if not outputs.empty else rows
    if "cosine" in pool and pool["cosine"].notna().any():
        return str(pool.loc[pool["cosine"].idxmin(), "target_name"])
    return str(pool.iloc[0]["target_name"])
