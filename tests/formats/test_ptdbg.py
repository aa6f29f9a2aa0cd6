"""The ptdbg_ascend reader on dumps written in the tests from real arrays, following ptdbg's rules.

ptdbg's writer (Ascend/att, ptdbg_ascend/dump/dump.py) appends one JSON array per line to ``dump.pkl`` and
saves ``{name}.npy`` in the folder named like the .pkl; bfloat16 tensors are saved upcast to float32,
scalars with dtype ``<class 'float'>`` and shape ``"[]"``. :class:`PtdbgWriter` below does the same.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import nbprec
from nbprec.errors import DumpFormatError, EmptyDumpError, TensorDataUnavailableError
from nbprec.formats.ptdbg import PtdbgDumpReader, parse_tensor_name


class PtdbgWriter:
    """Writes a ptdbg-style ``{stem}.pkl`` and its ``.npy`` folder (``{stem}`` unless ``folder`` is given)."""

    def __init__(self, where: Path, stem: str = "dump", folder: str | None = None) -> None:
        where.mkdir(parents=True, exist_ok=True)
        self.pkl = where / f"{stem}.pkl"
        self.npy_dir = where / (folder or stem)
        self.npy_dir.mkdir(exist_ok=True)
        self.lines: list[str] = []
        self.arrays: dict[str, np.ndarray] = {}

    def tensor(self, name: str, array: np.ndarray, *, step: int = 1, overflow: bool = False, dtype: str = "") -> None:
        array = np.asarray(array)
        label = dtype or ("torch.bfloat16" if array.dtype == ml_dtypes.bfloat16 else f"torch.{array.dtype.name}")
        saved = array.astype(np.float32) if array.dtype == ml_dtypes.bfloat16 else array
        np.save(self.npy_dir / f"{name}.npy", saved)
        self.arrays[name] = array
        if array.size == 0 or array.dtype == bool:
            summary = [[], [], []]
        else:
            f = array.astype(np.float64)
            summary = [float(f.max()), float(f.min()), float(f.mean())]
        if overflow:
            self.lines.append(json.dumps([name, 101, [], label, list(array.shape)]))
        else:
            self.lines.append(json.dumps([name, step, [], label, list(array.shape), summary]))

    def scalar(self, name: str, value: float) -> None:
        np.save(self.npy_dir / f"{name}.npy", value)
        self.lines.append(json.dumps([name, 1, [], str(type(value)), "[]", [value, value, value]]))

    def stack(self, op: str, frames: list[list[str]]) -> None:
        self.lines.append(json.dumps([f"{op}_stack_info", frames]))

    def raw(self, line: str) -> None:
        self.lines.append(line)

    def close(self) -> Path:
        self.pkl.write_text("\n".join(self.lines) + "\n")
        return self.pkl


def small_numpy_dump(where: Path, **kwargs) -> PtdbgWriter:
    """A dump of a linear + relu forward and backward computed with numpy, plus scalars and stacks."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    y = x @ w.T + b
    z = np.maximum(y, 0)
    gz = np.ones_like(z)
    gy = gz * (y > 0)
    out = PtdbgWriter(where, **kwargs)
    out.stack("Functional_linear_0_forward", [["/home/u/train.py", "12", "forward", "y = F.linear(x, w, b)"]])
    for i, t in enumerate((x, w, b)):
        out.tensor(f"Functional_linear_0_forward_input.{i}", t)
    out.tensor("Functional_linear_0_forward_output.0", y)
    out.tensor("Torch_relu_0_forward_input.0", y)
    out.tensor("Torch_relu_0_forward_output.0", z)
    out.scalar("Functional_dropout_0_forward_input.1", 0.1)
    out.tensor("Torch_relu_0_backward_input.0", gz)  # incoming gradient: ptdbg labels it input
    out.tensor("Torch_relu_0_backward_output.0", gy)  # gradient w.r.t. the forward input: output
    out.tensor("Functional_linear_0_backward_input.0", gy)
    for i, g in enumerate((gy @ w, gy.T @ x, gy.sum(0))):
        out.tensor(f"Functional_linear_0_backward_output.{i}", g)
    out.tensor("Tensor___gt___0_forward_output.0", y > 0)
    out.tensor("Torch_argmax_0_forward_output.0", z.argmax(1))
    out.close()
    return out


