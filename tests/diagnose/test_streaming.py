"""Big logs are streamed: 200 MB, generated on the fly or sparse on disk, diagnosed with bounded memory.

Peak memory is measured in a fresh interpreter from /proc/self/status (VmHWM, the resident high-water mark),
once after importing and warming up and once after the diagnosis: loading the log whole would add 200 MB.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

MIB = 1 << 20
SIZE = 200 * MIB
#: resident memory the diagnosis of 200 MB may add (read buffers, a 256 KiB window, the summary's bounded table)
BUDGET = 48 * MIB

_CHILD = r"""
import json, sys
from nbprec.diagnose import diagnose

def hwm():
    with open("/proc/self/status") as status:
        return next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmHWM:"))

diagnose("[ERROR] GE(1,x):2024 warm up E19999 current var size[1] exceeds total var size[0] \n oom-kill:pid=1")
base = hwm()
d = diagnose(sys.argv[1])
print(json.dumps({"base": base, "peak": hwm(), "sources": [s.__dict__ for s in d.sources],
                  "findings": [[f.kind, f.where, f.values.get("count"), f.values.get("graph_memory_max_size"),
                                f.values.get("rss_kb")] for f in d.findings]}))
"""


def _run(argument: str, stdin=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, argument], stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _finish(child: subprocess.Popen) -> dict:
    out, err = child.stdout.read(), child.stderr.read()
    assert child.wait(timeout=600) == 0, err.decode()
    return json.loads(out)


@pytest.mark.slow
def test_200_mb_generated_on_the_fly_through_stdin(logs):
    runtime = "[ERROR] RUNTIME(7,python3):2024-05-11-10:21:38.000.000 [stream.cc:9]7 StreamSync: failed ErrorNo: 507011"
    block = logs.log_bytes([*(line + " " + "=" * 100 for line in logs.NOISE), runtime])  # plog-sized lines
    ge = logs.log_bytes([logs.ge_line("graph", 27917287424, 27917287423)])
    child = _run("-", stdin=subprocess.PIPE)
    written, blocks = 0, 0
    while written < SIZE:
        chunk = block * 1000
        if blocks == 100:
            chunk += ge + logs.garbage(1 << 20) + b"\n" + logs.log_bytes([logs.OOM_KILL_LINE, logs.OOM_KILLED])
        child.stdin.write(chunk)
        written += len(chunk)
        blocks += 1
    child.stdin.close()
    result = _finish(child)
    assert result["sources"][0]["bytes"] == written >= SIZE
    findings = {f[0]: f for f in result["findings"]}
    assert set(findings) == {"ge-graph-memory", "host-oom", "log-error"}
    assert findings["ge-graph-memory"][3] == 27917287424 + 1073741824
    assert findings["host-oom"][4] == 16472380 + 1234 + 5678
    assert findings["log-error"][2] == blocks * 1000  # every RUNTIME line counted, one finding
    assert result["peak"] - result["base"] < BUDGET, (result["peak"] - result["base"]) / MIB


@pytest.mark.slow
def test_a_sparse_200_mb_file_of_one_line(logs, tmp_path):
    path = Path(tmp_path) / "sparse.log"
    with path.open("wb") as handle:
        handle.truncate(SIZE)  # 200 MB of NUL bytes without a newline: one huge line, no disk used
        handle.seek(SIZE)
        handle.write(b" current var size[13962468864] exceeds total var size[13958643712]\n")
        handle.write(logs.log_bytes([logs.OOM_KILLED, *logs.NOISE]))
    result = _finish(_run(str(path)))
    (source,) = result["sources"]
    assert source["long_lines"] == 1 and source["lines"] == 2 + len(logs.NOISE)
    assert [(f[0], f[1]) for f in result["findings"]] == [("ge-var-memory", f"{path}:1"), ("host-oom", f"{path}:2")]
    assert result["peak"] - result["base"] < BUDGET, (result["peak"] - result["base"]) / MIB
