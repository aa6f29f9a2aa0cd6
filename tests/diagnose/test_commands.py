"""aoe/atc command lines as users write them: forms of options, quotes, continuations, scripts, history."""

from __future__ import annotations

import pytest

from nbprec.diagnose import find_commands, parse_command
from nbprec.diagnose.commands import commands_in_line, tokenize


@pytest.mark.parametrize(
    "line",
    [
        'atc --framework=5 --input_shape="input:1,3,224,224;mask:1,224" --precision_mode=force_fp32',
        "atc --framework 5 --input_shape 'input:1,3,224,224;mask:1,224' --precision_mode force_fp32",
        'atc -framework=5 -input_shape="input:1,3,224,224;mask:1,224" -precision-mode=force_fp32',
        '/usr/local/Ascend/ascend-toolkit/latest/bin/atc --framework=5 --input_shape="input:1,3,224,224;mask:1,224" '
        "--precision_mode=force_fp32",
        '$ TUNE_BANK_PATH=/data/kb sudo -E atc --framework=5 --input_shape "input:1,3,224,224;mask:1,224" '
        "--precision_mode=force_fp32",
        'source set_env.sh && atc --framework=5 --input_shape="input:1,3,224,224;mask:1,224" '
        "--precision_mode=force_fp32 | tee atc.log",
    ],
)
def test_option_forms(line):
    (command,) = commands_in_line(line)
    assert command.tool == "atc"
    assert command.value("framework") == "5"
    assert command.value("input_shape") == "input:1,3,224,224;mask:1,224"
    assert command.value("precision_mode") == "force_fp32"


def test_env_assignments_and_wrappers():
    (command,) = commands_in_line("TUNE_BANK_PATH=/data/kb TE_PARALLEL_COMPILER=4 nohup aoe --job_type=2 &")
    assert command.env == {"TUNE_BANK_PATH": "/data/kb", "TE_PARALLEL_COMPILER": "4"}
    assert command.tool == "aoe" and command.value("job_type") == "2"


def test_continuations_crlf_and_comments_in_a_script():
    script = (
        "#!/bin/bash\r\n"
        "# tune first, then convert\r\n"
        "aoe --framework=5 \\\r\n"
        "    --model=./resnet50.onnx \\\r\n"
        '    --input_shape="input: 1,3,224,224" \\\r\n'
        "    --job_type=1   # subgraph tuning\r\n"
        "\r\n"
        "atc --framework=5 --model=./resnet50.onnx --output=resnet50 \\\r\n"
        "--soc_version=Ascend310P3\r\n"
    )
    aoe, atc = find_commands(script.splitlines(keepends=True), "run.sh")
    assert (aoe.tool, aoe.where, atc.tool, atc.where) == ("aoe", "run.sh:3", "atc", "run.sh:8")
    assert aoe.value("input_shape") == "input: 1,3,224,224" and aoe.value("job_type") == "1"
    assert "subgraph" not in aoe.tokens
    assert atc.value("soc_version") == "Ascend310P3" and atc.value("output") == "resnet50"


def test_negative_values_and_repeated_options():
    command = parse_command(["atc", "--input_shape", "x:-1,3", "--dynamic_batch_size", "1,2", "--out_nodes=a:0",
                             "--out_nodes=b:0"])  # fmt: skip
    assert command.value("input_shape") == "x:-1,3" and command.value("dynamic_batch_size") == "1,2"
    assert command.value("out_nodes") == "b:0"  # the last wins, as gflags reads it


def test_lines_that_only_mention_the_tools_are_not_commands():
    assert commands_in_line("ATC run failed, Please check the detail log, Try 'atc --help' for more information") == []
    assert commands_in_line("2024-05-11 10:21:36,001 - aoe - INFO - tuning subgraph 3/120") == []
    assert commands_in_line("echo atc") == []


def test_unbalanced_quotes_do_not_crash():
    assert tokenize('atc --input_shape="x:1,3') == ["atc", '--input_shape="x:1,3']
