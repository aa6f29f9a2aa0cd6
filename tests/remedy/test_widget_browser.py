"""The remedy view in a real browser: Voila serves a notebook holding it, Chromium types and clicks.

Each click goes through the widget comm to the kernel, which re-runs the real model (the demo's tiny encoder
with its planted bfloat16 GELU fault) and pushes the result back into the page.
"""

from __future__ import annotations

import browser_support as bs
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.torch, bs.needs_chromium]

CELLS = [
    "import torch.nn.functional as F\n"
    "from nbprec.demo.tiny import build_tiny\n"
    "from nbprec.remedy import Setup\n"
    "from nbprec.widgets.remedy import RemedyView\n"
    "clean, ids, labels = build_tiny('float32')\n"
    "faulty, _, _ = build_tiny('float32', faulty=True)\n"
    "setup = Setup(clean, lambda m: F.cross_entropy(m(ids).float(), labels), dtype='bfloat16', target_model=faulty)\n"
    "view = RemedyView(setup)",
    "view",
]


@pytest.fixture(scope="module")
def remedy_url(tmp_path_factory):
    """Voila serving a notebook whose last cell displays a RemedyView on the tiny faulty model."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("torch")

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path_factory.mktemp("remedy-nb") / "remedy.ipynb"
    nbformat.write(nb, path)
    yield from bs.serve_voila(path, tmp_path_factory.mktemp("remedy-jupyter"))


def _summary_has(page, text: str) -> None:
    page.wait_for_function(
        "t => [...document.querySelectorAll('.widget-html-content')].some(e => e.innerText.includes(t))",
        arg=text,
        timeout=bs.TIMEOUT_MS,
    )


def test_typing_and_clicking_verify_and_bisect_in_a_browser(remedy_url):
    with bs.chromium() as context:
        page = context.new_page()
        page.goto(remedy_url, timeout=bs.TIMEOUT_MS)
        box = page.locator(".widget-textarea textarea").first
        box.wait_for(timeout=bs.TIMEOUT_MS)
        box.fill("Functional.linear.0.forward")
        page.get_by_role("button", name="verify").click()
        _summary_has(page, "Not fixed")  # a wrong guess, shown failing with the before/after table
        page.get_by_role("button", name="bisect").click()
        _summary_has(page, "1-minimal")
        found = box.input_value()
        assert found.startswith("Functional.gelu.") and "," not in found  # the one faulty GELU call
        page.get_by_role("button", name="verify").click()
        _summary_has(page, "Verified")
        text = page.inner_text("body")
        assert "before" in text and "after" in text and "first failing op" in text
        assert "KeepFloat32(model" in page.locator(".widget-textarea textarea").nth(1).input_value()
        assert not [e for e in bs.WIDGET_ERRORS if e in text]
        bs.screenshot(page, "remedy_view.png")
