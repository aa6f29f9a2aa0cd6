"""The demo runs: capture the tiny encoder (and optionally MiniLM) in float32 and low precision."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbprec.errors import CaptureError, OverflowDetectedError

MODELS = ("tiny", "minilm")


@dataclass(frozen=True)
class DemoRun:
    """One captured demo run: where it went and what it is."""

    name: str
    path: Path
    description: str
    note: str = ""


def _prepare(path: Path) -> bool:
    """Whether ``path`` may be (re)written: absent, empty, or an earlier nbprec dump (never anything else)."""
    if not path.exists():
        return False
    if path.is_dir() and not any(path.iterdir()):
        return False
    from nbprec.formats.native import NativeDumpReader

    if NativeDumpReader.guess_can_open(path):
        return True
    raise CaptureError(f"{path}: exists and is not an nbprec dump; refusing to overwrite it with a demo run")


def tiny_runs(out: str | os.PathLike[str], *, seed: int = 0, mode: str = "tensor") -> list[DemoRun]:
    """Capture the tiny encoder's training step in float32, bfloat16, float16 and bfloat16 with a faulty GELU."""
    from nbprec.capture import capture, seed_all
    from nbprec.demo.tiny import FAULTY_LAYER, build_tiny, train_step

    variants = [
        ("tiny_fp32", "float32", False, "benchmark: float32"),
        ("tiny_bf16", "bfloat16", False, "target: bfloat16"),
        ("tiny_fp16", "float16", False, "target: float16"),
        ("tiny_bf16_faulty", "bfloat16", True, f"target: bfloat16 with a planted faulty GELU in layers.{FAULTY_LAYER}"),
    ]
    runs = []
    for name, dtype, faulty, what in variants:
        path = Path(out) / name
        seed_all(seed)
        model, ids, labels = build_tiny(dtype, faulty=faulty, seed=seed)
        meta = {"demo": "tiny", "dtype": dtype, "seed": seed, "faulty": faulty}
        with capture(model, path, mode=mode, meta=meta, run=name, overwrite=_prepare(path)):
            train_step(model, ids, labels)
        runs.append(DemoRun(name, path, what))
    return runs


def minilm_runs(out: str | os.PathLike[str], *, seed: int = 0, mode: str = "statistics") -> list[DemoRun]:
    """Capture MiniLM's fine-tuning step (loss scale 2**24) in float32 and float16, then the overflow check."""
    from nbprec.capture import capture, seed_all
    from nbprec.demo.minilm import LOSS_SCALE, build_minilm, finetune_step

    runs = []
    for name, dtype in (("minilm_fp32", "float32"), ("minilm_fp16", "float16")):
        path = Path(out) / name
        seed_all(seed)
        model, inputs, labels = build_minilm(dtype, seed=seed)
        meta = {"demo": "minilm", "dtype": dtype, "seed": seed, "loss_scale": LOSS_SCALE}
        with capture(model, path, mode=mode, meta=meta, run=name, overwrite=_prepare(path)):
            finetune_step(model, inputs, labels)
        runs.append(DemoRun(name, path, f"{dtype}, fine-tuning step with loss scale 2**24"))
    path = Path(out) / "minilm_fp16_overflow"
    seed_all(seed)
    model, inputs, labels = build_minilm("float16", seed=seed)
    note = "no overflow found"
    try:
        meta = {"demo": "minilm", "dtype": "float16", "seed": seed, "loss_scale": LOSS_SCALE}
        with capture(model, path, overflow_check=True, meta=meta, run=path.name, overwrite=_prepare(path)):
            finetune_step(model, inputs, labels)
    except OverflowDetectedError as exc:
        note = f"stopped: {exc}"
    runs.append(DemoRun(path.name, path, "float16 overflow check (overflow_nums=1)", note))
    return runs


def run_demo(
    out: str | os.PathLike[str], model: str = "tiny", *, echo: Callable[[str], Any] | None = None
) -> list[DemoRun]:
    """Capture the demo runs of ``model`` (``"tiny"`` or ``"minilm"``) into the folder ``out``.

    Run folders that already hold an nbprec dump are replaced; any other existing content is refused.

    Examples
    --------
    >>> runs = run_demo("demo-output")          # doctest: +SKIP
    >>> [r.name for r in runs]                  # doctest: +SKIP
    ['tiny_fp32', 'tiny_bf16', 'tiny_fp16', 'tiny_bf16_faulty']
    """
    if model not in MODELS:
        raise CaptureError(f"unknown demo model {model!r}; choose one of {MODELS}")
    Path(out).mkdir(parents=True, exist_ok=True)
    if echo is not None:
        echo(f"capturing the {model} demo runs into {out} ...")
    return tiny_runs(out) if model == "tiny" else minilm_runs(out)


def demo_pairs(runs: list[DemoRun]) -> list[tuple[DemoRun, DemoRun]]:
    """(target, benchmark) pairs among demo runs: every run against the float32 run of the same model.

    Overflow-check runs hold only the overflowing ops and are left out.
    """
    bench = {r.name.rsplit("_", 1)[0]: r for r in runs if r.name.endswith("_fp32")}
    pairs = []
    for run in runs:
        model = run.name.split("_", 1)[0]
        if run.name.endswith(("_fp32", "_overflow")) or model not in bench:
            continue
        pairs.append((run, bench[model]))
    return pairs


def next_steps(
    runs: list[DemoRun], culprit: str | None = None, report: str | os.PathLike[str] | None = None
) -> list[str]:
    """The "next, try" lines ``nbprec demo`` ends with: commands on the demo's own runs, the report, the tutorials.

    Parameters
    ----------
    runs
        The demo runs (their paths as the user gave the output folder).
    culprit
        The first failing op of the faulty pair, for ``isolate`` and ``ni`` (the planted GELU when ``None``).
    report
        The demo report, when one was written.
    """
    paths = {run.name: shlex.quote(str(run.path)) for run in runs}
    if "tiny_bf16_faulty" in paths and "tiny_fp32" in paths:
        target, bench, overflow = paths["tiny_bf16_faulty"], paths["tiny_fp32"], paths.get("tiny_fp16")
    elif "minilm_fp16" in paths and "minilm_fp32" in paths:
        target, bench, overflow = paths["minilm_fp16"], paths["minilm_fp32"], paths["minilm_fp16"]
    else:
        return []
    op = shlex.quote(culprit or "Functional.gelu.1.forward")
    lines = ["next, try:"]
    venv_bin = Path(sys.executable).parent
    if Path(shutil.which("nbprec") or "").parent != venv_bin and (venv_bin / "activate").is_file():
        lines.append(f"  source {shlex.quote(_shown(venv_bin / 'activate'))}   (puts nbprec on your PATH)")
    lines += [
        f"  nbprec compare {target} {bench}",
        f"  nbprec isolate {target} {op}",
        f"  nbprec ni {op} --target {target} --bench {bench}",
    ]
    if overflow:
        lines.append(f"  nbprec overflow {overflow} --bench {bench}")
    if report is not None:
        lines.append(f"  open {shlex.quote(_shown(Path(report)))} in a browser (the offline report)")
    tutorial = Path("notebooks/01-quickstart.ipynb")
    if tutorial.is_file():
        lines.append(f"  jupyter lab {tutorial}   (the tutorials, 01 to 04)")
    else:
        lines.append("  the tutorials: notebooks/ in the nbprec repository (01-quickstart.ipynb first)")
    return lines


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it, else as it is."""
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
