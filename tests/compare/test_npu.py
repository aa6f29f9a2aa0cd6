"""Fusion-aware comparison of an NPU dump (CANN files + GE graph) with a TensorFlow benchmark dump."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import nbprec
from nbprec.cli import main
from nbprec.compare.fusion import FusionMatcher, benchmark_key
from nbprec.demo.npu import NpuDemo, make_npu_demo
from nbprec.formats.cann_write import CannTensor, dump_folder, write_dump_file
from nbprec.graph.ge_write import tensor_desc, write_ge_graph


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> NpuDemo:
    return make_npu_demo(tmp_path_factory.mktemp("npu-demo"))


@pytest.fixture(scope="module")
def comparison(case: NpuDemo) -> nbprec.Comparison:
    return nbprec.compare(case.npu, case.tf, graph=case.graph)


def test_planted_faulty_op_is_the_first_failing_and_introduced_op(case: NpuDemo, comparison) -> None:
    assert comparison.first_failing_op()["op"] == case.faulty_op
    assert comparison.first_introduced_op()["op"] == case.faulty_op
    ops = comparison.ops.set_index("op")
    before = ops[ops["order"] < ops.loc[case.faulty_op, "order"]]
    assert (before["status"] != "fail").all()  # float16 rounding alone fails nothing before it
    assert ops.loc["fc2/MatMul", "origin"] == "inherited"


def test_fused_ops_map_to_their_original_ops(comparison) -> None:
    t = comparison.table.set_index("target_name")
    conv = t.loc["conv1/Conv2D:output:0"]
    assert conv["match"] == "fusion" and conv["bench_name"] == "conv1_Relu.0"
    assert conv["ground_truth"] == "conv1/Conv2D,conv1/BiasAdd,conv1/Relu" and conv["relation"] == "many-to-one"
    assert conv["fusion_pass"] == "ConvBiasaddReluFusionPass"
    # inputs reach their producers through the inserted Cast and TransData ops
    assert t.loc["conv1/Conv2D:input:0", "bench_name"] == "input.0"
    assert t.loc["conv1/Conv2D:input:1", "bench_name"] == "conv1_weights.0"  # FRACTAL_Z weights vs HWCN
    assert t.loc["fc1/MatMul:input:0", "bench_name"] == "flatten_Reshape.0"
    # inserted ops stand for no framework op, but their values are still checked against their input's
    assert t.loc["trans_TransData_1:output:0", "ground_truth"] == "*"
    assert t.loc["trans_TransData_1:output:0", "bench_name"] == "input.0"
    assert t.loc["trans_TransData_1:output:0", "cosine"] > 0.9999
    assert (comparison.table["match"] == "fusion").all()
    fused_away = comparison.meta["fusion"]["fused_away"]
    assert fused_away["conv1_BiasAdd.0"] == "conv1/Conv2D" and len(fused_away) == 6
    assert set(comparison.unmatched_bench["name"]) == set(fused_away)


def test_converted_npu_tensors_equal_the_float16_benchmark_values(case: NpuDemo) -> None:
    npu, tf = nbprec.open(case.npu), nbprec.open(case.tf)
    weights = npu.tensor("conv2/Conv2D:input:1")  # FRACTAL_Z back to HWCN
    assert weights.shape == (3, 3, 16, 32)
    np.testing.assert_array_equal(weights, tf.tensor("conv2_weights.0").astype(np.float16))
    hidden = npu.tensor("fc1/MatMul:input:1")  # FRACTAL_NZ back to ND
    np.testing.assert_array_equal(hidden, tf.tensor("fc1_weights.0").astype(np.float16))


def test_without_graph_outputs_match_through_the_dump_records(case: NpuDemo) -> None:
    comp = nbprec.compare(case.npu, case.tf)
    assert comp.first_failing_op()["op"] == case.faulty_op
    t = comp.table
    outputs = t[t["role"] == "output"]
    assert (outputs.loc[outputs["op"] == "fc1/Gelu", "bench_name"] == "fc1_Gelu.0").all()
    assert (t.loc[t["role"] == "input", "match"] == "unmatched").all()
    assert any("original_op records" in n for n in comp.meta["fusion"]["notes"])
    # the TensorFlow dump labels no step or rank (-1): its unmatched tensors lack none (until 2026-12-07: "Rank -1
    # is in the benchmark only", "Step -1 ... (0 tensors)"); the unmatched inputs call for the GE graph
    findings = {f.code: f for f in comp.verdict().findings}
    assert "missing_rank" not in findings and "missing_step" not in findings
    assert "--graph" in findings["unaligned"].fix and "--mapping" not in findings["unaligned"].fix
    assert "(step, rank)s both runs hold" not in comp.verdict().headline


def test_graph_found_in_the_dump_folder_is_used(case: NpuDemo, tmp_path: Path) -> None:
    npu = tmp_path / "npu"
    shutil.copytree(case.npu, npu)
    shutil.copy(case.graph, npu / case.graph.name)
    comp = nbprec.compare(npu, case.tf)
    assert comp.meta["fusion"]["graph"] == str(npu / case.graph.name)
    assert comp.table.set_index("target_name").loc["conv1/Conv2D:input:0", "bench_name"] == "input.0"


def test_split_framework_op_is_one_to_many(tmp_path: Path) -> None:
    """A TensorFlow op split over two NPU ops: only the op whose output records the origin is matched."""
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
    tf = tmp_path / "tf"
    tf.mkdir()
    np.save(tf / "big_Op.0.10.npy", x)
    folder = dump_folder(tmp_path / "npu")
    write_dump_file(folder, "big/Op_part1", "Square", outputs=[x.astype(np.float16)], task_id=1, timestamp=1)
    part2 = CannTensor(x.astype(np.float16), original_op=("big/Op", 0))
    write_dump_file(folder, "big/Op_part2", "Sqrt", outputs=[part2], task_id=2, timestamp=2)
    graph = write_ge_graph(
        tmp_path / "ge_proto_00000001_Build.txt",
        [
            {"name": "big/Op_part1", "type": "Square", "original_ops": ["big/Op"], "pass_name": "SplitPass"},
            {
                "name": "big/Op_part2",
                "type": "Sqrt",
                "inputs": ["big/Op_part1:0"],
                "original_ops": ["big/Op"],
                "pass_name": "SplitPass",
                "output_descs": [tensor_desc("float16", (2, 16), origin_name="big/Op", origin_output_index=0)],
            },
        ],
    )
    comp = nbprec.compare(tmp_path / "npu", tf, graph=graph)
    t = comp.table.set_index("target_name")
    assert t.loc["big/Op_part2:output:0", "bench_name"] == "big_Op.0"
    assert t.loc["big/Op_part1:output:0", "match"] == "unmatched"  # its output is an intermediate
    assert set(comp.table.drop_duplicates("op")["relation"]) == {"one-to-many"}


def test_fusion_matcher_reads_columns_and_frames_alike(case: NpuDemo) -> None:
    # match_tensors hands nbprec's matcher the indexes as Columns; a user calling it gets the same from frames
    from nbprec.graph.ge import read_ge_model

    npu, tf = nbprec.open(case.npu), nbprec.open(case.tf)
    pairs = {}
    for form, (t, b) in {"columns": (npu.columns, tf.columns), "frames": (npu.index, tf.index)}.items():
        matcher = FusionMatcher(read_ge_model(case.graph))
        found = matcher(t, b)
        pairs[form] = (sorted(zip(found["t"].tolist(), found["b"].tolist(), strict=True)), matcher.absorbed)
    assert pairs["columns"] == pairs["frames"]
    assert len(pairs["columns"][0]) == len(npu.columns)  # every NPU tensor of the demo is matched


def test_benchmark_key_follows_tensorflow_file_names() -> None:
    assert benchmark_key("scope/op.x:0") == "scope_op_x_0"
    assert FusionMatcher(None).ground_truth(["a"]) == ["*"]


def test_npu_against_npu_matches_by_name(case: NpuDemo) -> None:
    comp = nbprec.compare(case.npu, case.npu)
    assert "fusion" not in comp.meta and (comp.table["match"] == "exact").all()
    assert (comp.table["status"] == "pass").all()


def test_msaccucmp_csv_carries_ground_truth(comparison, tmp_path: Path) -> None:
    path = comparison.to_csv(tmp_path / "result.csv", layout="msaccucmp")
    frame = pd.read_csv(path)
    conv = frame[frame["TensorIndex"] == "conv1/Conv2D:output:0"].iloc[0]
    assert conv["GroundTruth"] == "conv1/Conv2D,conv1/BiasAdd,conv1/Relu" and conv["OpType"] == "Conv2D"
    assert (frame.loc[frame["NPUDump"] == "trans_TransData_1", "GroundTruth"] == "*").all()


def test_cli_compare_and_ni(case: NpuDemo, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    graph = str(case.graph)
    assert main(["compare", str(case.npu), str(case.tf), "--graph", graph, "--no-progress", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "first failing op     fc1/Gelu  (ground truth: fc1/Gelu)" in out
    assert "fused away on the NPU" in out and "many-to-one: 4" in out
    assert (tmp_path / "compare_msaccucmp.csv").is_file()
    assert main(["ni", "fc1/MatMul", "--graph", graph]) == 0
    out = capsys.readouterr().out
    assert "pass MatMulBiasAddFusionPass; original ops fc1/MatMul, fc1/BiasAdd" in out
    assert "stored FRACTAL_NZ" in out and "equals fc1/BiasAdd:0" in out and "+1  fc1/Gelu" in out
    assert main(["ni", "conv1/Conv2D", "--graph", graph, "--target", str(case.npu), "--bench", str(case.tf)]) == 0
    out = capsys.readouterr().out
    assert "original ops conv1/Conv2D, conv1/BiasAdd, conv1/Relu" in out
    assert "benchmark op conv1/Conv2D,conv1/BiasAdd,conv1/Relu" in out
    assert "bench   max" in out and "(conv1_Relu.0, float32)" in out  # statistics computed from payloads
    assert main(["ni", "conv1/Conv2D"]) == 1
    assert "needs --target" in capsys.readouterr().err


@pytest.mark.parametrize("graph_to_reader", [True, False])
def test_dump_without_op_names_in_headers(tmp_path: Path, graph_to_reader: bool) -> None:
    """Old dumps leave the header's op_name empty: the file name's sanitised name is matched to the graph's."""
    x = np.linspace(-2, 2, 64, dtype=np.float32).reshape(4, 16)
    tf = tmp_path / "tf"
    tf.mkdir()
    np.save(tf / "blk_dense_MatMul.0.10.npy", x)
    np.save(tf / "blk_dense_BiasAdd.0.11.npy", x + 1)
    folder = dump_folder(tmp_path / "npu")
    out = CannTensor((x + 1).astype(np.float16), "FRACTAL_NZ")
    write_dump_file(
        folder,
        "blk/dense/MatMul",
        "MatMulV2",
        inputs=[x.astype(np.float16)],
        outputs=[out],
        record_op_name=False,
        task_id=1,
        timestamp=1,
    )
    ops = [
        {"name": "blk/x", "type": "Data"},
        {
            "name": "blk/dense/MatMul",
            "type": "MatMulV2",
            "inputs": ["blk/x:0"],
            "pass_name": "MatMulBiasAddFusionPass",
            "original_ops": ["blk/dense/MatMul", "blk/dense/BiasAdd"],
            "output_descs": [
                tensor_desc(
                    "float16",
                    (1, 1, 16, 16),
                    "FRACTAL_NZ",
                    origin_name="blk/dense/BiasAdd",
                    origin_output_index=0,
                    origin_shape=(4, 16),
                )
            ],
        },
    ]
    graph = write_ge_graph(tmp_path / "ge_proto_00000001_Build.txt", ops)
    if graph_to_reader:
        comp = nbprec.compare(tmp_path / "npu", tf, graph=graph)
        op = "blk/dense/MatMul"  # the reader took the graph's name
    else:
        comp = nbprec.compare(tmp_path / "npu", tf, fusion=FusionMatcher.from_graph(graph))
        op = "blk_dense_MatMul"
    t = comp.table.set_index("target_name")
    assert t.loc[f"{op}:output:0", "bench_name"] == "blk_dense_BiasAdd.0"
    assert t.loc[f"{op}:output:0", "ground_truth"] == "blk/dense/MatMul,blk/dense/BiasAdd"
    assert t.loc[f"{op}:output:0", "cosine"] > 0.9999


