"""TensorFlow benchmark .npy dumps, built from the real activations of a small numpy MLP."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import nbprec
from nbprec.errors import DumpFormatError, EmptyDumpError
from nbprec.formats import guess_format
from nbprec.formats.tf_npy import TfNpyDumpReader, parse_file_name, read_npy_header

T0 = 1675157077176648  # microseconds


def _mlp_steps(steps: int) -> list[dict[str, np.ndarray]]:
    """Outputs of each op of a 2-layer MLP (MatMul, BiasAdd, Relu, MatMul, Softmax) for several steps."""
    rng = np.random.default_rng(0)
    w1, b1, w2 = rng.standard_normal((16, 32)), rng.standard_normal(32), rng.standard_normal((32, 4))
    out = []
    for _ in range(steps):
        x = rng.standard_normal((8, 16)).astype(np.float32)
        mm = (x @ w1).astype(np.float32)
        add = mm + b1.astype(np.float32)
        relu = np.maximum(add, 0)
        logits = (relu @ w2).astype(np.float32)
        soft = np.exp(logits - logits.max(1, keepdims=True))
        out.append(
            {
                "dense_MatMul": mm,
                "dense_BiasAdd": add,
                "dense_Relu": relu,
                "logits_MatMul": logits,
                "Softmax": (soft / soft.sum(1, keepdims=True)).astype(np.float16),
                "ArgMax": np.argmax(logits, 1).astype(np.int64),
            }
        )
    return out


def _write(folder: Path, steps: int = 1) -> list[dict[str, np.ndarray]]:
    folder.mkdir(exist_ok=True)
    runs = _mlp_steps(steps)
    ts = T0
    for step in runs:
        for name, array in step.items():
            np.save(folder / f"{name}.0.{ts}.npy", array)
            ts += 37
    return runs


def test_open_single_step(tmp_path: Path) -> None:
    (runs,) = _write(tmp_path / "tf")
    assert guess_format(tmp_path / "tf") == "tf_npy"
    dump = nbprec.open(tmp_path / "tf")
    assert dump.format == "tf_npy" and dump.problems.empty
    assert list(dump.index["op"]) == list(runs)  # execution order = timestamp order
    assert set(dump.index["role"]) == {"output"} and set(dump.index["slot"]) == {"0"}
    assert set(dump.index["op_type"]) == {""} and list(dump.index["order"]) == list(range(len(runs)))
    for name, array in runs.items():
        row = dump.row(f"{name}.0")
        assert row["shape"] == array.shape and row["dtype"] == nbprec.dtypes.canonical_dtype(array.dtype)
        loaded = dump.tensor(row)
        assert loaded.dtype == array.dtype and not loaded.flags.writeable  # read at its offset, read-only
        np.testing.assert_array_equal(loaded, array)


@pytest.mark.parametrize(("occurrence", "step_of_data", "steps"), [("last", 2, [-1]), ("first", 0, [-1]), (1, 1, [1])])
def test_occurrence_choice(tmp_path: Path, occurrence: object, step_of_data: int, steps: list[int]) -> None:
    runs = _write(tmp_path / "tf", steps=3)
    dump = nbprec.open(tmp_path / "tf", occurrence=occurrence)
    assert len(dump) == 6 and dump.steps == steps
    np.testing.assert_array_equal(dump.tensor("dense_Relu.0"), runs[step_of_data]["dense_Relu"])


def test_occurrence_all_gives_one_step_per_timestamp(tmp_path: Path) -> None:
    runs = _write(tmp_path / "tf", steps=3)
    dump = nbprec.open(tmp_path / "tf", occurrence="all")
    assert dump.steps == [0, 1, 2] and len(dump) == 18
    for step in range(3):
        part = dump.select(step=step)
        assert list(part.index["op"]) == list(runs[step]) and list(part.index["order"]) == list(range(6))
        np.testing.assert_array_equal(part.tensor("logits_MatMul.0"), runs[step]["logits_MatMul"])


def test_occurrence_out_of_range_is_a_problem(tmp_path: Path) -> None:
    _write(tmp_path / "tf", steps=2)
    np.save(tmp_path / "tf" / f"Extra.0.{T0 + 10_000}.npy", np.ones(3))
    dump = nbprec.open(tmp_path / "tf", occurrence=1)
    assert len(dump) == 6 and dump.problems["problem"].str.contains("only 1 occurrences").any()
    with pytest.raises(ValueError, match="occurrence"):
        nbprec.open(tmp_path / "tf", occurrence="middle")


def test_bad_files_become_problems(tmp_path: Path) -> None:
    _write(tmp_path / "tf")
    folder = tmp_path / "tf"
    good = np.arange(6, dtype=np.float32)
    np.save(folder / f"truncated.0.{T0}.npy", good)
    data = (folder / f"truncated.0.{T0}.npy").read_bytes()
    (folder / f"truncated.0.{T0}.npy").write_bytes(data[:-5])
    (folder / f"short_header.0.{T0}.npy").write_bytes(data[:30])
    (folder / f"wrong_magic.0.{T0}.npy").write_bytes(b"PK\x03\x04" + data[4:])
    (folder / f"bad_dict.0.{T0}.npy").write_bytes(data[:10] + b"{'descr': 'nonsense'" + data[30:])
    np.save(folder / "scope:MatMul.0.123.npy", good)  # ':' breaks the rule
    np.save(folder / "MatMul.x.123.npy", good)  # output index not digits
    (folder / "notes.txt").write_text("not a tensor")
    (folder / "sub").mkdir()
    dump = nbprec.open(folder)
    assert len(dump) == 6
    problems = dict(zip(dump.problems["file"].map(lambda f: Path(f).name), dump.problems["problem"], strict=True))
    assert "truncated payload" in problems[f"truncated.0.{T0}.npy"]
    assert "truncated header" in problems[f"short_header.0.{T0}.npy"]
    assert "wrong magic" in problems[f"wrong_magic.0.{T0}.npy"]
    assert "unreadable header" in problems[f"bad_dict.0.{T0}.npy"]
    assert "naming rule" in problems["scope:MatMul.0.123.npy"] and "naming rule" in problems["MatMul.x.123.npy"]
    assert "naming rule" in problems["notes.txt"] and "subfolder" in problems["sub"]


def test_name_rules() -> None:
    assert parse_file_name("a-b_C9.12.1.npy") == ("a-b_C9", 12, 1)
    assert "longer than 255" in parse_file_name("x" * 250 + ".0.1.npy")
    assert "longer than 255" in parse_file_name(f"op.0.{'1' * 256}.npy")  # a timestamp over 255 digits too
    assert parse_file_name(f"op.0.{'1' * 200}.npy") == ("op", 0, int("1" * 200))
    assert "naming rule" in parse_file_name("op.0.npy") and "naming rule" in parse_file_name("op.0.12.npz")


def test_object_array_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "tf")
    np.save(tmp_path / "tf" / f"Pickled.0.{T0 + 999}.npy", np.array([{"x": 1}, None], dtype=object), allow_pickle=True)
    dump = nbprec.open(tmp_path / "tf")
    assert dump.row("Pickled.0")["dtype"] == "object"
    assert dump.problems["problem"].str.contains("object array").any()
    with pytest.raises(DumpFormatError, match="never unpickles"):
        dump.tensor("Pickled.0")


def test_header_reader_matches_numpy(tmp_path: Path) -> None:
    arrays = [np.zeros(()), np.zeros((0, 3), np.int8), np.ones((2, 3), order="F"), np.arange(5, dtype=">i4")]
    for i, array in enumerate(arrays):
        np.save(tmp_path / f"{i}.npy", array)
        dtype, shape, fortran = read_npy_header(str(tmp_path / f"{i}.npy"))
        assert (dtype, shape, fortran) == (array.dtype, array.shape, bool(np.isfortran(array)))


def test_empty_and_foreign_folders(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(EmptyDumpError):
        nbprec.open(tmp_path / "empty", format="tf_npy")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "readme.txt").write_text("hi")
    (tmp_path / "bad" / f"broken.0.{T0}.npy").write_bytes(b"garbage")
    assert not TfNpyDumpReader.guess_can_open(tmp_path / "bad" / "readme.txt")
    with pytest.raises(EmptyDumpError, match=r"no valid TensorFlow .*; the first, .*broken\.0\.\d+\.npy: "):
        nbprec.open(tmp_path / "bad", format="tf_npy")  # (which file, and why: not a count alone)


def test_large_payloads_are_memory_mapped_and_odd_layouts_still_load(tmp_path: Path) -> None:
    import mmap

    folder = tmp_path / "tf"
    folder.mkdir()
    big = np.arange(1 << 19, dtype=np.float32).reshape(512, 1024)  # 2 MiB: mapped, not read
    np.save(folder / f"big.0.{T0}.npy", big)
    np.save(folder / f"fortran.0.{T0 + 1}.npy", np.asfortranarray(big[:4, :6]))
    np.save(folder / f"swapped.0.{T0 + 2}.npy", big[:3, :3].astype(">f4"))
    dump = nbprec.open(folder)
    loaded = dump.tensor("big.0")
    base = loaded
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base.obj if isinstance(base, memoryview) else base, mmap.mmap)
    np.testing.assert_array_equal(loaded, big)
    offsets = dict(zip(dump.index["name"], dump.index["offset"], strict=True))
    assert offsets["big.0"] > 0 and offsets["fortran.0"] == -1 and offsets["swapped.0"] == -1  # np.load decides
    np.testing.assert_array_equal(dump.tensor("fortran.0"), big[:4, :6])
    np.testing.assert_array_equal(dump.tensor("swapped.0"), big[:3, :3])
