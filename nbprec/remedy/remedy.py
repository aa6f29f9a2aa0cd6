"""A remedy as a value: ops and modules to keep in float32, and a loss scale.

:meth:`Remedy.of` reads every form nbprec prints or returns one in, so it can be passed straight on:

- what ``nbprec overflow`` prints (:class:`~nbprec.overflow.Remedies`, or its text): the blamed modules and
  ops, and the ``GradScaler(init_scale=...)`` bound; an :class:`~nbprec.overflow.OverflowReport` (its
  remedies are computed);
- what a comparison says (:class:`~nbprec.compare.Comparison`, its :class:`~nbprec.compare.verdict.Verdict`
  or the verdict's text): the first failing op, "keep it in float32";
- a capture's :class:`~nbprec.errors.OverflowDetectedError` (the op it stopped on);
- op names (``Functional.gelu.1.forward``; a backward name stands for its forward), module call names
  (``Module.layers.1.ff1.Linear.forward.0`` -> ``layers.1.ff1``), module paths, a dict
  ``{"ops": [...], "modules": [...], "loss_scale": s}``, or another :class:`Remedy`.

Casts and ops that only move values (``Tensor.float``, ``view``, ...) cannot be kept in float32 on their own:
they are left out, and :attr:`Remedy.notes` says so.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from nbprec.formats._files import error_text, shown
from nbprec.formats.msprobe_keys import forward_name  # (the remedies' modules import it from here)
from nbprec.remedy.kinds import CASTS, MOVES_VALUES
from nbprec.remedy.setup import RemedyError

#: An API op name as nbprec names them: ``{Prefix}.{api}.{call}.{direction}``.
OP_NAME = re.compile(r"\b(?:Functional|Tensor|Torch)\.[A-Za-z_][\w]*\.\d+\.(?:forward|backward)\b")
#: A module call name: ``Module.{path}.{Class}.{direction}.{n}``.
MODULE_NAME = re.compile(r"\bModule\.[\w.]+?\.(?:forward|backward)\.\d+\b")
_SCALE = re.compile(r"init_scale\s*=\s*([0-9.eE+-]+)")
_PATHS = re.compile(r"for path in (\[[^\]]*\])")


def module_path(name: str) -> str | None:
    """The module path of a module call name (``Module.layers.0.ff1.Linear.forward.0`` -> ``layers.0.ff1``)."""
    parts = name.split(".")
    if len(parts) < 4 or parts[0] != "Module" or parts[-2] not in ("forward", "backward"):
        return None
    return ".".join(parts[1:-3])


@dataclass(frozen=True)
class Remedy:
    """Ops and modules to keep in float32, and a loss scale (``None``: leave the configuration's).

    Attributes
    ----------
    ops
        Forward API op names (``"Functional.gelu.1.forward"``).
    modules
        Module paths (``"layers.1.ff1"``; ``""`` is the whole model).
    loss_scale
        The loss scale to run with, or None.
    notes
        What was left out of the input, and why.

    Examples
    --------
    >>> Remedy.of(["Functional.gelu.1.backward", "Module.layers.0.ff1.Linear.forward.0"]).describe()
    'keep in float32: op Functional.gelu.1.forward, module layers.0.ff1'
    >>> Remedy.of("scaler = torch.amp.GradScaler(init_scale=65536)").loss_scale
    65536.0
    """

    ops: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    loss_scale: float | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.loss_scale is not None and not (math.isfinite(self.loss_scale) and self.loss_scale > 0):
            raise RemedyError(f"loss_scale must be a positive finite number, not {self.loss_scale!r}")

    @property
    def empty(self) -> bool:
        """Whether the remedy changes nothing."""
        return not self.ops and not self.modules and self.loss_scale is None

    def describe(self) -> str:
        """The remedy in one line."""
        parts = []
        if self.ops:
            parts.append(("op " if len(self.ops) == 1 else f"{len(self.ops)} ops ") + ", ".join(self.ops))
        if self.modules:
            names = ", ".join(m or "(the whole model)" for m in self.modules)
            parts.append(("module " if len(self.modules) == 1 else f"{len(self.modules)} modules ") + names)
        text = "keep in float32: " + "; ".join(parts) if parts else ""
        if self.loss_scale is not None:
            scale = f"loss scale {_scale_text(self.loss_scale)}"
            text = f"{text}; {scale}" if text else scale
        return text or "no change"

    def __str__(self) -> str:
        return self.describe()

    def to_dict(self) -> dict[str, Any]:
        """Plain values (JSON-ready)."""
        return {"ops": list(self.ops), "modules": list(self.modules), "loss_scale": self.loss_scale}

    def with_loss_scale(self, loss_scale: float | None) -> Remedy:
        """The same ops and modules with another loss scale."""
        return replace(self, loss_scale=None if loss_scale is None else float(loss_scale))

    def union(self, other: Any) -> Remedy:
        """Both remedies' ops and modules (the other's loss scale wins when it has one)."""
        other = Remedy.of(other)
        return Remedy(
            tuple(dict.fromkeys((*self.ops, *other.ops))),
            tuple(dict.fromkeys((*self.modules, *other.modules))),
            other.loss_scale if other.loss_scale is not None else self.loss_scale,
            (*self.notes, *other.notes),
        )

    @classmethod
    def of(cls, obj: Any = None) -> Remedy:
        """Read a remedy from any form nbprec prints or returns (see the module docstring)."""
        if obj is None:
            return cls()
        if isinstance(obj, Remedy):
            return obj
        maker = getattr(obj, "remedy", None)  # a bisect result or a verification
        if isinstance(maker, Remedy):
            return maker
        kind = type(obj).__name__
        if kind == "Remedies":
            bound = obj.loss_scale.bound if obj.loss_scale is not None else None
            return _build([*obj.ops], list(obj.modules), bound)
        if kind == "OverflowReport":
            from nbprec.overflow import remedies

            return cls.of(remedies(obj))
        if kind == "Comparison":
            first = obj.first_failing_op()
            return _build([] if first is None else [str(first["op"])], [], None)
        if kind == "Verdict":
            return cls.of(obj.headline)
        if kind == "OverflowDetectedError":
            return _build([obj.op], [], None)
        if isinstance(obj, str):
            return _from_text(obj)
        if isinstance(obj, Mapping):
            unknown = set(obj) - {"ops", "modules", "loss_scale"}
            if unknown:
                raise RemedyError(f"a remedy dict takes 'ops', 'modules' and 'loss_scale', not {sorted(unknown)}")
            scale = obj.get("loss_scale")
            return _build(list(obj.get("ops") or ()), list(obj.get("modules") or ()), scale, names_are_ops=True)
        if isinstance(obj, Iterable):
            return _build([str(x) for x in obj], [], None)
        raise RemedyError(
            f"cannot read a remedy from {kind}: pass op names, module paths, a dict, nbprec.overflow.remedies(...), "
            "a Comparison or its verdict, or the text nbprec printed"
        )


def _scale_text(scale: float) -> str:
    exp = math.log2(scale)
    return f"2**{int(exp)}" if exp == int(exp) and abs(exp) >= 4 else f"{scale:g}"


#: Where the fix starts in what ``nbprec overflow`` prints (the ranked table above it names many ops).
_REMEDY_BLOCK = "# keep the blamed ops in float32"
#: What a verdict says of the op to blame.
_FIRST_FAILING = re.compile(r"(\S+) \([^)]*\) is the first op that fails")


def _from_text(text: str) -> Remedy:
    """Op names, module lists (``for path in [...]``) and an ``init_scale=`` in printed text.

    From what ``nbprec overflow`` prints only the remedy block counts (not the ranked table above it); from a
    verdict, only the first failing op.
    """
    if _REMEDY_BLOCK in text:
        text = text[text.index(_REMEDY_BLOCK) :]
    first = _FIRST_FAILING.search(text)
    if first is not None:
        return _build([first.group(1)], [], None)
    names = OP_NAME.findall(text) + MODULE_NAME.findall(text)
    modules: list[str] = []
    for block in _PATHS.findall(text):
        try:
            modules += [str(m) for m in json.loads(block)]
        except ValueError as exc:  # (a JSONDecodeError, or a number of thousands of digits)
            raise RemedyError(
                f"could not read the module list {shown(block)}: {error_text(exc)}; give it as nbprec overflow "
                'printed it, a list of quoted module paths (for path in ["encoder.layer.0", ...])'
            ) from None
    scale = _SCALE.search(text)
    bound = float(scale.group(1)) if scale else None
    if not names and not modules and bound is None:
        stripped = text.strip()
        if stripped and "\n" not in stripped and " " not in stripped:  # one bare name: a module path
            modules.append(stripped)
        else:
            raise RemedyError(
                "found no op name, module list or init_scale= in the text; pass op names such as "
                "Functional.gelu.1.forward, or module paths"
            )
    return _build(names, modules, bound)


def _build(names: list[str], modules: list[str], scale: Any, names_are_ops: bool = False) -> Remedy:
    ops: list[str] = []
    paths = [str(m) for m in modules]
    notes: list[str] = []
    for raw in names:
        name = str(raw).strip()
        path = module_path(name)
        if path is not None:
            paths.append(path)
            continue
        if OP_NAME.fullmatch(name):
            fwd = forward_name(name)
            kind = fwd.split(".")[1]
            if kind in CASTS or kind in MOVES_VALUES:
                notes.append(
                    f"left out {name}: a {'cast' if kind in CASTS else 'view/copy'}; keeping it in float32 changes "
                    "nothing (keep its producer or consumer, or change the loss scale)"
                )
            elif fwd not in ops:
                ops.append(fwd)
            continue
        if names_are_ops:
            raise RemedyError(f"{name!r} is not an op name like Functional.gelu.1.forward")
        paths.append(name)  # a module path; checked against the model when it runs
    return Remedy(
        tuple(ops), tuple(dict.fromkeys(paths)), None if scale is None else float(scale), tuple(dict.fromkeys(notes))
    )
