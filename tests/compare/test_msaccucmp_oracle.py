"""nbprec's metrics, storage-format conversions and msaccucmp CSV against CANN's msaccucmp itself.

msaccucmp (PyPI ``mindstudio-probe``, loaded by path through :mod:`msaccucmp_oracle`) is the tool whose
definitions METRICS.md follows. Its algorithms (``alg_*.py``) are called the way its ``AlgorithmManager``
calls them for one tensor pair: both tensors flattened (``TensorConversion`` returns ``array.flatten()``),
cast to float32 unless both are bool (``AlgorithmManager.compare``), an ``AlgorithmParameter`` whose
``__dict__`` holds ``my_output_dump_file``, ``ground_truth_dump_file`` and ``shape_type`` (the converted NPU
shape through its own ``get_shape_type``), numpy errors ignored, and an exception turning into ``NaN``.

Two tiers:

- **As msaccucmp runs** (float32, its 6-decimal strings): nbprec computes in float64 (METRICS.md: "at least
  float32 with float64 accumulation"), msaccucmp casts both sides to float32 and sums in float32, so the two
  agree to half a unit of the 6th decimal (5e-7, the formatting) plus a first-order bound of msaccucmp's
  float32 rounding (:func:`float32_budget`).
- **Their formulas in float64, every digit** (``format_value`` of this private copy of msaccucmp swapped for
  ``repr``): the definitions themselves, to rtol 1e-6 (observed: 2e-10 at worst).

``StandardDeviation`` prints ``(mean;std),(mean;std)`` with ``%.3f`` and zeroes values below 0.001
(``ConstManager.MINIMUM_VALUE``): checked to that resolution in both tiers.
"""

from __future__ import annotations

import contextlib
import csv
import math
import re
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from msaccucmp_oracle import load_msaccucmp

import nbprec
from nbprec.compare.metrics import tensor_metrics
from nbprec.demo.npu import NpuDemo, make_npu_demo

#: msaccucmp algorithm -> nbprec column (StandardDeviation is four columns, checked apart)
COLUMNS = {
    "CosineSimilarity": "cosine",
    "MaxAbsoluteError": "max_abs_err",
    "AccumulatedRelativeError": "accumulated_rel_err",
    "RelativeEuclideanDistance": "rel_euclidean",
    "KullbackLeiblerDivergence": "kl_divergence",
    "MeanAbsoluteError": "mean_abs_err",
    "RootMeanSquareError": "rmse",
    "MaxRelativeError": "max_rel_err",
    "MeanRelativeError": "mean_rel_err",
}
STD = "StandardDeviation"
STD_COLUMNS = ("target_mean", "target_std", "bench_mean", "bench_std")
FORMAT_ATOL = 5e-7 + 1e-12  # half a unit of '{:.6f}' (and the parse's own rounding)
FLOAT64_RTOL = 1e-6
UNIT = 2.0**-24  # float32 unit roundoff
STD_ATOL = 5e-4  # half a unit of '%.3f'
STD_MINIMUM = 1e-3  # msaccucmp writes 0.000 below this
# msaccucmp converters for the demo's storage formats, by (storage format, origin format)
CONVERTERS = {
    ("NC1HWC0", "NHWC"): "NC1HWC0_to_NHWC",
    ("FRACTAL_Z", "HWCN"): "FRACTAL_Z_to_HWCN",
    ("FRACTAL_NZ", "ND"): "FRACTAL_NZ_to_ND",
}


# --- msaccucmp, called as its AlgorithmManager calls it ------------------------------------------------


@pytest.fixture(scope="module")
def algorithms() -> dict:
    modules, reason = load_msaccucmp("algorithms", [*COLUMNS, STD])
    if modules is None:
        pytest.skip(reason)
    missing = {*COLUMNS, STD} - set(modules)
    assert not missing, f"this msaccucmp lacks the algorithms {sorted(missing)}"
    return modules


@contextlib.contextmanager
def every_digit(algorithms: dict):
    """msaccucmp's results with every digit: its ``format_value`` ('{:.6f}') swapped for ``repr`` while inside.
    The algorithm modules share one ``cmp_utils.utils`` (this test's private copy, see msaccucmp_oracle)."""
    utils = algorithms["CosineSimilarity"].utils
    saved = utils.format_value
    utils.format_value = lambda value: repr(float(value))
    try:
        yield
    finally:
        utils.format_value = saved


