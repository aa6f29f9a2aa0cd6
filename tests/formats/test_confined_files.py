"""ConfinedFiles: payloads open only when their real path lies inside the dump, each folder resolved once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nbprec.errors import DumpFormatError
from nbprec.formats import _files
from nbprec.formats._files import ConfinedFiles, real_folder


@pytest.fixture
def dump(tmp_path: Path) -> Path:
    root = tmp_path / "dump"
    (root / "data").mkdir(parents=True)
    (root / "data" / "a.npy").write_bytes(b"abc")
    (root / "kept").mkdir()
    (root / "kept" / "b.npy").write_bytes(b"defg")
    (tmp_path / "secret").write_bytes(b"do not read")
    return root


def _read(files: ConfinedFiles, path: Path) -> bytes:
    fd, size = files.open(str(path), "record")
    try:
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)


def test_files_and_links_inside_open_links_out_do_not(dump: Path) -> None:
    files = ConfinedFiles([real_folder(dump)])
    assert _read(files, dump / "data" / "a.npy") == b"abc"
    (dump / "data" / "b.npy").symlink_to(dump / "kept" / "b.npy")  # a link that stays inside
    assert _read(files, dump / "data" / "b.npy") == b"defg"
    (dump / "data" / "out.npy").symlink_to(dump.parent / "secret")
    with pytest.raises(DumpFormatError, match=r"out\.npy.*lies outside the dump \(at .*secret\): not read"):
        files.open(str(dump / "data" / "out.npy"), "record")
    with pytest.raises(DumpFormatError, match=r"gone\.npy.*payload file missing"):
        files.open(str(dump / "data" / "gone.npy"), "record")
    (dump / "data" / "a-folder").mkdir()
    with pytest.raises(DumpFormatError, match="not a regular file"):
        files.open(str(dump / "data" / "a-folder"), "record")


def test_a_folder_linked_out_of_the_dump_is_refused(dump: Path) -> None:
    outside = dump.parent / "elsewhere"
    outside.mkdir()
    (outside / "c.npy").write_bytes(b"x")
    (dump / "linked").symlink_to(outside)
    with pytest.raises(DumpFormatError, match="lies outside the dump"):
        ConfinedFiles([real_folder(dump)]).open(str(dump / "linked" / "c.npy"), "record")


def test_each_folder_is_resolved_once(dump: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in range(5):
        (dump / "data" / f"t{k}.npy").write_bytes(b"t")
    calls: list[str] = []
    real_inside = _files.inside
    monkeypatch.setattr(_files, "inside", lambda path, roots: calls.append(path) or real_inside(path, roots))
    files = ConfinedFiles([real_folder(dump)])
    for k in range(5):
        assert _read(files, dump / "data" / f"t{k}.npy") == b"t"
    assert len(calls) == 1  # the folder, once: no path resolution per payload


def test_payloads_in_the_dumps_own_folder_resolve_it_once(dump: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dump whose payloads lie in its root folder (TensorFlow's .npy dumps): the folder is inside, resolved
    once, not each payload; a folder beside it whose name starts alike is not inside, nor is a link out of it."""
    for k in range(5):
        (dump / f"t{k}.npy").write_bytes(b"t")
    beside = dump.parent / (dump.name + "2")
    beside.mkdir()
    (beside / "c.npy").write_bytes(b"x")
    (dump / "out.npy").symlink_to(beside / "c.npy")
    calls: list[str] = []
    real_inside = _files.inside
    monkeypatch.setattr(_files, "inside", lambda path, roots: calls.append(path) or real_inside(path, roots))
    files = ConfinedFiles([real_folder(dump)])
    for k in range(5):
        assert _read(files, dump / f"t{k}.npy") == b"t"
    assert len(calls) == 1  # the dump's folder, once
    with pytest.raises(DumpFormatError, match="lies outside the dump"):
        files.open(str(beside / "c.npy"), "record")
    with pytest.raises(DumpFormatError, match="lies outside the dump"):
        files.open(str(dump / "out.npy"), "record")
