"""Matching, rules, the first failing op, save/load and exports, on dumps of a real numpy network."""

from __future__ import annotations

import csv
import itertools
import json

import ml_dtypes
import numpy as np
import pandas as pd
import pytest

from nbprec.compare import Comparison, Rule, compare, get_rule
from nbprec.compare.exports import MSPROBE_HEADERS
from nbprec.compare.matching import match_tensors, normalise_api, read_mapping
from nbprec.compare.rules import _presets, preset_names
from nbprec.errors import ComparisonError


def test_identical_runs_pass_everywhere(make_mlp_dump):
    comp = compare(make_mlp_dump(name="a"), make_mlp_dump(name="b"))
    assert comp.first_failing_op() is None
    assert bool(comp)
    assert (comp.table["status"] == "pass").all()
    assert (comp.table["match"] == "exact").all()
    np.testing.assert_allclose(comp.table["cosine"], 1.0)
    assert (comp.table["max_abs_err"] == 0).all()


@pytest.mark.parametrize("fault_at", [3, 6])
def test_planted_fault_is_the_first_failing_and_introduced_op(make_mlp_dump, fault_at):
    target = make_mlp_dump(name="t", dtype=np.float16, fault_at=fault_at)
    comp = compare(target, make_mlp_dump(name="b"))
    first = comp.first_failing_op()
    ops = comp.ops
    assert first is not None and first["order"] == fault_at
    assert first["origin"] == "introduced"
    assert comp.first_introduced_op()["op"] == first["op"]
    later = ops[ops["order"] > fault_at]
    assert set(later.loc[later["status"] == "fail", "origin"]) <= {"inherited"}
    assert comp.onset()["order"] == fault_at
    assert not bool(comp)


def test_plain_bfloat16_noise_is_not_flagged_by_the_default_rule(make_mlp_dump):
    comp = compare(make_mlp_dump(name="t", dtype=ml_dtypes.bfloat16), make_mlp_dump(name="b"))
    assert comp.first_failing_op() is None, comp.ops[["op", "out_cosine", "out_rel_euclidean"]]
    # ... while a dtype-blind rule with msprobe's thresholds flags the same noise
    assert len(comp.with_rule("msprobe").failing_ops()) > 0


def test_rules_are_values_and_re_judge_without_reading(make_mlp_dump):
    comp = compare(make_mlp_dump(name="t", dtype=np.float16, fault_at=5), make_mlp_dump(name="b"))
    strict = comp.with_threshold("cosine", 0.999999999)
    assert len(strict.failing_ops()) >= len(comp.failing_ops())
    loose = comp.with_rule(Rule.from_thresholds("loose", cosine=-1.0))
    assert loose.first_failing_op() is None
    counts = comp.threshold_counts("cosine", [0.0, 0.999, 0.9999999])
    assert counts["failing_ops"].is_monotonic_increasing
    presets = comp.rule_counts()
    assert set(presets["rule"]) == {"default", "precision_tool", "cann", "msprobe", "ptdbg"}
    with pytest.raises(ComparisonError, match="unknown rule"):
        get_rule("nope")


def test_each_presets_row_is_that_rules_judgement(make_mlp_dump):
    """rule_rows takes the comparison's own rule from the comparison itself (judged already), every other preset
    by re-judging: each row is what the comparison judged by that preset says, whichever rule it was judged by."""
    base = compare(make_mlp_dump(name="t", dtype=np.float16, fault_at=5), make_mlp_dump(name="b"))
    for own in ("default", "cann", "ptdbg"):
        comp = base.with_rule(own)
        rows = {row["rule"]: row for row in comp.rule_rows()}
        assert list(rows) == preset_names()
        for name, row in rows.items():
            judged = base.with_rule(name)
            assert row["failing_ops"] == len(judged.failing_ops())
            first = judged.first_failing_op()
            assert row["first_failing_op"] == ("" if first is None else first["op"])
            assert row["description"] == get_rule(name).describe()
    assert get_rule("cann") is get_rule("cann")  # (the presets are made once: rules are frozen values)
    with pytest.raises(TypeError):
        _presets()["default"] = get_rule("ptdbg")  # type: ignore[index]


