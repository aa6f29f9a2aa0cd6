"""The whole-model navigator: module blocks opened and closed, roll-ups, the element budget at 10^5 ops."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from nbprec.graph import OpGraph
from nbprec.graph.navigator import ModelNavigator


def deep_ops(n: int, fail_every: int = 9973) -> pd.DataFrame:
    """``n`` ops three module levels deep (4 stages x 10 blocks x 10 layers), one in ``fail_every`` failing,
    cosine drifting down along the run."""
    i = np.arange(n)
    per = max(n // 10_000, 1)
    module = [f"model.stage{k // (2500 * per)}.block{k // (250 * per) % 10}.layer{k // (25 * per) % 10}" for k in i]
    status = np.where(i % fail_every == fail_every - 1, "fail", "pass")
    return pd.DataFrame(
        {
            "op": [f"Functional.op.{k}.forward" for k in i],
            "order": i,
            "module": module,
            "status": status,
            "origin": np.where(status == "fail", "introduced", ""),
            "out_cosine": np.where(status == "fail", 0.5, 1 - i / (10 * n)),
            "out_rel_euclidean": np.where(status == "fail", 0.9, i / (10 * n)),
        }
    )


def test_rollups_and_expand_collapse_on_the_native_graph(native_runs):
    from nbprec.compare import compare

    target, bench = native_runs
    comp = compare(target, bench, progress=None)
    graph = OpGraph.from_dump(target).attach_metrics(comp)
    nav = ModelNavigator.from_graph(graph)
    nav.set_metrics(comp.ops)
    top = nav.view()
    assert [n["id"] for n in top.nodes] == ["Module.TinyNet.forward.0"]  # one top block holds every op
    block = top.nodes[0]
    assert block["members"] == len(graph) and block["kind"] == "block"
    failing = set(comp.ops.loc[comp.ops["status"] == "fail", "op"]) & set(graph)
    assert block["failing"] == len(failing) > 0
    assert block["value"] == pytest.approx(comp.ops.set_index("op").loc[list(graph), "out_cosine"].min())
    nav.expand("Module.TinyNet.forward.0")
    shown = {n["id"]: n for n in nav.view().nodes}
    assert shown["Module.TinyNet.forward.0"]["expanded"]
    assert shown["Module.block.Block.forward.0"]["parent"] == "Module.TinyNet.forward.0"
    assert "Torch.tanh.0.forward" in shown and "Functional.linear.0.forward" not in shown
    edges = {(e["source"], e["target"]) for e in nav.view().edges}
    assert ("Module.block.Block.forward.0", "Torch.tanh.0.forward") in edges  # add -> tanh, lifted to the block
    nav.reveal("Functional.linear.1.forward", neighbours=0)
    view = nav.view()
    shown = {n["id"]: n for n in view.nodes}
    assert shown["Functional.linear.1.forward"]["selected"]
    assert shown["Functional.linear.1.forward"]["parent"] == "Module.block.fc2.Linear.forward.0"
    assert shown["Torch.relu.0.forward"]["neighbour"] and shown["Tensor.__add__.0.forward"]["neighbour"]
    assert not shown["Module.block.fc1.Linear.forward.0"]["neighbour"]  # closed, and not joined to linear.1
    near = [(e["source"], e["target"]) for e in view.edges if e["near"]]
    assert sorted(near) == [("Functional.linear.1.forward", "Tensor.__add__.0.forward"),
                            ("Torch.relu.0.forward", "Functional.linear.1.forward")]  # fmt: skip
    nav.collapse("Module.block.Block.forward.0")
    assert not any(b.startswith("Module.block.fc") for b in nav.expanded)
    assert nav.up() == "Module.TinyNet.forward.0" and not nav.expanded


def test_a_flat_model_is_grouped_and_every_view_stays_within_the_budget():
    n = 100_000
    ops = deep_ops(n)
    ops["module"] = "enc.layers." + (ops["order"] // 50).astype(str)  # 2,000 layers side by side
    nav = ModelNavigator.from_ops(ops, max_elements=300)
    assert [n["label"] for n in nav.view().nodes] == ["enc"]
    nav.expand("module:enc")
    groups = [n for n in nav.view().nodes if not n["expanded"]]
    assert len(groups) <= nav.max_children and all(g["kind"] == "group" for g in groups)
    assert sum(g["members"] for g in groups) == n
    target = ops["op"].iloc[77_777]
    nav.reveal(target)
    view = nav.view()
    assert 0 < len(view) <= 300 and not view.truncated
    ops_drawn = {x["id"] for x in view.nodes if x["kind"] == "op"}
    assert target in ops_drawn and ops["op"].iloc[77_776] in ops_drawn and ops["op"].iloc[77_778] in ops_drawn
    # the failing ops are counted in the blocks that hold them, at every level
    assert nav.rollup("")["failing"] == (ops["status"] == "fail").sum() == sum(c for _, c in nav.failing_blocks())


def test_opening_many_blocks_closes_the_oldest_to_keep_the_cap():
    ops = deep_ops(100_000)
    nav = ModelNavigator.from_ops(ops, max_elements=150)
    for stage in range(4):
        for block in range(10):
            nav.expand(f"module:model.stage{stage}.block{block}")
            view = nav.view()
            assert len(view) <= 150
    nav.reveal(ops["op"].iloc[12_345])
    view = nav.view()
    assert len(view) <= 150 and ops["op"].iloc[12_345] in {x["id"] for x in view.nodes}
    path = nav.path(ops["op"].iloc[12_345])
    assert set(path) <= set(nav.expanded)  # the selected op's path is never closed to make room


def test_group_ids_and_parents_are_consistent():
    ops = deep_ops(3_000)
    ops["module"] = ""  # no hierarchy: 3,000 ops at the top, grouped
    nav = ModelNavigator.from_ops(ops, max_children=10)
    top = nav.children("")
    assert len(top) == 10 and top[0] == "#0-299"
    leaf = ops["op"].iloc[1234]
    chain = nav.path(leaf)
    assert chain[0] == "#1200-1499" and nav.parent(leaf) == chain[-1]
    for outer, inner in itertools.pairwise(chain):
        assert inner in nav.children(outer) and nav.parent(inner) == outer
    lo, hi = nav.span(chain[-1])
    assert lo <= 1234 < hi and nav.label(chain[0]) == "op.1200.forward … op.1499.forward"
    with pytest.raises(KeyError, match="no op named"):
        nav.reveal("nope")
