"""Every documented mistake in a pasted TensorFlow configuration is caught, with its fix (one test per mistake)."""

from __future__ import annotations

import json

import pytest

from nbprec.config import validate
from nbprec.config.render import render_ascend

STYLES = ("tf2", "tf1", "estimator", "options")


def pasted(style: str, **options) -> str:
    """A configuration as a user would paste it (the generator's renderer writes any values, wrong ones too)."""
    return render_ascend(style, options)


def only(findings, check, severity="error"):
    """The one finding of ``check``; fails listing every finding otherwise."""
    found = [f for f in findings if f.check == check and f.severity == severity]
    assert len(found) == 1, "\n".join(f.to_text() for f in findings)
    return found[0]


@pytest.mark.parametrize("style", STYLES)
def test_data_dump_and_overflow_detection_together(style, dump_dir):
    text = pasted(style, enable_dump=True, enable_dump_debug=True, dump_path=str(dump_dir), dump_step="0")
    finding = only(validate(text), "both-enabled")
    assert "enable_dump and enable_dump_debug are both True" in finding.message
    assert "enable_dump_debug" in finding.fix and "false" in finding.fix.lower()


def test_graph_engine_options_together_and_as_strings(dump_dir):
    options = {"ge.exec.enableDump": "1", "ge.exec.enableDumpDebug": "1", "ge.exec.dumpPath": str(dump_dir)}
    assert only(validate(json.dumps(options)), "both-enabled").fix.count('"0"') == 2
    options = {"ge.exec.enableDump": "true", "ge.exec.dumpPath": str(dump_dir), "ge.exec.dumpStep": "0"}
    assert only(validate(json.dumps(options)), "value-type").fix == '"ge.exec.enableDump": "1"'


@pytest.mark.parametrize("style", STYLES)
def test_overflow_mode_not_a_mode(style, dump_dir):
    text = pasted(style, enable_dump_debug=True, dump_path=str(dump_dir), dump_debug_mode="aicore")
    finding = only(validate(text), "overflow-mode")
    assert "aicore_overflow, atomic_overflow, all" in finding.message
    assert "aicore_overflow" in finding.fix  # the closest valid mode


@pytest.mark.parametrize("mode", ["aicore_overflow", "atomic_overflow"])
def test_overflow_mode_other_than_all_on_atlas_a2(mode, dump_dir):
    text = pasted("tf2", enable_dump_debug=True, dump_path=str(dump_dir), dump_debug_mode=mode)
    finding = only(validate(text, product="atlas-a2"), "overflow-mode-product")
    assert "Atlas A2" in finding.message
    assert finding.fix == 'npu.global_options().dump_config.dump_debug_mode = "all"'
    assert not [f for f in validate(text, product="atlas-training") if f.check == "overflow-mode-product"]
    assert only(validate(text), "overflow-mode-product", "info")  # no product given: said, not judged
    assert only(validate(text, product="Atlas A3"), "overflow-mode-product", "warning")


@pytest.mark.parametrize(
    ("steps", "reason", "fixed"),
    [
        ("0,5,10", "separated by '|', not ','", "0|5|10"),
        ("0;5", "separated by '|', not ';'", "0|5"),
        ("0 | 5", "spaces are not allowed", "0|5"),
        ("10-3", "reversed", "3-10"),
        ("4-4", "equal bounds", "4"),
        ("-1|5", "cannot be negative", "5"),
        ("0|5|", "empty set", "0|5"),
        ("0||5", "empty set", "0|5"),
        ("1.5", "not a step N or a range A-B", ""),
        ("0-3-5", "not a step N or a range A-B", ""),
        ("first", "not a step N or a range A-B", ""),
        ("2147483648", "at most 2147483647", "2147483647"),
        ("|".join(str(2 * n) for n in range(101)), "at most 100", ""),
    ],
    ids=[
        "comma",
        "semicolon",
        "spaces",
        "reversed",
        "equal-bounds",
        "negative",
        "trailing-bar",
        "doubled-bar",
        "decimal",
        "three-bounds",
        "word",
        "past-int32",
        "101-sets",
    ],
)
@pytest.mark.parametrize("style", ["tf1", "estimator"])
def test_step_syntax(steps, reason, fixed, style, dump_dir):
    text = pasted(style, enable_dump=True, dump_path=str(dump_dir), dump_step=steps, dump_mode="output")
    errors = [f for f in validate(text) if f.check == "step-syntax"]
    assert errors and any(reason in f.message for f in errors), [f.message for f in errors]
    if fixed:
        assert f'"{fixed}"' in errors[0].fix
    if reason == "at most 100":
        assert "fewer steps" in errors[0].fix


