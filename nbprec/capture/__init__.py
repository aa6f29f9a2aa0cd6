"""PyTorch capture: record every module and API call of a model into an nbprec dump.

>>> with nbprec.capture(model, "runs/fp16", level="both", mode="statistics") as cap:  # doctest: +SKIP
...     loss = model(x).sum()
...     loss.backward()

See ``docs/capture.md`` for the naming rules and options. torch is imported when a capture starts.
"""

from __future__ import annotations

from nbprec.capture.api import LEVELS, MODES, Capture, capture, seed_all
from nbprec.capture.select import Selection, parse_steps

__all__ = ["LEVELS", "MODES", "Capture", "Selection", "capture", "parse_steps", "seed_all"]
