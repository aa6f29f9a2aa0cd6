"""Exports: Cytoscape.js elements and style, DOT (checked with Graphviz when installed), SVG, JSON; escaping."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from nbprec.errors import MissingDependencyError
from nbprec.graph import OpGraph
from nbprec.graph.exports import color_scale, metric_color

HOSTILE = 'Functional.evil"];\n x -> y; <script>alert(1)</script>\\.0.forward'
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is not installed")


def check_cytoscape(out, max_elements=300):
    ids = [e["data"]["id"] for e in out.elements]
    assert len(ids) == len(set(ids)), "ids must be unique"
    nodes = {e["data"]["id"] for e in out.elements if "source" not in e["data"]}
    for e in out.elements:
        if "source" in e["data"]:
            assert e["data"]["source"] in nodes and e["data"]["target"] in nodes
        else:
            assert set(e["position"]) == {"x", "y"}
            assert e["data"]["color"].startswith("#")
    assert len(out.elements) <= max_elements
    json.loads(out.to_json())  # strict JSON (no NaN)
    return nodes


def test_cytoscape_export_of_a_real_subgraph(msprobe_pair):
    target, _, comp = msprobe_pair
    g = OpGraph.from_dump(target).attach_metrics(comp)
    out = g.subgraph("Functional.linear.0.forward", up=3, down=3).to_cytoscape("cosine")
    nodes = check_cytoscape(out)
    assert "Functional.linear.0.forward" in nodes and not out.truncated
    center = next(e for e in out.elements if e["data"]["id"] == "Functional.linear.0.forward")
    assert "center" in center["classes"].split()
    assert center["data"]["color"] == metric_color(center["data"]["cosine"], "cosine")
    # layered layout: every data edge points downwards
    pos = {e["data"]["id"]: e["position"] for e in out.elements if "position" in e}
    for e in out.elements:
        if "source" in e["data"]:
            assert pos[e["data"]["source"]]["y"] < pos[e["data"]["target"]]["y"]
            assert "inferred" in e["classes"].split()
    selectors = {rule["selector"] for rule in out.style}
    assert {"node", "node.fused", "node.unmatched", "node.block", "edge.inferred", "edge.control"} <= selectors
    assert out.legend["metric"] == "cosine" and out.legend["bins"] and "fused" in out.legend["marks"]


def test_fused_and_unmatched_ops_are_marked():
    g = OpGraph.from_records(
        [
            {
                "name": "a",
                "order": 0,
                "fusion": {"pass_name": "MatMulAddFusionPass", "original_ops": ["mm", "add"]},
            },
            {"name": "b", "order": 1, "matched": False},
        ],
        [{"src": "a", "dst": "b", "slot": "0"}],
    )
    classes = {e["data"]["id"]: e["classes"].split() for e in g.to_cytoscape().elements}
    assert "fused" in classes["a"] and "unmatched" in classes["b"]
    dot = g.to_dot()
    assert "shape=diamond" in dot and "dashed" in dot


def test_cytoscape_export_stays_within_the_element_budget(make_synthetic):
    g = make_synthetic(layers=2, blocks_per_layer=2, ops_per_block=100)
    out = g.to_cytoscape("status", max_elements=300)
    check_cytoscape(out)
    assert out.truncated and "max_elements" in out.notes[0]
    blocks = g.collapse(depth=2).to_cytoscape("status")
    check_cytoscape(blocks)
    assert not blocks.truncated


def test_json_export_loads_and_round_trips(tmp_path, msprobe_pair):
    target, _, comp = msprobe_pair
    g = OpGraph.from_dump(target).attach_metrics(comp)
    doc = g.to_json(tmp_path / "graph.json")
    loaded = json.loads((tmp_path / "graph.json").read_text(encoding="utf-8"))
    assert loaded == json.loads(json.dumps(doc))
    assert len(loaded["nodes"]) == len(g) and len(loaded["edges"]) == g.nx.number_of_edges()
    node = next(n for n in loaded["nodes"] if n["id"] == "Functional.linear.0.forward")
    assert node["status"] == "pass" and node["module"] == "enc.layers.0.linear1"


def test_color_scale_and_bad_metric():
    assert metric_color(0.5, "cosine") == color_scale("cosine")["bins"][-1]["color"]
    assert metric_color(None, "cosine") == color_scale("cosine")["missing"]["color"]
    assert metric_color(1e-5, "rel_euclidean") == color_scale("rel_euclidean")["bins"][0]["color"]
    with pytest.raises(Exception, match="cannot colour"):
        color_scale("nonsense")


def hostile_graph():
    return OpGraph.from_records(
        [{"name": HOSTILE, "type": "<b>x</b>", "order": 0}, {"name": "Torch.relu.0.forward", "order": 1}],
        [{"src": HOSTILE, "dst": "Torch.relu.0.forward", "slot": '0"'}],
    )


@needs_dot
def test_dot_parses_and_escapes_a_hostile_name(tmp_path, msprobe_pair):
    target, _, comp = msprobe_pair
    g = OpGraph.from_dump(target).attach_metrics(comp)
    for graph in (g, g.collapse(depth=2), hostile_graph()):
        done = subprocess.run(["dot", "-Tjson"], input=graph.to_dot().encode(), capture_output=True, check=False)
        assert done.returncode == 0, done.stderr
        drawn = json.loads(done.stdout)
        assert len(drawn.get("objects", [])) == len(graph)
        assert len(drawn.get("edges", [])) == graph.nx.number_of_edges()
    drawn_names = {o["name"] for o in json.loads(done.stdout)["objects"]}
    # one node holding the whole name (backslashes and newlines kept as escapes), no injected x -> y
    assert len(drawn_names) == 2 and "x" not in drawn_names and "y" not in drawn_names
    assert any(n.startswith('Functional.evil"];') and n.endswith(".0.forward") for n in drawn_names)
    svg = hostile_graph().to_svg(tmp_path / "g.svg")
    assert "<script>" not in svg and (tmp_path / "g.svg").read_text(encoding="utf-8") == svg


def test_svg_without_dot_names_the_fix(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(MissingDependencyError, match="Graphviz"):
        hostile_graph().to_svg()
