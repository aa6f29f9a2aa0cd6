"""The rules a dump or overflow configuration must follow, checked on what :mod:`nbprec.config.parse` read.

These checks need no file system; :mod:`nbprec.config.paths` checks the dump folder and the disk. Each returns
its findings and a :class:`DumpPlan` (what the run will write), from which the disk use is estimated.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from nbprec.config.findings import ConfigError, Finding
from nbprec.config.parse import ASCEND_PARAMS, STYLE_NAMES, AscendConfig, Computed, MsprobeConfig
from nbprec.config.render import assignment
from nbprec.config.steps import count_steps, parse_ge_steps

DUMP_MODES = ("input", "output", "all")
OVERFLOW_MODES = ("aicore_overflow", "atomic_overflow", "all")
DUMP_DATA = ("tensor", "stats")
PRODUCTS = ("atlas-training", "atlas-a2", "atlas-a3")
"""``atlas-training``: Atlas training products (Ascend 910); ``atlas-a2`` / ``atlas-a3``: Atlas A2 / A3 training."""


@dataclass
class DumpPlan:
    """What a configuration will write: where, whether tensors, how many steps, which tensor roles, devices."""

    path: Any = None
    tool: str = "cann"
    tensors: bool = False
    steps: int | None = None
    roles: set[str] = field(default_factory=lambda: {"input", "output"})
    devices: int | None = None


def _close(value: str, choices: tuple[str, ...]) -> str | None:
    lowered = {c.lower(): c for c in choices}
    if value.lower() in lowered:
        return lowered[value.lower()]
    containing = [c for c in choices if value and value.lower() in c.lower()]
    if len(containing) == 1:  # "aicore" for "aicore_overflow"
        return containing[0]
    match = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    return match[0] if match else None


def _choice(style: str, name: str, value: Any, choices: tuple[str, ...], what: str, check: str) -> list[Finding]:
    if value in choices:
        return []
    close = _close(value, choices) if isinstance(value, str) else None
    fix = assignment(style, name, close or choices[-1])
    return [Finding("error", f"{name} {value!r} is not one of {', '.join(choices)} ({what})", fix, check)]


def check_ascend(
    config: AscendConfig, *, product: str | None = None, run_steps: int | None = None
) -> tuple[list[Finding], DumpPlan]:
    """Check one TensorFlow dump configuration (any style) against CANN's rules.

    Parameters
    ----------
    config
        What was read.
    product
        One of :data:`PRODUCTS`, when known: Atlas A2 training products accept only overflow mode ``all``.
    run_steps
        How many steps the training runs (for steps never reached, and for "every step" estimates).
    """
    style = config.style
    findings = list(config.findings)
    values: dict[str, Any] = {}
    for name, setting in config.settings.items():
        value = setting.value
        if isinstance(value, Computed):
            findings.append(
                Finding(
                    "info",
                    f"{name} is computed at run time ({value.source}){setting.where()}: not checked",
                    "",
                    "computed",
                )
            )
            continue
        expected = ASCEND_PARAMS[name]
        if expected is bool and type(value) is int and value in (0, 1):
            value = bool(value)  # protobuf's bool field and the options' [True, False] check both take 0 and 1
        if not isinstance(value, expected) or (expected is not bool and isinstance(value, bool)):
            example = True if expected is bool else ("0|5" if name == "dump_step" else str(value))
            findings.append(
                Finding(
                    "error",
                    f"{name} is {value!r}{setting.where()}; it must be a {'bool' if expected is bool else 'string'}",
                    assignment(style, name, example),
                    "value-type",
                )
            )
            continue
        values[name] = value
    dump_on = values.get("enable_dump") is True
    debug_on = values.get("enable_dump_debug") is True
    unknown = any(isinstance(config.value(n), Computed) for n in ("enable_dump", "enable_dump_debug"))
    plan = DumpPlan(path=config.value("dump_path"), tool="cann")
    if dump_on and debug_on:
        findings.append(
            Finding(
                "error",
                "enable_dump and enable_dump_debug are both True: CANN refuses to run a data dump and overflow "
                "detection together",
                f"one goal per run: {assignment(style, 'enable_dump_debug', False)} (data dump) or "
                f"{assignment(style, 'enable_dump', False)} (overflow detection)",
                "both-enabled",
            )
        )
    elif not dump_on and not debug_on and not unknown:
        others = ", ".join(n for n in config.settings if n not in ("enable_dump", "enable_dump_debug"))
        set_names = f"{others} set" if others else "no other parameter set"
        findings.append(
            Finding(
                "warning",
                f"neither enable_dump nor enable_dump_debug is True ({set_names}): nothing is dumped",
                f"{assignment(style, 'enable_dump', True)} (data dump) or "
                f"{assignment(style, 'enable_dump_debug', True)} (overflow detection)",
                "nothing-enabled",
            )
        )
    if (dump_on or debug_on) and "dump_path" not in config.settings:
        findings.append(
            Finding(
                "error",
                "dump_path is not set: CANN needs it when enable_dump or enable_dump_debug is True",
                assignment(style, "dump_path", "/absolute/path/to/dump"),
                "dump-path-missing",
            )
        )
    # With neither switch on, the values set are still checked: they are what the run gets once switched on.
    neither = not dump_on and not debug_on
    if debug_on or (neither and "dump_debug_mode" in values):
        findings += _check_overflow(style, values, config, product, dump_on)
    data_keys = ("dump_step", "dump_mode", "dump_data", "dump_layer")
    if dump_on or (neither and any(k in values for k in data_keys)):
        dump_findings, checked = _check_data_dump(style, values, config, product, run_steps, plan)
        findings += [f for f in dump_findings if dump_on or f.check != "all-steps"]
        if dump_on:
            plan = checked
    return findings, plan


def _check_overflow(
    style: str, values: dict[str, Any], config: AscendConfig, product: str | None, dump_on: bool
) -> list[Finding]:
    findings: list[Finding] = []
    mode = values.get("dump_debug_mode", "all")
    findings += _choice(style, "dump_debug_mode", mode, OVERFLOW_MODES, "the overflow detection modes", "overflow-mode")
    if mode in OVERFLOW_MODES and mode != "all":
        if product == "atlas-a2":
            findings.append(
                Finding(
                    "error",
                    f"dump_debug_mode {mode!r}: on Atlas A2 training products overflow detection supports only 'all'",
                    assignment(style, "dump_debug_mode", "all"),
                    "overflow-mode-product",
                )
            )
        elif product == "atlas-a3":
            findings.append(
                Finding(
                    "warning",
                    f"dump_debug_mode {mode!r}: Ascend documents 'all' as the only mode on Atlas A2 training products; "
                    "whether Atlas A3 shares the limit is not documented in what nbprec checked",
                    assignment(style, "dump_debug_mode", "all"),
                    "overflow-mode-product",
                )
            )
        elif product is None:
            findings.append(
                Finding(
                    "info",
                    f"dump_debug_mode {mode!r} is rejected on Atlas A2 training products (only 'all'); give the "
                    "product to check",
                    "",
                    "overflow-mode-product",
                )
            )
    if not dump_on:
        ignored = [n for n in ("dump_step", "dump_mode", "dump_layer", "dump_data") if n in config.settings]
        if ignored:
            findings.append(
                Finding(
                    "info",
                    f"{', '.join(ignored)} apply to the data dump only: overflow detection ignores them",
                    "",
                    "ignored-parameter",
                )
            )
    return findings


def _check_data_dump(
    style: str, values: dict[str, Any], config: AscendConfig, product: str | None, run_steps: int | None, plan: DumpPlan
) -> tuple[list[Finding], DumpPlan]:
    findings: list[Finding] = []
    mode = values.get("dump_mode", "output")
    findings += _choice(style, "dump_mode", mode, DUMP_MODES, "which tensors of each op are dumped", "dump-mode")
    if product == "atlas-a2" and mode != "all" and mode in DUMP_MODES:
        findings.append(
            Finding(
                "info",
                f"dump_mode {mode!r}: CANN 7.0's DumpConfig page says Atlas A2 training products support only 'all' "
                "(later pages do not); if ops are missing from the dump, use 'all'",
                "",
                "dump-mode",
            )
        )
    data = values.get("dump_data", "tensor")
    findings += _choice(style, "dump_data", data, DUMP_DATA, "whole tensors or statistics", "dump-data")
    layer = values.get("dump_layer")
    if isinstance(layer, str):
        findings += _check_dump_layer(style, layer)
    if "enable_dump_debug" not in values and "dump_debug_mode" in values:
        findings.append(
            Finding(
                "info",
                "dump_debug_mode applies to overflow detection only: the data dump ignores it",
                "",
                "ignored-parameter",
            )
        )
    plan.tensors = data == "tensor"
    plan.roles = {"input", "output"} if mode == "all" else {mode}
    step = values.get("dump_step")
    if step is None or step == "":
        if "dump_step" not in config.settings or step == "":
            findings.append(
                Finding(
                    "warning",
                    "dump_step is not set: every iteration is dumped, which fills the disk in a long run",
                    assignment(style, "dump_step", "0"),
                    "all-steps",
                )
            )
            plan.steps = run_steps
        return findings, plan
    ranges, problems = parse_ge_steps(step)
    for problem in problems:
        findings.append(
            Finding("error", f"dump_step {step!r}: {problem.message}", _step_fix(style, problem.fix), "step-syntax")
        )
    if run_steps is not None:
        beyond = [f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in ranges if hi >= run_steps]
        if beyond:
            findings.append(
                Finding(
                    "warning",
                    f"dump_step {step!r}: {', '.join(beyond)} at or past the run's {run_steps} steps (counted from 0) "
                    "are never dumped",
                    "",
                    "step-beyond-run",
                )
            )
        ranges = [(lo, min(hi, run_steps - 1)) for lo, hi in ranges if lo < run_steps]
    plan.steps = count_steps(ranges)
    return findings, plan


def _step_fix(style: str, fix: str) -> str:
    if fix.startswith('dump_step="'):
        return assignment(style, "dump_step", fix[len('dump_step="') : -1])
    return fix


def _check_dump_layer(style: str, layer: str) -> list[Finding]:
    findings: list[Finding] = []
    names = layer.replace(",", " ").split()
    if "," in layer:
        findings.append(
            Finding(
                "warning",
                f"dump_layer {layer!r}: op names are separated by spaces; a comma becomes part of a name that "
                "matches no op, so those ops are not dumped",
                assignment(style, "dump_layer", " ".join(names)),
                "dump-layer",
            )
        )
    tensor_names = [n for n in names if re.search(r":\d+$", n)]
    if tensor_names:
        findings.append(
            Finding(
                "warning",
                f"dump_layer names tensors ({', '.join(tensor_names)}), not ops: no op has a ':N' name",
                assignment(style, "dump_layer", " ".join(re.sub(r":\d+$", "", n) for n in names)),
                "dump-layer",
            )
        )
    return findings


def describe(config: AscendConfig | MsprobeConfig) -> str:
    """The configuration's style in words (``TF 1 sess.run parameter_map``)."""
    return STYLE_NAMES.get(config.style, config.style)


def check_product(product: str | None) -> str | None:
    """``product`` normalised (``"Atlas A2"`` gives ``"atlas-a2"``); a ConfigError naming the choices otherwise."""
    if product is None:
        return None
    key = product.strip().lower().replace(" ", "-").replace("_", "-")
    key = {"a2": "atlas-a2", "910b": "atlas-a2", "a3": "atlas-a3", "910": "atlas-training"}.get(key, key)
    if key not in PRODUCTS:
        raise ConfigError(f"product {product!r} is not one of {', '.join(PRODUCTS)}")
    return key
