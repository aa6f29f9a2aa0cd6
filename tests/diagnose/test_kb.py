"""aoe against atc: every parameter that must agree is compared, by meaning, with the corrected atc command."""

from __future__ import annotations

import shlex

import pytest

from nbprec.diagnose import PARAMETERS, DiagnoseError, compare_commands, diagnose

BASE_AOE = "aoe --framework=5 --model=/data/models/resnet50.onnx --job_type=1 --output=/data/aoe_out"
BASE_ATC = "atc --framework=5 --model=/data/models/resnet50.onnx --output=/data/om/resnet50 --soc_version=Ascend310P3"

#: per parameter: a value aoe tuned with and a different one atc converts with
DIFFERENT = {
    "input_format": ("NCHW", "ND"),
    "input_shape": ("input:1,3,224,224;mask:1,224", "input:8,3,224,224;mask:8,224"),
    "output_type": ("FP32", "FP16"),
    "insert_op_conf": ("FILE:aipp_a.cfg", "FILE:aipp_b.cfg"),
    "fusion_switch_file": ("FILE:fusion_a.cfg", "FILE:fusion_b.cfg"),
    "enable_scope_fusion_passes": ("ScopeLayerNormPass,ScopeClipBoxesPass", "ScopeLayerNormPass"),
    "enable_small_channel": ("1", "0"),
    "out_nodes": ("logits:0;prob:0", "logits:0"),
    "input_fp16_nodes": ("input;mask", "input"),
    "is_input_adjust_hw_layout": ("true,false", "false,true"),
    "is_output_adjust_hw_layout": ("true", "false"),
    "precision_mode": ("allow_mix_precision", "force_fp32"),
    "op_precision_mode": ("FILE:op_precision_a.ini", "FILE:op_precision_b.ini"),
    "modify_mixlist": ("FILE:mixlist_a.json", "FILE:mixlist_b.json"),
    "keep_dtype": ("FILE:keep_a.cfg", "FILE:keep_b.cfg"),
    "op_select_implmode": ("high_precision", "high_performance"),
    "optypelist_for_implmode": ("Pooling,SoftmaxV2", "Pooling"),
    "dynamic_batch_size": ("1,2,4,8", "1,2,4"),
    "dynamic_image_size": ("224,224;448,448", "224,224;448,448;896,896"),
    "dynamic_dims": ("1,10;2,20;4,40", "1,10;2,20"),
}
#: per parameter: a value differing from what atc uses when the option is left out
NOT_DEFAULT = {name: pair[0] for name, pair in DIFFERENT.items()} | {
    "input_format": "ND",
    "is_output_adjust_hw_layout": "true",
}


def test_the_table_covers_every_parameter_of_the_issue():
    assert [p.name for p in PARAMETERS] == list(DIFFERENT)


def _value(value: str, tmp_path) -> str:
    """A value as written; ``FILE:name`` is a file of that name (its own content) in tmp_path."""
    if not value.startswith("FILE:"):
        return value
    path = tmp_path / value[5:]
    path.write_text(f"# {value[5:]}\n[settings]\nname={value[5:]}\n")
    return str(path)


def _arg(name: str, value: str, style: str) -> str:
    return f"--{name}={shlex.quote(value)}" if style == "=" else f"--{name} {shlex.quote(value)}"


@pytest.mark.parametrize("style", ["=", " "])
@pytest.mark.parametrize("name", list(DIFFERENT))
def test_each_mismatch_is_found_and_corrected(name, style, tmp_path):
    tuned, converted = (_value(v, tmp_path) for v in DIFFERENT[name])
    aoe = f"{BASE_AOE} {_arg(name, tuned, style)}"
    atc = f"{BASE_ATC} {_arg(name, converted, style)} --log=error"
    d = compare_commands(aoe, atc)
    (finding,) = d.findings
    assert (finding.kind, finding.severity) == ("kb-mismatch", "error")
    assert finding.values["parameter"] == name
    assert (finding.values["aoe"], finding.values["atc"]) == (tuned, converted) or name == "precision_mode"
    assert finding.values["affects"] and finding.values["affects"] in finding.message
    fixed = shlex.split(d.corrected_command)
    assert fixed[: len(shlex.split(BASE_ATC))] == shlex.split(BASE_ATC)  # atc's other arguments kept, in place
    assert fixed[-1] == "--log=error" or fixed[-2:] == ["--log", "error"]
    assert compare_commands(aoe, d.corrected_command).findings == ()  # the corrected command agrees with aoe
    assert d.corrected_command in finding.remedy