def msaccucmp_compare(algorithms: dict, target: np.ndarray, bench: np.ndarray, dtype: str = "float32") -> dict:
    """``{algorithm: (result string, message)}`` for one pair, as msaccucmp computes it (``dtype`` float32, or
    float64 for the definitions alone)."""
    any_module = algorithms["CosineSimilarity"]
    x, y = np.asarray(target).flatten(), np.asarray(bench).flatten()
    if not (x.dtype == np.bool_ and y.dtype == np.bool_):
        x, y = np.array(x).astype(dtype), np.array(y).astype(dtype)
    args = any_module.AlgorithmParameter()
    args.__dict__ = {
        "my_output_dump_file": "npu_dump",
        "ground_truth_dump_file": "ground_truth.npy",
        "shape_type": any_module.utils.get_shape_type(list(np.shape(target))),
    }
    out = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for name in [*COLUMNS, STD]:
            try:
                out[name] = algorithms[name].compare(x, y, args)
            except Exception as exc:  # msaccucmp turns any failure into NaN and a message
                out[name] = ("NaN", f"{type(exc).__name__}: {exc}")
    return out


def parse_std(text: str) -> tuple[float, ...]:
    """msaccucmp's '(mean;std),(mean;std)' as four floats (NaN when it wrote NaN)."""
    if text == "NaN":
        return (math.nan,) * 4
    left, right = text.split("),(")
    return tuple(float(v) for part in (left, right) for v in part.strip("()").split(";"))


def assert_close(ours: float, theirs: float, atol: float, rtol: float, what: str) -> None:
    if math.isnan(ours) or math.isnan(theirs):
        assert math.isnan(ours) and math.isnan(theirs), f"{what}: nbprec {ours!r}, msaccucmp {theirs!r}"
        return
    assert abs(ours - theirs) <= atol + rtol * abs(ours), f"{what}: nbprec {ours!r}, msaccucmp {theirs!r}"


def float32_budget(name: str, target: np.ndarray, bench: np.ndarray, value: float) -> float:
    """How far msaccucmp's float32 arithmetic may move ``name`` from its float64 ``value``: a first-order
    bound on the rounding of its numpy expressions (pairwise sums add ``log2(n)`` units; a relative-error
    term ``abs(x / y - 1)`` is off by a unit of ``abs(x / y)``, not of itself)."""
    x, y = (np.asarray(a, dtype=np.float64).ravel() for a in (target, bench))
    depth = math.log2(max(x.size, 2)) + 4
    if name in ("AccumulatedRelativeError", "MeanRelativeError", "MaxRelativeError"):
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(np.abs(y) > np.finfo(np.float64).eps, np.abs(x / y), 0.0)
        spread = {"AccumulatedRelativeError": ratio.sum(), "MeanRelativeError": ratio.mean()}.get(name, ratio.max())
        return UNIT * (float(spread) + depth * abs(value))
    if name == "CosineSimilarity":  # a sum of normalised products: at most 1 in absolute value
        return 2 * depth * UNIT
    if name == "KullbackLeiblerDivergence":  # both sides normalised by float32 sums, then logarithms of ratios
        return 2 * depth * UNIT * (1 + abs(value))
    return depth * UNIT * abs(value)  # max/mean absolute error, RMSE, RED: relative to the value


def assert_std_agrees(values: dict, text: str, what: str) -> None:
    """nbprec's means and standard deviations against msaccucmp's '(%.3f;%.3f),(%.3f;%.3f)'."""
    for column, theirs in zip(STD_COLUMNS, parse_std(text), strict=True):
        ours = float(values[column])
        if abs(ours) < STD_MINIMUM:  # msaccucmp's display rule, not a difference in the value
            assert theirs == 0.0, f"{what} {column}: nbprec {ours!r} is below 0.001, msaccucmp wrote {text}"
        else:
            assert_close(ours, theirs, STD_ATOL + 1e-12, 0.0, f"{what} {column}")


