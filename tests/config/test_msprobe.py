"""msprobe's config.json: every documented mistake caught with its fix, and msprobe itself agreeing when present."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nbprec.config import dump_config, validate

MSPROBE_VENV = Path(__file__).resolve().parents[2] / "bench" / ".venv-msprobe" / "bin" / "python"


def config(dump_dir, **changes):
    """A good tensor-dump config.json with ``changes`` applied (None deletes a key)."""
    data = {
        "task": "tensor",
        "dump_path": str(dump_dir),
        "rank": [],
        "step": [0],
        "level": "L1",
        "async_dump": False,
        "tensor": {"scope": [], "list": [], "data_mode": ["all"]},
    }
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def errors(findings, check):
    found = [f for f in findings if f.check == check and f.is_error]
    assert found, "\n".join(f.to_text() for f in findings)
    return found


def test_a_good_config_has_no_errors_nor_warnings(dump_dir):
    findings = validate(json.dumps(config(dump_dir)))
    assert not [f for f in findings if f.severity != "info"], findings


def test_task_not_a_task(dump_dir):
    assert errors(validate(config(dump_dir, task="Tensor")), "task")[0].fix == '"task": "tensor"'
    assert errors(validate(config(dump_dir, task="dump")), "task")


def test_level_not_a_level(dump_dir):
    assert errors(validate(config(dump_dir, level="l1")), "level")[0].fix == '"level": "L1"'
    assert errors(validate(config(dump_dir, level="L3")), "level")


@pytest.mark.parametrize("key", ["step", "rank"])
@pytest.mark.parametrize(
    ("value", "words", "fix"),
    [
        ("0|5", "must be a list", "[0, 5]"),
        (3, "must be a list", "[3]"),
        ([-1, 2], "between 0 and 1000000", "[2]"),
        ([1000001], "between 0 and 1000000", ""),
        (["5-3"], "reversed range", "[3, 4, 5]"),
        (["3-"], 'is not "N" or "A-B"', ""),
        ([True], "must be an integer", ""),
        ([0.5], "must be an integer", ""),
    ],
    ids=["bar-string", "bare-int", "negative", "too-large", "reversed", "half-range", "bool", "float"],
)
def test_step_and_rank_lists(key, value, words, fix, dump_dir):
    found = errors(validate(config(dump_dir, **{key: value})), f"{key}-list")
    assert words in found[0].message
    if fix:
        assert found[0].fix == f'"{key}": {fix}'


def test_overflow_nums(dump_dir):
    base = config(dump_dir, task="overflow_check", tensor=None)
    for nums, words in [
        (0, "-1 (never stop)"),
        (-2, "-1 (never stop)"),
        ("1", "must be an integer"),
        (True, "integer"),
    ]:
        found = errors(validate({**base, "overflow_check": {"overflow_nums": nums}}), "overflow-nums")
        assert words in found[0].message and '"overflow_nums": 1' in found[0].fix
    for nums in (-1, 1, 100):
        assert not [f for f in validate({**base, "overflow_check": {"overflow_nums": nums}}) if f.is_error]
    default = [f for f in validate(base) if f.check == "overflow-nums"]
    assert default[0].severity == "info" and "first overflow" in default[0].message


def test_overflow_nums_at_the_top_level_is_ignored(dump_dir):
    data = config(dump_dir, task="overflow_check", tensor=None, overflow_nums=-1)
    found = [f for f in validate(data) if f.check == "misplaced-key"]
    assert found[0].severity == "warning" and found[0].fix == '"overflow_check": {"overflow_nums": -1}'


def test_data_mode(dump_dir):
    bad = config(dump_dir, tensor={"data_mode": ["outputs"]})
    assert errors(validate(bad), "data-mode")[0].fix == '"data_mode": ["all"]'
    combined = config(dump_dir, tensor={"data_mode": ["all", "input"]})
    assert "cannot be combined" in errors(validate(combined), "data-mode")[0].message
    assert errors(validate(config(dump_dir, tensor={"data_mode": "all"})), "data-mode")


def test_summary_mode_and_lists(dump_dir):
    stats = config(dump_dir, task="statistics", tensor=None, statistics={"summary_mode": "max"})
    assert errors(validate(stats), "summary-mode")
    assert errors(validate(config(dump_dir, tensor={"list": "Functional.relu"})), "list-type")


def test_dump_path_missing_and_special_characters(tmp_path):
    assert errors(validate(config(tmp_path, dump_path=None)), "dump-path-missing")
    spaced = tmp_path / "my dump"
    found = errors(validate(config(tmp_path, dump_path=str(spaced))), "dump-path-chars")
    assert found[0].fix == f'"dump_path": "{tmp_path}/my_dump"'


def test_dump_path_is_created_by_msprobe(tmp_path):
    findings = validate(config(tmp_path, dump_path=str(tmp_path / "new")))
    assert [f.severity for f in findings if f.check == "dump-path-not-found"] == ["info"]
    assert not [f for f in findings if f.is_error]


def test_every_step_dumped(dump_dir):
    found = [f for f in validate(config(dump_dir, step=[])) if f.check == "all-steps"]
    assert found[0].severity == "warning" and found[0].fix == '"step": [0]'


def test_installed_msprobe_is_consulted_for_the_task(dump_dir):
    const = pytest.importorskip("msprobe.core.common.const")
    data = config(dump_dir, task="overflow_check", tensor=None)
    warned = [f for f in validate(data) if f.check == "task" and f.severity == "warning"]
    assert bool(warned) == ("overflow_check" not in const.Const.TORCH_TASK_LIST)


ORACLE = """
import json, sys
from msprobe.pytorch.dump.pt_config import parse_json_config
for path in sys.argv[1:]:
    try:
        parse_json_config(path, None)
        print(json.dumps("accepted"))
    except BaseException as exc:
        print(json.dumps(f"rejected: {exc}"))
