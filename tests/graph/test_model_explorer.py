"""Model Explorer node data on real models: the tiny encoder captured in bfloat16 (with its planted faulty GELU)
and float32, compared, and exported for its torch.export program, its ONNX export, nbprec's own graph, and the
NPU demo's GE graph. Keys are checked against the real node ids of each graph (and, where the package is
installed, against Model Explorer's own PyTorch adapter); the browser test loads them in Model Explorer."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings

import pytest

import nbprec
from nbprec.graph.model_explorer import METRICS, export_model_explorer, thresholds
from nbprec.graph.model_explorer_match import OpMatch, align, kind_score
from nbprec.graph.model_explorer_targets import TargetNode, from_onnx

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

FAULTY_OP = "Functional.gelu.1.forward"
#: train_step's loss (float32 cross-entropy of the logits), computed outside the model
LOSS_OPS = ["Tensor.float.0.forward", "Functional.cross_entropy.0.forward", "Tensor.mul.0.forward"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(comparison of the faulty bfloat16 run with the float32 run, float32 model, its input ids)."""
    from nbprec.capture import capture, seed_all
    from nbprec.demo.tiny import build_tiny, train_step

    root = tmp_path_factory.mktemp("tiny")
    for name, dtype, faulty in (("fp32", "float32", False), ("bf16", "bfloat16", True)):
        seed_all(0)
        model, ids, labels = build_tiny(dtype, faulty=faulty)
        with capture(model, root / name, mode="tensor"):
            train_step(model, ids, labels)  # forward and backward
    comp = nbprec.compare(root / "bf16", root / "fp32", progress=None)
    model, ids, _ = build_tiny("float32")
    return comp, model.eval(), ids


def forward_api_ops(comp):
    from nbprec.graph.build import is_module_call

    ops = comp.ops
    return [o for o, d in zip(ops["op"], ops["direction"], strict=True) if d == "forward" and not is_module_call(o)]


def read(path):
    return json.loads(path.read_text(encoding="utf-8"))


def test_exported_program_keys_are_the_fx_node_names(tiny, tmp_path):
    comp, model, ids = tiny
    program = torch.export.export(model, (ids,))
    out = export_model_explorer(comp, tmp_path, target="exported_program", source=program)
    fx = {n.name: n for n in program.graph.nodes}
    status = read(out.node_data_files["status"])
    assert list(status) == ["graph"] == out.graph_ids
    results = status["graph"]["results"]
    assert set(results) <= set(fx)
    # every forward API op of the capture has its node; backward ops and module calls are skipped, not unmatched
    # the loss, computed outside the model, has no node in its program: named as unmatched
    assert out.unmatched == LOSS_OPS and set(out.matched) | set(LOSS_OPS) == set(forward_api_ops(comp))
    assert out.methods == {"module+order": len(out.matched)}
    skipped = {reason.split(" (")[0]: len(names) for reason, names in out.skipped.items()}
    assert skipped["backward op"] > 50 and skipped["module call"] >= 25
    gelu = fx[out.matched[FAULTY_OP]]
    assert gelu.name == "gelu_1" and str(gelu.target.overloadpacket) == "aten.gelu"
    assert list(gelu.meta["nn_module_stack"].values())[-1][0] == "layers.1"
    assert results["gelu_1"] == {"value": "introduced", "bgColor": "#a50026"}
    assert results[out.matched["Functional.linear.11.forward"]]["value"] == "fail"
    assert {r["value"] for k, r in results.items() if k not in ("gelu_1", "linear_11")} == {"pass"}
    # every linear call lands on the linear node of its own module, in call order
    for n in range(14):
        assert out.matched[f"Functional.linear.{n}.forward"] == ("linear" if n == 0 else f"linear_{n}")
    row = comp.ops.set_index("op").loc[FAULTY_OP]
    cosine = read(out.node_data_files["cosine"])["graph"]
    assert math.isclose(cosine["results"]["gelu_1"]["value"], row["out_cosine"], rel_tol=1e-8)
    one_minus = read(out.node_data_files["1-cosine"])["graph"]["results"]["gelu_1"]["value"]
    assert math.isclose(one_minus, 1 - row["out_cosine"], rel_tol=1e-6)
    assert cosine["thresholds"] == thresholds("cosine") and cosine["hideAggregatedStats"] == ["sum"]
    assert out.model_file == tmp_path / "nbprec.pt2" and out.model_file.stat().st_size > 0
    assert "gelu_1" in str(out) and out.command().endswith("nbprec.status.json")


