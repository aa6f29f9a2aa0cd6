"""msprobe's compare CSV, reproduced from a comparison: its columns, formulas, rounding and verdicts.

The layout is ``msprobe compare``'s CSV (mindstudio-probe 26.2.0, PyTorch) in the comparison's mode (real data,
statistics or md5), every cell computed by msprobe's formulas and rounding and every row judged by msprobe's
checks, so that it can be diffed against msprobe's own; docs/compare.md ("CSV exports") says what nbprec's
table cannot supply. :func:`nbprec.compare.exports.write_csv` writes it (``layout="msprobe"``). The statistics
cells and their differences are :mod:`nbprec.compare.msprobe_stats`'.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from nbprec.columns import Columns, texts_of_objects
from nbprec.compare.msprobe_stats import NA as _NA
from nbprec.compare.msprobe_stats import NAN as _NAN
from nbprec.compare.msprobe_stats import stat_diffs, stats_cells
from nbprec.floattext import float_texts

if TYPE_CHECKING:
    from nbprec.compare.comparison import Comparison

#: msprobe's compare columns (mindstudio-probe 26.2.0, PyTorch) in each of its modes: real data ("tensor"),
#: statistics and md5 (CRC-32 checksums). ``NPU_Stack_Info`` is there because msprobe adds it whenever the dump
#: has its ``stack.json``, as msprobe's own dumps always do.
MSPROBE_BASIC = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape"]
MSPROBE_BASIC += ["NPU Requires_grad", "Bench Requires_grad"]
MSPROBE_TENSOR_METRICS = ["Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr"]
MSPROBE_TENSOR_METRICS += ["One Thousandth Err Ratio", "Five Thousandths Err Ratio"]
MSPROBE_STAT_DIFFS = ["Max diff", "Min diff", "Mean diff", "L2norm diff"]
MSPROBE_STAT_DIFFS += ["MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr"]
MSPROBE_STATS = ["NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm"]
_MSPROBE_TAIL = ["Requires_grad Consistent", "Result", "Err_message", "NPU_Stack_Info"]
MSPROBE_HEADERS = {
    "tensor": [*MSPROBE_BASIC, *MSPROBE_TENSOR_METRICS, *MSPROBE_STATS, *_MSPROBE_TAIL, "Data_name"],
    "statistics": [*MSPROBE_BASIC, *MSPROBE_STAT_DIFFS, *MSPROBE_STATS, *_MSPROBE_TAIL],
    "checksum": [*MSPROBE_BASIC, "NPU MD5", "BENCH MD5", *_MSPROBE_TAIL],
}

_UNSUPPORTED = "unsupported"
#: dtypes msprobe pairs although they differ; other differing dtypes it leaves without a benchmark
_MS_PAIRED_FLOATS = frozenset({"float16", "float32", "float64", "bfloat16"})
#: APIs (the name's second part) msprobe judges not at all, or by their outputs only
_MS_NOT_JUDGED = frozenset(
    {"empty", "empty_like", "numpy", "to", "__setitem__", "empty_with_format", "new_empty_strided", "new_empty"}
    | {"empty_strided"}
)
_MS_OUTPUTS_ONLY = frozenset({"_reduce_scatter_base", "_all_gather_base", "all_to_all_single", "batch_isend_irecv"})
#: msprobe's Err_message texts, by the check that writes them
_MS_MESSAGES = {
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
_MS_LEVELS = ("pass", "warning", "error")


def shape_text(value: Any) -> str:
    """A shape as msprobe and msaccucmp write it: ``[2, 8]`` (``""`` for none)."""
    return "" if value is None else str(list(value))


def shape_texts(values: list[Any]) -> list[str]:
    """:func:`shape_text` of each shape, each distinct shape formatted once (a model's tensors share a few): once
    per tuple object, and once per shape of plain integers however many objects hold it."""
    equal: dict[tuple, str] = {}

    def text(value: Any) -> str:
        if type(value) is tuple and all(type(d) is int for d in value):  # ((1.0, 2) equals (1, 2): not cached)
            found = equal.get(value)
            if found is None:
                found = equal[value] = shape_text(value)
            return found
        return shape_text(value)

    return texts_of_objects(values, text)


def msprobe_mode(comparison: Comparison) -> str:
    """The msprobe compare mode whose layout fits ``comparison``.

    A mode forced in :func:`nbprec.compare` decides; under ``"auto"`` the rows do (payloads compared anywhere:
    tensor, else statistics, else checksums).

    Parameters
    ----------
    comparison
        The comparison to export.

    Returns
    -------
    str
        ``"tensor"`` (msprobe's real-data mode), ``"statistics"`` or ``"checksum"`` (its md5 mode).
    """
    mode = str(comparison.meta.get("mode", "auto"))
    if mode in MSPROBE_HEADERS:
        return mode
    present = {str(m) for m in comparison.columns["compare_mode"].tolist()}
    return next((m for m in ("tensor", "statistics", "checksum") if m in present), "tensor")


def _ms_dtype(dtype: Any) -> str:
    return f"torch.{dtype}" if isinstance(dtype, str) and dtype else _NA


def decimals_rounded(values: np.ndarray, decimals: int) -> np.ndarray:
    """``float(f"{v:.{decimals}f}")`` of every value (msprobe's rounding, correctly rounded), without a call per
    value where that is exact: ``rint(v * 10**decimals) / 10**decimals``.

    The product is within half an ulp of ``v * 10**decimals``; where it lies further than an ulp from a
    half-integer, its nearest integer is the exact value's, and dividing that integer (below 2^52, so exact)
    by ``10**decimals`` rounds to the double nearest the decimal text. Values near a tie, beyond 2^52 once
    scaled or not finite are formatted and read back one by one.

    Examples
    --------
    >>> decimals_rounded(np.array([0.1234567890125, 2.5e-13, -7.0]), 12).tolist()
    [0.123456789012, 0.0, -7.0]
    """
    x = np.asarray(values, dtype=np.float64)
    scale = 10.0**decimals
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = x * scale
        out = np.rint(scaled) / scale
        tie_distance = np.abs(scaled - np.floor(scaled) - 0.5)
        exact = (np.abs(scaled) < 2.0**52) & (tie_distance > np.spacing(np.abs(scaled)))
    for i in np.flatnonzero(~exact).tolist():
        out[i] = float(f"{x[i]:.{decimals}f}")
    return out


def _squeezed(shape: Any) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1) if shape is not None else ()


def _inf_or_nan(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, str) and value.strip().lower() in ("inf", "-inf", "nan")


def _percent(value: Any) -> float:
    try:
        return float(str(value).strip("%")) / 100
    except ValueError:
        return 0.0


def _extreme(values: list[Any], rows: list[int], lowest: bool) -> float:
    """The smallest (default 1) or largest (default 0) number among ``values`` at ``rows``, as msprobe takes it:
    percentages count, other text is skipped."""
    best = 1.0 if lowest else 0.0
    for i in rows:
        value = values[i]
        if isinstance(value, str):
            if not value.endswith("%"):
                continue
            value = _percent(value)
        best = min(best, value) if lowest else max(best, value)
    return best


def _judge(cols: dict[str, list[Any]], mode: str) -> None:
    """msprobe's Result and Err_message (``cols["_level"]``, ``cols["_messages"]``) of every row, the rows of one
    API or module call judged together, as msprobe does. Each check runs over every call before the next one
    starts, so that a row's messages come in msprobe's order of checks."""
    names, levels, messages = cols["NPU Name"], cols["_level"], cols["_messages"]

    def flag(i: int, level: int, message: str) -> None:
        levels[i] = max(levels[i], level)
        messages[i].append(_MS_MESSAGES[message])

    by_call: dict[tuple[Any, ...], list[int]] = {}
    for i, call in enumerate(cols["_call"]):
        by_call.setdefault(call, []).append(i)
    calls = []  # (inputs, outputs, judged by the API's own checks, rows judged) of each call
    for rows in by_call.values():
        outputs = [i for i in rows if ".output." in names[i]]
        inputs = [i for i in rows if ".output." not in names[i]]
        parts = names[inputs[0]].split(".") if inputs else []
        api = parts[1] if len(parts) > 1 else ""
        by_api = api not in _MS_NOT_JUDGED and api not in _MS_OUTPUTS_ONLY
        judged = [] if api in _MS_NOT_JUDGED else outputs if api in _MS_OUTPUTS_ONLY else inputs + outputs
        calls.append((inputs, outputs, by_api, judged))
    if mode == "checksum":
        match = cols["_match"]
        for *_, judged in calls:
            for i in judged:
                if match[i] is None:
                    flag(i, 1, "crc_missing")
                elif not match[i]:
                    flag(i, 2, "crc")
        return
    bench_bad = [_inf_or_nan(a) or _inf_or_nan(b) for a, b in zip(cols["Bench max"], cols["Bench min"], strict=True)]
    npu_bad = [_inf_or_nan(a) or _inf_or_nan(b) for a, b in zip(cols["NPU max"], cols["NPU min"], strict=True)]
    for *_, judged in calls:
        for i in judged:
            if npu_bad[i] and not bench_bad[i]:
                flag(i, 2, "inf_nan")
    ratio, norm = cols.get("One Thousandth Err Ratio", []), cols.get("NormRelativeErr", [])  # (by mode)
    for inputs, outputs, by_api, _ in calls:
        thousandth = by_api and outputs and mode == "tensor"
        if thousandth and _extreme(ratio, inputs, True) > 0.9 and _extreme(ratio, outputs, True) < 0.1:
            flag(outputs[0], 2, "thousandth")
        if by_api and mode == "statistics" and abs(_extreme(norm, inputs, False)) < 0.1:
            for i in outputs:
                if abs(_percent(norm[i])) > 0.5:
                    flag(i, 2, "norm")
    benches, npu_dtypes, bench_dtypes = cols["Bench Name"], cols["NPU Dtype"], cols["Bench Dtype"]
    for *_, judged in calls:
        for i in judged:
            bench = benches[i]  # fused-weight names (qkv, gate_up) are exempt
            judge = bench and bench != _NA and "qkv" not in bench and "gate_up" not in bench
            if judge and npu_dtypes[i] != bench_dtypes[i]:
                flag(i, 2, "dtype")
    npu_shapes, bench_shapes = cols["NPU Tensor Shape"], cols["Bench Tensor Shape"]
    for *_, judged in calls:
        for i in judged:
            if benches[i] not in ("", _NA) and npu_shapes[i] != bench_shapes[i]:
                flag(i, 2, "shape")
    for inputs, outputs, by_api, _ in calls:
        if by_api and outputs and mode == "tensor":
            lowest_in = _extreme(cols["Cosine"], inputs, True)
            if lowest_in > 0.9 and lowest_in - _extreme(cols["Cosine"], outputs, True) > 0.1:
                flag(outputs[0], 1, "cosine")
        if by_api and outputs and mode == "statistics":
            largest_in, largest_out = abs(_extreme(norm, inputs, False)), abs(_extreme(norm, outputs, False))
            if (largest_out > 0.1) if largest_in == 0 else (largest_out / largest_in > 10):
                flag(outputs[0], 1, "norm_growth")


def _ms_text(value: Any) -> str:
    """A cell as msprobe's CSV writes it (pandas; infinities as ``' inf'`` so spreadsheets read them)."""
    kind = type(value)
    if kind is str:  # most cells: names, dtypes, shapes, "N/A" (a call per cell: the checks go cheapest first)
        return value
    if kind is float or isinstance(value, float):
        if value != value:
            return ""
        if math.isinf(value):
            return " inf" if value > 0 else " -inf"
        return repr(float(value))
    return str(value)


def _ms_tensor_columns(table: Columns, paired: list[bool]) -> list[list[Any]]:
    """Cosine, EucDist, MaxAbsErr, MaxRelativeErr and the two error ratios of every row as msprobe writes them:
    12 decimals (a cosine above 0.9999 then 6), ``'Nan'`` where not computed; ``'unsupported'`` without a
    benchmark or a payload comparison, ``'shape unmatched'`` when the squeezed shapes differ, ``'N/A'`` when a
    payload holds NaN/inf. The numbers are rounded a column at a time (:func:`decimals_rounded`)."""
    n = len(table)
    modes, numels, reasons = table["compare_mode"].tolist(), table["numel"].tolist(), table["reason"].tolist()
    t_shapes, b_shapes = table["target_shape"].tolist(), table["bench_shape"].tolist()
    names = ("cosine", "euclidean", "max_abs_err", "max_rel_err", "thousandth_ratio", "five_thousandth_ratio")
    metric = [np.asarray(table[name], dtype=np.float64) if name in table else np.full(n, np.nan) for name in names]
    cosine = decimals_rounded(metric[0], 12)
    high = np.flatnonzero(cosine > 0.9999)
    cosine[high] = decimals_rounded(cosine[high], 6)
    numbers = [cosine, metric[1], *(decimals_rounded(m, 12) for m in metric[2:])]
    out: list[list[Any]] = []
    for column in numbers:
        cells = column.tolist()
        for i in np.flatnonzero(np.isnan(column)).tolist():
            cells[i] = _NAN
        out.append(cells)
    for i in range(n):  # rows whose cells are words, not numbers
        numel = numels[i]
        if not paired[i] or modes[i] != "tensor" or not numel:
            text = _UNSUPPORTED
        elif t_shapes[i] != b_shapes[i] and _squeezed(t_shapes[i]) != _squeezed(b_shapes[i]):  # msprobe squeezes
            text = "shape unmatched"
        elif isinstance(reasons[i], str) and "non-finite values:" in reasons[i]:  # a payload holds NaN/inf
            text = _NA
        else:
            if numel == 1:  # a 0-d tensor once squeezed: no cosine, distance or ratios
                out[0][i] = out[1][i] = out[4][i] = out[5][i] = _UNSUPPORTED
            continue
        for column in out:
            column[i] = text
    return out


def _ms_columns(table: Columns, mode: str) -> dict[str, list[Any]]:
    """msprobe's columns of ``mode`` (values typed as msprobe holds them), not yet judged; plus ``_call`` (the
    call a row belongs to: msprobe judges a call's rows together), ``_level``, ``_messages`` and ``_match``."""
    n = len(table)
    names, benches = table["target_name"].tolist(), table["bench_name"].tolist()
    t_dtypes, b_dtypes = table["target_dtype"].tolist(), table["bench_dtype"].tolist()
    paired = [
        bool(b) and (t == d or {t, d} <= _MS_PAIRED_FLOATS) for b, t, d in zip(benches, t_dtypes, b_dtypes, strict=True)
    ]
    na = [_NA] * n
    cols: dict[str, list[Any]] = {
        "NPU Name": names,
        "Bench Name": [b if p else _NA for b, p in zip(benches, paired, strict=True)],
    }
    cols["NPU Dtype"] = [_ms_dtype(d) for d in t_dtypes]
    cols["Bench Dtype"] = [_ms_dtype(d) if p else _NA for d, p in zip(b_dtypes, paired, strict=True)]
    cols["NPU Tensor Shape"] = shape_texts(table["target_shape"].tolist())
    cols["Bench Tensor Shape"] = [
        (s or _NA) if p else _NA for s, p in zip(shape_texts(table["bench_shape"].tolist()), paired, strict=True)
    ]
    cols["NPU Requires_grad"], cols["Bench Requires_grad"] = na, list(na)  # not in nbprec's dump index
    target, bench = stats_cells(table, "target"), stats_cells(table, "bench")
    bench = [[v if p else _NA for v, p in zip(values, paired, strict=True)] for values in bench]
    stats = [*target, *bench]
    cols.update(zip(MSPROBE_STATS, stats, strict=True))
    if mode == "tensor":
        cols.update(zip(MSPROBE_TENSOR_METRICS, _ms_tensor_columns(table, paired), strict=True))
        # the payload files, named as msprobe names them ("-1": none; a row compared by statistics lacks one)
        reads = [m not in ("statistics", "checksum") for m in table["compare_mode"].tolist()]
        cols["Data_name"] = [
            str([f"{t}.pt" if read else "-1", (f"{b}.pt" if read else "-1") if p else _NA])
            for t, b, p, read in zip(names, benches, paired, reads, strict=True)
        ]
    elif mode == "statistics":
        diffs = [stat_diffs(stats[k], stats[k + 4]) for k in range(4)]
        cols.update(zip(MSPROBE_STAT_DIFFS[:4], (column[0] for column in diffs), strict=True))
        cols.update(zip(MSPROBE_STAT_DIFFS[4:], (column[1] for column in diffs), strict=True))
    else:
        checksums = "target_checksum" in table
        t_sums = table["target_checksum"].tolist() if checksums else [None] * n
        b_sums = table["bench_checksum"].tolist() if "bench_checksum" in table else [None] * n
        npu = [c if isinstance(c, str) and c else _NA for c in t_sums]
        theirs = [c if p and isinstance(c, str) and c else _NA for c, p in zip(b_sums, paired, strict=True)]
        cols["NPU MD5"], cols["BENCH MD5"] = npu, theirs
        if checksums:  # msprobe's test: equal, else a side without one (warning), else different (error)
            cols["_match"] = [
                True if a == b else None if {a, b} & {_NA, _NAN, ""} else False
                for a, b in zip(npu, theirs, strict=True)
            ]
        else:  # nbprec's own verdict
            flags = table["checksum_match"].tolist() if "checksum_match" in table else [None] * n
            cols["_match"] = [f if p else None for f, p in zip(flags, paired, strict=True)]
    # requires_grad is not in nbprec's index: taken as consistent where paired (msprobe compares a tensor's
    # requires_grad with N/A, unequal, where there is no benchmark)
    cols["Requires_grad Consistent"], cols["NPU_Stack_Info"] = paired, list(na)
    steps = table["step"].tolist() if "step" in table else [None] * n
    ranks = table["rank"].tolist() if "rank" in table else [None] * n
    cols["_call"] = list(zip(steps, ranks, table["target_op"].tolist(), strict=True))
    cols["_level"] = [0] * n
    cols["_messages"] = [[] for _ in range(n)]
    return cols


def _ms_texts(values: list[Any]) -> list[str]:
    """A column's cells as msprobe's CSV writes them (:func:`_ms_text`), without a call per cell: the numbers
    formatted together (repr's text, NaN empty), the strings as they are."""
    kinds = list(map(type, values))
    if kinds.count(str) == len(kinds):  # names, dtypes, shapes, verdicts: as they are
        return values
    floats = kinds.count(float)
    if floats == len(kinds):  # statistics and metrics of compared tensors: numbers only
        at = None
        numbers = np.array(values, dtype=np.float64)
        out = float_texts(numbers, "")
    else:
        at = [i for i, kind in enumerate(kinds) if kind is float]
        numbers = np.array([values[i] for i in at], dtype=np.float64)
        out = list(values)
        for i, text in zip(at, float_texts(numbers, ""), strict=True):
            out[i] = text
    for j in np.flatnonzero(np.isinf(numbers)).tolist():  # msprobe's ' inf'
        i = j if at is None else at[j]
        out[i] = _ms_text(values[i])
    if floats + kinds.count(str) < len(kinds):  # anything else: a call each
        for i, kind in enumerate(kinds):
            if kind is not float and kind is not str:
                out[i] = _ms_text(values[i])
    return out


def msprobe_rows(comparison: Comparison) -> tuple[list[str], list[tuple[str, ...]]]:
    """msprobe's header for the comparison's mode and one row per target tensor, judged as msprobe judges."""
    header, columns = msprobe_columns(comparison)
    return header, list(zip(*columns, strict=True))


def msprobe_columns(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """:func:`msprobe_rows` a column at a time: the header and each column's cells."""
    mode = msprobe_mode(comparison)
    cols = _ms_columns(comparison.columns, mode)
    _judge(cols, mode)
    cols["Result"] = [_MS_LEVELS[level] for level in cols["_level"]]
    texts: dict[tuple[str, ...], str] = {}  # a handful of distinct message lists: each one's JSON made once
    keys = list(map(tuple, cols["_messages"]))
    cols["Err_message"] = [texts.get(key) or texts.setdefault(key, json.dumps(list(key))) for key in keys]
    header = MSPROBE_HEADERS[mode]
    return header, [_ms_texts(cols[column]) for column in header]


__all__ = [
    "MSPROBE_BASIC",
    "MSPROBE_HEADERS",
    "MSPROBE_STATS",
    "MSPROBE_STAT_DIFFS",
    "MSPROBE_TENSOR_METRICS",
    "msprobe_columns",
    "msprobe_mode",
    "msprobe_rows",
    "shape_text",
    "shape_texts",
]
