"""Verdicts a user can trust, on real msprobe dumps of the cases that used to get a wrong answer (issue 15).

The dumps are tests/fixtures/msprobe/scenarios (msprobe's own dumper; see its README for what each run is and
the right verdict of each pair).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import nbprec
from nbprec.cli import main
from nbprec.compare.rules import get_rule, preset_names
from nbprec.overflow import remedies, scan

SCENARIOS = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe" / "scenarios"
FAULT_OP = "Torch.relu.1.forward"


def run(name: str) -> Path:
    return SCENARIOS / name


@pytest.mark.parametrize("rule", preset_names())
@pytest.mark.parametrize("mode", ["statistics", "tensor"])
def test_every_rule_finds_the_planted_kernel_fault(mode: str, rule: str) -> None:
    """A relu whose output goes negative: its inputs agree exactly, so it introduced the error (in statistics
    mode too, where there is no cosine); not 'discontinuous', and not the module around it."""
    comp = nbprec.compare(run(f"fault_{mode}"), run(f"fp32_{mode}"), rule=rule, progress=None)
    first, introduced = comp.first_failing_op(), comp.first_introduced_op()
    assert first is not None and first["op"] == FAULT_OP, comp.rule.describe()
    assert introduced is not None and introduced["op"] == FAULT_OP
    ops = comp.ops.set_index("op")
    assert ops.loc[FAULT_OP, "origin"] == "introduced" and ops.loc[FAULT_OP, "in_error"] == 0
    enclosing = ops.loc["Module.enc.layers.1.TransformerEncoderLayer.forward.0"]
    assert enclosing["origin"] == ("encloses" if enclosing["status"] == "fail" else "")
    before = ops[ops["order"] < ops.loc[FAULT_OP, "order"]]
    assert (before["status"] != "fail").all()


def test_statistics_verdict_in_words() -> None:
    comp = nbprec.compare(run("fault_statistics"), run("fp32_statistics"), progress=None)
    verdict = comp.verdict()
    assert verdict.kind == "failure" and not verdict.findings
    assert verdict.headline.startswith(f"{FAULT_OP} (relu) is the first op that fails")
    assert "inputs' statistics agree exactly" in verdict.headline and "output min -0.6401 vs 0" in verdict.headline
    assert f"nbprec ni {FAULT_OP}" in verdict.next_step


def test_precision_noise_is_said_to_be_noise() -> None:
    for rule in preset_names():
        comp = nbprec.compare(run("bf16_statistics"), run("fp32_statistics"), rule=rule, progress=None)
        assert comp.first_failing_op() is None, rule
    verdict = nbprec.compare(run("bf16_statistics"), run("fp32_statistics"), progress=None).verdict()
    assert verdict.kind == "noise" and "precision noise for bfloat16" in verdict.headline


def test_non_finite_statistics_fail_with_their_reason() -> None:
    comp = nbprec.compare(run("fp16_overflow_statistics"), run("fp32_lossscale_statistics"), progress=None)
    table = comp.table
    stats = table[["target_max", "target_min", "target_mean", "target_norm"]].to_numpy(np.float64)
    nonfinite = ~np.isfinite(stats).all(axis=1) & table["target_dtype"].str.startswith("float").to_numpy()
    assert nonfinite.sum() > 100
    rows = table[nonfinite & (table["bench_name"] != "")]
    assert (rows["status"] == "fail").all()  # never n/a
    assert rows["reason"].str.startswith("target has non-finite values").all()
    assert comp.summary()["failing_ops"] >= rows["op"].nunique() - rows["op"].str.contains("parameters_grad").sum()


def test_overflow_blames_no_container_and_no_parameter_gradient() -> None:
    report = scan(run("fp16_overflow_statistics"), bench=run("fp32_lossscale_statistics"))
    ops = report.ops.set_index("op")
    grads = ops[ops.index.str.contains("parameters_grad")]
    assert len(grads) > 5 and (grads["level"] != "critical").all() and grads["inherited"].all()
    assert report.first_critical() is None  # the cast that overflowed is not in the dump (msprobe skips casts)
    first = report.first_abnormal()
    assert first["op"] == "Functional.cross_entropy.0.backward" and "does not record" in first["note"]
    assert report.impact.verdict == "harmful"
    fix = remedies(report)
    assert not [op for op in fix.ops if "parameters_grad" in op or op.startswith("Module.")]
    assert fix.ops == ["Tensor.__mul__.0.forward", "Tensor.__mul__.0.backward"]  # the loss-scale multiply


def test_not_deterministic_runs() -> None:
    comp = nbprec.compare(run("dropout_tensor_a"), run("dropout_tensor_b"), progress=None)
    verdict = comp.verdict()
    codes = [f.code for f in verdict.findings]
    assert codes == ["not_deterministic"] and verdict.kind == "explained"
    random_op = "Functional.multi_head_attention_forward.0.forward"  # its attention dropout is on (p=0.1)
    assert verdict.findings[0].ops[0] == random_op and "seed" in verdict.findings[0].fix
    assert comp.first_failing_op() is None and comp.first_introduced_op() is None
    ops = comp.ops.set_index("op")
    assert ops.loc[random_op, "origin"] == "random"
    modules = ops[ops.index.str.startswith("Module.") & (ops["status"] == "fail")]
    assert len(modules) and (modules["origin"] != "introduced").all() and modules["explained"].all()


def test_same_model_with_dropout_off_is_not_random(tmp_path: Path) -> None:
    """A dropout op called with training=False draws nothing: a difference there is an error, not noise."""
    from nbprec.compare.culprit import random_by_call

    assert random_by_call("dropout", {"input.1": 0.1, "input.2": True}) is True
    assert random_by_call("dropout", {"input.1": 0.1, "input.training": False}) is False
    assert random_by_call("dropout", {"args": [None, 0.0, True], "kwargs": {}}) is False
    assert random_by_call("multi_head_attention_forward", {"input.10": 0.1, "input.training": True}) is True
    assert random_by_call("linear", {"input.1": 0.1}) is None


def test_random_calls_judge_each_dropout_row_by_its_call() -> None:
    """The ``random_call`` column: each row of a dropout op judged by that op's call, None elsewhere."""
    from nbprec.compare.culprit import random_calls

    ops = ["Functional.dropout.0", "Functional.dropout.0", "Functional.linear.0", "Functional.dropout.1", "x"]
    kinds = ["dropout", "dropout", "linear", "Dropout", "dropout"]
    calls = {
        "Functional.dropout.0": {"input.1": 0.1, "input.2": True},
        "Functional.dropout.1": {"input.1": 0.1, "input.training": False},
        "Functional.linear.0": {"input.1": 0.5},
    }
    assert random_calls(ops, kinds, calls).tolist() == [True, True, None, False, None]  # "x": no call recorded
    assert random_calls(ops[2:3], kinds[2:3], calls).tolist() == [None]
    assert random_calls([], [], calls).tolist() == []


