"""Real dumps for graph tests: the msprobe fixtures, and nbprec native dumps written here with explicit edges."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("networkx")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"

#: The native test network: (op, op_type, module call, inputs as (slot, source op or None), fn name).
#: ``Tensor.clone.1.forward`` copies x again but nobody reads it: stats inference would pick it, the
#: recorded edges must not.
NATIVE_OPS = (
    ("Tensor.clone.0.forward", "clone", "Module.TinyNet.forward.0", ""),
    ("Tensor.clone.1.forward", "clone", "Module.TinyNet.forward.0", ""),
    ("Functional.linear.0.forward", "linear", "Module.block.fc1.Linear.forward.0", "block.fc1"),
    ("Torch.relu.0.forward", "relu", "Module.block.Block.forward.0", "block"),
    ("Functional.linear.1.forward", "linear", "Module.block.fc2.Linear.forward.0", "block.fc2"),
    ("Tensor.__add__.0.forward", "__add__", "Module.block.Block.forward.0", "block"),
    ("Torch.tanh.0.forward", "tanh", "Module.TinyNet.forward.0", ""),
    ("Tensor.mean.0.forward", "mean", "Module.TinyNet.forward.0", ""),
)
MODULE_PARENTS = {
    "Module.TinyNet.forward.0": None,
    "Module.block.Block.forward.0": "Module.TinyNet.forward.0",
    "Module.block.fc1.Linear.forward.0": "Module.block.Block.forward.0",
    "Module.block.fc2.Linear.forward.0": "Module.block.Block.forward.0",
}
#: consumer -> [(slot, producer)]: the real data flow of the network
NATIVE_FLOW = {
    "Functional.linear.0.forward": [("0", "Tensor.clone.0.forward")],
    "Torch.relu.0.forward": [("0", "Functional.linear.0.forward")],
    "Functional.linear.1.forward": [("0", "Torch.relu.0.forward")],
    "Tensor.__add__.0.forward": [("0", "Functional.linear.1.forward"), ("1", "Tensor.clone.0.forward")],
    "Torch.tanh.0.forward": [("0", "Tensor.__add__.0.forward")],
    "Tensor.mean.0.forward": [("0", "Torch.tanh.0.forward")],
}


def write_native_run(path: Path, *, dtype=np.float32, fault: str | None = None) -> Path:
    """Run the tiny residual network in ``dtype`` and write it with NativeDumpWriter, edges given explicitly.

    ``fault`` names an op whose output is scaled by 1.5 (a planted faulty kernel).
    """
    from nbprec.formats.native import NativeDumpWriter

    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 16)).astype(np.float32).astype(dtype)
    w1 = (rng.standard_normal((32, 16)) / 4).astype(np.float32).astype(dtype)
    w2 = (rng.standard_normal((16, 32)) / 4).astype(np.float32).astype(dtype)
    outputs: dict[str, np.ndarray] = {}
    inputs: dict[str, list[np.ndarray]] = {}

    def run(op: str, ins: list[np.ndarray], out: np.ndarray) -> None:
        out = np.asarray(out).astype(dtype)
        if op == fault:
            out = (out * 1.5).astype(dtype)
        inputs[op], outputs[op] = ins, out

    run("Tensor.clone.0.forward", [x], x.copy())
    run("Tensor.clone.1.forward", [x], x.copy())
    a = outputs["Tensor.clone.0.forward"]
    run("Functional.linear.0.forward", [a, w1], a @ w1.T)
    run(
        "Torch.relu.0.forward",
        [outputs["Functional.linear.0.forward"]],
        np.maximum(outputs["Functional.linear.0.forward"], 0),
    )
    r = outputs["Torch.relu.0.forward"]
    run("Functional.linear.1.forward", [r, w2], r @ w2.T)
    run(
        "Tensor.__add__.0.forward",
        [outputs["Functional.linear.1.forward"], a],
        outputs["Functional.linear.1.forward"] + a,
    )
    run("Torch.tanh.0.forward", [outputs["Tensor.__add__.0.forward"]], np.tanh(outputs["Tensor.__add__.0.forward"]))
    run("Tensor.mean.0.forward", [outputs["Torch.tanh.0.forward"]], outputs["Torch.tanh.0.forward"].mean(keepdims=True))
    with NativeDumpWriter(path, run=path.name) as w:
        for node, parent in MODULE_PARENTS.items():
            w.write_module(node, parent)
        for order, (op, op_type, parent, module) in enumerate(NATIVE_OPS):
            api = ".".join(op.split(".")[:2])
            base = {
                "step": 0,
                "rank": 0,
                "order": order,
                "op": op,
                "op_type": op_type,
                "api": api,
                "module": module,
                "direction": "forward",
            }
            for slot, arr in enumerate(inputs[op]):
                w.write_tensor({**base, "name": f"{op}.input.{slot}", "role": "input", "slot": str(slot)}, arr)
            w.write_tensor({**base, "name": f"{op}.output.0", "role": "output", "slot": "0"}, outputs[op])
            w.write_module(op, parent)
            w.write_stack(op, [f"tinynet.py:{10 + order} in forward: {op_type}(...)"])
            for slot, producer in NATIVE_FLOW.get(op, []):
                w.write_edge(f"{producer}.output.0", op, slot)
    return path


@pytest.fixture(scope="session")
def native_runs(tmp_path_factory):
    """(target float16 run with a fault planted in the second linear, float32 benchmark run) as opened dumps."""
    import nbprec

    root = tmp_path_factory.mktemp("native")
    target = write_native_run(root / "fp16", dtype=np.float16, fault="Functional.linear.1.forward")
    bench = write_native_run(root / "fp32", dtype=np.float32)
    return nbprec.open(target), nbprec.open(bench)


@pytest.fixture(scope="session")
def msprobe_fp32():
    import nbprec

    return nbprec.open(FIXTURES / "fp32_tensor_mix")


@pytest.fixture(scope="session")
def msprobe_pair():
    """(bf16 target, fp32 benchmark, their comparison) from the real msprobe fixtures."""
    import nbprec
    from nbprec.compare import compare

    target, bench = nbprec.open(FIXTURES / "bf16_tensor_mix"), nbprec.open(FIXTURES / "fp32_tensor_mix")
    return target, bench, compare(target, bench, progress=None)


def synthetic_model(layers: int = 24, blocks_per_layer: int = 4, ops_per_block: int = 100):
    """A synthetic op graph of ``layers * blocks_per_layer * ops_per_block + 2`` ops with a module hierarchy:
    ``emb`` -> ``layers.{i}`` (each with ``attn``, ``mlp``, ... sub-blocks of chained ops) -> ``head``."""
    from nbprec.graph import OpGraph

    nodes, edges, hierarchy = [], [], {}
    hierarchy["Module.emb.Embedding.forward.0"] = None
    hierarchy["Module.head.Linear.forward.0"] = None
    nodes.append({"name": "Functional.embedding.0.forward", "type": "embedding", "module": "emb", "order": 0})
    hierarchy["Functional.embedding.0.forward"] = "Module.emb.Embedding.forward.0"
    prev, order = "Functional.embedding.0.forward", 1
    for i in range(layers):
        layer_call = f"Module.layers.{i}.Layer.forward.0"
        hierarchy[layer_call] = None
        for b in range(blocks_per_layer):
            block_call = f"Module.layers.{i}.sub{b}.Block.forward.0"
            hierarchy[block_call] = layer_call
            for k in range(ops_per_block):
                name = f"Functional.op{order}.0.forward"
                nodes.append(
                    {
                        "name": name,
                        "type": ("linear", "relu", "add", "mul")[k % 4],
                        "module": f"layers.{i}.sub{b}",
                        "order": order,
                    }
                )
                hierarchy[name] = block_call
                edges.append({"src": prev, "dst": name, "slot": "0", "tensor": f"{prev}.output.0"})
                prev, order = name, order + 1
    nodes.append({"name": "Functional.linear.0.forward", "type": "linear", "module": "head", "order": order})
    hierarchy["Functional.linear.0.forward"] = "Module.head.Linear.forward.0"
    edges.append({"src": prev, "dst": "Functional.linear.0.forward", "slot": "0", "tensor": f"{prev}.output.0"})
    return OpGraph.from_records(nodes, edges, hierarchy=hierarchy, source="synthetic")


@pytest.fixture(scope="session")
def native_flow():
    """consumer -> [(slot, producer)] of the native test network."""
    return NATIVE_FLOW


@pytest.fixture(scope="session")
def make_synthetic():
    """The :func:`synthetic_model` factory."""
    return synthetic_model
