"""A tiny seeded transformer encoder for tests, the fast demo and the benchmark (made on the fly, no files).

The model is written the way real models are: ``torch.nn.functional`` calls, tensor methods and operators,
and ``relu`` imported as ``from torch import relu`` (which function-wrapping capture tools miss). Its
forward checks ``isinstance`` on its submodules, as many real models do, so a capture that replaced modules
with wrappers would break it. ``faulty=True`` plants a faulty kernel: layer 1's GELU returns outputs
perturbed by +50% on every 4th feature (well above bfloat16 rounding noise) when it runs in float16 or
bfloat16, under the same API name (``Functional.gelu``), as a broken low-precision fused kernel would; in
float32 it is right, so keeping that one call in float32 fixes the run (``nbprec.remedy``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from nbprec._optional import require

torch = require("torch", "the tiny demo encoder")
nn = torch.nn
F = torch.nn.functional
relu = torch.relu  # the same object as ``from torch import relu``

#: The layer whose GELU is faulty in the planted-fault variant.
FAULTY_LAYER = 1


def faulty_gelu(input: Any, approximate: str = "none") -> Any:
    """GELU with a planted low-precision bug: in float16/bfloat16 every 4th feature comes out 50% too large.
    Poses as ``F.gelu``."""
    overrides = torch.overrides
    if overrides.has_torch_function_unary(input):
        return overrides.handle_torch_function(faulty_gelu, (input,), input, approximate=approximate)
    with torch._C.DisableTorchFunction():
        out = F.gelu(input, approximate=approximate)
        if input.dtype not in (torch.float16, torch.bfloat16):
            return out
        bad = torch.arange(out.shape[-1], device=out.device) % 4 == 0
        return out * (1 + 0.5 * bad.to(out.dtype))


faulty_gelu.__name__ = faulty_gelu.__qualname__ = "gelu"
faulty_gelu.__module__ = "torch.nn.functional"


@dataclass(frozen=True)
class TinyConfig:
    """Sizes of the tiny encoder and of its synthetic batch."""

    vocab: int = 128
    dim: int = 32
    heads: int = 4
    ff: int = 64
    layers: int = 2
    seq: int = 8
    batch: int = 4
    classes: int = 3


class SelfAttention(nn.Module):
    """Multi-head self-attention written with matmul/softmax/transpose, as model code usually is."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: Any) -> Any:
        b, t, d = x.shape
        h = self.heads

        def split(y: Any) -> Any:
            return y.view(b, t, h, d // h).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // h)
        probs = F.softmax(scores, dim=-1)
        ctx = (probs @ v).transpose(1, 2).reshape(b, t, d)
        return self.out(ctx)


class EncoderLayer(nn.Module):
    """Post-norm transformer layer: attention, residual, LayerNorm, GELU feed-forward, residual, LayerNorm."""

    def __init__(self, cfg: TinyConfig, faulty: bool = False) -> None:
        super().__init__()
        self.attn = SelfAttention(cfg.dim, cfg.heads)
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.ff1 = nn.Linear(cfg.dim, cfg.ff)
        self.ff2 = nn.Linear(cfg.ff, cfg.dim)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.faulty = faulty

    def forward(self, x: Any) -> Any:
        h = self.norm1(x + self.attn(x))
        act = faulty_gelu if self.faulty else F.gelu
        return self.norm2(h + self.ff2(act(self.ff1(h))))


class TinyEncoder(nn.Module):
    """Embedding + positional table, ``layers`` encoder layers, mean pooling and a two-layer ReLU head."""

    def __init__(self, cfg: TinyConfig, faulty: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Parameter(torch.randn(cfg.seq, cfg.dim) * 0.1)
        self.layers = nn.ModuleList(EncoderLayer(cfg, faulty=faulty and i == FAULTY_LAYER) for i in range(cfg.layers))
        self.pool_norm = nn.LayerNorm(cfg.dim)
        self.head1 = nn.Linear(cfg.dim, cfg.dim)
        self.head2 = nn.Linear(cfg.dim, cfg.classes)

    def forward(self, ids: Any) -> Any:
        x = self.embed(ids) + self.pos[: ids.shape[1]]
        for layer in self.layers:
            if not isinstance(layer, EncoderLayer):  # the kind of check module-wrapping tools break
                raise TypeError(f"unexpected layer type {type(layer).__name__}")
            x = layer(x)
        pooled = self.pool_norm(x.mean(dim=1))
        return self.head2(relu(self.head1(pooled)))


def build_tiny(
    dtype: str = "float32", *, faulty: bool = False, seed: int = 0, cfg: TinyConfig | None = None
) -> tuple[Any, Any, Any]:
    """The seeded tiny encoder (weights made in float32, then cast to ``dtype``) and a batch.

    Returns
    -------
    model, ids, labels
        ``ids`` is a ``(batch, seq)`` int64 tensor, ``labels`` a ``(batch,)`` int64 tensor; both are the same
        for every dtype and seed.
    """
    cfg = cfg or TinyConfig()
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = TinyEncoder(cfg, faulty=faulty).to(getattr(torch, dtype))
    ids = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq), generator=gen)
    labels = torch.randint(0, cfg.classes, (cfg.batch,), generator=gen)
    return model, ids, labels


def train_step(model: Any, ids: Any, labels: Any, loss_scale: float = 1.0) -> Any:
    """Forward, float32 cross-entropy times ``loss_scale``, backward; returns the (scaled) loss."""
    logits = model(ids)
    loss = F.cross_entropy(logits.float(), labels) * loss_scale
    loss.backward()
    return loss
