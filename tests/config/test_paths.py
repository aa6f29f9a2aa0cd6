"""The dump folder's permissions (for the current user and, by mode bits, for another) and the disk estimate."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

import nbprec
from nbprec.config import ConfigError, dump_config, validate
from nbprec.config.paths import Account, account, mode_allows
from nbprec.config.render import render_ascend
from nbprec.formats.cann_write import dump_folder, write_dump_file

OTHER_UID = 54321  # a uid with no entry in the user database: only owner and others' bits can grant it access
IS_ROOT = os.geteuid() == 0


def data_dump(path, steps="0", mode="output", **extra) -> str:
    return render_ascend(
        "tf1", {"enable_dump": True, "dump_path": str(path), "dump_step": steps, "dump_mode": mode, **extra}
    )


def by_check(findings, check):
    return [f for f in findings if f.check == check]


@pytest.fixture
def top_folder():
    """A folder straight under the system temp folder (its parents are searchable by everyone), removed after."""
    folder = Path(tempfile.mkdtemp(prefix="nbprec-config-"))
    yield folder
    for path in (folder, *folder.rglob("*")):
        path.chmod(0o755)
    shutil.rmtree(folder)


def owned_by_other(folder: Path) -> int:
    """Make ``folder`` owned by a uid that is not root: another uid as root, the current one otherwise."""
    if IS_ROOT:
        os.chown(folder, OTHER_UID, -1)
        return OTHER_UID
    return os.getuid()


@pytest.mark.skipif(IS_ROOT, reason="root writes into a read-only folder: os.access says yes")
def test_read_only_folder_for_the_current_user(dump_dir):
    dump_dir.chmod(0o500)
    try:
        found = by_check(validate(data_dump(dump_dir)), "dump-path-permission")
    finally:
        dump_dir.chmod(0o700)
    assert found[0].is_error and "cannot write into" in found[0].message and "0o500" in found[0].message


def test_read_only_folder_for_its_owner_by_mode_bits(top_folder):
    """Owner bits r-x: the owner (not root) cannot write. Works as root too: the check reads the mode bits."""
    uid = owned_by_other(top_folder)
    top_folder.chmod(0o500)
    found = by_check(validate(data_dump(top_folder), user=uid), "dump-path-permission")
    assert len(found) == 1 and found[0].is_error
    assert f"uid {uid}" in found[0].message and "cannot write into" in found[0].message
    assert "0o500" in found[0].message and f"chown {uid}" in found[0].fix
    top_folder.chmod(0o700)
    assert not by_check(validate(data_dump(top_folder), user=uid), "dump-path-permission")


def test_others_bits_decide_for_a_stranger(top_folder):
    stranger = OTHER_UID + 1
    top_folder.chmod(0o755)
    found = by_check(validate(data_dump(top_folder), user=stranger), "dump-path-permission")
    assert "cannot write into" in found[0].message
    top_folder.chmod(0o757)
    assert not by_check(validate(data_dump(top_folder), user=stranger), "dump-path-permission")


def test_group_bits_decide_for_a_group_member(top_folder):
    st = top_folder.stat()
    member = Account("member", OTHER_UID + 2, frozenset({st.st_gid}))
    top_folder.chmod(0o750)
    assert not mode_allows(top_folder.stat(), member, 2)
    assert mode_allows(top_folder.stat(), member, 4 | 1)
    top_folder.chmod(0o770)
    assert mode_allows(top_folder.stat(), member, 4 | 2 | 1)
    top_folder.chmod(0o707)  # the group's bits apply to a member even when the others' bits would allow it
    assert not mode_allows(top_folder.stat(), member, 4)


def test_a_folder_above_that_cannot_be_entered(top_folder):
    inner = top_folder / "dump"
    inner.mkdir(mode=0o777)
    inner.chmod(0o777)
    top_folder.chmod(0o700)
    found = by_check(validate(data_dump(inner), user=OTHER_UID), "dump-path-permission")
    assert f"cannot enter {top_folder}" in found[0].message


def test_root_and_named_users(top_folder):
    top_folder.chmod(0o500)
    assert not by_check(validate(data_dump(top_folder), user=0), "dump-path-permission")  # root writes anyway
    assert not by_check(validate(data_dump(top_folder), user="root"), "dump-path-permission")
    assert account("root").uid == 0 and 0 in account("root").gids
    with pytest.raises(ConfigError, match="no user named 'no-such-user-x'"):
        validate(data_dump(top_folder), user="no-such-user-x")


def test_msprobe_needs_the_folder_above_to_be_writable(top_folder):
    owned_by_other(top_folder)
    top_folder.chmod(0o555)
    text = dump_config(top_folder / "new", "0", style="msprobe")
    found = by_check(validate(text, user=OTHER_UID if IS_ROOT else os.getuid()), "dump-path-permission")
    assert "cannot be created" in found[0].message and "cannot write into" in found[0].message


def test_disk_estimate_past_the_free_space(dump_dir):
    free = shutil.disk_usage(dump_dir).free
    text = data_dump(dump_dir, steps="0|5|10")
    found = by_check(validate(text, bytes_per_step=free), "disk-full")  # 3 steps of the whole free space
    assert len(found) == 1 and found[0].severity == "warning"
    assert "will fill the disk" in found[0].message and "x 3 steps x 1 device" in found[0].message
    fits = by_check(validate(text, bytes_per_step=1024), "disk-estimate")
    assert fits[0].severity == "info" and "3.0 KiB" in fits[0].message


def test_disk_estimate_of_every_step_needs_the_run_length(dump_dir):
    text = render_ascend("tf2", {"enable_dump": True, "dump_path": str(dump_dir)})
    assert by_check(validate(text, bytes_per_step=10**6), "disk-unknown")[0].severity == "info"
    found = by_check(validate(text, bytes_per_step=2**20, steps=1000, devices=8), "disk-estimate")
    assert "7.8 GiB" in found[0].message and "x 1000 steps x 8 devices" in found[0].message


def write_sample(root: Path, steps=(0,), inputs=True) -> Path:
    """A CANN dump: per step one op with a float32 (2, 3) input (24 bytes) and a float16 (2, 3) output (12)."""
    for step in steps:
        folder = dump_folder(root, step=step)
        x = np.ones((2, 3), np.float32)
        write_dump_file(
            folder, "fc/Relu", "Relu", inputs=[x] if inputs else [], outputs=[x.astype(np.float16)], timestamp=step + 1
        )
    return root


@pytest.mark.parametrize(("mode", "per_step"), [("output", 12), ("input", 24), ("all", 36)])
def test_disk_estimate_from_a_sample_dump(mode, per_step, tmp_path, dump_dir):
    sample = write_sample(tmp_path / "sample")
    assert nbprec.open(sample).nbytes() == 36
    found = by_check(validate(data_dump(dump_dir, steps="0|3-5|10", mode=mode), sample_dump=sample), "disk-estimate")
    assert f"about {per_step * 5} B" in found[0].message and "x 5 steps" in found[0].message


def test_sample_of_several_steps_is_averaged(tmp_path, dump_dir):
    sample = write_sample(tmp_path / "sample", steps=(0, 1, 2, 3))
    found = by_check(validate(data_dump(dump_dir, mode="all"), sample_dump=nbprec.open(sample)), "disk-estimate")
    assert "about 36 B" in found[0].message


def test_sample_without_the_inputs_the_config_dumps(tmp_path, dump_dir):
    sample = write_sample(tmp_path / "sample", inputs=False)
    found = by_check(validate(data_dump(dump_dir, mode="all"), sample_dump=sample), "disk-estimate")
    assert [f.severity for f in found] == ["info", "info"] and "no input tensors" in found[0].message


def test_unreadable_sample(tmp_path, dump_dir):
    found = by_check(validate(data_dump(dump_dir), sample_dump=tmp_path / "nothing"), "disk-estimate")
    assert found[0].is_error and "cannot be read" in found[0].message


def test_statistics_dumps_are_not_estimated(dump_dir):
    text = data_dump(dump_dir, dump_data="stats")
    assert not [f for f in validate(text, bytes_per_step=10**18) if f.check.startswith("disk")]
    text = dump_config(dump_dir, "0", style="msprobe", data="stats")
    assert not [f for f in validate(text, bytes_per_step=10**18) if f.check.startswith("disk")]


def test_msprobe_rank_list_counts_the_devices(dump_dir):
    text = dump_config(dump_dir, "0|1", style="msprobe", ranks=[0, 1, 2])
    found = by_check(validate(text, bytes_per_step=1000, devices=8), "disk-estimate")
    assert "x 2 steps x 3 devices" in found[0].message


def test_bad_arguments(dump_dir):
    with pytest.raises(ConfigError, match="not both"):
        validate(data_dump(dump_dir), bytes_per_step=1, sample_dump=dump_dir)
    with pytest.raises(ConfigError, match="at least 1"):
        validate(data_dump(dump_dir), steps=0)
