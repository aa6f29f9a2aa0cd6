"""The neighbourhood of an op: depths, stop types, control edges, truncation, metrics on nodes and edges."""

from __future__ import annotations

import pytest

from nbprec.compare import compare
from nbprec.graph import GraphError, OpGraph


def test_subgraph_around_the_planted_fault_shows_real_producers_and_consumers(native_runs):
    target, bench = native_runs
    comp = compare(target, bench, progress=None)
    faulty = "Functional.linear.1.forward"
    assert comp.first_introduced_op()["op"] == faulty
    g = OpGraph.from_dump(target).attach_metrics(comp)
    sub = g.subgraph(faulty, up=2, down=2)
    assert dict(sub.nx.nodes(data="distance")) == {
        faulty: 0,
        "Torch.relu.0.forward": -1,
        "Functional.linear.0.forward": -2,
        "Tensor.__add__.0.forward": 1,
        "Torch.tanh.0.forward": 2,
    }
    assert not sub.truncated and sub.center == faulty
    node = sub.op(faulty)
    assert node["status"] == "fail" and node["origin"] == "introduced" and node["matched"] is True
    assert sub.op("Functional.linear.0.forward")["status"] == "pass"
    assert sub.op("Tensor.__add__.0.forward")["origin"] == "inherited"
    ops = comp.ops.set_index("op")
    for name, data in sub.nx.nodes(data=True):
        assert data["cosine"] == pytest.approx(ops.at[name, "out_cosine"])
    # each edge carries the metric of its tensor
    table = comp.table.set_index("target_name")
    for _, _, data in sub.edges():
        assert data["cosine"] == pytest.approx(table.at[data["tensor"], "cosine"])
        assert data["status"] == table.at[data["tensor"], "status"]
    assert sub.nx.get_edge_data(faulty, "Tensor.__add__.0.forward")["0"]["status"] == "fail"
    assert sub.nx.get_edge_data("Torch.relu.0.forward", faulty)["0"]["status"] == "pass"


def test_metrics_from_a_real_msprobe_comparison(msprobe_pair):
    target, _, comp = msprobe_pair
    g = OpGraph.from_dump(target).attach_metrics(comp)
    statuses = dict(g.nx.nodes(data="status"))
    ops = comp.ops.set_index("op")
    for op in ("Functional.linear.0.forward", "Tensor.mean.0.forward", "Functional.layer_norm.3.backward"):
        assert statuses[op] == ops.at[op, "status"]
        assert g.op(op)["rel_euclidean"] == pytest.approx(ops.at[op, "out_rel_euclidean"])
    with_metric = [d for _, _, d in g.edges() if "cosine" in d]
    assert len(with_metric) == g.nx.number_of_edges()


def test_depths_and_stop_types(msprobe_fp32):
    g = OpGraph.from_dump(msprobe_fp32)
    center = "Functional.linear.1.forward"
    assert set(g.subgraph(center, up=0, down=0)) == {center}
    up_only = g.subgraph(center, up=3, down=0)
    assert all(d <= 0 for _, d in up_only.nx.nodes(data="distance"))
    assert "Functional.linear.0.forward" in up_only  # linear.0 -> relu -> dropout -> linear.1
    stopped = g.subgraph(center, up=5, down=0, stop_types=("ReLU",))
    assert "Torch.relu.0.forward" in stopped and "Functional.linear.0.forward" not in stopped


def test_control_edges_can_be_followed_or_skipped():
    g = OpGraph.from_records(
        [{"name": n, "order": i} for i, n in enumerate("abcd")],
        [
            {"src": "a", "dst": "b", "slot": "0"},
            {"src": "c", "dst": "b", "kind": "control"},
            {"src": "b", "dst": "d", "slot": "0"},
        ],
    )
    assert set(g.subgraph("b", up=1, down=1)) == {"a", "b", "c", "d"}
    no_ctrl = g.subgraph("b", up=1, down=1, control_edges=False)
    assert set(no_ctrl) == {"a", "b", "d"}
    assert all(d["kind"] == "data" for _, _, d in no_ctrl.edges())


def test_a_large_neighbourhood_is_truncated_by_distance_and_says_so(make_synthetic):
    g = make_synthetic(layers=2, blocks_per_layer=2, ops_per_block=50)
    center = "Functional.op100.0.forward"
    sub = g.subgraph(center, up=50, down=50, max_nodes=21)
    assert len(sub) == 21 and sub.truncated
    assert max(abs(d) for _, d in sub.nx.nodes(data="distance")) == 10
    assert "truncated" in sub.notes[-1]
    whole = g.subgraph(center, up=5, down=5, max_nodes=11)
    assert len(whole) == 11 and not whole.truncated
    with pytest.raises(GraphError):
        g.subgraph(center, up=-1)
