"""Benchmark the dashboard: slider change -> updated table model on a 100,000-op comparison, and browser render.

Run: ``.venv/bin/python bench/widgets.py [--ops 100000] [--browser]``

Figures printed:
- kernel time from a threshold change to the new table page (re-judge, roll-up, filter, sort, page), against a
  baseline in the same run: a plain pandas filter of the same op frame by the same threshold;
- the same with the grid widget built (its page pushed to the widget model);
- the core path ``comparison.with_threshold(...).ops`` for reference;
- with ``--browser`` and ``/usr/bin/chromium``: seconds from page load to every view drawn (Voila).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

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


def interaction_figures(n_ops: int) -> None:
    """Every table interaction of the dashboard's model, in process, at ``n_ops`` ops (issue 19: < 100 ms)."""
    from nbprec.widgets.model import OpsModel

    start = time.perf_counter()
    comp = synthetic_comparison(n_ops)
    model = OpsModel(comp)
    print(f"interactions at {n_ops:,} ops ({len(comp.table):,} tensors; built in {time.perf_counter() - start:.1f} s)")
    values = iter(np.linspace(0.99990, 0.999999, 1000))
    names = comp.ops["op"].to_numpy()
    picks = iter(names[np.random.default_rng(1).integers(0, len(names), 1000)])
    sorts = iter(["out_cosine", "order", "out_max_abs_err", "order"] * 250)
    patterns = iter(["op.12", "op.999", "forward", ""] * 250)

    def threshold() -> None:
        model.set_threshold(next(values), "cosine")
        model.view()

    def sort() -> None:
        model.set_sort(next(sorts))
        model.view()

    def filter_text() -> None:
        model.set_filters(pattern=next(patterns))
        model.view()

    def filter_type() -> None:
        model.set_filters(op_types={"gelu", "softmax"})
        model.view()
        model.set_filters(op_types=())

    def select() -> None:
        op = next(picks)
        model.page = model.page_of(op) or 0
        model.view()

    for label, fn in (("threshold", threshold), ("sort", sort), ("filter by text", filter_text),
                      ("filter by op type", filter_type), ("select an op (its page)", select)):  # fmt: skip
        print(f"  {label:30s} {timed(fn):8.1f} ms   (target < 100 ms)")


def browser_figure() -> None:
    """Render time of the dashboard on the msprobe fixture comparison in Voila + Chromium."""
    import os
    import socket
    import subprocess
    import sys
    import tempfile

    import nbformat

    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        print("browser render: skipped (no /usr/bin/chromium)")
        return
    from playwright.sync_api import sync_playwright

    fixtures = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "msprobe"
    with tempfile.TemporaryDirectory() as tmp:
        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_code_cell(
                "import nbprec\n"
                f"nbprec.explore({str(fixtures / 'bf16_tensor_mix')!r}, {str(fixtures / 'fp32_tensor_mix')!r})"
            )
        ]
        path = Path(tmp) / "bench.ipynb"
        nbformat.write(nb, path)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "JUPYTER_CONFIG_DIR": f"{tmp}/cfg", "JUPYTER_RUNTIME_DIR": f"{tmp}/rt"}
        voila = str(Path(sys.executable).parent / "voila")
        proc = subprocess.Popen(
            [voila, str(path), "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1"],
            cwd=tmp,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{port}/"
            for _ in range(200):  # a TCP connection, not a GET (which would make Voila run the notebook)
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                    break
                except OSError:
                    time.sleep(0.3)
            args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=str(chromium), args=args)
                page = browser.new_page(viewport={"width": 1500, "height": 1000})
                start = time.perf_counter()
                page.goto(url, timeout=120_000)
                page.wait_for_function(
                    "() => [...document.querySelectorAll('div')].some(d => d._cyreg && d._cyreg.cy"
                    " && d._cyreg.cy.nodes().length) && document.querySelectorAll('.dot').length > 0"
                    " && document.querySelector('.lm-DataGrid canvas, .p-DataGrid canvas')",
                    timeout=120_000,
                )
                seconds = time.perf_counter() - start
                browser.close()
            print(f"browser: Voila page load to every view drawn (100-op msprobe comparison): {seconds:.1f} s")
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--browser", action="store_true", help="also time the dashboard render in Chromium")
    args = parser.parse_args()
    kernel_figures(args.ops)
    interaction_figures(args.ops)
    if args.browser:
        browser_figure()


if __name__ == "__main__":
    main()
