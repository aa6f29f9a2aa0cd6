"""Overflow-check mode: find the first ops whose outputs (or gradients) hit NaN, inf or the dtype's maximum.

Like ptdbg_ascend's ``register_hook(model, overflow_check, overflow_nums=1)``: after every op the capture
checks the op's forward outputs, or for a backward op the gradients it received and produced; an op with
a NaN, an inf or a float16/bfloat16 value at the dtype's largest finite value (65504 for float16) is an
*overflow*. Each overflow is written to the dump with the op's inputs and outputs as full tensors; after
``overflow_nums`` of them (-1: never) the capture raises :class:`~nbprec.errors.OverflowDetectedError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nbprec.capture.tensors import overflow_kind
from nbprec.errors import CaptureError, OverflowDetectedError

#: Ops that copy, select or fill values rather than compute them: saturation there is not an overflow.
COPIES_VALUES = frozenset(
    {
        "where",
        "masked_fill",
        "masked_fill_",
        "fill_",
        "full",
        "full_like",
        "new_full",
        "clamp",
        "clamp_",
        "clip",
        "cat",
        "stack",
        "expand",
        "expand_as",
        "repeat",
        "index_select",
        "gather",
        "__getitem__",
        "to",
        "type_as",
        "copy_",
        "view",
        "reshape",
        "transpose",
        "permute",
        "contiguous",
        "squeeze",
        "unsqueeze",
        "flatten",
        "detach",
        "clone",
        "max",
        "min",
        "amax",
        "amin",
        "maximum",
        "minimum",
    }
)


@dataclass
class OverflowCheck:
    """Counts overflows and decides when to stop.

    Parameters
    ----------
    limit
        Overflows to record before stopping (``overflow_nums``); -1 never stops.
    path
        The dump folder, named in the error.
    """

    limit: int
    path: str
    found: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.limit, int) or isinstance(self.limit, bool) or (self.limit < 1 and self.limit != -1):
            raise CaptureError(f"overflow_nums must be a positive int or -1 (never stop), not {self.limit!r}")

    @staticmethod
    def problems(
        torch: Any, checked: list[tuple[str, str, Any]], op_type: str, sources: list[tuple[str, Any]]
    ) -> list[str]:
        """Descriptions (``"output.0: inf"``) of the overflowing tensors among ``checked`` (role, slot, tensor).

        NaN and inf always count. A value at the dtype's maximum counts only if the op *made* it: not for ops
        that copy or select values (``torch.where(mask, 0, finfo.min)`` builds attention masks that way), and
        not when one of the op's ``sources`` (its inputs) already held such a value.
        """
        found = []
        saturated = []
        for role, slot, t in checked:
            kind = overflow_kind(torch, t)
            if kind == "saturated":
                saturated.append(f"{role}.{slot}: {kind}")
            elif kind is not None:
                found.append(f"{role}.{slot}: {kind}")
        if (
            saturated
            and op_type not in COPIES_VALUES
            and not any(overflow_kind(torch, t) is not None for _, t in sources)
        ):
            found.extend(saturated)
        return found

    def register(self, op: str, problems: list[str]) -> None:
        """Note one overflowing op; raise :class:`OverflowDetectedError` when the limit is reached."""
        self.found.append(op)
        if self.limit != -1 and len(self.found) >= self.limit:
            what = ", ".join(problems[:4]) + (" ..." if len(problems) > 4 else "")
            raise OverflowDetectedError(
                f"overflow detected in {op} ({what}); stopped after {len(self.found)} overflowing op(s) "
                f"(overflow_nums={self.limit}). Its inputs and outputs are in the dump {self.path}",
                op=op,
                dump_path=self.path,
            )
