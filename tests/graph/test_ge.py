"""GE graph dumps: a hand-written Build graph (protobuf text, as GE prints it) and its JSON form, the writer,
escapes, every error case, and fusion_result.json."""

from __future__ import annotations

import codecs
import json
import math

import pytest

from nbprec._record import Factory
from nbprec.graph import GraphError, OpGraph
from nbprec.graph.ge import (
    GeGraphError,
    GeInput,
    GeModel,
    GeOp,
    GeTensorDesc,
    graph_from_ge,
    read_fusion_result,
    read_ge_model,
)
from nbprec.graph.ge_parse import MAX_DEPTH, parse_text
from nbprec.graph.ge_write import c_escape, tensor_desc, write_ge_graph, write_ge_model

# A Build graph: Cast + TransData into a Conv2D fused with BiasAdd and Relu (two passes), a MatMul fused with
# BiasAdd giving FRACTAL_NZ, TransData + Cast back, an If with two subgraphs, control edges. The fused Conv2D
# is laid out as GE's printer writes it (a field a line); the others are condensed (the same syntax).
BUILD_GRAPH = r"""name: "ge_default_20240101_1"
version: 1
attr { key: "soc_version" value { s: "Ascend910B" } }
graph {
  name: "ge_default_20240101_1"
  input: "data:0"
  output: "NetOutput:0"
  op {
    name: "data"
    type: "Data"
    attr { key: "index" value { i: 0 } }
    output_desc { name: "y" dtype: DT_FLOAT shape { dim: 1 dim: 28 dim: 28 dim: 8 } layout: "NHWC" size: 25088 }
    id: 0
    stream_id: 0
  }
  op {
    name: "trans_Cast_0"
    type: "Cast"
    input: "data:0"
    attr { key: "dst_type" value { i: 1 } }
    input_desc { name: "x" dtype: DT_FLOAT shape { dim: 1 dim: 28 dim: 28 dim: 8 } layout: "NHWC" }
    output_desc { name: "y" dtype: DT_FLOAT16 shape { dim: 1 dim: 28 dim: 28 dim: 8 } layout: "NHWC" }
    id: 1
    stream_id: 0
  }
  op {
    name: "trans_TransData_1"
    type: "TransData"
    input: "trans_Cast_0:0"
    attr { key: "dst_format" value { s: "NC1HWC0" } }
    attr { key: "src_format" value { s: "NHWC" } }
    input_desc { name: "src" dtype: DT_FLOAT16 shape { dim: 1 dim: 28 dim: 28 dim: 8 } layout: "NHWC" }
    output_desc { name: "dst" dtype: DT_FLOAT16 shape { dim: 1 dim: 1 dim: 28 dim: 28 dim: 16 } layout: "NC1HWC0" }
    id: 2
    stream_id: 0
  }
  op {
    name: "conv1/weights"
    type: "Const"
    output_desc {
      dtype: DT_FLOAT16 shape { dim: 9 dim: 1 dim: 16 dim: 16 } layout: "FRACTAL_Z"
      attr { key: "origin_format" value { s: "HWCN" } }
    }
    id: 3
    stream_id: 0
  }
  op {
    name: "conv1/bias"
    type: "Const"
    output_desc { dtype: DT_FLOAT16 shape { dim: 8 } layout: "ND" }
    id: 4
    stream_id: 0
  }
  op {
    name: "conv1/Conv2D"
    type: "Conv2D"
    input: "trans_TransData_1:0"
    input: "conv1/weights:0"
    input: "conv1/bias:0"
    input: ""
    attr {
      key: "_L1_fusion_sub_graph_no"
      value {
        i: 0
      }
    }
    attr {
      key: "_datadump_is_multiop"
      value {
        b: true
      }
    }
    attr {
      key: "_datadump_original_op_names"
      value {
        list {
          s: "conv1/Conv2D"
          s: "conv1/BiasAdd"
          s: "conv1/Relu"
          val_type: VT_LIST_STRING
        }
      }
    }
    attr {
      key: "_op_comment"
      value {
        s: "caf\303\251 \"fused\"\\n"
      }
    }
    attr {
      key: "alpha"
      value {
        f: 0.5
      }
    }
    attr {
      key: "pads"
      value {
        list {
          i: 1
          i: 1
          i: 1
          i: 1
          val_type: VT_LIST_INT
        }
      }
    }
    attr {
      key: "pass_name"
      value {
        list {
          s: "ConvBiasaddFusionPass"
          s: "TbeConvElemwiseFusionPass"
          val_type: VT_LIST_STRING
        }
      }
    }
    input_desc {
      name: "x"
      dtype: DT_FLOAT16
      shape {
        dim: 1
        dim: 1
        dim: 28
        dim: 28
        dim: 16
      }
      layout: "NC1HWC0"
      attr {
        key: "origin_format"
        value {
          s: "NHWC"
        }
      }
    }
    input_desc {
      name: "filter"
      dtype: DT_FLOAT16
      shape {
        dim: 9
        dim: 1
        dim: 16
        dim: 16
      }
      layout: "FRACTAL_Z"
    }
    input_desc {
      name: "bias"
      dtype: DT_FLOAT16
      shape {
        dim: 8
      }
      layout: "ND"
    }
    input_desc {
      name: "offset_w"
      dtype: DT_UNDEFINED
      layout: "RESERVED"
    }
    output_desc {
      name: "y"
      dtype: DT_FLOAT16
      shape {
        dim: 1
        dim: 1
        dim: 28
        dim: 28
        dim: 16
      }
      layout: "NC1HWC0"
      attr {
        key: "_datadump_origin_format"
        value {
          s: "NHWC"
        }
      }
      attr {
        key: "_datadump_origin_name"
        value {
          s: "conv1/Relu"
        }
      }
      attr {
        key: "_datadump_origin_output_index"
        value {
          i: 0
        }
      }
      attr {
        key: "origin_format"
        value {
          s: "NHWC"
        }
      }
      attr {
        key: "origin_shape"
        value {
          list {
            i: 1
            i: 28
            i: 28
            i: 8
            val_type: VT_LIST_INT
          }
        }
      }
      size: 25088
      real_dim_cnt: 4
    }
    id: 5
    stream_id: 0
  }
  op {
    name: "trans_TransData_6"
    type: "TransData"
    input: "conv1/Conv2D:0"
    attr { key: "dst_format" value { s: "NHWC" } }
    attr { key: "src_format" value { s: "NC1HWC0" } }
    output_desc { dtype: DT_FLOAT16 shape { dim: 1 dim: 28 dim: 28 dim: 8 } layout: "NHWC" }
    id: 6
    stream_id: 0
  }
  op {
    name: "flatten/Reshape"
    type: "Reshape"
    input: "trans_TransData_6:0"
    output_desc { dtype: DT_FLOAT16 shape { dim: 1 dim: 6272 } layout: "ND" }
    id: 7
    stream_id: 0
  }
  op {
    name: "fc/weights"
    type: "Const"
    output_desc { dtype: DT_FLOAT16 shape { dim: 1 dim: 392 dim: 16 dim: 16 } layout: "FRACTAL_NZ" }
    id: 8
    stream_id: 0
  }
  op {
    name: "fc/MatMul"
    type: "MatMulV2"
    input: "flatten/Reshape:0"
    input: "fc/weights:0"
    input: "trans_TransData_1:-1"
    attr {
      key: "_datadump_original_op_names"
      value { list { s: "fc/MatMul" s: "fc/BiasAdd" val_type: VT_LIST_STRING } }
    }
    attr { key: "pass_name" value { s: "MatMulBiasAddFusionPass" } }
    attr { key: "transpose_x1" value { b: false } }
    attr { key: "transpose_x2" value { b: false } }
    input_desc { name: "x1" dtype: DT_FLOAT16 shape { dim: 1 dim: 6272 } layout: "ND" }
    input_desc { name: "x2" dtype: DT_FLOAT16 shape { dim: 1 dim: 392 dim: 16 dim: 16 } layout: "FRACTAL_NZ" }
    output_desc {
      name: "y"
      dtype: DT_FLOAT16
      shape { dim: 1 dim: 1 dim: 16 dim: 16 }
      layout: "FRACTAL_NZ"
      attr { key: "_datadump_origin_name" value { s: "fc/BiasAdd" } }
      attr { key: "_datadump_origin_output_index" value { i: 0 } }
      attr { key: "origin_format" value { s: "ND" } }
      attr { key: "origin_shape" value { list { i: 1 i: 10 val_type: VT_LIST_INT } } }
    }
    id: 9
    stream_id: 1
  }
  op {
    name: "trans_TransData_10"
    type: "TransData"
    input: "fc/MatMul:0"
    attr { key: "dst_format" value { s: "ND" } }
    attr { key: "src_format" value { s: "FRACTAL_NZ" } }
    output_desc { dtype: DT_FLOAT16 shape { dim: 1 dim: 10 } layout: "ND" }
    id: 10
    stream_id: 1
  }
  op {
    name: "trans_Cast_11"
    type: "Cast"
    input: "trans_TransData_10:0"
    attr { key: "dst_type" value { i: 0 } }
    output_desc { dtype: DT_FLOAT shape { dim: 1 dim: 10 } layout: "ND" }
    id: 11
    stream_id: 1
  }
  op {
    name: "pred"
    type: "Const"
    output_desc { dtype: DT_BOOL layout: "ND" }
    id: 12
    stream_id: 0
  }
  op {
    name: "cond/If"
    type: "If"
    input: "pred:0"
    input: "trans_Cast_11:0"
    input: "conv1/Conv2D:-1"
    attr { key: "then_branch" value { func { name: "cond/then_branch" } } }
    output_desc { dtype: DT_FLOAT shape { dim: 1 dim: 10 } layout: "ND" }
    id: 13
    stream_id: 0
    subgraph_name: "cond/then_branch"
    subgraph_name: "cond/else_branch"
  }
  op {
    name: "NetOutput"
    type: "NetOutput"
    input: "cond/If:0"
    input: "fc/MatMul:-1"
    input_desc { dtype: DT_FLOAT shape { dim: 1 dim: 10 } layout: "ND" }
    id: 14
    stream_id: 0
  }
}
graph {
  name: "cond/then_branch"
  op { name: "cond/then/arg0" type: "Data" attr { key: "_parent_node_index" value { i: 1 } } id: 0 }
  op {
    name: "cond/then/Relu"
    type: "Relu"
    input: "cond/then/arg0:0"
    output_desc { dtype: DT_FLOAT shape { dim: 1 dim: 10 } layout: "ND" }
    id: 1
  }
  op { name: "cond/then/NetOutput" type: "NetOutput" input: "cond/then/Relu:0" id: 2 }
}
graph {
  name: "cond/else_branch"
  op { name: "cond/else/arg0" type: "Data" id: 0 }
  op { name: "cond/else/NetOutput" type: "NetOutput" input: "cond/else/arg0:0" id: 1 }
}
"""

