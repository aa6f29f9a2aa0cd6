"""msprobe's verdicts in its compare CSV: each row's Result (pass, warning, error) and Err_message, as ``msprobe
compare`` (mindstudio-probe 26.2.0, PyTorch) judges them.

msprobe judges the rows of one API or module call together (an error ratio or a cosine that falls from the call's
inputs to its outputs, a norm relative error that grows) besides each row on its own (NaN or inf statistics, dtypes,
shapes, checksums). :func:`judge` runs each check over every row at once, in msprobe's order of checks, so that a
row's messages come in msprobe's order, and keeps a row's findings as the bits of one integer: rows with the same
findings share their two cells, made once. :mod:`nbprec.compare.msprobe_layout` builds the cells it reads.
"""

from __future__ import annotations

import json
import math
import operator
from typing import Any

import numpy as np

from nbprec.compare.msprobe_stats import NA, percent

#: APIs (the name's second part) msprobe judges not at all, or by their outputs only
NOT_JUDGED = frozenset(
    {"empty", "empty_like", "numpy", "to", "__setitem__", "empty_with_format", "new_empty_strided", "new_empty"}
    | {"empty_strided"}
)
OUTPUTS_ONLY = frozenset({"_reduce_scatter_base", "_all_gather_base", "all_to_all_single", "batch_isend_irecv"})
#: msprobe's Err_message texts, by the check that writes them
MESSAGES = {
    "inf_nan": "error: There is nan/inf/-inf in the maximum or minimum value of NPU.",
    "thousandth": "error: The input/parameters of One Thousandth Err Ratio > 0.9 while the output < 0.6.",
    "norm": "error: The NormRelativeErr of output is greater than 0.5.",
    "dtype": "error: The dtype of NPU and Bench are inconsistent.",
    "shape": "error: The shape of NPU and Bench are inconsistent.",
    "cosine": "warning: The input/parameters of Cosine > 0.9, and input/parameters - output > 0.1",
    "norm_growth": "warning: The norm relative error of output is 10 times that of input.",
    "crc": "error: The CRC-32 value of NPU differs from that of the bench.",
    "crc_missing": "warning: The parameter of NPU does not match the bench.",
}
#: Result's words, by level
LEVELS = ("pass", "warning", "error")
#: each check's level (an index of LEVELS), in the order msprobe runs them: a row's messages come in this order
CHECKS = {"inf_nan": 2, "thousandth": 2, "norm": 2, "dtype": 2, "shape": 2, "cosine": 1, "norm_growth": 1}
CHECKS |= {"crc_missing": 1, "crc": 2}  # (md5 mode: these only)
_BIT = {check: 1 << k for k, check in enumerate(CHECKS)}


def _inf_or_nan(value: Any) -> bool:
    """Whether msprobe takes a statistic cell for NaN or an infinity (a float, or its text)."""
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, str) and value.strip().lower() in ("inf", "-inf", "nan")


def _non_finite(values: list[Any]) -> np.ndarray:
    """:func:`_inf_or_nan` of every cell: the floats tested together, any other cell on its own."""
    kinds = list(map(type, values))
    if set(kinds) <= {float}:
        return ~np.isfinite(np.array(values, dtype=np.float64))
    floats = np.fromiter((kind is float for kind in kinds), dtype=bool, count=len(kinds))
    out = np.zeros(len(kinds), dtype=bool)
    at = np.flatnonzero(floats).tolist()
    out[at] = ~np.isfinite(np.array([values[i] for i in at], dtype=np.float64))
    for i in np.flatnonzero(~floats).tolist():
        out[i] = _inf_or_nan(values[i])
    return out


