"""Demo runs made on the fly: a tiny seeded encoder and the packaged all-MiniLM-L6-v2 (no network).

``nbprec demo --out DIR [--model tiny|minilm]`` (and ``make demo``) calls :func:`run_demo`. The model
modules import torch (and transformers) when first used.
"""

from __future__ import annotations

from nbprec.demo.runs import MODELS, DemoRun, demo_pairs, minilm_runs, next_steps, run_demo, tiny_runs

__all__ = ["MODELS", "DemoRun", "demo_pairs", "minilm_runs", "next_steps", "run_demo", "tiny_runs"]
