"""msprobe's ``config.json`` (PyTorch): the rules msprobe applies when ``PrecisionDebugger`` reads it.

The rules are those of msprobe's ``CommonConfig`` / ``BaseConfig`` / task configs (``pt_config.py``): task and
level names, ``step`` / ``rank`` lists, each task section's ``scope``, ``list``, ``data_mode`` and
``summary_mode``, and ``overflow_check.overflow_nums`` (-1 or a positive count). Versions differ in which tasks
they accept; when msprobe is installed where the check runs, its own task list is consulted too.
"""

from __future__ import annotations

import json
import re
from typing import Any

from nbprec.config.checks import DumpPlan, _close
from nbprec.config.findings import Finding
from nbprec.config.parse import MsprobeConfig
from nbprec.config.steps import parse_msprobe_list

MSPROBE_TASKS = (
    "statistics",
    "tensor",
    "overflow_check",
    "free_benchmark",
    "run_ut",
    "acc_check",
    "structure",
    "grad_probe",
    "exception_dump",
    "diff_check",
    "nan_check",
)
"""Every task some msprobe version accepts (which ones a given version accepts differs; see the docs)."""
MSPROBE_LEVELS = ("L0", "L1", "L2", "mix", "debug")
MSPROBE_DATA_MODES = ("all", "input", "output", "forward", "backward")
MSPROBE_SUMMARY_MODES = ("statistics", "md5", "xor")
MSPROBE_PATH = re.compile(r"^[a-zA-Z0-9_.:/-]+$")
"""msprobe's FileCheckConst.FILE_VALID_PATTERN: the characters a dump path may hold."""
TASK_KEYS = ("scope", "list", "data_mode", "summary_mode", "overflow_nums", "check_mode")


def check_msprobe(config: MsprobeConfig, *, run_steps: int | None = None) -> tuple[list[Finding], DumpPlan]:
    """Check msprobe's config.json (the PyTorch side) against msprobe's own rules."""
    data = config.data
    findings = list(config.findings)
    task = data.get("task", "statistics")
    if "task" not in data:
        findings.append(Finding("info", "task is not set: msprobe collects statistics (its default)", "", "task"))
    if not isinstance(task, str) or task not in MSPROBE_TASKS:
        close = _close(task, MSPROBE_TASKS) if isinstance(task, str) else None
        findings.append(
            Finding(
                "error",
                f"task {task!r} is not a msprobe task ({', '.join(MSPROBE_TASKS[:3])}, ...)",
                f'"task": "{close or "tensor"}"',
                "task",
            )
        )
    else:
        findings += _installed_msprobe(task)
    level = data.get("level", "L1")
    if level not in MSPROBE_LEVELS:
        close = _close(level, MSPROBE_LEVELS) if isinstance(level, str) else None
        findings.append(
            Finding(
                "error",
                f"level {level!r} is not one of {', '.join(MSPROBE_LEVELS)}",
                f'"level": "{close or "L1"}"',
                "level",
            )
        )
    steps, step_problems = parse_msprobe_list(data.get("step"), "step")
    ranks, rank_problems = parse_msprobe_list(data.get("rank"), "rank")
    for problem, key in [(p, "step") for p in step_problems] + [(p, "rank") for p in rank_problems]:
        findings.append(Finding("error", problem.message, problem.fix, f"{key}-list"))
    misplaced = [k for k in TASK_KEYS if k in data]
    if misplaced:
        section = task if isinstance(task, str) else "tensor"
        findings.append(
            Finding(
                "warning",
                f"{', '.join(misplaced)} at the top level {'is' if len(misplaced) == 1 else 'are'} ignored: msprobe "
                f"reads {'it' if len(misplaced) == 1 else 'them'} from the task's section",
                f'"{section}": {{' + ", ".join(f'"{k}": {_json(data[k])}' for k in misplaced) + "}",
                "misplaced-key",
            )
        )
    section = data.get(task) if isinstance(task, str) else None
    if section is not None and not isinstance(section, dict):
        findings.append(
            Finding("error", f"the {task!r} section must be an object, not {section!r}", "", "task-section")
        )
        section = None
    section = section or {}
    if task == "overflow_check":
        findings += _check_overflow_nums(section)
    else:
        findings += _check_task_section(task, section)
    if "async_dump" in data and not isinstance(data["async_dump"], bool):
        findings.append(
            Finding(
                "error",
                f"async_dump must be true or false, not {data['async_dump']!r}",
                '"async_dump": false',
                "value-type",
            )
        )
    modes = section.get("data_mode") or ["all"]
    roles = set()
    for mode in modes if isinstance(modes, list) else ["all"]:
        roles |= (
            {"input", "output"}
            if mode in ("all", "forward", "backward")
            else {mode}
            if mode in ("input", "output")
            else set()
        )
    number = None if steps is None else len(steps if run_steps is None else [s for s in steps if s < run_steps])
    if steps is not None and run_steps is not None and number < len(steps):
        findings.append(
            Finding(
                "warning",
                f"step {data.get('step')}: steps at or past the run's {run_steps} are never dumped",
                "",
                "step-beyond-run",
            )
        )
    if data.get("dump_path") in (None, ""):
        findings.append(
            Finding(
                "error",
                "dump_path is not set: msprobe stops with 'The dump_path not found'",
                '"dump_path": "/absolute/path/to/dump"',
                "dump-path-missing",
            )
        )
    plan = DumpPlan(
        path=data.get("dump_path") or None,
        tool="msprobe",
        tensors=task == "tensor",
        steps=run_steps if steps is None else number,
        roles=roles or {"input", "output"},
        devices=None if ranks is None else len(ranks),
    )
    if task == "tensor" and steps is None:
        findings.append(
            Finding(
                "warning",
                "step is empty: every step's tensors are dumped, which fills the disk in a long run",
                '"step": [0]',
                "all-steps",
            )
        )
    return findings, plan


