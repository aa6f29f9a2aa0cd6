"""bench/commands.py refuses a baseline variable it cannot set, saying what it takes (no timing is asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_a_baseline_variable_without_a_value_is_refused_with_the_form_it_takes():
    for bad in ("NBPREC_EARLY", "=off"):
        cmd = [sys.executable, str(BENCH / "commands.py"), "--baseline-env", bad, "--repeat", "5"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 2, proc.stderr
        assert "--baseline-env takes NAME=VALUE" in proc.stderr and repr(bad) in proc.stderr


def test_the_quick_commands_run_from_any_folder_and_each_gets_its_line(tmp_path):
    """``--quick DUMP`` runs every quick command (a relative DUMP too: the commands run from ``/``) and the
    interpreter alone, and prints a summary line for each; nothing else is timed with ``--quick-only``."""
    dump = Path(__file__).parent / "fixtures" / "msprobe" / "bf16_tensor_mix"
    relative = Path("..") / dump.relative_to(Path(__file__).resolve().parents[1])
    cwd = Path(__file__).resolve().parents[1] / "bench"
    cmd = [sys.executable, str(BENCH / "commands.py"), "--quick", str(relative), "--quick-only", "--repeat", "5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = proc.stdout.split("machine:")[-1]
    for label in ("nbprec --version", "nbprec --help", "nbprec info D", "nbprec overflow D --no-payload"):
        assert label in summary, label
    assert "python -c pass (the interpreter's start)" in proc.stdout
    assert "nbprec compare" not in proc.stdout and "nbprec report" not in proc.stdout


def test_the_overflow_command_is_timed_beside_a_plain_read_of_its_dump():
    dump = Path(__file__).parent / "fixtures" / "msprobe" / "fp16_tensor_mix"
    cmd = [sys.executable, str(BENCH / "commands.py"), "--overflow", str(dump), "--headroom", "--quick-only"]
    cmd += ["--repeat", "5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = sum(1 for f in dump.rglob("*") if f.is_file())
    assert (
        f"a plain read of the dump's {files} files" in proc.stdout
        and "nbprec overflow against it: this tree" in proc.stdout
    )
    summary = proc.stdout.split("machine:")[-1]
    assert "nbprec overflow D (payloads read)" in summary and "nbprec overflow D --headroom" in summary


def test_headroom_without_a_dump_is_refused():
    cmd = [sys.executable, str(BENCH / "commands.py"), "--headroom", "--quick-only"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "give the dump with --overflow D" in proc.stderr, proc.stderr


def test_the_served_command_and_the_call_are_timed_per_side_and_the_daemons_are_stopped():
    """``--served`` times the comparison as a daemon's client too, each side (here the tree, and the tree without
    the early worker) on a daemon of its own, in a socket folder that is gone afterwards; ``--in-process`` times
    ``nbprec.compare`` in a fresh process of each side."""
    fixtures = Path(__file__).parent / "fixtures" / "msprobe"
    before = set(Path("/tmp").glob("nbd-cmd-*"))
    cmd = [sys.executable, str(BENCH / "commands.py"), "--compare", str(fixtures / "bf16_tensor_mix")]
    cmd += [str(fixtures / "fp32_tensor_mix"), "--compare-only", "--served", "--in-process"]
    cmd += ["--baseline-env", "NBPREC_EARLY=off", "--repeat", "5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = proc.stdout.split("machine:")[-1]
    labels = ("nbprec compare -o OUT (own process)", "nbprec compare -o OUT (daemon client)", "(in-process)")
    for label in labels:
        line = next(text for text in summary.splitlines() if label in text)
        assert "this tree" in line and "baseline" in line and "paired ratio" in line, line
    assert set(Path("/tmp").glob("nbd-cmd-*")) == before  # (every daemon stopped, its folder removed)
