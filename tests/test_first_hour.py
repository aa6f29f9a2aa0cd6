"""The first hour with nbprec: ``make demo``'s command, the commands it suggests next, and the README.

The demo runs as a user runs it (the installed ``nbprec`` command, in a fresh folder, ``--out demo-output``);
every command it prints under "next, try:" must then work as printed, and every ``demo-output/...`` path the
README's examples use must be one the demo wrote.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.slow]

README = Path(__file__).parents[1] / "README.md"
NBPREC = Path(sys.executable).with_name("nbprec")  # the installed command, as `make demo` runs it


def _run(args: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(NBPREC), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """(folder, process) of ``nbprec demo --out demo-output --report`` run in a fresh folder."""
    if not NBPREC.is_file():
        pytest.skip(f"no nbprec command next to {sys.executable}")
    home = tmp_path_factory.mktemp("first-hour")
    return home, _run(["demo", "--out", "demo-output", "--report"], home)


def _next_steps(stdout: str) -> list[str]:
    return [line.strip() for line in stdout.split("next, try:", 1)[1].splitlines() if line.strip()]


def test_the_demo_ends_with_commands_on_its_own_runs(demo):
    _, proc = demo
    assert proc.returncode == 0, proc.stderr
    steps = _next_steps(proc.stdout)
    assert "nbprec compare demo-output/tiny_bf16_faulty demo-output/tiny_fp32" in steps
    assert "nbprec isolate demo-output/tiny_bf16_faulty Functional.gelu.1.forward" in steps
    assert any(s.startswith("nbprec ni Functional.gelu.1.forward --target demo-output/tiny_bf16_faulty") for s in steps)
    assert any(s.startswith("open demo-output/report.html") for s in steps)
    assert any("notebooks/" in s for s in steps)  # the tutorials


def test_no_kernel_transport_warning_in_the_demo(demo):
    _, proc = demo
    assert "without encryption" not in proc.stdout + proc.stderr
    assert proc.stderr.strip() == "" or "note:" in proc.stderr  # nothing but nbprec's own notes


@pytest.mark.parametrize("verb", ["compare", "isolate", "ni", "overflow"])
def test_every_suggested_command_works_as_printed(demo, verb):
    home, proc = demo
    line = next(s for s in _next_steps(proc.stdout) if s.startswith(f"nbprec {verb} "))
    done = _run(shlex.split(line)[1:], home)
    assert done.returncode == 0, f"{line}\n{done.stderr}"
    if verb == "isolate":
        assert "kernel error" in done.stdout


def test_the_readme_examples_use_the_demo_s_paths(demo):
    home, _ = demo
    text = README.read_text(encoding="utf-8")
    paths = set(re.findall(r"demo-output/[\w./-]*\w", text))
    assert paths, "the README's examples should run on the demo's output"
    for path in paths:
        assert (home / path).exists(), f"README names {path}, which `make demo` does not write"
    assert "nbprec compare demo-output/tiny_bf16_faulty demo-output/tiny_fp32" in text
    assert "<owner>" not in text and not re.search(r"mybinder\.org/v2/gh/<", text)  # no placeholder to fill in


def test_a_misspelt_op_gets_the_nearest_names(demo):
    home, _ = demo
    done = _run(["isolate", "demo-output/tiny_bf16_faulty", "Functional.gleu.1.forward"], home)
    assert done.returncode == 1
    assert "did you mean 'Functional.gelu.1.forward'" in done.stderr


def test_info_says_what_its_bytes_count(demo):
    home, _ = demo
    done = _run(["info", "demo-output/tiny_fp32"], home)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.strip().startswith("tensor data")]
    assert lines and "element counts x item sizes" in lines[0], done.stdout


def _write_run(path: Path, dtype: type, fault: bool) -> Path:
    """A 3-op MLP computed in numpy, in nbprec's dump format; ``fault`` perturbs the last op's output only."""
    from nbprec.formats.native import NativeDumpWriter

    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    w1, w2 = (rng.standard_normal((32, n)).astype(np.float32) / 6 for n in (32, 8))
    h = (x.astype(dtype) @ w1.astype(dtype)).astype(dtype)
    g = np.tanh(h).astype(dtype)
    y = (g @ w2.astype(dtype)).astype(dtype)
    if fault:
        y = (y + rng.standard_normal(y.shape).astype(dtype)).astype(dtype)
    ops = [("Functional.linear.0.forward", "linear", x.astype(dtype), h, None),
           ("Functional.tanh.0.forward", "tanh", h, g, "Functional.linear.0.forward"),
           ("Functional.linear.1.forward", "linear", g, y, "Functional.tanh.0.forward")]  # fmt: skip
    with NativeDumpWriter(path, run=path.name, meta={"dtype": np.dtype(dtype).name}) as w:
        for order, (op, op_type, x_in, out, producer) in enumerate(ops):
            base = {"step": 0, "rank": 0, "order": order, "op": op, "op_type": op_type, "api": op_type,
                    "module": "mlp", "direction": "forward"}  # fmt: skip
            w.write_tensor({**base, "name": f"{op}.input.0", "role": "input", "slot": "0"}, x_in)
            w.write_tensor({**base, "name": f"{op}.output.0", "role": "output", "slot": "0"}, out)
            if producer:
                w.write_edge(f"{producer}.output.0", op, "0")
    return path


def test_counts_of_one_are_singular(tmp_path, capsys):
    from nbprec.cli import main
    from nbprec.cli.reports import _demo_comparisons
    from nbprec.demo import DemoRun

    target = _write_run(tmp_path / "mlp_fp16", np.float16, fault=True)
    bench = _write_run(tmp_path / "mlp_fp32", np.float32, fault=False)
    assert main(["compare", str(target), str(bench), "--top", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "ops        3, failing 1" in out and "worst 1 op by output" in out
    _demo_comparisons([DemoRun("mlp_fp16", target, "target"), DemoRun("mlp_fp32", bench, "benchmark")])
    line = next(line for line in capsys.readouterr().out.splitlines() if "mlp_fp16" in line)
    assert "1 failing op of 3" in line and "ops of" not in line