def test_step_syntax_accepts_what_cann_accepts(dump_dir):
    sets = "|".join(str(2 * n) for n in range(100))  # exactly 100 sets
    for steps in ("0", "0|5|10", "0|3-5|10", sets, "2147483647"):
        text = pasted("tf2", enable_dump=True, dump_path=str(dump_dir), dump_step=steps)
        assert not [f for f in validate(text) if f.severity != "info"], steps


@pytest.mark.parametrize("style", STYLES)
def test_dump_mode_not_a_mode(style, dump_dir):
    text = pasted(style, enable_dump=True, dump_path=str(dump_dir), dump_step="0", dump_mode="outputs")
    finding = only(validate(text), "dump-mode")
    assert "input, output, all" in finding.message
    assert '"output"' in finding.fix


def test_dump_data_not_tensor_or_stats(dump_dir):
    text = pasted("tf1", enable_dump=True, dump_path=str(dump_dir), dump_step="0", dump_data="statistics")
    assert "stats" in only(validate(text), "dump-data").fix


@pytest.mark.parametrize("style", STYLES)
def test_dump_path_missing(style):
    text = pasted(style, enable_dump_debug=True, dump_debug_mode="all")
    finding = only(validate(text), "dump-path-missing")
    assert "dump_path" in finding.fix


def test_dump_path_relative(tmp_path, monkeypatch):
    (tmp_path / "dump").mkdir()
    monkeypatch.chdir(tmp_path)
    text = pasted("tf2", enable_dump=True, dump_path="dump", dump_step="0")
    finding = only(validate(text), "dump-path-relative", "warning")
    assert finding.fix == f'dump_path="{tmp_path / "dump"}"'
    assert not [f for f in validate(text) if f.is_error]  # Ascend allows it: a warning, not an error


def test_dump_path_that_does_not_exist(tmp_path):
    missing = tmp_path / "not-yet"
    text = pasted("estimator", enable_dump=True, dump_path=str(missing), dump_step="0")
    finding = only(validate(text), "dump-path-not-found")
    assert finding.fix == f"mkdir -p {missing}"
    assert "chown" in only(validate(text, user=0), "dump-path-not-found").fix


def test_dump_path_that_is_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    text = pasted("options", enable_dump=True, dump_path=str(tmp_path / "file"), dump_step="0")
    only(validate(text), "dump-path-not-dir")


def test_bool_parameter_written_to_the_string_field(dump_dir):
    text = f"""
custom_op.parameter_map["enable_dump"].s = tf.compat.as_bytes("True")
custom_op.parameter_map["dump_path"].s = tf.compat.as_bytes("{dump_dir}")
custom_op.parameter_map["dump_step"].s = tf.compat.as_bytes("0")
"""
    findings = validate(text)
    finding = only(findings, "field-type")
    assert "line 2" in finding.message and finding.fix == 'custom_op.parameter_map["enable_dump"].b = True'
    only(findings, "nothing-enabled", "warning")  # and so nothing is dumped


def test_str_assigned_to_a_bytes_field(dump_dir):
    text = f"""
DUMP = "{dump_dir}"
custom_op.parameter_map["enable_dump"].b = True
custom_op.parameter_map["dump_path"].s = DUMP
custom_op.parameter_map["dump_step"].s = b"0|5"
custom_op.parameter_map["dump_mode"].s = "all".encode()
"""
    finding = only(validate(text), "field-type")
    assert "str to a bytes field" in finding.message and "line 4" in finding.message
    assert finding.fix == f'custom_op.parameter_map["dump_path"].s = tf.compat.as_bytes("{dump_dir}")'


@pytest.mark.parametrize("style", ["tf2", "estimator", "options"])
def test_switch_given_as_a_string(style, dump_dir):
    text = pasted(style, enable_dump="True", dump_path=str(dump_dir), dump_step="0")
    assert "must be a bool" in only(validate(text), "value-type").message


@pytest.mark.parametrize("style", ["tf2", "estimator", "options"])
def test_steps_given_as_a_number(style, dump_dir):
    text = pasted(style, enable_dump=True, dump_path=str(dump_dir), dump_step=5)
    assert '"0|5"' in only(validate(text), "value-type").fix


@pytest.mark.parametrize(
    "text",
    [
        'npu.global_options().dump_config.dump_stpe = "0"',
        'custom_op.parameter_map["enable_dumps"].b = True',
        'DumpConfig(enable_dump=True, dump_mod="all")',
    ],
    ids=["tf2", "tf1", "estimator"],
)
def test_misspelt_parameter(text):
    finding = only(validate(text), "unknown-parameter")
    assert any(name in finding.fix for name in ("dump_step", "enable_dump", "dump_mode"))


