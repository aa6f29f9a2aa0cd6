"""Generated configurations: every style read back with ast/json holds the values asked for, and passes validate."""

from __future__ import annotations

import json

import pytest

from nbprec.config import STYLES, ConfigError, dump_config, has_errors, overflow_config, validate

TF_STYLES = ("tf2", "tf1", "estimator", "options")


@pytest.mark.parametrize("style", TF_STYLES)
@pytest.mark.parametrize(
    ("steps", "expected"),
    [("0|5|10", "0|5|10"), ("0|3-5|10", "0|3-5|10"), ([0, "3-5", 10], "0|3-5|10"), (7, "7"), ("2|0|1", "0-2")],
)
def test_data_dump_reads_back_in_every_tensorflow_style(style, steps, expected, dump_dir, read_back):
    text = dump_config(dump_dir, steps, style=style, mode="all")
    assert read_back(style, text) == {
        "enable_dump": True,
        "dump_path": str(dump_dir),
        "dump_step": expected,
        "dump_mode": "all",
    }
    findings = validate(text)
    assert not has_errors(findings), findings
    assert not [f for f in findings if f.severity == "warning"], findings


@pytest.mark.parametrize("style", TF_STYLES)
def test_data_dump_of_chosen_ops_as_statistics(style, dump_dir, read_back):
    text = dump_config(dump_dir, "1", style=style, ops=["conv1/Relu", "fc/MatMul"], data="stats")
    values = read_back(style, text)
    assert values["dump_layer"] == "conv1/Relu fc/MatMul"  # CANN splits dump_layer on spaces
    assert values["dump_data"] == "stats"
    assert values["dump_mode"] == "output"
    assert not has_errors(validate(text))


@pytest.mark.parametrize("style", TF_STYLES)
@pytest.mark.parametrize("mode", ["aicore_overflow", "atomic_overflow", "all"])
def test_overflow_detection_reads_back_in_every_tensorflow_style(style, mode, dump_dir, read_back):
    text = overflow_config(dump_dir, mode, style=style, product="atlas-training")
    assert read_back(style, text) == {"enable_dump_debug": True, "dump_path": str(dump_dir), "dump_debug_mode": mode}
    assert not has_errors(validate(text, product="atlas-training"))


def test_msprobe_data_dump_round_trips(dump_dir, read_back):
    text = dump_config(dump_dir, "0|3-5", style="msprobe", mode="input", ops=["Functional.relu"], ranks=[0, 1])
    config = read_back("msprobe", text)
    assert config == {
        "task": "tensor",
        "dump_path": str(dump_dir),
        "rank": [0, 1],
        "step": [0, 3, 4, 5],
        "level": "L1",
        "async_dump": False,
        "tensor": {"scope": [], "list": ["Functional.relu"], "data_mode": ["input"]},
    }
    assert json.dumps(config, indent=4) + "\n" == text
    assert not has_errors(validate(text))
    assert not has_errors(validate(config))  # the parsed dict is accepted too


def test_msprobe_statistics_and_overflow_check_round_trip(dump_dir, read_back):
    stats = read_back("msprobe", dump_config(dump_dir, 0, style="msprobe", data="stats", level="mix"))
    assert stats["task"] == "statistics" and stats["level"] == "mix"
    assert stats["statistics"]["summary_mode"] == "statistics"
    overflow = overflow_config(dump_dir, style="msprobe", overflow_nums=-1, steps="0-2")
    config = read_back("msprobe", overflow)
    assert config["task"] == "overflow_check" and config["overflow_check"] == {"overflow_nums": -1}
    assert config["step"] == [0, 1, 2]
    assert not has_errors(validate(overflow))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda d: dump_config("dump", "0", style="tf2"), "relative"),
        (lambda d: dump_config(d, "5-3", style="tf1"), "reversed"),
        (lambda d: dump_config(d, "", style="tf1"), "name the steps"),
        (lambda d: dump_config(d, "0", style="tf2", mode="outputs"), "mode 'outputs'"),
        (lambda d: dump_config(d, "0", style="tf2", ops=["conv 1"]), "spaces"),
        (lambda d: dump_config(d, "0", style="keras"), "style 'keras'"),
        (lambda d: dump_config(d, "0", style="msprobe", level="L3"), "level 'L3'"),
        (lambda d: overflow_config(d, "aicore_overflow", product="atlas-a2"), "only overflow mode 'all'"),
        (lambda d: overflow_config(d, "nan_overflow"), "not one of"),
        (lambda d: overflow_config(d, "atomic_overflow", style="msprobe"), "has no mode"),
        (lambda d: overflow_config(d, style="msprobe", overflow_nums=0), "overflow_nums 0"),
        (lambda d: overflow_config(d, style="tf1", steps="0|5"), "no step selection"),
        (lambda d: overflow_config(d, product="ascend-9000"), "product 'ascend-9000'"),
    ],
)
def test_generation_refuses_what_would_be_wrong(call, message, dump_dir):
    with pytest.raises(ConfigError, match=message):
        call(str(dump_dir))


def test_styles_are_the_documented_five():
    assert STYLES == ("tf2", "tf1", "estimator", "msprobe", "options")


def test_the_package_stays_light():
    """Importing nbprec.config (and generating) loads no widget library, no torch and no msprobe."""
    import subprocess
    import sys

    code = (
        "import sys, nbprec.config as c; c.dump_config('/d', '0', style='tf1'); "
        "print(sorted(m for m in ('ipywidgets', 'bqplot', 'ipycytoscape', 'torch', 'msprobe') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    "module",
    [
        "nbprec.config",
        "nbprec.config.generate",
        "nbprec.config.validation",
        "nbprec.config.steps",
        "nbprec.config.findings",
    ],
)
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
