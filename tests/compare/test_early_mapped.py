"""The ``nbprec compare`` command's early worker and msprobe payloads too large to be read whole (1 MiB up to
``RELEASE_FROM``): it maps them, as the readers do, and measures them in the one kernel call the comparison makes on
them (:func:`nbprec.compare.small_pairs.mapped_pair`); the comparison with the worker is the one without it, to
the bit.

The pairs are the msprobe fixtures with a few payloads made large with ``torch.save`` (as msprobe writes them) and
their dump.json entries rewritten to match: one large on the float32 side only, one large on both, one saved as a
transposed view (not contiguous: left to the comparison), one whose recorded maximum is wrong (the kernel's
second pass).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from early_support import assert_same, compare_fresh, needs_two_cores, payload_entries, record_tensor

from nbprec.compare import early
from nbprec.formats import _payload
from nbprec.formats._ptzip import mapped_tensor
from nbprec.formats.msprobe import PayloadLoader

torch = pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
BF16, FP32 = FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix"
#: the large payloads: (shape, how): "plain", "transposed" (saved as a view), "wrong max" (the bench's recorded
#: maximum is not the tensor's)
LARGE = [((512, 640), "plain"), ((1024, 640), "plain"), ((640, 1024), "transposed"), ((1024, 640), "wrong max")]


class _Go:
    def __getitem__(self, i: int) -> int:
        return 0


@pytest.fixture(scope="module")
def large_pair(tmp_path_factory) -> tuple[Path, Path, list[str]]:
    """(target run, bench run, the large payloads' names in LARGE's order)."""
    root = tmp_path_factory.mktemp("mapped")
    runs = {name: root / name.name for name in (BF16, FP32)}
    for source, run in runs.items():
        shutil.copytree(source, run)
    folders = {source: run / "step0" / "rank0" for source, run in runs.items()}
    dumps = {source: json.loads((folder / "dump.json").read_text()) for source, folder in folders.items()}
    t_entries, b_entries = payload_entries(dumps[BF16]), payload_entries(dumps[FP32])
    names = [n for n in t_entries if n in b_entries and ".forward.output." in n][: len(LARGE)]
    generator = torch.Generator().manual_seed(3)
    for name, (shape, how) in zip(names, LARGE, strict=True):
        bench = torch.randn(shape, generator=generator) * 2 + 0.25
        target = (bench + 1e-3 * torch.randn(shape, generator=generator)).to(torch.bfloat16)
        if how == "transposed":  # a view whose storage is laid out the other way round
            target = target.t().contiguous().t()
        torch.save(target, folders[BF16] / "dump_tensor_data" / name)
        torch.save(bench, folders[FP32] / "dump_tensor_data" / name)
        record_tensor(t_entries[name], target, "bfloat16")
        record_tensor(b_entries[name], bench, "float32")
        if how == "wrong max":
            b_entries[name]["Max"] += 1.0
    for source, folder in folders.items():
        (folder / "dump.json").write_text(json.dumps(dumps[source]))
    return runs[BF16], runs[FP32], names


def test_the_worker_measures_the_mapped_pairs(large_pair):
    target, bench, names = large_pair
    records = list(early._pair_records((str(target), str(bench)), _Go()))[1:]  # (the first is the header)
    measured = {os.path.basename(record[0]) for record in records}
    wanted = {name for name, (_shape, how) in zip(names, LARGE, strict=True) if how != "transposed"}
    assert wanted <= measured
    assert names[2] not in measured  # not contiguous: the comparison's reader takes it
    assert len(records) > 100  # (the small pairs too)


@needs_two_cores
def test_the_worker_gives_the_comparison_without_it(large_pair):
    target, bench, _names = large_pair
    plain = compare_fresh(target, bench, "plain")
    whole = compare_fresh(target, bench, "early", wait=1.0)
    records = list(early._pair_records((str(target), str(bench)), _Go()))
    ((taken, _jobs),) = whole["taken"]
    assert taken == len(records) - 1  # every pair it measured fits, the mapped ones too
    assert_same(plain, whole)
    assert_same(plain, compare_fresh(target, bench, "early", wait=0.0))


def test_mapped_tensor_gives_the_tensors_bytes(large_pair):
    _target, bench, names = large_pair
    path = bench / "step0" / "rank0" / "dump_tensor_data" / names[1]
    mapped, start, count = mapped_tensor(str(path), "float32", LARGE[1][0])
    want = torch.load(path, weights_only=True).numpy()
    assert count == want.size
    assert np.frombuffer(mapped, np.float32, count, start).tobytes() == want.tobytes()


def test_mapped_tensor_refuses_what_the_readers_would_not_map(large_pair, tmp_path):
    target, bench, names = large_pair
    folder = bench / "step0" / "rank0" / "dump_tensor_data"
    path, shape = folder / names[1], LARGE[1][0]
    assert mapped_tensor(str(path), "float16", shape) is None  # another dtype
    assert mapped_tensor(str(path), "float32", (640, 1024)) is None  # another shape
    link = tmp_path / "link.pt"
    link.symlink_to(path)
    assert mapped_tensor(str(link), "float32", shape) is None  # a link
    cut = tmp_path / "cut.pt"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert mapped_tensor(str(cut), "float32", shape) is None  # truncated: no directory at its end
    transposed = target / "step0" / "rank0" / "dump_tensor_data" / names[2]
    assert mapped_tensor(str(transposed), "bfloat16", LARGE[2][0]) is None  # not contiguous
    assert mapped_tensor(str(tmp_path / "missing.pt"), "float32", shape) is None


def test_the_loader_says_which_payloads_it_maps_for_one_kernel_call(large_pair, monkeypatch):
    _target, bench, names = large_pair
    folder = bench / "step0" / "rank0"
    loader = PayloadLoader([str(folder)])
    row = {"dtype": "float32", "numel": 1024 * 640, "file": str(folder / "dump_tensor_data" / names[1])}
    assert loader.reads_mapped(row) and not loader.reads_whole(row)
    assert not loader.reads_mapped({**row, "numel": 1000})  # read whole instead
    assert not loader.reads_mapped({**row, "file": str(folder.parent / "elsewhere" / names[1])})  # outside
    monkeypatch.setattr(_payload, "RELEASE_FROM", 1 << 20)  # pages handed back as read: several kernel calls
    assert not loader.reads_mapped(row)


def _table(target: Path, bench: Path, **options) -> dict:
    from nbprec.compare import compare

    comp = compare(target, bench, **options)
    return {name: [repr(v) for v in values] for name, values in comp.columns.items()}  # (repr: NaN equals NaN)


@pytest.mark.parametrize("parallel", ["threads", "processes"])
def test_the_comparison_measures_mapped_pairs_from_their_bytes(large_pair, monkeypatch, parallel):
    """The comparison itself measures a pair of mapped payloads as the worker does (``mapped_pair``: the mapped
    bytes through the one kernel call, no arrays), with the values of the general path to the bit; a pair the
    readers would not map (the transposed one) still goes the general way."""
    from nbprec.compare import engine

    target, bench, names = large_pair
    taken: list[str] = []
    measure = engine.mapped_pair

    def counted(item, wait=True):
        found = measure(item, wait)
        if found:
            taken.append(os.path.basename(item[0]))
        return found

    monkeypatch.setattr(engine, "mapped_pair", counted)
    mapped = _table(target, bench, parallel="threads", workers=1)
    assert sorted(taken) == sorted(
        name for name, (_shape, how) in zip(names, LARGE, strict=True) if how != "transposed"
    )
    assert mapped == _table(target, bench, parallel=parallel, workers=2)  # (forked processes measure them too)
    monkeypatch.setattr(engine, "_mapped_item", lambda *args: None)  # every such pair by its arrays
    assert mapped == _table(target, bench, parallel="threads", workers=1)


def test_a_mapped_payload_cut_short_or_swapped_is_a_recorded_reason(large_pair, tmp_path):
    """A pair the comparison would measure from mapped bytes whose file is cut short, or holds another tensor
    than dump.json says, is refused by the mapped path and read the general way: the row says why, naming the
    file, and every other row is measured as before."""
    from nbprec.compare import compare

    target, bench, names = large_pair
    runs = {run: tmp_path / run.name for run in (target, bench)}
    for run, copy in runs.items():
        shutil.copytree(run, copy)
    folder = runs[bench] / "step0" / "rank0" / "dump_tensor_data"
    cut = folder / names[1]
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    swapped = folder / names[0]  # the (512, 640) payload replaced by the (1024, 640) one: another shape
    swapped.write_bytes((bench / "step0" / "rank0" / "dump_tensor_data" / names[3]).read_bytes())
    before = compare(target, bench, parallel="threads", workers=1).columns
    after = compare(runs[target], runs[bench], parallel="threads", workers=1).columns
    rows = {name: i for i, name in enumerate(after["target_name"].tolist())}
    for name in (names[0], names[1]):
        row = rows[name.removesuffix(".pt")]
        assert "could not read" in after["reason"][row] and name in after["reason"][row], after["reason"][row]
        assert math.isnan(after["cosine"][row])
    others = [i for n, i in rows.items() if n + ".pt" not in (names[0], names[1])]
    assert [repr(after["cosine"][i]) for i in others] == [repr(before["cosine"][i]) for i in others]
