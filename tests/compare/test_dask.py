"""Comparisons on a Dask cluster (``compare(..., client=...)``, ``nbprec compare --scheduler``): the same table as
a local run, batches of one step and rank read by the workers from the dumps' paths, a worker killed mid-run
and a corrupt payload among many."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import nbprec
from nbprec.cli import main
from nbprec.compare.metrics import METRIC_COLUMNS, STAT_METRIC_COLUMNS
from nbprec.demo.npu import make_npu_demo
from nbprec.dump import Dump
from nbprec.formats.msprobe import load_pt_tensor

distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
TARGET, BENCH = FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix"


@pytest.fixture(scope="module")
def client():
    """Two worker processes of one thread each, as CI runs them."""
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=logging.ERROR
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
    stop_resource_tracker()


def stop_resource_tracker() -> None:
    """Stop the helper process multiprocessing starts beside the first process it spawns (here, the
    nannies), which would otherwise live on as a child of the test process (tests check that compare leaves
    no child behind); multiprocessing starts it again when it needs it."""
    from multiprocessing import resource_tracker

    stop = getattr(resource_tracker._resource_tracker, "_stop", None)
    if stop is not None:
        stop()


def assert_same(remote: nbprec.Comparison, local: nbprec.Comparison) -> None:
    """Every column equal (NaN where NaN), every metric column spelled out, and the same verdict."""
    for column in (*METRIC_COLUMNS, *STAT_METRIC_COLUMNS, "reason", "compare_mode"):
        if column in local.table:
            a, b = remote.table[column].to_numpy(), local.table[column].to_numpy()
            if a.dtype.kind == "f":
                np.testing.assert_array_equal(a, b, err_msg=column)  # NaN-aware: NaN equals NaN here
            else:
                assert list(a) == list(b), column
    pd.testing.assert_frame_equal(remote.table, local.table)
    pd.testing.assert_frame_equal(remote.unmatched_bench, local.unmatched_bench)
    assert remote.verdict().text == local.verdict().text


def test_a_cluster_gives_the_local_table_in_tasks_of_one_step_and_rank(client, tmp_path):
    """Two ranks on each side: every task (a batch) holds pairs of one rank, and both ranks' tasks ran."""
    for side, source in (("t", TARGET), ("b", BENCH)):
        for rank in (0, 1):
            shutil.copytree(source / "step0" / "rank0", tmp_path / side / "step0" / f"rank{rank}")
    local = nbprec.compare(tmp_path / "t", tmp_path / "b", workers=1)
    seen: list[tuple[int, int]] = []
    with distributed.get_task_stream(client) as stream:
        remote = nbprec.compare(tmp_path / "t", tmp_path / "b", client=client, progress=lambda *a: seen.append(a))
    assert_same(remote, local)
    measured = int((local.table["compare_mode"] == "tensor").sum())
    assert measured > 500 and seen[-1] == (measured, measured)  # progress in pairs, fed from completed tasks
    keys = [str(task["key"]) for task in stream.data]
    assert keys and all(key.startswith("nbprec-measure-step0-rank") for key in keys)
    assert {key.split("-")[3] for key in keys} == {"rank0", "rank1"}


def test_statistics_and_npu_dumps_on_a_cluster(client, tmp_path):
    """Statistics rows, and an NPU (CANN) dump whose payloads the workers convert to their original layout
    through the GE graph's records, against a TensorFlow dump."""
    stats = FIXTURES / "bf16_statistics_mix", FIXTURES / "fp32_statistics_mix"
    assert_same(nbprec.compare(*stats, client=client), nbprec.compare(*stats, workers=1))
    case = make_npu_demo(tmp_path / "npu")
    remote = nbprec.compare(case.npu, case.tf, graph=case.graph, client=client)
    local = nbprec.compare(case.npu, case.tf, graph=case.graph, workers=1)
    assert_same(remote, local)
    assert (remote.table["compare_mode"] == "tensor").sum() > 10