def test_exported_program_graph_json_is_what_model_explorer_shows(tiny, tmp_path):
    """Our graph JSON of a .pt2 equals Model Explorer's own adapter output: ids, labels, namespaces, edges."""
    adapter = pytest.importorskip("model_explorer.pytorch_exported_program_adapter_impl")
    from model_explorer.consts import DEFAULT_SETTINGS

    comp, model, ids = tiny
    out = export_model_explorer(comp, tmp_path, target="exported_program", source=model, inputs=(ids,))
    graph = adapter.PytorchExportedProgramAdapterImpl(torch.export.load(str(out.model_file)), DEFAULT_SETTINGS)
    theirs = graph.convert()["graphs"][0]
    ours = read(out.graph_file)["graphs"][0]
    assert theirs.id == ours["id"] == "graph"

    def edges(es):
        return [(e["sourceNodeId"], e["sourceNodeOutputId"], e["targetNodeInputId"]) for e in es]

    theirs_nodes = {n.id: (n.label, n.namespace, edges(map(vars, n.incomingEdges))) for n in theirs.nodes}
    ours_nodes = {n["id"]: (n["label"], n["namespace"], edges(n["incomingEdges"])) for n in ours["nodes"]}
    assert theirs_nodes == ours_nodes
    for path in out.node_data_files.values():
        assert set(read(path)["graph"]["results"]) <= set(theirs_nodes)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.export internals
def test_a_decomposed_program_gets_the_output_node_of_each_call(tiny, tmp_path):
    comp, model, ids = tiny
    program = torch.export.export(model, (ids,)).run_decompositions()
    out = export_model_explorer(comp, tmp_path, target="exported_program", source=program, graph_json=False)
    assert out.unmatched == LOSS_OPS and out.graph_file is None
    nodes = list(program.graph.nodes)
    for op in ("Functional.linear.0.forward", "Torch.matmul.0.forward", FAULTY_OP):
        node = next(n for n in nodes if n.name == out.matched[op])
        same_call = [n for n in nodes if n.meta.get("torch_fn") == node.meta["torch_fn"]]
        assert node is same_call[-1]  # the last node of the call holds its output
    linear0 = next(n for n in nodes if n.name == out.matched["Functional.linear.0.forward"])
    assert str(linear0.target.overloadpacket) == "aten.view"  # linear became view, permute, addmm, view


def test_onnx_keys_are_the_onnx_node_names(tiny, tmp_path):
    onnx = pytest.importorskip("onnx")
    comp, model, ids = tiny
    path = tmp_path / "tiny.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(model, (ids,), str(path), dynamo=False)
        except Exception as exc:  # the TorchScript exporter is deprecated; without it there is nothing to test
            pytest.skip(f"torch.onnx.export(dynamo=False) failed: {exc}")
    out = export_model_explorer(comp, tmp_path / "me", target="onnx", source=path)
    proto = onnx.load(str(path))
    by_name = {n.name: n for n in proto.graph.node}
    assert out.graph_ids == [proto.graph.name] == ["main_graph"]
    results = read(out.node_data_files["status"])["main_graph"]["results"]
    assert set(results) <= set(by_name)
    assert out.matched[FAULTY_OP] == "/layers.1/Gelu" and results["/layers.1/Gelu"]["value"] == "introduced"
    for n in range(12):  # a linear lands on the node holding its output: the bias Add (or Gemm), not the MatMul
        assert by_name[out.matched[f"Functional.linear.{n}.forward"]].op_type in ("Add", "Gemm")
    # what the exporter folded away or merged is reported, by name
    assert "Tensor.__getitem__.0.forward" in out.unmatched
    assert len(out.matched) + len(out.unmatched) == len(forward_api_ops(comp))
    assert set(LOSS_OPS) <= set(out.unmatched) and len(out.unmatched) <= len(LOSS_OPS) + 3
    summary = read(out.summary_file)
    assert summary["unmatched"] == out.unmatched and summary["files"]["model"] == str(path)
    assert f"unmatched ({len(out.unmatched)})" in str(out)
    graph = read(out.graph_file)["graphs"][0]
    assert {n["namespace"] for n in graph["nodes"] if n["id"] == "/layers.1/Gelu"} == {"main_graph/layers.1"}


