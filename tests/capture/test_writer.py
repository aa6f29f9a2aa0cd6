"""The capture's dump writer: its files read back the same every way, payloads are snapshots, errors surface."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pandas as pd
import pytest

import nbprec
from nbprec.errors import CaptureError

from .conftest import capture_tiny

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def test_column_cache_and_index_lines_agree(tmp_path: Path) -> None:
    path = capture_tiny(tmp_path / "run", "float16", mode="tensor")
    cached = nbprec.open(path).index
    lines = [json.loads(line) for line in (path / "index.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(lines) == len(cached) == nbprec.open(path).meta.get("tensors", len(lines))
    (path / "index.columns.json").unlink()
    parsed = nbprec.open(path).index
    # values, not dtypes: the reader types string columns differently on its two paths (not the writer's doing)
    pd.testing.assert_frame_equal(cached.reset_index(drop=True), parsed.reset_index(drop=True), check_dtype=False)
    assert {"name", "op", "shape", "numel", "min", "zero_count", "file"} <= set(lines[0])
    for key in ("edges.jsonl", "modules.jsonl", "stacks.jsonl", "calls.jsonl"):
        for line in (path / key).read_text(encoding="utf-8").splitlines():
            json.loads(line)  # strict JSON, one object per line


def test_payloads_are_snapshots_taken_when_the_op_ran(tmp_path: Path) -> None:
    """A tensor the model changes later, even where the capture cannot see it, is saved as it was."""
    from nbprec.capture import capture

    x = torch.arange(4, dtype=torch.float32)
    batch = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    with capture(None, tmp_path / "run", level="apis", mode="tensor"):
        y = torch.relu(x)
        y.numpy()[:] = 7.0  # behind torch's back: no in-place op for the capture to see
        bn_mean = torch.zeros(4)
        torch.nn.functional.batch_norm(batch, bn_mean, torch.ones(4), training=True)  # updates bn_mean inside
        torch.nn.functional.batch_norm(batch, bn_mean, torch.ones(4), training=True)
    dump = nbprec.open(tmp_path / "run")
    np.testing.assert_array_equal(dump.tensor("Torch.relu.0.forward.output.0"), np.arange(4, dtype=np.float32))
    first = dump.tensor("Functional.batch_norm.0.forward.input.1")  # recorded after the call: one update
    second = dump.tensor("Functional.batch_norm.1.forward.input.1")
    np.testing.assert_allclose(first, 0.1 * batch.mean(0).numpy(), rtol=1e-6)  # momentum 0.1
    np.testing.assert_allclose(second, 0.19 * batch.mean(0).numpy(), rtol=1e-6)


def test_bfloat16_payloads_keep_their_bits(tmp_path: Path) -> None:
    from nbprec.capture import capture

    x = torch.tensor([1.5, -3.0, 65280.0, 1e-3, float("inf")], dtype=torch.bfloat16)
    with capture(None, tmp_path / "run", level="apis", mode="tensor"):
        x * 2
    dump = nbprec.open(tmp_path / "run")
    saved = dump.tensor("Tensor.mul.0.forward.input.0")
    assert saved.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(saved.view(np.uint16), x.view(torch.int16).numpy().view(np.uint16))
    row = dump.row("Tensor.mul.0.forward.input.0")
    assert row["inf_count"] == 1 and row["max"] == 65280.0 and row["min"] == -3.0


def test_a_payload_that_cannot_be_written_is_a_capture_error(tmp_path: Path) -> None:
    from nbprec.capture import capture

    x = torch.ones(3)
    with (
        pytest.raises(CaptureError, match=r"Torch\.relu\.[01]\.forward.*cannot write"),
        capture(None, tmp_path / "run", level="apis", mode="tensor"),
    ):
        torch.relu(x)
        # the folder is gone (renamed at once: a removal could race the background writer): later files fail
        (tmp_path / "run" / "tensors").rename(tmp_path / "run-tensors-moved")
        torch.relu(x)
    assert nbprec.open(tmp_path / "run").meta["finished"] is False


def test_names_outside_ascii(tmp_path: Path) -> None:
    from nbprec.capture import capture

    model = torch.nn.Sequential()
    model.add_module("lineär", torch.nn.Linear(2, 2))
    with capture(model, tmp_path / "run", mode="tensor"):
        model(torch.ones(1, 2)).sum().backward()
    dump = nbprec.open(tmp_path / "run")
    assert "Module.lineär.Linear.forward.0" in set(dump.ops()["op"])
    assert dump.tensor("Module.lineär.Linear.forward.0.output.0").shape == (1, 2)


def _rewrite_with_the_base_writer(src: Path, dst: Path, mode: str) -> None:
    """Feed every record of a capture's dump through :class:`NativeDumpWriter`, the writer of the format."""
    from nbprec.formats.native import NativeDumpWriter
    from nbprec.stats import STAT_COLUMNS

    def lines(name: str) -> list[dict]:
        return [json.loads(line) for line in (src / name).read_text(encoding="utf-8").splitlines()]

    dump = nbprec.open(src)
    with NativeDumpWriter(dst, run=src.name, mode=mode) as writer:
        for line in lines("index.jsonl"):
            stats = {c: line.pop(c) for c in STAT_COLUMNS}
            stats = {c: float(v) if isinstance(v, str) else v for c, v in stats.items()}  # "NaN", "Infinity"
            file = line.pop("file", None)
            writer.write_tensor(line, dump.tensor(line["name"]) if file else None, stats)
        for line in lines("edges.jsonl"):
            writer.write_edge(line["src"], line["dst_op"], line["dst_slot"])
        for line in lines("modules.jsonl"):
            writer.write_module(line["node"], line["parent"])
        for line in lines("stacks.jsonl"):
            writer.write_stack(line["op"], line["frames"])
        for line in lines("calls.jsonl"):
            writer.write_call(line["op"], line["call"])


