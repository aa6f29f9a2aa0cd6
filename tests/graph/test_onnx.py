"""The graph of a real ONNX file (written with onnx.helper): nodes, attributes, modules, edges."""

from __future__ import annotations

import pytest

from nbprec.graph import GraphError, OpGraph

onnx = pytest.importorskip("onnx")


def write_model(path):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="/enc/layers.0/fc/MatMul"),
        helper.make_node("Relu", ["h"], ["r"], name="/enc/layers.0/Relu"),
        helper.make_node("Add", ["r", "h"], ["s"], name="/enc/layers.0/Add"),
        helper.make_node("Softmax", ["s"], ["y"], axis=-1),  # unnamed
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=[w],
    )
    model = helper.make_model(graph, producer_name="nbprec-test")
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_onnx_graph(tmp_path):
    g = OpGraph.from_onnx(write_model(tmp_path / "tiny.onnx"))
    assert len(g) == 4 and g.source == "onnx"
    assert g.consumers("/enc/layers.0/fc/MatMul") == ["/enc/layers.0/Relu", "/enc/layers.0/Add"]
    add_in = g.nx.get_edge_data("/enc/layers.0/fc/MatMul", "/enc/layers.0/Add")
    assert list(add_in) == ["1"] and add_in["1"]["tensor"] == "h" and not add_in["1"]["inferred"]
    assert g.op("Softmax_3")["attrs"]["axis"] == -1 and g.op("Softmax_3")["type"] == "Softmax"
    assert g.op("/enc/layers.0/Relu")["module"] == "enc.layers.0"
    assert set(g.collapse(depth=1)) == {"module:enc", "Softmax_3"}


def test_a_broken_onnx_file_is_an_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07not a protobuf at all \xff\xff")
    with pytest.raises(GraphError, match=r"bad\.onnx"):
        OpGraph.from_onnx(bad)