def test_a_corrupt_payload_among_many_is_a_problem_and_the_rest_completes(client, tmp_path):
    shutil.copytree(TARGET, tmp_path / "t")
    payloads = sorted((tmp_path / "t" / "step0" / "rank0" / "dump_tensor_data").glob("*.pt"))
    victim = payloads[len(payloads) // 2]
    victim.write_bytes(victim.read_bytes()[:100])  # truncated mid-archive
    remote = nbprec.compare(tmp_path / "t", BENCH, client=client)
    assert_same(remote, nbprec.compare(tmp_path / "t", BENCH, workers=1))
    table = remote.table
    broken = table["reason"].str.startswith("could not read")
    assert broken.sum() == 1 and victim.name in table.loc[broken, "reason"].iloc[0]
    assert table.loc[~broken & (table["compare_mode"] == "tensor"), "cosine"].notna().all()
    assert "unreadable" in {finding.code for finding in remote.verdict().findings}


class _KillOnce:
    """A payload loader that kills the Dask worker process loading ``victim`` the first time (a file marks
    that it happened); elsewhere, and afterwards, it loads msprobe payloads as the reader does."""

    def __init__(self, victim: str, marker: str) -> None:
        self.victim, self.marker = victim, marker

    def __call__(self, row):
        if row["name"] == self.victim and _on_a_dask_worker():
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                os._exit(1)  # as a kill -9 or the OOM killer would: no clean-up, no reply
        return load_pt_tensor(row)


def _on_a_dask_worker() -> bool:
    try:
        distributed.get_worker()
    except ValueError:
        return False
    return True


@pytest.fixture
def by_value():
    """This module's classes travel to the workers by value (the workers cannot import a test module)."""
    module = sys.modules.get(__name__)
    if module is not None:
        cloudpickle.register_pickle_by_value(module)
    yield
    if module is not None:
        cloudpickle.unregister_pickle_by_value(module)


def test_a_worker_killed_mid_run_loses_nothing(client, tmp_path, by_value):
    """A worker dies while measuring a batch late in the run (the smallest pair: the last batch); the
    scheduler runs what it held again on the other worker or its restarted replacement, and the table is
    complete and identical to the local one."""
    opened = nbprec.open(TARGET)
    tensors = opened.index[opened.index["has_data"]]
    victim = str(tensors.loc[tensors["numel"].idxmin(), "name"])
    marker = tmp_path / "killed"
    target = Dump(
        opened.index,
        path=opened.path,
        format=opened.format,
        loader=_KillOnce(victim, str(marker)),
        problems=opened.problems,
        meta=opened.meta,
        hierarchy=opened.hierarchy,
        calls=opened.calls,
    )
    before = set(client.scheduler_info()["workers"])
    remote = nbprec.compare(target, BENCH, client=client)
    assert marker.exists()  # a worker did die
    assert_same(remote, nbprec.compare(TARGET, BENCH, workers=1))
    client.wait_for_workers(2, timeout=60)
    assert set(client.scheduler_info()["workers"]) != before  # the nanny started a new worker process


def test_cli_compare_on_a_scheduler_prints_what_the_local_run_prints(client, capsys):
    assert main(["compare", str(TARGET), str(BENCH), "--no-progress"]) == 0
    local = capsys.readouterr().out
    assert main(["compare", str(TARGET), str(BENCH), "--no-progress", "--scheduler", client.scheduler.address]) == 0
    assert capsys.readouterr().out == local


def test_in_a_notebook_the_progress_is_dasks_widget(client, monkeypatch):
    pytest.importorskip("ipywidgets")
    import distributed.utils
    import IPython.display

    shown = []
    monkeypatch.setattr(distributed.utils, "is_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", shown.append)
    nbprec.compare(TARGET, BENCH, client=client, progress=True)
    assert [type(widget).__name__ for widget in shown] == ["ProgressWidget"]


def test_client_must_be_a_dask_client_and_not_with_an_executor(client):
    from nbprec.compare.executors import InlineExecutor

    with pytest.raises(nbprec.errors.ComparisonError, match=r"distributed\.Client"):
        nbprec.compare(TARGET, BENCH, client="tcp://127.0.0.1:8786")
    with pytest.raises(nbprec.errors.ComparisonError, match="not both"):
        nbprec.compare(TARGET, BENCH, client=client, executor=InlineExecutor())