@pytest.mark.parametrize("mode", ["statistics", "tensor"])
def test_the_capture_writes_what_the_format_writer_writes(tmp_path: Path, mode: str) -> None:
    """Byte for byte: the capture's fast writer and NativeDumpWriter agree on every file of the dump."""
    from nbprec.capture import capture

    path = capture_tiny(tmp_path / "run", "float16", mode=mode)
    with capture(None, tmp_path / "odd", level="apis", mode=mode):  # NaN, inf, empty, bf16, bool, int, views
        x = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 0.0], dtype=torch.bfloat16)
        torch.nan_to_num(x * 2)
        torch.empty(0, 3).sum(0)
        (torch.arange(12).reshape(3, 4).t() > 4).int()
    for src in (path, tmp_path / "odd"):
        _rewrite_with_the_base_writer(src, tmp_path / f"base-{src.name}", mode)
        for name in ("index.jsonl", "edges.jsonl", "modules.jsonl", "stacks.jsonl", "calls.jsonl"):
            assert (src / name).read_bytes() == (tmp_path / f"base-{src.name}" / name).read_bytes(), name
        ours = json.loads((src / "index.columns.json").read_text(encoding="utf-8"))
        theirs = json.loads((tmp_path / f"base-{src.name}" / "index.columns.json").read_text(encoding="utf-8"))
        assert ours == theirs
        payloads = sorted(p.name for p in (src / "tensors").iterdir())
        assert len(payloads) == (ours["rows"] if mode == "tensor" else 0)
        for file in payloads:  # the .npy files numpy.save would write
            assert (src / "tensors" / file).read_bytes() == (tmp_path / f"base-{src.name}/tensors" / file).read_bytes()
        assert len(ours["columns"]["name"]) == ours["rows"] > 4
    odd = nbprec.open(tmp_path / "odd")
    row = odd.row("Tensor.mul.0.forward.input.0")
    assert (row["nan_count"], row["inf_count"], row["zero_count"], row["min"], row["max"]) == (1, 2, 1, 0.0, 1.0)


def test_payload_buffers_reused_across_ops_keep_every_value(tmp_path: Path) -> None:
    """Large payloads are copied into recycled buffers: each file still holds its own op's values."""
    from nbprec.capture import capture

    base = torch.arange(40_000, dtype=torch.float32)  # 160 kB: recycled size class, reused op after op
    with capture(None, tmp_path / "run", level="apis", mode="tensor"):
        x = base
        for _ in range(30):
            x = x + 1.0
        x[:5].sum()  # a small one among them
    dump = nbprec.open(tmp_path / "run")
    for i in range(30):
        np.testing.assert_array_equal(dump.tensor(f"Tensor.add.{i}.forward.output.0"), base.numpy() + (i + 1))
        np.testing.assert_array_equal(dump.tensor(f"Tensor.add.{i}.forward.input.0"), base.numpy() + i)
    assert float(dump.tensor("Tensor.sum.0.forward.output.0")) == 5 * 30 + 10


