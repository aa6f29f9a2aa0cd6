"""The dashboard on an Ascend NPU comparison: fusion records in the inspector, the GE graph in the subgraph view,
the NPU's overflow records in the overflow view (widget state, no browser; test_browser.py renders the others)."""

from __future__ import annotations

import pytest

import nbprec
from nbprec.demo.npu import make_npu_demo


@pytest.fixture(scope="module")
def npu_dashboard(tmp_path_factory):
    pytest.importorskip("ipycytoscape")
    case = make_npu_demo(tmp_path_factory.mktemp("npu"))
    comp = nbprec.compare(case.npu, case.tf, graph=case.graph)
    return case, nbprec.explore(comp, target=nbprec.open(case.npu), bench=nbprec.open(case.tf))


def test_inspector_names_the_fusion_pass_and_original_ops(npu_dashboard):
    case, dash = npu_dashboard
    assert dash.selection.op == case.faulty_op  # the culprit is selected when it opens
    dash.selection.select("conv2/Conv2D")
    header = dash.inspector.header_html()
    assert "NPU op type <b>Conv2D</b>" in header
    assert "fusion pass (PassName) <b>ConvBiasaddReluFusionPass</b>" in header
    assert "original ops (OriginOp) <b>conv2/Conv2D,conv2/BiasAdd,conv2/Relu</b> (many-to-one)" in header
    dash.selection.select("trans_TransData_4")
    assert "no framework counterpart" in dash.inspector.header_html()


def test_subgraph_is_the_ge_graph_coloured_by_the_comparison(npu_dashboard):
    _case, dash = npu_dashboard
    dash.selection.select("fc1/MatMul")
    elements = dash.subgraph.elements
    names = {n["data"].get("op") or n["data"]["id"] for n in elements.nodes}
    assert {"fc1/MatMul", "fc1/Gelu", "fc1/weights"} <= names  # weights are GE graph ops, not dump ops
    assert not dash.subgraph.graph_note
    statuses = {n["data"].get("op") or n["data"]["id"]: n["data"].get("status") for n in elements.nodes}
    assert statuses["fc1/Gelu"] == "fail" and statuses["fc1/MatMul"] == "pass"


def test_overflow_view_lists_the_npu_records(npu_dashboard):
    case, dash = npu_dashboard
    html = dash.overflow.summary_html()
    assert "NPU overflow detection" in html and case.overflow_op in html and "floating-point overflow" in html
