"""The dashboard built in a notebook executed by nbclient (a real kernel, no browser)."""

from __future__ import annotations

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.mark.slow
def test_executed_notebook_builds_the_dashboard(demo_notebook, tmp_path):
    nb = nbformat.read(demo_notebook, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=180, kernel_name="python3", store_widget_state=True)
    client.execute(cwd=str(tmp_path))
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "Functional.gelu.1.forward" in printed  # the planted faulty GELU is selected when the dashboard opens
    data = nb.cells[-1].outputs[-1]["data"]
    assert WIDGET_VIEW in data and "text/html" in data
    assert "Functional.gelu.1.forward" in data["text/html"]
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    models = {m["model_name"] for m in state.values()}
    assert {"DataGridModel", "FigureModel", "CytoscapeModel"} <= models
