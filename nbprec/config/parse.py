"""Read a pasted configuration without running it: Python snippets through :mod:`ast`, JSON through :mod:`json`.

Three TensorFlow forms are recognised in Python, and one configuration is read per form found:

- TF 2 (``npu_device``): assignments ``npu.global_options().dump_config.<name> = value`` (any expression
  ending in ``.dump_config.<name>``);
- TF 1 ``sess.run``: ``custom_op.parameter_map["<name>"].b = True`` / ``.s = tf.compat.as_bytes("...")``;
- Estimator: ``DumpConfig(<name>=value, ...)`` and whether it reaches ``NPURunConfig(dump_config=...)``.

JSON is either msprobe's ``config.json`` (it has a ``task``, ``level``, ``step`` or ``rank`` key) or a flat
dict of options, by the TensorFlow names (``enable_dump``) or the graph engine's (``ge.exec.enableDump``).
Values are read when they are literals, names bound to literals earlier in the snippet, or
``tf.compat.as_bytes(literal)`` / ``b"..."`` / ``"...".encode()``; anything else is kept as :class:`Computed`.
"""

from __future__ import annotations

import ast
import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from nbprec.config.findings import Finding
from nbprec.formats._files import long_number

ASCEND_PARAMS: dict[str, type] = {
    "enable_dump": bool,
    "dump_path": str,
    "dump_step": str,
    "dump_mode": str,
    "enable_dump_debug": bool,
    "dump_debug_mode": str,
    "dump_data": str,
    "dump_layer": str,
}
"""The dump parameters of TF 2's ``dump_config``, TF 1's ``parameter_map`` and ``DumpConfig``, and their types."""

DUMP_CONFIG_ORDER = tuple(ASCEND_PARAMS)
"""``DumpConfig.__init__``'s positional order (npu_bridge.estimator.npu.npu_config)."""

GE_OPTIONS = {
    "ge.exec.enableDump": "enable_dump",
    "ge.exec.dumpPath": "dump_path",
    "ge.exec.dumpStep": "dump_step",
    "ge.exec.dumpMode": "dump_mode",
    "ge.exec.enableDumpDebug": "enable_dump_debug",
    "ge.exec.dumpDebugMode": "dump_debug_mode",
    "ge.exec.dumpData": "dump_data",
    "ge.exec.dumpLayer": "dump_layer",
}
"""The graph engine's option names for the same parameters (``"1"`` / ``"0"`` for the switches)."""

TF1_FIELD = {bool: "b", str: "s"}
MSPROBE_KEYS = {"task", "level", "step", "rank", "async_dump", "overflow_check", "tensor", "statistics"}
STYLE_NAMES = {
    "tf2": "TF 2 npu.global_options().dump_config",
    "tf1": "TF 1 sess.run parameter_map",
    "estimator": "Estimator DumpConfig",
    "options": "options dict",
    "ge": "graph engine options",
    "msprobe": "msprobe config.json",
}


@dataclass(frozen=True)
class Computed:
    """A value the snippet computes at run time (``os.path.join(...)``, an f-string): it cannot be checked here."""

    source: str


@dataclass
class Setting:
    """One parameter as written: its value, the line it is on (None in JSON) and its source text."""

    value: Any
    line: int | None = None
    source: str = ""

    def where(self) -> str:
        return f" (line {self.line})" if self.line else ""


@dataclass
class AscendConfig:
    """The dump parameters of one TensorFlow configuration (any form), as read."""

    style: str
    settings: dict[str, Setting] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def value(self, name: str, default: Any = None) -> Any:
        setting = self.settings.get(name)
        return default if setting is None else setting.value


@dataclass
class MsprobeConfig:
    """msprobe's ``config.json``, as read."""

    data: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    style: str = "msprobe"


def _close_param(name: str) -> str | None:
    match = difflib.get_close_matches(name, list(ASCEND_PARAMS), n=1, cutoff=0.8)
    return match[0] if match else None


class _Reader:
    """Literal values of expressions, with names bound to literals earlier in the module."""

    def __init__(self, tree: ast.Module) -> None:
        self.names: dict[str, Any] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                value, is_bytes = self.read(node.value)
                if not isinstance(value, Computed):
                    self.names[node.targets[0].id] = (value, is_bytes)

    def read(self, node: ast.expr) -> tuple[Any, bool]:
        """The value and whether it is bytes; :class:`Computed` when it is not a literal."""
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bytes):
                return node.value.decode("utf-8", "replace"), True
            return node.value, False
        if isinstance(node, ast.Name) and node.id in self.names:
            return self.names[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value, is_bytes = self.read(node.operand)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return -value, is_bytes
        if isinstance(node, ast.Call) and len(node.args) <= 1 and not node.keywords:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in {"as_bytes", "as_str", "as_text", "encode", "str", "bytes"}:
                target = node.args[0] if node.args else (func.value if isinstance(func, ast.Attribute) else None)
                if target is not None:
                    value, _ = self.read(target)
                    if isinstance(value, str):
                        return value, name in {"as_bytes", "encode", "bytes"}
        return Computed(ast.unparse(node)), False


def _dump_config_target(target: ast.expr) -> str | None:
    """``name`` for a target ``<anything>.dump_config.<name>``."""
    if (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Attribute)
        and target.value.attr == "dump_config"
    ):
        return target.attr
    return None