# ge_ir.proto fields that are repeated (everything else met in BUILD_GRAPH is singular)
REPEATED = {"graph", "op", "input", "output", "attr", "input_desc", "output_desc", "subgraph_name", "dim"}
REPEATED_IN_LIST = {"s", "i", "f", "b", "bt"}


def ascend_json(message: dict, *, in_list: bool = False, plain_maps: bool = False) -> dict:
    """The JSON Ascend's converter (Pb2Json) writes for a parsed message: snake_case names, maps as lists of
    key/value objects, enums by name, singular bytes C-escaped, singular floats as %g strings."""
    out = {}
    for name, values in message.items():
        repeated = name in REPEATED or (in_list and name in REPEATED_IN_LIST)
        converted = []
        for v in values:
            if isinstance(v, dict):
                converted.append(ascend_json(v, in_list=name == "list", plain_maps=plain_maps))
            elif name in ("s", "bt") and not repeated:
                converted.append(codecs.escape_encode(v.encode("utf-8"))[0].decode("ascii"))
            elif name == "f" and not repeated:
                converted.append(f"{v:g}")
            else:
                converted.append(v)
        if name == "attr" and plain_maps:
            out[name] = {e["key"]: e["value"] for e in converted}
        else:
            out[name] = converted if repeated else converted[-1]
    return out


