"""``small_pair`` (the usual msprobe pair measured without making its arrays) gives what ``tensor_metrics`` gives on
the pair's arrays, to the bit (NaN and inf included; a NaN's sign aside, which ``repr`` does not show), and steps
aside for every pair it does not measure that way."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from damaged_msprobe import damaged_copy

import nbprec
from nbprec.compare.metrics import tensor_metrics
from nbprec.compare.small_pairs import small_pair, small_pairs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
SCENARIOS = FIXTURES / "scenarios"
NON_FINITE = "non_finite_values"  # (a damaged copy of the first pair's target: see _pairs)
PAIRS = [
    (FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix"),
    (FIXTURES / "fp16_tensor_mix", FIXTURES / "fp32_tensor_mix"),
    (FIXTURES / "autocast_bf16_tensor_mix", FIXTURES / "fp32_tensor_mix"),
    (SCENARIOS / "fault_tensor", SCENARIOS / "fp32_tensor"),
    (SCENARIOS / "dropout_tensor_a", SCENARIOS / "dropout_tensor_b"),
]


def _rows(target: Path, bench: Path):
    """(target dump, bench dump, [(target row, bench row)]) of the tensors both record under the same name."""
    t_dump, b_dump = nbprec.open(target), nbprec.open(bench)
    b_pos = {name: i for i, name in enumerate(b_dump.columns["name"].tolist())}
    pairs = [
        (t_dump.columns.row(i), b_dump.columns.row(b_pos[name]))
        for i, name in enumerate(t_dump.columns["name"].tolist())
        if name in b_pos
    ]
    return t_dump, b_dump, pairs


def _measure_both(t_dump, b_dump, t_row, b_row):
    extremes = (t_row["min"], t_row["max"], b_row["min"], b_row["max"])
    small = small_pair(
        str(t_row["file"]), t_row["dtype"], str(b_row["file"]), b_row["dtype"], tuple(t_row["shape"]), extremes
    )
    try:
        x, y = t_dump.tensor(t_row), b_dump.tensor(b_row)
    except nbprec.NbprecError:
        return small, None
    return small, tensor_metrics(x, y, extremes=extremes)


@pytest.mark.parametrize(("target", "bench"), [*PAIRS, (NON_FINITE, PAIRS[0][1])], ids=lambda p: getattr(p, "name", p))
def test_small_pair_is_tensor_metrics_on_the_arrays(target, bench, tmp_path):
    """Every pair of real runs, and of a run whose payloads hold NaN and inf (recorded as msprobe records them, or
    with finite statistics)."""
    if target == NON_FINITE:
        target = damaged_copy(tmp_path, PAIRS[0][0], NON_FINITE)
    t_dump, b_dump, pairs = _rows(target, bench)
    measured = counted = 0
    for t_row, b_row in pairs:
        if not (t_row["has_data"] and b_row["has_data"]):
            continue
        small, reference = _measure_both(t_dump, b_dump, t_row, b_row)
        if small is None:
            continue
        measured += 1
        values, reason, held, counts = small
        assert reference is not None, t_row["name"]
        assert {k: repr(v) for k, v in values.items()} == {k: repr(v) for k, v in reference.values.items()}, t_row[
            "name"
        ]
        assert reason == reference.reason and held == reference.extremes_held, t_row["name"]
        assert counts == reference.nonfinite, t_row["name"]
        counted += counts != (0, 0)
    assert measured > len(pairs) // 2, (measured, len(pairs))
    assert counted >= (6 if "non_finite" in str(target) else 0), counted


def test_small_pair_steps_aside(tmp_path):
    """Pairs it does not measure: other dtypes or shapes than said, damaged or linked files. Wrong extremes are
    measured (a second pass), and so are unusable ones (found first); NaN inside is counted, and an all-zero side
    says why cosine is missing."""
    t_dump, b_dump, pairs = _rows(FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix")
    t_row, b_row = next((t, b) for t, b in pairs if t["has_data"] and t["numel"] > 16 and t["dtype"] == "bfloat16")
    args = (str(t_row["file"]), "bfloat16", str(b_row["file"]), b_row["dtype"], tuple(t_row["shape"]))
    extremes = (t_row["min"], t_row["max"], b_row["min"], b_row["max"])
    right = small_pair(*args, extremes)
    assert right is not None
    unusable = small_pair(*args, (math.nan, *extremes[1:]))  # hints not usable: the extremes found first
    assert unusable is not None and unusable[2] is None
    assert {k: repr(v) for k, v in unusable[0].items()} == {k: repr(v) for k, v in right[0].items()}
    assert small_pair(args[0], "float16", *args[2:], extremes) is None  # another dtype than the payload's
    assert small_pair(*args[:4], (*args[4], 1), extremes) is None  # another shape
    wrong = small_pair(*args, (extremes[0] - 1, *extremes[1:]))  # wrong extremes: measured again, same values
    assert wrong is not None and wrong[2] is False
    assert {k: repr(v) for k, v in wrong[0].items()} == {k: repr(v) for k, v in small_pair(*args, extremes)[0].items()}
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(Path(args[0]).read_bytes()[:-64])
    assert small_pair(str(truncated), *args[1:], extremes) is None
    linked = tmp_path / "linked.pt"
    linked.symlink_to(args[0])
    assert small_pair(str(linked), *args[1:], extremes) is None  # a link is the reader's to check
    nan_file = tmp_path / "nan.pt"
    _fill_payload(Path(args[0]), nan_file, b"\xc0\x7f")  # bfloat16 NaN in every element
    nans = small_pair(str(nan_file), *args[1:], extremes)  # counted from the bits
    numel = math.prod(args[4])
    assert nans is not None and nans[3] == (numel, 0)
    assert nans[1] == f"non-finite values: target has {numel} NaN, 0 inf"
    assert math.isnan(nans[0]["cosine"]) and math.isnan(nans[0]["thousandth_ratio"])
    zeros = tmp_path / "zeros.pt"
    _fill_payload(Path(args[0]), zeros, b"\x00\x00")
    zero = small_pair(str(zeros), *args[1:], (0.0, 0.0, *extremes[2:]))
    reference = tensor_metrics(
        nbprec.formats._pt.read_small_pt(str(zeros), t_dump.tensor(t_row).dtype, args[4]),
        b_dump.tensor(b_row),
        extremes=(0.0, 0.0, *extremes[2:]),
    )
    assert zero is not None and zero[1] == reference.reason and "all zero" in zero[1]


def test_small_pairs_is_small_pair_of_each(tmp_path):
    """The batch form (one kernel call for all, as threads measure a batch) gives each pair what ``small_pair``
    gives it, to the bit, on real pairs and on the pairs ``small_pair`` steps aside for or measures twice; and it
    takes the payloads read ahead, reading none itself."""
    from nbprec.formats import _files, _ptzip

    items = []
    for target, bench in PAIRS[:3]:
        _t_dump, _b_dump, pairs = _rows(target, bench)
        items += [
            (str(t["file"]), t["dtype"], str(b["file"]), b["dtype"], tuple(t["shape"]),
             (t["min"], t["max"], b["min"], b["max"]))
            for t, b in pairs if t["has_data"] and b["has_data"]
        ]  # fmt: skip
    t_file, t_dtype, b_file, b_dtype, shape, extremes = next(i for i in items if i[1] == "bfloat16" and len(i[4]) > 1)
    nan_file = tmp_path / "nan.pt"
    _fill_payload(Path(t_file), nan_file, b"\xc0\x7f")
    items += [
        (t_file, t_dtype, b_file, b_dtype, shape, (extremes[0] - 1, *extremes[1:])),  # wrong: measured again
        (t_file, t_dtype, b_file, b_dtype, shape, (math.nan, *extremes[1:])),  # not usable: found first
        (str(nan_file), t_dtype, b_file, b_dtype, shape, extremes),  # NaN inside: counted
        (t_file, "float16", b_file, b_dtype, shape, extremes),  # another dtype: None
        (str(tmp_path / "missing.pt"), t_dtype, b_file, b_dtype, shape, extremes),
    ]
    singles = [small_pair(*item) for item in items]
    paths = [path for item in items for path in (item[0], item[2])]
    _files.read_ahead(paths)
    try:
        reads = []
        real = _ptzip._read_small_c
        _ptzip._read_small_c = lambda path, limit, wait=True: reads.append(path) or real(path, limit, wait)
        try:
            batch = small_pairs(items)
        finally:
            _ptzip._read_small_c = real
    finally:
        _files.forget_ahead()
    assert sum(found is not None for found in batch) > len(items) // 2
    assert [found is None for found in batch] == [found is None for found in singles]
    once = {path for path in paths if paths.count(path) == 1} - {str(tmp_path / "missing.pt")}
    assert not once & set(reads), reads  # (a path read ahead is taken once: a second item reads it again)
    for found, single in zip(batch, singles, strict=True):
        if found is not None:
            assert {k: repr(v) for k, v in found[0].items()} == {k: repr(v) for k, v in single[0].items()}
            assert found[1:] == single[1:]
    assert batch[-5][2] is False and small_pairs([]) == []


def _fill_payload(source: Path, to: Path, element: bytes) -> None:
    """A copy of the small ``.pt`` archive ``source`` whose tensor holds ``element`` (its bytes) everywhere."""
    from nbprec.formats._ptzip import _small_archive, _tensor_entry

    head, entries = _small_archive(str(source))
    _description, (start, nbytes) = _tensor_entry(-1, len(head), head, entries)
    data = bytearray(head)
    data[start : start + nbytes] = element * (nbytes // len(element))
    shutil.copy(source, to)
    to.write_bytes(bytes(data))
