"""The early worker's dump.json scans, sent to the command's process (``nbprec.compare.early_msprobe.Shipper``,
``ShippedScans``) and taken by the msprobe reader (``nbprec.formats._prescan``): the reader scans only the files
the worker did not scan as they are now, and the comparison is the one without the worker.

Each run happens in a fresh interpreter, as the command runs: the worker is forked before numpy is loaded.
"""

from __future__ import annotations

import marshal
import mmap
import os
import shutil
from pathlib import Path

import pytest
from early_support import assert_same, compare_fresh, needs_two_cores

from nbprec.compare import early_msprobe
from nbprec.formats import _prescan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
PAIRS = {
    "tensor": (FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix"),
    "statistics": (FIXTURES / "bf16_statistics_mix", FIXTURES / "fp32_statistics_mix"),
}


@needs_two_cores
@pytest.mark.parametrize("task", sorted(PAIRS))
def test_the_reader_takes_the_workers_scans(task):
    target, bench = PAIRS[task]
    plain = compare_fresh(target, bench, "plain")
    early = compare_fresh(target, bench, "early", wait=1.0)
    files = [*target.rglob("dump.json"), *bench.rglob("dump.json")]
    assert sorted(plain["scanned_here"]) == sorted(f.stat().st_size for f in files)  # (the reader scans each)
    assert early["scanned_here"] == []  # both came from the worker
    assert_same(plain, early)


@needs_two_cores
def test_a_dump_json_changed_after_the_workers_scan_is_read_again(tmp_path):
    target, bench = (shutil.copytree(side, tmp_path / side.name) for side in PAIRS["statistics"])
    changed = sorted(target.rglob("dump.json"))[0]
    before = compare_fresh(target, bench, "plain")
    early = compare_fresh(target, bench, "early", wait=1.0, changed=changed)
    assert early["scanned_here"] == [changed.stat().st_size]  # the changed file alone, scanned again
    plain = compare_fresh(target, bench, "plain")  # (the file as it is now)
    assert plain["columns"] != before["columns"]  # (the change shows in the comparison)
    assert_same(plain, early)


@needs_two_cores
def test_a_dump_compared_with_itself_takes_each_scan_once():
    """Both sides read the same files: one reader takes the worker's scan of each, the other scans it itself."""
    target = PAIRS["statistics"][0]
    plain = compare_fresh(target, target, "plain")
    early = compare_fresh(target, target, "early", wait=1.0)
    assert sorted(early["scanned_here"]) == sorted(f.stat().st_size for f in target.rglob("dump.json"))
    assert_same(plain, early)


def test_the_workers_slots_are_the_readers():
    from nbprec.formats.msprobe_columns import SLOTS

    assert early_msprobe.SLOTS == SLOTS


def test_only_whole_records_are_taken(tmp_path):
    """The reader's side takes the records the count says are there, each whole and once; a record cut short
    waits for the rest, and with nothing registered nothing is taken."""
    fd = os.memfd_create("test-scans")
    flag = mmap.mmap(-1, 16)
    try:
        ship = early_msprobe.Shipper(fd, flag)
        shipped = early_msprobe.ShippedScans(fd, flag)
        ship((1, 2, 3, 4, 5), ("first",))
        ship((6, 7, 8, 9, 10), ("second",))
        assert shipped((6, 7, 8, 9, 10)) == ("second",)
        assert shipped((6, 7, 8, 9, 10)) is None  # (each is given once)
        assert shipped((1, 2, 3, 4, 5)) == ("first",)
        assert shipped((0, 0, 0, 0, 0)) is None
        data = marshal.dumps(((11, 12, 13, 14, 15), ("third",)))
        os.write(fd, len(data).to_bytes(8, "little") + data[:-3])  # written in part ...
        flag[8:16] = (ship.sent + 8 + len(data) - 3).to_bytes(8, "little")  # ... and counted so far
        assert shipped((11, 12, 13, 14, 15)) is None
        flag[8:16] = (1 << 60).to_bytes(8, "little")  # a count beyond the file: what is there is read
        assert shipped((11, 12, 13, 14, 15)) is None
        os.write(fd, data[-3:])
        flag[8:16] = (ship.sent + 8 + len(data)).to_bytes(8, "little")
        assert shipped((11, 12, 13, 14, 15)) == ("third",)
    finally:
        os.close(fd)
    file = tmp_path / "dump.json"
    file.write_text("{}", encoding="utf-8")
    assert _prescan.take(file) is None  # (no source)
    seen = []
    _prescan.provide(lambda identity: seen.append(identity) or ("scan",))
    try:
        assert _prescan.take(file) == ("scan",)
        assert seen == [_prescan.identity(file.stat())]
        assert _prescan.take(tmp_path) is None  # not a regular file: not asked
        assert _prescan.take(tmp_path / "missing.json") is None
    finally:
        _prescan.provide(None)
