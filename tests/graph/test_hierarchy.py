"""Collapsing a 10,000-op model into module blocks, and rolling metrics up to them."""

from __future__ import annotations

from nbprec.graph import OpGraph
from nbprec.graph.hierarchy import describe_module_call, path_chain


def test_a_10000_op_model_collapses_to_readable_blocks(make_synthetic):
    g = make_synthetic(layers=25, blocks_per_layer=4, ops_per_block=100)
    assert len(g) == 10_002
    top = g.collapse(depth=1)
    assert len(top) == 27  # emb, 25 layers, head
    assert top.nx.number_of_edges() == 26
    layer = top.op("Module.layers.3.Layer.forward.0")
    assert layer["kind"] == "block" and layer["members"] == 400 and layer["attrs"]["label"] == "layers.3 (Layer)"
    assert top.consumers("Module.layers.3.Layer.forward.0") == ["Module.layers.4.Layer.forward.0"]
    deeper = g.collapse(depth=2, expand=())
    assert len(deeper) == 25 * 4 + 2
    one_open = g.collapse(depth=1, expand=["Module.layers.0.Layer.forward.0"])
    assert len(one_open) == 27 - 1 + 4


def test_metrics_roll_up_to_the_worst_inside(make_synthetic):
    g = make_synthetic(layers=3, blocks_per_layer=2, ops_per_block=10)
    for _, data in g.nx.nodes(data=True):
        data.update(status="pass", cosine=0.9999, rel_euclidean=0.001, matched=True)
    bad = "Functional.op25.0.forward"  # in layers.1
    g.op(bad).update(status="fail", cosine=0.91, rel_euclidean=0.3, origin="introduced")
    g.op("Functional.op5.0.forward").update(matched=False)
    top = g.collapse(depth=1)
    layer1 = top.op("Module.layers.1.Layer.forward.0")
    assert layer1["status"] == "fail" and layer1["cosine"] == 0.91 and layer1["rel_euclidean"] == 0.3
    assert layer1["origin"] == "introduced" and layer1["failing_members"] == 1
    layer0 = top.op("Module.layers.0.Layer.forward.0")
    assert layer0["status"] == "pass" and layer0["matched"] is False and layer0["unmatched_members"] == 1


def test_module_paths_stand_in_when_there_is_no_hierarchy():
    g = OpGraph.from_records(
        [
            {"name": f"op{i}", "module": m, "order": i}
            for i, m in enumerate(["enc.layers.0.fc", "enc.layers.0.fc", "enc.layers.1.fc", ""])
        ],
        [{"src": f"op{i}", "dst": f"op{i + 1}"} for i in range(3)],
    )
    assert set(g.collapse(depth=2)) == {"module:enc.layers.0", "module:enc.layers.1", "op3"}
    assert path_chain("enc.layers.0.fc")[1] == "module:enc.layers.0"
    assert describe_module_call("Module.enc.Linear.backward.0")["label"] == "enc (Linear) backward"
