"""What the tests of the ``nbprec compare`` command's early worker share (``tests/compare/test_early*.py``): a
comparison in a fresh interpreter, with the worker started first or not, and the check that two are the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# A comparison in a fresh interpreter, with the worker started first (argv[3] == "early") or not; argv[5], when not
# empty, is an msprobe dump.json changed after the worker's window (its first recorded Max raised by 1). It prints
# the table (every column, as text), the problems, how many pairs the worker measured, and the sizes of the
# dump.json files the reader scanned itself (those it did not take from the worker).
_RUN = """
import importlib, json, sys, time
from nbprec.compare import early
target, bench, how, wait, changed = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
if how == "early":
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
taken = []
measured = early.measured
def counting(jobs, t_dump, b_dump):
    done, left = measured(jobs, t_dump, b_dump)
    taken.append((len(done), len(jobs)))
    return done, left
early.measured = counting
import nbprec
comp = nbprec.compare(target, bench)
table = comp.columns
columns = {name: [repr(v) for v in table[name].tolist()] for name in table}
print(json.dumps({
    "columns": columns,
    "problems": comp.meta["problems"],
    "verdict": comp.verdict().text,
    "taken": taken,
    "scanned_here": scanned_here,
}))
"""


def compare_fresh(target: Path, bench: Path, how: str, wait: float = 0.0, changed: Path | None = None) -> dict:
    env = {**os.environ, "NBPREC_EARLY": "on"}
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
