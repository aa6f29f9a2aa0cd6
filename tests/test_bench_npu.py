"""bench/npu.py runs end to end on its --quick toy case and prints its figures (no timing is asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from msaccucmp_oracle import msaccucmp_root

BENCH = Path(__file__).resolve().parents[1] / "bench" / "npu.py"


def test_bench_npu_quick_prints_its_ratios(tmp_path: Path) -> None:
    data = tmp_path / "case"
    cmd = [sys.executable, str(BENCH), "--quick", "--data", str(data)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "medians of 5 interleaved runs" in out
    assert re.search(r"nbprec / plain read\s+=\s+[0-9.]+\s+target <= 3: (met|MISSED)", out), out
    assert re.search(r"plain read\s+[0-9.]+ s\s+[0-9]+ MB/s", out) and re.search(r"nbprec\.compare\s+[0-9.]+ s", out)
    assert re.search(r"machine: \d+ cores", out) and "NPU dump files" in out
    assert re.search(r"nbprec command\s+[0-9.]+ s", out) and re.search(r"plain read process\s+[0-9.]+ s", out)
    assert re.search(r"command / read process =\s+[0-9.]+", out), out
    if msaccucmp_root()[0] is not None:  # mindstudio-probe installed: part (b) ran and agrees with nbprec
        assert re.search(r"msaccucmp / nbprec\s+=\s+[0-9.]+\s+target >= 20: (met|MISSED)", out), out
        cosine = re.search(r"agreement: (\d+) cosines, \|msaccucmp - nbprec\| max ([0-9.e+-]+)", out)
        assert cosine and int(cosine[1]) > 100 and float(cosine[2]) < 1e-5, out
    else:
        assert "msaccucmp / nbprec   = skipped: mindstudio-probe is not installed" in out
    # the case is cached: a second run reuses it instead of writing it again
    again = subprocess.run(cmd + ["--skip-msaccucmp", "--skip-cli"], capture_output=True, text=True, timeout=600,
                           check=False)  # fmt: skip
    assert again.returncode == 0 and f"cached at {data}" in again.stdout, again.stdout[-2000:] + again.stderr[-2000:]