def test_dump_config_not_passed_to_npu_run_config(dump_dir):
    text = f"""
dump_config = DumpConfig(enable_dump=True, dump_path="{dump_dir}", dump_step="0")
config = NPURunConfig(session_config=session_config, iterations_per_loop=1)
"""
    assert only(validate(text), "not-passed").fix == "NPURunConfig(dump_config=dump_config, ...)"
    other = text.replace("session_config=session_config", "dump_config=my_dump")
    assert "dump_config=my_dump" in only(validate(other), "not-passed").message
    right = text.replace("session_config=session_config", "dump_config=dump_config")
    assert not [f for f in validate(right) if f.is_error]


def test_misspelt_optimizer_name(dump_dir):
    text = f"""
custom_op.name = "NpuOptimiser"
custom_op.parameter_map["enable_dump"].b = True
custom_op.parameter_map["dump_path"].s = tf.compat.as_bytes("{dump_dir}")
custom_op.parameter_map["dump_step"].s = tf.compat.as_bytes("0")
"""
    assert only(validate(text), "optimizer-name").fix == 'custom_op.name = "NpuOptimizer"'


def test_options_set_after_the_device_opens(dump_dir):
    text = f"""
import npu_device as npu
npu.open().as_default()
npu.global_options().dump_config.enable_dump = True
npu.global_options().dump_config.dump_path = "{dump_dir}"
npu.global_options().dump_config.dump_step = "0"
"""
    assert "line 3" in only(validate(text), "option-order", "warning").message


@pytest.mark.parametrize("style", STYLES)
def test_nothing_enabled(style, dump_dir):
    text = pasted(style, dump_path=str(dump_dir), dump_step="0", dump_mode="all")
    finding = only(validate(text), "nothing-enabled", "warning")
    assert "nothing is dumped" in finding.message and "enable_dump" in finding.fix


@pytest.mark.parametrize("style", STYLES)
def test_every_step_dumped(style, dump_dir):
    text = pasted(style, enable_dump=True, dump_path=str(dump_dir), dump_mode="output")
    assert '"0"' in only(validate(text), "all-steps", "warning").fix


def test_steps_past_the_end_of_the_run(dump_dir):
    text = pasted("tf1", enable_dump=True, dump_path=str(dump_dir), dump_step="0|50|90-120")
    finding = only(validate(text, steps=100), "step-beyond-run", "warning")
    assert "90-120" in finding.message and "50" not in finding.message.split(":")[1].split("at or past")[0]


def test_dump_layer_with_commas_and_tensor_names(dump_dir):
    text = pasted("tf2", enable_dump=True, dump_path=str(dump_dir), dump_step="0", dump_layer="conv1/Relu:0,fc/MatMul")
    findings = [f for f in validate(text) if f.check == "dump-layer"]
    assert len(findings) == 2
    assert findings[0].fix.endswith('"conv1/Relu:0 fc/MatMul"')
    assert findings[1].fix.endswith('"conv1/Relu fc/MatMul"')


def test_data_dump_parameters_ignored_by_overflow_detection(dump_dir):
    text = pasted("estimator", enable_dump_debug=True, dump_path=str(dump_dir), dump_step="0|5", dump_mode="all")
    finding = only(validate(text), "ignored-parameter", "info")
    assert "dump_step, dump_mode" in finding.message


def test_values_computed_at_run_time_are_said_not_checked():
    text = """
npu.global_options().dump_config.enable_dump = True
npu.global_options().dump_config.dump_path = os.path.join(base, "dump")
npu.global_options().dump_config.dump_step = f"{first}|{last}"
"""
    computed = [f for f in validate(text) if f.check == "computed"]
    assert [f.severity for f in computed] == ["info", "info"]
    assert "os.path.join(base, 'dump')" in computed[0].message


@pytest.mark.parametrize(
    ("text", "check", "words"),
    [
        ("custom_op.parameter_map[", "syntax", "not valid Python (line 1"),
        ("x = 1\nprint(x)", "not-found", "no dump settings found"),
        ('{"enable_dump": true,', "syntax", "not valid JSON"),
        ("[1, 2]", "not-found", "no dump settings found"),
        ("/no/such/config.json", "not-found", "no such file"),
    ],
    ids=["python", "no-settings", "json", "json-list", "missing-file"],
)
def test_unreadable_input(text, check, words):
    finding = only(validate(text), check)
    assert words in finding.message


def test_file_paths_are_read(tmp_path, dump_dir):
    script = tmp_path / "train.py"
    script.write_text(pasted("tf1", enable_dump=True, enable_dump_debug=True, dump_path=str(dump_dir)))
    assert only(validate(script), "both-enabled")
    assert only(validate(str(script)), "both-enabled")
    options = tmp_path / "options.json"
    options.write_text(json.dumps({"enable_dump": True, "dump_path": str(dump_dir), "dump_mode": "al"}))
    assert only(validate(options), "dump-mode").fix == '"dump_mode": "all"'
