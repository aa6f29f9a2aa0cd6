"""nbprec's own dump format: writer and reader round trips, crash safety and bad input."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import nbprec
from nbprec.dump_index import make_index, unreadable_integer
from nbprec.errors import CaptureError, DumpFormatError, EmptyDumpError, TensorDataUnavailableError
from nbprec.formats.native import COLUMNS_FILE, INDEX_FILE, NativeDumpReader, NativeDumpWriter
from nbprec.stats import STAT_COLUMNS, tensor_stats


def _mlp_arrays() -> dict[str, np.ndarray]:
    """Real activations of a small seeded numpy MLP, in every dtype nbprec stores."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16))
    h = np.maximum(x @ rng.standard_normal((16, 32)) / 4, 0)
    y = h @ rng.standard_normal((32, 4))
    y[0, 0], y[1, 1], y[2, 2] = np.inf, -np.inf, np.nan
    with np.errstate(over="ignore"):
        y16 = (y * 1e4).astype(np.float16)  # overflows to inf in places: a real fp16 failure
    return {
        "float64": y,
        "float32": h.astype(np.float32),
        "float16": y16,
        "bfloat16": y.astype(ml_dtypes.bfloat16),
        "float8_e4m3fn": np.clip(h, -448, 448).astype(ml_dtypes.float8_e4m3fn),
        "float8_e5m2": y.astype(ml_dtypes.float8_e5m2),
        "int64": np.argmax(np.nan_to_num(y), axis=1),
        "int32": np.arange(-5, 5, dtype=np.int32),
        "uint8": np.arange(256, dtype=np.uint8),
        "int8": np.arange(-128, 128, dtype=np.int8),
        "bool": h > 0,
        "complex64": (x[:2] + 1j * x[2:4]).astype(np.complex64),
        "scalar": np.float32(3.5) * np.ones((), np.float32),
        "empty": np.zeros((0, 4), np.float16),
    }


def _write(path: Path, arrays: dict[str, np.ndarray], **kwargs) -> None:
    with NativeDumpWriter(path, **kwargs) as writer:
        for order, (name, array) in enumerate(arrays.items()):
            op = f"mlp.{name}.forward"
            writer.write_tensor({"name": f"{op}.output.0", "op": op, "order": order, "step": 0, "rank": 0}, array)
            writer.write_edge(f"{op}.output.0", "mlp.next.forward", str(order))
            writer.write_module(op, "mlp")
            writer.write_stack(op, ["train.py:10 in main", "model.py:3 in forward"])
        writer.write_module("mlp", None)


def test_round_trip_every_dtype_bit_exact(tmp_path: Path) -> None:
    arrays = _mlp_arrays()
    _write(tmp_path / "run", arrays, run="fp32", meta={"model": "mlp"})
    dump = nbprec.open(tmp_path / "run")
    assert dump.format == "nbprec" and len(dump) == len(arrays) and dump.problems.empty
    assert (
        dump.meta["finished"] is True and dump.meta["meta"] == {"model": "mlp"} and set(dump.index["run"]) == {"fp32"}
    )
    for name, array in arrays.items():
        row = dump.row(f"mlp.{name}.forward.output.0")
        loaded = dump.tensor(row)
        assert loaded.dtype == array.dtype and loaded.shape == array.shape
        assert row["dtype"] == nbprec.dtypes.canonical_dtype(array.dtype) and row["shape"] == array.shape
        assert loaded.tobytes() == np.ascontiguousarray(array).tobytes()  # bit-exact, NaN payloads included
        expected = tensor_stats(array)
        for column in STAT_COLUMNS:
            want = np.nan if expected[column] is None else expected[column]
            np.testing.assert_equal(row[column], want, err_msg=f"{name} {column}")
    assert len(dump.edges) == len(arrays) and dump.edges.iloc[0]["dst_op"] == "mlp.next.forward"
    assert dump.hierarchy["mlp"] is None and dump.hierarchy["mlp.float32.forward"] == "mlp"
    assert dump.stacks["mlp.bool.forward"] == ["train.py:10 in main", "model.py:3 in forward"]