@pytest.fixture
def build_file(tmp_path):
    path = tmp_path / "ge_proto_00000123_Build.txt"
    path.write_text(BUILD_GRAPH)
    return path


@pytest.fixture
def model(build_file):
    return read_ge_model(build_file)


# -- the model ------------------------------------------------------------------------------------------------
def test_ops_types_and_graphs(model):
    assert model.name == "ge_default_20240101_1" and model.format == "text"
    assert [g.name for g in model.graphs] == ["ge_default_20240101_1", "cond/then_branch", "cond/else_branch"]
    main = model.graphs[0]
    assert len(main) == 15 and main.inputs == ("data:0",) and main.outputs == ("NetOutput:0",)
    assert [op.type for op in main.ops[:3]] == ["Data", "Cast", "TransData"]
    assert len(model.ops) == 15 + 3 + 2 and model.problems == []
    assert model.attrs == {"soc_version": "Ascend910B"} and model.extra == {"version": 1}
    assert model.graphs[1].parent_op == "cond/If" and model.graphs[2].parent_op == "cond/If"
    assert model.op("cond/then/Relu").graph == "cond/then_branch" and model.by_name["pred"].type == "Const"
    assert len(model.by_name) == 20 and "pred" in model and model.graph("cond/then_branch").op("cond/then/Relu")
    assert model.op("cond/If").subgraph_names == ("cond/then_branch", "cond/else_branch")
    assert model.op("cond/If").attrs["then_branch"] == {"name": "cond/then_branch", "attrs": {}}
    assert model.op("data").extra == {"stream_id": 0} and model.op("fc/MatMul").extra == {"stream_id": 1}
    with pytest.raises(GraphError, match=r"no op named 'conv1/Conv3D'.*similar: \['conv1/Conv2D'\]"):
        model.op("conv1/Conv3D")


def test_inputs_edges_and_control_edges(model):
    conv = model.op("conv1/Conv2D")
    assert conv.inputs == (
        GeInput("trans_TransData_1", 0),
        GeInput("conv1/weights", 0),
        GeInput("conv1/bias", 0),
        GeInput("", None),  # an unused optional input (offset_w)
    )
    mm = model.op("fc/MatMul")
    assert mm.control_inputs == ["trans_TransData_1"] and [s for s, _ in mm.data_inputs] == [0, 1]
    assert model.op("NetOutput").inputs[1].is_control
    # the producer, and through TransData/Cast to the real one
    assert model.producer("fc/MatMul", 0)[0].name == "flatten/Reshape"
    op, index = model.producer("conv1/Conv2D", 0, skip_types=("Cast", "TransData"))
    assert (op.name, index) == ("data", 0)
    assert model.producer("conv1/Conv2D", 3) is None
    assert model.producer("cond/then/Relu", 0)[0].name == "cond/then/arg0"
    with pytest.raises(GeGraphError, match="4 inputs, not an input 7"):
        model.producer("conv1/Conv2D", 7)


def test_descriptors(model):
    conv = model.op("conv1/Conv2D")
    x, w, bias, offset = conv.input_descs
    assert (x.name, x.dtype, x.layout, x.shape, x.origin_format) == (
        "x",
        "float16",
        "NC1HWC0",
        (1, 1, 28, 28, 16),
        "NHWC",
    )
    assert (w.layout, bias.shape, offset.dtype, offset.shape) == ("FRACTAL_Z", (8,), "undefined", ())
    (y,) = conv.output_descs
    assert (y.origin_name, y.origin_output_index, y.origin_shape) == ("conv1/Relu", 0, (1, 28, 28, 8))
    assert y.datadump_origin_format == "NHWC" and y.extra == {"size": 25088, "real_dim_cnt": 4}
    (nz,) = model.op("fc/MatMul").output_descs
    assert (nz.layout, nz.shape, nz.origin_shape, nz.origin_format) == ("FRACTAL_NZ", (1, 1, 16, 16), (1, 10), "ND")
    assert model.op("data").output_descs[0].dtype == "float32" and model.op("pred").output_descs[0].dtype == "bool"
    assert model.op("trans_Cast_0").output_descs[0].origin_name == ""
    assert model.op("trans_Cast_0").output_descs[0].origin_output_index is None


