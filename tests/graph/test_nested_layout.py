"""Positions of nested boxes computed in Python: what the whole-model graph view draws with no browser layout."""

from __future__ import annotations

import itertools

import numpy as np

from nbprec.graph.nested_layout import BoxSpacing, nested_positions

SIZE = (170.0, 30.0)


def boxes(nodes, edges, sizes):
    """Every leaf's box, and every container's box as Cytoscape.js draws it: its children's boxes plus padding."""
    spacing = BoxSpacing()
    pos = nested_positions(nodes, edges, sizes, spacing=spacing)
    out = {k: (x - sizes[k][0] / 2, y - sizes[k][1] / 2, x + sizes[k][0] / 2, y + sizes[k][1] / 2) for k, (x, y) in
           pos.items()}  # fmt: skip
    parent = dict(nodes)
    containers = {p for p in parent.values() if p}
    depth = {n: 0 for n in parent}
    for n in parent:
        up = parent[n]
        while up:
            depth[n] += 1
            up = parent[up]
    for c in sorted(containers, key=lambda n: -depth[n]):
        inside = [out[k] for k in parent if parent[k] == c]
        pad = spacing.padding
        out[c] = (min(b[0] for b in inside) - pad, min(b[1] for b in inside) - pad - spacing.title,
                  max(b[2] for b in inside) + pad, max(b[3] for b in inside) + pad)  # fmt: skip
    return out


def overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_a_chain_runs_top_to_bottom_through_open_blocks():
    nodes = [("enc", ""), ("l0", "enc"), ("a", "l0"), ("b", "l0"), ("c", "enc"), ("head", "")]
    edges = [("a", "b"), ("b", "c"), ("c", "head")]
    pos = nested_positions(nodes, edges, {k: SIZE for k in ("a", "b", "c", "head")})
    assert set(pos) == {"a", "b", "c", "head"}  # containers are drawn around their leaves
    ys = [pos[k][1] for k in ("a", "b", "c", "head")]
    assert ys == sorted(ys) and len(set(ys)) == 4
    assert len({pos[k][0] for k in pos}) == 1  # one column, centred


def test_branches_sit_side_by_side_and_join_below():
    nodes = [(k, "") for k in ("x", "left", "right", "sum")]
    pos = nested_positions(nodes, [("x", "left"), ("x", "right"), ("left", "sum"), ("right", "sum")],
                           {k: SIZE for k, _ in nodes})  # fmt: skip
    assert pos["left"][1] == pos["right"][1] > pos["x"][1]
    assert pos["left"][0] < pos["right"][0]  # execution order, left to right
    assert pos["sum"][1] > pos["left"][1]
    assert pos["right"][0] - pos["left"][0] >= SIZE[0]  # no overlap


def test_sibling_boxes_never_overlap_and_blocks_hold_their_children():
    rng = np.random.default_rng(3)
    nodes, leaves = [], []
    for stage, block in itertools.product(range(3), range(3)):
        if block == 0:
            nodes.append((f"s{stage}", ""))
        nodes.append((f"s{stage}.b{block}", f"s{stage}"))
        for op in range(4):
            leaves.append((f"s{stage}.b{block}.op{op}", f"s{stage}.b{block}"))
    names = [k for k, _ in leaves]
    edges = list(itertools.pairwise(names))
    edges += [(names[i], names[j]) for i, j in rng.integers(0, len(names), (15, 2)) if i != j]  # skips, loops
    sizes = {k: (170.0, 30.0 + 12 * (i % 2)) for i, k in enumerate(names)}
    out = boxes(nodes + leaves, edges, sizes)
    parent = dict(nodes + leaves)
    for a, b in itertools.combinations(out, 2):
        if parent[a] == parent[b]:
            assert not overlap(out[a], out[b]), (a, b)
    for k, up in parent.items():
        if up:
            assert out[up][0] <= out[k][0] and out[k][2] <= out[up][2]
            assert out[up][1] <= out[k][1] and out[k][3] <= out[up][3]


def test_blocks_follow_execution_order_even_when_listed_first():
    nodes = [("late", ""), ("early", ""), ("x", "early"), ("y", "late"), ("z", "")]
    pos = nested_positions(nodes, [("x", "y"), ("y", "z")], {k: SIZE for k in "xyz"})
    assert pos["x"][1] < pos["y"][1] < pos["z"][1]