def test_the_base_writers_line_methods_stay_in_order(tmp_path: Path) -> None:
    from nbprec.capture.writer import CaptureWriter

    with CaptureWriter(tmp_path / "run", mode="statistics") as writer:
        writer.lines.module("a", None)
        writer.write_module("b", "a")  # the base writer's method, between two buffered lines
        writer.lines.module("c", "b")
        with pytest.raises(NotImplementedError, match="add"):
            writer.write_tensor({"name": "x", "dtype": "float32", "shape": [1]})
    lines = (tmp_path / "run" / "modules.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["node"] for line in lines] == ["a", "b", "c"]


def test_call_texts_are_what_json_dumps_writes(monkeypatch) -> None:
    """The calls' JSON goes through json's C encoder made once; its text is json.dumps's, and without the C
    encoder (or where its private signature changed) the public encoder is used."""
    import json as json_module

    from nbprec.capture import signature

    args = (torch.ones(2), [1, -2.5e-7, None, True], slice(0, 4, None), 'é\n"', float("nan"), torch.float16)
    kwargs = {"dim": -1, "size": torch.Size([3, 4]), "weird": object()}
    text = signature.encode_call_json("Functional.op", args, kwargs, torch)
    encoded = signature.encode_call("Functional.op", args, kwargs, torch)
    assert text == json_module.dumps(encoded, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    assert json_module.loads(text)["replayable"] is False
    with pytest.raises(ValueError, match="not JSON compliant"):
        signature._DUMPS([float("inf")])  # encode_value never makes one; strict all the same
    monkeypatch.setattr(json_module.encoder, "c_make_encoder", None)  # (what a Python without _json has)
    public = signature._strict_dumps()
    assert public([{"a": 1.5}]) == '[{"a":1.5}]'
    monkeypatch.undo()
    original = json_module.encoder.c_make_encoder

    def changed(markers, *rest):  # a signature that no longer takes ours (json's own calls pass a dict)
        if markers is None:
            raise TypeError("changed")
        return original(markers, *rest)

    monkeypatch.setattr(json_module.encoder, "c_make_encoder", changed)
    assert signature._strict_dumps()([1, "é"]) == '[1,"é"]'


@pytest.mark.parametrize("mode", ["statistics", "tensor"])
def test_the_column_cache_is_joined_in_c_as_in_python(tmp_path: Path, monkeypatch, mode: str) -> None:
    """The column cache a capture writes in C (``column_cache`` of a tensor-mode capture's rows; a statistics
    capture's cells kept by the C twin of ``add`` as the records come) holds the bytes the Python join
    (``CaptureWriter._columns_text``) gives for the same records: names outside ASCII, payload files or none; rows
    of another form are a TypeError, not a crash."""
    from nbprec.capture import capture, writer

    if writer.column_cache is None:
        pytest.skip("nbprec.capture._indexlines was not built")
    seen = []
    original = writer.CaptureWriter._write_columns

    def check(self) -> None:
        rows = list(self._rows)
        names = writer._CACHE_COLUMNS if self._has_files else writer._CACHE_COLUMNS[:-1]
        in_c = self._kept.columns(names) if self._kept is not None else writer.column_cache(rows, names)
        seen.append((in_c, self._columns_text(rows).encode("utf-8") if rows else None, len(rows)))
        original(self)

    monkeypatch.setattr(writer.CaptureWriter, "_write_columns", check)
    model = torch.nn.Sequential()
    model.add_module("lineär", torch.nn.Linear(2, 2))
    for c_twin in (writer.IndexLines, None):  # the C twin of add (statistics mode), then the Python add alone
        monkeypatch.setattr(writer, "IndexLines", c_twin)
        with capture(model, tmp_path / f"run-{c_twin is None}", mode=mode):
            model(torch.ones(1, 2)).sum().backward()
        with capture(None, tmp_path / f"empty-{c_twin is None}", level="apis", mode=mode):
            pass
    (c_run, _, c_rows), (c_empty, _, _), (py_c, py_text, py_rows), (py_empty, _, _) = seen
    assert py_rows > 0 and c_rows == (py_rows if mode == "tensor" else 0)  # statistics: no rows kept in Python
    assert c_run == py_c == py_text and c_empty == py_empty == b""
    assert "lineär".encode() in c_run
    assert (b'"file":[' in c_run) == (mode == "tensor")
    with pytest.raises(TypeError):
        writer.column_cache([("not", "a", "record")], writer._CACHE_COLUMNS[:-1])
    with pytest.raises(TypeError):
        writer.column_cache([], ("too", "few"))
