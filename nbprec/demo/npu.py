"""An Ascend NPU demo case, no NPU needed: a small CNN run as an NPU would run it, and its TensorFlow benchmark.

:func:`make_npu_demo` computes one forward step of a TensorFlow-style network (NHWC) twice with numpy:

- the **benchmark** in float32, written as a TensorFlow dump (``{op}.{output}.{timestamp}.npy``, every op
  output, as tfdbg_ascend writes it);
- the **NPU run** in float16, written as CANN dump files (:mod:`nbprec.formats.cann_write`) in the dump tree
  ``{time}/{device}/{model}/{model_id}/{step}/``, with the graph engine's changes: ``Conv2D`` + ``BiasAdd`` +
  ``Relu`` and ``MatMul`` + ``BiasAdd`` fused into one op each (fusion records in the GE graph and the dump),
  ``Cast`` and ``TransData`` ops inserted, feature maps stored in NC1HWC0, weights in FRACTAL_Z, matrices in
  FRACTAL_NZ; plus the GE graph (``ge_proto_00000001_Build.txt``) and ``fusion_result.json``.

Two faults are planted in the NPU run: a **faulty kernel** (``fc1/Gelu`` returns ``x / 2`` for negative
inputs instead of GELU), and a **float16 overflow** (``logits_scale/Mul`` multiplies the logits by 3*10^4;
the results saturate at 65504, as Ascend's saturation mode does, and the NPU writes an overflow debug file).

Examples
--------
>>> case = make_npu_demo("/tmp/npu-demo")                          # doctest: +SKIP
>>> nbprec.compare(case.npu, case.tf, graph=case.graph).first_failing_op()["op"]  # doctest: +SKIP
'fc1/Gelu'
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nbprec.errors import NbprecError

FP16_MAX = 65504.0
T0 = 1_700_000_000_000_000  # microseconds: the first timestamp of each run


@dataclass(frozen=True)
class NpuDemo:
    """Where :func:`make_npu_demo` wrote the demo case, and what was planted in it."""

    npu: Path
    tf: Path
    graph: Path
    fusion_result: Path
    faulty_op: str
    faulty_origin: str
    overflow_op: str


@dataclass(frozen=True)
class _Op:
    """One NPU op: its type, inputs (GE ``src:idx``), fusion record, and how its output is stored."""

    name: str
    type: str
    inputs: tuple[str, ...]
    out_format: str = "ND"
    origin_format: str = "ND"
    origin: str = ""  # the TensorFlow op whose output 0 this op's output 0 equals
    originals: tuple[str, ...] = ()
    pass_name: str = ""


def _conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A 3x3 'SAME' convolution, stride 1, NHWC input and HWCN (TensorFlow's HWIO) kernel."""
    pad = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    windows = np.lib.stride_tricks.sliding_window_view(pad, (3, 3), axis=(1, 2))  # B, H, W, C, kh, kw
    return np.einsum("bhwcij,ijcn->bhwn", windows, w, optimize=True)


