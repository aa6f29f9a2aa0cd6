"""What the tests of the ``nbprec compare`` command's early worker share (``tests/compare/test_early*.py``): a
comparison in a fresh interpreter, with the worker started first or not, and the check that two are the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# A comparison in a fresh interpreter, with the worker started first (argv[3] == "early"; "slow": both processes
# taking 8 ms a small pair; "dies": the worker gone after 20 pairs), or by nbprec.compare itself ("call": the
# library's own start, nbprec.compare.early_meeting.start_for_call), or not at all ("plain"); argv[5], when not
# empty, is an msprobe dump.json changed after the worker's window (its first recorded Max raised by 1). It prints
# the table (every column, as text), the problems, how many pairs the worker measured (and of the jobs left when
# the dumps were open, how many it took and how many this process measured: nbprec.compare.early_meeting), and the
# sizes of the dump.json files the reader scanned itself (those it did not take from the worker), and how many pairs
# this process took from an earlier pair holding the same bytes (nbprec.compare.small_pairs).
_RUN = """
import importlib, json, sys, time
from nbprec.compare import early
target, bench, how, wait, changed = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
if how in ("slow", "dies"):  # 8 ms a small pair (the worker gone after 20 in "dies"): the command meets it midway
    import os
    small_pairs = importlib.import_module("nbprec.compare.small_pairs")
    pair, count, command = small_pairs.small_pair, [0], os.getpid()
    def slow_pair(*args, **kwargs):
        count[0] += 1
        if how == "dies" and count[0] > 20 and os.getpid() != command:
            os._exit(1)
        time.sleep(0.008)
        return pair(*args, **kwargs)
    small_pairs.small_pair = slow_pair
if how not in ("plain", "call"):
    early.start(target, bench)
    time.sleep(wait)  # (the worker's window: 0 stops it wherever it is)
if changed:
    with open(changed, encoding="utf-8") as fh:
        dump = json.load(fh)
    entry = next(a for op in dump["data"].values() for a in op.get("input_args", []) if "Max" in a)
    entry["Max"] += 1.0
    with open(changed, "w", encoding="utf-8") as fh:
        json.dump(dump, fh, indent=1)
scanner = importlib.import_module("nbprec.formats.msprobe_scan")
scanned_here = []
scan = scanner._scan
def counting_scan(text, slots):
    scanned_here.append(len(text))
    return scan(text, slots)
scanner._scan = counting_scan
taken, met = [], []
meeting = importlib.import_module("nbprec.compare.early_meeting")
measured = meeting.measured
def counting(jobs, t_dump, b_dump, go_on=False):
    done, left, beside = measured(jobs, t_dump, b_dump, go_on=go_on)
    taken.append([len(done), len(jobs)])
    return done, left, beside
meeting.measured = counting  # (before the engine is imported: it takes the name then)
close = meeting.MeetingExecutor._close
def counting_close(executor):
    taken[-1][0] += executor.taken
    met.append((executor.taken, executor.measured_here))
    close(executor)
meeting.MeetingExecutor._close = counting_close
import nbprec
comp = nbprec.compare(target, bench)
table = comp.columns
columns = {name: [repr(v) for v in table[name].tolist()] for name in table}
print(json.dumps({
    "columns": columns,
    "problems": comp.meta["problems"],
    "verdict": comp.verdict().text,
    "taken": [tuple(pair) for pair in taken],
    "met": met,
    "scanned_here": scanned_here,
    "reused": importlib.import_module("nbprec.compare.small_pairs").RECENT.reused,
}))
"""


def compare_fresh(target: Path, bench: Path, how: str, wait: float = 0.0, changed: Path | None = None) -> dict:
    env = {**os.environ, "NBPREC_EARLY": "off" if how == "plain" else "on"}
    done = subprocess.run(
        [sys.executable, "-c", _RUN, str(target), str(bench), how, str(wait), str(changed or "")],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_same(plain: dict, with_worker: dict) -> None:
    assert with_worker["columns"].keys() == plain["columns"].keys()
    for name, values in plain["columns"].items():
        assert with_worker["columns"][name] == values, name  # (repr: NaN equals NaN, -0.0 differs from 0.0)
    assert with_worker["problems"] == plain["problems"]
    assert with_worker["verdict"] == plain["verdict"]


def multicore() -> bool:
    return len(os.sched_getaffinity(0)) > 1


needs_two_cores = pytest.mark.skipif(not multicore(), reason="the worker starts on machines of two cores or more")


def pair_records_alone(target: Path, bench: Path) -> tuple[int, bool]:
    """(how many records the worker's measuring gives, whether numpy was loaded by then), in a fresh interpreter:
    the worker's code, run to the end without being stopped."""
    code = (
        "import sys\n"
        "from nbprec.compare import early\n"
        "class Go:\n"
        "    def __getitem__(self, i): return 0\n"
        f"roots = ({str(target)!r}, {str(bench)!r})\n"
        "records = list(early._pair_records(roots, Go()))\n"
        "print(len(records), 'numpy' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    count, numpy_loaded = done.stdout.split()
    return int(count), numpy_loaded == "True"


def command_with_and_without_worker(args: list[str], out: Path | None) -> dict[str, tuple]:
    """``nbprec compare ARGS [-o OUT/on|off]`` in its own process (no daemon), with the early worker (``"on"``) and
    without (``"off"``): each run's exit status, printout (the output folder written OUT), error output and files."""
    outputs = {}
    for how in ("on", "off"):
        env = {**os.environ, "NBPREC_EARLY": how, "NBPREC_DAEMON": "off"}
        command = [sys.executable, "-m", "nbprec", "compare", *args, "--no-progress"]
        folder = out / how if out is not None else None
        if folder is not None:
            command += ["-o", str(folder)]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
        files = {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder and folder.is_dir() else {}
        stdout = done.stdout.replace(str(folder), "OUT") if folder is not None else done.stdout
        outputs[how] = (done.returncode, stdout, done.stderr, files)
    return outputs


def payload_entries(dump: dict) -> dict[str, dict]:
    """Every tensor entry of an msprobe dump.json with a payload, by its payload's name."""
    found = {}
    for body in dump["data"].values():
        for section in ("input_args", "output"):
            for item in body.get(section) or []:
                if isinstance(item, dict) and item.get("data_name"):
                    found[item["data_name"]] = item
    return found


def record_tensor(entry: dict, tensor, dtype: str) -> None:
    """A dump.json entry rewritten for the torch tensor saved as its payload: its dtype, shape and statistics."""
    import torch

    values = tensor.to(torch.float64)
    entry.update(
        dtype=f"torch.{dtype}",
        shape=list(tensor.shape),
        Max=values.max().item(),
        Min=values.min().item(),
        Mean=values.mean().item(),
        Norm=values.norm().item(),
    )