def _mapped(array: np.ndarray) -> bool:
    """Whether the array's memory is a mapped file (through its chain of bases)."""
    import mmap

    base = array
    while base is not None:
        if isinstance(base, (mmap.mmap, np.memmap)):
            return True
        base = getattr(base, "base", None) if isinstance(base, np.ndarray) else getattr(base, "obj", None)
    return False


def test_large_payloads_are_memory_mapped_small_ones_read(tmp_path: Path) -> None:
    arrays = {"big": np.arange(300_000, dtype=np.float32).reshape(600, 500), "small": np.ones(9, ml_dtypes.bfloat16)}
    _write(tmp_path / "run", arrays)
    dump = nbprec.open(tmp_path / "run")
    big, small = dump.tensor("mlp.big.forward.output.0"), dump.tensor("mlp.small.forward.output.0")
    assert _mapped(big) and not _mapped(small)
    for loaded, name in ((big, "big"), (small, "small")):
        assert not loaded.flags.writeable  # the dump is never written through
        assert loaded.tobytes() == arrays[name].tobytes() and loaded.dtype == arrays[name].dtype


def test_a_truncated_payload_is_a_format_error(tmp_path: Path) -> None:
    _write(tmp_path / "run", {"big": np.arange(40_000, dtype=np.float32)})
    dump = nbprec.open(tmp_path / "run")
    payload = Path(dump.row("mlp.big.forward.output.0")["file"])
    payload.write_bytes(payload.read_bytes()[:-100])
    with pytest.raises(DumpFormatError, match="payload truncated"):
        dump.tensor("mlp.big.forward.output.0")


@pytest.mark.parametrize("start", [b"PK\x03\x04", b"\x80\x04\x95", b"\x93NUM"])
def test_a_payload_that_is_not_a_npy_file_is_a_format_error(tmp_path: Path, start: bytes) -> None:
    """A zip archive (which np.load would open as an .npz), a pickle, a cut magic: named as not a .npy file."""
    _write(tmp_path / "run", {"small": np.arange(40, dtype=np.float32)})
    dump = nbprec.open(tmp_path / "run")
    payload = Path(dump.row("mlp.small.forward.output.0")["file"])
    payload.write_bytes(start if start == b"\x93NUM" else start + payload.read_bytes()[len(start) :])
    with pytest.raises(DumpFormatError, match=r"not a \.npy file") as error:
        dump.tensor("mlp.small.forward.output.0")
    assert str(payload) in str(error.value)


def test_non_finite_statistics_round_trip_as_strict_json(tmp_path: Path) -> None:
    huge = np.array([1e308, 1e308])  # mean/std/norm overflow float64 to inf
    stats = {"min": None, "max": float("inf"), "mean": float("nan"), "nan_count": 2, "inf_count": 1}
    with NativeDumpWriter(tmp_path / "run") as writer:
        writer.write_tensor({"name": "huge"}, huge)
        writer.write_tensor({"name": "given", "dtype": "float16", "shape": [3]}, stats=stats)
    text = (tmp_path / "run" / INDEX_FILE).read_text()
    assert "NaN," not in text and "Infinity," not in text.replace('"Infinity",', "")
    lines = [json.loads(line, parse_constant=lambda c: pytest.fail(f"non-strict {c}")) for line in text.splitlines()]
    assert lines[0]["mean"] == "Infinity" and lines[1]["min"] is None and lines[1]["mean"] == "NaN"
    dump = nbprec.open(tmp_path / "run")
    assert dump.row("huge")["mean"] == np.inf and dump.row("huge")["max"] == 1e308
    given = dump.row("given")
    assert np.isnan(given["min"]) and given["max"] == np.inf and np.isnan(given["mean"]) and given["nan_count"] == 2
    assert not given["has_data"]


