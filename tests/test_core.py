"""The core package: light import, errors that help, the dump model and the format registry."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import nbprec
from nbprec._optional import require
from nbprec.dtypes import canonical_dtype, dtype_of, numpy_dtype
from nbprec.dump import Dump, Problem
from nbprec.dump_index import INDEX_COLUMNS, index_frame, list_columns, make_index
from nbprec.errors import (
    DumpFormatError,
    EmptyDumpError,
    MissingDependencyError,
    NbprecError,
    TensorDataUnavailableError,
    TensorNotFoundError,
    UnknownFormatError,
)
from nbprec.stats import tensor_stats


def test_core_import_loads_no_widget_or_framework_library():
    code = (
        "import sys, nbprec, nbprec.compare, nbprec.formats, nbprec.tf, nbprec.config\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('ipywidgets', 'bqplot', 'ipycytoscape', 'ipydatagrid', 'torch', 'networkx', 'matplotlib', "
        "'tensorflow', 'keras')]\n"
        "print(','.join(sorted(heavy)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_missing_optional_package_names_the_pip_command():
    with pytest.raises(MissingDependencyError, match=r'pip install "nbprec\[widgets\]"'):
        require("ipywidgets_not_installed_xyz", "the dashboard", extra="widgets")
    with pytest.raises(ImportError):  # also an ImportError, so generic handlers work
        require("torch_not_installed_xyz", "capture", extra="torch")


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("torch.bfloat16", "bfloat16"),
        ("DT_FLOAT16", "float16"),
        ("float", "float32"),
        ("torch.float8_e4m3fn", "float8_e4m3fn"),
        (np.dtype(np.int64), "int64"),
        ("bool", "bool"),
    ],
)
def test_canonical_dtype(spelling, canonical):
    assert canonical_dtype(spelling) == canonical


def test_the_dtype_tables_agree_with_numpy_and_ml_dtypes():
    """The names, sizes and saturation points nbprec.dtypes gives without ml_dtypes are numpy's and ml_dtypes'; a
    dtype of the table, byte-swapped or not, is named by its key."""
    import ml_dtypes

    from nbprec import dtypes

    assert list(dtypes.NUMPY_DTYPES) == list(dtypes.ITEMSIZES) and set(dtypes.ITEMSIZES) == dtypes.DTYPE_NAMES
    for name, dtype in dtypes.NUMPY_DTYPES.items():
        assert dtype.itemsize == dtypes.ITEMSIZES[name] and dtype.name == name and dtype.isnative
        assert canonical_dtype(dtype) == canonical_dtype(dtype.newbyteorder()) == canonical_dtype(dtype.type) == name
    for name, fmax in dtypes.FINITE_MAX.items():
        info = np.finfo if name in ("float16", "float32", "float64") else ml_dtypes.finfo
        assert float(info(dtypes.NUMPY_DTYPES[name]).max) == fmax, name
    assert set(dtypes.EPSILON) == set(dtypes.FINITE_MAX)
    for name, eps in dtypes.EPSILON.items():
        info = np.finfo if name in ("float16", "float32", "float64") else ml_dtypes.finfo
        assert float(info(dtypes.NUMPY_DTYPES[name]).eps) == eps, name
    assert canonical_dtype(np.dtype(np.longdouble)) == np.dtype(np.longdouble).name  # (not one of the table's)


def test_the_dtype_names_load_neither_numpy_nor_ml_dtypes():
    """nbprec.dtypes is read by the command's early worker (no numpy) and by readers of bytes (no ml_dtypes, 5 ms of
    start-up): its tables load nothing; NUMPY_DTYPES loads ml_dtypes when asked for."""
    code = (
        "import sys\n"
        "from nbprec.dtypes import DTYPE_NAMES, FINITE_MAX, ITEMSIZES, canonical_dtype\n"
        "before = [m in sys.modules for m in ('numpy', 'ml_dtypes')]\n"
        "named = canonical_dtype('torch.bfloat16')\n"
        "from nbprec.dtypes import NUMPY_DTYPES\n"
        "print(before, named, 'ml_dtypes' in sys.modules, str(NUMPY_DTYPES['bfloat16']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[False,", "False]", "bfloat16", "True", "bfloat16"]


def test_unknown_dtype_error_names_file_and_record():
    with pytest.raises(NbprecError, match=r"dump\.json: unknown dtype 'complex32' \(record op\.0\)"):
        numpy_dtype("complex32", path="dump.json", record="op.0")


def test_dtype_of_gives_numpys_dtypes_and_loads_ml_dtypes_for_its_own_only():
    code = (
        "import sys\n"
        "from nbprec.dtypes import DTYPE_NAMES, dtype_of\n"
        "plain = [str(dtype_of(n)) for n in ('float16', 'float32', 'int64', 'bool', 'complex64')]\n"
        "print(*plain, 'ml_dtypes' in sys.modules, dtype_of('bfloat16'), 'ml_dtypes' in sys.modules)\n"
        "print(dtype_of('float16') is dtype_of('float16'), all(dtype_of(n).itemsize > 0 for n in DTYPE_NAMES))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [
        "float16",
        "float32",
        "int64",
        "bool",
        "complex64",
        "False",
        "bfloat16",
        "True",
        "True",
        "True",
    ]
    with pytest.raises(NbprecError, match=r"unknown dtype 'torch\.float16'; nbprec knows bfloat16, bool, "):
        dtype_of("torch.float16")  # (canonical names only: the loaders' rows hold them)


def test_tensor_stats_float64_and_nonfinite_counts():
    x = np.array([1.0, -3.0, np.inf, 0.0, np.nan], dtype=np.float16)
    s = tensor_stats(x)
    assert (s["min"], s["max"], s["abs_max"]) == (-3.0, 1.0, 3.0)
    assert (s["nan_count"], s["inf_count"], s["zero_count"]) == (1, 1, 1)
    assert s["mean"] == pytest.approx(-2 / 3)
    assert s["norm"] == pytest.approx(np.sqrt(10))
    empty = tensor_stats(np.zeros((0, 3), np.float32))
    assert empty["min"] is None and empty["nan_count"] == 0


def _toy_dump(tmp_path):
    arrays = {"a.output.0": np.arange(6, dtype=np.float32).reshape(2, 3), "b.output.0": np.ones(4, np.float16)}
    records = [
        {"name": name, "op": name.split(".")[0], "order": i, "dtype": a.dtype.name, "shape": a.shape, "has_data": True}
        for i, (name, a) in enumerate(arrays.items())
    ]
    records.append({"name": "c.output.0", "op": "c", "order": 2, "dtype": "bfloat16", "shape": (3,), "max": 1.0})
    return Dump(
        make_index(records, run="toy"),
        path=tmp_path,
        format="toy",
        loader=lambda row: arrays[row["name"]],
        problems=[Problem("x.npy", "truncated header")],
    )


def test_dump_index_has_every_column_and_lazy_tensors(tmp_path):
    dump = _toy_dump(tmp_path)
    assert list(dump.index.columns) == list(INDEX_COLUMNS)
    assert dump.index["numel"].tolist() == [6, 4, 3]
    assert dump.index["run"].unique().tolist() == ["toy"]
    np.testing.assert_array_equal(dump.tensor("a.output.0"), np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(dump.tensor(1), np.ones(4))
    with pytest.raises(TensorNotFoundError, match="no tensor named 'zzz'"):
        dump.tensor("zzz")
    with pytest.raises(TensorNotFoundError):
        dump.tensor(17)
    with pytest.raises(TensorDataUnavailableError, match=r"c\.output\.0"):
        dump.tensor("c.output.0")
    summary = dump.summary()
    assert summary["tensors"] == 3 and summary["ops"] == 3 and summary["problems"] == 1
    assert summary["bytes"] == 6 * 4 + 4 * 2 + 3 * 2
    assert list(dump.problems.columns) == ["file", "record", "problem"]


def test_dump_html_escapes_user_strings(tmp_path):
    evil = tmp_path / "<img src=x onerror=alert(1)>"
    evil.mkdir()
    dump = _toy_dump(evil)
    html = dump._repr_html_()
    assert "<img" not in html and "&lt;img" in html


def test_loader_errors_become_dump_format_errors(tmp_path):
    def broken(row):
        raise OSError("unexpected end of file")

    dump = Dump(
        make_index([{"name": "t", "has_data": True, "file": "t.bin"}]), path=tmp_path, format="x", loader=broken
    )
    with pytest.raises(DumpFormatError, match=r"t\.bin \(record t\): cannot read tensor payload: unexpected end"):
        dump.tensor("t")


def test_select_restricts_steps(tmp_path):
    records = [{"name": f"t{s}", "step": s, "op": "op", "order": 0} for s in range(3)]
    dump = Dump(make_index(records), path=tmp_path, format="x")
    assert dump.steps == [0, 1, 2]
    assert dump.select(step=1).index["name"].tolist() == ["t1"]


def test_open_missing_path(tmp_path):
    with pytest.raises(DumpFormatError, match="no such file or folder"):
        nbprec.open(tmp_path / "nope")


def test_open_empty_folder(tmp_path):
    with pytest.raises(EmptyDumpError, match="empty"):
        nbprec.open(tmp_path)


def test_open_symlink_loop(tmp_path):
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    with pytest.raises(DumpFormatError, match="symlink"):
        nbprec.open(tmp_path / "a")


def test_open_unrecognised_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(UnknownFormatError, match="not recognised"):
        nbprec.open(tmp_path)


def test_open_unknown_explicit_format(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(UnknownFormatError, match="no reader named 'nope'"):
        nbprec.open(tmp_path, format="nope")


def test_make_index_empty_is_well_typed():
    frame = make_index([])
    assert list(frame.columns) == list(INDEX_COLUMNS) and len(frame) == 0
    assert isinstance(frame, pd.DataFrame)


def test_make_index_reads_records_whatever_their_keys():
    """Records sharing one key order are transposed in one pass; others column by column: the same index."""
    same = [
        {"name": "a", "step": 0, "dtype": "torch.float32", "shape": [2, 3], "max": 1.5, "has_data": True},
        {"name": "b", "step": 1, "dtype": "bf16", "shape": [4], "max": None, "has_data": False},
    ]
    mixed = [same[0], {key: same[1][key] for key in reversed(same[1])}]
    partial = [same[0], {"name": "b", "step": 1, "dtype": "bf16", "shape": [4], "has_data": False}]
    frame = make_index(same, run="r")
    pd.testing.assert_frame_equal(frame, make_index(mixed, run="r"))
    pd.testing.assert_frame_equal(frame, make_index(partial, run="r"))
    assert list(frame["dtype"]) == ["float32", "bfloat16"] and list(frame["numel"]) == [6, 4]
    assert frame["max"].iloc[0] == 1.5 and np.isnan(frame["max"].iloc[1]) and list(frame["order"]) == [-1, -1]
    by_column = {key: [row.get(key) for row in partial] for key in same[0]}  # as a reader collects them itself
    pd.testing.assert_frame_equal(frame, index_frame(list_columns(by_column, 2, run="r")))
    assert len(list_columns({}, 0)) == 0


def test_a_name_in_several_steps_is_ambiguous(tmp_path):
    records = [{"name": "t", "step": s, "op": "op", "order": 0, "has_data": True} for s in range(2)]
    dump = Dump(make_index(records), path=tmp_path, format="x", loader=lambda row: np.full(1, row["step"]))
    with pytest.raises(TensorNotFoundError, match=r"occurs in several places \(step 0 rank -1, step 1 rank -1\)"):
        dump.tensor("t")
    assert dump.select(step=1).tensor("t")[0] == 1
    assert dump.tensor(0)[0] == 0


def test_an_error_that_nothing_could_be_read_names_the_first_problem():
    from nbprec.dump_problems import Problem, first_problem

    problems = [Problem("/d/a.npy", "truncated header"), Problem("/d/b.npy", "wrong magic bytes")]
    assert first_problem(problems) == "; the first, /d/a.npy: truncated header"
    assert first_problem([]) == ""
    assert first_problem(problems, after=1) == "; the first, /d/b.npy: wrong magic bytes"  # (the reading's first)
    assert first_problem(problems, after=2) == "; the first, /d/a.npy: truncated header"  # (none after: the first)
