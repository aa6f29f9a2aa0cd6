"""msprobe's verdicts (Result, Err_message) check by check, on small hand-made tables of msprobe's cells.

The agreement with msprobe's own CSVs on real dumps is tests/compare/test_msprobe_exports.py's; the real dumps
there fail few of the checks (their dtypes differ everywhere), so each check is held here to what msprobe does.
"""

from __future__ import annotations

import json
import math

from nbprec.compare.msprobe_judge import MESSAGES, verdicts
from nbprec.compare.msprobe_stats import NA


def rows(*specs: dict) -> dict[str, list]:
    """msprobe's cells of the rows ``specs`` (each a dict of the cells that differ from a passing float row of
    call ``op0``), in the columns the verdicts read."""
    base = {
        "NPU Name": "Functional.linear.0.forward.input.0",
        "_call": (0, 0, "op0"),
        "Bench Name": None,  # (the NPU name)
        "NPU Dtype": "torch.float32",
        "Bench Dtype": "torch.float32",
        "NPU Tensor Shape": "[2, 3]",
        "Bench Tensor Shape": "[2, 3]",
        "NPU max": 1.0,
        "NPU min": -1.0,
        "Bench max": 1.0,
        "Bench min": -1.0,
        "One Thousandth Err Ratio": 1.0,
        "Cosine": 1.0,
        "NormRelativeErr": "0.5%",
        "_match": True,
    }
    cols: dict[str, list] = {key: [] for key in base}
    for spec in specs:
        row = base | spec
        if row["Bench Name"] is None:
            row["Bench Name"] = row["NPU Name"]
        for key, value in row.items():
            cols[key].append(value)
    return cols


def judged(cols: dict, mode: str) -> list[tuple[str, list[str]]]:
    """(Result, the Err_message texts) of each row."""
    results, messages = verdicts(cols, mode)
    return [(r, json.loads(m)) for r, m in zip(results, messages, strict=True)]


IN0 = "Functional.linear.0.forward.input.0"
OUT0 = "Functional.linear.0.forward.output.0"
OUT1 = "Functional.linear.0.forward.output.1"


def test_passing_rows_pass_in_every_mode():
    cols = rows({}, {"NPU Name": OUT0})
    for mode in ("tensor", "statistics", "checksum"):
        assert judged(cols, mode) == [("pass", []), ("pass", [])]


def test_nan_or_inf_statistics_of_the_target_only_are_an_error():
    cols = rows(
        {"NPU max": math.inf},
        {"NPU min": "Nan", "NPU Name": OUT0},
        {"NPU max": math.nan, "Bench max": " -INF ", "NPU Name": OUT1},  # both sides: not the target's fault
    )
    found = judged(cols, "tensor")
    assert found[0] == found[1] == ("error", [MESSAGES["inf_nan"]])
    assert found[2] == ("pass", [])


def test_an_error_ratio_that_falls_from_inputs_to_outputs_flags_the_first_output():
    cols = rows(
        {"One Thousandth Err Ratio": 0.95},
        {"NPU Name": OUT0, "One Thousandth Err Ratio": 0.05},
        {"NPU Name": OUT1, "One Thousandth Err Ratio": 0.5},
    )
    assert [r for r, _ in judged(cols, "tensor")] == ["pass", "error", "pass"]
    assert judged(cols, "tensor")[1][1] == [MESSAGES["thousandth"]]
    cols["One Thousandth Err Ratio"][0] = "unsupported"  # text is skipped: the inputs' lowest is then 1
    assert judged(cols, "tensor")[1][0] == "error"
    cols["One Thousandth Err Ratio"][0] = 0.85  # inputs not above 0.9: nothing to fall from
    assert judged(cols, "tensor")[1] == ("pass", [])
    assert judged(cols, "statistics")[1] == ("pass", [])  # a real-data check only


def test_a_cosine_that_falls_by_more_than_a_tenth_is_a_warning():
    cols = rows({"Cosine": 0.99}, {"NPU Name": OUT0, "Cosine": 0.85}, {"NPU Name": OUT1, "Cosine": 0.5})
    assert judged(cols, "tensor") == [("pass", []), ("warning", [MESSAGES["cosine"]]), ("pass", [])]
    cols["Cosine"][2] = 0.95  # the outputs' lowest is 0.85 still
    assert judged(cols, "tensor")[1][0] == "warning"
    cols["Cosine"][1] = 0.95
    assert judged(cols, "tensor")[1] == ("pass", [])


