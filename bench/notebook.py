"""How long ``nbprec.compare`` takes in a Jupyter kernel, where users call it.

A kernel runs threads of its own (heartbeat, IOPub, control, history), so ``nbprec.compare`` measures the pairs
on threads there (``parallel="auto"``: forking a process whose other threads may hold a lock is not safe), not on
forked processes as it does in a script or in the command. This times the call where users make it:

- **kernel**: a real IPython kernel (``jupyter_client``, the venv's ``python3`` kernel), started once and warmed
  up (imports, one call per pair); each run is the kernel's own clock around one ``nbprec.compare(T, B)``;
- **plain interpreter**: the same call in a plain Python process started the same way (no other threads: forked
  processes), timed by itself;
- with ``--baseline DIR`` (another nbprec tree, its extensions built), the same two in processes that import that
  tree (``PYTHONPATH=DIR``): before against after a change.

Sides are in-process against in-process, interleaved round by round (``timing.interleave``), medians of
``--runs`` rounds; the paired ratios' medians are printed too.

Usage::

    .venv/bin/python bench/notebook.py --dumps T B [--dumps T B ...] [--runs 7] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import timing  # bench/timing.py

ROOT = Path(__file__).resolve().parents[1]

#: Run in each interpreter first: the library imported and a timing function defined (the kernel and the plain
#: interpreter run the same code).
SETUP = """
import json, threading, time
import nbprec
def _nbprec_bench_call(target, bench):
    start = time.perf_counter()
    nbprec.compare(target, bench)
    seconds = time.perf_counter() - start
    return json.dumps({"seconds": seconds, "threads": threading.active_count(), "file": nbprec.__file__})
"""

#: A plain interpreter that runs what it is sent: one line of JSON (code to exec, or an expression to evaluate
#: and print) at a time.
_PLAIN = """
import json, sys
space = {}
for line in sys.stdin:
    request = json.loads(line)
    if "exec" in request:
        exec(request["exec"], space)
        print(json.dumps(None), flush=True)
    else:
        print(json.dumps(eval(request["eval"], space)), flush=True)
"""


class Plain:
    """A plain Python process (no other threads), fed code through its standard input."""

    def __init__(self, tree: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _PLAIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd="/"
        )

    def _ask(self, request: dict) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the plain interpreter ended ({self.proc.wait()})")
        return json.loads(line)

    def run(self, code: str) -> None:
        self._ask({"exec": code})

    def value(self, expression: str) -> Any:
        return self._ask({"eval": expression})

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


class Kernel:
    """A Jupyter kernel (the ``python3`` kernel of this environment) importing ``tree``'s nbprec."""

    def __init__(self, tree: Path) -> None:
        from jupyter_client.manager import start_new_kernel

        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.manager, self.client = start_new_kernel(kernel_name="python3", env=env, cwd="/")

    def _execute(self, code: str) -> str:
        msg_id = self.client.execute(code, store_history=False)
        out: list[str] = []
        while True:
            msg = self.client.get_iopub_msg(timeout=600)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "execute_result":
                out.append(content["data"]["text/plain"])
            elif kind == "error":
                raise RuntimeError("\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(out)

    def run(self, code: str) -> None:
        self._execute(code)

    def value(self, expression: str) -> Any:
        return json.loads(self._execute(f"print(json.dumps({expression}))"))

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dumps", nargs=2, action="append", required=True, metavar=("TARGET", "BENCH"))
    parser.add_argument("--runs", type=int, default=7, help="interleaved rounds (medians; at least 5)")
    parser.add_argument("--baseline", type=Path, help="another nbprec tree (its extensions built)")
    args = parser.parse_args()
    timing.compile_tree()
    if args.baseline is not None:
        timing.compile_tree(args.baseline)
    if args.runs < 5:
        parser.error("--runs: at least 5")
    trees = {"this tree": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    sides: dict[str, Kernel | Plain] = {}
    try:
        for name, tree in trees.items():
            sides[f"kernel, {name}"] = Kernel(tree)
            sides[f"plain interpreter, {name}"] = Plain(tree)
        pairs = [(str(Path(t).resolve()), str(Path(b).resolve())) for t, b in args.dumps]
        seen: dict[str, dict] = {}
        for name, side in sides.items():
            side.run(SETUP)
            for target, bench in pairs:  # warm-up: imports the call makes, the page cache, first-call costs
                seen[name] = side.value(f"json.loads(_nbprec_bench_call({target!r}, {bench!r}))")
        print(f"machine: {timing.machine()}")
        for name, report in seen.items():
            print(f"  {name}: {report['threads']} threads when it calls nbprec.compare; nbprec from {report['file']}")
        for target, bench in pairs:
            call = f"json.loads(_nbprec_bench_call({target!r}, {bench!r}))['seconds']"
            runners = {name: (lambda side=side, call=call: side.value(call)) for name, side in sides.items()}
            times = timing.interleave(runners, args.runs)
            print(f"{target} against {bench}: nbprec.compare, medians of {args.runs} interleaved rounds")
            for name, values in times.items():
                print(f"  {name:34s} {timing.median(values):.3f} s  (runs {timing.runs_text(values)})")
            for name in trees:
                kernel, plain = times[f"kernel, {name}"], times[f"plain interpreter, {name}"]
                ratio = statistics.median(k / p for k, p in zip(kernel, plain, strict=True))
                print(f"  kernel / plain interpreter, {name}: {ratio:.2f} (paired)")
            if args.baseline:
                for where in ("kernel", "plain interpreter"):
                    mine, theirs = times[f"{where}, this tree"], times[f"{where}, baseline"]
                    ratio = statistics.median(a / b for a, b in zip(mine, theirs, strict=True))
                    print(f"  {where}: this tree / baseline {ratio:.3f} (paired)")
    finally:
        for side in sides.values():
            side.close()


if __name__ == "__main__":
    main()
