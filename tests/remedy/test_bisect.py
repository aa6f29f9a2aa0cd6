"""Bisecting to the smallest keep-in-float32 set on real models with planted faults, in float16 and bfloat16.

For each planted fault the set must contain the culprit, be 1-minimal (checked here again, by re-running the
set without each of its ops), and pass when verified with captures.
"""

from __future__ import annotations

import pytest

from nbprec.remedy import NotComparableError, RemedyError, Setup, bisect, verify
from nbprec.remedy.bisect import _judge

from .conftest import planted, planted_setup

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def _ops(setup: Setup, module: str, op_type: str | None = None, source: str | None = None) -> list[str]:
    """Op names of the target run called in ``module`` (of ``op_type``, or from a source line with ``source``)."""
    profile = setup.run("target", profile=True).profile
    rows = profile[profile["module"] == module]
    if op_type is not None:
        rows = rows[rows["op_type"] == op_type]
    if source is not None:
        rows = rows[rows["source"].str.contains(source, regex=False)]
    return rows["op"].tolist()


def _culprits(setup: Setup, faults: dict[int, str]) -> set[str]:
    found: set[str] = set()
    for block, fault in faults.items():
        if fault == "kernel":
            found |= set(_ops(setup, f"blocks.{block}", "silu"))
        elif fault == "overflow":
            found |= set(_ops(setup, f"blocks.{block}", "mul", "1e5"))
            found |= set(_ops(setup, f"blocks.{block}.norm_in", "layer_norm"))
        elif fault == "cancel":
            found |= set(_ops(setup, f"blocks.{block}", source="4096"))
    return found


def _assert_one_minimal(setup: Setup, keep: list[str], tmp_path) -> None:
    """Re-run the set without each of its ops: every such run must fail the check."""
    bench = setup.run("bench", capture=tmp_path / "bench")
    for i, op in enumerate(keep):
        fewer = [k for k in keep if k != op]
        run = setup.run("target", ops=fewer, capture=tmp_path / f"without{i}")
        assert not _judge(setup, run, bench).passed, f"the set passes without {op}: not 1-minimal"


CASES = [
    ({1: "kernel"}, "float16"),
    ({1: "kernel"}, "bfloat16"),
    ({1: "overflow"}, "float16"),
    ({1: "cancel"}, "bfloat16"),
    ({1: "cancel"}, "float16"),
    ({0: "kernel", 2: "overflow"}, "float16"),
    ({0: "kernel", 2: "cancel"}, "bfloat16"),
]


@pytest.mark.parametrize(("faults", "dtype"), CASES, ids=lambda v: v if isinstance(v, str) else "+".join(v.values()))
def test_bisect_finds_the_culprits_and_a_one_minimal_set(faults, dtype, tmp_path):
    setup = planted_setup(faults, dtype)
    result = bisect(setup, progress=False, workdir=str(tmp_path / "bisect"))
    culprits = _culprits(setup, faults)
    assert culprits and culprits <= set(result.keep), (result.keep, culprits)
    assert result.passed and result.minimal
    assert result.runs <= 40 and result.runs == len(result.history)
    assert result.cost.ops == len(result.keep) and 0 < result.cost.flops_share < 0.5
    _assert_one_minimal(setup, result.keep, tmp_path)
    verified = verify(setup, result, out=tmp_path / "verify")
    assert verified.passed and verified.after.failing_ops == 0 and verified.before.failing_ops > 0


def test_two_faults_far_apart_give_a_set_that_is_not_a_contiguous_range(tmp_path):
    setup = planted_setup({0: "kernel", 2: "overflow"}, "float16")
    result = bisect(setup, progress=False, workdir=str(tmp_path))
    order = setup.run("target").seen
    positions = sorted(order.index(op) for op in result.keep)
    assert positions[-1] - positions[0] + 1 > len(positions)  # ops in between were left in float16


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_bisect_under_autocast_keeps_the_faulty_kernel(dtype, tmp_path):
    setup = planted_setup({1: "kernel"}, dtype, autocast=True)
    result = bisect(setup, progress=False, workdir=str(tmp_path))
    assert result.keep == _ops(setup, "blocks.1", "silu")
    assert verify(setup, result, out=tmp_path / "v").passed


