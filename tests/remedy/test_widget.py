"""The remedy view without a browser: its state after each core call, and its static fallback."""

from __future__ import annotations

import pytest

from nbprec.remedy import Remedy, verify

from .conftest import planted_setup

torch = pytest.importorskip("torch")
pytest.importorskip("ipywidgets")
pytestmark = pytest.mark.torch

from nbprec.widgets.remedy import RemedyView, parse_remedy, remedy_text  # noqa: E402


def test_the_box_reads_names_and_a_loss_scale():
    remedy = parse_remedy("Functional.gelu.1.forward,\n head  loss_scale=2**16")
    assert remedy == Remedy(("Functional.gelu.1.forward",), ("head",), 65536.0)
    assert parse_remedy(remedy_text(remedy)) == remedy
    assert parse_remedy("") == Remedy()


def test_verify_and_bisect_through_the_widgets(tmp_path):
    """The real ipywidgets: type in the box, click the buttons; each click runs the core and fills the view."""
    setup = planted_setup({1: "kernel"}, "bfloat16")
    view = RemedyView(setup, out=str(tmp_path / "v"))
    widget = view.widget  # built: the state is pushed into it from now on
    head, box, buttons, log, summary, fix = widget.children
    verify_button, bisect_button = buttons.children
    assert head.value.startswith("<h3") and not verify_button.disabled and not bisect_button.disabled
    box.value = "Functional.linear.0.forward"  # a wrong guess: verified, and shown failing
    verify_button.click()
    assert view.remedy.ops == ("Functional.linear.0.forward",) and not view.verification.passed
    assert "Not fixed" in summary.value and "<table" in summary.value and "verify: comparing" in log.value
    assert "OpType::MatMulV2" in fix.value
    bisect_button.click()
    result = view.bisection
    assert result is not None and result.passed and view.remedy == result.remedy
    assert box.value == remedy_text(result.remedy) == "Functional.silu.1.forward"
    assert any(line.startswith("bisect: run") for line in view.log) and "1-minimal" in summary.value
    verify_button.click()  # verifies what the bisection put in the box
    assert view.verification.passed and view.verification.remedy == result.remedy
    assert "Verified" in summary.value and "Not fixed" not in summary.value
    assert "KeepFloat32(model" in fix.value and "OpType::Swish" in fix.value
    box.value = "loss_scale=oops"
    verify_button.click()  # a bad box: the error is shown, nothing re-runs, the text stays to be corrected
    assert "bad loss_scale" in summary.value and box.value == "loss_scale=oops"
    assert view.verification.remedy == result.remedy and view.remedy == result.remedy


def test_a_view_without_a_model_shows_what_it_was_given(tmp_path):
    setup = planted_setup({1: "kernel"}, "float16")
    verification = verify(setup, "Functional.silu.1.forward", out=tmp_path)
    view = verification.view()
    assert view.remedy == verification.remedy and "Verified" in view.to_html()
    bare = RemedyView(None, "Functional.silu.1.forward")
    bare.verify()
    assert "no setup" in bare.note and "no setup" in bare.to_html()
    bare.set_text("loss_scale=abc")
    assert "bad loss_scale" in bare.note
    assert "<script" not in RemedyView(None, "<script>alert(1)</script>").to_html()