def test_onnx_torch_exporter_metadata_gives_module_unit_and_kind():
    """Nodes of the torch.export-based ONNX exporter carry their fx node; model-explorer-onnx namespaces them by
    the ``namespace`` metadata."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    def node(op_type, inputs, outputs, name, fx_name, target):
        n = helper.make_node(op_type, inputs, outputs, name=name)
        scopes = ["", "layers.0", "layers.0.ff1", fx_name]
        meta = {
            "namespace": f": M/layers.0: E/layers.0.ff1: torch.nn.modules.linear.Linear/{fx_name}: {target}",
            "pkg.torch.onnx.name_scopes": repr(scopes),
            "pkg.torch.onnx.fx_node": f"%{fx_name} : [num_users=1] = call_function[target={target}](args = ())",
        }
        for key, value in meta.items():
            n.metadata_props.add(key=key, value=value)
        return n

    nodes = [
        node("MatMul", ["x", "w"], ["h"], "node_MatMul_1", "linear_4", "torch.ops.aten.linear.default"),
        node("Add", ["h", "b"], ["y"], "node_linear_4", "linear_4", "torch.ops.aten.linear.default"),
    ]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "main_graph",
        [value(v, TensorProto.FLOAT, [2]) for v in ("x", "w", "b")],
        [value("y", TensorProto.FLOAT, [2])],
    )
    target = from_onnx(helper.make_model(graph))
    assert [(n.module, n.unit, n.kind) for n in target.nodes] == [("layers.0.ff1", "linear_4", "linear")] * 2
    assert target.kinds == "torch"
    assert target.nodes[1].namespace == (
        "main_graph/: M/layers.0: E/layers.0.ff1: torch.nn.modules.linear.Linear/"
        "linear_4: torch.ops.aten.linear.default"
    )
    assert target.nodes[1].inputs == [("node_MatMul_1", "0", "0")]


def test_nbprec_graph_namespaces_follow_the_module_calls(tiny, tmp_path):
    comp, _, _ = tiny
    out = export_model_explorer(comp, tmp_path, target="nbprec")
    graph = read(out.graph_file)["graphs"][0]
    nodes = {n["id"]: n for n in graph["nodes"]}
    assert out.unmatched == [] and len(out.matched) == len(nodes)  # forward and backward ops alike
    assert nodes[FAULTY_OP]["namespace"] == "TinyEncoder/layers.1 (EncoderLayer)"
    assert nodes[FAULTY_OP]["label"] == "gelu.1"
    attrs = {a["key"]: a["value"] for a in nodes[FAULTY_OP]["attrs"]}
    assert attrs["nbprec status"] == "introduced" and attrs["nbprec op"] == FAULTY_OP
    assert (
        nodes["Functional.linear.0.forward"]["namespace"]
        == "TinyEncoder/layers.0 (EncoderLayer)/attn (SelfAttention)/query (Linear)"
    )
    assert "backward" in nodes["Functional.gelu.1.backward"]["namespace"]
    linear11 = nodes["Functional.linear.11.forward"]
    assert [e["sourceNodeId"] for e in linear11["incomingEdges"]] == ["Functional.gelu.1.forward"]
    for path in out.node_data_files.values():
        assert set(read(path)[out.graph_ids[0]]["results"]) <= set(nodes)
    layer = graph["groupNodeAttributes"]["TinyEncoder/layers.1 (EncoderLayer)"]
    assert layer["nbprec first failing op"] == FAULTY_OP and layer["nbprec status"] == "introduced"
    assert layer["nbprec module"] == "Module.layers.1.EncoderLayer.forward.0"  # the layer is that module call
    assert layer["nbprec module output"].startswith("pass, cosine 0.99")  # its own output: the error faded
    assert graph["groupNodeAttributes"][""]["nbprec verdict"] == comp.verdict().text
    configs = {c["namespaceRegex"]: c["borderColor"] for c in graph["groupNodeConfigs"]}
    assert configs[r"^TinyEncoder/layers\.1 \(EncoderLayer\)$"] == "#a50026"
    assert r"^TinyEncoder/layers\.0 \(EncoderLayer\)$" not in configs  # its forward passes: no border


def test_module_rollups_hold_the_worst_of_their_ops(tiny, tmp_path):
    comp, model, ids = tiny
    out = export_model_explorer(comp, tmp_path, target="exported_program", source=model, inputs=(ids,))
    rows = {m["module"]: m for m in out.modules if m["namespace"]}
    ops = comp.ops[comp.ops["op"].isin(out.matched)]
    layer1 = ops[ops["module"].str.startswith("layers.1")]
    assert rows["layers.1"]["ops"] == len(layer1) and rows["layers.1"]["failing"] == 2
    assert rows["layers.1"]["introduced"] == 1 and rows["layers.1"]["first_failing_op"] == FAULTY_OP
    assert rows["layers.1"]["worst_cosine"] == layer1["out_cosine"].min()
    assert rows["layers.1"]["max_rel_euclidean"] == layer1["out_rel_euclidean"].max()
    assert rows["layers.0"]["status"] == "pass" and rows["layers.0"]["failing"] == 0
    assert rows["layers.1.ff2"]["status"] == "fail"  # inherited, not introduced
    whole = next(m for m in out.modules if m["namespace"] == "")
    assert whole["ops"] == len(out.matched)
    assert read(out.summary_file)["modules"] == json.loads(json.dumps(out.modules))


def test_unmatched_ops_are_listed_not_dropped(tiny, tmp_path):
    """A one-layer model has no node for the ops of layers.1: they are named, counted, and in no node data."""
    from nbprec.demo.tiny import TinyConfig, build_tiny

    comp, _, _ = tiny
    model, ids, _ = build_tiny("float32", cfg=TinyConfig(layers=1))
    out = export_model_explorer(comp, tmp_path, target="exported_program", source=model.eval(), inputs=(ids,))
    layer1 = [
        o for o in forward_api_ops(comp) if o in set(comp.ops.loc[comp.ops["module"].str.startswith("layers.1"), "op"])
    ]
    assert set(layer1) <= set(out.unmatched) and FAULTY_OP in out.unmatched
    assert len(out.unmatched) + len(out.matched) == len(forward_api_ops(comp))
    assert FAULTY_OP not in out.matched
    assert f"unmatched ({len(out.unmatched)})" in str(out)
    assert read(out.summary_file)["unmatched"] == out.unmatched


def test_ge_graph_keys_are_the_npu_op_names(tmp_path):
    from nbprec.demo.npu import make_npu_demo
    from nbprec.graph.ge import read_ge_model

    demo = make_npu_demo(tmp_path / "npu")
    comp = nbprec.compare(demo.npu, demo.tf, graph=demo.graph, progress=None)
    out = export_model_explorer(comp, tmp_path / "me", target="ge", source=demo.graph)
    model = read_ge_model(demo.graph)
    assert out.graph_ids == [g.name for g in model.graphs]
    results = read(out.node_data_files["status"])[out.graph_ids[0]]["results"]
    assert set(results) == set(comp.ops["op"]) and set(results) <= {op.name for op in model.ops}
    assert results[demo.faulty_op]["value"] == "introduced" and out.unmatched == []
    graph = read(out.graph_file)["graphs"][0]
    assert {n["id"] for n in graph["nodes"]} == {op.name for op in model.ops}
    gelu = next(n for n in graph["nodes"] if n["id"] == demo.faulty_op)
    assert gelu["label"] == "Gelu" and gelu["namespace"] == "fc1"
    assert {c["namespaceRegex"]: c["borderColor"] for c in graph["groupNodeConfigs"]}["^fc1$"] == "#a50026"
    assert out.model_file is None and out.command().startswith(f"model-explorer {out.graph_file} ")


def test_thresholds_colour_like_nbprec(tiny):
    """Model Explorer's rule (the first threshold a value is <= to) gives nbprec's colour bins exactly."""
    from nbprec.graph.exports import metric_color

    def me_color(value, metric):
        return next(t["bgColor"] for t in thresholds(metric) if value <= t["value"])

    for value in (1.0, 0.99999, 0.9999, 0.99989, 0.999, 0.99, 0.95, 0.9, 0.5, -1.0):
        assert me_color(value, "cosine") == metric_color(value, "cosine"), value
        assert me_color(1 - value, "1-cosine") == metric_color(1 - value, "rel_euclidean"), value
    for value in (0.0, 1e-5, 1e-4, 2e-4, 1e-3, 0.05, 0.1, 0.2, 1e30):
        assert me_color(value, "rel_euclidean") == metric_color(value, "rel_euclidean"), value
        assert me_color(value, "max_abs_err") == metric_color(value, "max_abs_err"), value
    assert set(METRICS) >= {"status", "cosine", "1-cosine", "max_abs_err", "rel_euclidean"}


def test_non_finite_metrics_are_text_in_strict_json():
    import pandas as pd

    from nbprec.graph.model_explorer import node_data

    ops = pd.DataFrame(
        {
            "op": ["a", "b", "c"],
            "order": [0, 1, 2],
            "status": ["fail", "fail", "n/a"],
            "origin": ["introduced", "inherited", ""],
            "explained": [False, False, False],
            "out_cosine": [float("nan"), 0.5, float("nan")],
            "out_max_abs_err": [float("inf"), 3.0, float("nan")],
        }
    )
    node = {op: TargetNode(id=op.upper(), label=op, namespace="", graph="g") for op in ("a", "b", "c")}
    match = OpMatch(nodes=node)
    err = node_data(ops, match, "max_abs_err")["g"]["results"]
    assert err["A"] == {"value": "inf", "bgColor": thresholds("max_abs_err")[-1]["bgColor"]} and "C" not in err
    cos = node_data(ops, match, "cosine")["g"]["results"]
    assert cos["A"]["value"] == "nan" and cos["B"] == {"value": 0.5}
    json.dumps(err, allow_nan=False)
    assert node_data(ops, match, "status")["g"]["results"]["C"]["value"] == "n/a"


def test_alignment_prefers_the_node_holding_the_output():
    assert align(["linear", "gelu", "linear"], ["MatMul", "Add", "Gelu", "MatMul", "Add"], "onnx")[0] == [
        (0, 1),
        (1, 2),
        (2, 4),
    ]
    assert kind_score("__iadd__", "add", "torch") == 0  # op kinds are normalized by the caller
    assert kind_score("add", "add_", "torch") == 3 and kind_score("linear", "addmm", "torch") == 1


def test_cli_writes_node_data_for_a_saved_program_and_a_saved_comparison(tiny, tmp_path, capsys):
    from nbprec.cli import main

    comp, model, ids = tiny
    program = tmp_path / "tiny.pt2"
    torch.export.save(torch.export.export(model, (ids,)), str(program))
    assert (
        main(
            [
                "model-explorer",
                comp.meta["target"],
                comp.meta["bench"],
                "--program",
                str(program),
                "-o",
                str(tmp_path / "a"),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "first failing op Functional.gelu.1.forward -> node gelu_1" in text and f"model-explorer {program}" in text
    assert (tmp_path / "a" / "nbprec.status.json").is_file() and (tmp_path / "a" / "nbprec.graph.json").is_file()
    comp.save(tmp_path / "cmp")
    args = ["model-explorer", str(tmp_path / "cmp"), "-o", str(tmp_path / "b"), "--metrics", "status,in_cosine"]
    assert main([*args, "--name", "run", "--no-graph-json"]) == 0
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [
        "run.in_cosine.json",
        "run.status.json",
        "run.summary.json",
    ]
    assert main(["model-explorer", str(tmp_path / "nothing"), "-o", str(tmp_path / "c")]) == 1


def test_the_export_imports_no_widget_library():
    code = (
        "import sys, nbprec.graph.model_explorer, nbprec.cli.model_explorer\n"
        "print(sorted(m for m in ('ipywidgets', 'bqplot', 'ipycytoscape', 'ipydatagrid') if m in sys.modules))"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    )


# -- Model Explorer itself, in real Chromium ------------------------------------------------------------------
@pytest.fixture
def model_explorer_server():
    """Start Model Explorer's own server on a model and node-data files; yields a function returning its URL."""
    import os
    import queue
    import threading

    pytest.importorskip("model_explorer", reason="needs ai-edge-model-explorer (the test extra)")
    procs = []

    def start(model, node_data):
        from browser_support import free_port

        cmd = [sys.executable, "-m", "model_explorer", str(model), "--node_data_paths=" + ",".join(map(str, node_data))]
        cmd += ["--no_open_in_browser", "--host=127.0.0.1", f"--port={free_port()}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(proc)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
        seen = []
        while True:
            try:
                line = lines.get(timeout=90)
            except queue.Empty:
                break
            seen.append(line)
            if line.startswith("http://127.0.0.1"):
                return line.strip()
        raise AssertionError(f"Model Explorer did not start: {''.join(seen)[-2000:]}")

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, 9)