@pytest.mark.parametrize("side", ["aoe", "atc"])
@pytest.mark.parametrize("name", list(NOT_DEFAULT))
def test_one_side_setting_what_the_other_leaves_at_its_default(name, side, tmp_path):
    value = _value(NOT_DEFAULT[name], tmp_path)
    aoe = f"{BASE_AOE} --{name}={shlex.quote(value)}" if side == "aoe" else BASE_AOE
    atc = f"{BASE_ATC} --{name}={shlex.quote(value)}" if side == "atc" else BASE_ATC
    d = compare_commands(aoe, atc)
    assert [f.values["parameter"] for f in d.findings] == [name]
    assert "not set" in d.findings[0].message
    assert compare_commands(aoe, d.corrected_command).findings == ()
    if side == "atc":
        assert f"--{name}" not in d.corrected_command  # removed: aoe tuned with the default


@pytest.mark.parametrize(
    ("name", "default"),
    [
        ("precision_mode", "force_fp16"),
        ("op_select_implmode", "high_performance"),
        ("enable_small_channel", "0"),
        ("is_input_adjust_hw_layout", "false"),
        ("is_output_adjust_hw_layout", "false,false"),
        ("input_format", "NCHW"),  # ONNX (--framework=5)
    ],
)
def test_a_default_written_out_is_the_same_as_left_out(name, default):
    assert compare_commands(f"{BASE_AOE} --{name}={default}", BASE_ATC).findings == ()
    assert compare_commands(BASE_AOE, f"{BASE_ATC} --{name}={default}").findings == ()


def test_input_format_default_follows_the_framework():
    tf_aoe = BASE_AOE.replace("--framework=5", "--framework=3")
    tf_atc = BASE_ATC.replace("--framework=5", "--framework=3")
    assert compare_commands(f"{tf_aoe} --input_format=NHWC", tf_atc).findings == ()
    (finding,) = compare_commands(f"{tf_aoe} --input_format=NCHW", tf_atc).findings
    assert "default NHWC for TensorFlow" in finding.message


def test_unknown_default_is_a_value_of_its_own_and_said_so():
    aoe = BASE_AOE.replace("--framework=5 ", "") + " --input_format=NCHW"
    (finding,) = compare_commands(aoe, BASE_ATC.replace("--framework=5 ", "")).findings
    assert finding.severity == "error" and "value of its own" in finding.message


@pytest.mark.parametrize(
    ("tuned", "converted"),
    [
        ("input:1,3,224,224;mask:1,224", "mask:1,224;input:1,3,224,224"),  # inputs in another order
        ("input:1,3,224,224;mask:1,224", " input : 1, 3, 224, 224 ; mask:1,224; "),  # spaces, trailing ;
        ("input:-1,3,-1,-1", "input:-1,3,-1,-1"),
        ("input:1~8,3,224,224", "input:1~8,3,224,224"),
    ],
)
def test_shapes_compare_by_meaning(tuned, converted):
    d = compare_commands(f'{BASE_AOE} --input_shape="{tuned}"', f'{BASE_ATC} --input_shape="{converted}"')
    assert d.findings == ()


@pytest.mark.parametrize(
    ("tuned", "converted"),
    [
        ("input:-1,3,224,224", "input:1,3,224,224"),  # dynamic against static: as written
        ("input:1~8,3,224,224", "input:1~4,3,224,224"),
        ("input:1,3,224,224", "image:1,3,224,224"),  # another input name
        ("input:1,3,224,224;mask:1,224", "input:1,3,224,224"),  # an input left out
    ],
)
def test_shape_differences_are_found(tuned, converted):
    d = compare_commands(f'{BASE_AOE} --input_shape="{tuned}"', f'{BASE_ATC} --input_shape="{converted}"')
    assert [f.values["parameter"] for f in d.findings] == ["input_shape"]


