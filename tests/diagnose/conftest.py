"""Realistic log lines and commands for the diagnosis tests, written here (nothing committed as a blob).

The lines follow what the tools print: the kernel's OOM killer (dmesg with ``[seconds]``, syslog and
journalctl prefixes, old and new kernels), the graph engine's plog lines (``[ERROR] GE(pid,process):time
[file.cc:line]tid Function: ...``) and the noise around them (INFO/EVENT/DEBUG plog lines, TBE compile
progress, Python logging).
"""

from __future__ import annotations

import random
import sys
from types import SimpleNamespace

import pytest

GIB = 1073741824
DEVICE_TOTAL = 33285996544  # 31 GiB

#: lines a healthy run prints: none of them is a problem
NOISE = [
    "[INFO] GE(2839,atc):2024-05-11-10:21:33.712.001 [graph_manager.cc:1123]2839 BuildGraph: build graph begin, id: 0",
    "[EVENT] GE(2839,atc):2024-05-11-10:21:33.713.456 [ge_api.cc:352]2839 AddGraph: AddGraph: graph 0 success",
    "[DEBUG] TBE(2840,atc):2024-05-11-10:21:34.000.120 [op_compile.py:88] compile op Conv2D_1 with error_mode=none",
    "[INFO] TEFUSION(2841,atc):2024-05-11-10:21:35.100.001 [fusion_manager.cc:77]2841 no error found in pass 12",
    "2024-05-11 10:21:36,001 - aoe - INFO - tuning subgraph 3/120, cost 0.12s, errors so far: 0",
    "ATC start working now, please wait for a moment.",
    "[12301.112233] IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
    "May 11 10:21:37 node-17 systemd[1]: Started Session 41 of user root.",
    "[INFO] RUNTIME(2839,atc):2024-05-11-10:21:38.000.000 [runtime.cc:1]2839 rtMalloc: size 1073741824 ok",
    "ATC run success, welcome to the next use.",
]

OOM_KILLED = (
    "[12345.679001] Out of memory: Killed process 994362 (aoe) total-vm:23064888kB, anon-rss:16472380kB, "
    "file-rss:1234kB, shmem-rss:5678kB, UID:0 pgtables:33000kB oom_score_adj:0"
)
OOM_KILL_LINE = (
    "[12345.678950] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,"
    "task_memcg=/user.slice/user-0.slice/session-41.scope,task=aoe,pid=994362,uid=0"
)
OOM_PREAMBLE = [
    "[12345.600000] aoe invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0",
    "[12345.600100] CPU: 12 PID: 994380 Comm: aoe Not tainted 5.10.0-60.18.0.50.oe2203.aarch64 #1",
    "[12345.600200] Mem-Info:",
    "[12345.600300] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
    "[12345.600400] [ 994362]     0 994362  5766222  4118414 33792000        0             0 aoe",
]
OOM_REAPER = "[12345.700000] oom_reaper: reaped process 994362 (aoe), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB"


def ge_line(what: str, current: int, total: int, pid: int = 685297) -> str:
    """The graph engine's line for variable (``what="var"``) or graph memory exhausted."""
    return (
        f"[ERROR] GE({pid},python3):2022-04-06-07:15:09.383.996 [graph_var_manager.cc:402]687614 AssignVarMem: "
        f"ErrorNo: 1343225857(Parameter's invalid!) [COMP][MEM_ALLOC][Check][Param] Out of memory: current "
        f"{what} size[{current}] exceeds total {what} size[{total}]"
    )


def garbage(n: int, seed: int = 7) -> bytes:
    """``n`` random bytes without newlines (not UTF-8, NULs, escape sequences)."""
    rng = random.Random(seed)
    return bytes(b for b in (rng.randrange(256) for _ in range(n)) if b != 0x0A)


def log_bytes(lines: list[str | bytes], ending: bytes = b"\n") -> bytes:
    """A log file's bytes from text lines and raw byte lines."""
    return b"".join((line if isinstance(line, bytes) else line.encode()) + ending for line in lines)


AOE = (
    "aoe --framework=5 --model=/data/models/resnet50.onnx --job_type=1 --output=/data/aoe_out "
    '--input_format=NCHW --input_shape="input:1,3,224,224;mask:1,224" --precision_mode=allow_mix_precision'
)
ATC = (
    "atc --framework=5 --model=/data/models/resnet50.onnx --output=/data/om/resnet50 --soc_version=Ascend310P3 "
    '--input_format=NCHW --input_shape="input:1,3,224,224;mask:1,224" --precision_mode=allow_mix_precision'
)


@pytest.fixture(scope="session")
def logs() -> SimpleNamespace:
    """The lines, commands and helpers above, for the test modules (conftest is not importable by name)."""
    module = sys.modules[__name__]
    return SimpleNamespace(**{k: v for k, v in vars(module).items() if not k.startswith("_")})