def test_attributes_and_fusion_records(model):
    conv = model.op("conv1/Conv2D")
    assert conv.pass_names == ["ConvBiasaddFusionPass", "TbeConvElemwiseFusionPass"]
    assert conv.pass_name == "ConvBiasaddFusionPass, TbeConvElemwiseFusionPass"
    assert conv.original_op_names == ["conv1/Conv2D", "conv1/BiasAdd", "conv1/Relu"]
    assert conv.is_multiop is True and conv.l1_fusion_sub_graph_no == 0
    assert conv.attrs["pads"] == [1, 1, 1, 1] and conv.attrs["alpha"] == 0.5
    assert conv.attrs["_op_comment"] == 'café "fused"\\n'  # octal UTF-8 bytes, escaped quotes and backslash
    mm = model.op("fc/MatMul")
    assert mm.pass_name == "MatMulBiasAddFusionPass" and mm.original_op_names == ["fc/MatMul", "fc/BiasAdd"]
    assert mm.attrs["transpose_x1"] is False and mm.is_multiop is None
    assert mm.fusion == {"pass_name": "MatMulBiasAddFusionPass", "original_ops": ["fc/MatMul", "fc/BiasAdd"]}
    assert model.op("trans_Cast_0").fusion is None and model.op("trans_Cast_0").attrs == {"dst_type": 1}


# -- the OpGraph --------------------------------------------------------------------------------------------
def test_graph_from_ge(build_file, model):
    g = graph_from_ge(build_file)
    assert g == g and g.source == "ge" and len(g) == 20
    assert OpGraph.from_ge(build_file).nx.number_of_edges() == g.nx.number_of_edges()
    assert g.meta["model"] == "ge_default_20240101_1" and g.meta["op_count"] == 20 and g.meta["format"] == "text"
    conv = g.op("conv1/Conv2D")
    assert conv["type"] == "Conv2D" and conv["module"] == "conv1" and conv["direction"] == "forward"
    assert conv["fusion"] == {
        "pass_name": "ConvBiasaddFusionPass, TbeConvElemwiseFusionPass",
        "original_ops": ["conv1/Conv2D", "conv1/BiasAdd", "conv1/Relu"],
    }
    assert conv["attrs"]["pads"] == [1, 1, 1, 1] and g.op("trans_Cast_0")["fusion"] is None
    # subgraph ids restart at 0: order is the position in the file, and a note says so
    assert g.op("NetOutput")["order"] == 14 and g.op("cond/then/Relu")["order"] == 16
    assert any("ids are missing or repeated" in n for n in g.notes)
    data = g.nx.get_edge_data("trans_TransData_1", "conv1/Conv2D")["0"]
    assert data == {
        "kind": "data",
        "tensor": "trans_TransData_1:0",
        "dst_tensor": "x",
        "slot": "0",
        "inferred": False,
        "match": "",
    }
    control = g.nx.get_edge_data("trans_TransData_1", "fc/MatMul")["control"]
    assert control["kind"] == "control" and control["tensor"] == "" and control["slot"] == "2"
    assert g.producers("fc/MatMul") == ["flatten/Reshape", "fc/weights"]
    assert g.consumers("conv1/Conv2D") == ["trans_TransData_6"]  # the control edge to cond/If is not data
    assert g.nx.has_edge("conv1/Conv2D", "cond/If") and g.nx.has_edge("cond/then/arg0", "cond/then/Relu")
    sub = g.subgraph("fc/MatMul", up=2, down=2)
    assert {"flatten/Reshape", "trans_TransData_6", "fc/weights", "trans_TransData_10", "trans_Cast_11"} <= set(sub)
    assert sub.op("fc/MatMul")["fusion"]["original_ops"] == ["fc/MatMul", "fc/BiasAdd"]
    assert "trans_TransData_1" in sub  # over the control edge
    assert "trans_TransData_1" not in g.subgraph("fc/MatMul", up=2, down=2, control_edges=False)
    # the "/" scopes are the hierarchy: collapse works
    assert g.hierarchy["cond/then/Relu"] == "module:cond/then" and g.hierarchy["module:cond/then"] == "module:cond"
    blocks = g.collapse(depth=1)
    assert {"module:conv1", "module:fc", "module:cond", "data", "trans_Cast_0"} <= set(blocks)
    assert blocks.op("module:conv1")["members"] == 3 and blocks.op("module:conv1")["fused_members"] == 1
    assert g.to_json()["nodes"]  # exports take the plain attributes


def test_name_clashes_across_graphs_are_renamed_and_noted(tmp_path):
    text = """graph { name: "main" op { name: "a" type: "Data" } op { name: "b" type: "If" input: "a:0"
      subgraph_name: "sub" } }
    graph { name: "sub" op { name: "a" type: "Data" } op { name: "r" type: "Relu" input: "a:0" } }"""
    path = tmp_path / "g.txt"
    path.write_text(text)
    g = graph_from_ge(path)
    assert set(g) == {"a", "b", "a#sub", "r"} and g.producers("r") == ["a#sub"] and g.producers("b") == ["a"]
    assert any("'a#sub'" in n for n in g.notes)
    assert g.op("a")["order"] == 0 and g.op("r")["order"] == 3


