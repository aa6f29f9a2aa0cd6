"""``nbprec config dump|overflow|check`` through the real ``nbprec.cli.main`` (the hook added to its parser)."""

from __future__ import annotations

import argparse
import io
import json

import pytest

from nbprec.cli import parser as cli
from nbprec.config.cli import parse_size


@pytest.fixture
def nbprec_main():
    """``nbprec.cli.main`` (its parser has ``config``)."""
    return cli.main


def test_dump_prints_the_snippet(nbprec_main, capsys, dump_dir):
    assert nbprec_main(["config", "dump", "--steps", "0|5", "--style", "tf2", "--path", str(dump_dir)]) == 0
    out = capsys.readouterr().out
    assert 'npu.global_options().dump_config.dump_step = "0|5"' in out


def test_dump_to_a_file_then_check_it(nbprec_main, capsys, dump_dir, tmp_path):
    out_file = tmp_path / "config.json"
    argv = ["config", "dump", "--steps", "0|3-5", "--style", "msprobe", "--path", str(dump_dir), "--mode", "all"]
    assert nbprec_main([*argv, "--ops", "Functional.relu", "--ranks", "0", "1", "-o", str(out_file)]) == 0
    assert f"wrote {out_file}" in capsys.readouterr().out
    config = json.loads(out_file.read_text())
    assert config["step"] == [0, 3, 4, 5] and config["rank"] == [0, 1]
    assert nbprec_main(["config", "check", str(out_file)]) == 0
    assert "no problems found" in capsys.readouterr().out


def test_overflow_for_an_estimator_on_atlas_a2(nbprec_main, capsys, dump_dir):
    argv = ["config", "overflow", "--mode", "all", "--style", "estimator", "--path", str(dump_dir)]
    assert nbprec_main([*argv, "--product", "atlas-a2"]) == 0
    assert 'dump_debug_mode="all"' in capsys.readouterr().out
    argv[3] = "aicore_overflow"
    assert nbprec_main([*argv, "--product", "atlas-a2"]) == 1
    assert "Atlas A2 training products support only overflow mode 'all'" in capsys.readouterr().err


def test_check_exit_status_and_fixes(nbprec_main, capsys, dump_dir, tmp_path):
    snippet = (
        'custom_op.parameter_map["enable_dump"].b = True\n'
        'custom_op.parameter_map["enable_dump_debug"].b = True\n'
        f'custom_op.parameter_map["dump_path"].s = tf.compat.as_bytes("{dump_dir}")\n'
        'custom_op.parameter_map["dump_step"].s = tf.compat.as_bytes("0|5")\n'
    )
    assert nbprec_main(["config", "check", snippet]) == 1
    out = capsys.readouterr().out
    assert "error: enable_dump and enable_dump_debug are both True" in out
    assert "  fix: one goal per run" in out and "1 error(s)" in out
    script = tmp_path / "train.py"
    script.write_text(snippet.replace('"enable_dump_debug"].b = True', '"enable_dump_debug"].b = False'))
    assert nbprec_main(["config", "check", str(script)]) == 0


def test_check_reads_stdin_and_prints_json(nbprec_main, capsys, monkeypatch, dump_dir):
    text = json.dumps({"enable_dump": True, "dump_path": str(dump_dir), "dump_step": "10-3"})
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert nbprec_main(["config", "check", "-", "--json", "--bytes-per-step", "1K", "--steps", "20"]) == 1
    findings = json.loads(capsys.readouterr().out)
    assert {f["check"] for f in findings} >= {"step-syntax", "disk-estimate"}
    assert next(f for f in findings if f["check"] == "step-syntax")["fix"] == '"dump_step": "3-10"'


def test_check_for_another_user_and_a_sample(nbprec_main, capsys, dump_dir):
    dump_dir.chmod(0o755)
    text = json.dumps({"enable_dump": True, "dump_path": str(dump_dir), "dump_step": "0"})
    assert nbprec_main(["config", "check", text, "--user", "54321"]) == 1
    assert "uid 54321 cannot" in capsys.readouterr().out
    assert nbprec_main(["config", "check", text, "--sample-dump", str(dump_dir / "none")]) == 1
    assert "cannot be read" in capsys.readouterr().out


def test_sizes():
    assert parse_size("123") == 123
    assert parse_size("3G") == parse_size("3GiB") == 3 * 2**30
    assert parse_size("1.5k") == 1536
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size("lots")
