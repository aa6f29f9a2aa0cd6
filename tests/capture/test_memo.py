"""The capture's memo of the tensors it has seen (``nbprec/capture/memo.py``)."""

from __future__ import annotations

from typing import Any

import pytest


def test_the_memo_measures_a_tensor_once_per_version() -> None:
    """``TensorMemo.stats_or`` (a gradient hook's one look-up): made once, reused while the values stay, made
    again after an in-place change, never handed to another object."""
    torch = pytest.importorskip("torch")
    from nbprec.capture.lines import EncodedStats
    from nbprec.capture.memo import TensorMemo

    memo, made = TensorMemo(), []
    numbered: dict[int, EncodedStats] = {}  # the k-th statistics made (their fields say k)

    def make(t: Any) -> EncodedStats:
        made.append(t.sum().item())
        return numbered.setdefault(len(made), EncodedStats((str(len(made)),) * 9))

    def k(stats: EncodedStats | None) -> int | None:
        return None if stats is None else int(stats.fields[0])

    t = torch.ones(3)
    assert k(memo.stats_or(t, make)) == 1 and k(memo.stats_or(t, make)) == 1 and made == [3.0]
    assert k(memo.stats(t)) == 1  # noted as stats() reads them
    t.add_(1.0)  # a new version
    assert k(memo.stats_or(t, make)) == 2 and made == [3.0, 6.0]
    other = torch.zeros(2)
    assert k(memo.stats_or(other, make)) == 3 and k(memo.stats_or(t, make)) == 2
    u = torch.ones(1)
    memo.put(u).api_name = "Functional.relu.0.forward.output.0"  # who made it, no statistics yet
    assert k(memo.stats_or(u, make)) == 4 and memo.get(u).api_name == "Functional.relu.0.forward.output.0"
    del t
    assert k(memo.stats_or(torch.full((3,), 2.0), make)) == 5  # a new object, whatever its id
