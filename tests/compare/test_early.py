"""The ``nbprec compare`` command's early worker (:mod:`nbprec.compare.early`) measures pairs before numpy is
imported; a comparison with it is the comparison without it, to the bit, whatever the dumps hold.

Each run happens in a fresh interpreter, as the command runs: the worker is forked before numpy is loaded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from damaged_msprobe import DAMAGES, damaged_copy
from early_support import assert_same, compare_fresh, multicore, needs_two_cores, pair_records_alone

from nbprec.compare import early, early_meeting, early_msprobe
from nbprec.compare import workers as compare_workers

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
BF16, FP32, FP16 = FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix", FIXTURES / "fp16_tensor_mix"
SCENARIOS = FIXTURES / "scenarios"


@needs_two_cores
@pytest.mark.parametrize(
    ("target", "bench"),
    [
        (BF16, FP32),
        (FP16, FP32),
        (FIXTURES / "autocast_bf16_tensor_mix", FP32),
        (SCENARIOS / "fault_tensor", SCENARIOS / "fp32_tensor"),
        (SCENARIOS / "dropout_tensor_a", SCENARIOS / "dropout_tensor_b"),
        (SCENARIOS / "other_inputs_tensor", SCENARIOS / "fp32_tensor"),
        (SCENARIOS / "other_weights_tensor", SCENARIOS / "fp32_tensor"),
    ],
    ids=lambda p: p.name,
)
def test_the_worker_gives_the_comparison_without_it(target, bench):
    plain = compare_fresh(target, bench, "plain")
    whole = compare_fresh(target, bench, "early", wait=1.0)  # time to measure every pair it takes
    assert [done for done, _jobs in plain["taken"]] == [0]  # (no worker: every job measured as usual)
    ((taken, jobs),) = whole["taken"]
    assert taken > 0.5 * jobs, whole["taken"]  # it measured most pairs (the others hold NaN, ints, ...)
    assert_same(plain, whole)
    stopped = compare_fresh(target, bench, "early", wait=0.0)  # stopped wherever it was
    assert_same(plain, stopped)


@needs_two_cores
@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_dumps_compare_the_same_with_the_worker(tmp_path, damage):
    """Each damage makes the worker measure less, or measure what the engine would; never differently."""
    run = damaged_copy(tmp_path, BF16, damage)
    plain = compare_fresh(run, FP32, "plain")
    assert_same(plain, compare_fresh(run, FP32, "early", wait=1.0))


@needs_two_cores
def test_the_worker_measures_pairs_holding_nan_and_inf(tmp_path):
    """Payloads holding NaN or inf, recorded as msprobe records them (NaN, inf) or with finite statistics: the
    worker measures them as it measures the others (the same number of pairs as on the clean run), with their
    counts, and the comparison is the one without it."""
    run = damaged_copy(tmp_path, BF16, "non_finite_values")
    plain = compare_fresh(run, FP32, "plain")
    whole = compare_fresh(run, FP32, "early", wait=1.0)
    assert_same(plain, whole)
    counted = [float(v) for v in plain["columns"]["target_nonfinite"] if float(v) > 0]
    assert len(counted) >= 6, plain["columns"]["target_nonfinite"]
    clean = compare_fresh(BF16, FP32, "early", wait=1.0)
    assert whole["taken"] == clean["taken"]


def test_the_worker_runs_without_numpy():
    """What the worker imports and runs loads no numpy (else it would start no sooner than the command)."""
    count, numpy_loaded = pair_records_alone(BF16, FP32)
    assert count > 100 and not numpy_loaded


@pytest.mark.parametrize(
    ("args", "paths"),
    [
        (["compare", "T", "B"], ("T", "B")),
        (["compare", "T", "B", "-o", "OUT", "--no-progress"], ("T", "B")),
        (["compare", "-o", "OUT", "T", "--rule", "cann", "B"], ("T", "B")),
        (["compare", "--output=OUT", "T", "B", "--mode", "tensor"], ("T", "B")),
        (["compare", "-oOUT", "T", "B"], ("T", "B")),
        (["compare", "T", "B", "--mode", "statistics"], None),
        (["compare", "T", "B", "--mode=checksum"], None),
        (["compare", "T", "B", "--mode", "statistics", "--mode", "tensor"], ("T", "B")),  # (the last, as argparse)
        (["compare", "T", "B", "--mode", "tensor", "--mode", "checksum"], None),
        (["compare", "T", "B", "--scheduler", "tcp://h:8786"], None),
        (["compare", "T", "B", "--help"], None),
        (["compare", "T"], None),
        (["compare", "T", "B", "C"], None),
        (["info", "T"], None),
        ([], None),
        (["compare", "--", "-T", "B"], ("-T", "B")),
    ],
)
def test_the_command_line_names_the_dumps(args, paths):
    assert early.compare_paths(args) == paths


def test_the_flags_are_the_parsers():
    """Every option of ``nbprec compare`` but COMPARE_FLAGS takes a value: early's reading of the command line
    skips the right words."""
    from nbprec.cli import build_parser

    parser = build_parser("compare")
    compare = next(a for a in parser._subparsers._group_actions[0].choices.values() if a.prog.endswith("compare"))
    flags = {o for a in compare._actions if a.option_strings and a.nargs == 0 for o in a.option_strings}
    assert flags == early.COMPARE_FLAGS


@needs_two_cores
def test_discard_ends_the_worker(monkeypatch):
    code = (
        "import os, sys\n"
        "from nbprec.compare import early\n"
        f"early.start({str(BF16)!r}, {str(FP32)!r})\n"
        "pid = early._worker.pid\n"
        "early.discard()\n"
        "try:\n"
        "    os.waitpid(pid, os.WNOHANG)\n"
        "    print('still a child')\n"
        "except ChildProcessError:\n"
        "    print('reaped')\n"
        "print(early._worker is None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "NBPREC_EARLY": "on"},
    )
    assert done.stdout.split() == ["reaped", "True"]


def test_off_starts_nothing(monkeypatch):
    monkeypatch.setenv("NBPREC_EARLY", "off")
    early.start(str(BF16), str(FP32))
    assert early._worker is None


@needs_two_cores
@pytest.mark.parametrize(("target", "bench"), [(BF16, FP32), (FP16, FP32)], ids=["bf16", "fp16"])
def test_a_library_call_starts_its_own_worker_and_gives_the_same_comparison(target, bench):
    plain = compare_fresh(target, bench, "plain")
    call = compare_fresh(target, bench, "call")
    assert plain["met"] == [] and plain["taken"][0][0] == 0  # (NBPREC_EARLY=off: no worker)
    # the call met the worker it started, or took every pair it measured (it was done before the dumps were open)
    assert len(call["met"]) == 1 or call["taken"][0][0] > 0
    assert_same(plain, call)


def _starts(monkeypatch, target=BF16, bench=FP32, mode="auto", parallel="auto", workers=None, run_on=None, threads=1):
    """The worker starts :func:`early_meeting.start_for_call` asks for (none made) in a process running
    ``threads`` threads."""
    calls: list = []
    monkeypatch.setattr(early, "start", lambda t, b: calls.append((t, b)))
    monkeypatch.setattr(compare_workers.threading, "active_count", lambda: threads)
    monkeypatch.setattr(compare_workers, "usable_cores", lambda: 2)  # (default_workers: 2 on any machine)
    early_meeting.start_for_call(target, bench, mode, parallel, workers, run_on)
    return calls


def test_a_library_call_starts_the_worker_only_where_it_would_fork(monkeypatch):
    from nbprec import open as open_dump

    assert _starts(monkeypatch) == [(str(BF16), str(FP32))]
    assert _starts(monkeypatch, mode="tensor", workers=2, parallel="processes") == [(str(BF16), str(FP32))]
    assert _starts(monkeypatch, mode="statistics") == []
    assert _starts(monkeypatch, mode="checksum") == []
    assert _starts(monkeypatch, parallel="threads") == []
    assert _starts(monkeypatch, workers=1) == []
    assert _starts(monkeypatch, workers=4) == []
    assert _starts(monkeypatch, run_on=object()) == []  # an executor or a Dask client measures
    assert _starts(monkeypatch, target=open_dump(BF16)) == []  # a dump opened already: nothing to overlap
    assert _starts(monkeypatch, target=FIXTURES / "bf16_statistics_mix", bench=FIXTURES / "fp32_statistics_mix") == []
    assert _starts(monkeypatch, threads=3) == []  # a threaded process (a notebook's kernel) forks only when asked to
    assert _starts(monkeypatch, threads=3, parallel="processes") == [(str(BF16), str(FP32))]
    monkeypatch.setattr(compare_workers, "usable_cores", lambda: 1)
    calls: list = []
    monkeypatch.setattr(early, "start", lambda t, b: calls.append((t, b)))
    early_meeting.start_for_call(BF16, FP32, "auto", "auto", None, None)
    assert calls == []  # one usable core: nothing to measure beside the call
    monkeypatch.setattr(early, "_worker", object())  # the command's process started one: it serves this call
    assert _starts(monkeypatch) == []


def test_the_worker_has_pairs_in_msprobe_dumps_with_payloads_on_both_sides(tmp_path):
    stats, md5 = FIXTURES / "bf16_statistics_mix", FIXTURES / "bf16_md5_L1"
    assert early.has_pairs(str(BF16), str(FP32))
    assert early.has_pairs(str(BF16 / "step0" / "rank0" / "dump.json"), str(FP32))  # (a dump.json as the path)
    assert not early.has_pairs(str(stats), str(FIXTURES / "fp32_statistics_mix"))  # nothing to read
    assert not early.has_pairs(str(md5), str(FIXTURES / "fp32_md5_L1"))
    assert not early.has_pairs(str(BF16), str(stats))  # payloads on one side only
    assert not early.has_pairs(str(stats), str(FP32))
    assert not early.has_pairs(str(BF16), str(tmp_path))  # no dump.json found on one side
    assert not early.has_pairs(str(tmp_path / "missing"), str(FP32))


@needs_two_cores
def test_the_command_writes_the_same_files_with_and_without_the_worker(tmp_path):
    outputs = {}
    for how in ("off", "on"):
        out = tmp_path / how
        env = {**os.environ, "NBPREC_EARLY": how, "NBPREC_DAEMON": "off"}
        argv = [sys.executable, "-m", "nbprec", "compare", str(BF16), str(FP32), "-o", str(out), "--no-progress"]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True, cwd="/")
        outputs[how] = (done.stdout.replace(str(out), "OUT"), {p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert outputs["on"][0] == outputs["off"][0]
    on_files, off_files = outputs["on"][1], outputs["off"][1]
    assert on_files.keys() == off_files.keys()
    for name, data in off_files.items():
        assert on_files[name].replace(b"/on", b"/X") == data.replace(b"/off", b"/X"), name


def test_the_numpy_free_tables_agree_with_numpys():
    import numpy as np

    from nbprec.compare import _sums
    from nbprec.compare._kernels import fused_code
    from nbprec.compare.metrics import _eps_bench
    from nbprec.dtypes import NUMPY_DTYPES
    from nbprec.formats._ptzip import ITEMSIZES

    assert {name: dtype.itemsize for name, dtype in NUMPY_DTYPES.items()} == ITEMSIZES
    codes = {dtype: fused_code(dtype) for dtype in NUMPY_DTYPES.values()}
    assert {NUMPY_DTYPES[name]: code for name, code in _sums.KERNEL_TYPES.items()} == {
        dtype: code for dtype, code in codes.items() if code is not None
    }
    assert all(fused_code(dtype.newbyteorder()) is None for dtype in NUMPY_DTYPES.values() if dtype.itemsize > 1)
    for name, code in _sums.KERNEL_TYPES.items():
        assert _sums.EPS_BENCH[code] == _eps_bench(NUMPY_DTYPES[name]), name
    assert float(np.finfo(np.float64).eps) == _sums.EPS and float(np.finfo(np.float32).eps) == _sums.FLOAT32_EPS
    assert float(np.finfo(np.float64).tiny) == _sums._DBL_MIN


def test_a_worker_that_does_not_stop_is_killed_after_the_grace():
    """A worker still busy when stopped (scanning a large dump.json, say) is not waited for: what it sent is
    taken, and it is killed."""
    import select
    import time

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # a worker that sent one message and then does not stop
        os.close(read_end)
        os.write(write_end, b"sent")
        time.sleep(30)
        os._exit(0)
    os.close(write_end)
    worker = early.Worker(pid, None, read_end, ("t", "b"))
    select.select([read_end], [], [], 30)  # its message written (a loaded machine may run the child late)
    start = time.monotonic()
    try:
        chunks = early._drain(worker)
    finally:
        os.close(read_end)
        _pid, status = os.waitpid(pid, 0)
    assert b"".join(chunks) == b"sent"
    assert time.monotonic() - start < 5
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9


@needs_two_cores
def test_the_worker_does_not_hold_the_commands_output():
    """Its standard streams are /dev/null: a pipe from the command (to ``head``, say) ends with the command."""
    code = (
        "import os, time\n"
        "from nbprec.compare import early\n"
        "early._run_worker = lambda *args: time.sleep(30)  # (a worker that stays, to be looked at)\n"
        f"early.start({str(BF16)!r}, {str(FP32)!r})\n"
        "pid, seen = early._worker.pid, set()\n"
        "for _ in range(20000):\n"
        "    try:\n"
        "        seen.add(os.readlink(f'/proc/{pid}/fd/1'))\n"
        "    except OSError:\n"
        "        break\n"
        "    if os.devnull in seen:\n"
        "        break\n"
        "    time.sleep(0.0005)\n"
        "early.discard()\n"
        "print(os.devnull in seen)\n"
    )
    env = {**os.environ, "NBPREC_EARLY": "on"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert done.stdout.split() == ["True"]


def test_a_large_dump_json_is_left_to_the_reader(monkeypatch):
    """The worker does not scan a dump.json above its limit (the scan would outlast its window)."""

    class Go:
        def __getitem__(self, i):
            return 0

    roots = (str(BF16), str(FP32))
    assert len(list(early._pair_records(roots, Go()))) > 100
    monkeypatch.setattr(early_msprobe, "_SCAN_LIMIT", (BF16 / "step0" / "rank0" / "dump.json").stat().st_size - 1)
    assert list(early._pair_records(roots, Go())) == []


def test_sides_of_several_dump_json_files_pair_them_by_folder(tmp_path):
    """Two steps and two ranks a side: the worker pairs the dump.json files of the same step and rank folders and
    measures them all, with the results of the engine's pairing by step and rank; sides whose folders differ
    get nothing."""

    class Go:
        def __getitem__(self, i):
            return 0

    runs = {}
    for source in (BF16, FP32):
        run = runs[source.name] = tmp_path / source.name
        for step, rank in (("step0", "rank0"), ("step0", "rank1"), ("step1", "rank0"), ("step1", "rank1")):
            shutil.copytree(source / "step0" / "rank0", run / step / rank)
    target, bench = runs[BF16.name], runs[FP32.name]
    pairs = early_msprobe._paired_dump_jsons(str(target), str(bench))
    assert [Path(t).parent.relative_to(target) for t, _b in pairs] == [
        Path("step0/rank0"),
        Path("step0/rank1"),
        Path("step1/rank0"),
        Path("step1/rank1"),
    ]
    assert all(Path(t).parent.relative_to(target) == Path(b).parent.relative_to(bench) for t, b in pairs)
    single = len(list(early._pair_records((str(BF16), str(FP32)), Go()))) - 1
    assert len(list(early._pair_records((str(target), str(bench)), Go()))) - 1 == 4 * single
    assert early_msprobe._paired_dump_jsons(str(target / "step0"), str(bench / "step1"))  # rank0, rank1 in both
    assert early_msprobe._paired_dump_jsons(str(target), str(bench / "step0")) == []  # step*/rank* against rank*
    if multicore():
        whole = compare_fresh(target, bench, "early", wait=1.0)
        ((taken, jobs),) = whole["taken"]
        assert taken > 0.5 * jobs, whole["taken"]
        assert_same(compare_fresh(target, bench, "plain"), whole)


def test_process_folders_pair_as_the_reader_ranks_them(tmp_path):
    """msprobe's ``proc{pid}`` folders (a run that knows no rank; each run's processes have other ids): the worker
    pairs them as the reader ranks them, in process-id order, and measures them with the reader's results."""

    class Go:
        def __getitem__(self, i):
            return 0

    runs = {}
    for source, pids in ((BF16, (70, 1200)), (FP32, (9, 31))):  # (1200 sorts before 70 as text)
        run = runs[source.name] = tmp_path / source.name
        for step in ("step0", "step1"):
            for pid in pids:
                shutil.copytree(source / "step0" / "rank0", run / step / f"proc{pid}")
    target, bench = runs[BF16.name], runs[FP32.name]
    pairs = early_msprobe._paired_dump_jsons(str(target), str(bench))
    assert [(Path(t).parent.relative_to(target), Path(b).parent.relative_to(bench)) for t, b in pairs] == [
        (Path("step0/proc70"), Path("step0/proc9")),
        (Path("step0/proc1200"), Path("step0/proc31")),
        (Path("step1/proc70"), Path("step1/proc9")),
        (Path("step1/proc1200"), Path("step1/proc31")),
    ]
    single = len(list(early._pair_records((str(BF16), str(FP32)), Go()))) - 1
    assert len(list(early._pair_records((str(target / "step1"), str(bench / "step1")), Go()))) - 1 == 2 * single
    if multicore():
        whole = compare_fresh(target, bench, "early", wait=1.0)
        ((taken, jobs),) = whole["taken"]
        assert taken > 0.5 * jobs, whole["taken"]
        assert_same(compare_fresh(target, bench, "plain"), whole)


