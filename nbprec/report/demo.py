"""The demo report: the offline report of the demo runs ``nbprec demo --report`` (and ``make demo``) writes."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nbprec.report.notebook import ReportError

#: (target run, benchmark run, title) of each demo model's report.
DEMO_PAIRS = (
    ("tiny_bf16_faulty", "tiny_fp32", "Tiny encoder: bfloat16 with a planted faulty GELU against float32"),
    ("minilm_fp16", "minilm_fp32", "MiniLM fine-tuning step: float16 (loss scale 2**24) against float32"),
)


def write_demo_report(
    out: str | os.PathLike[str], runs: Sequence[Any], *, echo: Callable[[str], Any] | None = None
) -> Any:
    """Write ``out/report.html`` (and ``report.ipynb``) comparing the demo runs ``runs`` (:class:`DemoRun`).

    Returns the :class:`~nbprec.report.Report`.
    """
    from nbprec.report import write_report

    paths = {run.name: Path(run.path) for run in runs}
    for target, bench, title in DEMO_PAIRS:
        if target in paths and bench in paths:
            if echo is not None:
                echo(f"writing the demo report ({target} against {bench}) ...")
            report = write_report(paths[target], paths[bench], Path(out) / "report.html", title=title)
            if echo is not None and not report.offline_widgets:
                for problem in report.export.missing:
                    echo(f"note: {problem}")
            return report
    raise ReportError(f"no demo pair among the runs {sorted(paths)}; expected one of {DEMO_PAIRS}")
