"""Fixes you can paste: keep the blamed ops in float32, bound the loss scale, tell Ascend which ops to keep.

:func:`remedies` takes an :class:`~nbprec.overflow.report.OverflowReport` (the ``critical`` and ``high``
ops are blamed) or a :class:`~nbprec.overflow.headroom.HeadroomReport` (the ops that would overflow in
float16) and returns a :class:`Remedies` with:

The ops blamed in an overflow report are the ``critical`` ops and the ``high`` ops whose inputs are normal
(the amplifiers, such as a loss-scale multiply); ops that merely pass on an abnormal input are not.

- ``pytorch``: a snippet that wraps each blamed module so it runs in float32 with autocast disabled
  (inputs cast to float32; runnable as-is once ``model`` is defined), and, for an op outside any known
  module, the ``torch.autocast(enabled=False)`` pattern to put around that call (as a comment);
- ``loss_scale``: the largest power of two that keeps the largest gradient below 65504 (from the
  gradients of the dump, divided by the scale they were recorded with);
- ``ascend`` (for an Ascend NPU dump, where the fix is configuration, not code): the mixlist and the
  ``precision_mode`` / ``modify_mixlist`` settings to paste for TF 1 sessions, Estimators, TF 2 and atc;
- ``mixlist``: a CANN ``modify_mixlist`` JSON (``{"black-list": {"to-add": [OpType, ...]}}``) naming the
  Ascend op types to keep in high precision, for ``precision_mode=allow_mix_precision``; ``keep_dtype``
  lists the same op types. Torch API names are mapped to Ascend IR op types where the mapping is known;
  the others are listed under ``unmapped`` to check against the op types in the NPU dump.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pandas as pd

from nbprec.errors import NbprecError
from nbprec.formats.msprobe_keys import forward_name

FP16_MAX = 65504.0

#: torch API / module class (lower case) -> Ascend IR op type(s) that implement it.
ASCEND_OP_TYPES = MappingProxyType(
    {
        "linear": ("MatMulV2",),
        "matmul": ("MatMulV2", "BatchMatMulV2"),
        "mm": ("MatMulV2",),
        "bmm": ("BatchMatMulV2",),
        "addmm": ("MatMulV2",),
        "baddbmm": ("BatchMatMulV2",),
        "einsum": ("BatchMatMulV2",),
        "conv1d": ("Conv2D",),
        "conv2d": ("Conv2D",),
        "conv3d": ("Conv3D",),
        "exp": ("Exp",),
        "log": ("Log",),
        "pow": ("Pow",),
        "sqrt": ("Sqrt",),
        "rsqrt": ("Rsqrt",),
        "square": ("Square",),
        "mul": ("Mul",),
        "__mul__": ("Mul",),
        "__rmul__": ("Mul",),
        "__imul__": ("Mul",),
        "add": ("Add",),
        "__add__": ("Add",),
        "__iadd__": ("Add",),
        "sub": ("Sub",),
        "div": ("RealDiv",),
        "__truediv__": ("RealDiv",),
        "sum": ("ReduceSum",),
        "mean": ("ReduceMean",),
        "norm": ("LpNorm",),
        "softmax": ("SoftmaxV2",),
        "log_softmax": ("LogSoftmaxV2",),
        "layer_norm": ("LayerNorm", "LayerNormV3"),
        "layernorm": ("LayerNorm", "LayerNormV3"),
        "batch_norm": ("BNTrainingUpdate", "BNInfer"),
        "gelu": ("Gelu",),
        "silu": ("Swish",),
        "tanh": ("Tanh",),
        "sigmoid": ("Sigmoid",),
        "cross_entropy": ("SoftmaxCrossEntropyWithLogits",),
        "nll_loss": ("NLLLoss",),
        "mse_loss": ("MseLoss",),
        "scaled_dot_product_attention": ("BatchMatMulV2", "SoftmaxV2"),
        "multi_head_attention_forward": ("BatchMatMulV2", "SoftmaxV2"),
        "multiheadattention": ("BatchMatMulV2", "SoftmaxV2"),
        "embedding": ("GatherV2",),
        "cumsum": ("Cumsum",),
    }
)


@dataclass(frozen=True)
class LossScaleAdvice:
    """A loss-scale bound from the gradients' largest magnitude.

    Attributes
    ----------
    grad_abs_max
        Largest finite gradient magnitude seen, divided by ``recorded_scale`` (``nan`` when none).
    bound
        The largest power of two ``s`` with ``grad_abs_max * s < 65504`` (``None`` without gradients).
    note
        Caveats (gradients that already overflowed give only a lower bound of the real magnitude).
    """

    grad_abs_max: float
    bound: float | None
    recorded_scale: float = 1.0
    note: str = ""

    def snippet(self) -> str:
        """A ``torch.amp.GradScaler`` line starting from the bound."""
        if self.bound is None:
            return ""
        return f"scaler = torch.amp.GradScaler(init_scale={self.bound:g})  # keeps max|grad|*scale < 65504"


def loss_scale_bound(grad_abs_max: float, limit: float = FP16_MAX) -> float | None:
    """The largest power of two ``s`` with ``grad_abs_max * s < limit``.

    Examples
    --------
    >>> loss_scale_bound(1.0), loss_scale_bound(3.0), loss_scale_bound(0.0)
    (32768.0, 16384.0, None)
    """
    if not math.isfinite(grad_abs_max) or grad_abs_max <= 0:
        return None
    s = 2.0 ** math.floor(math.log2(limit / grad_abs_max))
    while grad_abs_max * s >= limit:
        s /= 2
    return s


@dataclass(frozen=True)
class Remedies:
    """Paste-able fixes for the blamed ops (see the module docstring)."""

    ops: list[str]
    modules: list[str]
    pytorch: str
    loss_scale: LossScaleAdvice
    mixlist: dict[str, Any]
    keep_dtype: list[str] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)
    ascend: str = ""

    def mixlist_json(self) -> str:
        """The ``modify_mixlist`` file's text."""
        return json.dumps(self.mixlist, indent=2)

    def write_mixlist(self, path: str | Path) -> Path:
        """Write the ``modify_mixlist`` JSON (pass it as ``--modify_mixlist=<path>``)."""
        target = Path(path)
        target.write_text(self.mixlist_json() + "\n", encoding="utf-8")
        return target

    def to_text(self) -> str:
        """Everything as one block of text (what the CLI prints)."""
        if self.ascend:  # an NPU dump of a graph-mode run: the fix is CANN configuration, not PyTorch code
            return self.ascend
        parts = ["# keep the blamed ops in float32 (PyTorch)", self.pytorch]
        ls = self.loss_scale
        if ls.bound is not None:
            parts += ["", f"# loss scale: largest gradient {ls.grad_abs_max:.6g} -> scale at most {ls.bound:g}"]
            parts.append(ls.snippet())
        if ls.note:
            parts.append(f"# note: {ls.note}")
        if self.keep_dtype:
            parts += ["", "# Ascend: keep these op types in high precision (modify_mixlist JSON):", self.mixlist_json()]
        if self.unmapped:
            parts.append(f"# op types not mapped to Ascend IR (check the NPU dump): {', '.join(self.unmapped)}")
        return "\n".join(parts)