def _parameter_map_target(target: ast.expr) -> tuple[str, str] | None:
    """``(name, field)`` for a target ``<anything>.parameter_map["<name>"].<field>``."""
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Subscript):
        sub = target.value
        if isinstance(sub.value, ast.Attribute) and sub.value.attr == "parameter_map":
            key = sub.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                return key.value, target.attr
    return None


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def read_python(text: str) -> list[AscendConfig] | Finding:
    """Every dump configuration in a Python snippet, or an error finding when it is not Python."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        return Finding(
            "error",
            f"the snippet is not valid Python (line {exc.lineno}: {exc.msg})",
            "paste the lines that set the dump options, as they are in the training script",
            "syntax",
        )
    reader = _Reader(tree)
    configs: dict[str, AscendConfig] = {}
    opened_at: int | None = None
    dump_config_vars: dict[str, int] = {}
    run_configs: list[ast.Call] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) == "open" and "npu" in ast.unparse(node.func):
            opened_at = node.lineno if opened_at is None else min(opened_at, node.lineno)
        if isinstance(node, ast.Call) and _call_name(node) == "NPURunConfig":
            run_configs.append(node)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _call_name(node.value) == "DumpConfig":
            for target in node.targets:
                if isinstance(target, ast.Name):
                    dump_config_vars[target.id] = node.lineno
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            name = _dump_config_target(target)
            if name is not None:
                _set(configs.setdefault("tf2", AscendConfig("tf2")), name, node, reader, None)
            pm = _parameter_map_target(target)
            if pm is not None:
                _set(configs.setdefault("tf1", AscendConfig("tf1")), pm[0], node, reader, pm[1])
            if (
                isinstance(target, ast.Attribute)
                and target.attr == "name"
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                _check_optimizer_name(configs, node.value.value, node.lineno)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) == "DumpConfig":
            configs.setdefault("estimator", AscendConfig("estimator"))
            _read_dump_config_call(configs["estimator"], node, reader)
    if "estimator" in configs:
        _check_passed(configs["estimator"], run_configs, dump_config_vars)
    if "tf2" in configs and opened_at is not None:
        first = min(s.line or 0 for s in configs["tf2"].settings.values()) if configs["tf2"].settings else 0
        if first > opened_at:
            configs["tf2"].findings.append(
                Finding(
                    "warning",
                    f"npu.open() (line {opened_at}) comes before the dump_config lines (from line {first}): "
                    "the device reads the global options when it opens",
                    "set npu.global_options().dump_config.* before npu.open().as_default()",
                    "option-order",
                )
            )
    return [c for c in configs.values() if c.settings or c.findings]


def _check_optimizer_name(configs: dict[str, AscendConfig], name: str, line: int) -> None:
    if name != "NpuOptimizer" and difflib.get_close_matches(name, ["NpuOptimizer"], n=1, cutoff=0.75):
        configs.setdefault("tf1", AscendConfig("tf1")).findings.append(
            Finding(
                "error",
                f"custom optimizer name {name!r} (line {line}) is not 'NpuOptimizer': its parameter_map is never read",
                'custom_op.name = "NpuOptimizer"',
                "optimizer-name",
            )
        )


def _set(
    config: AscendConfig, name: str, node: ast.Assign | ast.AnnAssign, reader: _Reader, tf1_field: str | None
) -> None:
    if node.value is None:
        return
    line = node.lineno
    source = ast.unparse(node)
    value, is_bytes = reader.read(node.value)
    if name not in ASCEND_PARAMS:
        close = _close_param(name)
        if close:
            config.findings.append(
                Finding(
                    "error",
                    f"unknown dump parameter {name!r} (line {line}): nothing reads it",
                    f"{close} (not {name})",
                    "unknown-parameter",
                )
            )
        return
    if tf1_field is not None:
        expected = TF1_FIELD[ASCEND_PARAMS[name]]
        if tf1_field != expected:
            config.findings.append(
                Finding(
                    "error",
                    f'parameter_map["{name}"].{tf1_field} (line {line}): {name} is read from the .{expected} field, '
                    f"so this value is ignored",
                    _tf1_line(name, value if not isinstance(value, Computed) else None),
                    "field-type",
                )
            )
            return
        if expected == "s" and isinstance(value, str) and not is_bytes:
            config.findings.append(
                Finding(
                    "error",
                    f'parameter_map["{name}"].s = {value!r} (line {line}) assigns a str to a bytes field: '
                    "protobuf raises TypeError",
                    _tf1_line(name, value),
                    "field-type",
                )
            )
    previous = config.settings.get(name)
    if previous is None or (previous.line or 0) <= line:  # the last assignment in the snippet wins
        config.settings[name] = Setting(value, line, source)


def _tf1_line(name: str, value: Any) -> str:
    if ASCEND_PARAMS[name] is bool:
        return f'custom_op.parameter_map["{name}"].b = {value if isinstance(value, bool) else True}'
    shown = "..." if value is None else value
    return f'custom_op.parameter_map["{name}"].s = tf.compat.as_bytes("{shown}")'


def _read_dump_config_call(config: AscendConfig, node: ast.Call, reader: _Reader) -> None:
    line = node.lineno
    for position, arg in enumerate(node.args):
        if position >= len(DUMP_CONFIG_ORDER):
            config.findings.append(
                Finding(
                    "error",
                    f"DumpConfig(...) (line {line}) has {len(node.args)} positional arguments; it takes at most "
                    f"{len(DUMP_CONFIG_ORDER)}",
                    "pass the parameters by name: DumpConfig(enable_dump=True, dump_path=...)",
                    "unknown-parameter",
                )
            )
            break
        name = DUMP_CONFIG_ORDER[position]
        config.settings[name] = Setting(reader.read(arg)[0], line, ast.unparse(arg))
    for keyword in node.keywords:
        if keyword.arg is None:
            config.findings.append(
                Finding("info", f"DumpConfig(**{ast.unparse(keyword.value)}) (line {line}) is not read", "", "computed")
            )
            continue
        if keyword.arg not in ASCEND_PARAMS:
            close = _close_param(keyword.arg)
            config.findings.append(
                Finding(
                    "error",
                    f"DumpConfig has no parameter {keyword.arg!r} (line {line}): the call raises TypeError",
                    f"{close}=..." if close else f"one of {', '.join(ASCEND_PARAMS)}",
                    "unknown-parameter",
                )
            )
            continue
        config.settings[keyword.arg] = Setting(reader.read(keyword.value)[0], line, ast.unparse(keyword))


def _check_passed(config: AscendConfig, run_configs: list[ast.Call], dump_config_vars: dict[str, int]) -> None:
    """An error when the snippet builds NPURunConfig without the DumpConfig: the dump options are then never used."""
    if not run_configs:
        return
    for call in run_configs:
        for keyword in call.keywords:
            if keyword.arg == "dump_config":
                value = keyword.value
                if isinstance(value, ast.Call) and _call_name(value) == "DumpConfig":
                    return
                if isinstance(value, ast.Name) and value.id in dump_config_vars:
                    return
                if not isinstance(value, ast.Name):
                    return  # built some other way: give it the benefit of the doubt
                config.findings.append(
                    Finding(
                        "error",
                        f"NPURunConfig(dump_config={value.id}) (line {call.lineno}) does not pass the DumpConfig "
                        f"built here ({', '.join(dump_config_vars) or 'not assigned to a name'})",
                        f"NPURunConfig(dump_config={next(iter(dump_config_vars), 'dump_config')}, ...)",
                        "not-passed",
                    )
                )
                return
    config.findings.append(
        Finding(
            "error",
            f"NPURunConfig(...) (line {run_configs[0].lineno}) has no dump_config argument: the DumpConfig is "
            "never used",
            f"NPURunConfig(dump_config={next(iter(dump_config_vars), 'dump_config')}, ...)",
            "not-passed",
        )
    )


def read_json(text: str) -> list[AscendConfig | MsprobeConfig] | Finding:
    """The configuration in a JSON text: msprobe's config.json or a dict of options."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return Finding("error", f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})", "", "syntax")
    except ValueError:
        return Finding("error", f"not read: the JSON holds {long_number()}", "", "syntax")
    return read_mapping(data)