def test_matching_by_api_and_call_index_across_naming_styles(make_mlp_dump):
    target = make_mlp_dump(name="t", prefix="Functional")
    bench = make_mlp_dump(name="b", prefix="Functional")
    # rename bench tensors ptdbg-style so exact names no longer agree
    renamed = {c: bench.index[c].str.replace(".", "_", regex=False) for c in ("name", "api")}
    bench.index = bench.index.assign(**renamed)
    result = match_tensors(target.index, bench.index)
    assert (result.pairs["match"] == "api_call").all()
    assert normalise_api("Functional_linear") == normalise_api("functional.linear")


def test_order_alignment_skips_an_extra_call(make_mlp_dump):
    target = make_mlp_dump(name="t", extra_call_at=2)
    bench = make_mlp_dump(name="b")
    comp = compare(target, bench)
    coverage = comp.coverage()
    # the extra clone has no counterpart and is reported, not dropped or mis-paired
    clone = comp.table[comp.table["op_type"] == "clone"]
    assert (clone["match"] == "unmatched").all() and len(clone) == 2
    assert (clone["reason"] == "no benchmark counterpart").all()
    assert coverage["unmatched"] == 2
    assert comp.first_failing_op() is None
    assert (comp.table.loc[comp.table["match"] != "unmatched", "cosine"] > 0.999999).all()


def test_order_alignment_when_call_indices_shift(make_mlp_dump):
    target = make_mlp_dump(name="t", extra_call_at=1)
    bench = make_mlp_dump(name="b")
    # make the api_call pass useless: count calls differently on the target
    target.index = target.index.assign(call=target.index["call"] + 100, name="T." + target.index["name"])
    comp = compare(target, bench)
    matched = comp.table[comp.table["match"] == "order"]
    assert len(matched) == len(bench.index)
    assert (matched["cosine"] > 0.999999).all()


def test_user_mapping_overrides(tmp_path, make_mlp_dump):
    target = make_mlp_dump(name="t")
    bench = make_mlp_dump(name="b")
    mapping = tmp_path / "map.csv"
    mapping.write_text("# swap two ops on purpose\ntarget,bench\nFunctional.tanh.0.forward,Functional.tanh.1.forward\n")
    comp = compare(target, bench, mapping=mapping)
    rows = comp.table[comp.table["op"] == "Functional.tanh.0.forward"]
    assert (rows["match"] == "mapping").all()
    assert (rows["bench_op"] == "Functional.tanh.1.forward").all()
    yaml = tmp_path / "map.yaml"
    yaml.write_text("'Functional.tanh.0.forward.output.0': Functional.tanh.0.forward.output.0\n")
    assert read_mapping(yaml).iloc[0].tolist() == ["Functional.tanh.0.forward.output.0"] * 2
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\nx,y\n")
    with pytest.raises(ComparisonError, match="header 'target,bench'"):
        read_mapping(bad)


def test_statistics_mode_when_payloads_are_absent(make_mlp_dump):
    target = make_mlp_dump(name="t", dtype=np.float16, fault_at=4)
    bench = make_mlp_dump(name="b")
    target.index = target.index.assign(has_data=False)
    comp = compare(target, bench)
    assert set(comp.table["compare_mode"]) == {"statistics"}
    assert comp.table["cosine"].isna().all()
    assert comp.table["max_rel_diff"].notna().all()


def _refuse_jobs(monkeypatch, mode: str) -> None:
    """Make the engine's per-pair function fail on a pair of ``mode``: such pairs must be measured at once."""
    import importlib

    engine = importlib.import_module("nbprec.compare.engine")
    measure = engine._measure

    def refusing(job, *args, **kwargs):
        assert job[1] != mode, f"a {mode} pair went to a worker"
        return measure(job, *args, **kwargs)

    monkeypatch.setattr(engine, "_measure", refusing)


