"""Building the operator graph from real dumps: msprobe (inferred edges) and nbprec native (recorded edges)."""

from __future__ import annotations

import pytest

from nbprec.graph import GraphError, OpGraph, OpNotFoundError

# The fixture model: Embedding -> 2 x TransformerEncoderLayer -> mean -> Linear head (forward data flow).
FORWARD_CHAIN = [
    ("Functional.embedding.0.forward", "Functional.multi_head_attention_forward.0.forward"),
    ("Functional.multi_head_attention_forward.0.forward", "Functional.dropout.0.forward"),
    ("Functional.dropout.0.forward", "Tensor.__add__.0.forward"),
    ("Functional.embedding.0.forward", "Tensor.__add__.0.forward"),  # residual
    ("Tensor.__add__.0.forward", "Functional.layer_norm.0.forward"),
    ("Functional.layer_norm.0.forward", "Functional.linear.0.forward"),
    ("Functional.linear.0.forward", "Torch.relu.0.forward"),
    ("Torch.relu.0.forward", "Functional.dropout.1.forward"),
    ("Functional.dropout.1.forward", "Functional.linear.1.forward"),
    ("Functional.linear.1.forward", "Functional.dropout.2.forward"),
    ("Functional.layer_norm.0.forward", "Tensor.__add__.1.forward"),  # residual
    ("Functional.layer_norm.1.forward", "Functional.multi_head_attention_forward.1.forward"),  # layer 0 -> layer 1
    ("Functional.linear.2.forward", "Torch.relu.1.forward"),
    ("Functional.linear.3.forward", "Functional.dropout.5.forward"),
    ("Functional.layer_norm.3.forward", "Tensor.mean.0.forward"),  # encoder -> mean
    ("Tensor.mean.0.forward", "Functional.linear.4.forward"),  # mean -> head
    ("Functional.linear.4.forward", "Functional.cross_entropy.0.forward"),
]


def test_msprobe_edges_are_reconstructed_along_the_model(msprobe_fp32):
    g = OpGraph.from_dump(msprobe_fp32)
    for src, dst in FORWARD_CHAIN:
        assert g.nx.has_edge(src, dst), f"missing {src} -> {dst}"
    assert g.consumers("Functional.linear.0.forward") == ["Torch.relu.0.forward"]
    assert g.producers("Functional.linear.4.forward") == ["Tensor.mean.0.forward"]
    edges = list(g.edges())
    assert edges and all(d["inferred"] for _, _, d in edges)
    # the edge carries the producer's output tensor and the consumer's input slot
    data = g.nx.get_edge_data("Functional.linear.0.forward", "Torch.relu.0.forward")["0"]
    assert data["tensor"] == "Functional.linear.0.forward.output.0"
    assert data["dst_tensor"] == "Torch.relu.0.forward.input.0"
    assert data["match"] == "exact"
    # q, k and v of attention are the (undumped) transposed embedding output: same numbers, another shape
    mha = g.nx.get_edge_data("Functional.embedding.0.forward", "Functional.multi_head_attention_forward.0.forward")
    assert sorted(mha) == ["0", "1", "2"] and {d["match"] for d in mha.values()} == {"numel"}
    # forward ops never feed on backward outputs
    directions = g.nx.nodes(data="direction")
    assert all(directions[u] == directions[v] for u, v, _ in edges)
    assert any("inferred" in n for n in g.notes)


def test_msprobe_module_calls_are_blocks_not_ops(msprobe_fp32):
    g = OpGraph.from_dump(msprobe_fp32)
    assert not any(n.startswith("Module.") for n in g)
    assert any("module-level" in n for n in g.notes)
    full = OpGraph.from_dump(msprobe_fp32, level="all")
    assert "Module.head.Linear.forward.0" in full and len(full) == len(msprobe_fp32.ops())
    with pytest.raises(GraphError, match="level"):
        OpGraph.from_dump(msprobe_fp32, level="everything")


def test_msprobe_hierarchy_collapses_to_the_models_modules(msprobe_fp32):
    g = OpGraph.from_dump(msprobe_fp32)
    top = g.collapse(depth=1)
    forward_blocks = {n for n, d in top.nx.nodes(data=True) if d["kind"] == "block" and d["direction"] == "forward"}
    assert forward_blocks == {
        "Module.emb.Embedding.forward.0",
        "Module.enc.TransformerEncoder.forward.0",
        "Module.head.Linear.forward.0",
    }
    assert top.op("Module.enc.TransformerEncoder.forward.0")["attrs"]["label"] == "enc (TransformerEncoder)"
    assert top.nx.has_edge("Module.emb.Embedding.forward.0", "Module.enc.TransformerEncoder.forward.0")
    assert top.nx.has_edge("Module.enc.TransformerEncoder.forward.0", "Tensor.mean.0.forward")
    layers = g.collapse(depth=2)
    assert layers.nx.has_edge(
        "Module.enc.layers.0.TransformerEncoderLayer.forward.0", "Module.enc.layers.1.TransformerEncoderLayer.forward.0"
    )
    assert layers.op("Module.enc.layers.0.TransformerEncoderLayer.forward.0")["members"] == 11
    # expanding one block opens it one level
    opened = g.collapse(depth=1, expand=["Module.enc.TransformerEncoder.forward.0"])
    assert "Module.enc.layers.1.TransformerEncoderLayer.forward.0" in opened
    assert "Module.enc.TransformerEncoder.forward.0" not in opened
    assert sum(len(m) for m in layers.meta["members"].values()) == len(g)


def test_native_dump_uses_the_recorded_edges(native_runs, native_flow):
    target, _ = native_runs
    g = OpGraph.from_dump(target)
    expected = {(p, c, s) for c, flow in native_flow.items() for s, p in flow}
    got = {(u, v, d["slot"]) for u, v, d in g.edges()}
    assert got == expected
    assert not any(d["inferred"] for _, _, d in g.edges())
    # stats inference would have taken the later identical copy; the recorded edges do not
    assert g.consumers("Tensor.clone.1.forward") == []
    assert g.producers("Tensor.__add__.0.forward") == ["Tensor.clone.0.forward", "Functional.linear.1.forward"]
    assert g.module_chain("Functional.linear.0.forward") == [
        "Module.TinyNet.forward.0",
        "Module.block.Block.forward.0",
        "Module.block.fc1.Linear.forward.0",
    ]


def test_unknown_op_is_an_error_with_suggestions(msprobe_fp32):
    g = OpGraph.from_dump(msprobe_fp32)
    with pytest.raises(OpNotFoundError, match="similar"):
        g.subgraph("Functional.linear.99.forward")
    with pytest.raises(OpNotFoundError):
        g.op("nope")


def test_from_records_reports_edges_to_unknown_ops():
    g = OpGraph.from_records([{"name": "a"}], [{"src": "a", "dst": "ghost"}])
    assert g.nx.number_of_edges() == 0 and "left out" in g.notes[0]