def _ascend_snippet(keep: list[str], mixlist: dict[str, Any]) -> str:
    """CANN settings that keep ``keep`` (Ascend op types) in float32: a mixlist and the precision mode."""
    if not keep:
        return "# no op type to keep in high precision was found"
    text = json.dumps(mixlist, indent=2)
    mix = "/path/to/ops_info.json"
    return "\n".join(
        [
            f"# Ascend: keep {', '.join(keep)} in float32. Save this as ops_info.json (a modify_mixlist file):",
            text,
            "# and run with mixed precision using it:",
            "#   TF 1 session: custom_op.parameter_map['precision_mode'].s = tf.compat.as_bytes('allow_mix_precision')",
            f"#                 custom_op.parameter_map['modify_mixlist'].s = tf.compat.as_bytes('{mix}')",
            f"#   Estimator:    NPURunConfig(precision_mode='allow_mix_precision', modify_mixlist='{mix}')",
            f"#   TF 2:         npu_device options: precision_mode='allow_mix_precision', modify_mixlist='{mix}'",
            f"#   atc / aoe:    --precision_mode=allow_mix_precision --modify_mixlist={mix}",
            "# To check that float16 is the cause at all, run once with precision_mode='must_keep_origin_dtype':",
            "# if the overflow goes away, keep the op types above in float32.",
        ]
    )


