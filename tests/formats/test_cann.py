"""CANN NPU dump files: the reader against an independent raw-protobuf writer, nbprec's writer, and bad files."""

from __future__ import annotations

import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from cann_raw import dump_file, int_field, tensor_entry
from fresh_python import run_python

import nbprec
from nbprec.errors import DumpFormatError, EmptyDumpError
from nbprec.formats import guess_format
from nbprec.formats.cann import read_header
from nbprec.formats.cann_tree import parse_file_name
from nbprec.formats.cann_write import CannTensor, dump_folder, write_dump_file
from nbprec.formats.storage import from_origin

FLOAT16, FLOAT32, BF16, INT8 = 2, 1, 27, 3
ND, NCHW, NHWC, NC1HWC0, FRACTAL_Z, HWCN, FRACTAL_NZ = 2, 0, 1, 3, 4, 16, 29


def _entry(role: str, array: np.ndarray, data_type: int, fmt: int, stored: np.ndarray, **kw) -> tuple[bytes, bytes]:
    payload = np.ascontiguousarray(stored).tobytes()
    entry = tensor_entry(
        role=role,
        data_type=data_type,
        fmt=fmt,
        dims=list(stored.shape),
        size=len(payload),
        original_dims=list(array.shape),
        **kw,
    )
    return entry, payload


