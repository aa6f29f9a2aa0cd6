"""bench/compare.py's agreement check: how far nbprec's table is from msprobe's CSV on the rows both name, for a
tensor dump (cosines), a statistics dump (whose CSV has no cosine: the differences of the maxima) and an md5 dump
(checksums: whether both tools say the same of each pair's being equal). The CSVs are msprobe's own, written by
``msprobe compare`` on the fixture pairs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from bench_support import bench_module

import nbprec

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "msprobe"


@pytest.fixture
def bench_compare():
    """bench/compare.py, loaded by path."""
    return bench_module("compare")


def _tables(target: str, bench: str, msprobe_csv: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    ms = pd.read_csv(next((FIXTURES / msprobe_csv).glob("*.csv")))
    table = nbprec.compare(FIXTURES / target / "step0", FIXTURES / bench / "step0", progress=None).table
    return ms, table


@pytest.mark.parametrize(
    ("target", "bench", "msprobe_csv", "column"),
    [
        ("bf16_tensor_mix", "fp32_tensor_mix", "msprobe_compare_bf16_vs_fp32", "Cosine"),
        ("bf16_statistics_mix", "fp32_statistics_mix", "msprobe_compare_statistics_bf16_vs_fp32", "Max diff"),
    ],
)
def test_the_agreement_check_reads_the_column_msprobes_csv_has(bench_compare, target, bench, msprobe_csv, column):
    ms, table = _tables(target, bench, msprobe_csv)
    found = bench_compare.agreement(ms, table)
    assert found["agreement_column"] == column
    assert found["ms_rows"] == len(ms)
    assert 0 < found["matched"] <= found["ms_compared"] <= len(ms)
    assert found["diff_max"] < 1e-3, found  # (the two tools measure the same tensors)


def test_the_agreement_check_sees_a_disagreement(bench_compare):
    ms, table = _tables("bf16_statistics_mix", "fp32_statistics_mix", "msprobe_compare_statistics_bf16_vs_fp32")
    table = table.assign(max_diff=table["max_diff"] + 0.5)
    assert bench_compare.agreement(ms, table)["diff_median"] == pytest.approx(0.5)


def _md5_tables(tmp_path: Path, mode: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """msprobe's CSV of the md5 fixture pair, and nbprec's table in ``mode`` read back from the CSV the benchmark's
    child writes (``checksum_match`` as text there)."""
    ms = pd.read_csv(next((FIXTURES / "msprobe_compare_md5_bf16_vs_fp32").glob("*.csv")))
    table = nbprec.compare(FIXTURES / "bf16_md5_L1/step0", FIXTURES / "fp32_md5_L1/step0", mode=mode).table
    table[["target_name", "compare_mode", "checksum_match"]].to_csv(tmp_path / "table.csv", index=False)
    return ms, pd.read_csv(tmp_path / "table.csv")


def test_an_md5_dumps_checksum_verdicts_are_held_to_msprobes(bench_compare, tmp_path):
    """nbprec judges by checksum the pairs of one dtype only (a bfloat16 tensor's bytes never equal its float32
    benchmark's): on those, its verdicts and msprobe's agree."""
    ms, table = _md5_tables(tmp_path, "checksum")
    found = bench_compare.agreement(ms, table)
    given = int((ms["NPU MD5"].notna() & ms["BENCH MD5"].notna()).sum())
    assert (found["agreement_column"], found["ms_compared"]) == ("NPU MD5", given)
    judged = table["checksum_match"].notna()
    assert found["matched"] == int(judged.sum()) > 0 and judged.sum() < len(table)
    assert found["differing_verdicts"] == 0, found  # (msprobe's checksums and nbprec's agree on every pair)
    assert bench_compare._agreement_text({**found}) == "checksums equal or not: 0 verdicts differ"
    flipped = table.assign(checksum_match=(~table["checksum_match"].astype(bool)).where(judged))
    assert bench_compare.agreement(ms, flipped)["differing_verdicts"] == int(judged.sum())


def test_an_md5_pair_nbprec_compares_by_statistics_is_not_held_to_checksums(bench_compare, tmp_path):
    """nbprec's auto mode takes the recorded statistics over checksums (checksums of two dtypes always differ):
    then nothing is compared the same way by both, and the line says so rather than print a difference of NaN."""
    ms, table = _md5_tables(tmp_path, "auto")
    assert set(table["compare_mode"]) == {"statistics"}
    found = bench_compare.agreement(ms, table)
    assert found["matched"] == 0
    assert bench_compare._agreement_text(found) == "no row both measured the same way"


def test_a_given_pairs_dump_json_is_found_in_any_layout_msprobe_writes(bench_compare, tmp_path):
    """``--msprobe-pair`` takes a user's pair as it lies (``msprobe compare -tp -gp`` wants each side's dump.json,
    or a step folder of ranks): the run, step, rank or ``proc{pid}`` folder, or the file; a step folder of several
    ranks is given to msprobe as it is; anything else holding several dump.json files is refused, saying why."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "fp32_md5_L1/step0/rank0", run / "step0/proc812")
    found = run / "step0/proc812/dump.json"
    for given in (run, run / "step0", run / "step0/proc812", found):
        assert bench_compare.msprobe_dump_jsons(given) == (found, [found])
    shutil.copytree(FIXTURES / "fp32_md5_L1/step0/rank0", run / "step1/proc812")
    with pytest.raises(SystemExit, match=r"found 2; pass one rank, proc\* or step folder of each run"):
        bench_compare.msprobe_dump_jsons(run)
    one = run / "step1/proc812/dump.json"
    assert bench_compare.msprobe_dump_jsons(run / "step1") == (one, [one])
    ranks = tmp_path / "ranks/step0"
    for rank in (0, 1):
        shutil.copytree(FIXTURES / "fp32_md5_L1/step0/rank0", ranks / f"rank{rank}")
    assert bench_compare.msprobe_dump_jsons(ranks) == (ranks, [ranks / "rank0/dump.json", ranks / "rank1/dump.json"])
    with pytest.raises(SystemExit, match="found 2"):  # (the run folder above it: msprobe takes a step's ranks)
        bench_compare.msprobe_dump_jsons(ranks.parent)


def test_msprobe_csvs_of_several_ranks_are_read_with_their_rank(bench_compare, tmp_path):
    """msprobe's comparison of a step folder of ranks writes one ``compare_result_rank{N}_*.csv`` a rank: the
    agreement check reads them all, each row with its rank, and pairs nbprec's rows by rank and name (the same
    tensor name is in every rank)."""
    import pandas as pd

    for rank, cosine in ((0, 0.5), (1, 0.25)):
        pd.DataFrame({"NPU Name": ["a.output.0"], "Cosine": [cosine]}).to_csv(
            tmp_path / f"compare_result_rank{rank}_20261207.csv", index=False
        )
    ms = bench_compare.read_msprobe_csv(tmp_path)
    assert ms.sort_values("rank")[["rank", "Cosine"]].values.tolist() == [[0, 0.5], [1, 0.25]]
    nb = pd.DataFrame({"target_name": ["a.output.0", "a.output.0"], "rank": [1, 0], "cosine": [0.25, 0.5]})
    found = bench_compare.agreement(ms, nb)
    assert (found["matched"], found["diff_max"]) == (2, 0.0)
    swapped = bench_compare.agreement(ms, nb.assign(rank=[0, 1]))  # (paired by name alone, it could not tell)
    assert swapped["diff_max"] == 0.25