def _locate(page, query, result_text, nth=0):
    """Search Model Explorer for ``query``, locate the ``nth`` result showing ``result_text``, clear the search."""
    box = page.get_by_placeholder("Search nodes/layers by regex")
    box.fill(query)
    box.press("Enter")
    page.locator(f"text={result_text}").nth(nth).click(modifiers=["Alt"], timeout=30_000)
    page.wait_for_timeout(1500)  # the graph animates to the node
    box.fill("")
    box.press("Enter")
    page.wait_for_timeout(500)


@pytest.mark.browser
@pytest.mark.slow
def test_model_explorer_shows_the_verdicts_on_the_exported_program(tiny, tmp_path, model_explorer_server):
    """Model Explorer opens the .pt2 with its own PyTorch adapter; nbprec's node data lands on the failing GELU."""
    import browser_support as bs

    if not bs.CHROMIUM.exists():
        pytest.skip("needs Debian Chromium at /usr/bin/chromium (apt-get install -y chromium)")
    comp, model, ids = tiny
    out = export_model_explorer(comp, tmp_path, target="exported_program", source=model, inputs=(ids,))
    files = [out.node_data_files[m] for m in ("cosine", "1-cosine", "status")]  # the last one loaded is shown
    url = model_explorer_server(out.model_file, files)
    with bs.chromium((1440, 900)) as context:
        blocked = bs.block_network(context, allow_hosts=("127.0.0.1",))
        page = context.new_page()
        page.goto(url)
        page.wait_for_function("() => document.body.innerText.includes('nbprec.status.json')", timeout=bs.TIMEOUT_MS)
        assert "98 nodes" in page.inner_text("body")
        _locate(page, "aten.gelu", "aten.gelu", nth=1)  # the second GELU: layer 1's, the faulty one
        canvas = page.evaluate(
            "() => { const c = [...document.querySelectorAll('canvas')].map(e => e.getBoundingClientRect())"
            ".sort((a, b) => b.width * b.height - a.width * a.height)[0]; return [c.x, c.y, c.width, c.height]; }"
        )
        page.mouse.click(canvas[0] + canvas[2] / 2, canvas[1] + canvas[3] / 2)  # the located node is centred
        page.wait_for_function("() => document.body.innerText.includes('NODE INFO')", timeout=bs.TIMEOUT_MS)
        panel = page.inner_text("body")
        assert "gelu_1" in panel and "introduced" in panel and "0.980" in panel
        bs.screenshot(page, "model_explorer_exported_program.png", full_page=False)
    assert all("127.0.0.1" not in u for u in blocked)  # only fonts from a CDN were refused; the app is local


