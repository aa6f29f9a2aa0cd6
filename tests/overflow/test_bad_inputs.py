"""Bad inputs: all-NaN, empty, integer tensors, statistics-only dumps, msprobe statistics with inf/NaN; the report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import nbprec.overflow as ov
from nbprec.formats import open_dump
from nbprec.formats.native import NativeDumpWriter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"


def _write(folder: Path, ops: list[tuple[str, dict[str, np.ndarray]]], mode: str = "tensor") -> Path:
    """One op per entry: name -> {"input.0": array, "output.0": array, ...}, in execution order."""
    with NativeDumpWriter(folder, mode=mode) as w:
        for order, (op, tensors) in enumerate(ops):
            for key, arr in tensors.items():
                role, slot = key.split(".", 1)
                rec = {"name": f"{op}.{key}", "op": op, "op_type": op.split(".")[1], "order": order}
                rec.update(role=role, slot=slot, direction="forward", api=".".join(op.split(".")[:2]))
                w.write_tensor(rec, arr)
    return folder


def _bad_run(folder: Path, mode: str = "tensor") -> Path:
    x = np.linspace(-2, 2, 12, dtype=np.float16).reshape(3, 4)
    nan = np.full((3, 4), np.nan, np.float16)
    empty = np.zeros((0, 4), np.float16)
    return _write(
        folder,
        [
            ("Torch.arange.0.forward", {"output.0": np.arange(5, dtype=np.int64)}),
            ("Tensor.view.0.forward", {"input.0": empty, "output.0": empty.reshape(-1)}),
            ("Tensor.add.0.forward", {"input.0": x, "input.1": np.int32(3) * np.ones(4, np.int32), "output.0": x + 3}),
            ("Tensor.log.0.forward", {"input.0": x, "output.0": nan}),  # all NaN from finite inputs
            ("Tensor.nan_to_num.0.forward", {"input.0": nan, "output.0": np.zeros((3, 4), np.float16)}),
            ("Tensor.mul.0.forward", {"input.0": nan, "output.0": nan}),
        ],
        mode,
    )


@pytest.mark.parametrize("mode", ["tensor", "statistics"])
def test_nan_empty_and_integer_tensors(tmp_path, mode):
    report = ov.scan(_bad_run(tmp_path / "run", mode))
    t = report.tensors.set_index("name")
    assert t.loc["Torch.arange.0.forward.output.0", "status"] == "n/a"
    assert t.loc["Tensor.add.0.forward.input.1", "status"] == "n/a"
    assert t.loc["Tensor.view.0.forward.output.0", "status"] == "empty"
    assert t.loc["Tensor.log.0.forward.output.0", "status"] == "nan"
    assert t.loc["Tensor.log.0.forward.output.0", "nan_count"] == 12
    levels = dict(zip(report.ops["op"], report.ops["level"], strict=True))
    assert levels == {
        "Torch.arange.0.forward": "",
        "Tensor.view.0.forward": "",
        "Tensor.add.0.forward": "",
        "Tensor.log.0.forward": "critical",
        "Tensor.nan_to_num.0.forward": "medium",
        "Tensor.mul.0.forward": "high",
    }
    assert report.first_critical()["op"] == "Tensor.log.0.forward"
    assert report.tensors["source"].iloc[-1] == ("payload" if mode == "tensor" else "statistics")


def test_statistics_only_msprobe_with_inf_and_nan_max(tmp_path):
    """msprobe statistics may carry inf/NaN in Max/Min and no counts at all."""
    src = FIXTURES / "fp16_tensor_mix"
    if not src.exists():
        pytest.skip("msprobe fixture missing")
    folder = tmp_path / "stats"
    shutil.copytree(src, folder)
    dump_json = next(folder.rglob("dump.json"))
    data = json.loads(dump_json.read_text())
    data["task"] = "statistics"
    keys = [k for k in data["data"] if k.startswith("Functional.") and k.endswith("forward")]
    key_inf, key_nan = keys[2], keys[4]
    for key, value in ((key_inf, "inf"), (key_nan, "nan")):
        out = data["data"][key]["output"][0]
        out["Max"] = value
        out["Norm"] = value
    for entry in data["data"].values():
        for section in ("input_args", "output"):
            for t in entry.get(section) or []:
                if isinstance(t, dict):
                    t.pop("data_name", None)
    dump_json.write_text(json.dumps(data))
    shutil.rmtree(dump_json.parent / "dump_tensor_data")
    dump = open_dump(folder)
    assert not dump.index["has_data"].any()
    report = ov.scan(dump)
    flagged = report.ops[report.ops["out_abnormal"]]
    assert key_inf in set(flagged["op"])
    assert key_nan in set(flagged["op"])
    assert report.first_critical()["op"] == key_inf


def test_clean_fixtures_have_no_overflow():
    for name in ("fp16_tensor_mix", "bf16_statistics_mix", "fp32_tensor_mix"):
        if (FIXTURES / name).exists():
            report = ov.scan(FIXTURES / name)
            assert report.first_critical() is None, name
            assert report.impact is None and report


def test_suspicious_float16_values_and_bfloat16_saturation(tmp_path):
    sus = np.array([1.0, -51200.0, 3.0], np.float16)
    bf = np.array([1.0, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)], ml_dtypes.bfloat16)
    report = ov.scan(
        _write(
            tmp_path / "run",
            [
                ("Tensor.mul.0.forward", {"input.0": np.full(3, 100, np.float16), "output.0": sus}),
                ("Tensor.mul.1.forward", {"input.0": np.ones(2, ml_dtypes.bfloat16), "output.0": bf}),
            ],
        )
    )
    t = report.tensors.set_index("name")
    assert t.loc["Tensor.mul.0.forward.output.0", "status"] == "suspicious"
    assert t.loc["Tensor.mul.1.forward.output.0", "status"] == "saturated"
    assert list(report.ops["level"]) == ["low", "critical"]


def test_report_save_load_and_escaped_html(tmp_path):
    evil = "Tensor.<script>alert(1)</script>.0.forward"
    x = np.ones(4, np.float16)
    report = ov.scan(_write(tmp_path / "run", [(evil, {"input.0": x, "output.0": x * np.float16(np.inf)})]))
    html = report._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    saved = report.save(tmp_path / "saved")
    back = ov.OverflowReport.load(saved)
    assert back.first_critical()["op"] == evil
    assert back.summary() == report.summary()
    assert json.loads((saved / "report.json").read_text())["summary"]["first_critical_op"] == evil
    with pytest.raises(ov.report.NbprecError):
        ov.OverflowReport.load(tmp_path / "run")


def test_byte_swapped_payloads_are_counted_right(tmp_path):
    """A payload stored in the other byte order (a ``>f4`` ``.npy``: ``np.load`` gives it as such) is counted as its
    values say, not as its bytes would read natively: the compiled pass takes native arrays only."""
    from nbprec.overflow.numerics import profile_array

    rng = np.random.default_rng(3)
    for dtype in (np.float64, np.float32, np.float16, np.int64, np.int32, np.int16):
        values = (rng.standard_normal(1000) * 100).astype(dtype)
        if np.issubdtype(dtype, np.floating):
            values[[3, 40]] = np.inf
            values[[7, 8, 9]] = np.nan
            values[11] = np.finfo(dtype).max
        swapped = values.astype(values.dtype.newbyteorder(">" if values.dtype.byteorder != ">" else "<"))
        assert swapped.dtype != values.dtype and np.array_equal(swapped, values, equal_nan=True)
        got, want = profile_array(swapped, upper=[1000.0]), profile_array(values, upper=[1000.0])
        assert (got.nan_count, got.inf_count, got.nonzero, got.at_least) == (
            want.nan_count, want.inf_count, want.nonzero, want.at_least,
        ), dtype  # fmt: skip
        assert got.abs_max == want.abs_max and got.norm == pytest.approx(want.norm, rel=1e-12), dtype
    folder = tmp_path / "tf"
    folder.mkdir()
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    y = x.copy()
    y[5], y[9] = np.inf, np.nan
    np.save(folder / "MatMul.0.1675157077176648.npy", x.astype(">f4"))
    np.save(folder / "Exp.0.1675157077176649.npy", y.astype(">f4"))
    tensors = ov.scan(folder).tensors.set_index("name")
    assert tensors.loc["MatMul.0", "status"] == "normal" and tensors.loc["MatMul.0", "abs_max"] == 3.0
    exp = tensors.loc["Exp.0"]
    assert (exp["source"], exp["status"], exp["nan_count"], exp["inf_count"]) == ("payload", "nan", 1, 1)