def _wrapper_snippet(modules: list[str], loose_ops: list[str], device_type: str) -> str:
    lines = [
        "import torch",
        "",
        "",
        "def keep_float32(module: torch.nn.Module) -> torch.nn.Module:",
        '    """Run `module` in float32 with autocast off: parameters and floating inputs cast to float32."""',
        "    module.float()",
        "    forward = module.forward",
        "",
        "    def cast(v):",
        "        return v.float() if torch.is_tensor(v) and v.is_floating_point() else v",
        "",
        "    def forward_fp32(*args, **kwargs):",
        f"        with torch.autocast(device_type={device_type!r}, enabled=False):",
        "            return forward(*(cast(a) for a in args), **{k: cast(v) for k, v in kwargs.items()})",
        "",
        "    module.forward = forward_fp32",
        "    return module",
        "",
    ]
    if modules:
        lines.append(f"for path in {json.dumps(modules)}:")
        lines.append("    keep_float32(model.get_submodule(path))")
    forwards: dict[str, str] = {}
    for op in loose_ops:
        fwd = forward_name(op)
        forwards.setdefault(fwd, f" (its backward {op} overflowed)" if fwd != op else "")
    for op, why in forwards.items():
        lines += [
            "",
            f"# {op}{why}: outside any recorded module; run that call in float32:",
            f"#     with torch.autocast(device_type={device_type!r}, enabled=False):",
            "#         y = <the call>(x.float())",
        ]
    return "\n".join(lines)


def _module_of(row: pd.Series) -> str:
    module = str(row.get("module", "") or "")
    if module:
        return module
    op = str(row["op"])
    if op.startswith("Module."):  # msprobe module call: Module.<path>.<Class>.<direction>.<n>
        parts = op.split(".")
        return ".".join(parts[1:-3]) if len(parts) > 4 else ""
    return ""


_TORCH_PREFIXES = ("Module.", "Functional.", "Tensor.", "Torch.", "NPU.", "VF.", "Distributed.", "Aten.")


def _ascend_types(blamed: pd.DataFrame) -> tuple[list[str], list[str]]:
    keep: list[str] = []
    unmapped: list[str] = []
    for op, op_type in zip(blamed["op"].astype(str), blamed["op_type"].astype(str), strict=True):
        key = op_type.lower()
        if key in ASCEND_OP_TYPES:
            keep.extend(x for x in ASCEND_OP_TYPES[key] if x not in keep)
        elif op_type and not op.startswith(_TORCH_PREFIXES):  # an NPU dump: the op type is the Ascend IR type
            if op_type not in keep:
                keep.append(op_type)
        elif op_type and op_type not in unmapped:
            unmapped.append(op_type)
    return keep, unmapped


def _gradient_abs_max(tensors: pd.DataFrame) -> tuple[float, bool]:
    grads = tensors[(tensors["direction"] == "backward") | (tensors["role"] == "gradient")]
    if "dtype" in grads:
        grads = grads[grads["dtype"].astype(str).str.startswith(("float", "bfloat"))]
    finite = grads["abs_max"].replace([math.inf, -math.inf], math.nan).dropna()
    overflowed = bool("abnormal" in grads and grads["abnormal"].astype(bool).any())
    return (float(finite.max()) if not finite.empty else math.nan), overflowed


