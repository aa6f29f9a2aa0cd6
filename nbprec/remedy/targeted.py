"""From an overflow to a targeted dump: record only the overflowing ops, in both configurations, and judge.

The Ascend case studies' list mode: an overflow check names the ops; a second capture records only their
inputs and outputs (forward and backward, full tensors by default) in the target and in the float32
benchmark configuration; comparing the two small dumps shows what each op did differently, and the final
outputs of the same two runs (loss, outputs, gradients, judged in memory by :mod:`nbprec.remedy.judge`) say
whether the overflow mattered, at a fraction of a full dump's size.

>>> t = nbprec.remedy.targeted_dump(setup, "runs/fp16_overflow", "runs/targeted")   # doctest: +SKIP
>>> print(t.to_text())                                                              # doctest: +SKIP
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nbprec.errors import NbprecError
from nbprec.remedy.judge import Judgement, judge
from nbprec.remedy.remedy import MODULE_NAME, OP_NAME, forward_name
from nbprec.remedy.setup import RemedyError, Setup

#: Bytes of a .npy header, added per tensor when a full tensor dump's size is estimated from statistics.
NPY_HEADER = 128
#: Bytes of the ``"file": "tensors/NNNNNN-....npy"`` entry of an index line, besides the tensor name.
FILE_KEY = 30


def human_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def folder_size(path: str | os.PathLike[str]) -> int:
    """Bytes of every file under ``path``."""
    root = Path(path)
    if root.is_file():
        return root.stat().st_size
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def tensor_dump_size(path: str | os.PathLike[str]) -> int:
    """The size of ``path`` as a tensor-mode dump: measured if it holds payloads, else its size plus, per tensor
    record of its index, the payload (``numel * itemsize`` and a .npy header) and its file name in the index."""
    from nbprec.dtypes import numpy_dtype
    from nbprec.formats import open_dump

    dump = open_dump(path)
    size = folder_size(path)
    if str(dump.meta.get("mode", "")) == "tensor":
        return size
    index = dump.index
    sizes: dict[str, int] = {}
    for d in index["dtype"].astype(str).unique():
        try:
            sizes[d] = numpy_dtype(d).itemsize
        except NbprecError:  # a dtype nbprec does not know: count it as 4 bytes
            sizes[d] = 4
    widths = index["dtype"].astype(str).map(sizes).to_numpy(np.int64)
    numel = index["numel"].fillna(0).to_numpy(np.int64)
    # each payload: its .npy (header + data), and its file name in the index and in the index's column cache
    names = int(index["name"].astype(str).str.len().sum())
    return size + int((numel * widths).sum()) + (NPY_HEADER + 2 * FILE_KEY) * len(index) + 2 * names


def _forward_ops(source: Any) -> list[str]:
    """Op names named by an overflow check, a scan, an error or a list (forward names)."""
    from nbprec.errors import OverflowDetectedError

    if isinstance(source, OverflowDetectedError):
        names = [source.op]
    elif hasattr(source, "overflows") and isinstance(source.overflows, list):  # a Capture
        names = list(source.overflows)
    elif type(source).__name__ == "OverflowReport":
        names = _blamed(source)
    elif (isinstance(source, (str, os.PathLike)) and Path(source).exists()) or type(source).__name__ == "Dump":
        from nbprec.overflow import scan

        names = _blamed(scan(source))
    elif isinstance(source, str):
        names = OP_NAME.findall(source) + MODULE_NAME.findall(source)
    else:
        names = [str(s) for s in source]
    ops = list(dict.fromkeys(forward_name(n) for n in names))
    if not ops:
        raise RemedyError(f"no overflowing op named by {type(source).__name__}: nothing to record")
    return ops


def _blamed(report: Any) -> list[str]:
    """The ops an overflow report names: critical ones and amplifiers, else the first abnormal one."""
    o = report.ops
    if o.empty:
        return []
    picked = o[(o["level"] == "critical") | ((o["level"] == "high") & ~o["in_abnormal"].astype(bool))]
    if "inherited" in picked:
        picked = picked[~picked["inherited"].astype(bool)]
    names = picked["op"].astype(str).tolist()
    if not names and report.first_abnormal() is not None:
        names = [str(report.first_abnormal()["op"])]
    return names


def include_patterns(ops: list[str]) -> list[str]:
    """Anchored regular expressions for ``capture(include=...)`` recording exactly these ops (and, through
    them, their backward).

    >>> include_patterns(["Tensor.float.0.forward"])
    ['^Tensor\\\\.float\\\\.0\\\\.forward$']
    """
    return [f"^{re.escape(op)}$" for op in ops]


@dataclass
class TargetedDump:
    """Two small dumps of the overflowing ops, their comparison, and whether the overflow mattered.

    Attributes
    ----------
    ops
        The ops recorded (forward names; their backward is recorded with them).
    include
        The ``include`` patterns given to the capture.
    target, bench
        The two dump folders.
    comparison
        ``nbprec.compare(target, bench)``.
    judgement
        The final outputs of the same two runs, judged in memory.
    size
        Bytes of the two targeted dumps.
    full_size
        Bytes of the two full dumps in the same mode (measured, or estimated from a statistics dump: see
        :func:`tensor_dump_size`), or None.
    full_measured
        Whether :attr:`full_size` was measured rather than estimated.
    """

    ops: list[str]
    include: list[str]
    target: Path
    bench: Path
    comparison: Any
    judgement: Judgement
    size: int
    full_size: int | None
    full_measured: bool

    @property
    def mattered(self) -> bool:
        """Whether the final outputs fail (the overflow changed the results)."""
        return not self.judgement.passed

    @property
    def verdict(self) -> str:
        """``"harmful"`` or ``"transient, harmless"`` (the words of :mod:`nbprec.overflow`)."""
        from nbprec.overflow.report import VERDICT_HARMFUL, VERDICT_HARMLESS

        return VERDICT_HARMFUL if self.mattered else VERDICT_HARMLESS

    @property
    def recorded(self) -> list[str]:
        """Ops present in the target dump (forward and backward)."""
        return list(dict.fromkeys(self.comparison.ops["op"].astype(str)))

    def size_text(self) -> str:
        """``"1.2 MiB, 0.80% of a full dump (150.0 MiB, estimated from statistics)"``."""
        text = human_bytes(self.size)
        if self.full_size:
            how = "measured" if self.full_measured else "estimated from statistics"
            text += f", {self.size / self.full_size:.2%} of a full dump ({human_bytes(self.full_size)}, {how})"
        return text

    def to_text(self) -> str:
        """What was recorded, what differs, whether it mattered, and the sizes."""
        ops = self.comparison.ops
        lines = [
            f"targeted dump of {len(self.ops)} op(s): {', '.join(self.ops)}",
            f"  target {self.target}, benchmark {self.bench}: {self.size_text()}",
        ]
        for row in ops.itertuples(index=False):
            lines.append(f"  {row.op:<48} {row.status:<5} output cosine {row.out_cosine:.6g}")
        failing = ", ".join(self.judgement.failing()) or "none"
        lines.append(
            f"did it matter? {self.verdict}: final outputs failing {self.judgement.rule.split(':')[0]} rule: {failing}"
        )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<nbprec.remedy.TargetedDump {len(self.ops)} ops, {self.verdict}, {self.size} bytes>"

    def _repr_html_(self) -> str:
        cols = ["op", "status", "in_cosine", "out_cosine", "out_rel_euclidean"]
        table = self.comparison.ops[[c for c in cols if c in self.comparison.ops]]
        head = f"<p><b>Did it matter? {html.escape(self.verdict)}</b> ({html.escape(self.size_text())})</p>"
        return head + table.to_html(index=False, escape=True) + self.judgement.table.to_html(index=False, escape=True)


def targeted_dump(
    setup: Setup,
    source: Any,
    out: str | os.PathLike[str],
    *,
    mode: str = "tensor",
    full: Any = "estimate",
    echo: Any = None,
) -> TargetedDump:
    """Capture only the overflowing ops named by ``source``, in the target and the benchmark configuration.

    Parameters
    ----------
    setup
        The model, inputs and target configuration.
    source
        What names the ops: a :class:`~nbprec.capture.Capture` run with ``overflow_check=True`` (its
        ``overflows``), the :class:`~nbprec.errors.OverflowDetectedError` it raised, an overflow-check dump or
        any dump (scanned: its critical ops), an :class:`~nbprec.overflow.OverflowReport`, or op names.
    out
        Folder for ``target/`` and ``bench/`` (and ``full_target/``, ``full_bench/`` when measuring).
    mode
        Capture mode of the targeted dumps (``"tensor"``: full tensors of those ops).
    full
        The full dumps to set the size against: ``"estimate"`` (statistics captures of both configurations,
        payload sizes from their index), ``"measure"`` (full captures in ``mode``), a pair of existing dump
        folders (target, benchmark) of the full run, or None.
    echo
        A callable receiving progress lines.
    """
    from nbprec.compare import compare

    say = echo or (lambda _line: None)
    ops = _forward_ops(source)
    include = include_patterns(ops)
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    options = {"mode": mode, "include": include}
    say(f"targeted dump: recording {len(ops)} op(s) in both configurations ...")
    target = setup.run("target", capture=root / "target", capture_options=options)
    bench = setup.run("bench", capture=root / "bench", capture_options=options)
    if not any(op in set(target.seen) for op in ops):
        raise RemedyError(f"the target run never called {', '.join(ops)}: were they named by a capture of this step?")
    comparison = compare(root / "target", root / "bench", rule=setup.rule, progress=False)
    size = folder_size(root / "target") + folder_size(root / "bench")
    full_size, measured = None, False
    if isinstance(full, (tuple, list)):
        full_size = sum(tensor_dump_size(p) if mode == "tensor" else folder_size(p) for p in full)
        measured = all(
            mode != "tensor" or str(_mode_of(p)) == "tensor" for p in full
        )  # a tensor dump is measured, a statistics one estimated
    elif full in ("estimate", "measure"):
        how = {"mode": mode if full == "measure" else "statistics"}
        say(f"targeted dump: capturing the full run in both configurations to {full} its size ...")
        paths = [root / "full_target", root / "full_bench"]
        setup.run("target", capture=paths[0], capture_options=how)
        setup.run("bench", capture=paths[1], capture_options=how)
        measured = full == "measure" or mode != "tensor"
        full_size = sum(tensor_dump_size(p) if mode == "tensor" else folder_size(p) for p in paths)
    elif full is not None:
        raise RemedyError(f"full must be 'estimate', 'measure', a pair of dump folders or None, not {full!r}")
    return TargetedDump(
        ops,
        include,
        root / "target",
        root / "bench",
        comparison,
        judge(target, bench, rule=setup.rule, precision=setup.dtype),
        size,
        full_size,
        measured,
    )


def _mode_of(path: Any) -> str:
    from nbprec.formats import open_dump

    return str(open_dump(path).meta.get("mode", ""))
