"""Write dump options as the text a user pastes: a Python snippet per TensorFlow style, or JSON.

Each style's snippet follows the examples of the Ascend TensorFlow migration guides:

- ``tf2``: ``npu.global_options().dump_config.<name> = value`` before ``npu.open().as_default()``;
- ``tf1``: ``custom_op.parameter_map["<name>"].b = True`` / ``.s = tf.compat.as_bytes("...")`` on the
  ``NpuOptimizer`` custom optimizer of the session's ``ConfigProto``;
- ``estimator``: ``DumpConfig(<name>=value, ...)`` passed as ``NPURunConfig(dump_config=...)``;
- ``options``: a JSON object of the same names (for tools that take a dict of options).
"""

from __future__ import annotations

import json
from typing import Any

PY_STYLES = ("tf2", "tf1", "estimator")


def literal(value: Any) -> str:
    """``value`` as Python source (strings with double quotes)."""
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def assignment(style: str, name: str, value: Any) -> str:
    """How one parameter is set in ``style`` (the text a fix shows)."""
    if style == "tf2":
        return f"npu.global_options().dump_config.{name} = {literal(value)}"
    if style == "tf1":
        if isinstance(value, bool):
            return f'custom_op.parameter_map["{name}"].b = {value}'
        return f'custom_op.parameter_map["{name}"].s = tf.compat.as_bytes({literal(value)})'
    if style == "estimator":
        return f"DumpConfig(..., {name}={literal(value)})"
    if style == "ge":
        from nbprec.config.parse import GE_OPTIONS

        key = next(k for k, v in GE_OPTIONS.items() if v == name)
        shown = ("1" if value else "0") if isinstance(value, bool) else value
        return f"{json.dumps(key)}: {json.dumps(shown)}"
    return f"{json.dumps(name)}: {json.dumps(value)}"


def render_ascend(style: str, options: dict[str, Any]) -> str:
    """The configuration snippet (or JSON) setting ``options`` in ``style``."""
    if style == "options":
        return json.dumps(options, indent=4) + "\n"
    if style == "tf2":
        lines = [
            "import npu_device as npu",
            "",
            "# before npu.open().as_default(): the device reads the global options when it opens",
            *(assignment("tf2", k, v) for k, v in options.items()),
        ]
    elif style == "tf1":
        lines = [
            "import tensorflow as tf",
            "from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig",
            "",
            "config = tf.ConfigProto()",
            "custom_op = config.graph_options.rewrite_options.custom_optimizers.add()",
            'custom_op.name = "NpuOptimizer"',
            'custom_op.parameter_map["use_off_line"].b = True',
            *(assignment("tf1", k, v) for k, v in options.items()),
            "config.graph_options.rewrite_options.remapping = RewriterConfig.OFF",
            "config.graph_options.rewrite_options.memory_optimization = RewriterConfig.OFF",
            "# then: with tf.Session(config=config) as sess: ...",
        ]
    elif style == "estimator":
        arguments = "".join(f"    {k}={literal(v)},\n" for k, v in options.items())
        lines = [
            "from npu_bridge.npu_init import *",
            "",
            f"dump_config = DumpConfig(\n{arguments})",
            "config = NPURunConfig(dump_config=dump_config)  # with your other NPURunConfig arguments",
        ]
    else:
        raise ValueError(f"unknown style {style!r}")
    return "\n".join(lines) + "\n"


def render_msprobe(config: dict[str, Any]) -> str:
    """msprobe's config.json text."""
    return json.dumps(config, indent=4) + "\n"
