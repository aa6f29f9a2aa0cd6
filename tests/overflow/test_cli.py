"""``nbprec overflow PATH [--bench PATH] [--headroom]`` on the real fine-tuning runs."""

from __future__ import annotations

import json

import pytest

from nbprec.cli import main

pytestmark = pytest.mark.torch


def test_cli_overflow_ranks_the_first_critical_op_on_top(finetune_runs, capsys, tmp_path):
    code = main(
        [
            "overflow",
            str(finetune_runs["fp16"]),
            "--bench",
            str(finetune_runs["fp32"]),
            "--headroom",
            "--device-type",
            "cpu",
            "-o",
            str(tmp_path / "out"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    stopped = finetune_runs["stopped_on"]
    assert f"first critical op: {stopped}" in out
    ranked = out.split("ranked ops")[1].splitlines()
    assert stopped in ranked[2]  # header line, column titles, then the first critical op
    assert "impact     harmful" in out
    assert "GradScaler(init_scale=" in out and "black-list" in out
    assert "float16" in out.split("headroom if cast down")[1]
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved["summary"]["first_critical_op"] == stopped
    assert (tmp_path / "out" / "headroom" / "ops.csv").exists()


def test_cli_overflow_clean_run_and_errors(finetune_runs, capsys, tmp_path):
    assert main(["overflow", str(finetune_runs["fp32"]), "--no-payload"]) == 0
    assert "first critical op: none" in capsys.readouterr().out
    assert main(["overflow", str(tmp_path / "missing")]) == 1
    assert "no such file" in capsys.readouterr().err