def test_statistics_pairs_are_measured_at_once_as_pair_by_pair(monkeypatch):
    """msprobe statistics dumps: every pair compared by its recorded statistics is measured from the index columns
    at once (no worker sees one), and each row holds what ``statistics_metrics`` gives for its pair, reason
    included, to the bit."""
    from pathlib import Path

    from nbprec.compare.metrics import STAT_METRIC_COLUMNS, statistics_metrics

    _refuse_jobs(monkeypatch, "statistics")
    fixtures = Path(__file__).parents[1] / "fixtures" / "msprobe"
    table = compare(fixtures / "bf16_statistics_mix", fixtures / "fp32_statistics_mix", step=0).table
    rows = table[table["compare_mode"] == "statistics"]
    assert len(rows) > 100
    keys = ("max", "min", "mean", "norm")
    with_reason = 0
    for _, row in rows.iterrows():
        one = statistics_metrics({k: row[f"target_{k}"] for k in keys}, {k: row[f"bench_{k}"] for k in keys})
        for name in STAT_METRIC_COLUMNS:
            assert np.float64(row[name]).tobytes() == np.float64(one[name]).tobytes() or (
                np.isnan(row[name]) and np.isnan(one[name])
            ), (row["name"], name)
        assert one.reason in row["reason"]
        with_reason += bool(one.reason)
    assert with_reason > 0  # the fixture has pairs with a reason (a benchmark statistic of 0)


def test_checksum_pairs_are_compared_at_once_as_pair_by_pair(monkeypatch, tmp_path):
    """msprobe md5 dumps compared by checksum: every pair is compared from the index columns at once (no worker
    sees one), each row of one dtype holding ``checksum_equal`` of its two recorded checksums, a pair with a
    checksum missing saying it could not be compared, and a pair of two dtypes (bytes that cannot match) not
    compared, with that reason."""
    import json
    import shutil
    from pathlib import Path

    from nbprec.compare.metrics import checksum_equal

    _refuse_jobs(monkeypatch, "checksum")
    fixtures = Path(__file__).parents[1] / "fixtures" / "msprobe"
    target = tmp_path / "bf16_md5_L1"
    shutil.copytree(fixtures / "bf16_md5_L1", target)
    dump_json = target / "step0" / "rank0" / "dump.json"
    recorded = json.loads(dump_json.read_text())
    blanked = 0
    for op in recorded["data"].values():  # two tensors of the dtype both runs hold (bfloat16's cannot match)
        for entry in (op.get("input_args") or []) + (op.get("output") or []):
            same = isinstance(entry, dict) and entry.get("dtype") in ("torch.float32", "torch.int64")
            if same and entry.get("md5") and blanked < 2:
                entry["md5"] = "" if blanked == 0 else "N/A"
                blanked += 1
    dump_json.write_text(json.dumps(recorded))
    table = compare(target, fixtures / "fp32_md5_L1", mode="checksum").table
    rows = table[table["compare_mode"] == "checksum"]
    assert len(rows) > 100
    seen = set()
    for _, row in rows.iterrows():
        if row["target_dtype"] != row["bench_dtype"]:
            assert row["checksum_match"] is None and "cannot match: compare their statistics" in row["reason"]
            seen.add("dtypes")
            continue
        equal = checksum_equal(str(row["target_checksum"]), str(row["bench_checksum"]))
        assert row["checksum_match"] is equal, row["name"]
        assert ("checksums not comparable" in row["reason"]) == (equal is None), row["name"]
        seen.add(equal)
    assert seen == {True, False, None, "dtypes"}


def test_forced_tensor_mode_gives_reasons(make_mlp_dump):
    target = make_mlp_dump(name="t")
    target.index = target.index.assign(has_data=False)
    comp = compare(target, make_mlp_dump(name="b"), mode="tensor")
    assert comp.table["reason"].str.contains("no payload on the target side").all()
    assert (comp.table["status"] == "n/a").all()


