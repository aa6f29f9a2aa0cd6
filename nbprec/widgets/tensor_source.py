"""Lazy access to the payloads of a comparison's two dumps, for the tensor inspector and the other views that
show a tensor pair (no widget import)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nbprec.compare.comparison import Comparison
from nbprec.dump import Dump


def _tensor(dump: Dump, name: str, row: pd.Series) -> np.ndarray:
    """The payload of ``name``; in the row's step and rank when the dump holds the name in several
    (a dump with more than one step or rank was matched under its own labels)."""
    from nbprec.errors import TensorNotFoundError

    try:
        return dump.tensor(name)
    except TensorNotFoundError:
        index = dump.index
        hit = np.flatnonzero(
            (index["name"] == name).to_numpy()
            & (index["step"] == row.get("step")).to_numpy()
            & (index["rank"] == row.get("rank")).to_numpy()
        )
        if hit.size == 0:
            raise
        return dump.tensor(int(hit[0]))


class TensorSource:
    """Lazy access to the payloads of a comparison's two dumps, for the tensor inspector.

    Parameters
    ----------
    comparison
        Its ``meta`` names the dump paths when ``target``/``bench`` are not given.
    target, bench
        Already opened dumps (or paths), optional.
    """

    def __init__(
        self, comparison: Comparison, target: Dump | str | Path | None = None, bench: Dump | str | Path | None = None
    ) -> None:
        self._sources: dict[str, Any] = {
            "target": target if target is not None else comparison.meta.get("target"),
            "bench": bench if bench is not None else comparison.meta.get("bench"),
        }
        self._dumps: dict[str, Dump | None] = {}
        self.problem = ""

    def dump(self, side: str) -> Dump | None:
        """The opened dump of ``side`` (``"target"`` or ``"bench"``), or ``None`` when it cannot be opened."""
        if side not in self._dumps:
            source = self._sources.get(side)
            if isinstance(source, Dump) or source is None:
                self._dumps[side] = source
            else:
                from nbprec.errors import NbprecError
                from nbprec.formats import open_dump

                try:
                    self._dumps[side] = open_dump(source)
                except (NbprecError, OSError) as exc:
                    self.problem = f"cannot open the {side} dump {source}: {exc}"
                    self._dumps[side] = None
        return self._dumps[side]

    def pair(self, row: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        """Target and benchmark payloads of one comparison row (raises the core's errors when missing)."""
        from nbprec.errors import TensorDataUnavailableError

        arrays = []
        for side in ("target", "bench"):
            dump = self.dump(side)
            name = row.get(f"{side}_name", "")
            if dump is None or not name:
                why = self.problem or f"no {side} dump or no matched {side} tensor"
                raise TensorDataUnavailableError(f"{row.get('target_name', '')}: {why}")
            arrays.append(_tensor(dump, str(name), row))
        return arrays[0], arrays[1]


__all__ = ["TensorSource"]
