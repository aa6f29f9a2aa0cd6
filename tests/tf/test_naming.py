"""File names, step selections and the writer of nbprec.tf: no TensorFlow needed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import nbprec
from nbprec.errors import CaptureError
from nbprec.formats.tf_npy import parse_file_name
from nbprec.tf import INDEX_FILE, dump_file_name, name_problem, parse_steps, read_index
from nbprec.tf.writer import DumpWriter

TS = 1675157077176648


@pytest.mark.parametrize(
    ("spec", "steps"),
    [("0|5|10", {0, 5, 10}), ("0|3-5|10", {0, 3, 4, 5, 10}), ("7", {7}), (2, {2}), ([1, 4], {1, 4}), (None, None)],
)
def test_step_syntax(spec: object, steps: set[int] | None) -> None:
    assert parse_steps(spec) == (None if steps is None else frozenset(steps))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("5-3", "runs backwards"),
        ("0|a", "invalid literal"),
        ("|", "no steps"),
        ("1|-2", "invalid literal"),
        (True, "must be an int"),
        ("3.5", "invalid literal"),
    ],
)
def test_step_syntax_errors(spec: object, message: str) -> None:
    with pytest.raises(CaptureError, match=message) as info:
        parse_steps(spec)
    assert "bad step selection" in str(info.value) or "steps must be" in str(info.value)


def test_file_names_follow_the_tfdbg_ascend_rule() -> None:
    name = dump_file_name("sequential/dense/MatMul", 1, TS)
    assert name == f"sequential_dense_MatMul.1.{TS}.npy"
    assert parse_file_name(name) == ("sequential_dense_MatMul", 1, TS)
    assert name_problem("sequential/dense/MatMul", 1, TS) is None
    assert "outside [A-Za-z0-9_-]" in name_problem("blk.v2/mul", 0, TS)
    assert "'>'" in name_problem("a>b", 0, TS)
    assert "over the 255-character limit" in name_problem("s" * 240, 0, TS)
    assert name_problem("s" * (255 - len(f".0.{TS}.npy")), 0, TS) is None  # exactly 255 characters


def _writer(tmp_path: Path, **options: object) -> DumpWriter:
    return DumpWriter(tmp_path / "dump", meta={"test": True}, **options)  # type: ignore[arg-type]


def test_writer_lists_what_it_cannot_write(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    writer.begin_step(3)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert writer.write_op(1, "net/fc/MatMul", "MatMul", "g", [(0, a, "float32")]) == 1
    assert writer.write_op(2, "blk.v2/mul", "Mul", "g", [(0, a, "float32")]) == 0
    assert writer.write_op(3, "x" * 250, "Mul", "g", [(0, a, "float32"), (1, a, "float32")]) == 0
    writer.skip("it:0", "IteratorV2", "g", "resource handle", traced=True)
    writer.end_step()
    writer.close()
    skipped = {e["tensor"]: e for e in writer.skipped}
    assert set(skipped) == {"blk.v2/mul:0", "x" * 250 + ":0", "x" * 250 + ":1", "it:0"}
    assert "outside [A-Za-z0-9_-]" in skipped["blk.v2/mul:0"]["reason"] and skipped["blk.v2/mul:0"]["step"] == 3
    assert "255" in skipped["x" * 250 + ":1"]["reason"] and skipped["it:0"]["step"] is None
    files = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert len(files) == 2 and INDEX_FILE in files
    dump = nbprec.open(tmp_path / "dump")
    np.testing.assert_array_equal(dump.tensor("net_fc_MatMul.0"), a)
    index = read_index(tmp_path / "dump")
    assert index["sessions"][0]["test"] is True and not index["problems"]
    row = index["tensors"].iloc[0]
    assert (row["tensor"], row["op"], row["step"], row["shape"]) == ("net/fc/MatMul:0", "net_fc_MatMul", 3, [2, 3])
    assert set(index["skipped"]["tensor"]) == set(skipped)
    assert index["steps"] == [{"step": 3, "tensors": 1}]


def test_writer_names_timestamps_and_repeats(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    writer.begin_step(0)
    one = np.ones(2, np.float32)
    for owner in ("node", object(), "node", object()):  # a graph node run twice, two eager runs of MatMul
        writer.write_op(owner, "MatMul", "MatMul", "g", [(0, one, "float32")])
    writer.write_op("other", "a/b", "Add", "g", [(0, np.float32(2.0), "float32")])  # a 0-d tensor
    writer.write_op("another", "a_b", "Add", "g", [(0, one, "float32")])  # the same file name once / became _
    writer.close()
    records = read_index(tmp_path / "dump")["tensors"]
    assert list(records["op"]) == ["MatMul", "MatMul_1", "MatMul", "MatMul_2", "a_b", "a_b_1"]
    assert records["timestamp"].is_monotonic_increasing and records["timestamp"].is_unique
    assert list(records["order"]) == list(range(6))
    assert nbprec.open(tmp_path / "dump").tensor("a_b.0").shape == ()  # scalars keep their shape
    every = nbprec.open(tmp_path / "dump", occurrence="all")
    assert sorted(every.index.loc[every.index["op"] == "MatMul", "step"]) == [0, 1]  # the repeat: 2 occurrences


def test_if_exists(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    writer.write_op(1, "x", "X", "g", [(0, np.ones(1), "float64")])
    writer.close()
    (tmp_path / "dump" / "notes.txt").write_text("mine")
    with pytest.raises(CaptureError, match=r"already holds 2 dump files.*if_exists='append'"):
        _writer(tmp_path)
    with pytest.raises(CaptureError, match="if_exists must be one of"):
        _writer(tmp_path, if_exists="overwrite")
    _writer(tmp_path, if_exists="append").close()
    assert len(list((tmp_path / "dump").glob("*.npy"))) == 1
    _writer(tmp_path, if_exists="replace").close()
    assert sorted(p.name for p in (tmp_path / "dump").iterdir()) == [INDEX_FILE, "notes.txt"]  # only dump files go
    lines = [json.loads(line) for line in (tmp_path / "dump" / INDEX_FILE).read_text().splitlines()]
    assert [line["record"] for line in lines] == ["session", "end"]