@pytest.mark.parametrize(
    ("target", "code", "words", "op"),
    [
        ("other_weights_tensor", "different_weights", "their weights differ", "Module.emb.Embedding.forward.0"),
        ("other_inputs_tensor", "different_inputs", "their inputs differ", "Functional.embedding.0.forward"),
    ],
)
def test_runs_that_are_not_comparable(target: str, code: str, words: str, op: str) -> None:
    comp = nbprec.compare(run(target), run("fp32_tensor"), progress=None)
    verdict = comp.verdict()
    assert verdict.kind == "not comparable" and [f.code for f in verdict.findings] == [code]
    assert words in verdict.headline
    assert op in verdict.findings[0].ops


def test_unaligned_steps_are_said(tmp_path: Path) -> None:
    from nbprec.compare.verdict import comparability

    comp = nbprec.compare(
        SCENARIOS.parent / "bf16_statistics_mix", SCENARIOS.parent / "fp32_statistics_mix", step=0, progress=None
    )
    assert not [f for f in comparability(comp) if f.code == "unaligned"]
    two_steps = nbprec.open(SCENARIOS.parent / "bf16_statistics_mix")
    one_step = nbprec.open(SCENARIOS.parent / "fp32_statistics_mix").select(step=0)
    findings = comparability(nbprec.compare(two_steps, one_step, progress=None))
    assert any(f.code == "missing_step" and f.message.startswith("Step 1 is in the target only") for f in findings)
    assert not [f for f in findings if f.code == "unaligned"]  # said once, as a missing step (issue 19)


