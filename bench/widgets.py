"""Benchmark the dashboard: slider change -> updated table model on a 100,000-op comparison, and browser render.

Run: ``.venv/bin/python bench/widgets.py [--ops 100000] [--browser]``

Figures printed:
- kernel time from a threshold change to the new table page (re-judge, roll-up, filter, sort, page), against a
  baseline in the same run: a plain pandas filter of the same op frame by the same threshold;
- the same with the grid widget built (its page pushed to the widget model);
- the core path ``comparison.with_threshold(...).ops`` for reference;
- with ``--browser`` (or ``--browser-only``) and ``/usr/bin/chromium``: the dashboard in Voila (page load to every
  view drawn, less a kernel-only page loaded interleaved, and less that page's kernel start alone; the kernel-side
  seconds of each step; a row click to the linked views; and the page as ``nbprec serve`` serves it, prepared
  ahead in Voila's preheated kernel, with the table's canvas copies and their time, and again with nbprec's
  data grid patch switched off, interleaved, with the paired ratio) and in JupyterLab 4 (a fresh
  Lab per load: "run all cells" to every view drawn, the comparison built in that time; the Lab page to the kernel
  idle printed apart),
  medians of ``--repeat`` loads, ``--baseline DIR`` (another ``nbprec`` package) interleaved.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import timing  # bench/timing.py

from nbprec.compare import Comparison


def synthetic_comparison(n_ops: int, seed: int = 0) -> Comparison:
    """A comparison of ``n_ops`` ops (one input, one output each) with realistic bf16-vs-fp32 metric spreads."""
    rng = np.random.default_rng(seed)
    types = np.array(["linear", "gelu", "layer_norm", "softmax", "matmul", "add", "dropout"])
    op_idx = np.repeat(np.arange(n_ops), 2)
    role = np.tile(np.array(["input", "output"], dtype=object), n_ops)
    ops = np.array([f"Functional.op.{i}.forward" for i in range(n_ops)], dtype=object)
    n = len(op_idx)
    red = np.abs(rng.normal(0, 2e-3, n)) * np.linspace(1, 5, n)  # drifts upward along the run
    table = pd.DataFrame(
        {
            "target_name": ops[op_idx] + np.where(role == "input", ".input.0", ".output.0"),
            "bench_name": ops[op_idx] + np.where(role == "input", ".input.0", ".output.0"),
            "match": "exact",
            "target_dtype": "bfloat16",
            "bench_dtype": "float32",
            "target_shape": "(8, 64)",
            "bench_shape": "(8, 64)",
            "step": 0,
            "rank": 0,
            "order": op_idx,
            "op": ops[op_idx],
            "op_type": types[op_idx % len(types)],
            "module": "enc.layers." + (op_idx // 50).astype(str),
            "direction": "forward",
            "role": role,
            "slot": "0",
            "bench_op": ops[op_idx],
            "cosine": 1 - red**2 / 2,
            "rel_euclidean": red,
            "max_abs_err": red * 4,
            "max_rel_err": red * 9,
        }
    )
    return Comparison(table, rule="cann", meta={"target": "synthetic-bf16", "bench": "synthetic-fp32"})


def timed(fn: Callable[[], object], repeat: int = 7) -> float:
    """Median wall time of ``fn`` in milliseconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def kernel_figures(n_ops: int) -> None:
    from nbprec.widgets import explore
    from nbprec.widgets.model import OpsModel

    start = time.perf_counter()
    comp = synthetic_comparison(n_ops)
    ops = comp.ops
    print(f"synthetic comparison: {n_ops} ops, {len(comp.table)} tensors, built in {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    model = OpsModel(comp)
    print(f"table model prepared once in {time.perf_counter() - start:.2f} s")
    values = iter(np.linspace(0.99990, 0.999999, 1000))

    def slider_move() -> None:
        model.set_threshold(next(values), "cosine")
        model.view()

    def pandas_baseline() -> None:
        value = next(values)
        flagged = ops[ops["out_cosine"] < value]
        flagged.sort_values("order").head(model.page_size)

    ms_model = timed(slider_move)
    ms_base = timed(pandas_baseline)
    print(f"slider -> table model (re-judge + roll-up + page): {ms_model:8.1f} ms   (target < 100 ms)")
    print(f"baseline: pandas filter + sort + head of the op frame: {ms_base:8.1f} ms   ratio {ms_model / ms_base:.1f}x")

    dash = explore(comp, overflow=False)
    dash.table.widget  # noqa: B018 - build the grid so the page is pushed into the widget model
    ms_widget = timed(lambda: dash.table.set_threshold(next(values)), repeat=5)
    print(f"slider -> table + trend + graph views, widgets built: {ms_widget:8.1f} ms")
    ms_core = timed(lambda: comp.with_threshold("cosine", next(values)).ops, repeat=1)
    print(f"reference: comparison.with_threshold(...).ops (core roll-up): {ms_core:8.1f} ms")


def interaction_figures(n_ops: int, repeat: int = 7) -> None:
    """Every table interaction of the dashboard's model, in process, at ``n_ops`` ops (issue 19: < 100 ms), each
    against the same selection made with pandas on the op frame (filter, sort, first page), interleaved. The
    model's threshold also re-judges every op and redoes the roll-up, which the pandas side (a filter of the
    already judged frame) does not."""
    from nbprec.widgets.model import OpsModel

    start = time.perf_counter()
    comp = synthetic_comparison(n_ops)
    model = OpsModel(comp)
    ops = comp.ops
    page = model.page_size
    print(f"interactions at {n_ops:,} ops ({len(comp.table):,} tensors; built in {time.perf_counter() - start:.1f} s)")
    names = ops["op"].to_numpy()
    lower = ops["op"].str.lower()
    picks = names[np.random.default_rng(1).integers(0, len(names), 1000)]
    values = np.linspace(0.99990, 0.999999, 1000)
    sorts = ["out_cosine", "order", "out_max_abs_err", "order"]
    text_sorts = ["op", "op_type", "status", "module"]
    patterns = ["op.12", "op.999", "forward", ""]

    def in_layer_7(k: int) -> pd.DataFrame:
        module = ops["module"]
        return ops[(module == "enc.layers.7") | module.str.startswith("enc.layers.7.")].head(page)

    def threshold(k: int) -> None:
        model.set_threshold(values[k], "cosine")
        model.view()

    def sort(k: int) -> None:
        model.set_sort(sorts[k % 4])
        model.view()

    def sort_text(k: int) -> None:
        model.set_sort(text_sorts[k % 4])
        model.view()

    def filter_text(k: int) -> None:
        model.set_filters(pattern=patterns[k % 4])
        model.view()

    def filter_type(k: int) -> None:
        model.set_filters(op_types={"gelu", "softmax"})
        model.view()
        model.set_filters(op_types=())

    def filter_status(k: int) -> None:
        model.set_filters(statuses={"fail"})
        model.view()
        model.set_filters(statuses=())

    def filter_module(k: int) -> None:
        model.set_filters(modules=["enc.layers.7"])
        model.view()
        model.set_filters(modules=())

    def select(k: int) -> None:
        model.page = model.page_of(picks[k]) or 0
        model.view()

    cases = {  # label: (the model's interaction, the same selection with pandas)
        "threshold": (threshold, lambda k: ops[ops["out_cosine"] < values[k]].sort_values("order").head(page)),
        "sort by a metric or order": (sort, lambda k: ops.sort_values(sorts[k % 4]).head(page)),
        "sort by name, type, status, module": (
            sort_text, lambda k: ops.sort_values(text_sorts[k % 4], kind="stable").head(page)),
        "filter by text": (filter_text, lambda k: ops[lower.str.contains(patterns[k % 4], regex=False)].head(page)),
        "filter by op type": (filter_type, lambda k: ops[ops["op_type"].isin({"gelu", "softmax"})].head(page)),
        "filter by status": (filter_status, lambda k: ops[ops["status"] == "fail"].head(page)),
        "filter by module": (filter_module, in_layer_7),
        "select an op (its page)": (select, lambda k: int(np.flatnonzero(names == picks[k])[0]) // page),
    }  # fmt: skip
    for label, (ours, pandas_side) in cases.items():
        times: dict[str, list[float]] = {"model": [], "pandas": []}
        for k in range(repeat):  # interleaved, the order alternating
            for side in ("model", "pandas") if k % 2 == 0 else ("pandas", "model"):
                fn = ours if side == "model" else pandas_side
                start = time.perf_counter()
                fn(k)
                times[side].append((time.perf_counter() - start) * 1e3)
        ms, base = statistics.median(times["model"]), statistics.median(times["pandas"])
        print(f"  {label:36s} {ms:8.1f} ms   (target < 100 ms)   pandas {base:7.1f} ms   ratio {ms / base:5.1f}x")


def faulty_comparison(n_ops: int, seed: int = 0) -> Comparison:
    """:func:`synthetic_comparison` with a planted fault: the op at 37 % of the run introduces an error (output
    cosine 0.3), every later op inherits it (cosine about 0.95), and two later ops overflow (``inf`` error)."""
    comp = synthetic_comparison(n_ops, seed)
    table = comp.table.copy()
    k = int(0.37 * n_ops)
    order, output = table["order"].to_numpy(), (table["role"] == "output").to_numpy()
    later = (order > k) | ((order == k) & output)
    noise = np.random.default_rng(seed + 1).uniform(0.0, 0.04, len(table))
    table.loc[later, "cosine"] = 0.95 - noise[later]
    table.loc[later, "rel_euclidean"] = 0.2 + noise[later]
    table.loc[(order == k) & output, ["cosine", "rel_euclidean"]] = (0.3, 0.9)
    overflow = output & np.isin(order, [min(k + 5, n_ops - 1), min(k + 9, n_ops - 1)])
    table.loc[overflow, ["max_abs_err", "max_rel_err"]] = np.inf
    return Comparison(table, rule="cann", meta={"target": f"synthetic-bf16-{n_ops}", "bench": "synthetic-fp32"})


#: Every view drawn, each in its own cell of the dashboard: the grid's canvas (operators), the trend's dots, the
#: graph's nodes in Cytoscape.js, the inspector's header and, when its cell shows figures (the tensor plots' tab
#: open, selected tensors with payloads), their histogram bars and scatter dots.
_DASHBOARD_READY_JS = """() => {
  const [table, trend, graph, side] = ['table', 'trend', 'graph', 'side'].map(
    a => document.querySelector('.nbprec-cell-' + a));
  if (!table || !trend || !graph || !side) return false;
  const cy = [...graph.querySelectorAll('div')].find(d => d._cyreg && d._cyreg.cy);
  return Boolean(table.querySelector('.lm-DataGrid canvas, .p-DataGrid canvas') && trend.querySelector('.dot')
    && cy && cy._cyreg.cy.nodes().length && side.querySelector('.nbprec-selected')
    && (side.textContent.includes('element-wise views unavailable') || !side.querySelector('.svg-figure')
        || (side.querySelector('.bargroup rect') && side.querySelector('.dot'))));
}"""
#: The table, the trend and the inspector show ``op`` (the inspector's header is the last of them to be sent).
_FOLLOWED_JS = "(op) => document.querySelector('.nbprec-selected').innerText.includes(op)"
#: The graph shows ``op`` as its selected node (sent after the inspector).
_GRAPH_FOLLOWED_JS = (
    "(op) => { const d = [...document.querySelectorAll('div')].find(e => e._cyreg && e._cyreg.cy);"
    " const c = d && d._cyreg.cy.nodes('.selected');"
    " return c && c.length && c.some(n => (n.data('op') || n.id()) === op); }"
)


#: How far down the page the dashboard reaches (Voila scrolls an inner element, not the document): the bottom of
#: the output holding the widgets.
_CONTENT_HEIGHT_JS = (
    "() => Math.round(Math.max(...[...document.querySelectorAll("
    "'.nbprec-dash, .jp-OutputArea-output:has(.widget-vbox)')]"
    ".map(e => e.getBoundingClientRect().bottom)) + window.scrollY)"
)


def dashboard_notebook(
    path: Path, source: str, package_root: Path | None = None, ready_file: Path | None = None
) -> Path:
    """A notebook that opens the dashboard: ``source`` is ``"msprobe"`` (the 100-op fixture comparison, with
    tensors), ``"demo"`` (``nbprec demo``'s tiny encoder with its faulty GELU, needs torch) or an op count (a
    :func:`faulty_comparison`); it prints the kernel-side seconds of each step (:func:`kernel_seconds` reads
    them). ``package_root``: import ``nbprec`` from there (another version, for a baseline in the same run).
    ``ready_file``: a last cell creates it, as ``nbprec serve``'s notebook does once the dashboard is built."""
    import nbformat

    root = Path(__file__).resolve().parents[1]
    first = f"sys.path.insert(0, {str(package_root)!r})\n" if package_root is not None else ""
    if source == "msprobe":
        fixtures = root / "tests" / "fixtures" / "msprobe"
        make = f"nbprec.compare({str(fixtures / 'bf16_tensor_mix')!r}, {str(fixtures / 'fp32_tensor_mix')!r})"
    elif source == "demo":  # the tiny encoder with the planted faulty GELU, captured once here (needs torch)
        from nbprec.demo import tiny_runs

        runs = {r.name: r.path for r in tiny_runs(path.parent / "demo-runs")}
        make = f"nbprec.compare({str(runs['tiny_bf16_faulty'])!r}, {str(runs['tiny_fp32'])!r})"
    else:
        make = f"faulty_comparison({int(source)})"
    bench = f"sys.path.insert(0, {str(root / 'bench')!r})\nfrom widgets import faulty_comparison\n"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            f"import sys, time\nt0 = time.perf_counter()\n{first}import nbprec\n"
            f"{bench if make.startswith('faulty') else ''}comparison = {make}\nt1 = time.perf_counter()\n"
            "dash = nbprec.explore(comparison)\ndash.widget\nt2 = time.perf_counter()"
        ),
        nbformat.v4.new_code_cell("dash"),
        nbformat.v4.new_code_cell(
            "t3 = time.perf_counter()\nprint(f'kernel-side: import nbprec and compare {t1 - t0:.2f} s; dashboard built"
            " (explore + widgets) in {t2 - t1:.2f} s; displayed in {t3 - t2:.2f} s')"
        ),
    ]
    if ready_file is not None:
        nb.cells.append(nbformat.v4.new_code_cell(f"open({str(ready_file)!r}, 'w').close()"))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def _click_row_latency(page: object, row: int) -> tuple[float, float]:
    """Click grid row ``row``: seconds until the table, trend and inspector show its op, and until the graph does
    too (NaN when the graph does not hold that op within 5 s)."""
    grid = page.locator(".lm-DataGrid, .p-DataGrid").first
    box = grid.bounding_box()
    before = page.locator(".nbprec-selected").first.inner_text()
    start = time.perf_counter()
    page.mouse.click(box["x"] + 150, box["y"] + 22 + row * 22 + 11)
    page.wait_for_function(
        "(before) => document.querySelector('.nbprec-selected').innerText !== before", arg=before, timeout=60_000
    )
    views = time.perf_counter() - start
    op = page.locator(".nbprec-selected b").first.inner_text()
    try:
        page.wait_for_function(_GRAPH_FOLLOWED_JS, arg=op, timeout=5_000)
        graph = time.perf_counter() - start
    except Exception:  # playwright's timeout: the graph does not show that op
        graph = float("nan")
    return views, graph


