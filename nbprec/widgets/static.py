"""Static fallbacks: escaped HTML tables and small inline SVG plots, drawn without matplotlib or JavaScript.

A notebook opened without a kernel or without widget JavaScript shows these instead of the live widgets.
Every user string goes through :func:`html.escape`.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from nbprec.inspect import sample_indices

#: Most dots an SVG fallback draws per series (the live widget shows all of them); a line keeps the lowest and
#: the highest point of each of ``width / 2`` buckets.
MAX_SVG_DOTS = 300
_FONT = "font-family='sans-serif' font-size='11'"


def line_points(x: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """``x``/``y`` reduced to the min and max of equal buckets when longer than ``max_points`` (peaks kept).

    Examples
    --------
    >>> xs, ys = line_points(np.arange(10.0), np.array([0, 5, 1, 1, 1, 1, 9, 1, 1, 1.0]), 4)
    >>> float(ys.max()), len(xs) <= 6
    (9.0, True)
    """
    n = len(x)
    if n <= max_points:
        return x, y
    size = -(-n // (max_points // 2))  # elements per bucket
    padded = np.concatenate([y, np.full(-n % size, np.nan)]).reshape(-1, size)
    nan = np.isnan(padded)
    base = np.arange(padded.shape[0]) * size
    lows = np.where(nan, np.inf, padded).argmin(axis=1)
    highs = np.where(nan, -np.inf, padded).argmax(axis=1)
    keep = np.unique(np.concatenate([base + lows, base + highs]))
    keep = keep[keep < n]
    return x[keep], y[keep]


@dataclass(frozen=True)
class Series:
    """One series of an SVG plot: ``kind`` is ``"line"`` or ``"dots"``."""

    x: np.ndarray
    y: np.ndarray
    kind: str = "line"
    color: str = "#1f77b4"
    label: str = ""


def esc(value: object) -> str:
    """HTML-escaped text of any value."""
    return html.escape(str(value), quote=True)


#: Cell style of :func:`html_table`, once per table rather than on every cell (the cells were most of its bytes).
_TABLE_CSS = "<style>.nbprec-table th, .nbprec-table td { text-align: left; padding: 2px 6px; }</style>"


def html_table(
    frame: pd.DataFrame,
    *,
    max_rows: int = 50,
    highlight: dict[int, str] | None = None,
    index: bool = False,
    caption: str = "",
) -> str:
    """An escaped HTML table of at most ``max_rows`` rows; ``highlight`` maps row positions to CSS colours."""
    highlight = highlight or {}
    shown = frame.head(max_rows)
    cols = ([frame.index.name or ""] if index else []) + [str(c) for c in shown.columns]
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    body = []
    for pos, (label, row) in enumerate(shown.iterrows()):
        cells = ([label] if index else []) + list(row)
        style = f" style='background:{esc(highlight[pos])}'" if pos in highlight else ""
        tds = "".join(f"<td>{esc(_fmt(v))}</td>" for v in cells)
        body.append(f"<tr{style}>{tds}</tr>")
    more = f"<p style='margin:2px'>… {len(frame) - max_rows} more rows</p>" if len(frame) > max_rows else ""
    cap = f"<caption style='text-align:left'><b>{esc(caption)}</b></caption>" if caption else ""
    return (
        f"{_TABLE_CSS}<table class='nbprec-table' style='border-collapse:collapse;font-size:12px'>{cap}"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{more}"
    )


def _fmt(value: object) -> str:
    if isinstance(value, (float, np.floating)):
        return "" if np.isnan(value) else f"{float(value):.6g}"
    return str(value)


def _scale(lo: float, hi: float, a: float, b: float) -> tuple[float, float]:
    """Coefficients (m, c) mapping [lo, hi] to [a, b]."""
    if not np.isfinite(lo) or not np.isfinite(hi) or hi == lo:
        lo, hi = (lo - 0.5, lo + 0.5) if np.isfinite(lo) else (0.0, 1.0)
    m = (b - a) / (hi - lo)
    return m, a - m * lo


def _finite_range(arrays: Sequence[np.ndarray], extra: Sequence[float] = ()) -> tuple[float, float]:
    values = [np.asarray(a, dtype=np.float64) for a in arrays] + [np.asarray(list(extra), dtype=np.float64)]
    flat = np.concatenate([v[np.isfinite(v)] for v in values]) if values else np.array([])
    if flat.size == 0:
        return 0.0, 1.0
    return float(flat.min()), float(flat.max())


def svg_plot(
    series: Sequence[Series],
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    hlines: Sequence[tuple[float, str, str]] = (),
    vlines: Sequence[tuple[float, str, str]] = (),
    width: int = 520,
    height: int = 240,
) -> str:
    """A line/dot plot as an inline SVG string; ``hlines``/``vlines`` are ``(value, colour, label)``."""
    left, right, top, bottom = 64, 12, 22, 34
    x_lo, x_hi = _finite_range([s.x for s in series], [v for v, _, _ in vlines])
    y_lo, y_hi = _finite_range([s.y for s in series], [v for v, _, _ in hlines])
    mx, cx = _scale(x_lo, x_hi, left, width - right)
    my, cy = _scale(y_lo, y_hi, height - bottom, top)
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' style='background:white'>",
        f"<text x='{left}' y='14' {_FONT} font-weight='bold'>{esc(title)}</text>",
        f"<rect x='{left}' y='{top}' width='{width - left - right}' height='{height - top - bottom}' "
        "fill='none' stroke='#999'/>",
        f"<text x='{left}' y='{height - 4}' {_FONT}>{esc(f'{x_lo:.6g}')}</text>",
        f"<text x='{width - right}' y='{height - 4}' {_FONT} text-anchor='end'>{esc(f'{x_hi:.6g}')}</text>",
        f"<text x='{(left + width) / 2:.0f}' y='{height - 4}' {_FONT} text-anchor='middle'>{esc(xlabel)}</text>",
        f"<text x='{left - 4}' y='{height - bottom}' {_FONT} text-anchor='end'>{esc(f'{y_lo:.6g}')}</text>",
        f"<text x='{left - 4}' y='{top + 9}' {_FONT} text-anchor='end'>{esc(f'{y_hi:.6g}')}</text>",
        f"<text x='{left - 4}' y='{(top + height - bottom) / 2:.0f}' {_FONT} text-anchor='end'>{esc(ylabel)}</text>",
    ]
    for legend_pos, s in enumerate(series):
        x, y = np.asarray(s.x, dtype=np.float64), np.asarray(s.y, dtype=np.float64)
        if s.kind == "line":
            x, y = line_points(x, y, width)
        else:
            keep = sample_indices(len(x), MAX_SVG_DOTS)
            x, y = x[keep], y[keep]
        ok = np.isfinite(x) & np.isfinite(y)
        px, py = mx * x[ok] + cx, my * y[ok] + cy
        if s.kind == "line" and px.size:
            points = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px, py, strict=True))
            parts.append(f"<polyline points='{points}' fill='none' stroke='{esc(s.color)}' stroke-width='1.2'/>")
        elif px.size:  # one path of round dots (a zero-length stroke each): a quarter of the bytes of circles
            dots = "".join(f"M{a:.1f} {b:.1f}h0" for a, b in zip(px, py, strict=True))
            parts.append(f"<path d='{dots}' stroke='{esc(s.color)}' stroke-width='4' stroke-linecap='round'/>")
        if s.label:
            parts.append(
                f"<text x='{width - right - 4}' y='{top + 12 + 12 * legend_pos}' {_FONT} text-anchor='end' "
                f"fill='{esc(s.color)}'>{esc(s.label)}</text>"
            )
    for value, color, label in hlines:
        if np.isfinite(value):
            yy = my * value + cy
            parts.append(
                f"<line x1='{left}' x2='{width - right}' y1='{yy:.1f}' y2='{yy:.1f}' stroke='{esc(color)}' "
                "stroke-dasharray='4 3'/>"
                f"<text x='{left + 4}' y='{yy - 3:.1f}' {_FONT} fill='{esc(color)}'>{esc(label)}</text>"
            )
    for value, color, label in vlines:
        if np.isfinite(value):
            xx = mx * value + cx
            parts.append(
                f"<line x1='{xx:.1f}' x2='{xx:.1f}' y1='{top}' y2='{height - bottom}' stroke='{esc(color)}'/>"
                f"<text x='{xx + 3:.1f}' y='{top + 10}' {_FONT} fill='{esc(color)}'>{esc(label)}</text>"
            )
    parts.append("</svg>")
    return "".join(parts)


def svg_histogram(hist: pd.DataFrame, *, title: str = "", width: int = 520, height: int = 200) -> str:
    """Overlaid target/benchmark histograms (a :func:`nbprec.inspect.histograms` frame) as inline SVG."""
    if hist.empty:
        return f"<p>{esc(title)}: no finite values</p>"
    left, right, top, bottom = 48, 12, 22, 30
    x_lo, x_hi = float(hist["left"].min()), float(hist["right"].max())
    y_hi = float(max(hist["target"].max(), hist["bench"].max(), 1))
    mx, cx = _scale(x_lo, x_hi, left, width - right)
    my, cy = _scale(0.0, y_hi, height - bottom, top)
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' style='background:white'>",
        f"<text x='{left}' y='14' {_FONT} font-weight='bold'>{esc(title)}</text>",
        f"<text x='{width - right}' y='14' {_FONT} text-anchor='end'><tspan fill='#d62728'>target</tspan> "
        "<tspan fill='#1f77b4'>benchmark</tspan></text>",
    ]
    for column, color in (("bench", "#1f77b4"), ("target", "#d62728")):
        for lo, hi, count in zip(hist["left"], hist["right"], hist[column], strict=True):
            x0, x1, y0 = mx * lo + cx, mx * hi + cx, my * count + cy
            parts.append(
                f"<rect x='{x0:.1f}' y='{y0:.1f}' width='{max(x1 - x0, 0.5):.1f}' "
                f"height='{height - bottom - y0:.1f}' fill='{color}' fill-opacity='0.45'/>"
            )
    parts.append(f"<text x='{left}' y='{height - 6}' {_FONT}>{esc(f'{x_lo:.4g}')}</text>")
    parts.append(f"<text x='{width - right}' y='{height - 6}' {_FONT} text-anchor='end'>{esc(f'{x_hi:.4g}')}</text>")
    parts.append("</svg>")
    return "".join(parts)