# -- JSON form ---------------------------------------------------------------------------------------------
def test_json_form_gives_the_same_model(tmp_path, model):
    raw = parse_text(BUILD_GRAPH)
    for plain_maps in (False, True):
        path = tmp_path / f"graph_{plain_maps}.json"  # the extension does not matter: content does
        path.write_text(json.dumps(ascend_json(raw, plain_maps=plain_maps), indent=2, ensure_ascii=False))
        from_json = read_ge_model(path)
        assert from_json.format == "json"
        assert from_json == model
    # a single GraphDef, and values the JSON form writes as strings (int64, %g floats, enum numbers)
    graph = {
        "name": "g",
        "op": [
            {"name": "a", "type": "Data", "id": "0", "output_desc": [{"dtype": 27, "shape": {"dim": ["2", 3]}}]},
            {
                "name": "b",
                "type": "Mul",
                "input": ["a:0"],
                "attr": [
                    {"key": "k", "value": {"f": "1e-05"}},
                    {"key": "n", "value": {"i": "-7"}},
                    {"key": "s", "value": {"s": 'caf\\303\\251 \\"q\\"'}},
                    {"key": "l", "value": {"list": {"s": ["raw\\303"], "val_type": 1}}},
                ],
            },
        ],
    }
    path = tmp_path / "ge_graph.txt"
    path.write_text(json.dumps(graph))
    m = read_ge_model(path)
    a, b = m.op("a"), m.op("b")
    assert m.name == "g" and a.id == 0 and a.output_descs[0].dtype == "bfloat16" and a.output_descs[0].shape == (2, 3)
    assert b.attrs == {"k": 1e-05, "n": -7, "s": 'café "q"', "l": ["raw\\303"]}


# -- the writer ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_writer_round_trip(tmp_path, model, fmt):
    path = write_ge_model(tmp_path / f"copy.{fmt}", model, fmt=fmt)
    again = read_ge_model(path)
    assert again == model and again.format == fmt
    assert graph_from_ge(again).nx.number_of_edges() == graph_from_ge(model).nx.number_of_edges()


def test_writer_round_trip_of_attribute_subgraphs(tmp_path):
    text = """graph { name: "main" op { name: "w" type: "While" attr { key: "body" value { g { name: "body"
      op { name: "body/x" type: "Add" attr { key: "alpha" value { f: inf } } } } } }
      attr { key: "branches" value { list { g { name: "b0" } g { name: "b1" } val_type: VT_LIST_GRAPH } } }
      attr { key: "empty" value { } } }
      op { name: "k" type: "Const" attr { key: "value" value { t { desc { dtype: DT_INT32 shape { dim: 2 } } } } }
        attr { key: "like" value { td { name: "x" dtype: DT_FLOAT16 layout: "ND" shape { dim: 2 } } } }
        attr { key: "tds" value { list { td { dtype: DT_BF16 } td { dtype: DT_FLOAT }
          val_type: VT_LIST_TENSOR_DESC } } }
        attr { key: "dt" value { dt: 27 } } } }"""
    path = tmp_path / "g.txt"
    path.write_text(text)
    m = read_ge_model(path)
    assert [(g.name, g.parent_op, g.parent_attr) for g in m.graphs] == [
        ("main", "", ""),
        ("body", "w", "body"),
        ("b0", "w", "branches"),
        ("b1", "w", "branches"),
    ]
    assert m.op("w").attrs == {"body": "body", "branches": ["b0", "b1"], "empty": None}
    assert math.isinf(m.op("body/x").attrs["alpha"])
    k = m.op("k").attrs
    assert k["value"] == {
        "desc": {"name": "", "dtype": "int32", "layout": "", "shape": [2], "attrs": {}},
        "has_data": False,
    }
    assert k["like"] == {"name": "x", "dtype": "float16", "layout": "ND", "shape": [2], "attrs": {}}
    assert [t["dtype"] for t in k["tds"]] == ["bfloat16", "float32"] and k["dt"] == "bfloat16"
    for fmt in ("text", "json"):
        assert read_ge_model(write_ge_model(tmp_path / f"copy_{fmt}", m, fmt=fmt)) == m


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_write_ge_graph_of_dicts(tmp_path, fmt):
    odd = 'quote " backslash \\ newline \n tab \t café 中文 \x01'
    ops = [
        {"name": "x", "type": "Data", "output_descs": [tensor_desc("float16", (1, 16), "ND")]},
        {"name": "init", "type": "NoOp"},
        {
            "name": "fc/MatMul",
            "type": "MatMulV2",
            "inputs": ["x:0", ("init", -1)],
            "pass_name": "MatMulBiasAddFusionPass",
            "original_ops": ["fc/MatMul", "fc/BiasAdd"],
            "attrs": {"odd": odd, "flags": [True, False], "scale": [1, 2.5], "none": [], "grid": [[1, 2], [3]]},
            "input_descs": [tensor_desc("float16", (1, 16), name="x1")],
            "output_descs": [
                tensor_desc(
                    "bfloat16",
                    (1, 1, 16, 16),
                    "FRACTAL_NZ",
                    origin_name="fc/BiasAdd",
                    origin_output_index=0,
                    origin_format="ND",
                    origin_shape=(1, 10),
                )
            ],
            "extra": {"stream_id": 2},
        },
        {"name": "cond", "type": "If", "inputs": ["fc/MatMul:0"], "subgraph_names": ["then"]},
    ]
    path = write_ge_graph(
        tmp_path / "ge_proto_00000001_Build.txt", ops, fmt=fmt, subgraphs={"then": [{"name": "t", "type": "Data"}]}
    )
    if fmt == "text":
        written = path.read_text()
        assert 'caf\\303\\251 \\344\\270\\255\\346\\226\\207 \\001"' in written and '\\"' in written
        assert "val_type: VT_LIST_STRING" in written and "dtype: DT_BF16" in written
    m = read_ge_model(path)
    assert m.name == "ge_default" and [g.name for g in m.graphs] == ["ge_default_1", "then"] and m.problems == []
    mm = m.op("fc/MatMul")
    assert mm.id == 2 and mm.inputs == (GeInput("x", 0), GeInput("init", -1)) and mm.extra == {"stream_id": 2}
    assert mm.pass_name == "MatMulBiasAddFusionPass" and mm.original_op_names == ["fc/MatMul", "fc/BiasAdd"]
    assert mm.attrs["odd"] == odd and mm.attrs["flags"] == [True, False] and mm.attrs["scale"] == [1.0, 2.5]
    assert mm.attrs["none"] == [] and mm.attrs["grid"] == [[1, 2], [3]]
    (out,) = mm.output_descs
    assert (out.dtype, out.layout, out.shape, out.origin_name, out.origin_output_index, out.origin_shape) == (
        "bfloat16",
        "FRACTAL_NZ",
        (1, 1, 16, 16),
        "fc/BiasAdd",
        0,
        (1, 10),
    )
    assert m.graph("then").parent_op == "cond"


