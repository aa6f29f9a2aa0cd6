"""The msprobe reader on the real msprobe dumps in tests/fixtures/msprobe, and on damaged copies of them."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import sys
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import nbprec
from nbprec.errors import (
    DumpFormatError,
    EmptyDumpError,
    MissingDependencyError,
    NbprecError,
    TensorDataUnavailableError,
)
from nbprec.formats.msprobe import MsprobeDumpReader, parse_op_key

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
RUNS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and list(p.glob("step*/rank*/dump.json")))
TENSOR_RUNS = [r for r in RUNS if "_tensor_" in r]
COMPARE_CSV = next((FIXTURES / "msprobe_compare_bf16_vs_fp32").glob("*.csv"))


SECTION_LABELS = {"input_args": "input", "input_kwargs": "input", "parameters": "parameters"}


# -- an independent reading of dump.json -----------------------------------------------------------
def expected_records(run: str) -> dict[tuple[int, str], dict]:
    """(step, tensor name) -> the dump.json entry, by walking every dump.json of a fixture run by hand."""
    out: dict[tuple[int, str], dict] = {}
    for dump_json in sorted((FIXTURES / run).glob("step*/rank*/dump.json")):
        step = int(dump_json.parent.parent.name[4:])
        data = json.loads(dump_json.read_text())["data"]

        def visit(value, name, step=step):
            if isinstance(value, dict) and value.get("type") == "torch.Tensor":
                out[(step, name)] = value
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    visit(item, f"{name}.{i}")
            elif isinstance(value, dict) and "type" not in value:
                for k, item in value.items():
                    visit(item, f"{name}.{k}")

        for op, body in data.items():
            if ".parameters_grad." in op:
                for param, value in body.items():
                    visit(value[0] if len(value) == 1 else value, f"{op}.{param}")
                continue
            for section, value in body.items():
                part = SECTION_LABELS.get(section, section)
                visit(value, f"{op}.{part}")
    return out


def same_float(a, b) -> bool:
    if b is None:
        return math.isnan(a)
    return (math.isnan(a) and math.isnan(float(b))) or a == float(b)


def bits(array: np.ndarray) -> np.ndarray:
    """The raw bits of an array, for bit-for-bit comparison (NaN payloads included)."""
    a = np.ascontiguousarray(array)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind in "fcV" or a.dtype.itemsize in (1, 2) else a


# -- the index matches dump.json record for record -------------------------------------------------
@pytest.mark.parametrize("run", RUNS)
def test_index_holds_exactly_the_tensor_records_of_dump_json(run):
    dump = nbprec.open(FIXTURES / run)
    expected = expected_records(run)
    got = {(int(r.step), r.name): r for r in dump.index.itertuples()}
    assert dump.format == "msprobe"
    assert set(got) == set(expected)
    assert len(dump.index) == len(expected)
    for key, entry in expected.items():
        row = got[key]
        assert row.shape == tuple(entry["shape"])
        assert row.numel == int(np.prod(entry["shape"]))
        assert row.dtype == entry["dtype"].removeprefix("torch.")
        assert same_float(row.max, entry["Max"]) and same_float(row.min, entry["Min"])
        assert same_float(row.mean, entry["Mean"]) and same_float(row.norm, entry["Norm"])
        if entry["Max"] is not None and entry["Min"] is not None:
            assert row.abs_max == max(abs(entry["Max"]), abs(entry["Min"]))
        assert row.checksum == entry.get("md5", "")
        assert row.has_data == ("data_name" in entry)
        if "data_name" in entry:
            assert row.name == entry["data_name"].removesuffix(".pt")
            assert Path(row.file).is_absolute() and Path(row.file).name == entry["data_name"]
    assert len(dump.problems) == 0
    assert dump.steps == sorted({k[0] for k in expected}) and dump.ranks == [0]


@pytest.mark.parametrize("run", RUNS)
def test_order_is_the_position_of_the_op_in_data(run):
    dump = nbprec.open(FIXTURES / run)
    step0 = dump.select(step=0).index
    data = json.loads(next((FIXTURES / run).glob("step0/rank*/dump.json")).read_text())["data"]
    position = {op: i for i, op in enumerate(data)}
    assert (step0["order"] == step0["op"].map(position)).all()
    assert list(dump.ops()["op"][: len(step0["op"].unique())]) == [op for op in data if op in set(step0["op"])]


def test_names_equal_the_npu_name_column_of_msprobes_compare_csv():
    with COMPARE_CSV.open(newline="") as f:
        rows = list(csv.DictReader(f))
    tensor_rows = [r["NPU Name"] for r in rows if r["NPU Dtype"].startswith("torch.")]
    dump = nbprec.open(FIXTURES / "bf16_tensor_mix")
    assert list(dump.index["name"]) == tensor_rows
    assert len(dump.index) + dump.meta["non_tensor_values"] == len(rows)
    by_name = dump.index.set_index("name")
    for r in rows:
        if r["NPU Name"] in by_name.index:
            assert str(list(by_name.loc[r["NPU Name"], "shape"])) == r["NPU Tensor Shape"]
            assert r["NPU Dtype"] == "torch." + by_name.loc[r["NPU Name"], "dtype"]


def test_statistics_mode_derives_the_same_names_as_tensor_mode():
    stats = nbprec.open(FIXTURES / "bf16_statistics_mix")
    tensors = nbprec.open(FIXTURES / "bf16_tensor_mix")
    for step in (0, 1):
        assert list(stats.select(step=step).index["name"]) == list(tensors.index["name"])
    assert not stats.index["has_data"].any() and (stats.index["file"] == "").all()
    assert stats.meta["task"] == "statistics"
    with pytest.raises(TensorDataUnavailableError, match="statistics"):
        stats.select(step=1).tensor("Functional.linear.0.forward.output.0")


def test_md5_mode_fills_the_checksum_with_the_crc32_of_the_tensor_bytes():
    pytest.importorskip("torch")
    md5 = nbprec.open(FIXTURES / "fp32_md5_L1")
    assert md5.meta["level"] == "L1" and not md5.index["module"].str.startswith("Module").any()
    assert md5.index["checksum"].str.fullmatch(r"[0-9a-f]{8}").all()
    full = nbprec.open(FIXTURES / "fp32_tensor_mix")
    forward = md5.index[md5.index["direction"] == "forward"]
    assert len(forward) > 50
    for row in forward.itertuples():  # forward passes are deterministic: same bytes in both runs
        array = np.ascontiguousarray(full.tensor(row.name))
        assert f"{zlib.crc32(array.tobytes()):08x}" == row.checksum, row.name


@pytest.mark.parametrize("run", TENSOR_RUNS)
def test_tensors_equal_torch_load_bit_for_bit(run):
    torch = pytest.importorskip("torch")
    dump = nbprec.open(FIXTURES / run)
    for row in dump.index.itertuples():
        ref = torch.load(row.file, weights_only=True, map_location="cpu")
        got = dump.tensor(row.name)
        assert got.shape == tuple(ref.shape) == row.shape
        assert str(ref.dtype) == f"torch.{row.dtype}" and got.dtype == nbprec.dtypes.NUMPY_DTYPES[row.dtype]
        if ref.dtype == torch.bfloat16:
            np.testing.assert_array_equal(got.view(np.int16), ref.view(torch.int16).numpy())
        elif ref.dtype.is_floating_point:
            width = {2: np.int16, 4: np.int32, 8: np.int64}[ref.element_size()]
            np.testing.assert_array_equal(got.view(width), ref.numpy().view(width))
        else:
            np.testing.assert_array_equal(got, ref.numpy())


def test_bfloat16_tensor_comes_back_as_ml_dtypes_and_matches_the_recorded_statistics():
    pytest.importorskip("torch")
    dump = nbprec.open(FIXTURES / "bf16_tensor_mix")
    row = dump.row("Functional.linear.0.forward.output.0")
    array = dump.tensor(row.name)
    assert array.dtype == ml_dtypes.bfloat16
    assert float(array.max()) == row["max"] and float(array.min()) == row["min"]


def test_autocast_run_holds_mixed_dtypes():
    dump = nbprec.open(FIXTURES / "autocast_bf16_tensor_mix")
    assert {"bfloat16", "float32", "int64"} <= set(dump.index["dtype"])
    linear_out = dump.row("Functional.linear.0.forward.output.0")
    assert linear_out["dtype"] == "bfloat16"


# -- op fields, roles, hierarchy and stacks ------------------------------------------------------------
def test_op_fields_for_apis_modules_and_parameter_gradients():
    idx = nbprec.open(FIXTURES / "bf16_tensor_mix").index.set_index("name")
    api = idx.loc["Functional.linear.0.forward.input.1"]
    assert (api.op, api.api, api.op_type, api.call, api.direction, api.role, api.slot) == (
        "Functional.linear.0.forward", "Functional.linear", "linear", 0, "forward", "input", "1"
    )  # fmt: skip
    assert api.module == "enc.layers.0.linear1"  # the calling module, from construct.json
    mod = idx.loc["Module.enc.layers.0.linear1.Linear.forward.0.parameters.weight"]
    assert (mod.api, mod.op_type, mod.module, mod.role, mod.slot) == (
        "Module.Linear", "Linear", "enc.layers.0.linear1", "parameter", "weight"
    )  # fmt: skip
    grad = idx.loc["Module.head.Linear.parameters_grad.0.weight"]
    assert (grad.role, grad.slot, grad.direction, grad.module) == ("gradient", "weight", "backward", "head")
    kw = idx.loc["Functional.layer_norm.0.forward.input.2"]
    assert kw.role == "input"
    top = idx.loc["Functional.cross_entropy.0.forward.input.0"]
    assert top.module == ""  # called outside any module


def test_backward_entries_keep_msprobes_labels():
    idx = nbprec.open(FIXTURES / "fp32_tensor_mix").index.set_index("name")
    # input of a backward entry = the incoming gradient, shaped like the forward output
    assert (
        idx.loc["Functional.linear.4.backward.input.0", "shape"]
        == idx.loc["Functional.linear.4.forward.output.0", "shape"]
    )
    # its outputs = gradients w.r.t. the forward inputs (bias, input, weight; the weight's comes transposed)
    grads = idx[(idx["op"] == "Functional.linear.4.backward") & (idx["role"] == "output")]
    forward_inputs = idx[(idx["op"] == "Functional.linear.4.forward") & (idx["role"] == "input")]
    assert sorted(grads["numel"]) == sorted(forward_inputs["numel"])


def test_hierarchy_comes_from_construct_json_and_stacks_load_lazily():
    dump = nbprec.open(FIXTURES / "bf16_tensor_mix")
    construct = json.loads((FIXTURES / "bf16_tensor_mix/step0/rank0/construct.json").read_text())
    assert dump.hierarchy == construct
    assert callable(dump._stacks)  # nothing read yet
    stacks = dump.stacks
    assert any("model.py" in line for line in stacks["Functional.embedding.0.forward"])
    assert stacks["Functional.linear.3.forward"] == stacks["Functional.linear.0.forward"]  # shared stack id


def test_parse_op_key_rejects_foreign_names():
    assert parse_op_key("something") is None
    assert parse_op_key("Tensor.__add__.3.backward").op_type == "__add__"


# -- the paths a user may pass ---------------------------------------------------------------------
@pytest.mark.parametrize("sub", ["", "step0", "step0/rank0", "step0/rank0/dump.json"])
def test_open_auto_detects_every_entry_point(sub):
    path = FIXTURES / "bf16_tensor_mix" / sub
    assert nbprec.guess_format(path) == "msprobe"
    dump = nbprec.open(path)
    assert len(dump) == 279 and set(dump.index["run"]) == {"bf16_tensor_mix"}


@pytest.mark.parametrize("sub", ["", "step0", "step0/proc4321", "step0/proc4321/dump.json"])
def test_msprobes_process_folders_are_read_as_the_steps_rank(tmp_path, sub):
    """msprobe names a process's folder ``proc{pid}`` when it knows no rank (one device, no torch.distributed):
    every entry point reads it, as rank 0 of its step."""
    shutil.copytree(FIXTURES / "bf16_tensor_mix/step0/rank0", tmp_path / "run/step0/proc4321")
    path = tmp_path / "run" / sub
    assert nbprec.guess_format(path) == "msprobe"
    dump = nbprec.open(path)
    assert len(dump) == 279 and set(dump.index["run"]) == {"run"}
    assert dump.steps == [0] and dump.ranks == [0] and not dump.problem_list
    assert (
        dump.tensor("Functional.linear.0.forward.output.0").shape
        == nbprec.open(FIXTURES / "bf16_tensor_mix").tensor("Functional.linear.0.forward.output.0").shape
    )


def test_several_process_folders_are_ranks_in_process_id_order_and_said_so(tmp_path):
    for pid in (1000, 900):  # (1000 sorts first as text)
        shutil.copytree(FIXTURES / "fp32_md5_L1/step0/rank0", tmp_path / "run/step0" / f"proc{pid}")
    dump = nbprec.open(tmp_path / "run")
    assert dump.ranks == [0, 1] and len(dump) == 2 * 142
    assert [Path(f).parent.name for f in dump.meta["dump_files"]] == ["proc900", "proc1000"]
    (problem,) = dump.problem_list
    assert "2 proc<pid> folders" in problem.problem and "process-id order" in problem.problem
    assert Path(problem.file) == tmp_path / "run/step0"


def test_a_process_folder_beside_rank_folders_is_skipped_and_said_so(tmp_path):
    shutil.copytree(FIXTURES / "fp32_md5_L1/step0/rank0", tmp_path / "run/step0/rank0")
    shutil.copytree(FIXTURES / "fp32_md5_L1/step0/rank0", tmp_path / "run/step0/proc77")
    dump = nbprec.open(tmp_path / "run")
    assert dump.ranks == [0] and len(dump) == 142
    (problem,) = dump.problem_list
    assert Path(problem.file) == tmp_path / "run/step0/proc77" and "skipped" in problem.problem


def test_run_option_names_the_run():
    dump = nbprec.open(FIXTURES / "fp32_md5_L1", format="msprobe", run="benchmark")
    assert set(dump.index["run"]) == {"benchmark"}
    with pytest.raises(TypeError, match="unknown option"):
        nbprec.open(FIXTURES / "fp32_md5_L1", format="msprobe", bogus=1)


def test_guess_can_open_says_no_to_foreign_input(tmp_path):
    (tmp_path / "dump.json").write_text('{"not": "msprobe"}')
    (tmp_path / "notes.txt").write_text("hello")
    assert not MsprobeDumpReader.guess_can_open(tmp_path)
    assert not MsprobeDumpReader.guess_can_open(tmp_path / "notes.txt")
    assert not MsprobeDumpReader.guess_can_open(tmp_path / "missing")


# -- bad input: clear errors or problem rows -----------------------------------------------------------
@pytest.fixture
def run_copy(tmp_path) -> Path:
    """A private copy of a small real dump (fp32_tensor_mix) that a test may damage."""
    target = tmp_path / "run"
    shutil.copytree(FIXTURES / "fp32_tensor_mix", target)
    return target


def dump_json(run: Path) -> Path:
    return run / "step0" / "rank0" / "dump.json"


@pytest.mark.parametrize("fraction", [0.5, 0.9, 0.999])
def test_truncated_dump_json_is_a_format_error_naming_file_and_position(run_copy, fraction):
    raw = dump_json(run_copy).read_bytes()
    dump_json(run_copy).write_bytes(raw[: int(len(raw) * fraction)])
    with pytest.raises(DumpFormatError, match=r"dump\.json.*line \d+, column \d+.*truncated") as info:
        nbprec.open(run_copy, format="msprobe")
    assert info.value.path == str(dump_json(run_copy))


def test_corrupt_json_is_a_format_error(run_copy):
    raw = dump_json(run_copy).read_text()
    dump_json(run_copy).write_text(raw.replace('"shape":', '"shape" =', 1))
    with pytest.raises(DumpFormatError, match=r"invalid JSON at line \d+") as info:
        nbprec.open(run_copy, format="msprobe")
    assert "truncated" not in str(info.value)


@pytest.mark.parametrize("content", ["[1, 2]", '{"task": "tensor"}', "", "\xff\xfe"])
def test_dump_json_of_the_wrong_shape_is_a_format_error(run_copy, content):
    dump_json(run_copy).write_bytes(content.encode("latin-1"))
    with pytest.raises(DumpFormatError, match=r"dump\.json"):
        nbprec.open(run_copy, format="msprobe")


def test_bare_nan_and_infinity_are_read(run_copy):
    data = json.loads(dump_json(run_copy).read_text())
    entry = data["data"]["Functional.linear.0.forward"]["output"][0]
    entry.update(Max=float("inf"), Min=float("-inf"), Mean=float("nan"))
    dump_json(run_copy).write_text(json.dumps(data))  # json writes bare Infinity / -Infinity / NaN
    assert "Infinity" in dump_json(run_copy).read_text()
    row = nbprec.open(run_copy).row("Functional.linear.0.forward.output.0")
    assert row["max"] == np.inf and row["min"] == -np.inf and np.isnan(row["mean"]) and row["abs_max"] == np.inf


def test_empty_folder_is_an_empty_dump_error(tmp_path):
    with pytest.raises(EmptyDumpError, match="empty"):
        nbprec.open(tmp_path)
    (tmp_path / "step0").mkdir()
    (tmp_path / "step0" / "x.txt").write_text("")
    with pytest.raises(DumpFormatError, match=r"no msprobe dump\.json"):
        MsprobeDumpReader().open(tmp_path)


def test_dump_json_without_tensors_is_an_empty_dump_error(run_copy):
    dump_json(run_copy).write_text('{"task": "tensor", "data": {}}')
    with pytest.raises(EmptyDumpError, match="no tensors"):
        nbprec.open(run_copy)


def test_missing_pt_file_is_a_problem_row_not_a_crash(run_copy):
    victim = run_copy / "step0/rank0/dump_tensor_data/Functional.linear.0.forward.output.0.pt"
    victim.unlink()
    dump = nbprec.open(run_copy)
    row = dump.row("Functional.linear.0.forward.output.0")
    assert not row["has_data"] and len(dump) == 279
    assert list(dump.problems["record"]) == ["Functional.linear.0.forward.output.0"]
    assert "missing" in dump.problems["problem"][0]
    with pytest.raises(TensorDataUnavailableError):
        dump.tensor(row.name)


def test_missing_tensor_folder_is_one_problem(run_copy):
    shutil.rmtree(run_copy / "step0/rank0/dump_tensor_data")
    dump = nbprec.open(run_copy)
    assert not dump.index["has_data"].any()
    assert len(dump.problems) == 1 and "279 payloads" in dump.problems["problem"][0]


def test_corrupt_pt_file_is_a_format_error_at_tensor_time(run_copy):
    pytest.importorskip("torch")
    victim = run_copy / "step0/rank0/dump_tensor_data/Functional.linear.0.forward.output.0.pt"
    victim.write_bytes(victim.read_bytes()[:40])
    dump = nbprec.open(run_copy)  # the index does not read payloads
    with pytest.raises(DumpFormatError, match=r"Functional\.linear\.0\.forward\.output\.0\.pt.*cannot load") as info:
        dump.tensor("Functional.linear.0.forward.output.0")
    assert info.value.record == "Functional.linear.0.forward.output.0"


def test_a_payload_that_is_not_the_tensor_dump_json_describes_is_a_format_error(run_copy):
    torch = pytest.importorskip("torch")
    folder = run_copy / "step0/rank0/dump_tensor_data"
    name = "Functional.linear.0.forward.output.0"
    recorded = nbprec.open(run_copy).row(name)
    torch.save(torch.zeros(3, 7, dtype=torch.float32), folder / f"{name}.pt")  # another shape
    with pytest.raises(DumpFormatError, match=r"payload has shape \[3, 7\], dump\.json says") as info:
        nbprec.open(run_copy).tensor(name)
    assert info.value.record == name and info.value.path.endswith(f"{name}.pt")
    torch.save(torch.zeros(recorded["shape"], dtype=torch.float16), folder / f"{name}.pt")  # another dtype
    with pytest.raises(DumpFormatError, match=r"payload is float16, dump\.json says float32"):
        nbprec.open(run_copy).tensor(name)
    comp = nbprec.compare(run_copy, FIXTURES / "fp32_tensor_mix")  # a row with the reason, not a crash
    row = comp.table.set_index("target_name").loc[name]
    assert row["compare_mode"] == "none" and "payload is float16" in row["reason"]


def test_pt_file_holding_a_non_tensor_is_a_format_error(run_copy):
    torch = pytest.importorskip("torch")
    victim = run_copy / "step0/rank0/dump_tensor_data/Functional.linear.0.forward.output.0.pt"
    torch.save({"not": "a tensor"}, victim)
    with pytest.raises(DumpFormatError, match="expected a tensor"):
        nbprec.open(run_copy).tensor("Functional.linear.0.forward.output.0")


def test_plain_pt_files_load_without_torch_and_others_give_the_install_hint(run_copy, monkeypatch):
    torch = pytest.importorskip("torch")
    dump = nbprec.open(run_copy)
    name = "Functional.linear.0.forward.output.0"
    expected = dump.tensor(name)
    legacy = Path(dump.row("Functional.linear.1.forward.output.0")["file"])
    torch.save(torch.load(legacy, weights_only=True), legacy, _use_new_zipfile_serialization=False)
    monkeypatch.setitem(sys.modules, "torch", None)  # makes "import torch" fail
    np.testing.assert_array_equal(dump.tensor(name).view(np.uint16), expected.view(np.uint16))
    with pytest.raises(MissingDependencyError, match=r'pip install "nbprec\[torch\]"'):
        dump.tensor("Functional.linear.1.forward.output.0")  # a legacy (non-zip) file needs torch.load


def test_unknown_dtype_and_shape_are_problems(run_copy):
    data = json.loads(dump_json(run_copy).read_text())
    out = data["data"]["Functional.linear.0.forward"]["output"][0]
    out["dtype"] = "torch.float7_e3m3"
    data["data"]["Functional.linear.1.forward"]["output"][0]["shape"] = "two by three"
    dump_json(run_copy).write_text(json.dumps(data))
    dump = nbprec.open(run_copy)
    assert dump.row("Functional.linear.0.forward.output.0")["dtype"] == "float7_e3m3"
    bad_shape = dump.row("Functional.linear.1.forward.output.0")
    assert bad_shape["shape"] == () and bad_shape["numel"] == -1
    problems = dict(zip(dump.problems["record"], dump.problems["problem"], strict=True))
    assert "unknown dtype" in problems["Functional.linear.0.forward.output.0"]
    assert "shape" in problems["Functional.linear.1.forward.output.0"]


def test_foreign_op_names_sections_and_entries_are_problems(run_copy):
    data = json.loads(dump_json(run_copy).read_text())
    data["data"]["weird op"] = {"output": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [1]}]}
    data["data"]["Functional.linear.0.forward"]["extras"] = []
    data["data"]["Functional.bad.0.forward"] = 42
    dump_json(run_copy).write_text(json.dumps(data))
    dump = nbprec.open(run_copy)
    assert dump.row("weird op.output.0")["api"] == "weird op"
    assert set(dump.problems["record"]) == {"weird op", "Functional.linear.0.forward", "Functional.bad.0.forward"}


def test_data_name_over_255_characters_is_a_problem(run_copy):
    data = json.loads(dump_json(run_copy).read_text())
    data["data"]["Functional.linear.0.forward"]["output"][0]["data_name"] = "x" * 300 + ".pt"
    dump_json(run_copy).write_text(json.dumps(data))
    dump = nbprec.open(run_copy)
    row = dump.row("x" * 300)
    assert not row["has_data"] and row["file"] == ""
    assert "255" in dump.problems["problem"][0]


def test_symlink_loop_is_a_clear_error(tmp_path):
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    with pytest.raises(DumpFormatError, match="symlink"):
        nbprec.open(tmp_path / "a")
    with pytest.raises(DumpFormatError, match="symlink"):
        MsprobeDumpReader().open(tmp_path / "a")


def test_symlink_loop_inside_a_run_is_a_problem(run_copy):
    os.symlink(run_copy / "step8", run_copy / "step9")
    os.symlink(run_copy / "step9", run_copy / "step8")
    dump = nbprec.open(run_copy)
    assert len(dump) == 279
    assert {Path(f).name for f in dump.problems["file"]} == {"step8", "step9"}
    assert dump.problems["problem"].str.contains("symlink loop").all()


def test_missing_construct_and_stack_files_are_fine(run_copy):
    (run_copy / "step0/rank0/construct.json").unlink()
    (run_copy / "step0/rank0/stack.json").unlink()
    dump = nbprec.open(run_copy)
    assert len(dump.problems) == 0 and dump.hierarchy == {} and dump.stacks == {}
    assert dump.row("Functional.linear.0.forward.output.0")["module"] == ""
    assert dump.row("Module.head.Linear.forward.0.output.0")["module"] == "head"


def test_corrupt_construct_is_a_problem_and_corrupt_stack_an_error_when_used(run_copy):
    (run_copy / "step0/rank0/construct.json").write_text("{")
    (run_copy / "step0/rank0/stack.json").write_text("[")
    dump = nbprec.open(run_copy)
    assert "construct.json" in dump.problems["file"][0]
    with pytest.raises(DumpFormatError, match=r"stack\.json"):
        dump.stacks  # noqa: B018


def test_construct_is_read_whole_or_member_by_member_alike(run_copy, monkeypatch):
    """A small construct.json is parsed whole (the json module), a large one member by member: the same hierarchy
    and problems either way, on the real file and on damaged ones (whatever the whole parse refuses goes the
    member-by-member way, which words the problems)."""
    from nbprec.formats import msprobe_index

    construct = run_copy / "step0/rank0/construct.json"
    text = construct.read_bytes()
    streamed: list = []  # the real file is parsed whole: the member-by-member reader is not opened on it
    monkeypatch.setattr(msprobe_index, "JsonObjectStream", lambda path: streamed.append(path))
    assert msprobe_index._read_object(construct) == json.loads(text) and streamed == []
    monkeypatch.undo()
    key = text.index(b'"', 2)  # inside the first key
    variants = {
        "real": text,
        "truncated": text[:-40],
        "bad byte in a key": text[:key] + b"\xff" + text[key:],
        "bad first byte": b"\xff" + text,
        "byte order mark": b"\xef\xbb\xbf" + text,
        "not an object": b"[1, 2]",
        "NaN value": b'{"Functional.linear.0.forward": NaN}',
        "trailing data": text + b" {}",
    }
    for name, content in variants.items():
        construct.write_bytes(content)
        seen = []
        for whole_below in (msprobe_index._WHOLE_BELOW, 16):  # the default, then every file member by member
            monkeypatch.setattr(msprobe_index, "_WHOLE_BELOW", whole_below)
            dump = nbprec.open(run_copy)
            seen.append((dump.hierarchy, dump.problems["problem"].tolist()))
        assert seen[0] == seen[1], name
        if name == "real":
            assert len(seen[0][0]) > 50 and not seen[0][1]
        if name in ("truncated", "not an object"):
            assert "construct.json ignored" in seen[0][1][0]


def test_several_steps_and_ranks_are_read_into_one_index(tmp_path):
    for step, rank in [(0, 0), (0, 1), (3, 0)]:
        shutil.copytree(FIXTURES / "fp32_md5_L1/step0/rank0", tmp_path / "run" / f"step{step}" / f"rank{rank}")
    dump = nbprec.open(tmp_path / "run")
    assert dump.steps == [0, 3] and dump.ranks == [0, 1] and len(dump) == 3 * 142
    assert len(dump.select(step=0, rank=1)) == 142
    assert len(dump.meta["dump_files"]) == 3


# -- the shared torch -> numpy conversion ------------------------------------------------------------
@pytest.mark.parametrize(
    ("torch_dtype", "np_dtype", "int_view"),
    [
        ("bfloat16", ml_dtypes.bfloat16, "int16"),
        ("float16", np.float16, "int16"),
        ("float8_e4m3fn", ml_dtypes.float8_e4m3fn, "uint8"),
        ("float8_e5m2", ml_dtypes.float8_e5m2, "uint8"),
        ("float32", np.float32, "int32"),
    ],
)
def test_torch_to_numpy_keeps_dtype_and_bits(torch_dtype, np_dtype, int_view):
    torch = pytest.importorskip("torch")
    from nbprec.formats._torch import torch_to_numpy

    dtype = getattr(torch, torch_dtype)
    t = (torch.randn(4, 6) * 3).to(dtype)
    t[0, 0] = float("nan")
    for tensor in (t, t.t(), t[1], t[2, 3]):  # contiguous, transposed, a row, a 0-d element
        got = torch_to_numpy(tensor)
        assert got.dtype == np_dtype and got.shape == tuple(tensor.shape)
        expected = tensor.contiguous().view(getattr(torch, int_view)).numpy()
        np.testing.assert_array_equal(got.view(int_view), expected)


def test_torch_to_numpy_handles_grad_and_refuses_what_numpy_lacks():
    torch = pytest.importorskip("torch")
    from nbprec.errors import NbprecError
    from nbprec.formats._torch import torch_to_numpy

    param = torch.nn.Parameter(torch.ones(3))
    assert torch_to_numpy(param).tolist() == [1.0, 1.0, 1.0]
    assert torch_to_numpy(torch.tensor([1 + 2j]).conj()).tolist() == [1 - 2j]
    with pytest.warns(UserWarning, match="ComplexHalf"):  # torch's own note on complex32
        half_complex = torch.zeros(2, dtype=torch.complex32)
    with pytest.raises(NbprecError, match="no numpy equivalent"):
        torch_to_numpy(half_complex)
    with pytest.raises(NbprecError, match=r"expected a torch\.Tensor"):
        torch_to_numpy([1, 2])


def test_payloads_read_in_one_step_or_the_checked_way_give_the_same_tensors_and_errors(run_copy, tmp_path):
    """Small payloads are read in one open (``read_small_pt``); any payload that path leaves (a symbolic link, a
    swapped file of another dtype or shape) goes the checked way, with its messages: a link inside the dump is
    followed, one leading out is refused, a swapped file is named as belonging to another tensor."""
    import importlib

    msprobe = importlib.import_module("nbprec.formats.msprobe")
    dump = nbprec.open(run_copy)
    positions = [i for i in range(len(dump)) if dump.columns["has_data"][i]]
    fast = [dump.tensor(i) for i in positions]
    original = msprobe.read_small_pt
    msprobe.read_small_pt = lambda *args: None  # the checked way only
    try:
        checked = [nbprec.open(run_copy).tensor(i) for i in positions]
    finally:
        msprobe.read_small_pt = original
    for a, b in zip(fast, checked, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    files = [Path(dump.columns["file"][i]) for i in positions]
    shapes = [tuple(dump.columns["shape"][i]) for i in positions]
    other = next(j for j in range(1, len(files)) if shapes[j] != shapes[0])
    inside_link = files[0].with_name("elsewhere.pt")
    files[0].rename(inside_link)
    os.symlink(inside_link, files[0])  # a link to a file inside the dump: followed
    assert nbprec.open(run_copy).tensor(positions[0]).tobytes() == fast[0].tobytes()
    outside = tmp_path / "outside.pt"
    shutil.copy(inside_link, outside)
    files[0].unlink()
    os.symlink(outside, files[0])  # a link out of the dump: refused (when the dump is opened, or read)
    with pytest.raises(NbprecError, match="lies outside the dump"):
        nbprec.open(run_copy).tensor(positions[0])
    files[0].unlink()
    shutil.copy(files[other], files[0])  # another tensor's file under this name
    with pytest.raises(DumpFormatError, match=r"dump\.json says"):
        nbprec.open(run_copy).tensor(positions[0])