def test_save_load_round_trip(tmp_path, make_mlp_dump):
    comp = compare(make_mlp_dump(name="t", dtype=np.float16, fault_at=3), make_mlp_dump(name="b"), rule="cann")
    folder = comp.save(tmp_path / "saved")
    again = Comparison.load(folder)
    assert again.rule == comp.rule
    pd.testing.assert_frame_equal(again.table, comp.table, check_dtype=False)
    assert again.first_failing_op()["op"] == comp.first_failing_op()["op"]
    (tmp_path / "junk").mkdir()
    with pytest.raises(ComparisonError, match="not a saved nbprec comparison"):
        Comparison.load(tmp_path / "junk")
    (folder / "unmatched_bench.csv").unlink()  # a folder copied in part
    with pytest.raises(ComparisonError, match=r"unmatched_bench\.csv: missing; .*save the comparison again"):
        Comparison.load(folder)


def test_saved_shapes_are_the_json_of_their_lists():
    """Shapes as ``save`` writes them: ``json.dumps`` of the list (ints through a cache keyed by the tuple,
    anything else, bools and floats included, which compare equal to ints, through ``json.dumps``)."""
    from nbprec.compare.saved import shape_json as _shape_json

    texts: dict = {}
    for shape in [(2, 8), (), (2, 8), (True, 8), (2.0, 8), [3, 4], (10**20,), (2, 8)]:
        assert _shape_json(shape, texts) == json.dumps(list(shape)), shape
    assert _shape_json(None, texts) == _shape_json(float("nan"), texts) == ""


def test_exports_in_three_layouts(tmp_path, make_mlp_dump):
    comp = compare(make_mlp_dump(name="t", dtype=np.float16, fault_at=3), make_mlp_dump(name="b"))
    ms = comp.to_csv(tmp_path / "msaccucmp.csv", layout="msaccucmp")
    with ms.open() as fh:
        rows = list(csv.reader(fh))
    assert rows[0][:5] == ["Index", "OpSequence", "OpType", "NPUDump", "DataType"]
    assert rows[0].count("DataType") == 2 and len(rows) == len(comp.table) + 1
    assert rows[1][7] == "Functional.linear.0.forward:input:0"
    probe = pd.read_csv(comp.to_csv(tmp_path / "msprobe.csv", layout="msprobe"))
    assert list(probe.columns) == MSPROBE_HEADERS["tensor"]  # msprobe 26.2's columns, in its order
    assert set(probe["Result"]) == {"error"}  # msprobe calls every float16-against-float32 row a dtype error
    own = pd.read_csv(comp.to_csv(tmp_path / "own.csv"))
    assert len(own) == len(comp.table)
    with pytest.raises(ComparisonError, match="unknown CSV layout"):
        comp.to_csv(tmp_path / "x.csv", layout="excel")


def test_html_summary_escapes_names(make_mlp_dump):
    target = make_mlp_dump(name="t", dtype=np.float16, fault_at=1)
    target.index = target.index.assign(
        op=target.index["op"].str.replace("tanh", "<img src=x onerror=alert(1)>", regex=False)
    )
    comp = compare(target, make_mlp_dump(name="b"))
    html = comp._repr_html_()
    assert "<img" not in html and "&lt;img" in html


def _lcs_length(a, b):
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


def test_sequence_alignment_is_a_longest_common_subsequence():
    from nbprec.compare.matching import align_sequences

    rng = np.random.default_rng(3)
    for _ in range(200):
        a = list(rng.choice(list("abc"), rng.integers(0, 25)))
        b = list(rng.choice(list("abc"), rng.integers(0, 25)))
        pairs = align_sequences(a, b)
        assert all(a[i] == b[j] for i, j in pairs)
        assert all(p[0] < q[0] and p[1] < q[1] for p, q in itertools.pairwise(pairs))
        assert len(pairs) == _lcs_length(a, b)
    # a repetitive stream with one extra call: everything after the extra call stays aligned
    ops = ["linear", "tanh"] * 50
    assert align_sequences(ops[:2] + ["clone"] + ops[2:], ops) == [(i if i < 2 else i + 1, i) for i in range(100)]


def _ops_frame(rows):
    from nbprec.compare.culprit import _explained

    frame = pd.DataFrame(rows, columns=["order", "op_type", "status", "origin"]).assign(step=0, rank=0)
    frame["op"] = [f"op{i}" for i in range(len(frame))]
    frame["explained"] = _explained(frame)
    return frame