@pytest.mark.parametrize("cache", [True, False])
def test_index_from_cache_equals_index_from_jsonl(tmp_path: Path, cache: bool) -> None:
    _write(tmp_path / "run", _mlp_arrays())
    reference = nbprec.open(tmp_path / "run").index
    if not cache:
        (tmp_path / "run" / COLUMNS_FILE).unlink()
    assert nbprec.open(tmp_path / "run").index.equals(reference)


def test_stale_cache_is_ignored_and_reported(tmp_path: Path) -> None:
    _write(tmp_path / "run", {"a": np.ones(3)})
    with open(tmp_path / "run" / INDEX_FILE, "a") as f:
        f.write(json.dumps({"name": "late", "dtype": "float32", "shape": [1]}) + "\n")
    dump = nbprec.open(tmp_path / "run")
    assert "late" in set(dump.names) and dump.problems["problem"].str.contains("stale").any()


def test_statistics_mode_has_no_payloads(tmp_path: Path) -> None:
    arrays = _mlp_arrays()
    _write(tmp_path / "run", arrays, mode="statistics")
    assert not any((tmp_path / "run" / "tensors").iterdir())
    dump = nbprec.open(tmp_path / "run")
    assert dump.meta["mode"] == "statistics" and not dump.index["has_data"].any()
    row = dump.row("mlp.float32.forward.output.0")
    assert row["max"] == pytest.approx(float(arrays["float32"].max()))
    with pytest.raises(TensorDataUnavailableError, match="no payload"):
        dump.tensor(row)


def test_exception_inside_with_leaves_readable_dump(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="model blew up"), NativeDumpWriter(tmp_path / "run") as writer:
        writer.write_tensor({"name": "a", "order": 0}, np.arange(4.0))
        raise RuntimeError("model blew up")
    dump = nbprec.open(tmp_path / "run")
    assert list(dump.names) == ["a"] and dump.meta["finished"] is False
    assert dump.problems["problem"].str.contains("RuntimeError: model blew up").any()
    np.testing.assert_array_equal(dump.tensor("a"), np.arange(4.0))


def test_killed_run_with_truncated_last_line(tmp_path: Path) -> None:
    writer = NativeDumpWriter(tmp_path / "run")
    for i in range(3):
        writer.write_tensor({"name": f"t{i}", "order": i}, np.full(2, i, np.float32))
    writer.flush()  # the periodic flush (every FLUSH_INTERVAL seconds) has run
    # the process dies: no close(), and the last line is cut in the middle
    with open(tmp_path / "run" / INDEX_FILE, "a") as f:
        f.write('{"name": "t3", "dtype": "float3')
    dump = nbprec.open(tmp_path / "run")
    assert list(dump.names) == ["t0", "t1", "t2"]
    problems = dump.problems.set_index("record")["problem"]
    assert "truncated last line" in problems["line 4"]
    assert dump.problems["problem"].str.contains("did not finish").any()
    np.testing.assert_array_equal(dump.tensor("t2"), [2, 2])
    writer.close()


def test_bad_line_in_the_middle_is_a_problem(tmp_path: Path) -> None:
    _write(tmp_path / "run", {"a": np.ones(2), "b": np.zeros(2)})
    (tmp_path / "run" / COLUMNS_FILE).unlink()
    lines = (tmp_path / "run" / INDEX_FILE).read_text().splitlines()
    bad = ['{"name": "x", "min": NaN}', "[1, 2]", "not json"]
    (tmp_path / "run" / INDEX_FILE).write_text("\n".join([lines[0], *bad, lines[1]]) + "\n")
    dump = nbprec.open(tmp_path / "run")
    assert len(dump) == 2
    assert set(dump.problems["record"]) >= {"line 2", "line 3", "line 4"}


def test_existing_folder_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "run", {"a": np.ones(2)})
    with pytest.raises(CaptureError, match="not empty"):
        NativeDumpWriter(tmp_path / "run")
    NativeDumpWriter(tmp_path / "run", overwrite=True).close()
    (tmp_path / "empty").mkdir()
    NativeDumpWriter(tmp_path / "empty").close()  # an existing empty folder is fine