def test_large_norm_errors_of_outputs_whose_inputs_held_are_errors():
    cols = rows(
        {"NormRelativeErr": "5%"},
        {"NPU Name": OUT0, "NormRelativeErr": "60%"},
        {"NPU Name": OUT1, "NormRelativeErr": "inf"},  # not a percentage for the inputs' check, but read as inf
    )
    found = judged(cols, "statistics")
    assert found[0] == ("pass", [])
    assert found[1] == ("error", [MESSAGES["norm"], MESSAGES["norm_growth"]])  # 60% is 12 times 5%
    assert found[2] == ("error", [MESSAGES["norm"]])
    cols["NormRelativeErr"][0] = "20%"  # inputs above 0.1: no error, and 60% is 3 times 20%
    assert judged(cols, "statistics")[1:] == [("pass", []), ("pass", [])]


def test_norm_growth_from_inputs_of_zero_is_measured_against_a_tenth():
    cols = rows({"NormRelativeErr": "0"}, {"NPU Name": OUT0, "NormRelativeErr": "11%"})  # ("0": not a percentage)
    assert judged(cols, "statistics")[1] == ("warning", [MESSAGES["norm_growth"]])
    cols["NormRelativeErr"][1] = "9%"
    assert judged(cols, "statistics")[1] == ("pass", [])


def test_dtype_and_shape_mismatches_are_errors_unless_msprobe_exempts_the_row():
    cols = rows(
        {"Bench Dtype": "torch.float16", "Bench Tensor Shape": "[3, 2]"},
        {"Bench Dtype": "torch.float16", "Bench Name": "model.qkv.weight"},  # fused weights are exempt
        {"Bench Dtype": "torch.float16", "Bench Name": "x.gate_up"},
        {"Bench Dtype": NA, "Bench Tensor Shape": NA, "Bench Name": NA},  # no benchmark
        {"Bench Tensor Shape": "[6]", "Bench Name": ""},
    )
    found = judged(cols, "tensor")
    assert found[0] == ("error", [MESSAGES["dtype"], MESSAGES["shape"]])
    assert found[1:] == [("pass", [])] * 4


def test_messages_come_in_msprobes_order_of_checks():
    cols = rows(
        {"Cosine": 0.99},
        {"NPU Name": OUT0, "Cosine": 0.5, "NPU max": math.inf, "Bench Dtype": "torch.float16"}
        | {"Bench Tensor Shape": "[1]", "One Thousandth Err Ratio": 0.01},
    )
    cols["One Thousandth Err Ratio"][0] = 0.99
    result, messages = judged(cols, "tensor")[1]
    assert result == "error"
    assert messages == [MESSAGES[k] for k in ("inf_nan", "thousandth", "dtype", "shape", "cosine")]


def test_apis_msprobe_does_not_judge_or_judges_by_their_outputs():
    mismatch = {"Bench Dtype": "torch.float16"}
    cols = rows(
        {"NPU Name": "Tensor.to.0.forward.input.0", "_call": (0, 0, "to0")} | mismatch,
        {"NPU Name": "Tensor.to.0.forward.output.0", "_call": (0, 0, "to0")} | mismatch,
        {"NPU Name": "Distributed.all_to_all_single.0.forward.input.0", "_call": (0, 0, "a2a")} | mismatch,
        {"NPU Name": "Distributed.all_to_all_single.0.forward.output.0", "_call": (0, 0, "a2a")} | mismatch,
    )
    assert [r for r, _ in judged(cols, "tensor")] == ["pass", "pass", "pass", "error"]


def test_a_calls_rows_are_judged_together_wherever_they_are():
    cols = rows(
        {"Cosine": 0.99},
        {"NPU Name": "Functional.relu.0.forward.input.0", "_call": (0, 0, "op1"), "Cosine": 0.3},
        {"NPU Name": OUT0, "Cosine": 0.8},
        {"NPU Name": "Functional.relu.0.forward.output.0", "_call": (0, 0, "op1"), "Cosine": 0.1},
        {"NPU Name": OUT0, "_call": (1, 0, "op0"), "Cosine": 0.85},  # the same op at another step, no inputs
    )
    # op0 at step 0 falls from 0.99 to 0.8; op1's inputs are not above 0.9; msprobe measures the outputs of a
    # call without inputs against 1
    assert [r for r, _ in judged(cols, "tensor")] == ["pass", "pass", "warning", "pass", "warning"]
    cols["Cosine"][4] = 0.95
    assert judged(cols, "tensor")[4] == ("pass", [])


def test_checksums_that_differ_or_are_missing():
    cols = rows({}, {"_match": False}, {"_match": None}, {"_match": False, "Bench Dtype": "torch.float16"})
    assert judged(cols, "checksum") == [
        ("pass", []),
        ("error", [MESSAGES["crc"]]),
        ("warning", [MESSAGES["crc_missing"]]),
        ("error", [MESSAGES["crc"]]),  # md5 mode checks nothing else
    ]


def test_no_rows():
    for mode in ("tensor", "statistics", "checksum"):
        assert verdicts(rows(), mode) == ([], [])
