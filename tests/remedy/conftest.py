"""Small real PyTorch models with planted faults, and their remedy setups.

``PlantedNet`` is an MLP of residual blocks (linear, activation, linear, layer norm) with faults planted in
chosen blocks:

- ``"kernel"``: the block's activation is a broken low-precision kernel: ``F.silu``'s float16/bfloat16 path
  returns every 3rd feature 60% too large (right in float32), under the name ``Functional.silu``;
- ``"overflow"``: the block scales its hidden activations by 1e5 before a layer norm (fine in float32,
  ``inf`` past float16's 65504, then NaN): the scale-up and the layer norm must both stay in float32;
- ``"cancel"``: the block adds 4096 and subtracts it again (exact in float32; in bfloat16 the values are
  rounded to multiples of 32, in float16 to multiples of 4): both ops must stay in float32;
- ``"clamped"``: the block's 1e5 scale-up overflows in float16 but a clamp to [-1, 1] absorbs it (harmless).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from torch_state import restore_torch_state

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

FAULTS = ("kernel", "overflow", "cancel", "clamped")


def faulty_silu(input, inplace=False):
    """SiLU with a planted low-precision bug; poses as ``F.silu``."""
    overrides = torch.overrides
    if overrides.has_torch_function_unary(input):
        return overrides.handle_torch_function(faulty_silu, (input,), input)
    with torch._C.DisableTorchFunction():
        out = F.silu(input)
        if input.dtype not in (torch.float16, torch.bfloat16):
            return out
        bad = torch.arange(out.shape[-1]) % 3 == 0
        return out * (1 + 0.6 * bad.to(out.dtype))


faulty_silu.__name__ = faulty_silu.__qualname__ = "silu"
faulty_silu.__module__ = "torch.nn.functional"


class Block(nn.Module):
    """x + lin2(act(norm_in(fault(lin1(x))))), then a layer norm."""

    def __init__(self, dim: int, hidden: int, fault: str | None = None) -> None:
        super().__init__()
        self.lin1 = nn.Linear(dim, hidden)
        self.norm_in = nn.LayerNorm(hidden)
        self.lin2 = nn.Linear(hidden, dim)
        self.norm = nn.LayerNorm(dim)
        self.fault = fault

    def forward(self, x):
        h = self.lin1(x)
        if self.fault == "overflow":
            h = h * 1e5
        elif self.fault == "cancel":
            h = (h + 4096.0) - 4096.0
        elif self.fault == "clamped":
            h = torch.clamp(h * 1e5, -1.0, 1.0)
        h = self.norm_in(h)
        h = faulty_silu(h) if self.fault == "kernel" else F.silu(h)
        return self.norm(x + self.lin2(h))


class PlantedNet(nn.Module):
    """Input projection, residual blocks (some with planted faults), a classification head."""

    def __init__(self, faults: dict[int, str] | None = None, dim: int = 16, hidden: int = 32, blocks: int = 3) -> None:
        super().__init__()
        faults = faults or {}
        self.inp = nn.Linear(8, dim)
        self.blocks = nn.ModuleList(Block(dim, hidden, faults.get(i)) for i in range(blocks))
        self.head = nn.Linear(dim, 4)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def planted(faults: dict[int, str] | None = None, seed: int = 0):
    """The planted model (float32, seeded), its inputs and labels."""
    torch.manual_seed(seed)
    model = PlantedNet(faults)
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(16, 8, generator=gen)
    y = torch.randint(0, 4, (16,), generator=gen)
    return model, x, y


def planted_setup(faults: dict[int, str] | None, dtype: str = "float16", **options):
    """A remedy Setup of the planted model (its faults show only in low precision: float32 is the benchmark)."""
    from nbprec.remedy import Setup

    model, x, y = planted(faults)
    return Setup(model, lambda m: F.cross_entropy(m(x).float(), y), dtype=dtype, **options)


@pytest.fixture(autouse=True)
def _restore_global_torch_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Runs call seed_all, which sets environment variables: undo that per test."""
    yield from restore_torch_state(monkeypatch)