def _json(value: Any) -> str:
    return json.dumps(value)


def _check_overflow_nums(section: dict[str, Any]) -> list[Finding]:
    findings: list[Finding] = []
    nums = section.get("overflow_nums")
    if nums is None:
        findings.append(
            Finding(
                "info", "overflow_nums is not set: msprobe stops at the first overflow (default 1)", "", "overflow-nums"
            )
        )
    elif isinstance(nums, bool) or not isinstance(nums, int):
        findings.append(
            Finding("error", f"overflow_nums {nums!r} must be an integer", '"overflow_nums": 1', "overflow-nums")
        )
    elif nums == 0 or nums < -1:
        findings.append(
            Finding(
                "error",
                f"overflow_nums {nums}: msprobe accepts -1 (never stop) or a positive count of overflows to collect",
                '"overflow_nums": 1   (or -1 to collect every overflow without stopping)',
                "overflow-nums",
            )
        )
    mode = section.get("check_mode")
    if mode is not None and mode not in ("all", "aicore", "atomic"):
        findings.append(
            Finding(
                "error",
                f"check_mode {mode!r} is not one of all, aicore, atomic",
                '"check_mode": "all"',
                "overflow-mode",
            )
        )
    return findings


def _check_task_section(task: str, section: dict[str, Any]) -> list[Finding]:
    findings: list[Finding] = []
    for key in ("scope", "list"):
        value = section.get(key)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            findings.append(
                Finding("error", f"{task}.{key} must be a list of strings, not {value!r}", f'"{key}": []', "list-type")
            )
    modes = section.get("data_mode")
    if modes is not None:
        if not isinstance(modes, list):
            findings.append(
                Finding(
                    "error",
                    f'{task}.data_mode must be a list such as ["all"], not {modes!r}',
                    '"data_mode": ["all"]',
                    "data-mode",
                )
            )
        else:
            bad = [m for m in modes if m not in MSPROBE_DATA_MODES]
            if bad:
                findings.append(
                    Finding(
                        "error",
                        f"{task}.data_mode {bad} not in {', '.join(MSPROBE_DATA_MODES)}",
                        '"data_mode": ["all"]',
                        "data-mode",
                    )
                )
            if "all" in modes and len(modes) > 1:
                findings.append(
                    Finding(
                        "error",
                        f"{task}.data_mode: 'all' cannot be combined with other modes",
                        '"data_mode": ["all"]',
                        "data-mode",
                    )
                )
    summary = section.get("summary_mode")
    if summary is not None and summary not in MSPROBE_SUMMARY_MODES:
        findings.append(
            Finding(
                "error",
                f"{task}.summary_mode {summary!r} not in {', '.join(MSPROBE_SUMMARY_MODES)}",
                '"summary_mode": "statistics"',
                "summary-mode",
            )
        )
    return findings


def _installed_msprobe(task: str) -> list[Finding]:
    """A warning when the msprobe installed here rejects ``task`` for PyTorch (versions differ in their tasks)."""
    try:
        from importlib.metadata import version

        from msprobe.core.common.const import Const

        accepted = list(getattr(Const, "TORCH_TASK_LIST", []) or [])
        installed = version("mindstudio-probe")
    except Exception:  # not installed, or a layout this code does not know: nothing to say
        return []
    if not accepted or task in accepted:
        return []
    return [
        Finding(
            "warning",
            f"task {task!r}: the msprobe installed here ({installed}) accepts only {', '.join(accepted)} for PyTorch; "
            "older versions accept it. Check the version on the training machine",
            "",
            "task",
        )
    ]