def test_verdict_opens_the_cli_the_report_and_the_dashboard(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(run("other_inputs_tensor")), str(run("fp32_tensor")), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("! Different inputs") and "The runs are not comparable: their inputs differ" in out
    comp = nbprec.compare(run("fault_tensor"), run("fp32_tensor"), progress=None)
    from nbprec.report.sections import summary

    section = summary(comp)
    assert comp.verdict().headline in section.text and "nbprec-verdict" in section._repr_html_()
    pytest.importorskip("ipywidgets")
    dash = nbprec.explore(comp)
    assert "is the first op that fails" in dash.header_html()


def test_threshold_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    rule = get_rule("cosine=0.98")
    assert rule.name == "cosine>=0.98" and [t.describe() for t in rule.thresholds] == ["cosine >= 0.98"]
    args = [str(run("fault_tensor")), str(run("fp32_tensor")), "--no-progress", "--threshold", "0.98"]
    assert main(["compare", *args]) == 0
    out = capsys.readouterr().out
    assert "rule       cosine>=0.98: cosine >= 0.98" in out and "ops beyond cosine>=0.98" in out
    assert FAULT_OP in out.split("ops beyond")[1]
    assert main(["compare", *args[:3], "--threshold", "0.05", "--metric", "rel_euclidean"]) == 0
    assert "rel_euclidean<=0.05" in capsys.readouterr().out
    assert main(["compare", *args[:3], "--threshold", "0.1", "--metric", "nonsense"]) == 1
    assert "unknown metric 'nonsense'" in capsys.readouterr().err


MINILM = SCENARIOS.parent  # msprobe md5 dumps of a bfloat16 MiniLM fine-tuning step and its float32 benchmark


def test_a_statistics_failure_is_followed_by_what_failed_it() -> None:
    """A real model's statistics dump (msprobe's md5 task: statistics and checksums, the checksums all differing):
    a layer norm's weight gradient fails on its minimum, 9% off where its inputs' statistics differ by under 1%.
    The error that follows failures through ops is what the rule judged (the extremes, not the norms alone), so
    the op introduced it; the verdict was "its inputs already carried most of it (input cosine n/a, RED n/a)"."""
    comp = nbprec.compare(MINILM / "minilm_bf16_md5_mix", MINILM / "minilm_fp32_md5_mix", progress=None)
    assert set(comp.table["compare_mode"]) <= {"statistics", "none"}
    first = comp.first_failing_op()
    assert first["op"] == "Functional.layer_norm.8.backward" and first["origin"] == "introduced"
    assert first["out_error"] > 4 * first["in_error"] > 0
    headline = comp.verdict().headline
    assert "its inputs' statistics differ by" in headline and "output min" in headline and "n/a" not in headline
    # the attention key biases' gradients are noise in both runs (mathematically zero): judged next to the weights'
    table = comp.table.set_index("target_name")
    biases = table[table.index.str.endswith("key.Linear.parameters_grad.0.bias")]
    assert len(biases) == 6 and (biases["status"] == "pass").all() and (biases["norm_rel_diff"] > 10).all()


def test_checksums_of_different_dtypes_are_not_taken_for_different_weights(tmp_path) -> None:
    """The same MiniLM dumps compared by checksum (``mode="checksum"``): a bfloat16 tensor's bytes never match its
    float32 benchmark's. Those pairs are not judged, with a reason and a finding that says to compare statistics;
    the verdict said "The runs are not comparable: their weights differ" (105 of 105 parameters)."""
    comp = nbprec.compare(
        MINILM / "minilm_bf16_md5_mix", MINILM / "minilm_fp32_md5_mix", mode="checksum", progress=None
    )
    table = comp.table
    across = (table["target_dtype"] != table["bench_dtype"]).to_numpy()
    assert across.sum() > 1000 and (comp.status[across] == "n/a").all()
    assert table["reason"][across].str.contains("checksums of bfloat16 and float32 cannot match").all()
    same = ~across & (table["compare_mode"] == "checksum").to_numpy()
    assert (comp.status[same] != "n/a").all() and (comp.status[same] == "pass").sum() > 40  # ids, masks: equal bytes
    verdict = comp.verdict()
    codes = [f.code for f in verdict.findings]
    assert "checksums_across_dtypes" in codes and "different_weights" not in codes
    assert verdict.kind != "not comparable"
    # msprobe's md5 layout keeps msprobe's own verdict on those rows (its CRC-32 test: "error")
    import pandas as pd

    frame = pd.read_csv(comp.to_csv(tmp_path / "msprobe.csv", layout="msprobe"))
    assert "NPU MD5" in frame and (frame.loc[frame["NPU Dtype"] != frame["Bench Dtype"], "Result"] == "error").all()


@pytest.mark.parametrize("mode", ["tensor", "statistics"])
def test_an_error_made_between_recorded_modules_is_told_as_such(tmp_path, mode: str) -> None:
    """Only module calls recorded (msprobe's L0, nbprec's level 'modules'): an offset added and taken away again in
    a module's own forward, between two recorded linear layers, loses bfloat16 precision (at 300 its spacing is
    2). The second linear layer fails first, from an input that differs while every recorded op before it passes:
    the error arose in what the dump does not record, inside the block, not in inputs nbprec could not compare
    (the verdict said so until 2026-12-07)."""
    torch = pytest.importorskip("torch")
    from nbprec.capture import capture

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)

        def forward(self, x):
            return self.b((self.a(x) + 300.0) - 300.0)  # (no module record of the sum and difference)

    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))
    folders = []
    for dtype in (torch.bfloat16, torch.float32):
        torch.manual_seed(0)
        model = Block().to(dtype)
        folders.append(tmp_path / str(dtype).rsplit(".", 1)[-1])
        with capture(model, folders[-1], level="modules", mode=mode):
            model(x.to(dtype))
    comp = nbprec.compare(folders[0], folders[1], progress=None)
    first = comp.first_failing_op()
    assert first is not None and first["op"].startswith("Module.b.") and first["origin"] == "inherited"
    verdict = comp.verdict()
    assert "no op recorded before it fails" in verdict.headline and "could not compare" not in verdict.headline
    assert "inside Module.Block.forward.0 before it" in verdict.headline
    assert "n/a" not in verdict.headline  # (statistics: how far the inputs' statistics differ, not a cosine)
    assert "level" in verdict.next_step