def assert_same_bits(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype and got.shape == expected.shape
    a, b = np.ascontiguousarray(got), np.ascontiguousarray(expected)
    np.testing.assert_array_equal(a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}"))


# -- reading ---------------------------------------------------------------------------------------
def test_reads_every_record_with_fields_statistics_and_payloads(tmp_path):
    root = tmp_path / "ptdbg_dump_v4.0"
    out = small_numpy_dump(root / "step0" / "rank0")
    dump = nbprec.open(root)
    assert dump.format == "ptdbg" and set(dump.index["run"]) == {"ptdbg_dump_v4.0"}
    assert list(dump.index["name"]) == list(out.arrays)
    assert dump.steps == [0] and dump.ranks == [0] and len(dump.problems) == 0
    assert dump.meta["non_tensor_values"] == 1 and dump.meta["overflow_ops"] == [] and dump.meta["pkl_steps"] == [1]
    for name, array in out.arrays.items():
        row = dump.row(name)
        assert row["shape"] == array.shape and row["numel"] == array.size and row["has_data"]
        assert_same_bits(dump.tensor(name), array)
        if array.dtype != bool:
            assert row["max"] == pytest.approx(float(array.max())) and row["min"] == pytest.approx(float(array.min()))
            assert row["abs_max"] == max(abs(row["max"]), abs(row["min"]))
    assert dump.row("Tensor___gt___0_forward_output.0")["dtype"] == "bool"
    assert np.isnan(dump.row("Tensor___gt___0_forward_output.0")["max"])
    assert isinstance(dump.tensor("Functional_linear_0_forward_output.0"), np.memmap)


def test_op_fields_and_backward_roles(tmp_path):
    small_numpy_dump(tmp_path / "rank3")
    idx = nbprec.open(tmp_path).index.set_index("name")
    row = idx.loc["Functional_linear_0_backward_output.1"]
    assert (row.op, row.api, row.op_type, row.call, row.direction, row.role, row.slot) == (
        "Functional_linear_0_backward", "Functional.linear", "linear", 0, "backward", "output", "1"
    )  # fmt: skip
    assert row["rank"] == 3 and row["step"] == -1
    # backward "input" is the incoming gradient (shaped like the forward output) ...
    assert idx.loc["Torch_relu_0_backward_input.0", "role"] == "input"
    assert idx.loc["Torch_relu_0_backward_input.0", "shape"] == idx.loc["Torch_relu_0_forward_output.0", "shape"]
    # ... and "output" the gradients w.r.t. the forward inputs
    grads = idx[(idx["op"] == "Functional_linear_0_backward") & (idx["role"] == "output")]
    inputs = idx[(idx["op"] == "Functional_linear_0_forward") & (idx["role"] == "input")]
    assert list(grads["shape"]) == list(inputs["shape"])
    orders = idx.groupby("op")["order"].first().sort_values()
    assert list(orders.index[:3]) == ["Functional_linear_0_forward", "Torch_relu_0_forward", "Torch_relu_0_backward"]
    assert idx.loc["Tensor___gt___0_forward_output.0", "api"] == "Tensor.__gt__"


def test_stacks_come_from_stack_info_lines(tmp_path):
    small_numpy_dump(tmp_path / "rank0")
    stacks = nbprec.open(tmp_path).stacks
    assert stacks == {
        "Functional_linear_0_forward": ["File /home/u/train.py, line 12, in forward, \n y = F.linear(x, w, b)"]
    }


def test_a_real_torch_model_in_bfloat16_reads_back_bit_exact(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to(torch.bfloat16)
    x = torch.randn(3, 8, dtype=torch.bfloat16, requires_grad=True)
    h = torch.nn.functional.linear(x, model[0].weight, model[0].bias)
    g = torch.nn.functional.gelu(h)
    y = torch.nn.functional.linear(g, model[2].weight, model[2].bias)
    parts = torch.chunk(y, 2, dim=1)
    loss = torch.cat(parts, dim=1).float().pow(2).sum()
    loss.backward()

    def np_of(t):
        return t.detach().view(torch.int16).numpy().view(ml_dtypes.bfloat16)

    out = PtdbgWriter(tmp_path / "ptdbg_dump_v5.0" / "rank0")
    for i, t in enumerate((x, model[0].weight, model[0].bias)):
        out.tensor(f"Functional_linear_0_forward_input.{i}", np_of(t))
    out.tensor("Functional_linear_0_forward_output.0", np_of(h))
    out.tensor("Functional_gelu_0_forward_input.0", np_of(h))
    out.tensor("Functional_gelu_0_forward_output.0", np_of(g))
    out.tensor("Functional_linear_1_forward_output.0", np_of(y))
    out.tensor("Torch_cat_0_forward_input.0.0", np_of(parts[0]))  # a list argument: nested slots
    out.tensor("Torch_cat_0_forward_input.0.1", np_of(parts[1]))
    out.tensor("Functional_linear_0_backward_output.0", np_of(x.grad))
    out.close()
    dump = nbprec.open(tmp_path)
    assert set(dump.index["dtype"]) == {"bfloat16"}
    assert dump.row("Torch_cat_0_forward_input.0.1")["slot"] == "0.1"
    for name, array in out.arrays.items():
        got = dump.tensor(name)
        assert got.dtype == ml_dtypes.bfloat16  # saved as float32 by ptdbg, returned in the dtype on record
        assert_same_bits(got, array)
        row = dump.row(name)
        assert row["max"] == float(array.astype(np.float32).max())


def test_overflow_files_become_rows_listed_in_meta(tmp_path):
    rank = tmp_path / "ptdbg_dump_v4.0" / "rank0"
    out = PtdbgWriter(rank, stem="Overflow_info_20240105_101500_1")
    a = np.array([40000.0, 50000.0, -1.0], dtype=np.float16)
    with np.errstate(over="ignore"):
        doubled = a * np.float16(2)  # a real float16 overflow: 80000 and 100000 are past 65504
    out.tensor("Torch_mul_3_forward_input.0", a, overflow=True)
    out.tensor("Torch_mul_3_forward_output.0", doubled, overflow=True)
    out.stack("Torch_mul_3_forward", [["/t.py", "3", "<module>", "y = x * 2"]])
    out.close()
    second = PtdbgWriter(rank, stem="Overflow_info_20240105_101502_2")
    second.tensor("Functional_softmax_0_backward_input.0", np.array([np.inf, 1.0], dtype=np.float16), overflow=True)
    second.close()
    dump = nbprec.open(tmp_path)
    assert dump.meta["overflow_ops"] == ["Torch_mul_3_forward", "Functional_softmax_0_backward"]
    assert len(dump) == 3 and len(dump.problems) == 0
    out_row = dump.row("Torch_mul_3_forward_output.0")
    assert out_row["role"] == "output" and np.isnan(out_row["max"])  # overflow lines carry no summary
    assert np.isinf(dump.tensor(out_row.name).astype(np.float32)).sum() == 2
    assert dump.row("Functional_softmax_0_backward_input.0")["order"] == 1  # after the first file's op


@pytest.mark.parametrize(
    ("stem", "folder"),
    [("dump", None), ("api_stack_dump", None), ("npu_dump", "npu_dump_20230601120000")],
)
def test_pkl_and_npy_folder_layouts_of_ptdbg_releases(tmp_path, stem, folder):
    out = small_numpy_dump(tmp_path / "run", stem=stem, folder=folder)
    dump = nbprec.open(tmp_path / "run")
    assert dump.index["has_data"].all() and len(dump) == len(out.arrays)
    assert Path(dump.index["file"][0]).parent == out.npy_dir


def test_opening_one_pkl_file_and_several_ranks(tmp_path):
    for rank in (0, 1):
        small_numpy_dump(tmp_path / "ptdbg_dump_v4.0" / f"rank{rank}")
    single = nbprec.open(tmp_path / "ptdbg_dump_v4.0" / "rank1" / "dump.pkl")
    assert single.ranks == [1] and single.index["has_data"].all()
    both = nbprec.open(tmp_path / "ptdbg_dump_v4.0", run="target")
    assert both.ranks == [0, 1] and len(both) == 2 * len(single) and set(both.index["run"]) == {"target"}


def test_module_dump_names(tmp_path):
    out = PtdbgWriter(tmp_path / "rank0")
    out.tensor("MyNet_0_forward_input.0", np.zeros((2, 2), np.float32))
    out.tensor("MyNet_0_backward_output.0", np.ones((2, 2), np.float32))
    out.close()
    row = nbprec.open(tmp_path).row("MyNet_0_forward_input.0")
    assert (row["api"], row["op_type"], row["module"], row["call"]) == ("Module.MyNet", "MyNet", "MyNet", 0)


def test_parse_tensor_name():
    info = parse_tensor_name("NPU_npu_fusion_attention_12_backward_output.3.1")
    assert (info["api"], info["op_type"], info["call"], info["role"], info["slot"]) == (
        "NPU.npu_fusion_attention", "npu_fusion_attention", 12, "output", "3.1"
    )  # fmt: skip
    assert parse_tensor_name("VF_lstm_0_forward_output")["slot"] == "0"
    assert parse_tensor_name("not a ptdbg name") is None
    assert parse_tensor_name("Functional_linear_x_forward_input.0") is None


def test_guess_can_open(tmp_path):
    small_numpy_dump(tmp_path / "ok" / "step0" / "rank0")
    assert PtdbgDumpReader.guess_can_open(tmp_path / "ok")
    assert PtdbgDumpReader.guess_can_open(tmp_path / "ok" / "step0" / "rank0" / "dump.pkl")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "model.pkl").write_bytes(pickle.dumps({"weights": [1, 2]}))
    assert not PtdbgDumpReader.guess_can_open(foreign)
    assert not PtdbgDumpReader.guess_can_open(foreign / "model.pkl")
    assert not PtdbgDumpReader.guess_can_open(tmp_path / "missing")


# -- bad input: clear errors or problem rows -----------------------------------------------------------
def test_lines_that_are_not_json_arrays_are_problems_with_line_numbers(tmp_path):
    out = PtdbgWriter(tmp_path / "rank0")
    out.tensor("Torch_exp_0_forward_input.0", np.ones(3, np.float32))
    out.raw('["Torch_exp_0_forward_output.0", 1, [], "torch.float32", [3], [1.0')  # truncated line
    out.raw('{"name": "Torch_exp_0_forward_output.0"}')
    out.raw("")  # blank lines are fine
    out.raw('["Torch_exp_0_forward_output.0", 1, []]')
    out.tensor("Torch_exp_0_forward_output.0", np.full(3, np.e, np.float32))
    out.close()
    dump = nbprec.open(tmp_path)
    assert list(dump.index["name"]) == ["Torch_exp_0_forward_input.0", "Torch_exp_0_forward_output.0"]
    assert list(dump.problems["record"]) == ["line 2", "line 3", "line 5"]
    assert dump.problems["file"].str.endswith("dump.pkl").all()
    assert "not a JSON array" in dump.problems["problem"][0]


def test_name_over_255_characters_is_a_problem(tmp_path):
    out = PtdbgWriter(tmp_path / "rank0")
    out.tensor("Torch_exp_0_forward_input.0", np.ones(3, np.float32))
    long_name = "Functional_" + "x" * 260 + "_0_forward_output.0"
    out.raw(json.dumps([long_name, 1, [], "torch.float32", [3], [1.0, 1.0, 1.0]]))
    out.close()
    dump = nbprec.open(tmp_path)
    row = dump.row(long_name)
    assert not row["has_data"] and row["max"] == 1.0
    assert "over 251 characters" in dump.problems["problem"][0]
    with pytest.raises(TensorDataUnavailableError):
        dump.tensor(long_name)


def test_missing_npy_is_a_problem(tmp_path):
    out = small_numpy_dump(tmp_path / "rank0")
    (out.npy_dir / "Torch_relu_0_forward_output.0.npy").unlink()
    dump = nbprec.open(tmp_path)
    assert not dump.row("Torch_relu_0_forward_output.0")["has_data"]
    assert list(dump.problems["record"]) == ["line 7"] and "not found" in dump.problems["problem"][0]


def test_corrupt_npy_is_a_format_error_at_tensor_time(tmp_path):
    out = small_numpy_dump(tmp_path / "rank0")
    victim = out.npy_dir / "Torch_relu_0_forward_output.0.npy"
    victim.write_bytes(victim.read_bytes()[:90])
    dump = nbprec.open(tmp_path)
    with pytest.raises(DumpFormatError, match=r"Torch_relu_0_forward_output\.0\.npy.*cannot load"):
        dump.tensor("Torch_relu_0_forward_output.0")


def test_pickled_npy_is_refused_not_unpickled(tmp_path):
    out = small_numpy_dump(tmp_path / "rank0")
    victim = out.npy_dir / "Torch_relu_0_forward_output.0.npy"
    np.save(victim, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DumpFormatError, match="pickle"):
        nbprec.open(tmp_path).tensor("Torch_relu_0_forward_output.0")


def test_unknown_dtype_and_shape_are_problems(tmp_path):
    out = PtdbgWriter(tmp_path / "rank0")
    out.tensor("Torch_exp_0_forward_input.0", np.ones(3, np.float32), dtype="torch.float7")
    out.raw(json.dumps(["Torch_exp_0_forward_output.0", 1, [], "torch.float32", "3", [1, 1, 1]]))
    out.close()
    dump = nbprec.open(tmp_path)
    assert dump.row("Torch_exp_0_forward_input.0")["dtype"] == "float7"
    assert dump.row("Torch_exp_0_forward_output.0")["numel"] == -1
    assert dump.problems["problem"].str.contains("unknown dtype").sum() == 1
    assert dump.problems["problem"].str.contains("shape").sum() == 1


def test_duplicate_names_are_renamed_and_reported(tmp_path):
    out = PtdbgWriter(tmp_path / "rank0")
    out.tensor("Torch_exp_0_forward_input.0", np.ones(3, np.float32))
    out.tensor("Torch_exp_0_forward_input.0", np.ones(3, np.float32))
    out.close()
    dump = nbprec.open(tmp_path)
    assert list(dump.index["name"]) == ["Torch_exp_0_forward_input.0", "Torch_exp_0_forward_input.0#2"]
    assert "duplicate" in dump.problems["problem"][0]


def test_foreign_names_are_kept_with_a_problem(tmp_path):
    out = PtdbgWriter(tmp_path / "rank0")
    out.tensor("Tensor_permute_1_forward", np.ones(3, np.float32))  # an old release's name without _output
    out.close()
    dump = nbprec.open(tmp_path)
    assert dump.row("Tensor_permute_1_forward")["has_data"]
    assert "naming" in dump.problems["problem"][0]


def test_binary_pickle_is_never_unpickled(tmp_path):
    small_numpy_dump(tmp_path / "rank0")
    marker = tmp_path / "unpickled"
    (tmp_path / "rank0" / "evil.pkl").write_bytes(pickle.dumps(Path(marker)))
    dump = PtdbgDumpReader().open(tmp_path)
    assert "binary pickle" in dump.problems["problem"][0] and not marker.exists()


def test_symlink_loops(tmp_path):
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    with pytest.raises(DumpFormatError, match="symlink"):
        nbprec.open(tmp_path / "a")
    with pytest.raises(DumpFormatError, match="symlink"):
        PtdbgDumpReader().open(tmp_path / "a")
    run = tmp_path / "run"
    out = small_numpy_dump(run / "rank0")
    os.symlink(run, run / "rank0" / "back_to_root")  # a cycle through a real folder
    os.symlink(tmp_path / "a", run / "loop")
    dump = nbprec.open(run)
    assert len(dump) == len(out.arrays) == 14
    assert set(dump.problems["problem"].str.split(";").str[0]) == {
        "symlink loop: this folder was already visited",
        "broken symlink or symlink loop",
    }


def test_empty_and_unusable_folders(tmp_path):
    with pytest.raises(EmptyDumpError):
        nbprec.open(tmp_path)
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(DumpFormatError, match=r"no ptdbg \.pkl"):
        PtdbgDumpReader().open(tmp_path)
    (tmp_path / "dump.pkl").write_text("garbage\n")
    with pytest.raises(EmptyDumpError, match="not a JSON array"):
        PtdbgDumpReader().open(tmp_path)
