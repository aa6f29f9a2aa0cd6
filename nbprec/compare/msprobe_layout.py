"""msprobe's compare CSV, reproduced from a comparison: its columns, formulas, rounding and verdicts.

The layout is ``msprobe compare``'s CSV (mindstudio-probe 26.2.0, PyTorch) in the comparison's mode (real data,
statistics or md5), every cell computed by msprobe's formulas and rounding and every row judged by msprobe's
checks, so that it can be diffed against msprobe's own; docs/compare.md ("CSV exports") says what nbprec's
table cannot supply. :func:`nbprec.compare.exports.write_csv` writes it (``layout="msprobe"``). The statistics
cells and their differences are :mod:`nbprec.compare.msprobe_stats`', each row's Result and Err_message
:mod:`nbprec.compare.msprobe_judge`'s.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from nbprec.columns import Columns, shape_cells
from nbprec.compare.msprobe_judge import verdicts
from nbprec.compare.msprobe_stats import NA as _NA
from nbprec.compare.msprobe_stats import NAN as _NAN
from nbprec.compare.msprobe_stats import stat_diffs, stats_cells
from nbprec.floattext import NumberColumn, float_texts, number_column, number_texts

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


def shape_text(value: Any) -> str:
    """A shape as msprobe and msaccucmp write it: ``[2, 8]`` (``""`` for none)."""
    return "" if value is None else str(list(value))


def shape_texts(values: list[Any]) -> list[str]:
    """:func:`shape_text` of each shape, each distinct shape formatted once (a model's tensors share a few): once
    per tuple object, and once per shape of plain integers however many objects hold it (in C where built:
    :func:`~nbprec.columns.shape_cells`)."""
    equal: dict[tuple, str] = {}

    def text(value: Any) -> str:
        if type(value) is tuple and all(type(d) is int for d in value):  # ((1.0, 2) equals (1, 2): not cached)
            found = equal.get(value)
            if found is None:
                found = equal[value] = shape_text(value)
            return found
        return shape_text(value)

    return shape_cells(values, text)


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


def _dtype_texts(dtypes: list[Any]) -> list[str]:
    """:func:`_ms_dtype` of each dtype, made once per distinct one (a dump has a handful)."""
    texts = {dtype: _ms_dtype(dtype) for dtype in set(dtypes)}
    return [texts[dtype] for dtype in dtypes]


def decimals_rounded(values: np.ndarray, decimals: int) -> np.ndarray:
    """``float(f"{v:.{decimals}f}")`` of every value (msprobe's rounding, correctly rounded), without a call per
    value where that is exact: ``rint(v * 10**decimals) / 10**decimals``.

    The product is within half an ulp of ``v * 10**decimals``; where it lies further than an ulp from a
    half-integer, its nearest integer is the exact value's, and dividing that integer (below 2^52, so exact)
    by ``10**decimals`` rounds to the double nearest the decimal text. A value whose neighbouring doubles lie
    more than ``10**-decimals`` away (:func:`_own_rounding_from`; a relative error in the thousands, say) is its
    own rounding: the decimal text lies within half of that of it, closer than to any other double. An
    infinity is its own too, and a NaN reads back as ``float("nan")``. The few values left (near a tie, or
    between 2^52 once scaled and that bound) are formatted and read back one by one.

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
        own = ~exact & ~(np.abs(x) < _own_rounding_from(decimals))  # (NaN and infinities too)
    out[own] = x[own]
    out[own & np.isnan(x)] = np.nan  # (whatever the NaN's sign and payload: float("nan")'s)
    for i in np.flatnonzero(~exact & ~own).tolist():
        out[i] = float(f"{x[i]:.{decimals}f}")
    return out


def _own_rounding_from(decimals: int) -> float:
    """A power of two from which every double is its own rounding to ``decimals`` decimals: there the doubles
    lie at least ``2**(k - 53)`` apart, more than ``10**-decimals`` (one more power for safety)."""
    return 2.0 ** (math.floor(53 - decimals * math.log2(10)) + 2)


def _squeezed(shape: Any) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1) if shape is not None else ()


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
    call a row belongs to: msprobe judges a call's rows together); statistics mode, ``_norm``; md5 mode, ``_match``."""
    n = len(table)
    names, benches = table["target_name"].tolist(), table["bench_name"].tolist()
    t_dtypes, b_dtypes = table["target_dtype"].tolist(), table["bench_dtype"].tolist()
    dtype_pairs = list(zip(t_dtypes, b_dtypes, strict=True))
    pairs_ok = {(t, d): t == d or {t, d} <= _MS_PAIRED_FLOATS for t, d in set(dtype_pairs)}  # (a few)
    paired = (
        np.fromiter(map(bool, benches), dtype=bool, count=n)
        & np.fromiter(map(pairs_ok.__getitem__, dtype_pairs), dtype=bool, count=n)
    ).tolist()
    na = [_NA] * n

    def benchmark(values: list[Any]) -> list[Any]:  # N/A where msprobe has no benchmark for the row
        return values if all(paired) else [v if p else _NA for v, p in zip(values, paired, strict=True)]

    cols: dict[str, list[Any]] = {"NPU Name": names, "Bench Name": benchmark(benches)}
    cols["NPU Dtype"], cols["Bench Dtype"] = _dtype_texts(t_dtypes), benchmark(_dtype_texts(b_dtypes))
    cols["NPU Tensor Shape"] = shape_texts(table["target_shape"].tolist())
    cols["Bench Tensor Shape"] = benchmark([s or _NA for s in shape_texts(table["bench_shape"].tolist())])
    cols["NPU Requires_grad"], cols["Bench Requires_grad"] = na, list(na)  # not in nbprec's dump index
    target, bench = stats_cells(table, "target"), list(map(benchmark, stats_cells(table, "bench")))
    stats = [*target, *bench]
    cols.update(zip(MSPROBE_STATS, stats, strict=True))
    if mode == "tensor":
        cols.update(zip(MSPROBE_TENSOR_METRICS, _ms_tensor_columns(table, paired), strict=True))
        # the payload files, named as msprobe names them ("-1": none; a row compared by statistics lacks one)
        reads = [m not in ("statistics", "checksum") for m in table["compare_mode"].tolist()]
        cols["Data_name"] = _data_names(names, benches, paired, reads)
    elif mode == "statistics":
        diffs = [stat_diffs(stats[k], stats[k + 4]) for k in range(4)]
        cols.update(zip(MSPROBE_STAT_DIFFS[:4], (column[0] for column in diffs), strict=True))
        cols.update(zip(MSPROBE_STAT_DIFFS[4:], (column[1] for column in diffs), strict=True))
        cols["_norm"] = diffs[3][2]  # NormRelativeErr's numbers, for the verdicts
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
    return cols


def _data_names(names: list[str], benches: list[str], paired: list[bool], reads: list[bool]) -> list[str]:
    """msprobe's Data_name cells: ``str([target file, bench file])`` of each row, a file ``-1`` for a row compared
    by statistics and ``N/A`` without a benchmark. Names that ``repr`` writes as they are, in single quotes (printable,
    no quote, no backslash: the usual ones, one test over them all), are put in the text directly."""
    try:
        text = "".join(names) + "".join(benches)
    except TypeError:  # (a missing name: the general way)
        text = "'"
    if not (text.isprintable() and "'" not in text and '"' not in text and "\\" not in text):
        return [
            str([f"{t}.pt" if read else "-1", (f"{b}.pt" if read else "-1") if p else _NA])
            for t, b, p, read in zip(names, benches, paired, reads, strict=True)
        ]
    return [
        (f"['{t}.pt', '{b}.pt']" if p else f"['{t}.pt', '{_NA}']")
        if read
        else ("['-1', '-1']" if p else f"['-1', '{_NA}']")
        for t, b, p, read in zip(names, benches, paired, reads, strict=True)
    ]


def _ms_texts(values: list[Any]) -> list[str] | NumberColumn:
    """A column's cells as msprobe's CSV writes them (:func:`_ms_text`), without a call per cell: the numbers
    formatted together (repr's text, NaN empty; a column of finite numbers and NaN as a column of numbers,
    :func:`~nbprec.floattext.number_column`), the strings as they are."""
    kinds = list(map(type, values))
    if kinds.count(str) == len(kinds):  # names, dtypes, shapes, verdicts: as they are
        return values
    if kinds.count(bool) == len(kinds):  # Requires_grad Consistent
        return ["True" if value else "False" for value in values]
    floats = kinds.count(float)
    if floats == len(kinds):  # statistics and metrics of compared tensors: numbers only
        at = None
        numbers = np.array(values, dtype=np.float64)
        if not np.isinf(numbers).any():  # (formatted as the rows are joined)
            return number_column(numbers, "")
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
    return header, list(zip(*map(number_texts, columns), strict=True))


def msprobe_columns(comparison: Comparison) -> tuple[list[str], list[list[str] | NumberColumn]]:
    """:func:`msprobe_rows` a column at a time: the header and each column's cells (or numbers,
    :func:`~nbprec.floattext.number_column`)."""
    mode = msprobe_mode(comparison)
    cols = _ms_columns(comparison.columns, mode)
    cols["Result"], cols["Err_message"] = verdicts(cols, mode)
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
