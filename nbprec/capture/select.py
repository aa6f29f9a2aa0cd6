"""What a capture records: steps, op-name filters and module subtrees."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from nbprec.errors import CaptureError

StepSpec = int | str | Iterable[int] | None
PatternSpec = str | Iterable[str] | None


def parse_steps(spec: StepSpec) -> frozenset[int] | None:
    """Parse a step selection: ``None`` (every step), ``3``, ``"0|5|10"``, ``"0-4"``, ``"0-4|10"`` or ``[0, 2]``.

    Returns the set of selected steps, or None for all of them.

    Examples
    --------
    >>> sorted(parse_steps("0-2|10"))
    [0, 1, 2, 10]
    >>> parse_steps(None) is None
    True
    """
    if spec is None:
        return None
    if isinstance(spec, bool):
        raise CaptureError(f"steps must be an int, a string like '0|5|10' or '0-4', or a list of ints, not {spec!r}")
    if isinstance(spec, int):
        return frozenset({spec})
    if isinstance(spec, str):
        steps: set[int] = set()
        for part in spec.replace(",", "|").split("|"):
            part = part.strip()
            if not part:
                continue
            low, dash, high = part.partition("-")
            try:
                if dash:
                    a, b = int(low), int(high)
                    if b < a:
                        raise ValueError(f"range {part!r} runs backwards")
                    steps.update(range(a, b + 1))
                else:
                    steps.add(int(part))
            except ValueError as exc:
                raise CaptureError(f"bad step selection {spec!r}: {exc}; use e.g. '0', '0|5|10' or '0-4'") from None
        if not steps:
            raise CaptureError(f"bad step selection {spec!r}: no steps in it")
        return frozenset(steps)
    try:
        return frozenset(int(s) for s in spec)
    except (TypeError, ValueError) as exc:
        raise CaptureError(f"bad step selection {spec!r}: {exc}") from None


def _compile(patterns: PatternSpec, what: str) -> tuple[re.Pattern[str], ...]:
    if patterns is None:
        return ()
    if isinstance(patterns, str):
        patterns = [patterns]
    compiled = []
    for p in patterns:
        try:
            compiled.append(re.compile(p))
        except re.error as exc:
            raise CaptureError(f"bad {what} regular expression {p!r}: {exc}") from None
    return tuple(compiled)


@dataclass(frozen=True)
class Selection:
    """Which steps, ops and modules a capture records.

    Parameters
    ----------
    steps
        Selected steps (None: all).
    include
        Regular expressions; an op is recorded only if one of them matches its name (``re.search``).
    exclude
        Regular expressions; an op matching any of them is not recorded.
    modules
        Module paths (``"layers.0"``); only these modules, their submodules and the API calls made inside them
        are recorded. Empty: the whole model.

    Examples
    --------
    >>> sel = Selection.build(steps="0|2", include=r"linear", modules=["layers.0"])
    >>> sel.step_selected(2), sel.op_selected("Functional.linear.0.forward")
    (True, True)
    >>> sel.module_selected("layers.0.ff"), sel.module_selected("layers.1")
    (True, False)
    """

    steps: frozenset[int] | None = None
    include: tuple[re.Pattern[str], ...] = ()
    exclude: tuple[re.Pattern[str], ...] = ()
    modules: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def build(
        cls,
        *,
        steps: StepSpec = None,
        include: PatternSpec = None,
        exclude: PatternSpec = None,
        modules: str | Iterable[str] | None = None,
    ) -> Selection:
        """Validate and compile user selection arguments."""
        if isinstance(modules, str):
            modules = [modules]
        return cls(
            steps=parse_steps(steps),
            include=_compile(include, "include"),
            exclude=_compile(exclude, "exclude"),
            modules=tuple(m.strip(".") for m in (modules or ())),
        )

    def step_selected(self, step: int) -> bool:
        """Whether ``step`` is recorded."""
        return self.steps is None or step in self.steps

    def op_selected(self, op: str) -> bool:
        """Whether the op named ``op`` passes the include/exclude filters."""
        if self.include and not any(p.search(op) for p in self.include):
            return False
        return not any(p.search(op) for p in self.exclude)

    def module_selected(self, path: str) -> bool:
        """Whether the module at ``path`` lies in a selected subtree."""
        if not self.modules:
            return True
        return any(m == "" or path == m or path.startswith(m + ".") for m in self.modules)

    def check_modules(self, known: Iterable[str]) -> None:
        """Raise :class:`CaptureError` if a selected module path is not in the model."""
        known = set(known)
        missing = [m for m in self.modules if m not in known]
        if missing:
            sample = ", ".join(sorted(k for k in known if k)[:8])
            raise CaptureError(f"module subtree(s) {missing} not found in the model; its modules include {sample}")
