"""Node info on real dumps: matches the dump, escapes HTML, and the ``nbprec ni`` command."""

from __future__ import annotations

import html

import pytest

from nbprec.cli import main
from nbprec.graph import OpGraph, OpNotFoundError, node_info


def test_node_info_matches_the_dump_and_the_comparison(msprobe_pair):
    target, bench, comp = msprobe_pair
    name = "Functional.linear.0.forward"
    info = node_info(name, target, bench, comp)
    rows = target.index[target.index["op"] == name]
    assert info.type == "linear" and info.module == "enc.layers.0.linear1" and info.direction == "forward"
    assert [t.name for t in info.inputs + info.outputs] == rows["name"].tolist()
    for t, (_, row) in zip(info.inputs + info.outputs, rows.iterrows(), strict=True):
        assert t.dtype == row["dtype"] == "bfloat16" and t.shape == row["shape"]
        assert t.stats["max"] == pytest.approx(row["max"]) and t.stats["norm"] == pytest.approx(row["norm"])
        brow = bench.row(t.bench_name)
        assert t.bench_dtype == "float32" and t.bench_stats["mean"] == pytest.approx(brow["mean"])
        crow = comp.table.set_index("target_name").loc[t.name]
        assert t.metrics["cosine"] == pytest.approx(crow["cosine"]) and t.status == crow["status"]
    assert info.inputs[0].links == ["Functional.layer_norm.0.forward"]
    assert info.outputs[0].links == ["Torch.relu.0.forward"]
    assert info.module_chain[-1] == "Module.enc.layers.0.linear1.Linear.forward.0"
    assert info.stack == target.stacks[name] and info.stack
    assert info.status == comp.ops.set_index("op").at[name, "status"]
    text = info.to_text()
    assert name in text and "from Functional.layer_norm.0.forward" in text and "to Torch.relu.0.forward" in text


def test_node_info_without_a_comparison_compares_by_name(msprobe_pair):
    target, bench, comp = msprobe_pair
    info = node_info("Tensor.mean.0.forward", target, bench)
    table = comp.table.set_index("target_name")
    for t in info.outputs:
        assert t.metrics["cosine"] == pytest.approx(table.at[t.name, "cosine"])


def test_node_info_of_a_module_call_and_of_a_missing_op(msprobe_fp32):
    info = node_info("Module.head.Linear.forward.0", msprobe_fp32)
    assert info.type == "Linear" and [t.role for t in info.inputs][:1] == ["input"]
    with pytest.raises(OpNotFoundError, match="similar"):
        node_info("Functional.linear.77.forward", msprobe_fp32)


def test_html_escapes_every_user_string(native_runs):
    target, _ = native_runs
    info = node_info("Torch.tanh.0.forward", target)
    info.name = "<img src=x onerror=alert(1)>"
    info.stack = ["<script>evil()</script>"]
    info.inputs[0].name = '"><svg onload=alert(2)>'
    page = info._repr_html_()
    assert "<script>" not in page and "<img" not in page and "<svg" not in page
    assert html.escape(info.name) in page and html.escape(info.stack[0]) in page


def test_fusion_records_are_shown_when_the_graph_has_them(native_runs):
    target, _ = native_runs
    g = OpGraph.from_dump(target)
    g.add_op("Torch.tanh.0.forward", fusion={"pass_name": "TanhFusionPass", "original_ops": ["add", "tanh"]})
    info = node_info("Torch.tanh.0.forward", target, graph=g)
    assert info.fusion_pass == "TanhFusionPass" and info.original_ops == ["add", "tanh"]
    assert "TanhFusionPass" in info.to_text()


def test_cli_ni(capsys, tmp_path, native_runs):
    target, bench = native_runs
    svg = tmp_path / "sub.svg"
    args = [
        "ni",
        "Functional.linear.1.forward",
        "--target",
        str(target.path),
        "--bench",
        str(bench.path),
        "--depth",
        "1",
    ]
    if __import__("shutil").which("dot"):
        args += ["--svg", str(svg)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "Functional.linear.1.forward  (linear" in out and "status      fail (introduced)" in out
    assert "-1  Torch.relu.0.forward" in out and "+1  Tensor.__add__.0.forward" in out
    assert "tinynet.py:14" in out  # the recorded stack
    if "--svg" in args:
        assert svg.read_text(encoding="utf-8").lstrip().startswith("<?xml")
    assert main(["ni", "nope", "--target", str(target.path)]) == 1