"""


@pytest.mark.skipif(not MSPROBE_VENV.exists(), reason="bench/.venv-msprobe (msprobe with torch) is not installed")
def test_msprobe_itself_agrees(tmp_path, dump_dir):
    """msprobe's own parser accepts every generated config.json and rejects every mistake nbprec calls an error."""
    good = [
        json.loads(dump_config(dump_dir, "0|3-5", style="msprobe", mode="all", ops=["Functional.relu"])),
        json.loads(dump_config(dump_dir, 0, style="msprobe", data="stats", mode="input", level="mix")),
        config(dump_dir, step=[0, "2-4"], rank=[0, 1]),
    ]
    bad = [
        config(dump_dir, task="Tensor"),
        config(dump_dir, level="l1"),
        config(dump_dir, step="0|5"),
        config(dump_dir, step=["5-3"]),
        config(dump_dir, rank=[-1]),
        config(dump_dir, tensor={"data_mode": ["outputs"]}),
        config(dump_dir, tensor={"data_mode": ["all", "input"]}),
        config(dump_dir, task="statistics", statistics={"summary_mode": "max"}),
    ]
    for data in good:
        assert not [f for f in validate(data) if f.is_error], data
    for data in bad:
        assert [f for f in validate(data) if f.is_error], data
    paths = []
    for n, data in enumerate(good + bad):
        path = tmp_path / f"config_{n}.json"
        path.write_text(json.dumps(data))
        paths.append(str(path))
    run = subprocess.run([str(MSPROBE_VENV), "-c", ORACLE, *paths], capture_output=True, text=True, timeout=300)
    verdicts = [json.loads(line) for line in run.stdout.splitlines() if line.startswith('"')]
    assert len(verdicts) == len(paths), run.stderr[-2000:]
    for data, verdict in zip(good, verdicts[: len(good)], strict=True):
        assert verdict == "accepted", (data, verdict)
    for data, verdict in zip(bad, verdicts[len(good) :], strict=True):
        assert verdict.startswith("rejected"), (data, verdict)
