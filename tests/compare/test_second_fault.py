"""A second fault after the first: when the first failing op introduced its error, the verdict also names the next
op that introduces one of its own (fixing the first would leave it), and not the ops whose error only looks new.

The runs are real: a small PyTorch model with two branches, captured by nbprec in float32 (the benchmark) and with
planted faults in the target: one branch's activations scaled by 1.5 before a ReLU, the other's by 1.3 before a
tanh (each scale is a multiplication by 1.0 in the benchmark; the second's inputs agree with the benchmark's: a fault
of its own, not the first one's consequence).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import nbprec
from nbprec.capture import capture

torch = pytest.importorskip("torch")
F = torch.nn.functional
MULTI = Path(__file__).resolve().parents[1] / "fixtures" / "multirank"


class _TwoBranches(torch.nn.Module):
    def __init__(self, first: float, second: float) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(11)
        self.a, self.b, self.head = (torch.nn.Linear(32, 32) for _ in range(3))
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
        self.first, self.second = first, second

    def forward(self, x):
        return self.head(F.relu(self.a(x) * self.first) + torch.tanh(self.b(x) * self.second))


def _compare(tmp_path: Path, first: float, second: float) -> nbprec.Comparison:
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(12))
    labels = torch.randint(0, 32, (16,), generator=torch.Generator().manual_seed(13))
    folders = []
    for name, faults in (("target", (first, second)), ("bench", (1.0, 1.0))):
        model = _TwoBranches(*faults)
        folders.append(tmp_path / name)
        with capture(model, folders[-1], level="apis", mode="tensor"):
            F.cross_entropy(model(x), labels).backward()
    return nbprec.compare(folders[0], folders[1], progress=None)


def _muls(comp: nbprec.Comparison):
    """The two branches' multiplications by their scales, in execution order."""
    ops = comp.ops
    return ops[(ops["op_type"] == "mul") & (ops["direction"] == "forward")].sort_values("order")


def test_a_second_fault_is_named_after_the_first(tmp_path):
    comp = _compare(tmp_path, first=1.5, second=1.3)
    first, second = (row for _, row in _muls(comp).iterrows())
    assert comp.first_failing_op()["op"] == first["op"] and first["origin"] == second["origin"] == "introduced"
    verdict = comp.verdict()
    assert f"Another op introduces an error of its own later: {second['op']} (mul): its inputs matched" in (
        verdict.headline
    )
    assert verdict.next_step.endswith(f"then nbprec ni {second['op']} --target {tmp_path / 'target'} --bench "
                                      f"{tmp_path / 'bench'} (the error it introduced)")  # fmt: skip


def test_one_fault_names_no_second_one(tmp_path):
    """With the first fault alone, the loss's gradient looks introduced (its compared input, the 1.0 that starts
    the backward pass, agrees), but it is made from the logits the forward call saved, which already differ: not a
    fault of its own."""
    comp = _compare(tmp_path, first=1.5, second=1.0)
    ops = comp.ops
    loss = ops[(ops["op_type"] == "cross_entropy") & (ops["direction"] == "backward")].iloc[0]
    assert comp.first_failing_op()["op"] == _muls(comp).iloc[0]["op"]
    assert loss["origin"] == "introduced" and loss["status"] == "fail"
    assert "Another op" not in comp.verdict().headline


def test_a_data_parallel_fault_names_no_second_one() -> None:
    """nbprec's capture of a faulty ReLU on rank 1 (``tests/fixtures/multirank/nbprec``): the loss's gradient, made
    from logits that differ, looked introduced, and the first version of this sentence named it."""
    comp = nbprec.compare(MULTI / "nbprec" / "fault", MULTI / "nbprec" / "fp32", progress=None)
    ops = comp.ops
    loss = ops[(ops["op"] == "Functional.cross_entropy.0.backward") & (ops["step"] == 1) & (ops["rank"] == 1)]
    assert loss.iloc[0]["origin"] == "introduced" and loss.iloc[0]["status"] == "fail"
    assert "Another op" not in comp.verdict().headline