def test_bisect_by_modules(tmp_path):
    setup = planted_setup({1: "kernel"}, "bfloat16")
    result = bisect(setup, granularity="modules", progress=False, workdir=str(tmp_path))
    assert result.keep == ["blocks.1"] and result.remedy.modules == ("blocks.1",) and not result.remedy.ops
    assert result.cost.ops > 1 and result.passed and result.minimal


def test_a_clean_model_needs_nothing(tmp_path):
    result = bisect(planted_setup(None, "float16"), progress=False, workdir=str(tmp_path))
    assert result.keep == [] and result.stage == "none needed" and result.passed and result.runs == 4


def test_the_outputs_check_needs_no_capture(tmp_path):
    setup = planted_setup({1: "overflow"}, "float16", check="outputs")
    result = bisect(setup, progress=False, workdir=str(tmp_path))
    assert _culprits(setup, {1: "overflow"}) <= set(result.keep) and result.minimal
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench", "target"]  # only the reference captures


def test_progress_lines_and_bounded_runs(tmp_path):
    lines: list[str] = []
    setup = planted_setup({0: "kernel", 2: "overflow"}, "float16")
    result = bisect(setup, progress=lines.append, max_runs=8, workdir=str(tmp_path))
    assert result.runs <= 8 and not result.minimal and any("max_runs=8" in n for n in result.notes)
    assert result.passed  # the smallest passing set found so far
    assert lines[0].startswith("bisect: 4 reference runs") and any("/8 keep" in line for line in lines)
    with pytest.raises(RemedyError, match="max_runs must be at least 6"):
        bisect(setup, max_runs=3)


def test_given_candidates_are_searched_and_checked(tmp_path):
    setup = planted_setup({1: "kernel"}, "float16")
    silu = _ops(setup, "blocks.1", "silu")
    others = _ops(setup, "blocks.0", "linear")
    result = bisect(setup, candidates=others + silu, progress=False, workdir=str(tmp_path))
    assert result.keep == silu and result.stage == "given"
    with pytest.raises(RemedyError, match="candidates not found"):
        bisect(setup, candidates=["Functional.gelu.99.forward"], progress=False, workdir=str(tmp_path / "b"))


def test_runs_that_are_not_deterministic_are_refused(tmp_path):
    model, x, y = planted({1: "kernel"})
    model.blocks[1].drop = torch.nn.Dropout(0.5)  # training mode, and drawn after the seed: differs per run
    forward_calls = []

    def forward(m):
        forward_calls.append(1)
        torch.manual_seed(len(forward_calls))  # a different seed every run: not reproducible
        return torch.nn.functional.cross_entropy(m.blocks[1].drop(m(x)).float(), y)

    setup = Setup(model, forward, dtype="float16")
    with pytest.raises(NotComparableError, match="not deterministic"):
        bisect(setup, progress=False, workdir=str(tmp_path))


def test_different_weights_are_refused(tmp_path):
    clean, x, y = planted(None, seed=0)
    other, _, _ = planted({1: "kernel"}, seed=5)  # another initialisation: not the same checkpoint
    setup = Setup(clean, lambda m: torch.nn.functional.cross_entropy(m(x).float(), y), target_model=other)
    with pytest.raises(NotComparableError, match="differ"):
        bisect(setup, progress=False, workdir=str(tmp_path))


def test_a_loss_scale_overflow_is_not_fixed_by_ops_and_says_so(tmp_path):
    setup = planted_setup(None, "float16", loss_scale=2.0**24)
    with pytest.raises(RemedyError, match="lower the loss scale"):
        bisect(setup, progress=False, workdir=str(tmp_path))
    result = bisect(setup, loss_scale=2.0**10, progress=False, workdir=str(tmp_path / "scaled"))
    assert result.keep == [] and result.remedy.loss_scale == 2.0**10
