"""Verifying a remedy: before / after side by side, and the remedies nbprec prints passed straight in."""

from __future__ import annotations

import json

import pytest

import nbprec
import nbprec.overflow as ov
from nbprec.cli import main
from nbprec.remedy import Remedy, RemedyError, verify

from .conftest import planted_setup

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def overflow_runs(tmp_path_factory):
    """The planted float16 overflow: its setup and a statistics capture of target and benchmark."""
    root = tmp_path_factory.mktemp("overflow")
    setup = planted_setup({1: "overflow"}, "float16")
    setup.run("target", capture=root / "fp16")
    setup.run("bench", capture=root / "fp32")
    return setup, root


def test_before_and_after_side_by_side(overflow_runs, tmp_path):
    setup, _ = overflow_runs
    v = verify(setup, ["Tensor.mul.0.forward", "Functional.layer_norm.2.backward"], out=tmp_path)
    assert v.passed and bool(v) and v.overflow_gone
    assert v.remedy.ops == ("Tensor.mul.0.forward", "Functional.layer_norm.2.forward")
    assert v.before.first_failing_op == "Tensor.mul.0.forward" and v.before.first_overflow == "Tensor.mul.0.forward"
    assert v.before.failing_ops > 0 and v.after.failing_ops == 0 and v.after.first_overflow is None
    assert v.before.run.nonfinite_gradients > 0 and v.after.run.nonfinite_gradients == 0
    table = v.table()
    assert list(table.columns) == ["before", "after"]
    assert (
        table.loc["first overflow", "before"] == "Tensor.mul.0.forward"
        and table.loc["first overflow", "after"] == "none"
    )
    assert table.loc["verdict", "before"] == "fail" and table.loc["verdict", "after"] == "pass"
    assert table.loc["failing ops", "after"].startswith("0 of ")
    assert v.headline().startswith("Verified:") and "overflow at Tensor.mul.0.forward is gone" in v.headline()
    assert "<table" in v._repr_html_() and "Verified" in v.to_text()
    summary = json.loads(v.save(tmp_path / "verification.json").read_text())
    assert summary["passed"] and summary["after"]["first overflow"] == "none"
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["after", "before", "bench"]
    assert nbprec.open(tmp_path / "after").meta["finished"]


def test_a_partial_remedy_is_shown_failing(overflow_runs, tmp_path):
    setup, _ = overflow_runs
    v = verify(setup, "Tensor.mul.0.forward", out=tmp_path)
    assert not v.passed and v.headline().startswith("Not fixed")
    assert v.after.first_failing_op is not None


def test_the_remedies_nbprec_overflow_prints_pass_straight_in(overflow_runs, tmp_path, capsys):
    setup, root = overflow_runs
    report = ov.scan(root / "fp16", bench=root / "fp32")
    fixes = ov.remedies(report, device_type="cpu")
    v = verify(setup, fixes, out=tmp_path / "object")
    assert v.passed and v.remedy.modules  # the modules the blamed ops ran in
    assert main(["overflow", str(root / "fp16"), "--bench", str(root / "fp32"), "--device-type", "cpu"]) == 0
    printed = capsys.readouterr().out
    from_text = Remedy.of(printed)
    assert from_text.modules == v.remedy.modules
    assert verify(setup, printed, out=tmp_path / "text").passed


def test_the_comparison_and_its_verdict_pass_straight_in(tmp_path):
    setup = planted_setup({1: "kernel"}, "bfloat16")
    setup.run("target", capture=tmp_path / "bf16")
    setup.run("bench", capture=tmp_path / "fp32")
    comp = nbprec.compare(tmp_path / "bf16", tmp_path / "fp32")
    first = str(comp.first_failing_op()["op"])
    assert Remedy.of(comp).ops == (first,) == Remedy.of(comp.verdict()).ops == Remedy.of(comp.verdict().text).ops
    assert verify(setup, comp, out=tmp_path / "v").passed


def test_a_loss_scale_remedy_re_runs_the_benchmark_at_that_scale(tmp_path):
    setup = planted_setup(None, "float16", loss_scale=2.0**24)
    setup.run("bench", capture=tmp_path / "fp32")
    bound = ov.remedies(ov.scan(tmp_path / "fp32"), recorded_scale=2.0**24).loss_scale.bound
    v = verify(setup, Remedy(loss_scale=bound), out=tmp_path / "v")
    assert v.before.first_overflow is not None and v.passed and v.overflow_gone
    assert v.after.run.loss_scale == bound == v.after.bench.loss_scale
    assert (tmp_path / "v" / "bench_after").is_dir()
    assert "loss scale 2**" in v.headline()


def test_names_that_never_ran_and_unknown_modules_are_refused(overflow_runs, tmp_path):
    setup, _ = overflow_runs
    with pytest.raises(RemedyError, match=r"never called Functional\.gelu\.7\.forward"):
        verify(setup, ["Functional.gelu.7.forward"], out=tmp_path / "a")
    with pytest.raises(RemedyError, match=r"no module 'blocks\.9'"):
        verify(setup, {"modules": ["blocks.9"]}, out=tmp_path / "b")