def test_inputs_that_overflow_their_dtype_are_said_to_overflow(tmp_path) -> None:
    """Inputs near 1e5 cast to float16 before the model runs: the target's first input holds inf where the
    benchmark's values pass 65504. The runs are not comparable, and the finding says why: until 2026-12-07 it said
    "their inputs differ" and told the user to feed both runs the same batch (a held-out pair, ``--input-scale
    30000 --target-dtype fp16``)."""
    torch = pytest.importorskip("torch")
    from nbprec.capture import capture

    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(0)) * 3e4
    folders = []
    for dtype in (torch.float16, torch.float32):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU()).to(dtype)
        folders.append(tmp_path / str(dtype).rsplit(".", 1)[-1])
        inputs = x.to(dtype)  # (cast before the capture, as a data loader would)
        with capture(model, folders[-1], level="apis"), torch.no_grad():
            model(inputs)
    verdict = nbprec.compare(folders[0], folders[1], progress=None).verdict()
    assert verdict.kind == "not comparable" and [f.code for f in verdict.findings] == ["input_overflow"]
    assert "the target's inputs overflow their dtype" in verdict.headline
    finding = verdict.findings[0]
    assert "beyond float16's largest finite value (65504)" in finding.message and "inf or NaN" in finding.message
    assert "same batch" not in verdict.text and "float16's range" in verdict.next_step
    # inputs that differ without overflowing are still told as different inputs
    comp = nbprec.compare(run("other_inputs_tensor"), run("fp32_tensor"), progress=None)
    assert [f.code for f in comp.verdict().findings][:1] == ["different_inputs"]