def test_independent_writer_storage_formats_load_bit_exactly(tmp_path: Path) -> None:
    """A file written from the spec alone (raw wire bytes, unknown fields included) reads back bit-exactly."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, 3, 3)).astype(np.float16)  # NHWC, C=3 padded to 16
    w = rng.standard_normal((3, 3, 3, 20)).astype(np.float16)  # HWCN, N=20 padded to 32
    y = rng.standard_normal((4, 17, 33)).astype(np.float16)  # FRACTAL_NZ with padding on both axes
    unknown = int_field(15, 7) + int_field(9, 3)  # fields a newer CANN may add: skipped
    inputs = [
        _entry("input", x, FLOAT16, NC1HWC0, from_origin(x, "NC1HWC0", "NHWC"), unknown=unknown),
        _entry("input", w, FLOAT16, FRACTAL_Z, from_origin(w, "FRACTAL_Z", "HWCN")),
    ]
    outputs = [
        _entry("output", y, FLOAT16, FRACTAL_NZ, from_origin(y, "FRACTAL_NZ", "ND"), original_op=("a/b", 0, 1, ND))
    ]
    folder = tmp_path / "dump" / "20240101" / "0" / "model" / "1" / "0"
    folder.mkdir(parents=True)
    dump_file(
        folder / "Conv2D.conv1_Conv2D.5.0.1700000000000001",
        op_name="conv1/Conv2D",
        inputs=inputs,
        outputs=outputs,
        extra_header=int_field(40, 123),
    )
    assert guess_format(tmp_path / "dump") == "cann"
    dump = nbprec.open(tmp_path / "dump")
    assert dump.problems.empty, dump.problems
    idx = dump.index.set_index("name")
    assert idx.loc["conv1/Conv2D:input:0", "origin_format"] == "NHWC"  # inferred from the shapes
    assert idx.loc["conv1/Conv2D:input:1", "origin_format"] == "HWCN"
    assert idx.loc["conv1/Conv2D:output:0", "origin_name"] == "a/b"
    for name, expected in (("input:0", x), ("input:1", w), ("output:0", y)):
        got = dump.tensor(f"conv1/Conv2D:{name}")
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert got.tobytes() == expected.tobytes()
    row = dump.index.iloc[0]
    assert (row["step"], row["rank"], row["model"], row["task_id"]) == (0, 0, "model/1", 5)


@pytest.mark.parametrize(
    "dtype",
    [
        "float16",
        "float32",
        "float64",
        "bfloat16",
        "float8_e4m3fn",
        "float8_e5m2",
        "int8",
        "uint8",
        "int16",
        "int32",
        "int64",
        "uint32",
        "uint64",
        "bool",
        "complex64",
    ],
)
def test_every_dtype_round_trips(tmp_path: Path, dtype: str) -> None:
    from nbprec.dtypes import NUMPY_DTYPES

    rng = np.random.default_rng(2)
    values = (rng.standard_normal((3, 7)) * 10).astype(np.float32)
    array = values.astype(NUMPY_DTYPES[dtype]) if dtype != "bool" else values > 0
    write_dump_file(tmp_path, "op/x", "Add", inputs=[array], outputs=[CannTensor(array)], task_id=1, timestamp=5)
    dump = nbprec.open(tmp_path)
    assert set(dump.index["dtype"]) == {dtype}
    got = dump.tensor("op/x:output:0")
    assert got.dtype == array.dtype and got.tobytes() == array.tobytes()


def test_file_name_variants() -> None:
    old = parse_file_name("Add.add_1.12.1675157077176648")
    assert (old.task_id, old.stream_id, old.timestamp) == (12, -1, 1675157077176648)
    new = parse_file_name("Add.partition0_rank1_Add.0.3.1673383728093446.4.1.0.0")
    assert (new.task_id, new.stream_id, new.timestamp, new.context_id, new.thread_id) == (0, 3, 1673383728093446, 1, 0)
    assert isinstance(parse_file_name("Add.add.1"), str)  # one number: not a dump
    assert isinstance(parse_file_name("Add.add.1.2.3.4.5.6.7.8"), str)  # five extra numbers: too many
    assert isinstance(parse_file_name("x.npy"), str)


def test_tree_steps_devices_and_selection(tmp_path: Path) -> None:
    for step in (0, 1, 2):
        for device in (0, 1):
            folder = dump_folder(tmp_path / "dump", device=device, step=step)
            value = np.full(4, step * 10 + device, np.float32)
            write_dump_file(folder, "a/relu", "Relu", outputs=[value], task_id=1, timestamp=100 + step)
            write_dump_file(folder, "a/add", "Add", outputs=[value], task_id=0, timestamp=50 + step)
    dump = nbprec.open(tmp_path / "dump")
    assert dump.steps == [0, 1, 2] and dump.ranks == [0, 1]
    one = dump.select(step=1, rank=1)
    assert list(one.index["op"]) == ["a/add", "a/relu"]  # execution order from the timestamps
    assert np.all(one.tensor(0) == 11)
    picked = nbprec.open(tmp_path / "dump", step=[0, 2])
    assert picked.steps == [0, 2]
    deeper = nbprec.open(tmp_path / "dump" / "20240101000000" / "1" / "ge_default" / "1" / "2")
    assert deeper.steps == [2] and deeper.ranks == [1]


def test_repeated_op_occurrences(tmp_path: Path) -> None:
    for ts, value in ((10, 1.0), (20, 2.0), (30, 3.0)):
        write_dump_file(tmp_path, "loop/body", "Mul", outputs=[np.full(2, value, np.float32)], task_id=1, timestamp=ts)
    last = nbprec.open(tmp_path)
    assert len(last) == 1 and last.tensor(0).tolist() == [3.0, 3.0]
    assert last.problems["problem"].str.contains("repeat an op").any()  # not silent
    first = nbprec.open(tmp_path, occurrence="first")
    assert first.tensor(0).tolist() == [1.0, 1.0]
    every = nbprec.open(tmp_path, occurrence="all")
    assert list(every.index["op"]) == ["loop/body", "loop/body#1", "loop/body#2"]


def test_long_names_mapping_csv_and_missing_op_name(tmp_path: Path) -> None:
    real = "Add.very_long_scope_Add.1.0.1700000000000000"
    write_dump_file(
        tmp_path,
        "very/long/scope/Add",
        "Add",
        outputs=[np.ones(3, np.float32)],
        file_name="1234567",
        record_op_name=False,
        task_id=1,
        timestamp=1700000000000000,
    )
    (tmp_path / "mapping.csv").write_text(f"1234567,{real}\n", encoding="utf-8")
    dump = nbprec.open(tmp_path)
    assert list(dump.index["op"]) == ["very_long_scope_Add"]  # the header had no name: the file name's
    assert dump.index["op_type"].iloc[0] == "Add"
    (tmp_path / "1234567").write_bytes(b"\x00" * 5)  # cut short: the mapped file is the one the error names
    with pytest.raises(DumpFormatError, match=r"named as CANN dump files.*1234567: too short"):
        guess_format(tmp_path)


def test_bf16_without_recorded_original_shape_is_kept_as_stored(tmp_path: Path) -> None:
    x = np.arange(2 * 20 * 4, dtype=np.float32).reshape(2, 20, 2, 2).astype(ml_dtypes.bfloat16)
    write_dump_file(tmp_path, "c/conv", "Conv2D", outputs=[CannTensor(x, "NC1HWC0", record_original_shape=False)])
    dump = nbprec.open(tmp_path)
    row = dump.index.iloc[0]
    assert row["shape"] == (2, 2, 2, 2, 16) and row["storage_format"] == "NC1HWC0"
    assert dump.problems["problem"].str.contains("no original shape").any()
    assert dump.tensor(0).shape == (2, 2, 2, 2, 16)


def test_graph_gives_the_original_layout(tmp_path: Path) -> None:
    from nbprec.graph.ge_write import write_ge_graph

    x = np.arange(1 * 3 * 3 * 5, dtype=np.float16).reshape(1, 3, 3, 5)  # NHWC
    write_dump_file(tmp_path, "b/relu", "Relu", outputs=[CannTensor(x, "NC1HWC0", "NHWC", record_original_shape=False)])
    graph = tmp_path / "ge_proto_00000001_Build.txt"
    desc = {
        "dtype": "float16",
        "layout": "NC1HWC0",
        "shape": [1, 1, 3, 3, 16],
        "attrs": {"origin_format": "NHWC", "origin_shape": [1, 3, 3, 5]},
    }
    write_ge_graph(graph, [{"name": "b/relu", "type": "Relu", "output_descs": [desc]}])
    dump = nbprec.open(tmp_path, graph=graph)
    assert dump.tensor(0).tobytes() == x.tobytes()
    assert dump.meta["ge_graphs"] == [str(graph)]


# -- bad files ---------------------------------------------------------------------------------------------


def _good(tmp_path: Path) -> Path:
    return write_dump_file(tmp_path, "g/ok", "Add", outputs=[np.ones(8, np.float32)], task_id=1, timestamp=1)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:5], "too short"),
        (lambda b: (10**6).to_bytes(8, "little") + b[8:], "runs past the end"),
        (lambda b: b[:-7], "cut short"),
        (
            lambda b: b[:8] + b"\xff" * (int.from_bytes(b[:8], "little")) + b[8 + int.from_bytes(b[:8], "little") :],
            "not a valid DumpData",
        ),
    ],
    ids=["too-short", "header-past-end", "truncated-payload", "garbage-header"],
)
def test_corrupt_files_give_clear_errors(tmp_path: Path, damage, message: str) -> None:
    good = _good(tmp_path)
    bad = tmp_path / "Add.g_bad.2.0.2"
    bad.write_bytes(damage(good.read_bytes()))
    with pytest.raises(DumpFormatError, match=message) as info:
        read_header(bad)
    assert str(bad) in str(info.value)
    dump = nbprec.open(tmp_path)  # in a folder: the good file is read, the bad one is a problem naming it
    assert list(dump.index["op"]) == ["g/ok"]
    assert dump.problems["file"].eq(str(bad)).any()
    with pytest.raises(DumpFormatError, match=message):
        nbprec.open(bad, format="cann")


def test_a_dump_whose_first_file_is_cut_short_is_still_told_and_opened(tmp_path: Path) -> None:
    """The format guess looks at the first dump file it finds; when that one is cut short (a run stopped while
    dumping), the next ones of its folder are looked at: the dump is told as CANN and opened, the file a problem.
    Every file cut short: not told, but the error says that it holds files named as CANN dump files, and what is
    wrong with the first."""
    from nbprec.formats._probe import find_first_file
    from nbprec.formats.cann_index import dump_or_mapping

    for k in range(4):
        write_dump_file(tmp_path, f"g/op{k}", "Add", outputs=[np.ones(8, np.float32)], task_id=k, timestamp=k)
    first = find_first_file(tmp_path, dump_or_mapping, max_depth=6)
    first.write_bytes(first.read_bytes()[:5])
    assert guess_format(tmp_path) == "cann"
    dump = nbprec.open(tmp_path)
    assert len(dump.index) == 3 and dump.problems["file"].eq(str(first)).any()
    for file in tmp_path.iterdir():
        file.write_bytes(file.read_bytes()[:5])
    told = "named as CANN dump files, but none of those looked at starts as one .the first, .*: too short.*dump again"
    with pytest.raises(DumpFormatError, match=f"not recognised as any dump format .*: it holds files {told}"):
        guess_format(tmp_path)
    with pytest.raises(DumpFormatError, match=r"no readable CANN dump file \(4 files .*; the first, .*: too short"):
        nbprec.open(tmp_path, format="cann")


def test_a_folder_of_other_files_is_not_said_to_hold_cann_files(tmp_path: Path) -> None:
    (tmp_path / "weights.v2.bin").write_bytes(b"\x01" * 40)  # (dotted, but not {op_type}.{op_name}.{numbers})
    (tmp_path / "log.txt").write_text("hello", encoding="utf-8")
    with pytest.raises(DumpFormatError, match="not recognised") as caught:
        guess_format(tmp_path)
    assert "CANN" not in str(caught.value)


def test_unknown_dtype_and_format_are_recorded(tmp_path: Path) -> None:
    payload = np.ones(6, np.float32).tobytes()
    entries = [
        (tensor_entry(role="output", data_type=99, fmt=ND, dims=[6], size=24), payload),
        (tensor_entry(role="output", data_type=FLOAT32, fmt=57, dims=[6], size=24, original_dims=[2, 3]), payload),
        (tensor_entry(role="output", data_type=FLOAT32, fmt=ND, dims=[7], size=24), payload),
    ]
    dump_file(tmp_path / "Add.odd.1.0.5", op_name="odd", outputs=entries)
    dump = nbprec.open(tmp_path)
    idx = dump.index.set_index("slot")
    assert idx.loc["0", "dtype"] == "cann_dtype_99" and not idx.loc["0", "has_data"]
    assert idx.loc["1", "storage_format"] == "FORMAT_57" and idx.loc["1", "shape"] == (6,)
    assert not idx.loc["2", "has_data"]  # 7 float32 declared, 24 bytes stored
    problems = " | ".join(dump.problems["problem"])
    assert "cann_dtype_99" in problems and "FORMAT_57" in problems and "does not match shape" in problems


def test_foreign_names_fifo_and_empty(tmp_path: Path) -> None:
    _good(tmp_path)
    (tmp_path / "README").write_text("notes")
    os.mkfifo(tmp_path / "Add.g_fifo.3.0.3")
    dump = nbprec.open(tmp_path)  # returns: the FIFO is never opened
    problems = dict(zip(dump.problems["file"].map(lambda f: Path(f).name), dump.problems["problem"], strict=True))
    assert "naming rule" in problems["README"]
    assert "not a regular file" in problems["Add.g_fifo.3.0.3"]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "Add.x.1.0.1").write_bytes(b"\x00" * 4)
    with pytest.raises(EmptyDumpError, match="no readable CANN dump file"):
        nbprec.open(empty, format="cann")


def test_info_cli_lists_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nbprec.cli import main

    _good(tmp_path)
    (tmp_path / "Add.g_bad.2.0.2").write_bytes(b"\x01" * 3)
    assert main(["info", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "format      cann" in out and "Add.g_bad.2.0.2" in out and "too short" in out


def test_recorded_origin_format_that_does_not_fit_yields_to_the_shapes(tmp_path: Path) -> None:
    """A writer that leaves original_op.format at its default (0, NCHW) on an NHWC tensor: the shapes decide."""
    y = np.arange(1 * 3 * 3 * 5, dtype=np.float16).reshape(1, 3, 3, 5)  # NHWC
    entry = _entry("output", y, FLOAT16, NC1HWC0, from_origin(y, "NC1HWC0", "NHWC"), original_op=("t/relu", 0, 1, NCHW))
    dump_file(tmp_path / "Relu.t_relu.1.0.9", op_name="t/relu", outputs=[entry])
    dump = nbprec.open(tmp_path)
    assert dump.problems.empty and dump.index["origin_format"].iloc[0] == "NHWC"
    assert dump.tensor(0).tobytes() == y.tobytes()


@pytest.mark.parametrize("layout", ["origin", "storage"])
@pytest.mark.parametrize("with_graph", [False, True])
def test_layout_plans_shared_between_tensors_of_one_kind_change_nothing(tmp_path, monkeypatch, layout, with_graph):
    """The reader plans each kind of tensor once (``plan_key``): the index and problems are those of planning
    every tensor on its own, on the NPU tutorial's case (every storage format, fused ops, a planted bad op) and on
    tensors whose recorded layouts do not fit."""
    import pandas as pd

    from nbprec.demo.npu import make_npu_demo
    from nbprec.formats import cann_index

    make_npu_demo(tmp_path / "demo")
    graph = tmp_path / "demo" / "ge_proto_00000001_Build.txt"
    real_key, keys = cann_index.plan_key, []

    def unshared_key(*args):  # every tensor planned on its own
        keys.append(real_key(*args))
        return object()

    for folder in (tmp_path / "demo" / "npu", _bad_layouts(tmp_path / "bad")):
        options = {"format": "cann", "layout": layout}
        if with_graph and folder.parent.name == "demo":
            options["graph"] = graph
        shared = nbprec.open(folder, **options)
        keys.clear()
        monkeypatch.setattr(cann_index, "plan_key", unshared_key)
        alone = nbprec.open(folder, **options)
        monkeypatch.setattr(cann_index, "plan_key", real_key)
        assert len(set(keys)) < len(keys)  # tensors of one kind were there to share a plan
        pd.testing.assert_frame_equal(shared.index, alone.index)
        pd.testing.assert_frame_equal(shared.problems, alone.problems)


def _bad_layouts(folder: Path) -> Path:
    """Tensors of a few kinds, several of each: stored NC1HWC0 with and without a recorded original shape (a
    problem each, said per tensor), a recorded origin format that does not fit its shapes (the shapes decide),
    a tensor whose shape fits both NCHW and NHWC stored the same way, recorded as each (the record decides), and
    plain ND tensors."""
    step = dump_folder(folder)
    z = np.arange(2 * 4 * 4 * 4, dtype=np.float16).reshape(2, 4, 4, 4)
    for i, recorded in enumerate((NCHW, NHWC)):
        entry = _entry(
            "output", z, FLOAT16, NC1HWC0, from_origin(z, "NC1HWC0", "NCHW"), original_op=(f"t/z{i}", 0, 1, recorded)
        )
        dump_file(step / f"Add.t_z{i}.{i + 20}.0.{1700000000000200 + i}", op_name=f"t/z{i}", outputs=[entry])
    x = np.arange(2 * 20 * 2 * 2, dtype=np.float32).reshape(2, 20, 2, 2).astype(np.float16)
    y = np.arange(1 * 3 * 3 * 5, dtype=np.float16).reshape(1, 3, 3, 5)  # NHWC, recorded as NCHW below
    for i in range(4):
        write_dump_file(
            step,
            f"c/conv{i}",
            "Conv2D",
            inputs=[CannTensor(x, "NC1HWC0", "NCHW"), x.reshape(-1)],
            outputs=[CannTensor(x, "NC1HWC0", record_original_shape=False)],
        )
        entry = _entry(
            "output", y, FLOAT16, NC1HWC0, from_origin(y, "NC1HWC0", "NHWC"), original_op=(f"t/r{i}", 0, 1, NCHW)
        )
        dump_file(step / f"Relu.t_r{i}.{i + 10}.0.{1700000000000100 + i}", op_name=f"t/r{i}", outputs=[entry])
    return folder


def test_the_header_schema_written_by_hand_is_the_one_descriptor_pb2_builds() -> None:
    """``_dumpdata`` writes the schema's FileDescriptorProto field by field (no descriptor_pb2 import when a
    dump is read): byte for byte what protobuf's own classes serialize for the same dumpdata.proto."""
    from google.protobuf import descriptor_pb2

    from nbprec.formats import _dumpdata

    text = _dumpdata.PROTO_FILE.read_text(encoding="utf-8")
    types = descriptor_pb2.FieldDescriptorProto
    expected = descriptor_pb2.FileDescriptorProto(
        name="nbprec/dumpdata.proto", package="toolkit.dumpdata", syntax="proto3"
    )
    for name, fields in _dumpdata._MESSAGE.findall(_dumpdata._COMMENT.sub("", text)):
        message = expected.message_type.add(name=name)
        for repeated, kind, field_name, number in _dumpdata._FIELD.findall(fields):
            field = message.field.add(name=field_name, number=int(number), json_name=field_name)
            field.label = types.LABEL_REPEATED if repeated else types.LABEL_OPTIONAL
            if kind in _dumpdata._SCALARS:
                field.type = _dumpdata._SCALARS[kind]
            else:
                field.type, field.type_name = types.TYPE_MESSAGE, f".toolkit.dumpdata.{kind}"
    assert len(expected.message_type) == 6 and sum(len(m.field) for m in expected.message_type) == 29
    assert _dumpdata._file_descriptor(text) == expected.SerializeToString(deterministic=True)