def remedies(
    report: Any,
    *,
    ops: list[str] | None = None,
    device_type: str = "cuda",
    recorded_scale: float | None = None,
    dtype: str = "float16",
) -> Remedies:
    """Paste-able fixes for the ops an overflow or headroom report blames.

    Parameters
    ----------
    report
        An :class:`~nbprec.overflow.report.OverflowReport` (blames ``critical`` and ``high`` ops) or a
        :class:`~nbprec.overflow.headroom.HeadroomReport` (blames the ops that would overflow in ``dtype``).
    ops
        Blame these op names instead.
    device_type
        ``torch.autocast`` device type in the snippet (``"cuda"``, ``"cpu"``, ``"npu"``).
    recorded_scale
        The loss scale the dump's gradients were recorded with (they are divided by it); default the
        ``loss_scale`` the run's metadata records, else 1.
    dtype
        For a headroom report: the dtype whose overflows are blamed.

    Examples
    --------
    >>> fix = remedies(nbprec.overflow.scan("runs/fp16"), device_type="npu")  # doctest: +SKIP
    >>> print(fix.to_text())                                                  # doctest: +SKIP
    """
    from nbprec.overflow.headroom import HeadroomReport
    from nbprec.overflow.report import OverflowReport

    if isinstance(report, OverflowReport):
        o = report.ops
        producers = (o["level"] == "critical") | ((o["level"] == "high") & ~o["in_abnormal"].astype(bool))
        inherited = o["inherited"].astype(bool) if "inherited" in o else False  # enclosing modules, grad records
        blamed = o[producers & ~o["contains_critical"].astype(bool) & ~inherited]
        tensors = report.tensors
    elif isinstance(report, HeadroomReport):
        blamed = report.would_overflow(dtype)
        tensors = report.tensors
    else:
        raise NbprecError(f"remedies() needs an OverflowReport or a HeadroomReport, not {type(report).__name__}")
    if ops is not None:
        blamed = report.ops[report.ops["op"].isin(ops)]
    modules: list[str] = []
    loose: list[str] = []
    for _, row in blamed.iterrows():
        module = _module_of(row)
        if module and module not in modules:
            modules.append(module)
        elif not module:
            loose.append(str(row["op"]))
    keep, unmapped = _ascend_types(blamed)
    scale_known = recorded_scale is not None or bool(report.meta.get("loss_scale"))
    if recorded_scale is None:
        recorded_scale = float(report.meta.get("loss_scale") or 1.0)
    if recorded_scale <= 0 or not math.isfinite(recorded_scale):
        raise NbprecError(f"recorded_scale must be a positive finite number, not {recorded_scale!r}")
    grad_max, overflowed = _gradient_abs_max(tensors)
    unscaled = grad_max / recorded_scale if math.isfinite(grad_max) else math.nan
    note = ""
    if math.isnan(unscaled):
        note = "no finite gradients in this dump: capture a backward pass to get a loss-scale bound"
    elif overflowed:
        note = (
            "some gradients already overflowed, so the finite maximum underestimates them: lower the scale "
            "below this bound, or measure on a float32 run"
        )
    if not scale_known and math.isfinite(unscaled):
        unknown = (
            "the dump does not say which loss scale its gradients carry: the bound is relative to it "
            "(pass the scale, e.g. --loss-scale 16777216, to get it absolute)"
        )
        note = f"{note}; {unknown}" if note else unknown
    advice = LossScaleAdvice(unscaled, loss_scale_bound(unscaled), recorded_scale, note)
    mixlist = {"black-list": {"to-add": keep}}
    ascend = _ascend_snippet(keep, mixlist) if report.meta.get("format") == "cann" else ""
    return Remedies(
        ops=[str(o) for o in blamed["op"]],
        modules=modules,
        pytorch=_wrapper_snippet(modules, loose, device_type),
        loss_scale=advice,
        mixlist=mixlist,
        keep_dtype=keep,
        unmapped=unmapped,
        ascend=ascend,
    )
