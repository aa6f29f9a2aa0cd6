"""Shared helpers for the configuration tests: an independent reader of generated snippets, and a dump folder."""

from __future__ import annotations

import ast
import json

import pytest


def _read_back(style: str, text: str) -> dict:
    """The dump options a generated configuration sets, read with ``ast`` / ``json`` alone (not nbprec's parser).

    TF 2 reads ``npu.global_options().dump_config.<name> = <literal>``; TF 1 reads
    ``custom_op.parameter_map["<name>"].b = <literal>`` and ``.s = tf.compat.as_bytes(<literal>)``; the
    Estimator style reads ``DumpConfig(<name>=<literal>)`` and requires ``NPURunConfig(dump_config=dump_config)``.
    """
    if style in ("msprobe", "options"):
        return json.loads(text)
    tree = ast.parse(text)
    compile(tree, "<generated>", "exec")
    values: dict = {}
    if style == "tf2":
        for node in tree.body:
            if isinstance(node, ast.Assign):
                target = ast.unparse(node.targets[0])
                prefix = "npu.global_options().dump_config."
                assert target.startswith(prefix), target
                values[target[len(prefix) :]] = ast.literal_eval(node.value)
    elif style == "tf1":
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute):
                target = node.targets[0]
                if not isinstance(target.value, ast.Subscript):
                    continue
                assert ast.unparse(target.value.value) == "custom_op.parameter_map"
                name = target.value.slice.value
                if target.attr == "b":
                    values[name] = ast.literal_eval(node.value)
                else:
                    assert target.attr == "s"
                    assert ast.unparse(node.value.func) == "tf.compat.as_bytes", "a bytes field needs as_bytes"
                    values[name] = ast.literal_eval(node.value.args[0])
        values.pop("use_off_line")
    elif style == "estimator":
        calls = {ast.unparse(n.func): n for n in ast.walk(tree) if isinstance(n, ast.Call)}
        values = {k.arg: ast.literal_eval(k.value) for k in calls["DumpConfig"].keywords}
        passed = {k.arg: ast.unparse(k.value) for k in calls["NPURunConfig"].keywords}
        assert passed == {"dump_config": "dump_config"}
    return values


@pytest.fixture
def dump_dir(tmp_path):
    """An existing, writable dump folder (CANN needs the folder to exist)."""
    folder = tmp_path / "dump"
    folder.mkdir()
    return folder


@pytest.fixture
def read_back():
    """The independent reader of generated configurations: ``read_back(style, text) -> dict``."""
    return _read_back
