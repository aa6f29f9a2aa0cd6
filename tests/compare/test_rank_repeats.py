"""Data-parallel ranks hold many tensors alike (the parameters, the gradients an all-reduce gave every rank): the
comparison takes the ranks' pairs in turns, so that such a pair comes just after the same pair of another rank and
takes its values (``nbprec.compare.small_pairs``), mapped payloads of 1 MiB and more included; the early worker
takes them in the same order (``early_msprobe.candidates``, ``workers.in_turns``). The tables are those of a
comparison measuring every pair, to the bit.

The runs are the msprobe fixtures copied to two ranks, with large payloads: one the ranks hold alike, and one that
differs on rank 1 only by two of its target's values swapped (the same recorded statistics: only the bytes tell).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from early_support import assert_same, compare_fresh, needs_two_cores, payload_entries, record_tensor

import nbprec
from nbprec.compare import early_msprobe
from nbprec.compare.small_pairs import RECENT, mapped_pair
from nbprec.compare.workers import in_turns

torch = pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
BF16, FP32 = FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix"
SHAPE = (1024, 512)  # 2 MiB as float32, 1 MiB as bfloat16: mapped on both sides


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> tuple[Path, Path, list[str]]:
    """(target run, bench run, the large payloads' names: held alike, differing on rank 1)."""
    root = tmp_path_factory.mktemp("ranks")
    generator = torch.Generator().manual_seed(11)
    runs = {source: root / source.name for source in (BF16, FP32)}
    dumps = {source: json.loads((source / "step0" / "rank0" / "dump.json").read_text()) for source in runs}
    t_entries, b_entries = payload_entries(dumps[BF16]), payload_entries(dumps[FP32])
    names = [n for n in t_entries if n in b_entries and ".forward.output." in n][:2]
    payloads = {}
    for name in names:
        bench = torch.randn(SHAPE, generator=generator)
        target = (bench * (1 + 1e-2 * torch.randn(SHAPE, generator=generator))).to(torch.bfloat16)
        payloads[name] = (target, bench)
        record_tensor(t_entries[name], target, "bfloat16")
        record_tensor(b_entries[name], bench, "float32")
    for source, run in runs.items():
        for rank in ("rank0", "rank1"):
            folder = run / "step0" / rank
            shutil.copytree(source / "step0" / "rank0", folder)
            (folder / "dump.json").write_text(json.dumps(dumps[source]))
            for name, tensors in payloads.items():
                tensor = tensors[source is FP32]
                if rank == "rank1" and name == names[1] and source is BF16:
                    tensor = tensor.clone()
                    flat = tensor.view(-1)
                    flat[[10, 20]] = flat[[20, 10]]  # other bytes, the same statistics
                torch.save(tensor, folder / "dump_tensor_data" / name)
    return runs[BF16], runs[FP32], names


def _folder(candidate: tuple) -> str:
    return Path(candidate[0]).parent.parent.name


def test_the_worker_takes_the_ranks_in_turns(two_ranks):
    target, bench, _names = two_ranks
    found = list(early_msprobe.candidates((str(target), str(bench))))
    ranks = [
        list(early_msprobe._pairs(t, b, None)) for t, b in early_msprobe._paired_dump_jsons(str(target), str(bench))
    ]
    assert [len(pairs) for pairs in ranks] == [len(found) // 2] * 2
    assert [_folder(c) for c in found] == ["rank0", "rank1"] * (len(found) // 2)
    assert found[::2] == ranks[0] and found[1::2] == ranks[1]
    single = list(early_msprobe.candidates((str(BF16), str(FP32))))  # one dump.json a side: as it comes
    assert single == list(early_msprobe._pairs(*early_msprobe._paired_dump_jsons(str(BF16), str(FP32))[0], None))


def test_the_worker_takes_steps_one_after_the_other(tmp_path):
    """Two steps of two ranks: each step's ranks in turns, step 0 before step 1; two steps of one rank: as they
    come, step by step."""
    for ranks in (("rank0", "rank1"), ("rank0",)):
        runs = {}
        for source in (BF16, FP32):
            run = runs[source] = tmp_path / "-".join(ranks) / source.name
            for step in ("step0", "step1"):
                for rank in ranks:
                    shutil.copytree(source / "step0" / "rank0", run / step / rank)
        found = list(early_msprobe.candidates((str(runs[BF16]), str(runs[FP32]))))
        places = [Path(c[0]).parent.parent.relative_to(runs[BF16]).as_posix() for c in found]
        half = len(found) // 2
        assert places[:half] == [f"step0/{rank}" for _ in range(half // len(ranks)) for rank in ranks]
        assert places[half:] == [f"step1/{rank}" for _ in range(half // len(ranks)) for rank in ranks]


def test_the_comparison_takes_its_jobs_in_the_workers_order(two_ranks):
    """The engine's jobs in the table's order (each rank's, rank by rank) come out of ``in_turns`` in the worker's
    order; folders of other lengths take their turns while they last; jobs of one folder, and jobs that are not
    tensor jobs, keep their order."""
    target, bench, _names = two_ranks
    found = list(early_msprobe.candidates((str(target), str(bench))))
    files = [c[0] for c in found[::2]] + [c[0] for c in found[1::2]]  # the table's order
    jobs = [(i, "tensor", i, i) for i in range(len(files))]
    assert [files[job[2]] for job in in_turns(jobs, files)] == [c[0] for c in found]
    uneven = ["a/x/1", "a/x/2", "a/x/3", "b/x/1", "c/x/1", "c/x/2"]
    jobs = [(i, "tensor", i, i) for i in range(len(uneven))]
    assert [uneven[job[2]] for job in in_turns(jobs, uneven)] == ["a/x/1", "b/x/1", "c/x/1", "a/x/2", "c/x/2", "a/x/3"]
    assert in_turns(jobs[:3], uneven) == jobs[:3]
    steps = ["s0/r0/d/1", "s0/r0/d/2", "s0/r1/d/1", "s1/r0/d/1", "s1/r0/d/2", "s1/r1/d/1"]
    jobs = [(i, "tensor", i, i) for i in range(len(steps))]
    assert [steps[job[2]] for job in in_turns(jobs, steps)] == [steps[k] for k in (0, 2, 1, 3, 5, 4)]  # step by step
    one_rank = ["s0/r0/d/1", "s0/r0/d/2", "s1/r0/d/1", "s1/r0/d/2"]
    assert in_turns(jobs[:4], one_rank) == jobs[:4]  # steps are not taken in turns
    mixed = [(0, "statistics", 0, 0), (1, "statistics", 3, 3)]
    assert in_turns(mixed, uneven) == mixed


def test_the_ranks_repeats_are_taken_with_the_same_table(two_ranks, monkeypatch):
    """Measured in this process alone, with a window of two pairs: taken in turns, every pair of rank 1 but the
    changed one takes the values of rank 0's (and pairs repeating their call's input, of both ranks), more than in
    the table's order; never the pair whose bytes differ. The tables are the one measuring every pair gives."""
    from nbprec.compare import engine

    target, bench, _names = two_ranks
    monkeypatch.setattr(RECENT, "PAIRS", 2)  # (the rank's pairs are few: a window they would all fit in otherwise)
    tables, reused = [], []
    for how in ("in turns", "the table's order", "every pair measured"):
        if how == "the table's order":
            monkeypatch.setattr(engine, "in_turns", lambda jobs, files: jobs)
        if how == "every pair measured":
            monkeypatch.setattr(RECENT, "find", lambda *args: None)
        RECENT.reused = 0
        tables.append(nbprec.compare(target, bench, workers=1).table)
        reused.append(RECENT.reused)
    for table in tables[:2]:
        assert list(table.columns) == list(tables[2].columns)
        for column in table.columns:
            assert [repr(v) for v in table[column].tolist()] == [repr(v) for v in tables[2][column].tolist()], column
    rows = len(tables[2])
    assert reused[0] > rows // 2 and reused[0] > reused[1] and reused[2] == 0, (reused, rows)
    large = tables[2][tables[2]["numel"] == SHAPE[0] * SHAPE[1]]
    assert len(large) == 4 and large["cosine"].nunique() == 3  # rank 1's changed pair measured as it is


def test_a_mapped_pair_holding_a_measured_pairs_bytes_takes_its_values(two_ranks):
    target, bench, names = two_ranks
    RECENT.clear()
    RECENT.reused = 0

    items = []
    for rank in ("rank0", "rank1"):
        for name in names:
            t_file, b_file = (str(run / "step0" / rank / "dump_tensor_data" / name) for run in (target, bench))
            t, b = (torch.load(f, weights_only=True).to(torch.float64) for f in (t_file, b_file))
            hints = t.min().item(), t.max().item(), b.min().item(), b.max().item()
            items.append((t_file, "bfloat16", b_file, "float32", SHAPE, hints))
    first, changed_first, again, changed = (mapped_pair(x) for x in items)
    assert RECENT.reused == 1  # rank 1's pair held alike; not its changed one
    assert again[0] == first[0] and again[1:] == first[1:] and again[0] is not first[0]
    assert changed[0]["cosine"] != changed_first[0]["cosine"]
    assert RECENT.mapped_nbytes == 3 * SHAPE[0] * SHAPE[1] * 6 and RECENT.nbytes == 0  # (the one taken not kept)
    RECENT.clear()
    assert RECENT.mapped_nbytes == 0 and not RECENT.by_key


@needs_two_cores
def test_the_command_and_its_worker_take_the_ranks_in_turns(two_ranks):
    """With the early worker (the library call's own, and one that met the command midway), the table is the one
    without it."""
    target, bench, _names = two_ranks
    plain = compare_fresh(target, bench, "plain")
    for how, wait in (("call", 0.0), ("early", 0.0), ("early", 1.0)):
        assert_same(plain, compare_fresh(target, bench, how, wait=wait))


def test_mapped_pairs_kept_stay_within_their_own_budget():
    """Pairs with a side mapped count against ``MAPPED_BYTES`` (no copy held), pairs read against ``BYTES``; the
    oldest pairs are let go first, whichever budget is over."""
    kept = type(RECENT)()
    measured = ({"cosine": 1.0}, "", True, (0, 0))
    big = memoryview(bytes(kept.MAPPED_BYTES // 16))
    small = memoryview(bytes(1000))
    kept.add((1, 1, 1000, (0.0, 1.0, 0.0, 1.0)), small, small, measured)
    for n in range(12):
        kept.add((1, 1, len(big), (0.0, float(n), 0.0, 1.0)), big, big, measured, mapped=True)
        assert kept.mapped_nbytes <= kept.MAPPED_BYTES
        assert kept.nbytes == (2000 if n < 8 else 0)  # counted apart; the oldest pair goes first, of either kind
    too_big = memoryview(bytes(kept.MAPPED_BYTES // 8 + 1))
    kept.add((1, 1, len(too_big), (0.0, 0.5, 0.0, 1.0)), too_big, too_big, measured, mapped=True)
    assert (1, 1, len(too_big), (0.0, 0.5, 0.0, 1.0)) not in kept.by_key  # over a quarter of the budget
    kept.clear()
    assert kept.nbytes == kept.mapped_nbytes == 0 and not kept.order