def test_failures_downstream_of_discontinuous_or_random_ops_are_explained():
    from nbprec.compare.culprit import first_failing

    ops = _ops_frame(
        [
            (0, "linear", "pass", ""),
            (1, "relu", "fail", "discontinuous"),
            (2, "linear", "fail", "inherited"),
            (3, "gelu", "fail", "introduced"),
            (4, "linear", "fail", "inherited"),
        ]
    )
    assert ops["explained"].tolist() == [False, True, True, False, False]
    assert first_failing(ops)["op"] == "op3"
    assert first_failing(ops, include_explained=True)["op"] == "op1"
    only_noise = _ops_frame([(0, "dropout", "fail", "random"), (1, "linear", "fail", "inherited")])
    assert first_failing(only_noise) is None


def test_origin_labels_random_and_discontinuous_ops(make_mlp_dump):
    from nbprec.compare.culprit import is_discontinuous_op, is_random_op

    assert is_random_op("Dropout") and is_random_op("dropout") and not is_random_op("linear")
    assert is_discontinuous_op("relu") and is_discontinuous_op("max_pool2d") and not is_discontinuous_op("gelu")


def test_rollup_from_a_table_equals_the_comparisons_own(make_mlp_dump):
    from nbprec.compare.culprit import rollup_ops

    comp = compare(make_mlp_dump(name="t", dtype=np.float16, fault_at=3), make_mlp_dump(name="b"))
    pd.testing.assert_frame_equal(rollup_ops(comp.table, comp.status), comp.ops)


def test_a_key_shared_by_two_tensors_on_one_side_pairs_neither():
    """Each matching pass pairs only keys that are unique on both sides: an ambiguous key is left to the next
    pass (here none), never paired with the first of its candidates."""
    from nbprec.dump_index import make_index

    def rows(names_and_calls):
        return make_index(
            [
                {"name": n, "op": f"op{k}", "order": k, "api": "Functional.linear", "call": c, "direction": "forward"}
                for k, (n, c) in enumerate(names_and_calls)
            ]
        )

    target = rows([("t.a", 0), ("t.b", 1), ("t.c", 2)])
    bench = rows([("b.a", 0), ("b.b1", 1), ("b.b2", 1), ("b.c", 2)])  # call 1 twice: ambiguous
    pairs = match_tensors(target, bench, by_order=False).pairs
    assert pairs["b"].tolist() == [0, -1, 3]
    assert pairs["match"].tolist() == ["api_call", "unmatched", "api_call"]
    exact = match_tensors(target.assign(name=["x", "y", "z"]), bench.assign(name=["x", "y", "y2", "z"]))
    assert exact.pairs["match"].tolist()[0] == "exact" and exact.pairs["b"].tolist() == [0, 1, 3]


def test_a_step_or_rank_held_by_every_row_still_tells_the_sides_apart():
    """Matching leaves out of its keys a column of numbers holding one value on both sides (the step and rank of
    a one-run pair); a step or rank that varies still keys the match (one step on each side: aligned, as before)."""
    from nbprec.dump_index import make_index

    def rows(names, steps):
        return make_index(
            [
                {"name": n, "op": f"op{k}", "order": k, "api": "", "call": -1, "step": s}
                for k, (n, s) in enumerate(zip(names, steps, strict=True))
            ]
        )

    names = ["a", "b", "c"]
    same = match_tensors(rows(names, [0, 0, 0]), rows(names, [0, 0, 0]), by_order=False).pairs
    assert same["b"].tolist() == [0, 1, 2] and set(same["match"].tolist()) == {"exact"}
    aligned = match_tensors(rows(names, [0, 0, 0]), rows(names, [1, 1, 1]), by_order=False).pairs
    assert aligned["b"].tolist() == [0, 1, 2]  # one step a side: the benchmark's is taken as the target's
    other = match_tensors(rows(names, [0, 0, 1]), rows(names, [1, 1, 1]), by_order=False).pairs
    assert other["b"].tolist() == [-1, -1, 2]
    one_side = match_tensors(rows(names, [0, 0, 0]), rows(names, [0, 1, 1]), by_order=False).pairs
    assert one_side["b"].tolist() == [0, -1, -1]  # one step on the target's side only: still a key
    mixed = match_tensors(rows(["a", "a", "c"], [0, 1, 0]), rows(["a", "a", "c"], [1, 0, 0]), by_order=False).pairs
    assert mixed["b"].tolist() == [1, 0, 2]
    twice = match_tensors(rows(["a", "a", "c"], [0, 0, 0]), rows(names, [0, 0, 0]), by_order=False).pairs
    assert twice["b"].tolist() == [-1, -1, 2]  # a name twice on one side (one step): neither paired


