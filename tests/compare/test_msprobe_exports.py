"""nbprec's msprobe-layout CSV against ``msprobe compare``'s own, on real msprobe dumps, in msprobe's three modes.

msprobe's results for bf16 (target) against fp32 (benchmark) are fixtures (tests/fixtures/README.md); the slow
tests run msprobe's CLI from ``bench/.venv-msprobe`` on the same dumps, and on an edited copy that has unmatched
rows and non-finite statistics. Rows are matched by NPU Name; the columns must be msprobe's, in its order; every
cell must agree, numbers to 1e-6 relative and text exactly, except the cells each test names, which nbprec's
comparison table cannot supply (the test says why and checks what it can about them).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import nbprec
from nbprec.compare.comparison import Comparison
from nbprec.compare.exports import MSPROBE_HEADERS, MSPROBE_STAT_DIFFS, MSPROBE_STATS, msprobe_mode

FIXTURES = Path(__file__).parents[1] / "fixtures" / "msprobe"
MSPROBE_VENV = Path(__file__).parents[2] / "bench" / ".venv-msprobe"
F32_EPS = float(np.finfo(np.float32).eps)

#: mode -> target run, benchmark run, folder of msprobe's result, nbprec.compare arguments
CASES = {
    "tensor": ("bf16_tensor_mix", "fp32_tensor_mix", "msprobe_compare_bf16_vs_fp32", {}),
    "statistics": (
        "bf16_statistics_mix",
        "fp32_statistics_mix",
        "msprobe_compare_statistics_bf16_vs_fp32",
        {"step": 0},
    ),
    "checksum": ("bf16_md5_L1", "fp32_md5_L1", "msprobe_compare_md5_bf16_vs_fp32", {"mode": "checksum"}),
}
#: columns nbprec's table lacks in every mode: requires_grad is not in nbprec's dump index, nor is the stack
#: (written N/A, which is what msprobe writes except on the first input row of each call)
NO_REQUIRES_GRAD = {"NPU Requires_grad", "Bench Requires_grad"}
#: cells that come out as the same text as msprobe's, not only the same number: what msprobe rounds (12 decimals,
#: cosine above 0.9999 to 6) and, in statistics mode, every difference, percentage and statistic
SAME_TEXT = {
    "tensor": ["Cosine", "MaxAbsErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio"]
    + ["NPU max", "NPU min", "NPU l2norm", "Bench max", "Bench min", "Bench l2norm"],
    "statistics": MSPROBE_STAT_DIFFS + MSPROBE_STATS,
    "checksum": ["Result", "Err_message"],
}


def _read(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _number(text: str) -> tuple[float, bool] | None:
    try:
        return float(text.removesuffix("%")), text.endswith("%")
    except ValueError:
        return None


def differing_cells(ours: pd.DataFrame, theirs: pd.DataFrame) -> tuple[list[tuple[str, str, str, str]], int]:
    """(NPU Name, column, ours, msprobe's) of every cell that differs, and how many numeric cells agreed."""
    theirs_by_name = theirs.set_index("NPU Name")
    assert theirs_by_name.index.is_unique
    differing, numbers = [], 0
    for row in ours.to_dict("records"):
        other = theirs_by_name.loc[row["NPU Name"]]
        for column, text in row.items():
            if column == "NPU Name":
                continue
            if text == other[column]:
                numbers += _number(text) is not None
                continue
            a, b = _number(text), _number(other[column])
            if a is not None and b is not None and a[1] == b[1] and math.isclose(a[0], b[0], rel_tol=1e-6):
                numbers += 1
                continue
            differing.append((row["NPU Name"], column, text, other[column]))
    return differing, numbers


def check_layout(comp: Comparison, theirs: pd.DataFrame, mode: str, tmp_path: Path) -> list[tuple[str, str, str, str]]:
    """The checks common to every case: msprobe's mode, columns, rows and stack cells. Returns the other
    differing cells for the caller to explain."""
    assert msprobe_mode(comp) == mode
    ours = _read(comp.to_csv(tmp_path / f"ours_{mode}.csv", layout="msprobe"))
    assert list(ours.columns) == list(theirs.columns) == MSPROBE_HEADERS[mode]
    assert ours["NPU Name"].is_unique and set(ours["NPU Name"]) <= set(theirs["NPU Name"])
    # msprobe also writes a row per non-tensor argument (None, Python scalars); nbprec's index holds tensors only
    extra = theirs[~theirs["NPU Name"].isin(ours["NPU Name"])]
    assert extra["NPU Dtype"].map(lambda d: d == "N/A" or d.startswith("<class ")).all()
    assert len(ours) > 2 * len(extra)
    by_name = theirs.set_index("NPU Name").loc[ours["NPU Name"]]
    for column in SAME_TEXT[mode]:
        assert ours[column].tolist() == by_name[column].tolist(), column
    differing, numbers = differing_cells(ours, theirs)
    assert numbers >= (0 if mode == "checksum" else 10 * len(ours)), numbers  # the md5 layout holds no numbers
    rest = []
    for name, column, mine, msprobe in differing:
        if column == "NPU_Stack_Info":  # the stack msprobe puts on a call's first input row
            assert mine == "N/A" and msprobe.startswith("['File "), name
        elif column in NO_REQUIRES_GRAD:
            assert mine == "N/A" and msprobe in ("True", "False"), name
        else:
            rest.append((name, column, mine, msprobe))
    return rest


def _compare(mode: str) -> Comparison:
    target, bench, _, kwargs = CASES[mode]
    return nbprec.compare(FIXTURES / target, FIXTURES / bench, **kwargs)


def _fixture_result(mode: str) -> pd.DataFrame:
    return _read(next((FIXTURES / CASES[mode][2]).glob("compare_result_*.csv")))


def explain_tensor_mode(rest: list[tuple[str, str, str, str]]) -> None:
    """Tensor mode: msprobe's MaxRelativeErr where the benchmark holds zeros (the means are the dumps' own
    recorded Mean, kept beside the payload's float64 mean, so they match)."""
    target_run, bench_run = (nbprec.open(FIXTURES / run) for run in CASES["tensor"][:2])
    zero_bench_rows = set()
    for name, column, mine, msprobe in rest:
        if column == "MaxRelativeErr":
            # where the benchmark is 0 and the target is not, msprobe adds float32's eps to both: |x| / eps. The
            # table's max_rel_err leaves those elements out (METRICS.md); the term needs the elements themselves.
            x = target_run.tensor(name).astype(np.float64).ravel()
            y = bench_run.tensor(name).astype(np.float64).ravel()
            zero = (y == 0) & (x != 0)
            assert zero.any(), name
            expected = max(float(mine), float(np.abs(x[zero]).max()) / F32_EPS)
            assert math.isclose(float(msprobe), expected, rel_tol=1e-6), (name, msprobe, expected)
            zero_bench_rows.add(name)
        else:
            raise AssertionError(f"{name} {column}: nbprec {mine!r}, msprobe {msprobe!r}")
    assert len(zero_bench_rows) >= 10  # the fixture exercises msprobe's convention


def explain_checksum_mode(rest: list[tuple[str, str, str, str]]) -> None:
    """md5 mode: the table carries each side's checksum, so every cell matches."""
    assert rest == []


def test_tensor_mode_matches_msprobe(tmp_path):
    explain_tensor_mode(check_layout(_compare("tensor"), _fixture_result("tensor"), "tensor", tmp_path))


def test_statistics_mode_matches_msprobe(tmp_path):
    assert check_layout(_compare("statistics"), _fixture_result("statistics"), "statistics", tmp_path) == []


def test_md5_mode_matches_msprobe(tmp_path):
    explain_checksum_mode(check_layout(_compare("checksum"), _fixture_result("checksum"), "checksum", tmp_path))


def with_checksums(comp: Comparison) -> Comparison:
    """``comp`` with each side's checksum (CRC-32) from the dumps' indexes as target_/bench_checksum columns."""
    target, bench = (nbprec.open(FIXTURES / run).index.set_index("name")["checksum"] for run in CASES["checksum"][:2])
    table = comp.table.assign(target_checksum=comp.table["target_name"].map(target))
    table["bench_checksum"] = table["bench_name"].map(bench)
    return Comparison(table, rule=comp.rule, meta=comp.meta)


def test_md5_mode_with_checksum_columns_matches_msprobe_everywhere(tmp_path):
    # a table that carries the checksums gets msprobe's NPU MD5 / BENCH MD5 too
    assert check_layout(with_checksums(_compare("checksum")), _fixture_result("checksum"), "checksum", tmp_path) == []


def test_layout_follows_the_compare_mode(tmp_path):
    comp = nbprec.compare(FIXTURES / "bf16_md5_L1", FIXTURES / "fp32_md5_L1")  # auto: statistics are there
    assert msprobe_mode(comp) == "statistics"
    header = _read(comp.to_csv(tmp_path / "auto.csv", layout="msprobe")).columns
    assert list(header) == MSPROBE_HEADERS["statistics"]
    own = _read(comp.to_csv(tmp_path / "own.csv"))  # nbprec's layout keeps nbprec's definitions
    assert "max_rel_diff" in own.columns and "MaxRelativeErr" not in own.columns


def test_each_step_is_judged_on_its_own(tmp_path):
    # msprobe compares one step's dump.json at a time: a two-step export is the two one-step exports
    runs = [FIXTURES / "bf16_statistics_mix", FIXTURES / "fp32_statistics_mix"]
    both = nbprec.compare(*runs)
    rows = _read(both.to_csv(tmp_path / "both.csv", layout="msprobe"))
    steps = both.table["step"].to_numpy()
    assert set(steps) == {0, 1}
    for step in (0, 1):
        alone = _read(nbprec.compare(*runs, step=step).to_csv(tmp_path / f"step{step}.csv", layout="msprobe"))
        pd.testing.assert_frame_equal(rows[steps == step].reset_index(drop=True), alone)


# -- msprobe itself ------------------------------------------------------------------------------------------


def msprobe_cli() -> Path:
    """msprobe's CLI in its virtualenv, or skip saying why."""
    python, cli = MSPROBE_VENV / "bin" / "python", MSPROBE_VENV / "bin" / "msprobe"
    if not (python.exists() and cli.exists()):
        pytest.skip(f"no msprobe virtualenv at {MSPROBE_VENV} (bench/compare.py creates it)")
    probe = subprocess.run([str(python), "-c", "import msprobe, torch"], capture_output=True, text=True, check=False)
    if probe.returncode:
        pytest.skip(f"{MSPROBE_VENV}: `import msprobe, torch` fails: {probe.stderr.strip()[-300:]}")
    return cli


def run_msprobe(cli: Path, target: Path, bench: Path, out: Path) -> pd.DataFrame:
    """``msprobe compare -tp target/dump.json -gp bench/dump.json -o out``, its result CSV."""
    out.mkdir()
    cmd = [str(cli), "compare", "-tp", str(target / "dump.json"), "-gp", str(bench / "dump.json"), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (result,) = out.glob("compare_result_*.csv")
    return _read(result)


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(CASES))
def test_agrees_with_msprobe_run_now(mode, tmp_path):
    target, bench, _, _ = CASES[mode]
    theirs = run_msprobe(
        msprobe_cli(), FIXTURES / target / "step0/rank0", FIXTURES / bench / "step0/rank0", tmp_path / "ms"
    )
    rest = check_layout(_compare(mode), theirs, mode, tmp_path)
    if mode == "tensor":
        explain_tensor_mode(rest)
    elif mode == "checksum":
        explain_checksum_mode(rest)
    else:
        assert rest == []


@pytest.mark.slow
def test_agrees_with_msprobe_on_unmatched_and_non_finite_statistics(tmp_path):
    """Statistics dumps edited so that msprobe's other rules show: an op missing from the benchmark, a dtype msprobe
    does not pair, inf and NaN statistics, a benchmark norm of 0."""
    cli = msprobe_cli()
    runs = {}
    for side, run in (("target", "bf16_statistics_mix"), ("bench", "fp32_statistics_mix")):
        runs[side] = tmp_path / side / "step0" / "rank0"
        shutil.copytree(FIXTURES / run / "step0" / "rank0", runs[side])
    edits = {"target": json.loads((runs["target"] / "dump.json").read_text())}
    edits["bench"] = json.loads((runs["bench"] / "dump.json").read_text())
    data_t, data_b = edits["target"]["data"], edits["bench"]["data"]
    del data_b["Functional.dropout.1.forward"]
    data_b["Functional.embedding.0.forward"]["input_args"][0]["dtype"] = "torch.float32"  # int64 against float32
    data_t["Functional.linear.0.forward"]["output"][0]["Max"] = math.inf
    data_t["Functional.linear.1.forward"]["output"][0].update(Max=math.nan, Min=math.nan, Mean=math.nan)
    data_b["Functional.linear.2.forward"]["output"][0]["Norm"] = 0.0
    for side, data in edits.items():
        (runs[side] / "dump.json").write_text(json.dumps(data, indent=1))
    theirs = run_msprobe(cli, runs["target"], runs["bench"], tmp_path / "ms")
    comp = nbprec.compare(tmp_path / "target", tmp_path / "bench")
    assert check_layout(comp, theirs, "statistics", tmp_path) == []
    rows = theirs.set_index("NPU Name")
    assert rows.loc["Functional.dropout.1.forward.output.0", "Bench Name"] == "N/A"
    assert rows.loc["Functional.linear.0.forward.output.0", "NPU max"] == " inf"
    assert rows.loc["Functional.linear.2.forward.output.0", "NormRelativeErr"] == "inf"


@pytest.mark.parametrize("decimals", [12, 6])
def test_decimals_rounded_is_msprobes_rounding_exactly(decimals):
    """The vectorised rounding gives the bits of ``float(f"{v:.{d}f}")`` (what msprobe's ``round`` gives):
    random values over many scales, half-way values at the last decimal (ties and near-ties, which the fast
    path must leave to the exact one), signed zeros, values too large to scale exactly (those large enough to be
    their own rounding, and those below that bound), NaN and inf."""
    from nbprec.compare.msprobe_layout import decimals_rounded

    rng = np.random.default_rng(7)
    step = 10.0**-decimals
    values = np.concatenate(
        [
            rng.random(50_000),
            rng.standard_normal(50_000) * 10.0 ** rng.integers(-16, 9, 50_000),
            (np.arange(-20_000, 20_000) + 0.5) * step,  # halves of the last decimal
            np.nextafter((np.arange(0, 20_000) + 0.5) * step, np.inf),
            [0.0, -0.0, -1e-300, 4503.599627370496, 4503.6, 1e20, -7.0, np.nan, np.inf, -np.inf],
            rng.uniform(1e3, 1e7, 50_000) * rng.choice([-1.0, 1.0], 50_000),  # around where a value is its own
            2.0 ** np.arange(8, 40),  # rounding, and at powers of two (closer neighbours below)
            np.nextafter(2.0 ** np.arange(8, 40), 0),
            [-np.nan],
        ]
    )
    got = decimals_rounded(values, decimals)
    want = np.array([float(f"{v:.{decimals}f}") for v in values.tolist()])
    both_nan = np.isnan(got) & np.isnan(want)
    assert ((got == want) | both_nan).all()
    assert (np.signbit(got) == np.signbit(want))[~both_nan].all()  # -0.0 stays -0.0, as the text makes it


@pytest.mark.parametrize(
    "names",
    [
        ["Functional.linear.0.forward.input.0", "Tensor.__add__.1.backward.output.0"],  # plain: the direct text
        ["Functional.linear.0.forward.input.0", "it's"],  # a quote, a backslash, a line break, a byte that was not
        ["a\\b", 'say "x"', "tab\there", "re\udcfflu", "\rTensor.0", "=HYPERLINK(1)", "中文.0"],  # UTF-8: repr's
    ],
)
def test_data_name_cells_are_str_of_the_file_pair(names):
    """msprobe's Data_name cell is ``str([target file, bench file])``: built directly for plain names, by ``str``
    for names ``repr`` escapes or quotes otherwise; a row without a benchmark or compared by statistics too."""
    from nbprec.compare.msprobe_layout import _data_names

    benches = [f"{name}_b" for name in names]
    for paired in (True, False):
        for read in (True, False):
            want = [
                str([f"{t}.pt" if read else "-1", (f"{b}.pt" if read else "-1") if paired else "N/A"])
                for t, b in zip(names, benches, strict=True)
            ]
            assert _data_names(names, benches, [paired] * len(names), [read] * len(names)) == want
    assert _data_names(["x"], [None], [False], [True]) == [str(["x.pt", "N/A"])]  # (no bench name at all)


@pytest.mark.parametrize("c", [True, False], ids=["C", "Python"])
def test_shape_texts_are_shape_text_each(monkeypatch, c):
    from nbprec import columns
    from nbprec.compare.msprobe_layout import shape_text, shape_texts

    if not c:
        monkeypatch.setattr(columns, "_shape_texts", None)
    elif columns._shape_texts is None:
        pytest.skip("nbprec._csvjoin is not built")
    shapes = [(2, 8), (2, 8), None, (), [3], (1,), (2, 8), [3], (2.0, 8), (2, 8), (True, 2), (2**70, 1), (-1, 0)]
    shapes += [tuple(range(40)), (np.int64(3),), "x", (2, 8)]
    assert (
        shape_texts(shapes)
        == [shape_text(s) for s in shapes]
        == ["[2, 8]", "[2, 8]", "", "[]", "[3]", "[1]", "[2, 8]", "[3]", "[2.0, 8]", "[2, 8]", "[True, 2]"]
        + ["[1180591620717411303424, 1]", "[-1, 0]", str(list(range(40))), str([np.int64(3)]), "['x']", "[2, 8]"]
    )  # (2.0, 8) equals (2, 8) but is written as it is
    many = [(i % 97, i % 13) for i in range(5000)]  # distinct tuple objects, equal ones among them
    assert shape_texts(many) == [shape_text(s) for s in many]
    shared = (4, 4)
    assert shape_texts([shared] * 3 + [(4, 4)]) == ["[4, 4]"] * 4  # (one object many times, and an equal one)


def test_texts_of_objects_are_made_once_per_object():
    from nbprec.columns import texts_of_objects

    made = []
    a, b = (1, 2), [3]

    def text(value):
        made.append(value)
        return repr(value)

    assert texts_of_objects([a, b, a, b, a], text) == ["(1, 2)", "[3]", "(1, 2)", "[3]", "(1, 2)"]
    assert made == [a, b] and made[0] is a


def test_statistic_diffs_of_a_column_are_each_rows_diff():
    """The column-at-a-time statistic diffs give :func:`_stat_diff`'s texts on every kind of cell: finite
    floats over many scales (equal, of opposite zeros, one a zero benchmark, overflowing differences and relative
    errors), NaN and inf, ints and bools of integer tensors, and msprobe's text cells."""
    from nbprec.compare.msprobe_stats import _stat_diff, percent, stat_diffs

    rng = np.random.default_rng(11)
    scale = 10.0 ** rng.integers(-30, 30, 4000)
    npu = (rng.standard_normal(4000) * scale).tolist()
    bench = [v * (1 + rng.standard_normal() * 1e-3) if i % 3 else v for i, v in enumerate(npu)]  # a third equal
    special = [0.0, -0.0, 1e308, -1e308, 1e-300, 2.5, math.nan, math.inf, -math.inf, 3, 0, True, False]
    special += ["None", "Nan", "N/A", "inf", "-inf", "cpu", "Diff", 5e-324]
    for a in special:
        for b in special:
            npu.append(a)
            bench.append(b)
    want = [_stat_diff(a, b) for a, b in zip(npu, bench, strict=True)]
    diffs, relatives, read_back = stat_diffs(npu, bench)
    assert list(zip(diffs, relatives, strict=True)) == want
    assert sum(d == "0" for d in diffs) > 1000 and any(r.endswith("%") for r in relatives)
    # the numbers msprobe's checks read back from the relative errors: each percentage's, NaN for other text
    parsed = [percent(r) if r.endswith("%") else math.nan for r in relatives]
    np.testing.assert_array_equal(read_back, parsed)
    assert np.isfinite(read_back).sum() > 2000
    # columns of floats only (the usual ones, taken whole): the same cells
    floats_only = stat_diffs(npu[:4000], bench[:4000])
    assert floats_only[:2] == (diffs[:4000], relatives[:4000])
    np.testing.assert_array_equal(floats_only[2], read_back[:4000])


def test_exports_write_the_same_shapes_without_c(tmp_path, monkeypatch, make_mlp_dump):
    """Every file that writes shapes (the three CSV layouts and a saved comparison) is the same, byte for byte,
    whether its shape cells come from C (``nbprec._csvjoin.shape_texts``) or from Python."""
    from nbprec import columns, compare

    if columns._shape_texts is None:
        pytest.skip("nbprec._csvjoin is not built")
    comp = compare(make_mlp_dump(name="t", dtype=np.float16, fault_at=3), make_mlp_dump(name="b"))
    written = {}
    for way in ("C", "Python"):
        if way == "Python":
            monkeypatch.setattr(columns, "_shape_texts", None)
        out = tmp_path / way
        files = [comp.to_csv(out / f"{layout}.csv", layout=layout) for layout in ("nbprec", "msaccucmp", "msprobe")]
        files += sorted(comp.save(out / "saved").glob("*.csv"))
        written[way] = [file.read_bytes() for file in files]
    assert written["C"] == written["Python"]
    shaped = [text for text in written["C"] if re.search(rb'"\[\d+(, \d+)+\]"', text)]
    assert len(shaped) == 3  # msaccucmp's, msprobe's and the saved tensors.csv