def test_the_op_where_a_passing_error_arose_is_named() -> None:
    """A planted fault the rule lets pass (an rsqrt's result times 1.08 in a bfloat16 run), taken over the bounds
    by the next op: that op did not introduce the error, and until 2026-12-07 the verdict said the error "built
    up over the ops before it ... no one op is to blame". The rsqrt took its inputs' error from 0.00075 to 0.077:
    the verdict names it and the next step looks at it. Real msprobe dumps (``bench/msprobe_dump.py --fault``)."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
    comp = nbprec.compare(fixtures / "planted_rsqrt_bf16_statistics_L1" / "step0",
                          fixtures / "planted_rsqrt_fp32_statistics_L1" / "step0", progress=None)  # fmt: skip
    first = comp.first_failing_op()
    assert first is not None and first["origin"] == "inherited" and first["in_status"] == "pass"
    verdict = comp.verdict()
    assert "The largest jump before it is at Torch.rsqrt.5.forward (rsqrt), which passes the rule" in verdict.headline
    assert "no one op is to blame" not in verdict.headline
    assert verdict.next_step.startswith("nbprec ni Torch.rsqrt.5.forward --target ")
    # the rsqrt passes the rule although its error grew more than 50 times over its inputs'
    ops = comp.ops.set_index("op")
    assert ops.loc["Torch.rsqrt.5.forward", "status"] == "pass"
    assert ops.loc["Torch.rsqrt.5.forward", "out_error"] > 50 * ops.loc["Torch.rsqrt.5.forward", "in_error"]


def test_an_error_that_builds_up_evenly_names_no_op(tmp_path) -> None:
    """Forty tanh layers in bfloat16: each op passes its inputs' error on, growing a little, until one takes it
    over the bounds. No op made a jump in it, and the verdict says so rather than naming one."""
    torch = pytest.importorskip("torch")
    from nbprec.capture import capture

    def build():
        torch.manual_seed(0)
        layers = [m for _ in range(40) for m in (torch.nn.Linear(64, 64, bias=False), torch.nn.Tanh())]
        model = torch.nn.Sequential(*layers)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0, 0.2)
        return model

    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
    folders = []
    for dtype in (torch.bfloat16, torch.float32):
        folders.append(tmp_path / str(dtype).rsplit(".", 1)[-1])
        model = build().to(dtype)
        with capture(model, folders[-1], level="apis", mode="tensor"), torch.no_grad():
            model(x.to(dtype))
    comp = nbprec.compare(folders[0], folders[1], progress=None)
    first = comp.first_failing_op()
    assert first is not None and first["origin"] == "inherited" and first["order"] > 40
    verdict = comp.verdict()
    assert "built up over the ops before it" in verdict.headline and "largest jump" not in verdict.headline
    assert "in_error and out_error" in verdict.next_step


def test_the_next_step_is_a_command_a_shell_can_run(tmp_path) -> None:
    """Every branch names the runs' real folders (the L0 branch said ``--target T --bench B`` until 2026-12-07),
    quoted when they hold spaces."""
    import shlex
    import shutil

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
    target, bench = tmp_path / "my runs" / "bf16", tmp_path / "my runs" / "fp32"
    shutil.copytree(fixtures / "planted_rsqrt_bf16_statistics_L1" / "step0", target)
    shutil.copytree(fixtures / "planted_rsqrt_fp32_statistics_L1" / "step0", bench)
    step = nbprec.compare(target, bench, progress=None).verdict().next_step
    words = shlex.split(step.split(" (", 1)[0])
    assert words == ["nbprec", "ni", "Torch.rsqrt.5.forward", "--target", str(target), "--bench", str(bench)]


class _Between:
    """Two linear layers and, between them, what the target does differently: ``how`` is ``"extra call"`` (the
    target multiplies by 1.1, a call the benchmark does not make), ``"numpy"`` (the target scales by 1.1 in NumPy:
    nothing recorded) or ``"from data"`` (both rebuild the tensor with ``torch.as_tensor`` from NumPy data the
    target scaled)."""

    def __init__(self, how: str) -> None:
        self.how = how

    def model(self, dtype, target: bool):
        torch = pytest.importorskip("torch")
        how, scale = self.how, 1.1 if target else 1.0

        class Outer(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.a, self.b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)

            def forward(self, x):
                h = self.a(x)
                if how == "extra call":
                    h = torch.tanh(h) * 1.1 if target else torch.tanh(h)
                elif how == "numpy":
                    h = torch.from_numpy(h.detach().numpy() * scale)
                else:
                    h = torch.as_tensor(h.detach().float().numpy() * scale, dtype=x.dtype)
                return self.b(h)

        torch.manual_seed(0)
        return Outer().to(dtype)

    def compare(self, tmp_path, level: str, low) -> nbprec.Comparison:
        torch = pytest.importorskip("torch")
        from nbprec.capture import capture

        x = torch.randn(16, 32, generator=torch.Generator().manual_seed(0))
        folders = []
        for dtype in (low, torch.float32):
            folders.append(tmp_path / str(dtype).rsplit(".", 1)[-1])
            model = self.model(dtype, target=dtype is low)
            with capture(model, folders[-1], level=level, mode="tensor"), torch.no_grad():
                model(x.to(dtype))
        return nbprec.compare(folders[0], folders[1], progress=None)


def test_calls_the_target_alone_makes_are_named_before_what_dumps_miss(tmp_path) -> None:
    """The target multiplies by 1.1 where the benchmark does not: that call has no counterpart, and the next
    layer fails from inputs that differ. The verdict said "the error arose in what the dumps do not record" until
    2026-12-07; it names the call of the target's only and the next step looks at it."""
    torch = pytest.importorskip("torch")
    comp = _Between("extra call").compare(tmp_path, "apis", torch.bfloat16)
    verdict = comp.verdict()
    assert "no counterpart in the benchmark (the last of them: Tensor.mul.0.forward)" in verdict.headline
    assert verdict.next_step.startswith("nbprec ni Tensor.mul.0.forward --target ") and "--mapping" in verdict.next_step


