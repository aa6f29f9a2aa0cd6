"""bench/page_cache.py runs end to end on a small pair: it drops a share of the payload files from the page cache
before each call (the blocks read back from the disk are reported) and times ``nbprec.compare`` in fresh
processes of this tree and of a baseline tree (no timing is asserted)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "msprobe"


def test_page_cache_bench_times_the_call_with_payloads_dropped(tmp_path):
    target, bench = tmp_path / "bf16", tmp_path / "fp32"
    shutil.copytree(FIXTURES / "bf16_tensor_mix", target)
    shutil.copytree(FIXTURES / "fp32_tensor_mix", bench)
    cmd = [sys.executable, str(ROOT / "bench" / "page_cache.py"), "--dumps", str(target), str(bench)]
    cmd += ["--runs", "5", "--drop", "0.5", "--baseline", str(ROOT)]  # (this tree against itself)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert re.search(r"\d+ payload files; 50% of the files dropped whole; processes", out), out
    for side in ("this tree", "baseline"):
        assert re.search(rf"  {side} +[0-9.]+ s  \(runs( [0-9.]+){{5}}; [0-9.]+ MB from disk\)", out), (side, out)
    assert re.search(r"this tree / baseline [0-9.]+ \(paired\)", out), out


def test_page_cache_bench_refuses_dumps_without_payloads(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cmd = [sys.executable, str(ROOT / "bench" / "page_cache.py"), "--dumps", str(tmp_path / "a"), str(tmp_path / "b")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0 and "no .pt or .npy payload files" in proc.stderr, proc.stderr