def _pool(x: np.ndarray) -> np.ndarray:
    b, h, w, c = x.shape
    return x.reshape(b, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


def _gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def he(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return (rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)).astype(np.float32)

    return {
        "conv1/weights": he((3, 3, 3, 16), 27),
        "conv1/bias": (rng.standard_normal(16) * 0.1).astype(np.float32),
        "conv2/weights": he((3, 3, 16, 32), 144),
        "conv2/bias": (rng.standard_normal(32) * 0.1).astype(np.float32),
        "fc1/weights": he((512, 64), 512),
        "fc1/bias": (rng.standard_normal(64) * 0.1).astype(np.float32),
        "fc2/weights": he((64, 10), 64),
        "fc2/bias": (rng.standard_normal(10) * 0.1).astype(np.float32),
    }


def _forward(
    x: np.ndarray, w: dict[str, np.ndarray], cast: Callable[[np.ndarray], np.ndarray], faulty: bool
) -> dict[str, np.ndarray]:
    """Every TensorFlow op output of the step; ``cast`` rounds each result to the run's dtype."""
    out: dict[str, np.ndarray] = {"input": cast(x)}
    for name in w:
        out[name] = cast(w[name])
    feature = out["input"]
    for layer in ("conv1", "conv2"):
        out[f"{layer}/Conv2D"] = cast(_conv(feature.astype(np.float32), out[f"{layer}/weights"].astype(np.float32)))
        out[f"{layer}/BiasAdd"] = cast(out[f"{layer}/Conv2D"].astype(np.float32) + out[f"{layer}/bias"])
        out[f"{layer}/Relu"] = cast(np.maximum(out[f"{layer}/BiasAdd"], 0))
        feature = out[f"{layer}/Relu"]
        if layer == "conv1":
            out["pool1/MaxPool"] = _pool(feature)
            feature = out["pool1/MaxPool"]
    out["flatten/Reshape"] = feature.reshape(feature.shape[0], -1)
    out["fc1/MatMul"] = cast(out["flatten/Reshape"].astype(np.float32) @ out["fc1/weights"].astype(np.float32))
    out["fc1/BiasAdd"] = cast(out["fc1/MatMul"].astype(np.float32) + out["fc1/bias"])
    h = out["fc1/BiasAdd"].astype(np.float64)
    gelu = _gelu(h)
    if faulty:  # the planted kernel bug: negative inputs give x / 2 instead of GELU(x)
        gelu = np.where(h < 0, 0.5 * h, gelu)
    out["fc1/Gelu"] = cast(gelu)
    out["fc2/MatMul"] = cast(out["fc1/Gelu"].astype(np.float32) @ out["fc2/weights"].astype(np.float32))
    out["fc2/BiasAdd"] = cast(out["fc2/MatMul"].astype(np.float32) + out["fc2/bias"])
    out["logits_scale/Mul"] = cast(out["fc2/BiasAdd"].astype(np.float32) * np.float32(3e4))
    out["softmax/Softmax"] = cast(_softmax(out["logits_scale/Mul"].astype(np.float32) / np.float32(3e4)))
    return out


def _fp16_saturating(a: np.ndarray) -> np.ndarray:
    """Round to float16 as Ascend's saturation mode does: overflow clamps to +-65504 instead of inf."""
    return np.clip(np.asarray(a, dtype=np.float64), -FP16_MAX, FP16_MAX).astype(np.float16)


def _fused(layer: str, kind: str, src: str) -> _Op:
    """A fused NPU op: ``Conv2D`` + ``BiasAdd`` + ``Relu`` (kind "conv") or ``MatMul`` + ``BiasAdd`` ("matmul")."""
    inputs = (src, f"{layer}/weights:0", f"{layer}/bias:0")
    if kind == "conv":
        originals = (f"{layer}/Conv2D", f"{layer}/BiasAdd", f"{layer}/Relu")
        return _Op(
            f"{layer}/Conv2D",
            "Conv2D",
            inputs,
            "NC1HWC0",
            "NHWC",
            originals[-1],
            originals,
            "ConvBiasaddReluFusionPass",
        )
    originals = (f"{layer}/MatMul", f"{layer}/BiasAdd")
    return _Op(
        f"{layer}/MatMul", "MatMulV2", inputs, "FRACTAL_NZ", "ND", originals[-1], originals, "MatMulBiasAddFusionPass"
    )


def _npu_ops() -> list[_Op]:
    """The executed NPU graph, in execution order (graph inputs and weights are not ops that run)."""
    return [
        _Op("input_Cast", "Cast", ("input:0",)),
        _Op("trans_TransData_1", "TransData", ("input_Cast:0",), "NC1HWC0", "NHWC"),
        _fused("conv1", "conv", "trans_TransData_1:0"),
        _Op("pool1/MaxPool", "MaxPool", ("conv1/Conv2D:0",), "NC1HWC0", "NHWC", "pool1/MaxPool"),
        _fused("conv2", "conv", "pool1/MaxPool:0"),
        _Op("trans_TransData_4", "TransData", ("conv2/Conv2D:0",)),
        _Op("flatten/Reshape", "Reshape", ("trans_TransData_4:0",), "ND", "ND", "flatten/Reshape"),
        _Op("trans_TransData_5", "TransData", ("flatten/Reshape:0",), "FRACTAL_NZ"),
        _fused("fc1", "matmul", "trans_TransData_5:0"),
        _Op("fc1/Gelu", "Gelu", ("fc1/MatMul:0",), "FRACTAL_NZ", "ND", "fc1/Gelu"),
        _fused("fc2", "matmul", "fc1/Gelu:0"),
        _Op("logits_scale/Mul", "Mul", ("fc2/MatMul:0",), "FRACTAL_NZ", "ND", "logits_scale/Mul"),
        _Op("trans_TransData_9", "TransData", ("logits_scale/Mul:0",), "ND"),
        _Op("softmax/Softmax", "SoftmaxV2", ("trans_TransData_9:0",), "ND", "ND", "softmax/Softmax"),
    ]


def _weight_format(name: str, value: np.ndarray) -> tuple[str, str]:
    """How the NPU stores a weight: conv kernels FRACTAL_Z (from HWCN), matrices FRACTAL_NZ, biases ND."""
    if value.ndim == 4:
        return "FRACTAL_Z", "HWCN"
    return ("FRACTAL_NZ", "ND") if value.ndim == 2 else ("ND", "ND")


def _values_of(src: str, npu: dict[str, np.ndarray], ops: dict[str, _Op]) -> np.ndarray:
    """The float16 value an NPU tensor ``src`` ("op:0") holds: a TensorFlow output, or an inserted op's."""
    name = src.rsplit(":", 1)[0]
    op = ops.get(name)
    if op is None:
        return npu[name]  # a graph input or a weight
    if op.origin:
        return npu[op.origin]
    return _values_of(op.inputs[0], npu, ops)  # Cast / TransData: their input's values


def _desc(array: np.ndarray, fmt: str, origin_format: str, origin: str = "") -> dict[str, Any]:
    """A GE tensor descriptor of ``array`` stored in ``fmt``, with the origin records GE writes."""
    from nbprec.formats.storage import from_origin
    from nbprec.graph.ge_write import tensor_desc

    stored = from_origin(array, fmt, origin_format) if fmt != origin_format and fmt != "ND" else array
    return tensor_desc(
        str(array.dtype),
        stored.shape,
        fmt,
        origin_format=origin_format,
        origin_shape=array.shape,
        origin_name=origin or None,
        origin_output_index=0 if origin else None,
    )


def _write_tf(folder: Path, bench: dict[str, np.ndarray]) -> None:
    folder.mkdir(parents=True)
    for k, (name, value) in enumerate(bench.items()):
        np.save(folder / f"{name.replace('/', '_')}.0.{T0 + 10 * k}.npy", value)


def make_npu_demo(out: str | os.PathLike[str], *, seed: int = 0, batch: int = 4, overwrite: bool = True) -> NpuDemo:
    """Write the NPU demo case into ``out`` (``npu/``, ``tf/``, the GE graph and ``fusion_result.json``).

    ``overwrite`` replaces an earlier demo case in ``out`` (a folder holding anything else is refused).
    """
    from nbprec.formats.cann_write import CannTensor, OverflowStatus, dump_folder, write_dump_file, write_opdebug_file
    from nbprec.graph.ge_write import write_ge_graph

    root = Path(out)
    for part in ("npu", "tf"):
        target = root / part
        if target.exists():
            if not overwrite or not (root / "ge_proto_00000001_Build.txt").exists():
                raise NbprecError(f"{target}: exists and is not an earlier NPU demo case; refusing to overwrite it")
            shutil.rmtree(target)
    rng = np.random.default_rng(seed)
    weights = _weights(rng)
    x = rng.standard_normal((batch, 8, 8, 3)).astype(np.float32)
    bench = _forward(x, weights, lambda a: np.asarray(a, dtype=np.float32), faulty=False)
    npu = _forward(x, weights, _fp16_saturating, faulty=True)
    _write_tf(root / "tf", bench)

    ops = _npu_ops()
    by_name = {op.name: op for op in ops}
    folder = dump_folder(root / "npu", time="20240101120000", device=0, model="ge_default_1", model_id=1, step=0)
    graph_ops: list[dict[str, Any]] = [{"name": "input", "type": "Data", "output_descs": [_desc(x, "ND", "NHWC")]}]
    for name, value in weights.items():
        graph_ops.append(
            {"name": name, "type": "Const", "output_descs": [_desc(npu[name], *_weight_format(name, value))]}
        )
    overflow_task = -1
    for task, op in enumerate(ops, start=1):
        in_specs, in_descs = [], []
        for src in op.inputs:
            producer = by_name.get(src.rsplit(":", 1)[0])
            if src == "input:0":  # the graph input: float32, cast to float16 on the device
                value, (fmt, origin) = x, ("ND", "NHWC")
            else:
                value = _values_of(src, npu, by_name)
                fmt, origin = (producer.out_format, producer.origin_format) if producer else _weight_format(src, value)
            in_specs.append(CannTensor(value, fmt, origin))
            in_descs.append(_desc(value, fmt, origin))
        value = npu[op.origin] if op.origin else _values_of(op.inputs[0], npu, by_name)
        original = (op.origin, 0) if op.origin else None
        out_spec = CannTensor(value, op.out_format, op.origin_format, original_op=original)
        write_dump_file(
            folder,
            op.name,
            op.type,
            inputs=in_specs,
            outputs=[out_spec],
            task_id=task,
            stream_id=0,
            timestamp=T0 + 100 * task,
        )
        node: dict[str, Any] = {
            "name": op.name,
            "type": op.type,
            "inputs": list(op.inputs),
            "id": task,
            "input_descs": in_descs,
            "output_descs": [_desc(value, op.out_format, op.origin_format, op.origin)],
        }
        if op.originals:
            node.update(pass_name=op.pass_name, original_ops=list(op.originals))
        graph_ops.append(node)
        if op.name == "logits_scale/Mul":
            overflow_task = task
    write_opdebug_file(
        folder,
        [OverflowStatus(task_id=overflow_task, stream_id=0, status=0x20)],
        task_id=99,
        stream_id=0,
        timestamp=T0 + 100 * overflow_task + 50,
    )
    graph = write_ge_graph(root / "ge_proto_00000001_Build.txt", graph_ops, model_name="ge_default_1")
    fusion = root / "fusion_result.json"
    fusion.write_text(
        json.dumps(
            {
                "graph_fusion": {"MatMulBiasAddFusionPass": {"effect_times": "2", "match_times": "2"}},
                "ub_fusion": {"ConvBiasaddReluFusionPass": {"effect_times": "2", "match_times": "2"}},
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    return NpuDemo(root / "npu", root / "tf", graph, fusion, "fc1/Gelu", "fc1/Gelu", "logits_scale/Mul")


__all__ = ["NpuDemo", "make_npu_demo"]