@pytest.mark.browser
@pytest.mark.slow
def test_model_explorer_shows_the_module_rollups_on_nbprecs_graph(tiny, tmp_path, model_explorer_server):
    """nbprec's graph JSON opens in Model Explorer; a layer shows its status counts and nbprec's roll-up."""
    import browser_support as bs

    if not bs.CHROMIUM.exists():
        pytest.skip("needs Debian Chromium at /usr/bin/chromium (apt-get install -y chromium)")
    comp, _, _ = tiny
    out = export_model_explorer(comp, tmp_path, target="nbprec")
    files = [out.node_data_files[m] for m in ("cosine", "1-cosine", "status")]
    url = model_explorer_server(out.graph_file, files)
    with bs.chromium((1440, 900)) as context:
        bs.block_network(context, allow_hosts=("127.0.0.1",))
        page = context.new_page()
        page.goto(url)
        page.wait_for_function("() => document.body.innerText.includes('nbprec.status.json')", timeout=bs.TIMEOUT_MS)
        assert "nbprec verdict" in page.inner_text("body")  # the graph's own attributes: the verdict
        _locate(page, r"^layers\.1 \(EncoderLayer\)$", "layers.1 (EncoderLayer)", nth=-1)  # forward, not backward
        page.wait_for_function("() => document.body.innerText.includes('LAYER ATTRIBUTES')", timeout=bs.TIMEOUT_MS)
        panel = page.inner_text("body")
        assert "nbprec first failing op" in panel and FAULTY_OP in panel
        assert "2 of 24 ops fail (1 introduced)" in panel
        bs.screenshot(page, "model_explorer_nbprec_graph.png", full_page=False)
