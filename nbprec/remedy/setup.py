"""The two configurations a remedy is checked in: the target (float16, bfloat16 or autocast) and the float32
benchmark, run from the same model, inputs and seed, optionally captured.

A :class:`Setup` holds the model and a ``forward(model)`` callable that returns the loss (or the outputs);
:meth:`Setup.run` makes a fresh copy of the model in one configuration, keeps the ops and modules of a
:class:`~nbprec.remedy.remedy.Remedy` in float32, scales the loss, runs backward and returns a
:class:`RunResult`: the outputs, the parameter gradients (unscaled), and the dump if one was captured.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable, Mapping
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nbprec._optional import require
from nbprec.errors import NbprecError

DTYPES = ("float16", "bfloat16")
#: How a run is judged (see :mod:`nbprec.remedy.judge`): every op captured and compared, or the outputs only.
CHECKS = ("ops", "outputs")


class RemedyError(NbprecError):
    """A remedy could not be applied, run or checked."""


class NotComparableError(RemedyError):
    """The target and benchmark runs cannot be compared, so no remedy can be judged; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"the runs are not comparable: {reason}")


@dataclass
class RunResult:
    """What one run of a configuration gave.

    Attributes
    ----------
    config
        ``"target"`` or ``"bench"``.
    outputs
        Name -> the returned tensor as a numpy array (``"loss"`` first when there is a backward pass).
    dtypes
        Name -> the returned tensor's dtype.
    gradients
        Every parameter gradient, unscaled (divided by the loss scale), concatenated in parameter order as
        float32 (None without backward).
    nonfinite_gradients
        How many parameters got a gradient holding NaN/inf.
    parameters
        How many parameters got a gradient.
    loss_scale
        The scale the loss was multiplied by before backward.
    dump
        The capture folder, when the run was captured.
    overflows
        Ops the capture's overflow check stopped on (overflow-check captures).
    seen
        Every op name the run called (forward API ops, as nbprec names them).
    profile
        Per op (with ``profile=True``): ``op``, ``api``, ``op_type``, ``module``, ``order``, ``flops``,
        ``seconds``, ``floating``, ``source``.
    """

    config: str
    outputs: dict[str, np.ndarray]
    dtypes: dict[str, str]
    gradients: np.ndarray | None
    nonfinite_gradients: int
    parameters: int
    loss_scale: float
    dump: Path | None = None
    overflows: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    profile: pd.DataFrame | None = None

    @property
    def loss(self) -> float:
        """The unscaled loss (NaN when the run returned none)."""
        value = self.outputs.get("loss")
        return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else math.nan

    def same_as(self, other: RunResult) -> bool:
        """Whether two runs gave bit-identical outputs and gradients (a determinism check)."""
        if self.outputs.keys() != other.outputs.keys():
            return False
        for name, value in self.outputs.items():
            if not np.array_equal(value, other.outputs[name], equal_nan=True):
                return False
        if (self.gradients is None) != (other.gradients is None):
            return False
        return self.gradients is None or np.array_equal(self.gradients, other.gradients, equal_nan=True)


def _as_outputs(torch: Any, result: Any, backward: bool) -> dict[str, Any]:
    """The forward callable's result as named tensors: a tensor, a tuple/list, or a mapping (``"loss"``)."""
    if isinstance(result, torch.Tensor):
        return {"loss" if backward else "output": result}
    if isinstance(result, Mapping):
        named = {str(k): v for k, v in result.items() if isinstance(v, torch.Tensor)}
    elif isinstance(result, (tuple, list)):
        named = {
            ("loss" if backward and i == 0 else f"output.{i}"): v
            for i, v in enumerate(result)
            if isinstance(v, torch.Tensor)
        }
    else:
        raise RemedyError(f"forward(model) must return a tensor, a tuple or a dict of tensors, not {type(result)}")
    if backward and "loss" not in named:
        raise RemedyError(
            f"forward(model) returned {sorted(named)} but no loss: return the loss tensor first (or a dict with "
            "'loss'), or pass backward=False"
        )
    return named


def _to_numpy(torch: Any, t: Any) -> np.ndarray:
    with torch._C.DisableTorchFunction():
        t = t.detach()
        if t.is_floating_point() and t.dtype != torch.float64:
            t = t.float()
        return t.cpu().numpy().copy()