#: Seconds from the request to the last byte of the page: Voila sends it once the kernel ran every cell.
_RESPONSE_END_JS = "() => performance.getEntriesByType('navigation')[0].responseEnd / 1000"

#: Counts the copies from one canvas to another (``drawImage`` with a canvas source) and the main thread's time in
#: them: the data grid (Lumino's, under ipydatagrid) paints each cell into a buffer canvas and copies it to the
#: one shown, one ``drawImage`` a cell, and each such copy snapshots the whole buffer. Added before the page's
#: scripts run; its own cost is two clock reads a copy. ``cells`` counts the distinct cell rectangles copied, so
#: ``copies / cells`` is how many times the grid painted its cells.
_CANVAS_COPIES_INIT = """(() => {
  const copies = window.__nbprecCanvasCopies = {copies: 0, ms: 0, rects: new Set()};
  const draw = CanvasRenderingContext2D.prototype.drawImage;
  CanvasRenderingContext2D.prototype.drawImage = function (...args) {
    if (!(args[0] instanceof HTMLCanvasElement)) return draw.apply(this, args);
    const start = performance.now();
    try { return draw.apply(this, args); } finally {
      copies.ms += performance.now() - start;
      copies.copies += 1;
      copies.rects.add(args.slice(1, 5).map(Math.round).join(','));
    }
  };
})()"""
_CANVAS_COPIES_JS = """() => {
  const c = window.__nbprecCanvasCopies;
  return c ? {copies: c.copies, ms: c.ms, cells: c.rects.size} : null;
}"""


