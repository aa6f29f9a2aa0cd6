"""write_report / nbprec report on real runs: the executed notebook, the offline HTML, escaping, fallbacks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nbprec.report import find_assets, write_report

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

pytestmark = pytest.mark.slow
STATE = "application/vnd.jupyter.widget-state+json"


def _outside_scripts(html: str) -> str:
    """The page with every <script> element removed (their content is never parsed as markup)."""
    return re.sub(r"<script\b[^>]*>.*?</script>", "", html, flags=re.DOTALL | re.IGNORECASE)


def test_report_notebook_and_html(tiny_report):
    import nbformat

    nb = nbformat.read(str(tiny_report.notebook), as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert nb.cells[0].metadata["tags"] == ["parameters"]
    models = {m["model_name"] for m in nb.metadata["widgets"][STATE]["state"].values()}
    assert "CytoscapeModel" in models  # the culprit's subgraph (pan and zoom need no kernel)
    # no control that needs a kernel: the explorer (threshold, filters, sort, paging) is the page's own script
    assert not models & {
        "FloatSliderModel",
        "FloatLogSliderModel",
        "DropdownModel",
        "ButtonModel",
        "IntSliderModel",
        "SelectMultipleModel",
        "TextModel",
        "DataGridModel",
    }
    html = tiny_report.html.read_text(encoding="utf-8")
    body = _outside_scripts(html)
    for heading in ("Summary", "First failing op", "Worst ops", "Operator explorer", "Overflow",
                    "Subgraph of the culprit", "Tensor drill-down of the culprit"):  # fmt: skip
        assert f">{heading}<" in body or f">{heading}</" in body, heading
    assert "Functional.gelu.1.forward" in body  # the planted fault is named
    assert "Tiny encoder &lt;b&gt;bf16&lt;/b&gt; vs fp32" in body and "<b>bf16</b>" not in body
    if find_assets() is None:
        pytest.skip("report assets not fetched (nbprec report --fetch-assets): offline widgets not checked")
    assert tiny_report.offline_widgets and not tiny_report.export.missing
    assert tiny_report.export.modules == ["jupyter-cytoscape"]
    # nothing is loaded from the network: no src/href to http(s), no MathJax, and the first script has a src
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", body)
    assert "mathjax" not in body.lower()
    first_script = re.search(r"<script\b[^>]*>", html).group(0)
    assert 'src="data:' in first_script
    assert 'data-nbprec="requirejs"' in html and 'define("jupyter-cytoscape",' in html
    assert re.search(r"""class=["']nbprec-explorer-data["']""", html)  # the explorer's data, inlined


def test_without_assets_the_page_falls_back_to_static_views(tiny_report, tmp_path):
    from nbprec.report import export_html

    out = export_html(tiny_report.notebook, tmp_path / "static.html", assets=tmp_path / "no-assets")
    assert not out.offline_widgets and "nbprec report --fetch-assets" in out.missing[0]
    html = out.path.read_text(encoding="utf-8")
    assert "nbprec report --fetch-assets" in html  # the notice says how to get live widgets
    assert "application/vnd.jupyter.widget-view+json" not in html and "requirejs" not in html
    assert "<svg" in html and "nbprec-fallback" in html and "Functional.gelu.1.forward" in html
    if not tiny_report.offline_widgets:  # a machine without npm: both pages are static, nothing to compare
        pytest.skip("report assets not fetched (nbprec report --fetch-assets needs npm): no live page to compare")
    assert out.bytes < tiny_report.export.bytes / 3  # the live page inlines ~8 MB of JavaScript


def test_hostile_names_are_escaped(hostile_pair, tmp_path):
    from nbprec.cli import main

    out = tmp_path / "hostile <report>.html"
    title = "<script>alert(3)</script>"
    args = ["report", str(hostile_pair[0]), str(hostile_pair[1]), "-o", str(out), "--title", title]
    assert main(args) == 0
    html = out.read_text(encoding="utf-8")
    body = _outside_scripts(html)
    assert "&lt;img src=x onerror=alert(1)&gt;" in body  # the failing op is named, as text
    assert "<img src=x" not in body and "<script>alert(3)" not in html
    assert "onmouseover=alert(2)" not in body.replace("&lt;b onmouseover=alert(2)&gt;", "")
    nb = json.loads(out.with_suffix(".ipynb").read_text(encoding="utf-8"))
    params = "".join(nb["cells"][0]["source"])
    assert repr(str(hostile_pair[0].resolve())) in params  # paths reach the notebook as Python literals only


def test_missing_dump_is_a_clear_error(tmp_path):
    from nbprec.report import ReportError

    with pytest.raises(ReportError, match="target dump does not exist"):
        write_report(tmp_path / "nope", tmp_path, tmp_path / "r.html")


def test_core_import_loads_no_widget_or_jupyter_library():
    code = (
        "import sys, nbprec.report, nbprec.report.sections\n"
        "bad = [m for m in ('ipywidgets', 'bqplot', 'ipycytoscape', 'ipydatagrid', 'nbconvert', 'nbclient', 'voila')"
        " if m in sys.modules]\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_multi_rank_report_shows_the_rank_by_step_heatmap(tmp_path):
    """A report on a 2-rank, 2-step msprobe pair shows the heatmap (static: its controls would need a kernel),
    names the rank, and its explorer carries each op's step and rank."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "multirank" / "msprobe"
    result = write_report(fixtures / "fault", fixtures / "fp32", tmp_path / "ranks.html")
    nb = json.loads(result.notebook.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if "".join(c["source"]).startswith("sections.view_html(dash.runs)"))
    html_out = "".join(
        "".join(out["data"]["text/html"]) for out in cell["outputs"] if "text/html" in out.get("data", {})
    )
    assert "step 1" in html_out and "nbprec-runs" in html_out, cell["outputs"]
    html = tmp_path.joinpath("ranks.html").read_text(encoding="utf-8")
    assert "Steps and ranks" in html and "rank 1" in html
    explorer_cell = next(c for c in nb["cells"] if "".join(c["source"]).startswith("explorer.explorer("))
    assert "nbprec-explorer-data" in "".join(explorer_cell["outputs"][0]["data"]["text/html"])