def assert_agrees(
    algorithms: dict, target: np.ndarray, bench: np.ndarray, values: dict, what: str, skip: tuple[str, ...] = ()
) -> None:
    """Every msaccucmp metric of the pair (but ``skip``) against nbprec's ``values`` (column -> float), in both
    tiers."""
    columns = {name: column for name, column in COLUMNS.items() if name not in skip}
    theirs = msaccucmp_compare(algorithms, target, bench, "float32")
    for name, column in columns.items():
        ours = float(values[column])
        atol = FORMAT_ATOL + float32_budget(name, target, bench, ours)
        assert_close(ours, float(theirs[name][0]), atol, 0.0, f"{what} {name}")
    assert_std_agrees(values, theirs[STD][0], f"{what} float32")
    with every_digit(algorithms):
        exact = msaccucmp_compare(algorithms, target, bench, "float64")
    for name, column in columns.items():
        assert_close(float(values[column]), float(exact[name][0]), 1e-15, FLOAT64_RTOL, f"{what} {name} (float64)")
    assert_std_agrees(values, exact[STD][0], f"{what} float64")


def test_loading_msaccucmp_leaves_no_modules_behind(algorithms) -> None:
    # its files import cmp_utils / algorithm_manager as top-level packages; msprobe's own __init__ never runs
    leaked = {name.split(".")[0] for name in sys.modules} & {"cmp_utils", "algorithm_manager", "format_manager"}
    assert not leaked
    assert algorithms["CosineSimilarity"].utils.format_value(0.5) == "0.500000"


# --- the NPU demo case: every matched pair -------------------------------------------------------------


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> NpuDemo:
    return make_npu_demo(tmp_path_factory.mktemp("npu-demo-msaccucmp"))


@pytest.fixture(scope="module")
def comparison(case: NpuDemo) -> nbprec.Comparison:
    return nbprec.compare(case.npu, case.tf, graph=case.graph)


@pytest.fixture(scope="module")
def dumps(case: NpuDemo) -> tuple[nbprec.Dump, nbprec.Dump]:
    return nbprec.open(case.npu, format="cann", graph=case.graph), nbprec.open(case.tf)


def matched_rows(comparison: nbprec.Comparison):
    table = comparison.table
    rows = table[table["compare_mode"] == "tensor"]
    assert len(rows) >= 30 and (rows["bench_name"] != "").all()
    return rows


def test_every_matched_demo_pair_agrees_with_msaccucmp(algorithms, comparison, dumps) -> None:
    npu, tf = dumps
    rows = matched_rows(comparison)
    for _, row in rows.iterrows():
        x, y = npu.tensor(row["target_name"]), tf.tensor(row["bench_name"])
        assert x.shape == y.shape
        assert_agrees(algorithms, x, y, row.to_dict(), row["target_name"])
    # the demo covers what matters: float16 against float32, storage formats, the planted faults
    assert set(rows["target_dtype"]) == {"float16", "float32"}
    assert (rows["cosine"] < 0.95).any() and (rows["max_rel_err"] > 1e3).any()


def test_demo_storage_formats_convert_as_msaccucmp_converts(case, dumps) -> None:
    modules, reason = load_msaccucmp("converters", sorted(set(CONVERTERS.values())))
    if modules is None:
        pytest.skip(reason)
    npu = dumps[0]
    stored = nbprec.open(case.npu, format="cann", graph=case.graph, layout="storage")
    index = npu.index.set_index("name")
    seen = set()
    for name, row in index.iterrows():
        key = (row["storage_format"], row["origin_format"])
        if row["storage_format"] not in ("NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ"):
            continue
        assert key in CONVERTERS, f"{name}: no msaccucmp converter listed for {key}"
        convert = modules[CONVERTERS[key]].convert
        flat = stored.tensor(name).ravel()
        theirs = convert(list(row["storage_shape"]), list(row["shape"]), flat)
        if key[0] == "NC1HWC0":  # their converter keeps the C1*C0 channels; msaccucmp's slice_data cuts them
            theirs = theirs[..., : row["shape"][-1]]
        ours = npu.tensor(name)
        assert ours.shape == tuple(row["shape"])
        # their NZ converter returns [N, C] for rank <= 2 and [B, N, C] above: compare the values in order
        assert np.asarray(theirs).size == ours.size, name
        bits = np.dtype(f"u{ours.dtype.itemsize}")  # NaN payloads and signed zeros compare exactly
        assert np.array_equal(ours.ravel().view(bits), np.ravel(theirs).view(bits)), name
        seen.add(key[0])
    assert seen == {"NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ"}