def test_unwritable_path(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("in the way")
    with pytest.raises(CaptureError, match=str(tmp_path / "file")):
        NativeDumpWriter(tmp_path / "file" / "run")
    with pytest.raises(CaptureError, match="file with that name"):
        NativeDumpWriter(tmp_path / "file")


def test_full_disk_gives_capture_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    writer = NativeDumpWriter(tmp_path / "run")
    writer.write_tensor({"name": "ok"}, np.ones(3))
    monkeypatch.setattr(np.lib.format, "write_array", no_space)
    with pytest.raises(CaptureError, match="no space left on device") as info:
        writer.write_tensor({"name": "big"}, np.ones(3))
    assert str(tmp_path / "run" / "tensors") in str(info.value)
    monkeypatch.undo()
    writer.close()
    dump = nbprec.open(tmp_path / "run")
    assert list(dump.names) == ["ok"] and len(list((tmp_path / "run" / "tensors").iterdir())) == 1


def test_hostile_tensor_names_are_stored_safely(tmp_path: Path) -> None:
    names = ["../../etc/passwd", "x" * 300, "a/b\\c:d e\u00e9\u4e2d", ".hidden", "/abs"]
    with NativeDumpWriter(tmp_path / "run") as writer:
        for i, name in enumerate(names):
            writer.write_tensor({"name": name, "order": i}, np.full(2, i, np.int32))
    files = sorted(p.name for p in (tmp_path / "run" / "tensors").iterdir())
    assert len(files) == len(names)
    assert all(len(f.encode()) <= 255 and "/" not in f and not f.startswith(".") for f in files)
    assert not (tmp_path / "etc").exists()
    dump = nbprec.open(tmp_path / "run")
    assert list(dump.names) == names
    for i, name in enumerate(names):
        np.testing.assert_array_equal(dump.tensor(name), [i, i])


def test_unsafe_file_in_index_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret.npy").write_bytes(b"")
    _write(tmp_path / "run", {"a": np.ones(2)})
    (tmp_path / "run" / COLUMNS_FILE).unlink()
    line = json.dumps({"name": "evil", "dtype": "float64", "shape": [2], "file": "tensors/../../secret.npy"})
    with open(tmp_path / "run" / INDEX_FILE, "a") as f:
        f.write(line + "\n")
    dump = nbprec.open(tmp_path / "run")
    assert not dump.row("evil")["has_data"] and dump.problems["problem"].str.contains("unsafe payload").any()


def test_corrupt_header_names_the_file(tmp_path: Path) -> None:
    _write(tmp_path / "run", {"a": np.ones(2)})
    (tmp_path / "run" / "nbprec-dump.json").write_text('{"format": "nbprec-dump", "version": ')
    with pytest.raises(DumpFormatError, match=r"nbprec-dump\.json.*corrupt header"):
        nbprec.open(tmp_path / "run")
    (tmp_path / "run" / "nbprec-dump.json").write_text('{"format": "nbprec-dump", "version": 99, "mode": "tensor"}')
    with pytest.raises(DumpFormatError, match="version 99"):
        nbprec.open(tmp_path / "run")


def test_no_records_is_an_empty_dump(tmp_path: Path) -> None:
    NativeDumpWriter(tmp_path / "run").close()
    assert NativeDumpReader.guess_can_open(tmp_path / "run")
    with pytest.raises(EmptyDumpError):
        nbprec.open(tmp_path / "run")


def test_writer_rejects_bad_records(tmp_path: Path) -> None:
    with NativeDumpWriter(tmp_path / "run") as writer:
        writer.write_tensor({"name": "a", "step": 0}, np.ones(2))
        writer.write_tensor({"name": "a", "step": 1}, np.ones(2))  # same name, another step: fine
        with pytest.raises(CaptureError, match="twice"):
            writer.write_tensor({"name": "a", "step": 0}, np.ones(2))
        with pytest.raises(CaptureError, match="object array"):
            writer.write_tensor({"name": "o"}, np.array([object()]))
        with pytest.raises(CaptureError, match="declared bfloat16"):
            writer.write_tensor({"name": "f", "dtype": "bfloat16"}, np.ones(2, np.float32))
        with pytest.raises(CaptureError, match="dtype and shape"):
            writer.write_tensor({"name": "s"})
        bits = np.array([0x3F80, 0x7FC0], np.uint16)  # bfloat16 1.0 and NaN as raw bits
        writer.write_tensor({"name": "raw", "dtype": "bfloat16"}, bits)
    loaded = nbprec.open(tmp_path / "run").tensor("raw")
    assert loaded.dtype == ml_dtypes.bfloat16 and loaded.view(np.uint16).tolist() == [0x3F80, 0x7FC0]


def test_records_reach_the_disk_within_the_flush_interval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nbprec.formats.native as native

    monkeypatch.setattr(native, "FLUSH_INTERVAL", 0.0)
    writer = NativeDumpWriter(tmp_path / "run", mode="statistics")
    writer.write_tensor({"name": "t0", "dtype": "float32", "shape": [2]})
    # no close(): as if the process were killed right now
    assert [r["name"] for r in map(json.loads, (tmp_path / "run" / INDEX_FILE).read_text().splitlines())] == ["t0"]
    writer.close()


@pytest.mark.parametrize("cache", [True, False])
def test_integers_no_int64_holds_are_the_default(tmp_path: Path, cache: bool) -> None:
    """A damaged or hostile record's order (beyond 64 bits, text, an infinity) opens as unknown (-1), not a crash."""
    _write(tmp_path / "run", {"a": np.ones(2), "b": np.ones(3), "c": np.ones(4), "d": np.ones(5)})
    index_file = tmp_path / "run" / INDEX_FILE
    records = [json.loads(line) for line in index_file.read_text().splitlines()]
    for record, order in zip(records, [10**19, "x", -(10**30), "Infinity"], strict=True):
        record["order"] = order
    index_file.write_text("".join(json.dumps(r) + "\n" for r in records))
    columns = json.loads((tmp_path / "run" / COLUMNS_FILE).read_text())
    columns["index_bytes"] = index_file.stat().st_size
    columns["columns"]["order"] = [r["order"] for r in records]
    (tmp_path / "run" / COLUMNS_FILE).write_text(json.dumps(columns))
    if not cache:
        (tmp_path / "run" / COLUMNS_FILE).unlink()
    dump = nbprec.open(tmp_path / "run")
    assert dump.index["order"].tolist() == [-1, -1, -1, -1] and dump.index["numel"].tolist() == [2, 3, 4, 5]
    problems = dump.problems
    where = tmp_path / "run" / (COLUMNS_FILE if cache else INDEX_FILE)
    assert len(problems) == 4 and set(problems["file"]) == {str(where)}
    texts = problems["problem"].tolist()
    assert texts[:3] == [
        "order 10000000000000000000: not a 64-bit integer, read as unknown (-1)",
        "order 'x': not a 64-bit integer, read as unknown (-1)",
        "order -1000000000000000000000000000000: not a 64-bit integer, read as unknown (-1)",
    ]
    huge = {"name": "h", "order": 10**3000}
    assert make_index([huge])["order"].tolist() == [-1]  # (without a reader to tell: unknown all the same)
    assert (
        unreadable_integer("order", 10**3000)
        == "order an integer of 9966 bits: not a 64-bit integer, read as unknown (-1)"
    )
    assert (
        unreadable_integer("step", "y" * 100) == "step '" + "y" * 56 + "...: not a 64-bit integer, read as unknown (-1)"
    )
    rows = ["row 0", "row 1", "row 2", "row 3"] if cache else [r["name"] for r in records]
    assert problems["record"].tolist() == rows