def test_writer_errors(tmp_path):
    with pytest.raises(GeGraphError, match="op 0 has no name"):
        write_ge_graph(tmp_path / "g.txt", [{"type": "Data"}])
    with pytest.raises(GeGraphError, match=r"op 'a' attr 'bad'.*set"):
        write_ge_graph(tmp_path / "g.txt", [{"name": "a", "attrs": {"bad": {1, 2}}}])
    with pytest.raises(GeGraphError, match="mixing"):
        write_ge_graph(tmp_path / "g.txt", [{"name": "a", "attrs": {"bad": [1, "x"]}}])
    with pytest.raises(GeGraphError, match="fmt must be one of"):
        write_ge_graph(tmp_path / "g.txt", [], fmt="yaml")


# -- text syntax, escapes, bytes -----------------------------------------------------------------------------
def test_text_format_syntax_variants():
    text = """# a comment
    a: 1 b: -2 c: 1.5e-3 d: inf e: -inf f: nan g: DT_FLOAT16 h: true i: 0x1F j: 017 k: 2.5f
    m { x: 1 } m: { x: 2 } m < x: 3 >  # same field, three spellings
    s: 'single' t: "adj" 'acent' "\\x41\\101\\u00e9"; u: "", v: "a" 'b' w: "it's" 'say "hi"',
    dim: [1, 2, 3] dim: 4 ops: [{ n: 1 }, { n: 2 }] empty: []
    """
    msg = parse_text(text)
    assert msg["a"] == [1] and msg["b"] == [-2] and msg["c"] == [1.5e-3] and msg["d"] == [math.inf]
    assert msg["e"] == [-math.inf] and math.isnan(msg["f"][0]) and msg["g"] == ["DT_FLOAT16"]
    assert msg["h"] == [True] and msg["i"] == [31] and msg["j"] == [15] and msg["k"] == [2.5]
    assert msg["m"] == [{"x": [1]}, {"x": [2]}, {"x": [3]}]
    assert msg["s"] == ["single"] and msg["t"] == ["adjacentAAé"] and msg["u"] == [""] and msg["v"] == ["ab"]
    assert msg["w"] == ['it\'ssay "hi"']
    assert msg["dim"] == [1, 2, 3, 4] and msg["ops"] == [{"n": [1]}, {"n": [2]}] and msg["empty"] == []


def test_non_utf8_bytes_never_leak_surrogates(tmp_path):
    path = tmp_path / "g.txt"
    # a raw invalid byte, escaped invalid bytes, an escaped lone surrogate, a UTF-8 sequence split over literals
    path.write_bytes(
        b'op { name: "raw\xff" type: "\\377\\376" attr { key: "k" value { s: "\\ud800" "\\303" "\\251" } } }'
    )
    m = read_ge_model(path)
    op = m.ops[0]
    texts = [op.name, op.type, op.attrs["k"]]
    assert texts == ["raw\ufffd", "\ufffd\ufffd", "\ufffd\ufffd\ufffdé"]
    assert not any(0xD800 <= ord(c) <= 0xDFFF for t in texts for c in t)
    assert c_escape(b"\xff\x00ok") == "\\377\\000ok"


