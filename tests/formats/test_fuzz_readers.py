"""Fuzzing every reader with damaged copies of real dumps: success, or an NbprecError naming a file of the dump
(problems recorded), never another exception, a hang or a memory kill.

Base dumps: the real msprobe tensor and statistics fixtures, an nbprec dump written by NativeDumpWriter, a
TensorFlow .npy folder and a CANN NPU dump (with an overflow debug file) written by nbprec.formats.cann_write.
Each case copies one, applies seeded mutations (truncate a file, flip bytes, swap two files, replace a file by
a FIFO, a symlink to /dev/zero or a 50 GB sparse file, delete a file), then, in a forked child of a worker
interpreter limited to 2 GiB of address space, opens it, reads every tensor and runs
``nbprec.overflow.scan(dump, payload=True)``; a child that runs past 20 s is killed and counted as a hang.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from nbprec.formats.cann_write import CannTensor, OverflowStatus, dump_folder, write_dump_file, write_opdebug_file
from nbprec.formats.native import NativeDumpWriter

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
MUTATIONS = ("truncate", "flip", "swap", "fifo", "dev_zero", "sparse", "delete")
SEEDS_PER_MUTATION = 5  # 175 cases, about 30 s here (840 cases were run once while writing the readers)
CASE_TIMEOUT = 20
MEMORY = 2 << 30
T0 = 1675157077176648

# The worker: imports nbprec once under the memory limit, then forks one child per case (a case cannot
# disturb the next) and waits for its outcome at most CASE_TIMEOUT seconds.
_WORKER = r"""
import json, os, resource, select, signal, sys, time, traceback
resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
import nbprec, nbprec.overflow
from nbprec.errors import NbprecError

def run(path):
    out = {"outcome": "ok", "errors": [], "problems": 0}
    try:
        dump = nbprec.open(path)
    except NbprecError as exc:
        return {"outcome": "error", "errors": [str(exc)]}
    out["problems"] = len(dump.problems)
    for position in range(len(dump)):
        if dump.index["has_data"].iat[position]:
            try:
                dump.tensor(position)
            except NbprecError as exc:
                out["errors"].append(str(exc))
    try:
        dump.stacks
    except NbprecError as exc:
        out["errors"].append(str(exc))
    nbprec.overflow.scan(dump, payload=True)
    return out