def test_reading_a_cann_dump_does_not_import_descriptor_pb2(tmp_path: Path) -> None:
    write_dump_file(dump_folder(tmp_path / "npu"), "fc/MatMul", "MatMul", inputs=[np.ones((2, 3), np.float16)])
    loaded = run_python(
        f"import sys, nbprec; dump = nbprec.open({str(tmp_path / 'npu')!r}); dump.tensor(0)\n"
        "print(' '.join(m for m in sys.modules if m.startswith('google.protobuf')))"
    ).split()
    assert "google.protobuf.message" in loaded and "google.protobuf.descriptor_pb2" not in loaded
    from google.protobuf.internal import api_implementation

    if api_implementation.Type() == "upb":  # (the class made directly: protobuf's pure-Python code is not loaded)
        assert "google.protobuf.internal.python_message" not in loaded


def test_the_header_class_made_on_upb_reads_as_the_public_one(tmp_path: Path) -> None:
    """``dump_data_class`` makes the class on upb directly where protobuf runs on it; the class protobuf's public
    ``message_factory`` makes parses every header of the NPU tutorial's dump to the same message."""
    from google.protobuf import descriptor_pool, message_factory

    from nbprec.demo.npu import make_npu_demo
    from nbprec.formats import _dumpdata

    case = make_npu_demo(tmp_path / "demo")
    serialized = _dumpdata._file_descriptor(_dumpdata.PROTO_FILE.read_text(encoding="utf-8"))
    pool = descriptor_pool.DescriptorPool()
    public = message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"{pool.AddSerializedFile(serialized).package}.DumpData")
    )
    made = _dumpdata.dump_data_class()
    files = [Path(r, n) for r, _, names in os.walk(case.npu) for n in names if n[-1].isdigit()]
    assert len(files) > 10
    for file in files:
        data = file.read_bytes()
        raw = data[8 : 8 + int.from_bytes(data[:8], "little")]
        ours, theirs = made.FromString(raw), public.FromString(raw)
        assert str(ours) == str(theirs) and ours.SerializeToString() == theirs.SerializeToString()
        assert ours.ListFields() and [f.name for f, _ in ours.ListFields()] == [f.name for f, _ in theirs.ListFields()]