class Setup:
    """A model, its inputs (inside ``forward``) and the target configuration to fix.

    Parameters
    ----------
    model
        The float32 model (an ``nn.Module``, copied for every run) or a callable returning a fresh one.
        The benchmark runs it in float32; the target runs a copy cast to ``dtype``, or in float32 under
        ``torch.autocast`` with ``autocast=True``.
    forward
        ``forward(model)`` runs the model on its inputs and returns the loss (a scalar tensor), or a
        tuple ``(loss, outputs...)``, or a dict with ``"loss"``; with ``backward=False``, the outputs.
        nbprec multiplies the loss by the loss scale and calls ``backward`` itself.
    dtype
        ``"float16"`` or ``"bfloat16"``: the target's precision.
    autocast
        Run the target as float32 weights under ``torch.autocast(device_type, dtype)`` instead of a cast model.
    device_type
        The autocast device type, also used in the emitted snippets (``"cpu"``, ``"cuda"``, ``"npu"``).
    loss_scale
        The target's loss scale (the benchmark uses the same, so gradients compare); a remedy may change it.
    backward
        Run backward (gradients are then part of the check).
    seed
        Seed of every run (:func:`nbprec.seed_all`), so runs differ only by their precision.
    rule
        The comparison rule (name or :class:`~nbprec.compare.Rule`; default nbprec's dtype-aware rule).
    check
        ``"ops"`` (default): a run passes when its capture has no unexplained failing op against the
        benchmark's and its outputs pass; ``"outputs"``: when its returned outputs and gradients pass,
        judged in memory (no capture, faster, but sensitive to ReLUs flipping on rounding noise). See
        :mod:`nbprec.remedy.judge`.
    target_model
        A different model (or factory) for the target, e.g. one with a low-precision kernel that a
        benchmark build does not have; its parameters must equal the benchmark's, rounded to ``dtype``.

    Examples
    --------
    >>> setup = Setup(model, lambda m: F.cross_entropy(m(x).float(), y), dtype="float16")  # doctest: +SKIP
    >>> setup.run("target").loss                                                           # doctest: +SKIP
    """

    def __init__(
        self,
        model: Any,
        forward: Callable[[Any], Any],
        *,
        dtype: str = "float16",
        autocast: bool = False,
        device_type: str = "cpu",
        loss_scale: float = 1.0,
        backward: bool = True,
        seed: int = 0,
        rule: Any = None,
        check: str = "ops",
        target_model: Any = None,
    ) -> None:
        if dtype not in DTYPES:
            raise RemedyError(f"dtype must be one of {DTYPES}, not {dtype!r}")
        if check not in CHECKS:
            raise RemedyError(f"check must be one of {CHECKS}, not {check!r}")
        if not callable(forward):
            raise RemedyError(f"forward must be a callable forward(model) -> loss, not {type(forward).__name__}")
        if not (isinstance(loss_scale, (int, float)) and math.isfinite(loss_scale) and loss_scale > 0):
            raise RemedyError(f"loss_scale must be a positive finite number, not {loss_scale!r}")
        self._torch = require("torch", "re-running a model with a remedy")
        self.model = model
        self.forward = forward
        self.dtype = dtype
        self.autocast = bool(autocast)
        self.device_type = device_type
        self.loss_scale = float(loss_scale)
        self.backward = bool(backward)
        self.seed = int(seed)
        self.rule = rule
        self.check = check
        self.target_model = target_model

    def __repr__(self) -> str:
        how = f"autocast {self.dtype} on {self.device_type}" if self.autocast else f"model cast to {self.dtype}"
        return f"<nbprec.remedy.Setup target: {how}, loss scale {self.loss_scale:g}, seed {self.seed}>"

    @property
    def description(self) -> str:
        """The target configuration in words."""
        return (f"{self.dtype} autocast ({self.device_type})" if self.autocast else self.dtype) + (
            f", loss scale {self.loss_scale:g}" if self.backward else ""
        )

    # -- models ----------------------------------------------------------------------------------------
    def _fresh(self, source: Any) -> Any:
        torch = self._torch
        if isinstance(source, torch.nn.Module):
            return copy.deepcopy(source)
        if callable(source):
            model = source()
            if not isinstance(model, torch.nn.Module):
                raise RemedyError(f"the model factory returned {type(model).__name__}, not a torch.nn.Module")
            return model
        raise RemedyError(f"model must be a torch.nn.Module or a callable returning one, not {type(source).__name__}")

    def build(self, config: str) -> Any:
        """A fresh model for ``config`` (``"target"`` or ``"bench"``)."""
        torch = self._torch
        if config == "bench":
            return self._fresh(self.model).float()
        model = self._fresh(self.target_model if self.target_model is not None else self.model)
        return model.float() if self.autocast else model.to(getattr(torch, self.dtype))

    def module_paths(self) -> list[str]:
        """Every module path of the model (``""`` is the model itself)."""
        return [name for name, _ in self.build("bench").named_modules()]

    # -- running ------------------------------------------------------------------------------------------
    def run(
        self,
        config: str = "target",
        *,
        ops: Any = (),
        modules: Any = (),
        loss_scale: float | None = None,
        capture: str | os.PathLike[str] | None = None,
        capture_options: dict[str, Any] | None = None,
        profile: bool = False,
    ) -> RunResult:
        """Run one configuration once.

        Parameters
        ----------
        config
            ``"target"`` or ``"bench"``.
        ops, modules
            Op names and module paths to keep in float32 (target only).
        loss_scale
            The loss scale of this run (default :attr:`loss_scale`).
        capture
            A folder to capture the run into (:func:`nbprec.capture`, replaced if it holds a dump).
        capture_options
            More :func:`nbprec.capture` options (``mode``, ``include``, ``overflow_check``, ...).
        profile
            Record each op's forward FLOPs, time, module and source line (:attr:`RunResult.profile`).
        """
        from nbprec.capture import seed_all

        torch = self._torch
        if config not in ("target", "bench"):
            raise RemedyError(f"config must be 'target' or 'bench', not {config!r}")
        scale = self.loss_scale if loss_scale is None else float(loss_scale)
        deterministic = torch.are_deterministic_algorithms_enabled()
        warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
        try:
            seed_all(self.seed)
            return self._run(config, ops, modules, scale, capture, capture_options, profile)
        finally:  # seed_all asks for deterministic algorithms: give the caller's setting back
            torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)

    def _run(
        self,
        config: str,
        ops: Any,
        modules: Any,
        scale: float,
        capture: str | os.PathLike[str] | None,
        capture_options: dict[str, Any] | None,
        profile: bool,
    ) -> RunResult:
        from nbprec.capture import capture as start_capture
        from nbprec.errors import OverflowDetectedError
        from nbprec.remedy.promote import Promoter

        torch = self._torch
        model = self.build(config)
        target = config == "target"
        try:
            promoter = Promoter(
                model,
                ops=ops if target else (),
                modules=modules if target else (),
                autocast=self.device_type if target and self.autocast else None,
                profile=profile,
            )
        except AttributeError as exc:  # get_submodule of a path the model does not have
            raise RemedyError(f"cannot keep the module in float32: {exc}") from None
        overflows: list[str] = []
        path = Path(capture) if capture is not None else None
        with ExitStack() as stack:
            cap = None
            if path is not None:
                options = {"mode": "statistics", "overwrite": _replaceable(path), "run": path.name}
                options["meta"] = {"config": config, "dtype": self.dtype if target else "float32", "loss_scale": scale}
                options.update(capture_options or {})
                cap = stack.enter_context(start_capture(model, path, **options))
            if target and not self.autocast:  # floating inputs of the model take its dtype, as in a real run
                handle = model.register_forward_pre_hook(
                    _cast_inputs(torch, getattr(torch, self.dtype)), with_kwargs=True
                )
                stack.callback(handle.remove)
            # entered after the capture, its mode is on top: it names each call as the capture will, and hands the
            # capture exactly the calls it would see without it (its own casts run with torch functions off)
            stack.enter_context(promoter)
            try:
                auto = torch.autocast(self.device_type, dtype=getattr(torch, self.dtype))
                flops = promoter.flop_counter() if profile else nullcontext()  # forward only
                with auto if target and self.autocast else nullcontext(), flops:
                    named = _as_outputs(torch, self.forward(model), self.backward)
                if self.backward:
                    scaled = named["loss"] * scale  # a visible op, as in a real step: names stay aligned
                    scaled.backward()
            except OverflowDetectedError:
                overflows = list(cap.overflows) if cap is not None else []
                named = {}
            if cap is not None and not overflows:
                overflows = list(cap.overflows)
        outputs = {name: _to_numpy(torch, t) for name, t in named.items()}
        dtypes = {name: str(t.dtype).removeprefix("torch.") for name, t in named.items()}
        grads, bad, count = None, 0, 0
        if self.backward and named:
            parts = []
            for p in model.parameters():
                if p.grad is None:
                    continue
                g = _to_numpy(torch, p.grad).astype(np.float32, copy=False).reshape(-1)
                count += 1
                bad += int(not np.isfinite(g).all())
                parts.append(g / np.float32(scale))
            grads = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        return RunResult(
            config,
            outputs,
            dtypes,
            grads,
            bad,
            count,
            scale,
            path,
            overflows,
            promoter.seen(),
            promoter.profile_frame() if profile else None,
        )


def _cast_inputs(torch: Any, dtype: Any) -> Callable[..., Any]:
    """A root pre-hook casting float32 inputs to the target dtype (out of sight of capture and naming)."""

    def cast(t: Any) -> Any:
        return t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t

    def hook(module: Any, args: Any, kwargs: Any) -> Any:
        with torch._C.DisableTorchFunction():
            return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}

    return hook


def _replaceable(path: Path) -> bool:
    """Whether the capture folder may be overwritten: absent/empty (no need) or an nbprec dump (yes)."""
    if not path.exists() or (path.is_dir() and not any(path.iterdir())):
        return False
    from nbprec.formats.native import NativeDumpReader

    if NativeDumpReader.guess_can_open(path):
        return True
    raise RemedyError(f"{path}: exists and is not an nbprec dump; refusing to overwrite it")
