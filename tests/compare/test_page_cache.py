"""Payloads part of whose pages are not in the page cache (evicted by memory pressure, or by a kernel that pages
idle cache out) are read without waiting for the disk: the pair is measured after the others of its batch, once
the pages have come in, and the comparison is the same to the bit.

Each test makes real holes in the page cache of its own copies of the fixture dumps (written, flushed to the disk,
then dropped with ``posix_fadvise(DONTNEED)``), and is skipped where the file system keeps the pages anyway.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

import nbprec
from nbprec.compare import early, engine
from nbprec.compare.executors import InlineExecutor
from nbprec.compare.small_pairs import small_pair
from nbprec.formats import _files
from nbprec.formats._files import MAP_FROM
from nbprec.formats._npyfile import small_npy

_zipdir = pytest.importorskip("nbprec.formats._zipdir", reason="the compiled reader is not built")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
pytestmark = pytest.mark.skipif(not hasattr(os, "RWF_NOWAIT"), reason="Linux's RWF_NOWAIT reads")
_libc = ctypes.CDLL(None, use_errno=True)


def _drop(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # (dirty pages stay in the page cache: written out first, they can be dropped)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _resident(path: Path) -> bool:
    """Whether any page of ``path`` is in the page cache (``mincore`` of a mapping: nothing is read)."""
    size = path.stat().st_size
    with open(path, "rb") as file:
        mapped = mmap.mmap(file.fileno(), size, access=mmap.ACCESS_COPY)
    try:
        view = (ctypes.c_char * size).from_buffer(mapped)
        pages = (ctypes.c_ubyte * ((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE))()
        if _libc.mincore(ctypes.c_void_p(ctypes.addressof(view)), ctypes.c_size_t(size), pages) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        del view
        return any(page & 1 for page in pages)
    finally:
        mapped.close()


def _evict(path: Path) -> None:
    """Drop ``path``'s pages from the page cache, skipping the test where they stay (a file system that keeps
    them, such as tmpfs)."""
    for _ in range(20):
        _drop(path)
        if not _resident(path):
            return
        time.sleep(0.01)
    pytest.skip(f"this file system keeps the pages of {path.parent} in the page cache")


#: Tries of a read that should find its file out of the page cache. The read starts the file's reading and checks
#: the pages once; a disk with a cache of its own (a virtual disk on the host's page cache) can finish in between,
#: above all when another process keeps this one off the CPU: then it is tried again.
_TRIES = 20


def _out_of_the_cache(path: Path, read):
    """What ``read()`` gives once ``path`` is evicted: False, unless the disk served the missing pages within the
    read itself (see :data:`_TRIES`)."""
    for _ in range(_TRIES):
        _evict(path)
        found = read()
        if found is False:
            return found
        time.sleep(0.01)
    return found


def _copy(tmp_path: Path, name: str) -> Path:
    copy = tmp_path / name
    shutil.copytree(FIXTURES / name, copy)
    return copy


def _payloads(dump: Path) -> list[Path]:
    return sorted(dump.rglob("*.pt"))


def _same(a: nbprec.Comparison, b: nbprec.Comparison) -> None:
    left, right = a.columns, b.columns
    assert list(left) == list(right)
    for name in left:
        assert [repr(v) for v in left[name].tolist()] == [repr(v) for v in right[name].tolist()], name


def test_read_small_does_not_wait_for_the_disk_when_asked(tmp_path):
    dump = _copy(tmp_path, "bf16_tensor_mix")
    path = max(_payloads(dump), key=lambda p: p.stat().st_size)
    clean = _zipdir.read_small(str(path), MAP_FROM)
    assert _out_of_the_cache(path, lambda: _zipdir.read_small(str(path), MAP_FROM, False)) is False
    assert _zipdir.read_small(str(path), MAP_FROM) == clean  # waiting: read as usual
    assert _zipdir.read_small(str(path), MAP_FROM, False) == clean  # all in the page cache now
    others = _payloads(dump)[:3]
    found = _out_of_the_cache(
        path, lambda: _zipdir.read_small_many([str(p) for p in [*others, path]], MAP_FROM, True, False)[-1]
    )
    assert found is False
    assert all(isinstance(f, tuple) for f in _zipdir.read_small_many([str(p) for p in others], MAP_FROM, True, False))
    _files.read_ahead([str(path)])  # (waiting for it)
    assert _files.read_ahead([str(path), str(others[0])], wait=False) == set()

    def missing() -> bool | None:  # (False: the evicted file was found out of the cache, and only it)
        return False if _files.read_ahead([str(path), str(others[0])], wait=False) == {str(path)} else None

    assert _out_of_the_cache(path, missing) is False
    assert _files.taken_ahead(str(others[0])) is not None and _files.taken_ahead(str(path)) is None
    _files.forget_ahead()


def test_small_pair_tells_a_pair_not_in_the_page_cache(tmp_path):
    target, bench = _copy(tmp_path, "bf16_tensor_mix"), _copy(tmp_path, "fp32_tensor_mix")
    t_dump, b_dump = nbprec.open(target), nbprec.open(bench)
    names = b_dump.columns["name"].tolist()
    rows = [
        (t_dump.columns.row(i), b_dump.columns.row(names.index(name)))
        for i, name in enumerate(t_dump.columns["name"].tolist())
        if name in names
    ]
    t_row, b_row = max(
        ((t, b) for t, b in rows if t["has_data"] and t["dtype"] == "bfloat16"), key=lambda tb: tb[0]["numel"]
    )
    args = (str(t_row["file"]), t_row["dtype"], str(b_row["file"]), b_row["dtype"], tuple(t_row["shape"]))
    extremes = (t_row["min"], t_row["max"], b_row["min"], b_row["max"])
    clean = small_pair(*args, extremes)
    assert clean is not None
    for side in (Path(args[0]), Path(args[2])):
        assert _out_of_the_cache(side, lambda: small_pair(*args, extremes, wait=False)) is False
        assert repr(small_pair(*args, extremes)) == repr(clean)  # waiting: measured as usual


@pytest.mark.parametrize("parallel", ["inline", "threads", "processes"])
def test_a_comparison_with_payloads_out_of_the_page_cache_is_the_same(tmp_path, monkeypatch, parallel):
    target, bench = _copy(tmp_path, "bf16_tensor_mix"), _copy(tmp_path, "fp32_tensor_mix")
    options = {"executor": InlineExecutor()} if parallel == "inline" else {"parallel": parallel, "workers": 2}
    clean = nbprec.compare(target, bench, **options)
    later = []  # (inline: pairs small_pair found out of the page cache; threads: files read_ahead found so)
    ahead = engine.read_ahead

    def counting_pairs(*args, **kwargs):
        found = small_pair(*args, **kwargs)
        later.append(found is False)
        return found

    def counting_files(paths, archives=True, wait=True):
        missing = ahead(paths, archives, wait)
        later.extend([True] * len(missing))
        return missing

    monkeypatch.setattr(engine, "small_pair", counting_pairs)
    monkeypatch.setattr(engine, "read_ahead", counting_files)
    for _ in range(_TRIES if parallel != "processes" else 1):  # (see _TRIES: the disk may serve the holes in time)
        for path in _payloads(target)[::3] + _payloads(bench)[1::5]:
            _evict(path)
        holed = nbprec.compare(target, bench, **options)
        _same(clean, holed)
        if any(later):
            break
    if parallel != "processes":  # (a forked worker's calls are not seen here)
        assert any(later), "no pair was found out of the page cache"


def test_the_early_worker_measures_pairs_out_of_the_page_cache_last(tmp_path):
    target, bench = _copy(tmp_path, "bf16_tensor_mix"), _copy(tmp_path, "fp32_tensor_mix")

    class Go:
        def __getitem__(self, i):
            return 0

    roots = (str(target), str(bench))
    clean = list(early._pair_records(roots, Go()))
    evicted = _payloads(target)[::4]
    out = {str(p) for p in evicted}
    for _ in range(_TRIES):  # (every evicted payload can come back within its own read: see _TRIES)
        for path in evicted:
            _evict(path)
        holed = list(early._pair_records(roots, Go()))
        assert holed[0] == clean[0]  # the header
        assert sorted(holed[1:]) == sorted(clean[1:])
        records = holed[1:]
        last = 0  # the records of evicted payloads at the end: measured last
        while last < len(records) and records[-1 - last][0] in out:
            last += 1
        if last > 0:
            break
        time.sleep(0.01)
    assert last > 0
    # (an evicted payload can also come back before its pair's turn: a disk whose reads finish at once)
    assert records[: len(records) - last] == [r for r in clean[1:] if r not in records[len(records) - last :]]


def test_small_npy_does_not_wait_for_the_disk_when_asked(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(6000, dtype=np.float32).reshape(2, 3000))
    clean = small_npy(str(path), "float32", (2, 3000))
    assert clean is not None
    assert _out_of_the_cache(path, lambda: small_npy(str(path), "float32", (2, 3000), wait=False)) is False
    assert small_npy(str(path), "float32", (2, 3000)) == clean
    assert small_npy(str(path), "float32", (2, 3000), wait=False) == clean
    assert small_npy(str(path), "float64", (2, 3000), wait=False) is None  # not what the file holds