def kernel_seconds(line: str) -> dict[str, float]:
    """The kernel-side seconds :func:`dashboard_notebook` prints: ``{"compare": ..., "build": ..., "display": ...}``.

    Examples
    --------
    >>> kernel_seconds("kernel-side: import nbprec and compare 0.30 s; dashboard built (explore + widgets) in 0.41 s;"
    ...                " displayed in 0.02 s")
    {'compare': 0.3, 'build': 0.41, 'display': 0.02}
    """
    values = [float(v) for v in re.findall(r"(\d+\.\d+) s", line)]
    return dict(zip(("compare", "build", "display"), values, strict=True))


def _kernel_text(runs: list[dict]) -> str:
    """Median kernel-side seconds of page loads, as the bench prints them."""
    med = statistics.median
    compare, build, display = (med(r["kernel"][k] for r in runs) for k in ("compare", "build", "display"))
    return (
        f"kernel-side: import nbprec + compare {compare:.2f} s, explore + widgets {build:.2f} s, "
        f"display {display:.2f} s"
    )


def _voila_dashboard(browser: object, folder: Path, source: str, shot: Path | None, package_root: Path | None) -> dict:
    """One page load of the dashboard in Voila at 1440 x 900, then 5 row clicks; the figures as a dict."""
    import browser_support as bs

    folder.mkdir(parents=True)
    served = bs.serve_voila(dashboard_notebook(folder / "dashboard.ipynb", source, package_root), folder)
    url = next(served)
    try:
        page, render, server, kernel = _load_dashboard(browser, url)
        height = page.evaluate(_CONTENT_HEIGHT_JS)
        if shot is not None:
            page.screenshot(path=str(shot))  # the 1440 x 900 window
        clicks = [_click_row_latency(page, row) for row in (5, 7, 4, 6, 3)]
        plots = _open_plots_latency(page)
        page.close()
    finally:
        next(served, None)  # stops Voila
    return {"render": render, "server": server, "kernel": kernel, "height": height, "views": [c[0] for c in clicks],
            "graph": [c[1] for c in clicks if c[1] == c[1]], "plots": plots}  # fmt: skip