# --- edge cases ------------------------------------------------------------------------------------------


def _edge_cases() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(11)
    bench = rng.standard_normal(3000).astype(np.float32)
    relu = np.maximum(bench, 0)  # half of the benchmark is exactly zero
    near = relu.astype(np.float16)
    near[relu == 0] = np.float16(1e-3) * rng.integers(0, 2, int((relu == 0).sum()))  # nonzero against zeros
    wide = (rng.standard_normal(5000) * np.exp(rng.uniform(-12, 10, 5000))).astype(np.float32)
    return {
        "zeros in the benchmark": (near, relu),
        "target all zero": (np.zeros(500, np.float16), bench[:500]),
        "benchmark all zero": (bench[:500].astype(np.float16), np.zeros(500, np.float32)),
        "both all zero": (np.zeros((4, 8), np.float16), np.zeros((4, 8), np.float32)),
        "constant pair": (np.full((16, 16), 2.0, np.float16), np.full((16, 16), 2.001, np.float32)),
        "float16 against float32": (wide.astype(np.float16), wide),
        "bfloat16 against float32": (wide.astype(ml_dtypes.bfloat16), wide),
        "one element": (np.array([3.0], np.float16), np.array([2.5], np.float32)),
    }


@pytest.mark.parametrize("label", list(_edge_cases()))
def test_edge_cases_agree_with_msaccucmp(algorithms, label) -> None:
    target, bench = _edge_cases()[label]
    result = tensor_metrics(target, bench)
    assert_agrees(algorithms, target, bench, result.values, label)
    theirs = msaccucmp_compare(algorithms, target, bench)
    if label in ("target all zero", "benchmark all zero"):
        # both leave cosine undefined and say why
        assert theirs["CosineSimilarity"][0] == "NaN" and "All the data is zero" in theirs["CosineSimilarity"][1]
        assert "all zero" in result.reason and "cosine undefined" in result.reason
    if label == "one element":  # both call a one-element tensor a scalar with cosine 1
        assert theirs["CosineSimilarity"] == ("1.000000", "This tensor is scalar.") and result["cosine"] == 1.0


def test_a_norm_below_eps_counts_as_zero_for_cosine_as_nbprec_documents(algorithms) -> None:
    # A documented difference: nbprec counts a tensor whose L2 norm is <= eps (2.22e-16) as all zero
    # (nbprec/compare/metrics.py, "like msprobe"); msaccucmp's cosine tests the square root of the norm
    # against eps (norm <= 4.9e-32). A float32 target of 1e-20s against a normal benchmark: nbprec leaves the
    # cosine undefined and says why, msaccucmp computes it; every other metric agrees.
    bench = np.random.default_rng(3).standard_normal(64).astype(np.float32)
    target = np.full(64, 1e-20, np.float32)
    result = tensor_metrics(target, bench)
    assert math.isnan(result["cosine"]) and "target is all zero" in result.reason
    theirs = float(msaccucmp_compare(algorithms, target, bench)["CosineSimilarity"][0])
    expected = float(bench.astype(np.float64).sum() / math.sqrt(64) / np.linalg.norm(bench.astype(np.float64)))
    assert abs(theirs - expected) <= FORMAT_ATOL + 1e-6
    assert_agrees(algorithms, target, bench, result.values, "target of norm 8e-20", skip=("CosineSimilarity",))


def test_rel_euclidean_of_a_benchmark_whose_norm_is_below_eps(algorithms) -> None:
    """As msaccucmp, RED is 0 once the benchmark's L2 norm is at most eps (nbprec once gave 1.0e-3 here)."""
    rng = np.random.default_rng(3)
    bench = (rng.standard_normal(64) * 1e-18).astype(np.float32)
    target = (bench * (1 + 1e-3 * rng.standard_normal(64))).astype(np.float32)
    assert_agrees(algorithms, target, bench, tensor_metrics(target, bench).values, "benchmark of norm 8e-18")


