"""Output files rewritten in place (nbprec._output.rewriting): the content open(path, "w") leaves, without the
old content being thrown away first."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from nbprec._output import rewriting
from nbprec.columns import Columns
from nbprec.safe_text import write_table_csv


def test_a_longer_old_file_ends_as_the_new_content(tmp_path):
    path = tmp_path / "out.csv"
    path.write_text("old content, much longer than the new one\n" * 100, encoding="utf-8")
    with rewriting(path) as fh:
        fh.write("new\n")
    assert path.read_bytes() == b"new\n"


def test_the_old_content_is_there_until_the_new_is_written(tmp_path):
    path = tmp_path / "out.txt"
    path.write_bytes(b"x" * 10_000)
    inode = path.stat().st_ino
    with rewriting(path) as fh:
        assert path.stat().st_size == 10_000  # (open(path, "w") has emptied it by now)
        fh.write("y" * 10_000)
    assert path.read_bytes() == b"y" * 10_000
    assert path.stat().st_ino == inode


def test_a_new_file_gets_the_permissions_open_gives(tmp_path):
    old = os.umask(0o027)
    try:
        with rewriting(tmp_path / "made.txt") as fh:
            fh.write("é\n")
        with open(tmp_path / "opened.txt", "w", encoding="utf-8") as fh:
            fh.write("é\n")
    finally:
        os.umask(old)
    made, opened = (stat.S_IMODE((tmp_path / name).stat().st_mode) for name in ("made.txt", "opened.txt"))
    assert made == opened == 0o640
    assert (tmp_path / "made.txt").read_bytes() == "é\n".encode()


def test_a_failed_writing_leaves_what_was_written(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old " * 1000, encoding="utf-8")
    with pytest.raises(RuntimeError), rewriting(path) as fh:
        fh.write("partial")
        raise RuntimeError("stopped")
    assert path.read_text(encoding="utf-8") == "partial"


def test_encoding_errors_and_newlines_are_those_asked_for(tmp_path):
    path = tmp_path / "out.txt"
    with rewriting(path, errors="backslashreplace", newline="") as fh:
        fh.write("a\udcff\r\n")
    assert path.read_bytes() == b"a\\udcff\r\n"
    with pytest.raises(UnicodeEncodeError), rewriting(path) as fh:
        fh.write("a\udcff")


def test_a_device_is_written_without_being_cut():
    with rewriting(os.devnull) as fh:
        fh.write("nothing kept")


def test_a_table_written_over_a_larger_one_is_the_table_alone(tmp_path):
    big = Columns({"name": np.array([f"op{i}" for i in range(500)], dtype=object), "value": np.arange(500.0)})
    small = Columns({"name": np.array(["a", "=b"], dtype=object), "value": np.array([1.5, np.nan])})
    write_table_csv(big, tmp_path / "t.csv")
    write_table_csv(small, tmp_path / "t.csv")
    write_table_csv(small, tmp_path / "fresh.csv")
    assert (tmp_path / "t.csv").read_bytes() == (tmp_path / "fresh.csv").read_bytes() == b"name,value\na,1.5\n'=b,\n"


def test_a_file_system_that_cannot_cut_files_fails_only_when_there_is_a_tail(tmp_path, monkeypatch):
    def refuse(fd, length):
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(os, "ftruncate", refuse)
    path = tmp_path / "out.txt"
    with rewriting(path) as fh:  # a new file: nothing to cut
        fh.write("same size")
    with rewriting(path) as fh:  # the same size again: nothing to cut
        fh.write("SAME SIZE")
    assert path.read_text(encoding="utf-8") == "SAME SIZE"
    with pytest.raises(OSError, match="not supported"), rewriting(path) as fh:  # a tail left: an error, not a mix
        fh.write("short")


def test_a_data_frame_written_over_a_larger_file_is_what_pandas_writes(tmp_path):
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"name": ["a", "=b", "c\udcff"], "value": [1.5, float("nan"), 2.0]})
    (tmp_path / "t.csv").write_text("old\n" * 1000, encoding="utf-8")
    write_table_csv(frame, tmp_path / "t.csv", exact=True)
    pd.DataFrame({"name": ["a", "'=b", "c\udcff"], "value": [1.5, float("nan"), 2.0]}).to_csv(
        tmp_path / "pandas.csv", index=False, errors="surrogateescape"
    )
    assert (tmp_path / "t.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()