for path in json.loads(sys.argv[1]):
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        try:
            result = run(path)
        except BaseException:
            result = {"outcome": "crash", "errors": [traceback.format_exc()]}
        os.write(write_end, json.dumps(result, default=str).encode("utf-8", "backslashreplace"))
        os._exit(0)
    os.close(write_end)
    data, hung, deadline = b"", False, time.monotonic() + CASE_TIMEOUT
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([read_end], [], [], remaining)[0]:
            hung = True
            break
        chunk = os.read(read_end, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    if hung:
        os.kill(child, signal.SIGKILL)
    _, status = os.waitpid(child, 0)
    if hung:
        result = {"outcome": "hang", "errors": [f"no outcome within {CASE_TIMEOUT} s"]}
    elif data:
        result = json.loads(data)
    elif os.WIFSIGNALED(status):
        result = {"outcome": "killed", "errors": [f"signal {os.WTERMSIG(status)}"]}
    else:
        result = {"outcome": "died", "errors": [f"exit {os.WEXITSTATUS(status)}"]}
    print(json.dumps({"path": path, **result}), flush=True)
"""


def _bases(root: Path) -> dict[str, tuple[Path, tuple[str, ...]]]:
    """Base dumps: format -> (folder, names of its metadata files, which mutations hit more often)."""
    shutil.copytree(FIXTURES / "fp32_tensor_mix", root / "msprobe_tensor")
    shutil.copytree(FIXTURES / "fp32_statistics_mix", root / "msprobe_statistics")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    arrays = {"f32": x, "f16": x.astype(np.float16), "bf16": x.astype(ml_dtypes.bfloat16), "i64": np.arange(6)}
    with NativeDumpWriter(root / "native", run="native") as writer:
        for order, (name, array) in enumerate(arrays.items()):
            op = f"mlp.{name}.forward"
            writer.write_tensor({"name": f"{op}.output.0", "op": op, "order": order, "step": 0, "rank": 0}, array)
            writer.write_module(op, "mlp")
            writer.write_stack(op, ["train.py:1 in main"])
    (root / "tf").mkdir()
    for i, (name, array) in enumerate(arrays.items()):
        np.save(root / "tf" / f"scope_{name}.0.{T0 + i}.npy", array)
    step = dump_folder(root / "cann")
    image = rng.standard_normal((1, 16, 4, 4)).astype(np.float16)
    write_dump_file(step, "conv1/Conv2D", "Conv2D", inputs=[image], outputs=[CannTensor(image, format="NC1HWC0")])
    write_dump_file(step, "fc/MatMul", "MatMul", inputs=[x, x.T.copy()], outputs=[x @ x.T], task_id=2, timestamp=2)
    write_opdebug_file(step, [OverflowStatus(task_id=2, stream_id=0, status=1)], task_id=9, timestamp=3)
    metadata = ("dump.json", "construct.json", "stack.json", "nbprec-dump.json", "index.jsonl", "index.columns.json")
    return {name: (root / name, metadata) for name in ("msprobe_tensor", "msprobe_statistics", "native", "tf", "cann")}


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _mutate(folder: Path, kind: str, rng: np.random.Generator, metadata: tuple[str, ...]) -> str:
    """Damage one file of ``folder`` (a metadata file with probability 0.4); says what was done."""
    files = _files(folder)
    meta = [p for p in files if p.name in metadata]
    pool = meta if meta and rng.random() < 0.4 else files
    target = pool[int(rng.integers(len(pool)))]
    size = target.stat().st_size
    if kind == "truncate":
        os.truncate(target, int(rng.integers(0, max(size, 1))))
    elif kind == "flip":  # in place: the file may be a 50 GB sparse one already
        with target.open("r+b") as f:
            for _ in range(int(rng.integers(1, 9)) if size else 0):
                at = int(rng.integers(size))
                f.seek(at)
                byte = f.read(1)[0] ^ int(rng.integers(1, 256))
                f.seek(at)
                f.write(bytes([byte]))
    elif kind == "swap":
        others = [p for p in files if p != target]
        if not others:
            return "swap: nothing to swap with"
        other = others[int(rng.integers(len(others)))]
        spare = target.with_name(target.name + ".swap")
        target.rename(spare)
        other.rename(target)
        spare.rename(other)
        return f"swap {target.relative_to(folder)} <-> {other.relative_to(folder)}"
    elif kind == "fifo":
        target.unlink()
        os.mkfifo(target)
    elif kind == "dev_zero":
        target.unlink()
        target.symlink_to("/dev/zero")
    elif kind == "sparse":
        os.truncate(target, 50 << 30)  # holes: no disk used
    elif kind == "delete":
        target.unlink()
    return f"{kind} {target.relative_to(folder)}"


def test_damaged_dumps_of_every_format_give_results_or_clear_errors(tmp_path: Path) -> None:
    bases = _bases(tmp_path / "bases")
    cases: dict[str, str] = {}
    for f, (fmt, (base, metadata)) in enumerate(bases.items()):
        for m, kind in enumerate(MUTATIONS):
            for seed in range(SEEDS_PER_MUTATION):
                rng = np.random.default_rng([f, m, seed])
                case = tmp_path / "cases" / f"{fmt}-{kind}-{seed}"
                shutil.copytree(base, case, symlinks=True)
                done = [_mutate(case, kind, rng, metadata)]
                if seed % 2:  # a second mutation on top
                    done.append(_mutate(case, MUTATIONS[int(rng.integers(len(MUTATIONS)))], rng, metadata))
                cases[str(case)] = "; ".join(done)
    worker = _WORKER.replace("MEMORY", str(MEMORY)).replace("CASE_TIMEOUT", str(CASE_TIMEOUT))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", worker, json.dumps(sorted(cases))],
        capture_output=True,
        text=True,
        env=env,
        timeout=len(cases) * (CASE_TIMEOUT + 5),
    )
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(cases), done.stderr[-3000:]
    failures = []
    outcomes: dict[str, int] = {}
    for result in results:
        path, mutation = result["path"], cases[result["path"]]
        outcomes[result["outcome"]] = outcomes.get(result["outcome"], 0) + 1
        if result["outcome"] not in ("ok", "error"):
            failures.append(f"{mutation} ({path}): {result['outcome']}: {result['errors']}")
            continue
        for message in result["errors"]:  # every error names a file of the damaged dump
            if path not in message:
                failures.append(f"{mutation} ({path}): error without the file: {message}")
    assert not failures, "\n".join(failures)
    assert outcomes.get("ok", 0) > len(cases) // 3, outcomes  # most damage is survived with problems listed