def test_benchmark_sixteen_orders_of_magnitude_below_the_target(algorithms) -> None:
    """KL's log of two far-apart sums (nbprec once took log1p(-1) here and reported "could not compare")."""
    rng = np.random.default_rng(3)
    target = rng.standard_normal(1000).astype(np.float16)
    bench = (rng.standard_normal(1000) * 1e-17).astype(np.float32)
    assert_agrees(algorithms, target, bench, tensor_metrics(target, bench).values, "benchmark of scale 1e-17")


# --- nbprec's msaccucmp-layout CSV ----------------------------------------------------------------------


def msaccucmp_header(algorithms: dict) -> list[str]:
    """The header msaccucmp writes comparing with ``--range`` and overflow detection, from its own constants:
    ``Index``, the op columns, ``Shape``, one column per algorithm, ``CompareFailReason``, with ``OpSequence``
    at its index (range) and ``OverFlow`` after ``Shape`` (``compare_result.get_result_title``)."""
    const = algorithms["CosineSimilarity"].ConstManager
    header = ["Index", *const.VECTOR_COMPARE_HEADER, "Shape", *const.BUILT_IN_ALGORITHM, "CompareFailReason"]
    header.insert(header.index("Shape") + 1, "OverFlow")
    header.insert(const.OP_SEQUENCE_INDEX, const.OP_SEQUENCE)
    return header


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="", encoding="utf-8") as fh:
        header, *rows = list(csv.reader(fh))
    return header, rows


def test_msaccucmp_csv_header_and_metric_cells_equal_msaccucmp(algorithms, comparison, dumps, tmp_path) -> None:
    header, rows = read_csv(comparison.to_csv(tmp_path / "result.csv", layout="msaccucmp"))
    theirs_header = msaccucmp_header(algorithms)
    # msaccucmp drops a side's Address column when that side's dump folder holds .npy files
    # (vector_comparison._pre_handle_header); nbprec writes no addresses at all (FORMATS.md section 6 lists
    # [Address] as optional), so its header is msaccucmp's for .npy dumps on both sides.
    assert theirs_header.count("Address") == 2
    assert header == [c for c in theirs_header if c != "Address"]
    npu, tf = dumps
    table = comparison.table
    compared = 0
    for cells in rows:
        row = table.iloc[int(cells[header.index("Index")])]
        assert cells[header.index("TensorIndex")] == row["target_name"]  # msaccucmp's '{op}:{input|output}:{i}'
        if row["compare_mode"] != "tensor":
            continue
        x, y = npu.tensor(row["target_name"]), tf.tensor(row["bench_name"])
        theirs = msaccucmp_compare(algorithms, x, y)
        for name in COLUMNS:
            ours = float(cells[header.index(name)])
            atol = FORMAT_ATOL + float32_budget(name, x, y, ours)
            assert_close(ours, float(theirs[name][0]), atol, 0.0, f"{row['target_name']} {name} cell {ours!r}")
        compared += 1
    assert compared == len(matched_rows(comparison))


def test_msaccucmp_csv_standard_deviation_cells_equal_msaccucmp(algorithms, comparison, dumps, tmp_path) -> None:
    """The StandardDeviation cell as msaccucmp writes it: '(mean;std),(mean;std)', '%.3f' each."""
    header, rows = read_csv(comparison.to_csv(tmp_path / "result.csv", layout="msaccucmp"))
    npu, tf = dumps
    layout = re.compile(r"\((-?[0-9.]+|NaN);(-?[0-9.]+|NaN)\),\((-?[0-9.]+|NaN);(-?[0-9.]+|NaN)\)")
    for cells in rows:
        row = comparison.table.iloc[int(cells[header.index("Index")])]
        cell = cells[header.index(STD)]
        assert layout.fullmatch(cell), f"{row['target_name']}: {cell!r} is not msaccucmp's '(mean;std),(mean;std)'"
        theirs = msaccucmp_compare(algorithms, npu.tensor(row["target_name"]), tf.tensor(row["bench_name"]))
        ours = parse_std(cell)
        assert np.allclose(ours, parse_std(theirs[STD][0]), rtol=0, atol=STD_ATOL + 1e-12, equal_nan=True)