def test_table_columns_per_step_rank_and_op(tmp_path):
    """The table's index-derived columns on two steps, with a benchmark tensor missing: the side columns, the
    non-finite counts (from counts, or from the extremes when counts are unknown), the running precision
    (restarting at each step) and each op's input scale."""
    from nbprec.dump import Dump
    from nbprec.dump_index import make_index

    def rec(step, op, order, role, dtype, low, high, **counts):
        name = f"s{step}.{op}.{role}"
        return dict(name=name, step=step, rank=0, order=order, op=op, role=role, dtype=dtype, shape=[2],
                    min=low, max=high, **counts)  # fmt: skip

    target = [
        rec(0, "A", 0, "input", "float32", -3.0, 2.0),
        rec(0, "A", 0, "output", "bfloat16", 0.0, 1.0),
        rec(0, "B", 1, "input", "float32", -1.0, 5.0),
        rec(0, "B", 1, "output", "float32", 0.0, np.inf),
        rec(1, "A", 0, "input", "float32", -1.0, 1.0),
        rec(1, "A", 0, "output", "float32", 0.0, 1.0, nan_count=2, inf_count=1),
    ]
    bench = [dict(r, dtype="float32", max=min(r["max"], 9.0), nan_count=0, inf_count=0) for r in target]
    del bench[3]  # s0.B.output has no counterpart
    comp = compare(
        Dump(make_index(target, run="t"), path=tmp_path, format="x"),
        Dump(make_index(bench, run="b"), path=tmp_path, format="x"),
    )
    table = comp.table.set_index("target_name")
    assert table.loc["s0.B.output", "bench_name"] == "" and table.loc["s0.B.output", "bench_shape"] is None
    assert np.isnan(table.loc["s0.B.output", "bench_max"]) and np.isnan(table.loc["s0.B.output", "bench_nonfinite"])
    assert table.loc["s0.A.input", "bench_shape"] == (2,) and table.loc["s0.A.input", "bench_min"] == -3.0
    assert list(table["target_nonfinite"]) == [0.0, 0.0, 0.0, 1.0, 0.0, 3.0]
    assert list(table["precision"]) == ["float32", "bfloat16", "bfloat16", "bfloat16", "float32", "float32"]
    assert list(table["op_input_scale"]) == [3.0, 3.0, 5.0, 5.0, 1.0, 1.0]
    assert table.loc["s0.B.output", "status"] == "fail"  # inf where the benchmark has none (it has nothing)


@pytest.mark.parametrize(
    ("target", "bench", "options"),
    [
        ("bf16_tensor_mix", "fp32_tensor_mix", {}),
        ("bf16_statistics_mix", "fp32_statistics_mix", {"step": 0}),
        ("bf16_md5_L1", "fp32_md5_L1", {"mode": "checksum"}),
    ],
)
def test_results_go_into_the_table_the_same_in_batches_of_any_size(monkeypatch, target, bench, options):
    """Measured values are put into the columns a batch of results at a time: batches of 3 (results of
    different modes and key sets mixed, checksums included) give the table one large batch gives."""
    import importlib
    from pathlib import Path

    engine = importlib.import_module("nbprec.compare.engine")
    fixtures = Path(__file__).parents[1] / "fixtures" / "msprobe"
    whole = compare(fixtures / target, fixtures / bench, workers=1, **options)
    monkeypatch.setattr(engine, "_RESULT_BATCH", 3)
    batched = compare(fixtures / target, fixtures / bench, workers=1, **options)
    pd.testing.assert_frame_equal(batched.table, whole.table)