def test_code_outside_torch_between_recorded_calls(tmp_path) -> None:
    """A scale applied in NumPy between two recorded module calls, at a level that records API calls too: the
    error arose before the second module's call (not inside it), and dumping more levels would not show it.
    Until 2026-12-07: "inside Module.b.Linear.forward.0 before it" and "dump the ops inside modules"."""
    torch = pytest.importorskip("torch")
    comp = _Between("numpy").compare(tmp_path, "both", torch.float16)  # (NumPy has float16, not bfloat16)
    verdict = comp.verdict()
    assert verdict.headline.startswith("Functional.linear.1.forward (linear) is the first op that fails, but its")
    assert "before Module.b.Linear.forward.0 (" in verdict.headline and "inside Module.b" not in verdict.headline
    assert re.search(r"input cosine 1\.000000, RED 0\.(09\d*|1)\)", verdict.headline)  # (a scale: cosine hides it)
    assert "code between it and the recorded op before it" in verdict.next_step
    assert "dump the ops inside modules" not in verdict.next_step


def test_a_tensor_made_from_other_data_is_told_so(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    comp = _Between("from data").compare(tmp_path, "apis", torch.bfloat16)
    verdict = comp.verdict()
    assert verdict.headline.startswith("Torch.as_tensor.0.forward (as_tensor) is the first op that fails: it takes no")
    assert "differ by nan" not in verdict.headline and verdict.next_step.endswith("check the data it was made from")


def test_an_error_in_apis_a_list_left_out(tmp_path) -> None:
    """msprobe's ``list`` dumps some APIs only (here linear, softmax and matmul), as users do to keep dumps small; the
    planted fault is in an rsqrt the list leaves out. The first linear after it fails from inputs that differ, and
    the verdict says that the dump leaves ops out, a list among the reasons, and where to look (real msprobe dumps,
    ``bench/msprobe_dump.py --list``)."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
    comp = nbprec.compare(fixtures / "listed_bf16_statistics_L1", fixtures / "listed_fp32_statistics_L1",
                          progress=None)  # fmt: skip
    assert set(comp.ops["op_type"]) <= {"linear", "softmax", "matmul"}
    verdict = comp.verdict()
    assert verdict.headline.startswith("Functional.linear.2.forward (linear) is the first op that fails, but its")
    assert "what the dumps do not record" in verdict.headline and "outside its list or scope" in verdict.headline
    assert "APIs a list or scope left out" in verdict.next_step
