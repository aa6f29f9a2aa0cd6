"""What keeping ops or modules in float32 costs: their share of the forward FLOPs and of the forward time.

The profile comes from one run of the target configuration (:meth:`~nbprec.remedy.setup.Setup.run` with
``profile=True``): per API op its forward FLOPs (``torch.utils.flop_counter``, which counts matrix products,
convolutions and attention; an op it does not count, e.g. an elementwise one, counts one FLOP per output
element), its wall time in the target dtype, and the module it ran in. A module's cost is the sum over the
ops that ran inside it. The backward pass is not profiled: its cost follows the forward's roughly (about
twice the FLOPs of each matrix product), so the shares hold for the whole step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class Cost:
    """The float32 share of a keep set.

    Attributes
    ----------
    flops
        Forward FLOPs of the kept ops.
    total_flops
        Forward FLOPs of every op of the step.
    flops_share
        ``flops / total_flops`` (0 when nothing is kept).
    time_share
        Share of the step's forward op time spent in the kept ops (measured in the target dtype).
    ops
        How many op calls the set keeps in float32 (a module counts every op inside it).
    profile
        The profile it was computed from.
    """

    flops: int
    total_flops: int
    flops_share: float
    time_share: float
    ops: int
    profile: Any = None

    def describe(self) -> str:
        """``"3 op calls, 0.8% of the forward FLOPs, 1.2% of its op time in float32"``."""
        return (
            f"{self.ops} op call{'s' if self.ops != 1 else ''}, {self.flops_share:.2%} of the forward FLOPs, "
            f"{self.time_share:.2%} of its op time in float32"
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain values."""
        return {
            "flops": self.flops,
            "total_flops": self.total_flops,
            "flops_share": self.flops_share,
            "time_share": self.time_share,
            "ops": self.ops,
        }


def kept_rows(keep: list[str], profile: pd.DataFrame, granularity: str = "ops") -> pd.DataFrame:
    """The profile rows a keep set covers (ops by name; modules by path, their submodules included)."""
    if profile is None or profile.empty or not keep:
        return pd.DataFrame(columns=getattr(profile, "columns", []))
    if granularity == "ops":
        return profile[profile["op"].isin(set(keep))]
    module = profile["module"].fillna("\0").astype(str)
    mask = pd.Series(False, index=profile.index)
    for path in keep:
        inside = ((module == path) | module.str.startswith(path + ".")) if path else profile["module"].notna()
        mask |= inside
    return profile[mask]


def cost_of(keep: list[str], profile: pd.DataFrame | None, granularity: str = "ops") -> Cost:
    """The :class:`Cost` of keeping ``keep`` in float32, from a run's profile."""
    if profile is None or profile.empty:
        return Cost(0, 0, float("nan"), float("nan"), 0, profile)
    rows = kept_rows(keep, profile, granularity)
    total, seconds = int(profile["flops"].sum()), float(profile["seconds"].sum())
    flops = int(rows["flops"].sum()) if len(rows) else 0
    share = flops / total if total else 0.0
    time_share = float(rows["seconds"].sum()) / seconds if seconds and len(rows) else 0.0
    return Cost(flops, total, share, time_share, len(rows), profile)
