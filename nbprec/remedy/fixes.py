"""Emit a remedy in the forms users paste: PyTorch code, a loss-scale setting, CANN's mixlist and keep_dtype.

:func:`emit_fix` returns a :class:`Fix`:

- ``pytorch``: runnable code. It defines ``KeepFloat32`` (the very code nbprec verified the remedy with, see
  :mod:`nbprec.remedy._runtime`; it imports only torch) and creates ``keep_float32`` for ``model``; run each
  step inside ``with keep_float32:``. Comments list each kept op with the source line that calls it, and the
  one-line edit that does the same in the model's code.
- ``loss_scale``: with autocast, a ``torch.amp.GradScaler(init_scale=...)``; for a model cast to
  float16/bfloat16 (no float32 master weights, which ``GradScaler`` needs to unscale), a static scale and the
  ``backward_scaled(loss, model)`` function that applies and removes it.
- ``mixlist``: CANN's ``modify_mixlist`` JSON (``{"black-list": {"to-add": [...]}}``, for
  ``precision_mode=allow_mix_precision``), and ``keep_dtype``: the ATC/AOE ``--keep_dtype`` file
  (``OpType::Gelu`` lines), for the Ascend op types of the kept ops (torch names mapped with
  :data:`nbprec.overflow.remedies.ASCEND_OP_TYPES`; the others listed in ``unmapped``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from nbprec.remedy.remedy import Remedy

_RUNTIME = Path(__file__).with_name("_runtime.py")


@dataclass(frozen=True)
class Fix:
    """A remedy as code and configuration (see the module docstring)."""

    remedy: Remedy
    pytorch: str
    usage: str
    runtime: str
    loss_scale: str
    mixlist: dict[str, Any]
    keep_dtype: str
    op_types: list[str] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)

    def mixlist_json(self) -> str:
        """The ``modify_mixlist`` file's text."""
        return json.dumps(self.mixlist, indent=2)

    def to_text(self, runtime: bool = False) -> str:
        """Everything as one block of text; ``runtime`` includes the ``KeepFloat32`` source (else it is
        referred to as ``keep_float32.py``, which :meth:`write` saves)."""
        parts = [self.pytorch if runtime else self.usage]
        if self.loss_scale:
            parts += ["", self.loss_scale]
        if self.op_types:
            parts += ["", "# Ascend (CANN): keep these op types in float32. modify_mixlist file (ops_info.json):"]
            parts += [self.mixlist_json(), "# --keep_dtype file (keep_dtype.cfg):"]
            parts += [f"#   {line}" for line in self.keep_dtype.splitlines()]
        if self.unmapped:
            parts.append(f"# not mapped to Ascend op types (check the NPU dump): {', '.join(self.unmapped)}")
        return "\n".join(parts)

    def __str__(self) -> str:
        return self.to_text()

    def write(self, folder: str | os.PathLike[str]) -> dict[str, Path]:
        """Write ``keep_float32.py`` (``KeepFloat32``), ``remedy.txt`` (:meth:`to_text`), and for Ascend
        ``ops_info.json`` (modify_mixlist) and ``keep_dtype.cfg``; returns what was written."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        written = {"runtime": out / "keep_float32.py", "text": out / "remedy.txt"}
        written["runtime"].write_text(self.runtime + "\n", encoding="utf-8")
        written["text"].write_text(self.to_text() + "\n", encoding="utf-8")
        if self.op_types:
            written["mixlist"] = out / "ops_info.json"
            written["mixlist"].write_text(self.mixlist_json() + "\n", encoding="utf-8")
            written["keep_dtype"] = out / "keep_dtype.cfg"
            written["keep_dtype"].write_text(self.keep_dtype + "\n", encoding="utf-8")
        return written


def _sources(keep: list[str], profile: pd.DataFrame | None) -> dict[str, str]:
    if profile is None or profile.empty or "source" not in profile:
        return {}
    rows = profile[profile["op"].isin(set(keep))]
    return {str(op): str(src) for op, src in zip(rows["op"], rows["source"], strict=True) if src}


def _op_types(remedy: Remedy, profile: pd.DataFrame | None) -> list[str]:
    """Torch op types of the kept ops, and of the ops inside kept modules (from the profile)."""
    types = [op.split(".")[1] for op in remedy.ops]
    if remedy.modules and profile is not None and not profile.empty:
        from nbprec.remedy.cost import kept_rows
        from nbprec.remedy.kinds import promotable

        inside = kept_rows(list(remedy.modules), profile, "modules")
        types += [t for t, f in zip(inside["op_type"], inside["floating"], strict=True) if f and promotable(str(t))]
    return list(dict.fromkeys(types))


def ascend_types(torch_types: list[str]) -> tuple[list[str], list[str]]:
    """Ascend IR op types for torch op types, and the torch types with no known mapping.

    >>> ascend_types(["gelu", "linear", "mystery"])
    (['Gelu', 'MatMulV2'], ['mystery'])
    """
    from nbprec.overflow.remedies import ASCEND_OP_TYPES

    keep: list[str] = []
    unmapped: list[str] = []
    for t in torch_types:
        mapped = ASCEND_OP_TYPES.get(t.lower()) or ASCEND_OP_TYPES.get(t.lower().strip("_"))
        if mapped:
            keep.extend(x for x in mapped if x not in keep)
        elif t not in unmapped:
            unmapped.append(t)
    return keep, unmapped


def _usage(remedy: Remedy, autocast: str | None, dtype: str, sources: dict[str, str]) -> str:
    lines = ["# nbprec remedy: " + remedy.describe().replace("\n", " ")]
    if remedy.ops or remedy.modules:
        width = max((len(op) for op in remedy.ops), default=0)
        for op in remedy.ops:
            where = sources.get(op, "")
            lines.append(f"#   {op:<{width}}  {where}" if where else f"#   {op}")
        if remedy.modules:
            lines.append(f"#   modules: {', '.join(m or '(the whole model)' for m in remedy.modules)}")
        lines += [
            f"keep_float32 = KeepFloat32(model, ops={json.dumps(list(remedy.ops))}, "
            f"modules={json.dumps(list(remedy.modules))}, autocast={autocast!r})",
            "# run every step inside it (op names count the calls of each API per step, as nbprec's capture does):",
            "#     with keep_float32:",
            "#         loss = loss_fn(model(inputs), labels)",
            "#         loss.backward()",
        ]
        if remedy.ops:
            lines.append("# or make the same change in the model's code, at the lines above:")
            if autocast:
                lines += [
                    f"#     with torch.autocast({autocast!r}, enabled=False):",
                    "#         y = the_op(x.float())            # float32 inside, autocast casts the result as needed",
                ]
            else:
                lines += [
                    "#     y = the_op(x.float())                # float32 in, float32 out,",
                    f"#     ... next_op(y.to(torch.{dtype}))       # cast back where an op that is not kept uses it",
                ]
    return "\n".join(lines)


def _loss_scale(scale: float | None, autocast: str | None) -> str:
    if scale is None:
        return ""
    if autocast:
        return "\n".join(
            [
                f"# loss scale {scale:g}: a dynamic scaler starting there (halves on overflow, grows after 2000 steps)",
                f"scaler = torch.amp.GradScaler({autocast!r}, init_scale={scale!r})",
                "#     scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()",
            ]
        )
    return "\n".join(
        [
            f"# loss scale {scale:g}, static: a model cast to float16/bfloat16 has no float32 master weights, which",
            "# torch.amp.GradScaler needs to unscale gradients; scale the loss and unscale the gradients by hand.",
            f"LOSS_SCALE = {scale!r}",
            "",
            "",
            "def backward_scaled(loss, model, scale=LOSS_SCALE):",
            '    """Backward of loss * scale, then gradients divided by scale (skip the step if any is not finite)."""',
            "    (loss * scale).backward()",
            "    finite = True",
            "    for p in model.parameters():",
            "        if p.grad is not None:",
            "            p.grad.div_(scale)",
            "            finite = finite and bool(p.grad.isfinite().all())",
            "    return finite",
        ]
    )


def emit_fix(
    remedy: Any,
    setup: Any = None,
    *,
    profile: pd.DataFrame | None = None,
    device_type: str | None = None,
    dtype: str | None = None,
    autocast: bool | None = None,
) -> Fix:
    """The fix for ``remedy`` as PyTorch code, a loss-scale setting and CANN configuration files.

    Parameters
    ----------
    remedy
        Anything :meth:`Remedy.of` reads (a bisect result, a verification, op names, ...).
    setup
        The :class:`~nbprec.remedy.Setup` the remedy is for: its dtype, autocast and device type; and, when
        ``profile`` is not given, one profiled run gives the source lines and the op types inside modules.
    profile
        A run's profile (a bisect result carries one).
    device_type, dtype, autocast
        Without a setup (defaults ``"cuda"``, ``"float16"``, no autocast).

    Examples
    --------
    >>> print(emit_fix(["Functional.gelu.1.forward"]).mixlist_json())  # doctest: +NORMALIZE_WHITESPACE
    {
      "black-list": {
        "to-add": [
          "Gelu"
        ]
      }
    }
    """
    fix = Remedy.of(remedy)
    if setup is not None:
        device_type = device_type or setup.device_type
        dtype = dtype or setup.dtype
        autocast = setup.autocast if autocast is None else autocast
        if profile is None and (fix.ops or fix.modules):
            profile = setup.run("target", profile=True).profile
    device = device_type or "cuda"
    on = device if autocast else None
    usage = _usage(fix, on, dtype or "float16", _sources(list(fix.ops), profile))
    runtime = _RUNTIME.read_text(encoding="utf-8").rstrip()
    pytorch = f"{runtime}\n\n\n{usage}" if (fix.ops or fix.modules) else ""
    if fix.ops or fix.modules:
        usage = "from keep_float32 import KeepFloat32  # nbprec's KeepFloat32 (Fix.write saves it)\n\n" + usage
    keep, unmapped = ascend_types(_op_types(fix, profile))
    cfg = "\n".join(f"OpType::{t}" for t in keep)
    return Fix(
        fix,
        pytorch,
        usage if (fix.ops or fix.modules) else "",
        runtime,
        _loss_scale(fix.loss_scale, on),
        {"black-list": {"to-add": keep}},
        cfg,
        keep,
        unmapped,
    )
