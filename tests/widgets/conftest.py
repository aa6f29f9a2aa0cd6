"""Shared fixtures: a real comparison (msprobe bf16 vs fp32 dumps) and the torch demo comparison."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"


@pytest.fixture(scope="session")
def msprobe_comparison():
    """bf16 vs fp32 msprobe dumps of a real PyTorch encoder (tensor payloads on both sides)."""
    import nbprec

    return nbprec.compare(FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix")


@pytest.fixture(scope="session")
def demo_runs(tmp_path_factory):
    """The tiny encoder captured in float32 and in bfloat16 with the planted faulty GELU (needs torch)."""
    pytest.importorskip("torch")
    from nbprec.demo import tiny_runs

    runs = {r.name: r.path for r in tiny_runs(tmp_path_factory.mktemp("demo"))}
    return runs["tiny_bf16_faulty"], runs["tiny_fp32"]


@pytest.fixture(scope="session")
def demo_notebook(demo_runs, tmp_path_factory):
    """A notebook (in its own folder) that compares the demo runs and displays the dashboard."""
    target, bench = demo_runs
    return write_demo_notebook(tmp_path_factory.mktemp("nb") / "explore.ipynb", target, bench)


def write_demo_notebook(path: Path, target: Path, bench: Path, rule: str = "default") -> Path:
    """A notebook that compares ``target`` with ``bench`` and displays the dashboard (last cell)."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# nbprec dashboard on the demo comparison"),
        nbformat.v4.new_code_cell(
            "import nbprec\n"
            f"comp = nbprec.compare({str(target)!r}, {str(bench)!r}, rule={rule!r})\n"
            "dash = nbprec.explore(comp)\n"
            "print(dash.selection.op)"
        ),
        nbformat.v4.new_code_cell("dash"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="session")
def bench_widgets():
    """``bench/widgets.py`` as a module: its synthetic comparisons (any size, a planted fault) and notebook."""
    from bench_support import bench_module

    return bench_module("widgets")


@pytest.fixture(scope="session")
def faulty_5000(bench_widgets):
    """5,000 ops; the op at 37 % introduces an error (output cosine 0.3), later ones inherit it, two overflow."""
    return bench_widgets.faulty_comparison(5_000)


@pytest.fixture(scope="module")
def browser():
    """One Chromium for a browser test module (playwright's sync API allows one driver at a time)."""
    import browser_support as bs

    yield from bs.module_browser()