#: The tensor plots' tab shows the inspector's tensor with its histogram bars and scatter dots.
_PLOTS_DRAWN_JS = (
    "() => { const s = document.querySelector('.nbprec-cell-side');"
    " return Boolean(s && s.querySelector('.nbprec-plotted') && s.querySelector('.bargroup rect')"
    " && s.querySelector('.dot')); }"
)


def _open_plots_latency(page: object) -> float:
    """Click the "Tensor plots" tab: seconds until its figures are drawn (NaN without that tab, an older
    dashboard, or when the selected tensors have no payloads to draw within 10 s)."""
    tab = page.locator(".lm-TabBar-tab", has_text="Tensor plots")
    if not tab.count():
        return float("nan")
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    start = time.perf_counter()
    tab.first.click()
    try:
        page.wait_for_function(_PLOTS_DRAWN_JS, timeout=10_000)
    except PlaywrightTimeout:  # nothing to draw
        return float("nan")
    return time.perf_counter() - start


def _load_dashboard(
    browser: object, url: str, canvas_copies: bool = False, cell_copies: str | None = None
) -> tuple[object, float, float, dict[str, float]]:
    """A 1440 x 900 page of the dashboard at ``url``: (the page, seconds from the request to every view drawn,
    its last byte's second, the kernel-side seconds it prints). ``canvas_copies``: count the page's canvas copies
    (:data:`_CANVAS_COPIES_INIT`; :data:`_CANVAS_COPIES_JS` reads them). ``cell_copies``: the value of nbprec's
    switch ``globalThis.nbprecCellCopies`` (``"each"``: the data grid copies each cell, as without nbprec's
    lab extension; ``docs/jupyter.md``), None to leave it unset."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    if cell_copies is not None:
        page.add_init_script(f"globalThis.nbprecCellCopies = {cell_copies!r};")
    if canvas_copies:
        page.add_init_script(_CANVAS_COPIES_INIT)
    start = time.perf_counter()
    page.goto(url, timeout=180_000)
    page.wait_for_function(_DASHBOARD_READY_JS, timeout=180_000)
    render = time.perf_counter() - start
    kernel = kernel_seconds(page.locator("text=kernel-side").first.inner_text())
    return page, render, page.evaluate(_RESPONSE_END_JS), kernel


def _voila_prepared(browser: object, folder: Path, source: str, cell_copies: str | None = None) -> dict:
    """One page load of the dashboard as ``nbprec serve`` runs Voila (:func:`nbprec.report.serve.start_voila`:
    its template, the notebook run ahead in Voila's preheated kernel): Voila started, the page requested once the
    notebook has built the dashboard, timed from the request to every view drawn. Also the seconds from Voila's
    start to the dashboard prepared (kernel start and every cell, off the page's path). ``cell_copies``: as in
    :func:`_load_dashboard`."""
    from nbprec.report.serve import READY_FILE, start_voila

    folder.mkdir(parents=True)
    path = dashboard_notebook(folder / "dashboard.ipynb", source, ready_file=folder / READY_FILE)
    start = time.perf_counter()
    with start_voila(path, preheat=True) as server:
        if not server.wait_ready(timeout=300):
            raise RuntimeError(f"the dashboard was not prepared: {server.log.read_text()[-2000:]}")
        prepared = time.perf_counter() - start
        page, render, server_end, kernel = _load_dashboard(
            browser, server.url, canvas_copies=True, cell_copies=cell_copies
        )
        copies = page.evaluate(_CANVAS_COPIES_JS)
        page.close()
    return {"render": render, "server": server_end, "prepared": prepared, "kernel": kernel, "copies": copies}


#: The cells of the two reference pages of the Voila figures: kernel start alone (a plain HTML output, no
#: widget, no nbprec), and a one-widget page (kernel start, ``import nbprec`` and the widget manager).
_KERNEL_ONLY_CELL = "from IPython.display import HTML\nHTML('<b id=\"ready\">ready</b>')"
_ONE_WIDGET_CELL = "import ipywidgets\nimport nbprec\nipywidgets.HTML('<b id=\"ready\">ready</b>')"


def _voila_empty_page(browser: object, folder: Path, cell: str = _ONE_WIDGET_CELL) -> tuple[float, float]:
    """Seconds from page request to a one-cell notebook drawn in Voila (``#ready`` shown), and to the page's last
    byte (Voila's kernel start and that cell: what the page costs before its scripts run). With
    :data:`_KERNEL_ONLY_CELL`: what Voila's kernel start costs every page; with :data:`_ONE_WIDGET_CELL`: that,
    ``import nbprec`` and the widget manager, which every dashboard page pays before its own views."""
    import browser_support as bs
    import nbformat

    folder.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(cell)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, folder / "empty.ipynb")
    served = bs.serve_voila(folder / "empty.ipynb", folder)
    url = next(served)
    try:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        start = time.perf_counter()
        page.goto(url, timeout=180_000)
        page.wait_for_selector("#ready", timeout=180_000)
        seconds = time.perf_counter() - start
        server = page.evaluate(_RESPONSE_END_JS)
        page.close()
    finally:
        next(served, None)
    return seconds, server


def _lab_dashboard(pw: object, home: Path, notebook: Path) -> dict:
    """One JupyterLab (fresh server, so a fresh kernel and no cached page) at 1440 x 900 opening ``notebook``:
    seconds from the page request to the kernel idle, then from "run all cells" to every view drawn."""
    import secrets
    import shutil
    import subprocess
    import sys

    import browser_support as bs

    env = {**os.environ, **{f"JUPYTER_{k}_DIR": str(home / k.lower()) for k in ("CONFIG", "RUNTIME", "DATA")}}
    port, token = bs.free_port(), secrets.token_hex(16)
    jupyter = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or "jupyter"
    cmd = [jupyter, "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}", f"--IdentityProvider.token={token}",
           "--ServerApp.port_retries=0", f"--ServerApp.root_dir={notebook.parent}",
           "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None", "--allow-root"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                break
            except OSError:
                time.sleep(0.3)
        browser = pw.chromium.launch(executable_path=str(bs.CHROMIUM), args=list(bs.ARGS))
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            start = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}/lab/tree/{notebook.name}?token={token}", timeout=180_000)
            page.wait_for_function(
                "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                " const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;"
                " return k && k.status === 'idle'; }",
                timeout=180_000,
            )
            ready = time.perf_counter() - start
            start = time.perf_counter()
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            page.wait_for_function(_DASHBOARD_READY_JS, timeout=180_000)
            render = time.perf_counter() - start
            output = page.wait_for_selector(".jp-OutputArea-output:has-text('kernel-side')", timeout=60_000)
            return {"ready": ready, "render": render, "kernel": kernel_seconds(output.inner_text())}
        finally:
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def lab_dashboard_figures(sources: tuple[str, ...] = ("msprobe", "5000"), baseline: Path | None = None,
                          repeat: int = 1) -> None:  # fmt: skip
    """JupyterLab 4 + Chromium at 1440 x 900, per comparison: a fresh Lab opens the dashboard notebook; seconds
    from "run all cells" (importing nbprec and building the comparison included) to every view drawn. The Lab
    page to the kernel idle (kernel start) is printed apart. ``baseline`` and ``repeat`` as in
    :func:`browser_dashboard_figures` (medians, interleaved)."""
    import tempfile

    from playwright.sync_api import sync_playwright

    variants = _variants(baseline, "browser (JupyterLab)")
    if not variants:
        return
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        for source in sources:
            runs: dict[str, list[dict]] = {v: [] for v in variants}
            for i in range(repeat):
                for name, root in variants.items():
                    home = Path(tmp) / f"lab-{source}-{name.replace(' ', '-')}-{i}"
                    (home / "nb").mkdir(parents=True)
                    notebook = dashboard_notebook(home / "nb" / "dashboard.ipynb", source, root)
                    runs[name].append(_lab_dashboard(pw, home, notebook))
            for name, got in runs.items():
                med = statistics.median
                print(
                    f"browser (JupyterLab, {name}): {_label(source):20s} run all cells to every view drawn "
                    f"{med(r['render'] for r in got):4.1f} s (target 3 s; import nbprec and building the comparison "
                    f"included; {_kernel_text(got)}); Lab page to kernel idle {med(r['ready'] for r in got):.1f} s "
                    f"(kernel start: excluded); median of {len(got)}: " + " ".join(f"{r['render']:.2f}" for r in got)
                )


def _variants(baseline: Path | None, what: str) -> dict[str, Path | None]:
    """The ``nbprec`` packages to time, by name (``None``: this tree's), with ``tests/`` (``browser_support``) on
    the path; none, said so, without Chromium."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import browser_support as bs

    if not bs.CHROMIUM.exists():
        print(f"{what}: skipped (no /usr/bin/chromium)")
        return {}
    return {"this tree": None, **({"baseline": baseline} if baseline is not None else {})}


def _label(source: str) -> str:
    return {"msprobe": "100-op msprobe", "demo": "demo (tiny encoder)"}.get(source) or f"{int(source):,}-op synthetic"


def browser_dashboard_figures(
    sources: tuple[str, ...] = ("msprobe", "5000", "50000"),
    shots: Path | None = None,
    baseline: Path | None = None,
    repeat: int = 1,
) -> None:
    """Voila + Chromium at 1440 x 900, per comparison: page load to every view drawn; that less a kernel-only
    page (one plain output, no widget: Voila's kernel start and page scripts) and less that page's last byte
    (its kernel start alone), the page loads timed interleaved; the dashboard page's own last byte (kernel
    start and every cell) and the kernel-side seconds of each step; the page height (900: no page scrolling);
    and a click on a table row to the table, trend and inspector updated (and the graph, when it holds the op),
    median of 5 clicks; and the page as ``nbprec serve`` serves it (:func:`_voila_prepared`, this tree only).
    ``baseline``: a folder holding another ``nbprec`` package, measured the same way, interleaved with this one;
    ``repeat`` page loads each (medians)."""
    import tempfile

    from playwright.sync_api import sync_playwright

    variants = _variants(baseline, "browser (Voila)")
    if not variants:
        return
    import browser_support as bs

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(bs.CHROMIUM), args=list(bs.ARGS))
        for source in sources:
            runs: dict[str, list[dict]] = {v: [] for v in variants}
            empty, kernel_only, prepared, each_cell = [], [], [], []
            for i in range(repeat):
                kernel_only.append(_voila_empty_page(browser, Path(tmp) / f"{source}-kernel-{i}", _KERNEL_ONLY_CELL))
                empty.append(_voila_empty_page(browser, Path(tmp) / f"{source}-empty-{i}"))
                for name, root in variants.items():
                    shot = shots / f"dashboard-{source}.png" if shots is not None and root is None and i == 0 else None
                    folder = Path(tmp) / f"{source}-{name.replace(' ', '-')}-{i}"
                    runs[name].append(_voila_dashboard(browser, folder, source, shot, root))
                # the served page, and the same with the data grid copying each cell (nbprec's patch off), in turn
                for each in (False, True) if i % 2 == 0 else (True, False):
                    got = _voila_prepared(browser, Path(tmp) / f"{source}-prepared-{i}-{each}", source,
                                          "each" if each else None)  # fmt: skip
                    (each_cell if each else prepared).append(got)
            med = statistics.median
            start, start_server = med(k[0] for k in kernel_only), med(k[1] for k in kernel_only)
            print(
                f"browser (Voila): the kernel-only page (one plain output: no widget, no nbprec) {start:.1f} s, of "
                f"which Voila's kernel start and that cell {start_server:.1f} s (its last byte), the rest Voila's page "
                f"scripts; a one-widget page (+ import nbprec and the widget manager) {med(e[0] for e in empty):.1f} s"
                f" (medians of {repeat}, interleaved)"
            )
            for name, got in runs.items():
                views = [v for r in got for v in r["views"]]
                graph = [g for r in got for g in r["graph"]]
                render, server = med(r["render"] for r in got), med(r["server"] for r in got)
                graph_txt = f"median {med(graph) * 1e3:.0f} ms ({len(graph)}/{len(views)})" if graph else "n/a"
                print(
                    f"browser (Voila, {name}): {_label(source):20s} page load to every view drawn {render:4.1f} s; "
                    f"less the kernel-only page {render - start:4.1f} s (target 3 s), less its kernel start alone "
                    f"{render - start_server:4.1f} s; the page's last byte at {server:.1f} s (kernel start and every "
                    f"cell), drawn {render - server:.1f} s later; {_kernel_text(got)}; all loads: "
                    + " ".join(f"{r['render']:.2f}" for r in got)
                )
                print(
                    f"    dashboard bottom at {got[0]['height']} px at 1440x900; row click to table+trend+inspector:"
                    f" median {med(views) * 1e3:.0f} ms (min {min(views) * 1e3:.0f}, max {max(views) * 1e3:.0f}); "
                    f"graph too: {graph_txt}"
                )
                plots = [r["plots"] for r in got if r["plots"] == r["plots"]]
                if plots:
                    print(f"    the Tensor plots tab opened (after the clicks) to its four figures drawn: median "
                          f"{med(plots) * 1e3:.0f} ms of {len(plots)} loads")  # fmt: skip
            render = med(r["render"] for r in prepared)
            print(
                f"browser (Voila as nbprec serve runs it, this tree): {_label(source):20s} page load to every view "
                f"drawn {render:4.1f} s (target 3 s), the dashboard prepared ahead: Voila ran the notebook in its "
                f"preheated kernel {med(r['prepared'] for r in prepared):.1f} s after it started, before the page was "
                f"requested (kernel start, imports and comparison off the page's path; the page's last byte at "
                f"{med(r['server'] for r in prepared):.2f} s); {_kernel_text(prepared)}; all loads: "
                + " ".join(f"{r['render']:.2f}" for r in prepared)
            )
            print(f"    {_copies_text([r['copies'] for r in prepared])}")
            paired = med(a["render"] / b["render"] for a, b in zip(prepared, each_cell, strict=True))
            print(
                f"    the same page with the data grid copying each cell (globalThis.nbprecCellCopies = 'each': "
                f"nbprec's lab extension's patch off, docs/jupyter.md) {med(r['render'] for r in each_cell):4.1f} s; "
                f"paired ratio with the patch / without {paired:.3f} (medians of {len(each_cell)}, interleaved); "
                f"{_copies_text([r['copies'] for r in each_cell])}"
            )
        browser.close()


def _copies_text(copies: list[dict | None]) -> str:
    """What :data:`_CANVAS_COPIES_JS` found on each load, as medians: the data grid's cell copies and their time."""
    got = [c for c in copies if c]
    if not got:
        return "canvas copies: none counted"
    med = statistics.median
    n, cells, ms = med(c["copies"] for c in got), med(c["cells"] for c in got), med(c["ms"] for c in got)
    return (
        f"canvas copies (the table's cells, from its buffer canvas to the one shown): {n:.0f} of {cells:.0f} cell "
        f"rectangles ({n / max(cells, 1):.1f} paints), {ms:.0f} ms of the page's main thread (medians of {len(got)})"
    )


_REPORT_CONTROLS_JS = """async () => {
  const root = document.querySelector('.nbprec-explorer');
  const painted = () => new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  const time = async (act) => { const t = performance.now(); act(); await painted(); return performance.now() - t; };
  const slider = root.querySelector('.nbprec-x-threshold');
  const fire = (el, type) => el.dispatchEvent(new Event(type, {bubbles: true}));
  const out = {};
  out.threshold = await time(() => { slider.value = String(Number(slider.max)); fire(slider, 'input'); });
  out.threshold_back = await time(() => { slider.value = '0'; fire(slider, 'input'); });
  const name = root.querySelector('.nbprec-x-filter-name');
  out.filter_name = await time(() => { name.value = '12'; fire(name, 'input'); });
  out.filter_clear = await time(() => { name.value = ''; fire(name, 'input'); });
  const status = root.querySelector('.nbprec-x-filter-status');
  out.filter_status = await time(() => { status.value = 'fail'; fire(status, 'change'); });
  status.value = ''; fire(status, 'change');
  const sort = root.querySelector("th[data-col='out_cosine'] button") || root.querySelector('th button');
  out.sort = await time(() => sort.click());
  out.page = await time(() => root.querySelector('.nbprec-x-next').click());
  out.row_click = await time(() => root.querySelector('.nbprec-x-table tbody tr:nth-child(5) td').click());
  out.goto_first = await time(() => root.querySelector('.nbprec-x-goto-first').click());
  return out;
}"""


def report_figures(n_ops: int, repeat: int = 3) -> None:
    """The offline report in Chromium (network blocked): the real tiny demo report, open to every view drawn, and
    the explorer of an ``n_ops``-op synthetic comparison: build time, page size, open time, control responses."""
    import tempfile

    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        print("report: skipped (no /usr/bin/chromium)")
        return
    from playwright.sync_api import sync_playwright

    from nbprec.report import write_report
    from nbprec.report.explorer import explorer

    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
    ready = "() => document.querySelector('.nbprec-explorer')?.dataset.state === 'ready'"
    drawn = (
        "() => [...document.querySelectorAll('div')].some(d => d._cyreg && d._cyreg.cy && d._cyreg.cy.nodes().length)"
    )
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        pages: list[tuple[str, Path, bool]] = []
        try:
            from nbprec.demo import tiny_runs

            runs = {r.name: r.path for r in tiny_runs(Path(tmp) / "runs")}
            start = time.perf_counter()
            report = write_report(runs["tiny_bf16_faulty"], runs["tiny_fp32"], Path(tmp) / "tiny.html")
            print(f"report: tiny demo written in {time.perf_counter() - start:.1f} s, "
                  f"{report.export.bytes / 1e6:.1f} MB")  # fmt: skip
            pages.append(("tiny demo report (168 ops)", report.html, report.offline_widgets))
        except ImportError as exc:
            print(f"report: tiny demo skipped ({exc})")
        comp = synthetic_comparison(n_ops)
        start = time.perf_counter()
        block = explorer(comp, culprit=str(comp.ops["op"].iloc[n_ops // 2]))
        seconds = time.perf_counter() - start
        page_path = Path(tmp) / "explorer.html"
        page_path.write_text(f"<!DOCTYPE html><meta charset='utf-8'><body>{block.markup}</body>", encoding="utf-8")
        print(f"report: explorer of {n_ops:,} ops built in {seconds:.1f} s (every threshold position judged by the "
              f"core), {page_path.stat().st_size / 1e6:.1f} MB")  # fmt: skip
        pages.append((f"explorer alone, {n_ops:,} ops", page_path, False))
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        try:
            for label, path, graph in pages:
                opened, controls, blocked = [], [], []
                for _ in range(repeat):
                    ctx = browser.new_context(viewport={"width": 1440, "height": 900})
                    ctx.route("**/*", lambda r, out=blocked: r.continue_() if r.request.url.startswith(
                              ("file:", "data:", "blob:")) else (out.append(r.request.url), r.abort()))  # fmt: skip
                    page = ctx.new_page()
                    start = time.perf_counter()
                    page.goto(path.as_uri(), timeout=120_000)
                    page.wait_for_function(ready, timeout=120_000)
                    if graph:
                        page.wait_for_function(drawn, timeout=120_000)
                    opened.append(time.perf_counter() - start)
                    controls.append(page.evaluate(_REPORT_CONTROLS_JS))
                    ctx.close()
                views = "explorer and subgraph" if graph else "explorer"
                print(f"report: {label}: open to {views} drawn {statistics.median(opened):.2f} s "
                      f"(median of {repeat}); external requests: {len(blocked)}")  # fmt: skip
                for key in controls[0]:
                    ms = statistics.median(c[key] for c in controls)
                    print(f"  {key:16s} {ms:8.1f} ms to painted   (target < 300 ms)")
        finally:
            browser.close()


def graph_click_figures(n_ops: int = 100_000, repeat: int = 3) -> None:
    """The whole-model graph (``SubgraphView``, model mode) of an ``n_ops``-op comparison with four module levels,
    in Voila + Chromium: mouse click to redrawn (the new elements in Cytoscape.js and laid out by dagre) for
    opening a block (top block, then a stage, a block, a layer) and for a selection made elsewhere (a button
    selects a deep op: the path to it opens). Medians over ``repeat`` page loads; the issue's target is 300 ms."""
    import sys
    import tempfile

    if not Path("/usr/bin/chromium").exists():
        print("graph clicks: skipped (no /usr/bin/chromium)")
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import browser_support as bs

    cy = "[...document.querySelectorAll('div')].find(d => d._cyreg && d._cyreg.cy)._cyreg.cy"
    chain = ["module:model", "module:model.stage2", "module:model.stage2.block4", "module:model.stage2.block4.layer4"]
    expand: dict[str, list[float]] = {block: [] for block in chain}
    reveal: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        notebook = bs.write_notebook(Path(tmp) / "graph.ipynb", bs.model_graph_cells(n_ops, Path(__file__).parent,
                                                                                     failing_order=61234))  # fmt: skip
        (Path(tmp) / "home").mkdir()
        served = bs.serve_voila(notebook, Path(tmp) / "home")
        url = next(served)
        try:
            with bs.chromium((1440, 900)) as context:
                for _ in range(repeat):
                    page = context.new_page()
                    page.goto(url, timeout=120_000)
                    page.wait_for_function(bs.CYTOSCAPE_NODES_JS, timeout=120_000)
                    for block in chain:
                        page.wait_for_timeout(300)
                        start = time.perf_counter()
                        bs.click_graph_node(page, block)
                        page.wait_for_function(f"(id) => {cy}.getElementById(id).isParent()", arg=block,
                                               timeout=30_000)  # fmt: skip
                        expand[block].append(time.perf_counter() - start)
                    page.get_by_text("collapse all").click()
                    page.wait_for_function(f"() => {cy}.nodes().length === 1", timeout=30_000)
                    page.wait_for_timeout(300)
                    start = time.perf_counter()
                    page.get_by_text("select op 61234").click()
                    page.wait_for_function(
                        f"() => {cy}.getElementById('Functional.op.61234.forward').hasClass('selected')",
                        timeout=30_000,
                    )
                    reveal.append(time.perf_counter() - start)
                    page.close()
        finally:
            next(served, None)  # stops Voila (closing the generator would skip its clean-up)
    print(f"graph clicks, {n_ops:,} ops, Voila + Chromium, click to redrawn (median of {repeat}; target 300 ms):")
    for block, seconds in expand.items():
        print(f"  open {block:36s} {statistics.median(seconds) * 1e3:6.0f} ms")
    print(f"  select an op elsewhere (reveal)           {statistics.median(reveal) * 1e3:6.0f} ms")


def _source_list(text: str) -> tuple[str, ...]:
    """The comparisons a ``--sources`` value names (comma-separated; empty: none).

    >>> _source_list("msprobe, 5000,"), _source_list("")
    (('msprobe', '5000'), ())
    """
    return tuple(s.strip() for s in text.split(",") if s.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--graph", action="store_true", help="only the whole-model graph's clicks (Chromium)")
    parser.add_argument("--report", action="store_true", help="only the offline report figures (Chromium)")
    parser.add_argument("--browser", action="store_true", help="also time the dashboard render in Chromium")
    parser.add_argument("--browser-only", action="store_true", help="only the browser figures")
    parser.add_argument("--screenshots", type=Path, help="save dashboard screenshots (png) in this folder")
    parser.add_argument("--baseline", type=Path, help="a folder with another nbprec package, timed interleaved")
    parser.add_argument("--repeat", type=int, default=1, help="page loads per comparison (medians)")
    parser.add_argument("--sources", default="msprobe,5000,50000", help="comparisons: msprobe and/or op counts")
    parser.add_argument("--lab-sources", default="msprobe,5000", help="comparisons timed in JupyterLab ('': none)")
    args = parser.parse_args()
    timing.compile_tree()  # (the kernels the pages start import nbprec: from bytecode, as after an install)
    if args.baseline is not None:
        timing.compile_tree(args.baseline)
    print(f"machine: {timing.machine()}", flush=True)
    if args.graph:
        graph_click_figures(args.ops, repeat=max(args.repeat, 3))
        return
    if args.report:
        report_figures(args.ops, repeat=max(args.repeat, 3))
        return
    if not args.browser_only:
        kernel_figures(args.ops)
        interaction_figures(args.ops)
    if args.browser or args.browser_only:
        sources, lab_sources = _source_list(args.sources), _source_list(args.lab_sources)
        if sources:
            browser_dashboard_figures(sources, shots=args.screenshots, baseline=args.baseline, repeat=args.repeat)
        if lab_sources:  # --lab-sources "": Voila only
            lab_dashboard_figures(lab_sources, baseline=args.baseline, repeat=args.repeat)


if __name__ == "__main__":
    main()
