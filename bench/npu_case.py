"""The network bench/npu.py measures: a hybrid ResNet-50 + ViT-S step as an Ascend NPU and TensorFlow run it.

Written with nbprec's writers (CANN dump files, the GE graph with fusion records, the TensorFlow ``.npy`` dump);
see bench/npu.py's docstring for what the case holds. Kept apart from the timing code so each stays readable.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MB = 1e6
T0 = 1_700_000_000_000_000
NZ, FMAP, ND = ("FRACTAL_NZ", "ND"), ("NC1HWC0", "NHWC"), ("ND", "ND")  # (storage format, origin format)


# -- the network: TensorFlow tensors and NPU ops --------------------------------------------------------


@dataclass
class Tensor:
    """A TensorFlow op output (``key`` = "op:index"): how its value is made, and the NPU's error on it."""

    key: str
    shape: tuple[int, ...]
    make: Callable[..., np.ndarray]  # (rng, *parent values) -> value
    parents: tuple[str, ...]
    rel: float  # relative error of the NPU's copy (0: an exact float16 copy)
    fault: Callable[..., np.ndarray] | None = None  # the NPU's (wrong) value from the parent values


@dataclass(frozen=True)
class Ref:
    """An NPU tensor: output ``idx`` of op ``op``, holding TensorFlow tensor ``key`` stored as ``layout``."""

    op: str
    idx: int
    key: str
    layout: tuple[str, str]
    dtype: str = "float16"


@dataclass
class NpuOp:
    name: str
    type: str
    inputs: list[Ref]
    outputs: list[Ref]
    originals: tuple[str, ...] = ()
    pass_name: str = ""
    dumped: bool = True  # Data / Const ops are graph nodes only
    records_origin: bool = True  # TransData / Cast outputs record no origin


def gauss(shape, scale=1.0):
    return lambda rng: rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)


def uniform(shape, low, high):
    return lambda rng: rng.uniform(low, high, shape).astype(np.float32)


def gelu(v):
    return 0.5 * v * (1 + np.tanh(np.float32(0.7978845608) * (v + np.float32(0.044715) * v**3)))


def softmax(v):
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def normalise(rng, v, mean, var, gamma, beta):
    return (v - mean) / np.sqrt(var + 1e-6) * gamma + beta


