"""Every step and rank, visibly (issue 19): real 2-rank x 2-step torch.distributed runs, dumped by msprobe and
captured by nbprec (tests/fixtures/multirank; its make_multirank.py says how they were made).

In the ``fault`` and ``overflow`` targets only rank 1 runs a faulty ReLU, at step 1; rank 0 receives the damage
through the gradient all-reduce, later in the step. A rank or step that one side lacks is made here by
deleting its folders from a copy (msprobe) or selecting the other rank (nbprec).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import nbprec
from nbprec.cli import main
from nbprec.compare.culprit import first_failing
from nbprec.compare.presence import presence
from nbprec.compare.runs import COLLECTIVE_NOTE, COLLECTIVE_SELF_NOTE, collective_changed_data, first_failing_across
from nbprec.report import sections

MULTI = Path(__file__).resolve().parents[1] / "fixtures" / "multirank"
MSPROBE, NATIVE = MULTI / "msprobe", MULTI / "nbprec"
DP = MULTI / "msprobe_dp"  # (made by bench/msprobe_dump.py --ranks 2: its README)
RELU = {"msprobe": "Torch.relu.0.forward", "nbprec": "Functional.relu.0.forward"}
#: rank 0's first failing op at step 1: msprobe sees the all-reduce, nbprec the division after it
RANK0_FIRST = {"msprobe": "Distributed.all_reduce.0.forward", "nbprec": "Tensor.div_.0.forward"}


def compare(target: Path | nbprec.Dump, bench: Path | nbprec.Dump) -> nbprec.Comparison:
    return nbprec.compare(target, bench, progress=None)


def without(tmp_path: Path, run: str, pattern: str) -> Path:
    """A copy of the msprobe run ``run`` without the folders ``pattern`` (e.g. ``step*/rank1``)."""
    copy = tmp_path / f"{run}-{pattern.replace('*', '').replace('/', '-')}"
    shutil.copytree(MSPROBE / run, copy)
    for folder in copy.glob(pattern):
        shutil.rmtree(folder)
    return copy


@pytest.fixture(scope="module", params=["msprobe", "nbprec"])
def fault(request: pytest.FixtureRequest) -> tuple[str, nbprec.Comparison]:
    root = MSPROBE if request.param == "msprobe" else NATIVE
    return request.param, compare(root / "fault", root / "fp32")


def test_the_fixtures_hold_two_ranks_and_two_steps() -> None:
    for root in (MSPROBE, NATIVE):
        for run in ("fp32", "fault"):
            dump = nbprec.open(root / run)
            assert dump.steps == [0, 1] and dump.ranks == [0, 1], dump
            assert len(dump.problems) == 0
            assert dump.index.groupby(["step", "rank"]).size().nunique() == 1  # the same op records everywhere


def test_the_rank_that_diverges_first_is_named_not_the_lowest_rank(fault) -> None:
    tool, comp = fault
    first, introduced, onset = comp.first_failing_op(), comp.first_introduced_op(), comp.onset()
    assert (first["op"], first["step"], first["rank"]) == (RELU[tool], 1, 1)
    assert (introduced["op"], introduced["step"], introduced["rank"]) == (RELU[tool], 1, 1)
    assert (onset["step"], onset["rank"]) == (1, 1)
    # sorting streams by (step, rank) first, as one stream, would blame rank 0's gradient exchange
    naive = first_failing(comp.ops)
    assert (naive["op"], naive["rank"]) == (RANK0_FIRST[tool], 0)
    runs = comp.runs()
    assert runs.first_divergence == (1, 1) and runs.first_overflow is None and runs.missing == []
    table = runs.table.set_index(["step", "rank"])
    assert list(table.index) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert (table["presence"] == "both").all()
    assert table.loc[(0, 0), "status"] == table.loc[(0, 1), "status"] == "pass"
    assert table.loc[(0, 0), "failing_ops"] == table.loc[(0, 1), "failing_ops"] == 0
    assert table.loc[(1, 1), "first_failing_op"] == table.loc[(1, 1), "first_introduced_op"] == RELU[tool]
    assert table.loc[(1, 0), "first_failing_op"] == RANK0_FIRST[tool]
    assert table.loc[(1, 1), "first"] == "divergence" and table.loc[(1, 0), "first"] == ""
    assert table["failing_ops"].sum() == len(comp.failing_ops())
    assert table.loc[(1, 1), "first_failing_order"] < table.loc[(1, 0), "first_failing_order"]
    assert (table["tensors"] == table["bench_tensors"]).all() and table["tensors"].sum() == len(comp.table)


def test_the_verdict_names_the_step_and_rank(fault) -> None:
    tool, comp = fault
    verdict = comp.verdict()
    assert verdict.kind == "failure" and not verdict.findings
    assert verdict.headline.startswith(f"{RELU[tool]} (relu, step 1, rank 1) is the first op that fails")
    assert "It introduced the error" in verdict.headline
    s = comp.summary()
    assert s["first_failing_at"] == s["first_introduced_at"] == s["first_divergence_at"] == [1, 1]
    assert s["steps_ranks"] == 4 and s["one_sided"] == []
    assert comp.rule_counts().set_index("rule").loc["default", ["first_failing_op", "step", "rank"]].tolist() == [
        RELU[tool],
        1,
        1,
    ]


def test_ops_the_verdict_names_besides_the_first_carry_their_step_and_rank() -> None:
    """A data-parallel training step of two ranks (``msprobe_dp/planted_rsqrt``) whose rank 1 runs a planted fault
    the rule passes (its fourth rsqrt's result times 1.05): the verdict names the op where the error jumped and the
    op that introduces one later, each as ``OP (TYPE, step S, rank R)``, as it names the first failing op (it wrote
    ``Torch.rsqrt.3.forward (step 0, rank 1) (rsqrt)`` before 2026-12-07)."""
    comp = compare(DP / "planted_rsqrt", DP / "fp32")
    assert comp.runs().row(0, 0)["failing_ops"] == 0 and comp.runs().row(0, 1)["failing_ops"] > 0
    headline = comp.verdict().headline
    assert headline.startswith("Tensor.__mul__.11.forward (__mul__, step 0, rank 1) is the first op that fails, but")
    assert "The largest jump before it is at Torch.rsqrt.3.forward (rsqrt, step 0, rank 1), which passes" in headline
    # (the planted call's gradient; not Torch.rsqrt.4.backward before it, whose forward call's inputs already
    # differ: its gradient is made from them)
    assert "comes later: Torch.rsqrt.3.backward (rsqrt, step 0, rank 1): its inputs" in headline
    assert ") (" not in headline


def test_a_collective_whose_inputs_agree_on_every_rank_changed_the_data_itself() -> None:
    """A faulty all-reduce (``tests/fixtures/multirank/msprobe_dp/collective``: the target's sixth all-reduce
    leaves its sum times 1.2 on both ranks). Its inputs agree on both ranks, so no rank's contribution is to blame,
    and until 2026-12-07 the verdict and the summary said "the error comes from another rank" on each rank. They now
    say that the collective changed the data itself, and what to check."""
    comp = compare(DP / "collective", DP / "fp32")
    first = comp.first_failing_op()
    assert (first["op"], first["step"], first["rank"], first["origin"]) == ("Distributed.all_reduce.5.forward", 0, 0,
                                                                            "introduced")  # fmt: skip
    verdict = comp.verdict()
    assert "its inputs agree on every rank that ran it: the collective itself changed the data" in verdict.headline
    assert "another rank" not in verdict.headline
    assert verdict.next_step.endswith(
        "then check the collective: its reduction op and dtype, and the communication "
        "library's settings, HCCL's on an NPU, against the sum of the ranks' inputs"
    )
    assert comp.runs().row(0, 0)["note"] == comp.runs().row(0, 1)["note"] == COLLECTIVE_SELF_NOTE


def test_a_collective_is_told_apart_by_the_error_its_inputs_could_make() -> None:
    """What the collective's output may inherit: the ranks' input errors, magnified by a sum whose contributions
    cancel (the ranks' input norms added up over the output's). With the benchmark's input norms made 100 times
    larger (a sum that cancels that much), the same errors no longer say the collective changed the data; on the
    fault of rank 1 (``msprobe/fault``), rank 0's all-reduce has agreeing inputs but rank 1's do not."""
    comp = compare(DP / "collective", DP / "fp32")
    ops, table = comp._ops_columns, comp._cols
    position = int(np.flatnonzero((ops["op"] == "Distributed.all_reduce.5.forward") & (ops["rank"] == 0))[0])
    assert collective_changed_data(table, ops, position)
    inputs = (table["op"] == "Distributed.all_reduce.5.forward") & (table["role"] == "input")
    norms = table["bench_norm"].astype(np.float64)
    assert inputs.sum() == 2 and np.isfinite(norms[inputs]).all()
    cancelling = table.assign(bench_norm=np.where(inputs, 100.0 * norms, norms))
    assert not collective_changed_data(cancelling, ops, position)
    fault = compare(MSPROBE / "fault", MSPROBE / "fp32")
    ops = fault._ops_columns
    position = int(np.flatnonzero((ops["op"] == RANK0_FIRST["msprobe"]) & (ops["rank"] == 0) & (ops["step"] == 1))[0])
    assert not collective_changed_data(fault._cols, ops, position)


def test_a_collective_is_not_where_the_error_arose() -> None:
    """msprobe records the all-reduce: on rank 0 its inputs agree and its output does not. It is said to mix
    every rank's data, per (step, rank) and in the verdict when it is all that was compared."""
    comp = compare(MSPROBE / "fault", MSPROBE / "fp32")
    row = comp.runs().row(1, 0)
    assert row["first_failing_op"] == RANK0_FIRST["msprobe"] and row["note"] == COLLECTIVE_NOTE
    assert comp.runs().row(1, 1)["note"] == ""


def test_first_nan_inf_per_step_and_rank() -> None:
    comp = compare(MSPROBE / "overflow", MSPROBE / "fp32")
    runs = comp.runs()
    assert runs.first_overflow == (1, 1) and runs.first_divergence == (1, 1)
    assert runs.row(1, 1)["first_nonfinite_op"] == RELU["msprobe"]
    assert runs.row(1, 1)["first"] == "divergence, overflow"
    assert runs.row(1, 0)["first_nonfinite_op"] == RANK0_FIRST["msprobe"]  # NaN arrives by the all-reduce
    assert runs.row(0, 0)["first_nonfinite_op"] == runs.row(0, 1)["first_nonfinite_op"] == ""
    assert "first NaN/inf at step 1, rank 1: Torch.relu.0.forward" in runs.lines()
    assert comp.summary()["first_overflow_at"] == [1, 1]
    assert comp.verdict().headline.startswith("Torch.relu.0.forward (relu, step 1, rank 1)")


def test_a_rank_missing_on_one_side_is_said_first(tmp_path: Path) -> None:
    """The benchmark lacks rank 1: said once, at the top; rank 1 is neither compared nor counted as calls
    without a counterpart; what is left (rank 0) is judged, the all-reduce named as a collective."""
    comp = compare(MSPROBE / "fault", without(tmp_path, "fp32", "step*/rank1"))
    verdict = comp.verdict()
    assert [f.code for f in verdict.findings] == ["missing_rank"]
    assert verdict.text.startswith("! Rank 1 is in the target only (378 tensors): the benchmark has no rank 1")
    assert "unaligned" not in [f.code for f in verdict.findings]
    assert "Only the 2 of 4 (step, rank)s both runs hold were compared" in verdict.headline
    first = comp.first_failing_op()
    assert (first["op"], first["step"], first["rank"]) == (RANK0_FIRST["msprobe"], 1, 0)
    assert "It is a collective" in verdict.headline and "another rank" in verdict.headline
    table = comp.runs().table.set_index(["step", "rank"])
    assert table.loc[(0, 1), "presence"] == table.loc[(1, 1), "presence"] == "target only"
    assert table.loc[(0, 1), "status"] == "target only" and table.loc[(1, 1), "first_failing_op"] == ""
    assert comp.runs().first_divergence == (1, 0)
    assert comp.summary()["one_sided"] == [{"code": "missing_rank", "side": "target only", "values": [1], "steps": []}]


def test_a_missing_rank_and_a_rank_that_diverges_first(tmp_path: Path) -> None:
    """The target lacks rank 0; rank 1, which diverges first, is still found and named."""
    comp = compare(without(tmp_path, "fault", "step*/rank0"), MSPROBE / "fp32")
    verdict = comp.verdict()
    assert [f.code for f in verdict.findings] == ["missing_rank"]
    assert verdict.findings[0].message.startswith("Rank 0 is in the benchmark only (378 tensors)")
    assert verdict.headline.startswith("Torch.relu.0.forward (relu, step 1, rank 1) is the first op that fails")
    runs = comp.runs()
    assert runs.first_divergence == (1, 1)
    assert runs.table["presence"].tolist() == ["benchmark only", "both", "benchmark only", "both"]
    assert runs.table["tensors"].tolist() == [0, 189, 0, 189]


def test_a_rank_missing_at_one_step_and_a_missing_step(tmp_path: Path) -> None:
    comp = compare(without(tmp_path, "fault", "step1/rank0"), MSPROBE / "fp32")
    (finding,) = comp.verdict().findings
    assert finding.code == "missing_rank" and finding.message.startswith("Rank 0 at step 1 is in the benchmark only")
    assert comp.first_failing_op()["rank"] == 1
    comp = compare(MSPROBE / "fault", without(tmp_path, "fp32", "step1"))
    (finding,) = comp.verdict().findings
    assert finding.code == "missing_step" and finding.message.startswith("Step 1 is in the target only (378 tensors)")
    assert comp.verdict().kind == "noise" and "2 of 4 (step, rank)s" in comp.verdict().headline
    assert comp.runs().table["status"].tolist() == ["pass", "pass", "target only", "target only"]


def test_native_dumps_missing_a_rank() -> None:
    target, bench = nbprec.open(NATIVE / "fault"), nbprec.open(NATIVE / "fp32")
    comp = compare(target, bench.select(rank=1))
    assert [f.code for f in comp.verdict().findings] == ["missing_rank"]
    assert comp.verdict().findings[0].message.startswith("Rank 0 is in the target only")
    assert comp.first_failing_op()["op"] == RELU["nbprec"] and comp.runs().first_divergence == (1, 1)


def test_single_stream_comparisons_are_unchanged() -> None:
    """One (step, rank) on each side under different labels is paired (as matching does): no finding, the
    ops named without step and rank, and the cross-rank first failing op equal to the per-stream one."""
    fp32 = nbprec.open(MSPROBE / "fp32")
    comp = compare(nbprec.open(MSPROBE / "fault").select(step=1, rank=1), fp32.select(step=1, rank=0))
    assert not comp.several_runs and len(presence(comp)) == 1
    assert "missing_rank" not in [f.code for f in comp.verdict().findings]
    assert first_failing_across(comp.ops)["op"] == first_failing(comp.ops)["op"]
    assert "step 1" not in comp.verdict().headline.split(" is the first op")[0]
    comp = compare(nbprec.open(MSPROBE / "fault").select(step=1, rank=1), fp32.select(step=1, rank=1))
    assert comp.first_failing_op()["op"] == RELU["msprobe"] and comp.verdict().headline.startswith(
        f"{RELU['msprobe']} (relu) is the first op"
    )


def test_saved_comparisons_keep_steps_and_ranks(tmp_path: Path) -> None:
    comp = compare(MSPROBE / "overflow", MSPROBE / "fp32")
    loaded = nbprec.Comparison.load(comp.save(tmp_path / "saved"))
    pd.testing.assert_frame_equal(loaded.runs().table, comp.runs().table)
    assert loaded.verdict().text == comp.verdict().text


def test_rejudging_changes_the_per_run_counts() -> None:
    comp = compare(MSPROBE / "fault", MSPROBE / "fp32")
    loose = comp.with_threshold("rel_euclidean", 10.0)
    assert loose.runs().table["failing_ops"].sum() == len(loose.failing_ops())
    assert loose.runs().table["failing_ops"].sum() < comp.runs().table["failing_ops"].sum()


def test_the_cli_prints_step_and_rank_wherever_it_names_an_op(tmp_path: Path, capsys) -> None:
    bench = without(tmp_path, "fp32", "step1/rank0")
    out_dir = tmp_path / "out"
    assert main(["compare", str(MSPROBE / "fault"), str(bench), "--no-progress", "-o", str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("! Rank 0 at step 1 is in the target only")
    assert "first failing op     Torch.relu.0.forward (step 1, rank 1)" in out
    assert "first introduced op  Torch.relu.0.forward (step 1, rank 1)" in out
    assert "divergence onset     Torch.relu.0.forward (step 1, rank 1)" in out
    assert "first: Torch.relu.0.forward (step 1, rank 1)" in out
    assert "steps and ranks:" in out and "first divergence at step 1, rank 1: Torch.relu.0.forward" in out
    lines = out.splitlines()
    header = lines.index("steps and ranks:") + 3
    assert lines[header].split()[:3] == ["step", "rank", "presence"]
    assert lines[header + 3].split()[:4] == ["1", "0", "target", "only"]
    runs = pd.read_csv(out_dir / "runs.csv")
    assert runs[["step", "rank"]].values.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert runs["presence"].tolist() == ["both", "both", "target only", "both"]
    # the threshold listing and the worst-ops table carry step and rank columns
    assert main(["compare", str(MSPROBE / "fault"), str(MSPROBE / "fp32"), "--no-progress", "--threshold", "0.99"]) == 0
    out = capsys.readouterr().out
    listing = out.split("ops beyond")[1].splitlines()[1].split()
    assert listing[:3] == ["step", "rank", "order"]


def test_the_report_has_a_steps_and_ranks_section(tmp_path: Path) -> None:
    comp = compare(MSPROBE / "overflow", without(tmp_path, "fp32", "step*/rank0"))
    section = sections.runs(comp)
    html = section._repr_html_()
    assert "Steps and ranks" in html and "target only" in html and "Rank 0 is in the target only" in html
    summary = sections.summary(comp)
    assert "nbprec-runs" in summary._repr_html_() and "first NaN/inf at step 1, rank 1" in summary.text
    assert "Torch.relu.0.forward (step 1, rank 1)" in summary._repr_html_()
    first = sections.first_failing(comp)
    assert "at step 1, rank 1" in first._repr_html_() and first.text.endswith("(step 1, rank 1)")
    single = compare(
        nbprec.open(MSPROBE / "fault").select(step=1, rank=1), nbprec.open(MSPROBE / "fp32").select(step=1, rank=1)
    )
    assert "One step and rank" in sections.runs(single)._repr_html_()
    assert "nbprec-runs" not in sections.summary(single)._repr_html_()


def test_summaries_are_finite_where_they_should_be() -> None:
    comp = compare(MSPROBE / "fault", MSPROBE / "fp32")
    table = comp.runs().table
    assert np.isnan(table["out_cosine"]).all()  # statistics mode: no cosine
    assert (table.loc[table["status"] == "pass", "out_error"] == 0).all()
    assert (table.loc[table["status"] == "fail", "out_error"] > 0).all()


def test_ni_looks_at_one_step_and_rank(capsys) -> None:
    from nbprec.cli import main

    args = ["ni", "Torch.relu.0.forward", "--target", str(MSPROBE / "fault"), "--bench", str(MSPROBE / "fp32")]
    assert main([*args, "--step", "1", "--rank", "1", "--depth", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Torch.relu.0.forward at step 1, rank 1") and "fail (introduced)" in out
    assert main([*args, "--step", "0", "--rank", "0"]) == 0  # the rank that did not diverge
    out = capsys.readouterr().out
    assert out.startswith("Torch.relu.0.forward at step 0, rank 0") and "fail (introduced)" not in out
    assert main([*args, "--rank", "7"]) == 1
    assert "no tensor at rank 7" in capsys.readouterr().err


@pytest.mark.parametrize(
    "steps",
    [[0, 0, 1, 3, 1, 0], [5, -2, 5, 7, -2, 5], [2**62, -(2**62), 2**62, 0, 0, 2**62]],  # the last: rows as keys
    ids=["small", "negative", "far apart"],
)
def test_rows_are_counted_by_step_and_rank(steps) -> None:
    from nbprec.compare.presence import _counts

    ranks = [1, 0, 1, 0, 1, 0]
    expected: dict[tuple[int, int], int] = {}
    for key in zip(steps, ranks, strict=True):
        expected[key] = expected.get(key, 0) + 1
    counts = _counts(np.array(steps, dtype=np.int64), np.array(ranks, dtype=np.int64))
    assert counts == expected and list(counts) == sorted(expected)  # sorted by step, then rank
    assert all(type(k[0]) is int and type(k[1]) is int and type(v) is int for k, v in counts.items())