def test_precision_synonyms_and_v2_agree():
    assert compare_commands(f"{BASE_AOE} --precision_mode=force_fp32", f"{BASE_ATC} --precision_mode="
                            "cube_fp16in_fp32out").findings == ()  # fmt: skip
    assert compare_commands(f"{BASE_AOE} --precision_mode=must_keep_origin_dtype",
                            f"{BASE_ATC} --precision_mode_v2=origin").findings == ()  # fmt: skip
    d = compare_commands(f"{BASE_AOE} --precision_mode=allow_mix_precision", f"{BASE_ATC} --precision_mode_v2=fp16")
    (finding,) = d.findings
    assert finding.values["parameter"] == "precision_mode"
    assert (
        "--precision_mode=allow_mix_precision" in d.corrected_command and "precision_mode_v2" not in d.corrected_command
    )


def test_clean_pairs_give_no_finding(logs):
    assert compare_commands(logs.AOE, logs.ATC).findings == ()
    script = f"{logs.AOE} \\\n  --log=info\n{logs.ATC}\n"
    d = diagnose(script)
    assert d.findings == () and d.corrected_command == "" and any("no differences" in n for n in d.notes)


def test_several_mismatches_at_once_and_one_corrected_command(logs):
    atc = logs.ATC.replace("--input_format=NCHW", "--input_format=NHWC").replace("allow_mix_precision", "force_fp16")
    atc += " --output_type=FP16"
    d = compare_commands(logs.AOE, atc)
    assert [f.values["parameter"] for f in d.findings] == ["input_format", "output_type", "precision_mode"]
    assert all(f.where == "<command>:1" for f in d.findings)
    assert compare_commands(logs.AOE, d.corrected_command).findings == ()
    assert '--input_shape="input:1,3,224,224;mask:1,224"' in d.corrected_command


def test_files_with_other_paths_but_the_same_bytes_agree(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder in ("a", "b"):
        (tmp_path / folder / "aipp.cfg").write_text("aipp_op {\n  aipp_mode: static\n}\n")
    aoe = f"{BASE_AOE} --insert_op_conf={tmp_path / 'a' / 'aipp.cfg'}"
    assert compare_commands(aoe, f"{BASE_ATC} --insert_op_conf={tmp_path / 'b' / 'aipp.cfg'}").findings == ()
    assert compare_commands(aoe, f"{BASE_ATC} --insert_op_conf={tmp_path / 'a' / '.' / 'aipp.cfg'}").findings == ()
    (finding,) = compare_commands(aoe, f"{BASE_ATC} --insert_op_conf=/elsewhere/aipp.cfg").findings
    assert finding.severity == "error" and "cannot both be read here" in finding.message


def test_tune_bank_path_on_one_line_or_both():
    d = compare_commands(f"TUNE_BANK_PATH=/data/kb {BASE_AOE}", BASE_ATC)
    (finding,) = d.findings
    assert finding.kind == "kb-bank-path" and finding.severity == "warning"
    assert d.corrected_command.startswith("TUNE_BANK_PATH=/data/kb atc ")
    same = compare_commands(f"TUNE_BANK_PATH=/data/kb {BASE_AOE}", f"TUNE_BANK_PATH=/data/kb/ {BASE_ATC}")
    assert same.findings == ()
    (other,) = compare_commands(f"TUNE_BANK_PATH=/a {BASE_AOE}", f"TUNE_BANK_PATH=/b {BASE_ATC}").findings
    assert other.severity == "error" and "TUNE_BANK_PATH=/a atc " in other.remedy
    (only_atc,) = compare_commands(BASE_AOE, f"TUNE_BANK_PATH=/b {BASE_ATC}").findings
    assert only_atc.severity == "warning" and "before aoe" in only_atc.remedy


def test_commands_from_files_swapped_and_missing(tmp_path, logs):
    tune, convert = tmp_path / "tune.sh", tmp_path / "convert.sh"
    tune.write_text(f"#!/bin/sh\nset -e\n{logs.AOE} --input_fp16_nodes=input\n")
    convert.write_text(f"#!/bin/sh\n{logs.ATC}\n")
    d = compare_commands(tune, str(convert))
    assert [(f.values["parameter"], f.where) for f in d.findings] == [("input_fp16_nodes", f"{convert}:2")]
    assert compare_commands(convert, tune).findings[0].values["parameter"] == "input_fp16_nodes"  # swapped back
    with pytest.raises(DiagnoseError, match="no aoe command"):
        compare_commands(convert, convert)