def test_the_workers_folder_names_are_the_readers():
    """The worker's own copies of the msprobe layout (kept out of modules that import numpy, pathlib or typing)
    agree with the readers'."""
    from nbprec.formats._layout import PROC_RE, RANK_RE, STEP_RE
    from nbprec.formats.msprobe_folder import TENSOR_DIR

    assert early_msprobe._TENSOR_DIR == TENSOR_DIR
    names = [
        "rank",
        "rank0",
        "rank12",
        "rank\u0663",
        "Rank0",
        "rank0x",
        "rankx",
        "rank-1",
        "step",
        "step3",
        "steps",
        "proc",
        "proc0",
        "proc4321",
        "proc\u0663",
        "Proc1",
        "proc1x",
        "",
    ]
    for prefix, pattern in (("rank", RANK_RE), ("step", STEP_RE)):
        for name in names:
            assert early_msprobe._numbered(name, prefix) == bool(pattern.match(name)), (prefix, name)
    for name in names:
        assert early_msprobe._is_proc(name) == bool(PROC_RE.match(name)), name


def test_other_commands_do_not_load_the_worker():
    code = "import sys\nfrom nbprec.cli import run\nprint('nbprec.compare.early' in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False"]


@needs_two_cores
@pytest.mark.parametrize(("target", "bench"), [(BF16, FP32), (SCENARIOS / "fault_tensor", SCENARIOS / "fp32_tensor")],
                         ids=["mix", "fault"])  # fmt: skip
def test_the_command_meets_the_worker_midway(target, bench):
    """A worker still measuring when the dumps are open goes on from the first jobs while the command measures
    from the last: both measure some, each job once, and the comparison is the one without it."""
    plain = compare_fresh(target, bench, "plain")
    slow = compare_fresh(target, bench, "slow")  # (8 ms a pair: 2 s of them, not all done by then)
    ((taken, here),) = slow["met"]
    assert taken > 0 and here > 0, slow["met"]
    ((done, jobs),) = slow["taken"]
    assert done < jobs
    assert_same(plain, slow)


@needs_two_cores
def test_a_worker_gone_midway_leaves_its_jobs_to_the_command():
    """A worker that dies while the command measures beside it (killed, out of memory) only loses what it had
    not sent: the jobs it did not measure are measured by the command, and the comparison is the same."""
    plain = compare_fresh(BF16, FP32, "plain")
    gone = compare_fresh(BF16, FP32, "dies")
    ((done, jobs),) = gone["taken"]
    assert 0 < done <= 20 < jobs, gone["taken"]
    assert_same(plain, gone)