def _numbers(values: list[Any]) -> np.ndarray:
    """Each cell as msprobe takes it when it looks for a call's smallest or largest value: a number as it is, a
    percentage (text ending in ``%``) as a fraction, any other text skipped (NaN here, as NaN is skipped too)."""
    if all(type(value) is float for value in values):
        return np.array(values, dtype=np.float64)
    out = np.full(len(values), np.nan)
    for i, value in enumerate(values):
        if not isinstance(value, str):
            out[i] = value
        elif value.endswith("%"):
            out[i] = percent(value)
    return out


def _api(name: str) -> str:
    """The API of an op name (its second part: ``Functional.linear.0.forward.input.0`` -> ``linear``)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


class _Calls:
    """The calls the rows belong to, as msprobe groups them: each row's call and whether it is an output; each
    call's first output row, and whether its API's own checks (the input/output ones) apply; and which rows msprobe
    judges at all (none of an API it does not judge, only the outputs of some).

    A call's API is that of its first input row ("" for a call without inputs)."""

    def __init__(self, names: list[str], calls: list[Any]) -> None:
        n = self.rows = len(names)
        index: dict[Any, int] = {}
        self.code = np.fromiter((index.setdefault(call, len(index)) for call in calls), dtype=np.intp, count=n)
        self.count = len(index)
        self.output = np.fromiter((".output." in name for name in names), dtype=bool, count=n)
        first_input = self._first(~self.output)
        self.first_output = self._first(self.output)
        self.has_output = self.first_output < n
        apis = [_api(names[i]) if i < n else "" for i in first_input.tolist()]
        not_judged = np.fromiter((api in NOT_JUDGED for api in apis), dtype=bool, count=self.count)
        outputs_only = np.fromiter((api in OUTPUTS_ONLY for api in apis), dtype=bool, count=self.count)
        self.by_api = ~not_judged & ~outputs_only
        self.judged = ~not_judged[self.code] & (~outputs_only[self.code] | self.output)

    def _first(self, rows: np.ndarray) -> np.ndarray:
        """Per call, the first of ``rows`` (a row mask) in it; the row count where it has none."""
        first = np.full(self.count, self.rows, dtype=np.intp)
        np.minimum.at(first, self.code[rows], np.flatnonzero(rows))
        return first

    def lowest(self, numbers: np.ndarray, outputs: bool) -> np.ndarray:
        """Per call, the smallest of ``numbers`` (:func:`_numbers`) over its inputs (or outputs), at most 1."""
        return self._reduce(np.fmin, 1.0, numbers, outputs)

    def largest(self, numbers: np.ndarray, outputs: bool) -> np.ndarray:
        """Per call, the largest of ``numbers`` over its inputs (or outputs), at least 0."""
        return self._reduce(np.fmax, 0.0, numbers, outputs)

    def _reduce(self, ufunc: np.ufunc, start: float, numbers: np.ndarray, outputs: bool) -> np.ndarray:
        out = np.full(self.count, start)
        rows = self.output if outputs else ~self.output
        ufunc.at(out, self.code[rows], numbers[rows])  # (fmin and fmax skip NaN)
        return out

    def first_outputs(self, calls: np.ndarray) -> np.ndarray:
        """A row mask of the first output row of each call in ``calls`` (a call mask) that has one."""
        mask = np.zeros(self.rows, dtype=bool)
        mask[self.first_output[calls & self.has_output]] = True
        return mask


def verdicts(cols: dict[str, list[Any]], mode: str) -> tuple[list[str], list[str]]:
    """msprobe's Result and Err_message of every row of ``mode`` (``"tensor"``, ``"statistics"`` or
    ``"checksum"``), from msprobe's cells ``cols`` (:func:`nbprec.compare.msprobe_layout._ms_columns`):
    ``cols["_call"]`` says which call each row belongs to, a checksum comparison's ``cols["_match"]`` whether the
    checksums agree (None: a side has none), a statistics comparison's ``cols["_norm"]`` (when there) the numbers
    of its NormRelativeErr cells as :func:`_numbers` reads them."""
    found = _findings(cols, mode)
    kinds, which = np.unique(found, return_inverse=True)
    results, messages = [], []
    for bits in kinds.tolist():  # (a handful of distinct findings)
        checks = [check for check, bit in _BIT.items() if bits & bit]
        results.append(LEVELS[max((CHECKS[check] for check in checks), default=0)])
        messages.append(json.dumps([MESSAGES[check] for check in checks]))
    which = which.reshape(-1).tolist()
    return [results[k] for k in which], [messages[k] for k in which]