# -- errors and problems -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('graph { op { name: "a" } } }', r"line 1, column 28: unbalanced '\}': no message is open"),
        ('graph { op { name: "a" >\n}', r"line 1, column 24: '>' closes a message opened with '\{'"),
        ('graph {\n  op { name: "a }\n}', r"line 2, column 14: unterminated string"),
        ('graph { op { name: "a" } ', r"line 1, column 26: the file ends inside 1 open message.*line 1, column 1"),
        ('graph { name "a" }', r"line 1, column 9: expected ':' between field 'name'"),
        ('graph { name: "a" @ }', r"line 1, column 19: unexpected character: '@'"),
        ('graph { name: "\\q" }', r"line 1, column 15: field 'name': invalid escape"),
        ("graph { 12 }", r"line 1, column 9: a value without a field name"),
        ("graph { dim: [1, 2 }", r"line 1, column 20: '\}' inside the list of field 'dim'"),
        (
            "graph { dim: [1, 2",
            r"line 1, column 19: the file ends inside the list of field 'dim' opened at line 1, column 9",
        ),
        ("graph { ] }", r"line 1, column 9: unbalanced '\]': no list is open"),
    ],
)
def test_text_errors_name_file_line_and_column(tmp_path, text, match):
    path = tmp_path / "ge_proto_00000001_Build.txt"
    path.write_text(text)
    with pytest.raises(GeGraphError, match=r"ge_proto_00000001_Build\.txt: " + match):
        read_ge_model(path)


def test_truncated_file(tmp_path):
    path = tmp_path / "g.txt"
    half = len(BUILD_GRAPH) // 2
    for cut in (BUILD_GRAPH.index("\n", half) + 1, half, BUILD_GRAPH.index('"', half) + 3):  # a line, a token, a string
        path.write_text(BUILD_GRAPH[:cut])
        with pytest.raises(GeGraphError, match=r"g\.txt: line \d+, column \d+: .*truncated file"):
            read_ge_model(path)


@pytest.mark.parametrize("levels", [100_000, 1_000_000])
def test_deep_nesting_is_an_error_not_a_recursion_error(tmp_path, levels):
    path = tmp_path / "deep.txt"
    path.write_text("a { " * levels + "}" * levels)
    with pytest.raises(GeGraphError, match=rf"deep\.txt: line 1, column \d+: messages nested deeper than {MAX_DEPTH}"):
        read_ge_model(path)
    path = tmp_path / "deep.json"
    path.write_text('{"graph": [' + '{"a": ' * levels + "1" + "}" * levels + "]}")
    with pytest.raises(GeGraphError, match=r"deep\.json: .*nested too deeply"):
        read_ge_model(path)


def test_files_that_are_not_graphs(tmp_path):
    cases = {
        "empty.txt": ("", "the file is empty"),
        "blank.json": (" \n\t", "the file is empty"),
        "other.json": ('{"model": "resnet", "layers": 3}', r"not a GE graph.*found fields \['layers', 'model'\]"),
        "list.json": ("[1, 2]", "a JSON list must hold graph objects"),
        "broken.json": ('{"graph": [{"name": "g",]}', r"line 1, column 25: not valid JSON: Expecting property name"),
        "text.txt": ('name: "m"\nversion: 2\n', r"not a GE graph.*\['name', 'version'\]"),
    }
    for name, (content, match) in cases.items():
        path = tmp_path / name
        path.write_text(content)
        with pytest.raises(GeGraphError, match=rf"{name.replace('.', '[.]')}: {match}"):
            read_ge_model(path)
    with pytest.raises(GeGraphError, match=r"nothing\.txt: no such file"):
        read_ge_model(tmp_path / "nothing.txt")


def test_problems_are_recorded_not_dropped(tmp_path):
    text = """graph { name: "g"
      op { name: "a" type: "Data" }
      op { name: "b" type: "Add" input: "a:0" input: "ghost:0" input: "no_index" input: "a:x" input: "a:-3" }
      op { name: "a" type: "Const" input: "b:0" }
      op { name: "c" type: "If" subgraph_name: "missing" }
      op { name: "d" type: "Add" attr { key: "n" value { i: "twelve" } } }
    }"""
    path = tmp_path / "g.txt"
    path.write_text(text)
    m = read_ge_model(path)
    problems = "\n".join(m.problems)
    assert "op 'b' (graph 'g') input 1 'ghost:0': no op named 'ghost'" in problems
    for bad in ("'no_index'", "'a:x'", "'a:-3'"):
        assert f"{bad}: not of the form 'op:index'" in problems
    assert "op 'a' appears 2 times in graph 'g'" in problems and "names subgraph 'missing'" in problems
    assert "op 'd', attr 'n': cannot read 'twelve' as int" in problems
    assert len(m.problems) == 7 and m.op("a").type == "Data" and m.op("d").attrs == {"n": "twelve"}
    g = graph_from_ge(m)
    assert set(m.problems) <= set(g.notes) and g.producers("b") == ["a"] and len(g) == 4
    assert not g.nx.has_edge("b", "a")  # the second 'a' is not in the graph, nor are its inputs


def test_problems_name_the_descriptor_and_attribute_they_are_in(tmp_path):
    """A value that cannot be read is named by where it is: an op's descriptor, an attribute of one, an attribute
    list inside one, a descriptor inside an attribute (the texts the converter makes only when it tells one)."""
    text = """graph { name: "g"
      op { name: "e" type: "Add"
           output_desc { dtype: DT_FLOAT shape { dim: "x" }
                         attr { key: "k" value { i: "y" } }
                         attr { key: "l" value { list { i: "z" val_type: VT_LIST_INT } } } }
           input_desc { attr { key: "m" value { td { shape { dim: "w" } } } } } }
    }"""
    path = tmp_path / "g.txt"
    path.write_text(text)
    assert read_ge_model(path).problems == [
        "op 'e' input_desc 0, attr 'm': cannot read 'w' as int; kept as written",
        "op 'e' output_desc 0: cannot read 'x' as int; kept as written",
        "op 'e' output_desc 0, attr 'k': cannot read 'y' as int; kept as written",
        "op 'e' output_desc 0, attr 'l': cannot read 'z' as int; kept as written",
    ]