def max_pool(rng, v):
    b, h, w, c = v.shape
    return v.reshape(b, h // 2, 2, w // 2, 2, c).max((2, 4))


def relu(rng, v):
    return np.maximum(v, 0)


def add(rng, u, v):
    return u + v


class Net:
    """The events of the network (TensorFlow tensors and NPU ops) in execution order."""

    def __init__(self, batch: int, fault_layer: int) -> None:
        self.batch, self.fault_layer = batch, fault_layer
        self.events: list[Tensor | NpuOp] = []
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.depth = self.trans = 0

    def tf(self, name, shape, make, *parents, idx=0, rel=None, fault=None) -> str:
        """A TensorFlow op output; ``parents`` are keys ("op:0") or NPU refs (their keys)."""
        key, shape = f"{name}:{idx}", tuple(int(d) for d in shape)
        keys = tuple(p.key if isinstance(p, Ref) else p for p in parents)
        rel = 2e-4 * (1 + self.depth / 30) if rel is None else rel  # the NPU's error grows with depth
        self.events.append(Tensor(key, shape, make, keys, rel, fault))
        self.shapes[key] = shape
        return key

    def op(self, name, type_, inputs, outs, fused=(), pass_name="", **kw) -> list[Ref]:
        """An NPU op; ``outs`` are (TensorFlow key, layout); ``fused`` the TensorFlow ops it runs."""
        refs = [Ref(name, i, key, layout) for i, (key, layout) in enumerate(outs)]
        originals = tuple(k.rsplit(":", 1)[0] for k in fused)
        self.events.append(NpuOp(name, type_, list(inputs), refs, originals, pass_name, **kw))
        self.depth += 1
        return refs

    def run(self, name, type_, inputs, layout, *fused, pass_name="") -> Ref:
        """An NPU op running the TensorFlow ops ``fused`` (keys, the last its output): its output."""
        return self.op(name, type_, inputs, [(fused[-1], layout)], fused if len(fused) > 1 else (), pass_name)[0]

    def weight(self, name, shape, layout, make=None, scale=1.0) -> Ref:
        key = self.tf(name, shape, make or gauss(shape, scale), rel=0.0)
        return self.op(name, "Const", [], [(key, layout)], dumped=False)[0]

    def transdata(self, x: Ref, layout) -> Ref:
        self.trans += 1
        return self.op(f"trans_TransData_{self.trans}", "TransData", [x], [(x.key, layout)], records_origin=False)[0]

    def conv(self, x: Ref, p, cout, k, stride, with_relu) -> Ref:
        b, h, w, cin = self.shapes[x.key]
        shape = (b, h // stride, w // stride, cout)
        kernel = self.weight(f"{p}/kernel", (k, k, cin, cout), ("FRACTAL_Z", "HWCN"), scale=math.sqrt(2 / k / k / cin))
        gamma = self.weight(f"{p}/gamma", (cout,), ND, uniform(cout, 0.3, 1.2))
        beta = self.weight(f"{p}/beta", (cout,), ND, scale=0.2)
        scale = float(np.random.default_rng(len(self.events)).uniform(0.5, 2.0))
        conv = self.tf(f"{p}/Conv2D", shape, gauss(shape, scale))
        bn = self.tf(f"{p}/FusedBatchNormV3", shape, lambda rng, c, g, b: c / scale * g + b, conv, gamma, beta)
        fused = (conv, bn, self.tf(f"{p}/Relu", shape, relu, bn)) if with_relu else (conv, bn)
        passes = "ConvBatchnormFusionPass" + ("+TbeConvReluFusionPass" if with_relu else "")
        return self.run(f"{p}/Conv2D", "Conv2D", [x, kernel, gamma, beta], FMAP, *fused, pass_name=passes)

    def bottleneck(self, x: Ref, p, width, stride) -> Ref:
        a = self.conv(x, f"{p}/conv1", width, 1, 1, True)
        a = self.conv(a, f"{p}/conv2", width, 3, stride, True)
        a = self.conv(a, f"{p}/conv3", 4 * width, 1, 1, False)
        project = stride != 1 or self.shapes[x.key][-1] != 4 * width
        sc = self.conv(x, f"{p}/shortcut", 4 * width, 1, stride, False) if project else x
        total = self.tf(f"{p}/add", self.shapes[a.key], add, a, sc)
        out = self.tf(f"{p}/Relu", self.shapes[a.key], relu, total)
        return self.run(f"{p}/add", "Add", [a, sc], FMAP, total, out, pass_name="TbeEltwiseReluFusionPass")

    def dense(self, x: Ref, p, dout) -> Ref:
        rows, din = self.shapes[x.key]
        w = self.weight(f"{p}/kernel", (din, dout), NZ, scale=1 / math.sqrt(din))
        bias = self.weight(f"{p}/bias", (dout,), ND, scale=0.02)
        mm = self.tf(f"{p}/MatMul", (rows, dout), gauss((rows, dout)))
        out = self.tf(f"{p}/BiasAdd", (rows, dout), add, mm, bias)
        return self.run(f"{p}/MatMul", "MatMulV2", [x, w, bias], NZ, mm, out, pass_name="MatMulBiasAddFusionPass")

    def layernorm(self, x: Ref, p) -> Ref:
        rows, dim = self.shapes[x.key]
        g, b = self.weight(f"{p}/gamma", (dim,), ND, uniform(dim, 0.8, 1.2)), self.weight(f"{p}/beta", (dim,), ND)
        mean = self.tf(f"{p}/moments/mean", (rows, 1), lambda rng, v: v.mean(-1, keepdims=True), x)
        var = self.tf(f"{p}/moments/variance", (rows, 1), lambda rng, v, m: ((v - m) ** 2).mean(-1, keepdims=True),
                      x, mean)  # fmt: skip
        out = self.tf(f"{p}/batchnorm/add_1", (rows, dim), normalise, x, mean, var, g, b)
        return self.run(f"{p}/LayerNorm", "LayerNorm", [x, g, b], NZ, mean, var, out, pass_name="LayerNormFusionPass")

    def attention(self, x: Ref, p, heads) -> Ref:
        rows, dim = self.shapes[x.key]
        b, t, dh = self.batch, rows // self.batch, dim // heads
        qkv = self.dense(self.layernorm(x, f"{p}/ln1"), f"{p}/attn/qkv", 3 * dim)
        parts = [self.tf(f"{p}/attn/split", (rows, dim), lambda rng, v, j=j: v[:, j * dim : (j + 1) * dim], qkv, idx=j)
                 for j in range(3)]  # fmt: skip
        split = self.op(f"{p}/attn/split", "SplitD", [qkv], [(k, NZ) for k in parts], parts)
        qkv_heads = []
        for j, n in enumerate("qkv"):
            r = self.tf(f"{p}/attn/Reshape_{n}", (b, t, heads, dh), lambda rng, v: v.reshape(b, t, heads, dh), parts[j])
            tr = self.tf(f"{p}/attn/transpose_{n}", (b, heads, t, dh), lambda rng, v: v.transpose(0, 2, 1, 3), r)
            qkv_heads.append(self.run(f"{p}/attn/transpose_{n}", "ConfusionTransposeD", [split[j]], NZ, r, tr,
                                      pass_name="ConfusionTransposeFusionPass"))  # fmt: skip
        q, k, v = qkv_heads
        s = self.tf(f"{p}/attn/MatMul", (b, heads, t, t), lambda rng, q, k: q @ k.transpose(0, 1, 3, 2), q, k)
        m = self.tf(f"{p}/attn/mul", (b, heads, t, t), lambda rng, v: v * np.float32(dh**-0.5), s)
        m = self.run(f"{p}/attn/MatMul", "BatchMatMulV2", [q, k], NZ, s, m, pass_name="BatchMatMulV2MulFusionPass")
        sm = self.tf(f"{p}/attn/Softmax", (b, heads, t, t), lambda rng, v: softmax(v), m)
        sm = self.run(f"{p}/attn/Softmax", "SoftmaxV2", [m], NZ, sm)
        c = self.run(f"{p}/attn/MatMul_1", "BatchMatMulV2", [sm, v], NZ,
                     self.tf(f"{p}/attn/MatMul_1", (b, heads, t, dh), lambda rng, a, v: a @ v, sm, v))  # fmt: skip
        to = self.tf(f"{p}/attn/transpose_o", (b, t, heads, dh), lambda rng, v: v.transpose(0, 2, 1, 3), c)
        ro = self.tf(f"{p}/attn/Reshape_o", (rows, dim), lambda rng, v: v.reshape(rows, dim), to)
        ro = self.run(f"{p}/attn/transpose_o", "ConfusionTransposeD", [c], NZ, to, ro,
                      pass_name="ConfusionTransposeFusionPass")  # fmt: skip
        proj = self.dense(ro, f"{p}/attn/proj", dim)
        return self.run(f"{p}/add_1", "Add", [x, proj], NZ, self.tf(f"{p}/add_1", (rows, dim), add, x, proj))

    def encoder_layer(self, x: Ref, p, heads, layer) -> Ref:
        rows, dim = self.shapes[x.key]
        x = self.attention(x, p, heads)
        fc1 = self.dense(self.layernorm(x, f"{p}/ln2"), f"{p}/mlp/fc1", 4 * dim)
        fault = (lambda v: np.where(v < 0, 0.5 * v, gelu(v))) if layer == self.fault_layer else None  # planted bug
        g = self.run(f"{p}/mlp/Gelu", "Gelu", [fc1], NZ,
                     self.tf(f"{p}/mlp/Gelu", (rows, 4 * dim), lambda rng, v: gelu(v), fc1, fault=fault))  # fmt: skip
        fc2 = self.dense(g, f"{p}/mlp/fc2", dim)
        return self.run(f"{p}/add_2", "Add", [x, fc2], NZ, self.tf(f"{p}/add_2", (rows, dim), add, x, fc2))


def build(cfg: dict, batch: int) -> Net:
    """The events of one inference step of the network ``cfg`` at ``batch``."""
    net = Net(batch, fault_layer=cfg["layers"] // 2)
    size, width, dim = cfg["image"], cfg["width"], cfg["dim"]
    x = net.tf("input", (batch, size, size, 3), gauss((batch, size, size, 3)), rel=0.0)
    data = Ref("input", 0, x, ("ND", "NHWC"), "float32")
    net.events.append(NpuOp("input", "Data", [], [data], dumped=False))
    h = net.op("input_Cast", "Cast", [data], [(x, ("ND", "NHWC"))], records_origin=False)[0]
    h = net.conv(net.transdata(h, FMAP), "stem/conv", width, 7, 2, True)
    b, gh, gw, c = net.shapes[h.key]
    pool = net.tf("stem/MaxPool", (b, gh // 2, gw // 2, c), max_pool, h)
    h = net.run("stem/MaxPool", "MaxPool", [h], FMAP, pool)
    for stage, blocks in enumerate(cfg["blocks"]):
        for block in range(blocks):
            stride = 2 if stage and not block else 1
            h = net.bottleneck(h, f"stage{stage + 1}/block{block + 1}", width * 2**stage, stride)
    b, gh, gw, c = net.shapes[h.key]
    kernel = net.weight("embed/kernel", (1, 1, c, dim), ("FRACTAL_Z", "HWCN"), scale=0.03)
    bias = net.weight("embed/bias", (dim,), ND, scale=0.02)
    conv = net.tf("embed/Conv2D", (b, gh, gw, dim), gauss((b, gh, gw, dim)))
    emb = net.tf("embed/BiasAdd", (b, gh, gw, dim), add, conv, bias)
    h = net.transdata(net.run("embed/Conv2D", "Conv2D", [h, kernel, bias], FMAP, conv, emb), ("ND", "NHWC"))
    rows = b * gh * gw
    tokens = net.tf("tokens/Reshape", (rows, dim), lambda rng, v: v.reshape(rows, dim), emb)
    h = net.transdata(net.run("tokens/Reshape", "Reshape", [h], ND, tokens), NZ)
    for layer in range(cfg["layers"]):
        h = net.encoder_layer(h, f"encoder/layer_{layer}", cfg["heads"], layer)
    h = net.layernorm(h, "head/ln")
    r = net.tf("head/Reshape", (b, gh * gw, dim), lambda rng, v: v.reshape(b, -1, dim), h)
    mean = net.tf("head/Mean", (b, dim), lambda rng, v: v.mean(1), r)
    h = net.run("head/Mean", "ReduceMeanD", [h], ND, r, mean, pass_name="ReshapeReduceMeanFusionPass")
    logits = net.dense(net.transdata(h, NZ), "head/fc", cfg["classes"])
    probs = net.tf("head/Softmax", net.shapes[logits.key], lambda rng, v: softmax(v), logits)
    net.run("head/Softmax", "SoftmaxV2", [net.transdata(logits, ND)], ND, probs)
    return net


def stored_shape(net: Net, r: Ref) -> tuple[int, ...]:
    from nbprec.formats.storage import storage_shape

    shape = net.shapes[r.key]
    return shape if r.layout[0] == "ND" else storage_shape(shape, *r.layout, itemsize=2)


def planned_bytes(net: Net) -> int:
    """Bytes both dumps will take (payloads, plus about 128 bytes a tensor of headers)."""
    tf = sum(4 * math.prod(e.shape) + 128 for e in net.events if isinstance(e, Tensor))
    refs = [r for e in net.events if isinstance(e, NpuOp) and e.dumped for r in e.inputs + e.outputs]
    return tf + sum((4 if r.dtype == "float32" else 2) * math.prod(stored_shape(net, r)) + 128 for r in refs)


def choose_batch(cfg: dict, size_mb: float) -> int:
    """The batch whose dumps come closest to ``size_mb`` (sizes grow linearly with the batch)."""
    one, two = planned_bytes(build(cfg, 1)), planned_bytes(build(cfg, 2))
    return max(1, round((size_mb * MB - (2 * one - two)) / (two - one)))


# -- writing the dumps (cached) -------------------------------------------------------------------------


def write_case(net: Net, root: Path, seed: int) -> None:
    """Write the TensorFlow dump, the NPU dump and the GE graph of ``net`` under ``root``; values are made in
    execution order and dropped after their last use."""
    from nbprec.formats.cann_write import CannTensor, dump_folder, write_dump_file
    from nbprec.graph.ge_write import tensor_desc, write_ge_graph

    rng = np.random.default_rng(seed)
    last: dict[str, int] = {}
    for i, e in enumerate(net.events):
        last.update(dict.fromkeys(e.parents if isinstance(e, Tensor) else [r.key for r in e.inputs + e.outputs], i))
    release: dict[int, list[str]] = {}
    for key, i in last.items():
        release.setdefault(i, []).append(key)
    (root / "tf").mkdir(parents=True)
    folder = dump_folder(root / "npu", time="20240101120000", device=0, model="ge_default_1", model_id=1, step=0)
    bench: dict[str, np.ndarray] = {}
    npu: dict[str, np.ndarray] = {}
    graph: list[dict] = []

    def desc(r: Ref, origin: bool) -> dict:
        name, index = r.key.rsplit(":", 1)
        named = {"origin_name": name, "origin_output_index": int(index)} if origin else {}
        shape = net.shapes[r.key]
        return tensor_desc(r.dtype, stored_shape(net, r), r.layout[0], origin_format=r.layout[1], origin_shape=shape,
                           **named)  # fmt: skip

    def spec(r: Ref, original: bool) -> CannTensor:
        name, index = r.key.rsplit(":", 1)
        value = bench[r.key] if r.dtype == "float32" else npu[r.key]
        return CannTensor(value, *r.layout, original_op=(name, int(index)) if original else None)

    for i, e in enumerate(net.events):
        if isinstance(e, Tensor):
            parents = [bench[p] for p in e.parents]
            value = bench[e.key] = np.ascontiguousarray(e.make(rng, *parents), dtype=np.float32)
            name, index = e.key.rsplit(":", 1)
            np.save(root / "tf" / f"{name.replace('/', '_')}.{index}.{T0 + 10 * i}.npy", value)
            noise = np.float32(e.rel) * rng.standard_normal(value.shape, "f4")
            noisy = e.fault(*parents) if e.fault else value * (1 + noise)
            npu[e.key] = np.clip(noisy, -65504, 65504).astype(np.float16)
        else:
            node = {"name": e.name, "type": e.type, "inputs": [f"{r.op}:{r.idx}" for r in e.inputs], "id": i,
                    "input_descs": [desc(r, False) for r in e.inputs],
                    "output_descs": [desc(r, e.records_origin) for r in e.outputs]}  # fmt: skip
            graph.append(node | ({"pass_name": e.pass_name, "original_ops": list(e.originals)} if e.originals else {}))
            if e.dumped:
                inputs, outputs = [spec(r, False) for r in e.inputs], [spec(r, e.records_origin) for r in e.outputs]
                write_dump_file(folder, e.name, e.type, inputs=inputs, outputs=outputs, task_id=i, stream_id=0,
                                timestamp=T0 + 100 * i)  # fmt: skip
        for key in release.get(i, ()):
            bench.pop(key, None)
            npu.pop(key, None)
    write_ge_graph(root / "ge_proto_00000001_Build.txt", graph, model_name="ge_default_1")


def dump_files(root: Path) -> list[Path]:
    """Every file of both dumps (not the graph), NPU dump first."""
    return sorted(p for p in (root / "npu").rglob("*") if p.is_file()) + sorted((root / "tf").glob("*.npy"))
