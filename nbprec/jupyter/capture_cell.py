"""``%%nbprec capture DIR``: capture every PyTorch model the cell runs, through :func:`nbprec.capture`.

The models are the ``torch.nn.Module`` objects the notebook's variables hold when the cell starts (or those
named with ``--model``), minus the ones that are parts of another: one model is captured exactly as
``with nbprec.capture(model, DIR):`` would (same op names), several under their variable names
(``Module.encoder.layers.0.Linear.forward.0``). Framework API calls (``Functional.linear.0.forward``, ...)
are recorded whoever makes them, so a model created inside the cell is captured at that level.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from nbprec.errors import CaptureError, NbprecError


def build_capture_parser() -> argparse.ArgumentParser:
    """The parser of the ``%%nbprec capture`` line (the options of :func:`nbprec.capture`)."""
    from nbprec.capture import LEVELS, MODES

    parser = argparse.ArgumentParser(
        prog="%%nbprec capture",
        description="Capture every PyTorch model run in the cell into an nbprec dump folder.",
    )
    parser.add_argument("path", metavar="DIR", help="the dump folder to write (must be new or empty)")
    parser.add_argument("--mode", choices=MODES, default="statistics", help="statistics only, or tensors too")
    parser.add_argument("--steps", metavar="SPEC", help="steps to record: 0, '0|5|10', '0-4' (default: all)")
    parser.add_argument("--level", choices=LEVELS, default="both", help="module calls, API calls, or both")
    parser.add_argument(
        "--model", action="append", metavar="NAME", help="variable holding a model to capture (repeatable); "
        "default: every model the notebook's variables hold"
    )  # fmt: skip
    parser.add_argument("--include", action="append", metavar="REGEX", help="record only ops matching (repeatable)")
    parser.add_argument("--exclude", action="append", metavar="REGEX", help="skip ops matching (repeatable)")
    parser.add_argument("--no-backward", action="store_true", help="do not record gradients")
    parser.add_argument("--overwrite", action="store_true", help="allow writing into a non-empty folder")
    parser.add_argument("--overflow-check", action="store_true", help="record only overflowing ops, stop at the first")
    return parser


def find_models(namespace: dict[str, Any], names: list[str] | None) -> dict[str, Any]:
    """The models to hook, by variable name: ``names`` when given, else every top-level module in ``namespace``.

    A module that is a part of another module found is left out (its calls are recorded under its owner);
    names starting with ``_`` (IPython's output history) are skipped; a module held by two names counts once.
    """
    torch = sys.modules.get("torch")
    if names:
        if torch is None:
            raise CaptureError(f"--model {names[0]}: torch is not imported in this notebook")
        models = {}
        for name in names:
            if name not in namespace:
                raise CaptureError(f"--model {name}: no variable named {name!r} in the notebook")
            kind = type(namespace[name]).__name__
            if not isinstance(namespace[name], torch.nn.Module):
                raise CaptureError(f"--model {name}: {name} is a {kind}, not a torch.nn.Module")
            models[name] = namespace[name]
        return models
    if torch is None:  # no model can exist yet; the cell may create one (recorded at API level)
        return {}
    found: dict[str, Any] = {}
    for name, value in list(namespace.items()):
        is_model = not name.startswith("_") and isinstance(value, torch.nn.Module)
        if is_model and all(value is not m for m in found.values()):
            found[name] = value
    parts = {id(sub) for model in found.values() for sub in model.modules() if sub is not model}
    return {name: model for name, model in found.items() if id(model) not in parts}


def capture_target(models: dict[str, Any], level: str) -> tuple[Any, str]:
    """The ``model`` and ``level`` arguments for :func:`nbprec.capture`.

    One model is passed as it is. Several go in one ``torch.nn.ModuleDict`` keyed by variable name, so each
    module call is named after the variable that holds its model. None: API calls only (``level="apis"``).
    """
    if not models:
        if level == "modules":
            raise CaptureError("--level modules needs a model, and no variable of the notebook holds one")
        return None, "apis"
    if len(models) == 1:
        return next(iter(models.values())), level
    import torch

    container = torch.nn.ModuleDict()
    for name, model in models.items():
        container[name if not hasattr(torch.nn.ModuleDict, name) else f"{name}_"] = model
    return container, level


def run_capture_cell(shell: Any, args: argparse.Namespace, cell: str, bind: Any) -> Any:
    """Run ``cell`` inside a capture into ``args.path``; returns the stopped :class:`~nbprec.capture.Capture`.

    ``bind(capture)`` is called before the cell runs, so the cell can call ``_nbprec.step()`` (or ``NAME.step()``
    with ``-o NAME``) between training steps. An exception in the cell shows its traceback as usual, marks the
    dump unfinished (it stays readable) and raises :class:`~nbprec.errors.CaptureError` saying so.
    """
    from nbprec.capture import capture

    folder = Path(args.path)
    if not args.overwrite and folder.is_dir() and any(folder.iterdir()):
        raise CaptureError(f"{folder}: the folder exists and is not empty; choose a new folder, or add --overwrite")
    models = find_models(shell.user_ns, args.model)
    model, level = capture_target(models, args.level)
    cap = capture(
        model,
        args.path,
        level=level,
        mode=args.mode,
        backward=not args.no_backward,
        steps=args.steps,
        include=args.include,
        exclude=args.exclude,
        overwrite=args.overwrite,
        overflow_check=args.overflow_check,
    )
    bind(cap)
    cap.start()
    try:
        result = shell.run_cell(cell, store_history=False)
    except BaseException as exc:  # KeyboardInterrupt outside the cell's own handling
        cap.stop(exc)
        raise
    error = result.error_before_exec or result.error_in_exec
    cap.stop(error)
    what = ", ".join(f"{name} ({type(m).__name__})" for name, m in models.items()) or "no model (API calls only)"
    if error is not None:  # its traceback is shown above; fail this cell too, so that "run all" stops here
        raise CaptureError(
            f"the cell raised {type(error).__name__}; the dump {args.path} is marked unfinished (still readable)"
        )
    try:
        dump = cap.open()
    except NbprecError as exc:
        print(f"nbprec: nothing readable was captured from {what}: {exc}")
        return cap
    print(f"nbprec: captured {dump.summary()['ops']} ops, {len(dump.index)} tensors of {what} into {args.path}")
    return cap