def test_folders(tmp_path):
    (tmp_path / "ge_proto_00000001_Build.txt").write_text(BUILD_GRAPH)
    (tmp_path / "ge_proto_00000001_PreRunBegin.txt").write_text('graph { op { name: "x" } }')
    assert read_ge_model(tmp_path).path.endswith("ge_proto_00000001_Build.txt")
    (tmp_path / "ge_proto_00000002_Build.txt").write_text(BUILD_GRAPH)
    with pytest.raises(GeGraphError, match=r"2 Build graphs.*00000001_Build\.txt, ge_proto_00000002_Build\.txt"):
        read_ge_model(tmp_path)
    single = tmp_path / "single"
    single.mkdir()
    (single / "graph.json").write_text(json.dumps({"name": "g", "op": [{"name": "x", "type": "Data"}]}))
    assert isinstance(read_ge_model(single), GeModel) and read_ge_model(single).op("x").type == "Data"
    (single / "notes.txt").write_text("x")
    with pytest.raises(GeGraphError, match=r"2 other \.txt/\.json files \(graph\.json, notes\.txt\)"):
        read_ge_model(single)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(GeGraphError, match="no GE graph here"):
        graph_from_ge(empty)


# -- fusion_result.json --------------------------------------------------------------------------------------
def test_read_fusion_result_of_several_sessions(tmp_path):
    first = {
        "graph_fusion": {
            "ConvBiasaddFusionPass": {"effect_times": "2", "match_times": "2"},
            "MatMulBiasAddFusionPass": {"effect_times": "1", "match_times": "3"},
        },
        "session_and_graph_id": "0_1",
        "ub_fusion": {
            "TbeConvElemwiseFusionPass": {"effect_times": "1", "match_times": "1", "repository_hit_times": "0"}
        },
    }
    second = {"graph_fusion": {"ConvBiasaddFusionPass": {"effect_times": 1}}, "session_and_graph_id": "0_2"}
    path = tmp_path / "fusion_result.json"
    path.write_text(json.dumps(first, indent=4) + "\n" + json.dumps(second, indent=4) + "\n")
    df = read_fusion_result(path)
    assert list(df.columns) == ["session", "session_and_graph_id", "kind", "pass_name", "effect_times", "match_times"]
    assert len(df) == 4 and df["effect_times"].dtype == "int64" and list(df["session"]) == [0, 0, 0, 1]
    assert df.groupby("pass_name")["effect_times"].sum().to_dict() == {
        "ConvBiasaddFusionPass": 3,
        "MatMulBiasAddFusionPass": 1,
        "TbeConvElemwiseFusionPass": 1,
    }
    ub = df[df["kind"] == "ub_fusion"].iloc[0]
    assert ub["pass_name"] == "TbeConvElemwiseFusionPass" and ub["match_times"] == 1
    assert df["match_times"].isna().tolist() == [False, False, False, True]


def test_read_fusion_result_errors(tmp_path):
    path = tmp_path / "fusion_result.json"
    path.write_text('{"graph_fusion": {}}\n{"graph_fusion": {"P": {"effect_times": 1},}}')
    with pytest.raises(GeGraphError, match=r"fusion_result\.json: line 2, column 44: not valid JSON"):
        read_fusion_result(path)
    path.write_text('{"graph": []}')
    with pytest.raises(GeGraphError, match=r"not a fusion_result\.json"):
        read_fusion_result(path)
    path.write_text('{"ub_fusion": {"P": {"effect_times": "many"}}}')
    with pytest.raises(GeGraphError, match=r"object 0, ub_fusion, pass 'P', effect_times: expected a whole number"):
        read_fusion_result(path)
    path.write_text("")
    with pytest.raises(GeGraphError, match="holds no JSON object"):
        read_fusion_result(path)


@pytest.mark.parametrize("cls", [GeTensorDesc, GeOp])
def test_written_out_inits_take_the_fields_in_order_with_their_defaults(cls):
    """GeTensorDesc and GeOp write their ``__init__`` out (a graph makes thousands): it takes what the fields
    declare, a dict field left out getting a new dict."""
    import inspect

    params = inspect.signature(cls).parameters
    assert tuple(params) == cls._fields
    for name, param in params.items():
        default = cls._defaults.get(name, inspect.Parameter.empty)
        assert param.default is None if isinstance(default, Factory) else param.default == default
    made = cls(*(["op"] if cls is GeOp else []))
    again = cls(*(["op"] if cls is GeOp else []))
    assert made == again and made.attrs == {} and made.attrs is not again.attrs


def test_models_pickle_with_their_lookups(model):
    import pickle

    again = pickle.loads(pickle.dumps(model))
    assert again == model and again.path == model.path and len(again) == len(model)
    assert [op.name for op in again.ops] == [op.name for op in model.ops]
    assert again.op(model.ops[-1].name) == model.ops[-1] and dict(again.by_name) == dict(model.by_name)
    assert "_index=" not in repr(again.graphs[0]) and "_ops=" not in repr(again)  # (not fields)