def _findings(cols: dict[str, list[Any]], mode: str) -> np.ndarray:
    """Each row's findings: the bits (:data:`_BIT`) of the checks it fails."""
    names = cols["NPU Name"]
    n = len(names)
    calls = _Calls(names, cols["_call"])
    judged = calls.judged
    found = np.zeros(n, dtype=np.int64)

    def flag(rows: np.ndarray, check: str) -> None:
        found[rows] |= _BIT[check]

    if mode == "checksum":
        match = cols["_match"]
        flag(judged & np.fromiter((m is None for m in match), dtype=bool, count=n), "crc_missing")
        flag(judged & np.fromiter((m is not None and not m for m in match), dtype=bool, count=n), "crc")
        return found
    npu_bad = _non_finite(cols["NPU max"]) | _non_finite(cols["NPU min"])
    bench_bad = _non_finite(cols["Bench max"]) | _non_finite(cols["Bench min"])
    flag(judged & npu_bad & ~bench_bad, "inf_nan")
    by_api_out = calls.by_api & calls.has_output
    if mode == "tensor":
        ratio = _numbers(cols["One Thousandth Err Ratio"])
        fell = by_api_out & (calls.lowest(ratio, False) > 0.9) & (calls.lowest(ratio, True) < 0.1)
        flag(calls.first_outputs(fell), "thousandth")
    if mode == "statistics":
        norm_cells = cols["NormRelativeErr"]
        norm = cols["_norm"] if "_norm" in cols else _numbers(norm_cells)
        quiet = calls.by_api & (np.abs(calls.largest(norm, False)) < 0.1)  # calls whose inputs' norms held
        large = np.zeros(n, dtype=bool)
        for i in np.flatnonzero(calls.output & quiet[calls.code]).tolist():
            large[i] = abs(percent(norm_cells[i])) > 0.5
        flag(large, "norm")
    benches = cols["Bench Name"]
    differ = judged & np.fromiter(map(operator.ne, cols["NPU Dtype"], cols["Bench Dtype"]), dtype=bool, count=n)
    for i in np.flatnonzero(differ).tolist():
        bench = benches[i]  # fused-weight names (qkv, gate_up) are exempt
        differ[i] = bool(bench) and bench != NA and "qkv" not in bench and "gate_up" not in bench
    flag(differ, "dtype")
    differ = judged & np.fromiter(
        map(operator.ne, cols["NPU Tensor Shape"], cols["Bench Tensor Shape"]), dtype=bool, count=n
    )
    for i in np.flatnonzero(differ).tolist():
        differ[i] = benches[i] not in ("", NA)
    flag(differ, "shape")
    if mode == "tensor":
        cosine = _numbers(cols["Cosine"])
        lowest_in = calls.lowest(cosine, False)
        fell = by_api_out & (lowest_in > 0.9) & (lowest_in - calls.lowest(cosine, True) > 0.1)
        flag(calls.first_outputs(fell), "cosine")
    if mode == "statistics":
        largest_in, largest_out = np.abs(calls.largest(norm, False)), np.abs(calls.largest(norm, True))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            grew = np.where(largest_in == 0, largest_out > 0.1, largest_out / largest_in > 10)
        flag(calls.first_outputs(by_api_out & grew), "norm_growth")
    return found


__all__ = ["CHECKS", "LEVELS", "MESSAGES", "NOT_JUDGED", "OUTPUTS_ONLY", "verdicts"]
