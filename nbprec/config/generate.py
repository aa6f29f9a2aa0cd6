"""Generate a correct dump or overflow configuration for one goal, in the style of the training script."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

from nbprec.config.checks import DUMP_MODES, OVERFLOW_MODES, check_product
from nbprec.config.checks_msprobe import MSPROBE_LEVELS
from nbprec.config.findings import ConfigError
from nbprec.config.render import render_ascend, render_msprobe
from nbprec.config.steps import (
    MSPROBE_MAX,
    expand_ranges,
    format_ge_steps,
    parse_ge_steps,
    parse_msprobe_list,
    steps_text,
)

STYLES = ("tf2", "tf1", "estimator", "msprobe", "options")
"""``tf2``: ``npu_device`` global options; ``tf1``: ``sess.run`` ``parameter_map``; ``estimator``: ``DumpConfig``
for ``NPURunConfig``; ``msprobe``: msprobe's PyTorch ``config.json``; ``options``: a JSON dict of the TF names."""

Steps = str | int | Sequence[int | str]


def _check_style(style: str) -> None:
    if style not in STYLES:
        raise ConfigError(f"style {style!r} is not one of {', '.join(STYLES)}")


def _check_path(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    if not text:
        raise ConfigError("give the dump folder (an absolute path on the training machine)")
    if not PurePosixPath(text).is_absolute():
        raise ConfigError(
            f"dump path {text!r} is relative: it would be resolved against the training process's working "
            "directory, which launchers change. Give an absolute path (on the training machine)"
        )
    return text


def _ranges(steps: Steps, what: str) -> list[tuple[int, int]]:
    text = steps_text(steps)
    if not text:
        raise ConfigError(f"name the steps to {what}, e.g. '0' or '0|5|10' or '0|3-5|10'")
    ranges, problems = parse_ge_steps(text)
    if problems:
        reasons = "; ".join(p.message for p in problems)
        raise ConfigError(f"steps {text!r}: {reasons}. Fix: {problems[0].fix}")
    return ranges


def _msprobe_list(values: Sequence[int] | None, key: str) -> list[int]:
    if not values:
        return []
    numbers, problems = parse_msprobe_list(list(values), key)
    if problems:
        raise ConfigError("; ".join(p.message for p in problems))
    return numbers or []


def _check_level(level: str) -> None:
    if level not in MSPROBE_LEVELS:
        raise ConfigError(f"level {level!r} is not one of {', '.join(MSPROBE_LEVELS)}")


def _self_check(text: str) -> str:
    """Run the static checks on what was generated: a generator bug must not reach a user as a config."""
    from nbprec.config.validation import validate

    errors = [f for f in validate(text, check_paths=False) if f.is_error]
    if errors:  # pragma: no cover - would be a bug in this module
        raise ConfigError("generated configuration fails its own checks: " + "; ".join(f.message for f in errors))
    return text


def dump_config(
    path: str | os.PathLike[str],
    steps: Steps,
    *,
    style: str = "tf2",
    mode: str = "output",
    ops: Sequence[str] | None = None,
    data: str = "tensor",
    level: str = "L1",
    ranks: Sequence[int] | None = None,
) -> str:
    """The configuration that dumps the tensors of chosen steps (and ops) on an Ascend NPU.

    Parameters
    ----------
    path
        The dump folder on the training machine: absolute. CANN needs it to exist before the run (msprobe
        creates it); ``nbprec config check`` checks that on the training machine.
    steps
        The steps to dump: ``"0|5|10"``, ``"0|3-5|10"``, ``5`` or ``[0, "3-5", 10]`` (counted from 0).
    style
        One of :data:`STYLES`.
    mode
        ``"input"``, ``"output"`` (CANN's default) or ``"all"``: which tensors of each op.
    ops
        Op names to dump (CANN ``dump_layer``; msprobe's ``list`` of API or module names); None: every op.
    data
        ``"tensor"`` (whole tensors) or ``"stats"`` (statistics only: CANN ``dump_data="stats"``, msprobe
        task ``statistics``).
    level, ranks
        msprobe only: the dump level (``L0`` modules, ``L1`` APIs, ``L2`` kernels, ``mix``) and the ranks to
        dump (None: every rank).

    Returns
    -------
    str
        A Python snippet to paste (``tf2``, ``tf1``, ``estimator``) or a JSON text (``msprobe``, ``options``).

    Examples
    --------
    >>> print(dump_config("/data/dump", "0|5", style="tf2"))  # doctest: +NORMALIZE_WHITESPACE
    import npu_device as npu
    <BLANKLINE>
    # before npu.open().as_default(): the device reads the global options when it opens
    npu.global_options().dump_config.enable_dump = True
    npu.global_options().dump_config.dump_path = "/data/dump"
    npu.global_options().dump_config.dump_step = "0|5"
    npu.global_options().dump_config.dump_mode = "output"
    """
    _check_style(style)
    dump_path = _check_path(path)
    ranges = _ranges(steps, "dump")
    if mode not in DUMP_MODES:
        raise ConfigError(f"mode {mode!r} is not one of {', '.join(DUMP_MODES)}")
    if data not in ("tensor", "stats", "statistics"):
        raise ConfigError(f"data {data!r} is not 'tensor' or 'stats'")
    names = list(ops or [])
    for name in names:
        if not name or any(c.isspace() for c in name):
            raise ConfigError(f"op name {name!r} is empty or holds spaces: CANN splits dump_layer on spaces")
    if style == "msprobe":
        _check_level(level)
        step_list = expand_ranges(ranges)
        if len(step_list) > MSPROBE_MAX:
            raise ConfigError(f"{len(step_list)} steps: msprobe accepts at most {MSPROBE_MAX}")
        task = "tensor" if data == "tensor" else "statistics"
        section: dict[str, Any] = {"scope": [], "list": names, "data_mode": [mode]}
        if task == "statistics":
            section["summary_mode"] = "statistics"
        config = {
            "task": task,
            "dump_path": dump_path,
            "rank": _msprobe_list(ranks, "rank"),
            "step": step_list,
            "level": level,
            "async_dump": False,
            task: section,
        }
        return _self_check(render_msprobe(config))
    options: dict[str, Any] = {
        "enable_dump": True,
        "dump_path": dump_path,
        "dump_step": format_ge_steps(ranges),
        "dump_mode": mode,
    }
    if names:
        options["dump_layer"] = " ".join(names)
    if data != "tensor":
        options["dump_data"] = "stats"
    return _self_check(render_ascend(style, options))


def overflow_config(
    path: str | os.PathLike[str],
    mode: str = "all",
    *,
    style: str = "tf2",
    product: str | None = None,
    steps: Steps | None = None,
    overflow_nums: int = 1,
    level: str = "L1",
    ranks: Sequence[int] | None = None,
) -> str:
    """The configuration that runs overflow detection and dumps the overflowing ops.

    Parameters
    ----------
    path
        The dump folder on the training machine (absolute).
    mode
        ``"aicore_overflow"`` (AI Core ops), ``"atomic_overflow"`` (atomic adds) or ``"all"`` (both; the only
        mode Atlas A2 training products support). msprobe has no mode: ``"all"`` only.
    style
        One of :data:`STYLES`.
    product
        ``"atlas-training"``, ``"atlas-a2"`` or ``"atlas-a3"``, to refuse a mode the product rejects.
    steps
        msprobe only: the steps to check (None: every step). CANN's overflow detection watches every step.
    overflow_nums
        msprobe only: how many overflows to collect before stopping; -1 never stops.
    level, ranks
        msprobe only: the level (``L1`` APIs by default) and the ranks to check (None: every rank).

    Examples
    --------
    >>> print(overflow_config("/data/dump", style="estimator"))  # doctest: +NORMALIZE_WHITESPACE
    from npu_bridge.npu_init import *
    <BLANKLINE>
    dump_config = DumpConfig(
        enable_dump_debug=True,
        dump_path="/data/dump",
        dump_debug_mode="all",
    )
    config = NPURunConfig(dump_config=dump_config)  # with your other NPURunConfig arguments
    """
    _check_style(style)
    dump_path = _check_path(path)
    product = check_product(product)
    if mode not in OVERFLOW_MODES:
        raise ConfigError(f"mode {mode!r} is not one of {', '.join(OVERFLOW_MODES)}")
    if product == "atlas-a2" and mode != "all":
        raise ConfigError(f"mode {mode!r}: Atlas A2 training products support only overflow mode 'all'")
    if style == "msprobe":
        if mode != "all":
            raise ConfigError(
                f"mode {mode!r}: msprobe's PyTorch overflow_check has no mode (it checks every API's outputs); "
                "use 'all'"
            )
        if (
            isinstance(overflow_nums, bool)
            or not isinstance(overflow_nums, int)
            or overflow_nums == 0
            or overflow_nums < -1
        ):
            raise ConfigError(f"overflow_nums {overflow_nums!r}: give -1 (never stop) or a positive count")
        _check_level(level)
        config = {
            "task": "overflow_check",
            "dump_path": dump_path,
            "rank": _msprobe_list(ranks, "rank"),
            "step": [] if steps is None else expand_ranges(_ranges(steps, "check")),
            "level": level,
            "overflow_check": {"overflow_nums": overflow_nums},
        }
        return _self_check(render_msprobe(config))
    if steps is not None:
        raise ConfigError("CANN's overflow detection has no step selection (dump_step applies to data dumps only)")
    options = {"enable_dump_debug": True, "dump_path": dump_path, "dump_debug_mode": mode}
    return _self_check(render_ascend(style, options))