def test_saved_npu_comparison_reloads_with_its_fusion_columns(comparison, tmp_path: Path) -> None:
    again = nbprec.Comparison.load(comparison.save(tmp_path / "cmp"))
    cols = ["ground_truth", "relation", "fusion_pass"]
    pd.testing.assert_frame_equal(again.table[cols], comparison.table[cols])
    assert again.meta["fusion"]["fused_away"] == comparison.meta["fusion"]["fused_away"]
    assert again.first_failing_op()["op"] == "fc1/Gelu"


def test_graph_problems_reach_the_comparison(case: NpuDemo, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A graph whose op reads an op that is not in it: matching goes on, and the comparison says so."""
    text = case.graph.read_text(encoding="utf-8").replace('input: "fc1/Gelu:0"', 'input: "fc1/Missing:0"', 1)
    graph = tmp_path / "ge_proto_00000002_Build.txt"
    graph.write_text(text, encoding="utf-8")
    comp = nbprec.compare(case.npu, case.tf, graph=graph)
    notes = " ".join(comp.meta["fusion"]["notes"])
    assert "problem" in notes and "fc1/Missing" in notes
    assert comp.first_failing_op()["op"] == case.faulty_op  # still found
    assert main(["compare", str(case.npu), str(case.tf), "--graph", str(graph), "--no-progress"]) == 0
    assert "fc1/Missing" in capsys.readouterr().out


def test_unreadable_npu_tensor_says_why_in_the_comparison(tmp_path: Path) -> None:
    """A declared size that does not match shape x dtype: the row keeps the reader's reason."""
    from cann_raw import dump_file, tensor_entry

    x = np.ones(6, np.float32)
    tf = tmp_path / "tf"
    tf.mkdir()
    np.save(tf / "a_b.0.10.npy", x)
    npu = tmp_path / "npu"
    npu.mkdir()
    bad = tensor_entry(role="output", data_type=1, fmt=2, dims=[7], size=24, original_op=("a/b", 0, 1, 2))
    dump_file(npu / "Add.a_b.1.0.5", op_name="a/b", outputs=[(bad, x.tobytes())])
    row = nbprec.compare(npu, tf).table.iloc[0]
    assert row["bench_name"] == "a_b.0" and row["compare_mode"] == "none"
    assert row["reason"].startswith("target tensor unreadable: declared size 24 bytes does not match shape")
