"""Exports of a comparison whose op and file names are hostile: bytes that are not UTF-8, formula-like names.

The dumps are real msprobe dumps renamed by the test (tests/hostile_names.py). Every CSV layout must be written
(valid UTF-8, names with visible ``\\xNN`` escapes), spreadsheet-safe (a formula-like text cell gets one leading
``'``, numbers never) and otherwise cell for cell what the same dumps give without the renaming; what save
writes must load back byte for byte; HTML must show the escapes; the CLI must print and write it all.
"""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_names import FORMULA_PREFIXES, NOT_UTF8_OP, NOT_UTF8_SHOWN, RENAMES, hostile_pair

import nbprec
from nbprec.compare.comparison import Comparison
from nbprec.compare.exports import LAYOUTS, MSACCUCMP_HEADER, MSPROBE_HEADERS
from nbprec.overflow.report import OverflowReport

FIXTURES = Path(__file__).parents[1] / "fixtures" / "msprobe"
NUMBER = re.compile(r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|nan)%?\s*", re.IGNORECASE)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return hostile_pair(tmp_path_factory.mktemp("hostile"))


@pytest.fixture(scope="module")
def hostile(runs):
    return nbprec.compare(*runs, progress=None)


@pytest.fixture(scope="module")
def clean():
    return nbprec.compare(FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix", progress=None)


def _rows(path: Path) -> list[list[str]]:
    text = path.read_bytes().decode("utf-8")  # strict: the export is valid UTF-8
    return list(csv.reader(io.StringIO(text, newline="")))


def test_the_renamed_dumps_are_compared_like_the_originals(hostile, clean):
    assert NOT_UTF8_OP in set(hostile.table["op"])
    assert len(hostile.table) == len(clean.table) and hostile.coverage() == clean.coverage()
    assert hostile.table["cosine"].equals(clean.table["cosine"])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_names_that_are_not_utf8_are_written_as_visible_escapes(hostile, layout, tmp_path):
    path = hostile.to_csv(tmp_path / f"{layout}.csv", layout=layout)
    text = path.read_bytes().decode("utf-8")
    assert NOT_UTF8_SHOWN in text and "\udcff" not in text and "\ufffd" not in text
    assert len(_rows(path)) == len(hostile.table) + 1


@pytest.mark.parametrize("layout", LAYOUTS)
def test_formula_like_cells_are_neutralised_and_nothing_else_changes(hostile, clean, layout, tmp_path):
    ours = _rows(hostile.to_csv(tmp_path / "hostile.csv", layout=layout))
    theirs = _rows(clean.to_csv(tmp_path / "clean.csv", layout=layout))
    assert ours[0] == theirs[0]
    if layout != "nbprec":
        assert ours[0] == (MSACCUCMP_HEADER if layout == "msaccucmp" else MSPROBE_HEADERS["tensor"])
    renamed = [a != b for a, b in zip(hostile.table["op"], clean.table["op"], strict=True)]
    negatives = 0
    for row, other, was_renamed in zip(ours[1:], theirs[1:], renamed, strict=True):
        for cell, before in zip(row, other, strict=True):
            if NUMBER.fullmatch(before):  # numbers are never touched (-0.5 stays a number)
                assert cell == before
                negatives += before.lstrip().startswith("-")
            body = cell[1:] if cell.startswith("'") else cell
            if body.startswith(tuple(FORMULA_PREFIXES)):
                assert cell.startswith("'"), cell  # neutralised
            elif cell.startswith(("=", "+", "-", "@", "\t", "\r")):
                assert NUMBER.fullmatch(cell), cell  # only numbers may start so
        if not was_renamed:  # rows of ops with ordinary names: exactly what the original dumps give
            assert row == other
    assert negatives > 0 or layout == "msaccucmp"  # negative numbers were seen (msaccucmp's metrics are >= 0)
    names = {cell for row in ours[1:] for cell in row}
    for prefix in FORMULA_PREFIXES:
        assert any(name.startswith("'" + prefix) for name in names), prefix


def test_save_and_load_keep_every_name_byte_for_byte(hostile, tmp_path):
    folder = hostile.save(tmp_path / "saved")
    raw = (folder / "tensors.csv").read_bytes()
    assert b"Torch.re\xfflu.1.backward" in raw  # the original byte, not an escape
    for prefix in FORMULA_PREFIXES:
        assert b"'" + prefix.encode() in raw  # spreadsheet-safe on disk too
    loaded = Comparison.load(folder)
    assert loaded.table["op"].tolist() == hostile.table["op"].tolist()
    assert loaded.table["target_name"].tolist() == hostile.table["target_name"].tolist()
    assert loaded.summary() == hostile.summary()


def test_html_shows_visible_escapes(hostile):
    markup = hostile._repr_html_()
    assert "Torch.re\\xfflu.1.backward" in markup and "\udcff" not in markup
    markup.encode("utf-8")


def _nbprec(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The nbprec command with a strict UTF-8 stdout (as under LANG=en_US.UTF-8), arguments as bytes."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    argv = [sys.executable, "-m", "nbprec", *(os.fsencode(a) for a in args)]
    return subprocess.run(argv, capture_output=True, cwd=cwd, env=env, check=False, timeout=600)


def test_the_cli_prints_and_writes_hostile_names(runs, tmp_path):
    target, bench = runs
    info = _nbprec("info", str(target), cwd=tmp_path)
    assert info.returncode == 0, info.stderr.decode(errors="replace")
    assert b"bf16 \\udcff run" in info.stdout  # printed with an escape, never a crash

    done = _nbprec("compare", str(target), str(bench), "-o", "cmp", "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    out = tmp_path / "cmp"
    for name in ("compare_msaccucmp.csv", "compare_msprobe.csv", "ops.csv"):
        text = (out / name).read_bytes().decode("utf-8")
        assert "Torch.re\\xfflu.1" in text and "'=HYPERLINK(1).0.forward" in text, name
        assert not re.search(r"(^|,)=HYPERLINK", text), name
    assert Comparison.load(out).table["op"].tolist() == nbprec.compare(*runs, progress=None).table["op"].tolist()

    done = _nbprec("overflow", str(target), "--bench", str(bench), "--headroom", "-o", "ovf", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    report = OverflowReport.load(tmp_path / "ovf")
    assert NOT_UTF8_OP in set(report.ops["op"]) and "=HYPERLINK(1).0.forward" in set(report.ops["op"])
    assert b"'=HYPERLINK(1)" in (tmp_path / "ovf" / "ops.csv").read_bytes()
    assert "\udcff" not in report._repr_html_()
    headroom_ops = (tmp_path / "ovf" / "headroom" / "ops.csv").read_bytes()
    assert b"Torch.re\xfflu.1.forward" in headroom_ops and b"'=HYPERLINK(1)" in headroom_ops


def test_the_renames_cover_every_formula_start():
    assert {new[0] for new in RENAMES.values()} >= {"=", "+", "-", "@", "\t", "\r"}
