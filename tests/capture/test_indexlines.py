"""The C twin of ``CaptureWriter.add`` (``nbprec/capture/_indexlines.c``): the same lines and column cache as the
Python method for every record, the unusual ones handed to it, and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbprec.capture import writer as writer_module
from nbprec.capture.lines import encode_stats
from nbprec.capture.writer import CaptureWriter
from nbprec.errors import CaptureError

_indexlines = pytest.importorskip("nbprec.capture._indexlines", reason="the C extensions are not built here")

# (name, step, rank, order, role, slot, dtype, shape, numel): usual records and every kind the C path hands over
RECORDS = [
    ("Functional.linear.0.forward.input.0", 0, 0, 0, "input", "0", "float32", (8, 32, 384), 98304),
    ("Functional.linear.0.forward.input.1", 0, 0, 0, "input", "1", "float32", (1536, 384), 589824),
    ("Functional.linear.0.forward.output.0", 0, 0, 0, "output", "0", "float32", (8, 32, 1536), 393216),
    ("Functional.linear.0.forward.input.0", 1, 3, 17, "input", "0", "float32", (8, 32, 384), 98304),  # step 1
    ("Module.lineär.Linear.forward.0.output.0", 1, 0, 2**40, "output", "0", "bfloat16", (), 1),  # not ASCII
    ('Functional.odd"name\\.0.forward.input.0', 1, 0, 5, "input", "0", "float16", (0, 3), 0),  # escapes
    ("Functional.tab\tname.0.forward.input.0", 1, 0, 6, "input", "x", "int64", (2,), 2),  # a control character
    ("Functional.neg.0.forward.input.0", -1, -2, -3, "input", "0", "float32", (4,), 4),  # negative ints
    ("Functional.big.0.forward.input.0", 1, 0, 2**70, "input", "0", "float32", (4,), 4),  # beyond 64 bits
    ("Functional.surrogate\udcff.0.forward.input.0", 1, 0, 7, "input", "0", "float32", (4,), 4),  # not UTF-8
]


def _write(path: Path, fast: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, bytes, list[int]]:
    """Write RECORDS through one path; returns the index lines pending before the close, the column cache's members
    and the count after each record."""
    monkeypatch.setattr(writer_module, "IndexLines", _indexlines.IndexLines if fast else None)
    w = CaptureWriter(path, mode="statistics")
    assert (w._fast is not None) is fast
    ops = [
        w.lines.encode_op("Functional.linear.0.forward", "linear", "Functional.linear", 0, "", "forward"),
        w.lines.encode_op("Module.lineär.Linear.forward.0", "Linear", "Module.lineär.Linear", 0, "lineär", "forward"),
    ]
    stats = [encode_stats((0.1, 2.0, 0.5, 0.3, 10.0, 2.0, 0, 0, 1)), encode_stats(None)]
    counts = []
    for k, (name, step, rank, order, role, slot, dtype, shape, numel) in enumerate(RECORDS):
        w.add(name, step, rank, order, ops[k % 2], role, slot, dtype, shape, numel, stats[k % 2])
        counts.append(w.count)
    lines = w._kept.take() if fast else "".join(w._lines["index.jsonl"]).encode()
    if fast:  # (taken: handed back as the flush would, for the file)
        w._files["index.jsonl"].buffer.write(lines)
    names = writer_module._CACHE_COLUMNS[:-1]
    columns = w._kept.columns(names) if fast else w._columns_text(w._rows).encode()
    w.close()
    return lines, columns, counts


def test_the_c_twin_writes_what_the_python_method_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _write(tmp_path / "c", True, monkeypatch)
    slow = _write(tmp_path / "py", False, monkeypatch)
    assert fast == slow
    assert fast[2] == list(range(1, len(RECORDS) + 1))
    assert (tmp_path / "c" / "index.jsonl").read_bytes() == (tmp_path / "py" / "index.jsonl").read_bytes()
    assert (tmp_path / "c" / "index.columns.json").read_bytes() == (tmp_path / "py" / "index.columns.json").read_bytes()
    read = [json.loads(line) for line in (tmp_path / "c" / "index.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["name"] for r in read] == [r[0] for r in RECORDS]
    assert read[8]["order"] == 2**70 and read[4]["order"] == 2**40 and read[7]["step"] == -1
    assert json.loads((tmp_path / "c" / "complete").read_text())["tensors"] == len(RECORDS)


def _counted(w: CaptureWriter, interval: float = 0.2) -> list[int]:
    """Give ``w`` a C twin that counts the records it hands to the Python method."""
    handed = [0]
    python_add = CaptureWriter.add.__get__(w)

    def slow(*args, **kwargs):
        handed[0] += 1
        return python_add(*args, **kwargs)

    w._fast = w._kept = _indexlines.IndexLines(w._seen, w._strings, w._shapes, slow, w.flush, interval)
    w.add = w._fast.add
    return handed


def test_a_name_written_twice_or_after_close_is_refused(tmp_path: Path) -> None:
    w = CaptureWriter(tmp_path / "run", mode="statistics")
    handed = _counted(w)
    op = w.lines.encode_op("Functional.relu.0.forward", "relu", "Functional.relu", 0, "", "forward")
    stats = encode_stats(None)
    w.add("Functional.relu.0.forward.input.0", 0, 0, 0, op, "input", "0", "float32", (2,), 2, stats)
    assert handed == [1]  # its texts were not cached yet
    w.add("Functional.relu.0.forward.output.0", 0, 0, 0, op, "input", "0", "float32", (2,), 2, stats)
    assert handed == [1]  # in C
    for name in ("Functional.relu.0.forward.input.0", "Functional.relu.0.forward.output.0"):
        with pytest.raises(CaptureError, match="written twice"):
            w.add(name, 0, 0, 0, op, "input", "0", "float32", (2,), 2, stats)
    w.add("Functional.relu.0.forward.output.0", 1, 0, 0, op, "input", "0", "float32", (2,), 2, stats)  # next step
    assert handed == [3] and w.count == 3
    w.close()
    with pytest.raises(CaptureError, match="closed"):
        w.add("Functional.relu.1.forward.output.0", 1, 0, 0, op, "output", "0", "float32", (2,), 2, stats)
    assert w.count == 3
    assert len((tmp_path / "run" / "index.jsonl").read_text(encoding="utf-8").splitlines()) == 3


def test_the_pending_lines_are_flushed_on_time(tmp_path: Path) -> None:
    """Every FLUSH_INTERVAL seconds the C path hands the pending lines to the file, as the Python method does."""
    w = CaptureWriter(tmp_path / "run", mode="statistics")
    handed = _counted(w, interval=0.0)
    op = w.lines.encode_op("Functional.relu.0.forward", "relu", "Functional.relu", 0, "", "forward")
    stats = encode_stats(None)
    for k in range(3):
        w.add(f"Functional.relu.{k}.forward.input.0", 0, 0, k, op, "input", "0", "float32", (2,), 2, stats)
        on_disk = (tmp_path / "run" / "index.jsonl").read_text(encoding="utf-8").splitlines()
        assert len(on_disk) == (k + 1 if k else len(on_disk))  # (the first went through the Python method)
    assert handed == [1]
    w.close()


def test_arguments_are_checked() -> None:
    with pytest.raises(TypeError):
        _indexlines.IndexLines(set(), {}, {}, None, print, 0.2)
    with pytest.raises(TypeError):
        _indexlines.IndexLines({}, {}, {}, print, print, 0.2)
    sink = _indexlines.IndexLines(set(), {}, {}, lambda *a, **k: ("slow", a, k), print, 0.2)
    assert sink.add("x", payload=None) == ("slow", ("x",), {"payload": None})  # keywords: to the Python method
    assert sink.add(*range(11))[0] == "slow"  # a name that is not a str


def test_the_twin_keeps_a_record_whole_or_not_at_all(tmp_path: Path) -> None:
    """``row`` (a record the Python add wrote: its cells and its line), ``take`` and ``columns``: arguments of another
    form are a TypeError, and a record that fails halfway leaves nothing of itself behind: neither its line nor any
    of its cells."""
    names = writer_module._CACHE_COLUMNS[:-1]
    twin = _indexlines.IndexLines(set(), {}, {}, print, print, 0.2)
    assert twin.count == 0 and twin.columns(names) == b"" and twin.take() == b""
    with pytest.raises(TypeError, match="tuple of 12"):
        twin.row(("too", "short"), "line")
    with pytest.raises(TypeError, match="tuple of 12"):
        twin.row((None,) * 12)
    with pytest.raises(TypeError, match="24 or 25"):
        twin.columns(("too", "few"))
    w = CaptureWriter(tmp_path / "run", mode="statistics")
    op = w.lines.encode_op("Functional.relu.0.forward", "relu", "Functional.relu", 0, "", "forward")
    w.close()
    stats = encode_stats(None)
    twin.row(('"a"', 0, 0, 0, op, '"input"', '"0"', '"float32"', "[2]", 2, stats, None), "line a\n")
    whole = twin.columns(names)
    assert twin.count == 1 and whole.startswith(b'"name":["a"],"step":[0]')
    with pytest.raises(AttributeError):  # an op that is not an EncodedOp: found after the line and 4 cells
        twin.row(('"b"', 0, 0, 1, "not encoded", '"input"', '"0"', '"float32"', "[2]", 2, stats, None), "line b\n")
    with pytest.raises(UnicodeEncodeError):  # a line that is not UTF-8
        twin.row(('"c"', 0, 0, 2, op, '"input"', '"0"', '"float32"', "[2]", 2, stats, None), "line \udcff\n")
    assert twin.count == 1 and twin.columns(names) == whole
    twin.row(('"d"', 0, 0, 3, op, '"input"', '"0"', '"float32"', "[2]", 2, stats, None), "line d\n")
    assert twin.count == 2 and twin.columns(names).startswith(b'"name":["a","d"],"step":[0,0],"rank":[0,0]')
    assert twin.take() == b"line a\nline d\n" and twin.take() == b""


def test_a_record_failing_halfway_in_c_leaves_nothing(tmp_path: Path) -> None:
    """A record the C path takes (its texts cached, its name plain) whose op fails after the line, the name's cell
    and the first cells were written: the add raises, and neither its line, its cells nor its (step, name) are
    kept, so the same record added right is written once, and the files match the Python writer's."""
    from types import SimpleNamespace

    w = CaptureWriter(tmp_path / "run", mode="statistics")
    handed = _counted(w)
    op = w.lines.encode_op("Functional.relu.0.forward", "relu", "Functional.relu", 0, "", "forward")
    stats = encode_stats(None)
    w.add("Functional.relu.0.forward.input.0", 0, 0, 0, op, "input", "0", "float32", (2,), 2, stats)
    assert handed == [1]  # (its texts were not cached yet)
    first = w._kept.take()  # (handed to the file as the flush would)
    w._files["index.jsonl"].buffer.write(first)
    count = w.count
    half = SimpleNamespace(fragment=op.fragment)  # an op with a fragment but no encoded fields
    with pytest.raises(AttributeError):
        w.add("Functional.relu.0.forward.input.0", 1, 0, 0, half, "input", "0", "float32", (2,), 2, stats)
    assert handed == [1] and w.count == count == 1 and w._kept.take() == b"" and first.count(b"\n") == 1
    w.add("Functional.relu.0.forward.input.0", 1, 0, 0, op, "input", "0", "float32", (2,), 2, stats)
    assert handed == [1] and w.count == 2  # in C, once: its name was not taken by the failed add
    w.close()
    read = [json.loads(line) for line in (tmp_path / "run" / "index.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["step"], r["name"]) for r in read] == [(0, "Functional.relu.0.forward.input.0"), (1, read[0]["name"])]
    columns = json.loads((tmp_path / "run" / "index.columns.json").read_text(encoding="utf-8"))
    assert columns["rows"] == 2 and columns["columns"]["name"] == [r["name"] for r in read]
    assert all(len(values) == 2 for values in columns["columns"].values())
