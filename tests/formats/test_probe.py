"""Format probing: find_first_file, and one listing per folder shared by the readers' guesses."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from nbprec.formats import _probe, guess_format
from nbprec.formats._probe import find_first_file, shared_listings


def _flat_npy_folder(root: Path, count: int) -> Path:
    root.mkdir()
    for k in range(count):
        np.save(root / f"op{k}.0.{1000 + k}.npy", np.zeros(2, np.float32))
    return root


def _count_listings(monkeypatch) -> dict[str, int]:
    counts: dict[str, int] = {}
    real = _probe._scan

    def scan(folder):
        counts[os.fspath(folder)] = counts.get(os.fspath(folder), 0) + 1
        return real(folder)

    monkeypatch.setattr(_probe, "_scan", scan)
    return counts


def test_guessing_lists_the_folder_once_for_all_readers(tmp_path, monkeypatch):
    folder = _flat_npy_folder(tmp_path / "tf", 30)
    counts = _count_listings(monkeypatch)
    assert guess_format(folder) == "tf_npy"
    assert counts[os.fspath(folder)] == 1  # msprobe's, ptdbg's and CANN's guesses all probed it
    counts.clear()
    find_first_file(folder, lambda name: False, max_depth=0)
    find_first_file(folder, lambda name: False, max_depth=0)
    assert counts[os.fspath(folder)] == 2  # outside a guess, each probe lists afresh


def test_shared_listings_nest_and_end(tmp_path, monkeypatch):
    folder = _flat_npy_folder(tmp_path / "tf", 3)
    counts = _count_listings(monkeypatch)
    with shared_listings():
        with shared_listings():
            assert find_first_file(folder, lambda n: n.startswith("op1."), max_depth=0).name == "op1.0.1001.npy"
        assert find_first_file(folder, lambda n: n.startswith("op2."), max_depth=0).name == "op2.0.1002.npy"
    assert counts[os.fspath(folder)] == 1
    (folder / "later.npy").write_bytes(b"")
    assert find_first_file(folder, lambda n: n == "later.npy", max_depth=0) is not None  # not a stale listing


def test_links_that_loop_or_dangle_are_not_files(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    os.symlink(folder / "b", folder / "a")
    os.symlink(folder / "a", folder / "b")
    os.symlink(folder / "missing", folder / "c")
    (folder / "sub").mkdir()
    (folder / "sub" / "a").write_bytes(b"x")
    assert find_first_file(folder, lambda n: n in ("a", "b", "c"), max_depth=1) == folder / "sub" / "a"