def read_mapping(data: object) -> list[AscendConfig | MsprobeConfig] | Finding:
    """The configuration in an already-parsed mapping (msprobe config.json or a dict of options)."""
    if not isinstance(data, dict):
        return Finding("error", f"expected a JSON object, found {type(data).__name__}", "", "not-found")
    if MSPROBE_KEYS & set(data):
        return [MsprobeConfig(data)]
    ge = {GE_OPTIONS[k]: v for k, v in data.items() if k in GE_OPTIONS}
    if ge:
        config = AscendConfig("ge")
        for name, value in ge.items():
            if ASCEND_PARAMS[name] is bool:
                if value not in ("0", "1"):
                    config.findings.append(
                        Finding(
                            "error",
                            f"{_ge_name(name)} is {value!r}; the graph engine accepts only the strings '1' and '0'",
                            f'"{_ge_name(name)}": "1"',
                            "value-type",
                        )
                    )
                    continue
                value = value == "1"
            config.settings[name] = Setting(value, None, _ge_name(name))
        return [config]
    config = AscendConfig("options")
    for key, value in data.items():
        if key in ASCEND_PARAMS:
            config.settings[key] = Setting(value, None, key)
        elif _close_param(key):
            config.findings.append(
                Finding(
                    "error",
                    f"unknown dump parameter {key!r}: nothing reads it",
                    _close_param(key) or "",
                    "unknown-parameter",
                )
            )
    if not config.settings and not config.findings:
        return Finding(
            "error",
            "no dump settings found: expected msprobe's config.json (task, dump_path, level, step, rank) or "
            "dump options (enable_dump, dump_path, ...)",
            "",
            "not-found",
        )
    return [config]


def _ge_name(name: str) -> str:
    return next(k for k, v in GE_OPTIONS.items() if v == name)
