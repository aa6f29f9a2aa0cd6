"""Step selections: CANN's ``dump_step`` strings (``"0|3-5|10"``) and msprobe's ``step`` / ``rank`` lists.

The rules are those the CANN graph engine (``DumpProperties::CheckDumpStep``) and the TensorFlow adapter
(``checkDumpStep``) apply before a run starts, and those of msprobe's ``get_real_step_or_rank``:

- ``dump_step``: sets separated by ``|``, each a step ``N`` or a range ``A-B``; digits only (no sign, no
  spaces), each number a signed 32-bit integer, ``A < B`` strictly (``5-5`` is rejected: write ``5``), at most
  100 sets. An empty string means every step.
- msprobe lists: integers from 0 to 1,000,000 or strings ``"N"`` / ``"A-B"`` with ``A <= B``; at most
  1,000,000 elements; an empty list means every step (or rank).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

GE_MAX_SETS = 100
"""CANN's limit on the number of ``|``-separated sets in ``dump_step``."""
INT32_MAX = 2**31 - 1
"""CANN reads each step number as a signed 32-bit integer."""
MSPROBE_MAX = 10**6
"""msprobe's largest step or rank, and the largest number of elements in a ``step`` / ``rank`` list."""

_OTHER_SEPARATORS = re.compile(r"[,;]")


@dataclass(frozen=True)
class StepProblem:
    """What is wrong with a step selection, and the corrected selection when one can be made."""

    message: str
    fix: str = ""


def _merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, non-overlapping, non-adjacent ranges covering the same steps."""
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


def format_ge_steps(ranges: Iterable[tuple[int, int]]) -> str:
    """The ``dump_step`` string of inclusive ranges, merged: ``[(0, 0), (3, 5)]`` gives ``"0|3-5"``."""
    return "|".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in _merge(ranges))


def count_steps(ranges: Iterable[tuple[int, int]]) -> int:
    """How many distinct steps the inclusive ranges cover."""
    return sum(hi - lo + 1 for lo, hi in _merge(ranges))


def parse_ge_steps(text: str) -> tuple[list[tuple[int, int]], list[StepProblem]]:
    """Read a ``dump_step`` string into inclusive ranges and the problems CANN would reject it for.

    Parameters
    ----------
    text
        The ``dump_step`` value, e.g. ``"0|3-5|10"``.

    Returns
    -------
    ranges, problems
        The ranges that could be read (corrected where the intent is plain: a reversed range is swapped), and
        one :class:`StepProblem` per rule broken, whose ``fix`` is the whole corrected string.

    Examples
    --------
    >>> parse_ge_steps("0|3-5|10")
    ([(0, 0), (3, 5), (10, 10)], [])
    >>> ranges, problems = parse_ge_steps("0,5-3")
    >>> [p.message for p in problems], problems[0].fix
    (["steps are separated by '|', not ','", "range '5-3' is reversed"], 'dump_step="0|3-5"')
    """
    if text == "":
        return [], []  # CANN skips the check: every step is dumped (the caller says so)
    problems: list[str] = []
    ranges: list[tuple[int, int]] = []
    body = text.strip()
    if body != text or re.search(r"\s", body):
        problems.append("spaces are not allowed in dump_step")
    for sep in sorted(set(_OTHER_SEPARATORS.findall(body))):
        problems.append(f"steps are separated by '|', not {sep!r}")
    body = re.sub(r"\s*([|,;])\s*", r"\1", body)
    segments = _OTHER_SEPARATORS.sub("|", re.sub(r"\s+", "|", body)).split("|")
    if any(not s for s in segments):
        problems.append("empty set between separators (a leading, trailing or doubled '|')")
    for segment in (s for s in segments if s):
        if segment.startswith("-") or "--" in segment:
            problems.append(f"{segment!r}: steps cannot be negative (they count from 0)")
            continue
        numbers = segment.split("-")
        if len(numbers) > 2 or not all(n.isdigit() and n.isascii() for n in numbers):
            problems.append(f"{segment!r} is not a step N or a range A-B (digits only)")
            continue
        values = [int(n) for n in numbers]
        if any(v > INT32_MAX for v in values):
            problems.append(f"{segment!r}: a step must be at most {INT32_MAX} (a signed 32-bit integer)")
            values = [min(v, INT32_MAX) for v in values]
        lo, hi = values[0], values[-1]
        if len(values) == 2 and lo > hi:
            problems.append(f"range {segment!r} is reversed")
            lo, hi = hi, lo
        elif len(values) == 2 and lo == hi:
            problems.append(f"range {segment!r} has equal bounds, which CANN rejects: write {lo}")
        ranges.append((lo, hi))
    if len(segments) > GE_MAX_SETS:
        problems.append(f"{len(segments)} sets: CANN accepts at most {GE_MAX_SETS} '|'-separated sets")
    if not problems:
        return ranges, []
    fixed = format_ge_steps(ranges)
    if fixed and len(fixed.split("|")) > GE_MAX_SETS:
        fix = "dump fewer steps (ranges A-B count as one set each)"
    else:
        fix = (
            f'dump_step="{fixed}"' if fixed else 'name the steps to dump, e.g. dump_step="0" (no dump_step: every step)'
        )
    return ranges, [StepProblem(m, fix) for m in problems]


def steps_text(steps: str | int | Sequence[int | str]) -> str:
    """A step selection given as ``"0|5"``, ``5``, ``[0, 5]`` or ``[0, "3-5"]``, as a ``dump_step`` string."""
    if isinstance(steps, bool):
        raise TypeError("steps must be a string, an integer or a list of them, not a bool")
    if isinstance(steps, int):
        return str(steps)
    if isinstance(steps, str):
        return steps
    return "|".join(str(s) for s in steps)


def parse_msprobe_list(value: object, key: str) -> tuple[list[int] | None, list[StepProblem]]:
    """Read msprobe's ``step`` or ``rank`` list; return the selected numbers (None: every one) and problems.

    Examples
    --------
    >>> parse_msprobe_list([0, "3-5"], "step")
    ([0, 3, 4, 5], [])
    >>> parse_msprobe_list("0|5", "step")[1][0].fix
    '"step": [0, 5]'
    """
    if value is None or value == []:
        return None, []
    if not isinstance(value, list):
        what = f"the string {value!r}" if isinstance(value, str) else f"{type(value).__name__} {value!r}"
        suggestion = _list_suggestion(value)
        message = f'{key} must be a list such as [0, 5] or [0, "3-5"], not {what}'
        return None, [StepProblem(message, f'"{key}": {suggestion}' if suggestion else "")]
    problems: list[str] = []
    numbers: set[int] = set()
    if len(value) > MSPROBE_MAX:
        problems.append(f"{key} has {len(value)} elements; msprobe accepts at most {MSPROBE_MAX}")
    for element in value:
        if isinstance(element, bool) or not isinstance(element, (int, str)):
            problems.append(f"{key} element {element!r} must be an integer or a string 'N' or 'A-B'")
            continue
        if isinstance(element, int):
            if not 0 <= element <= MSPROBE_MAX:
                problems.append(f"{key} element {element} must be between 0 and {MSPROBE_MAX}")
                continue
            numbers.add(element)
            continue
        parts = element.split("-")
        if len(parts) > 2 or not all(p.isdigit() and p.isascii() for p in parts):
            problems.append(f'{key} element {element!r} is not "N" or "A-B" (digits only, no sign)')
            continue
        lo, hi = int(parts[0]), int(parts[-1])
        if not (0 <= lo <= MSPROBE_MAX and 0 <= hi <= MSPROBE_MAX):
            problems.append(f"{key} element {element!r}: bounds must be between 0 and {MSPROBE_MAX}")
            continue
        if lo > hi:
            problems.append(f'{key} element {element!r} is a reversed range (write "{hi}-{lo}")')
            lo, hi = hi, lo
        numbers.update(range(lo, hi + 1))
    if not problems:
        return sorted(numbers), []
    fix = f'"{key}": {_list_suggestion(sorted(numbers))}' if numbers else ""
    return sorted(numbers), [StepProblem(m, fix) for m in problems]


def _list_suggestion(value: object) -> str:
    """msprobe's list form of a selection written another way (``"0|5"`` gives ``[0, 5]``), or ``""``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"[{value}]"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, str):
        ranges, _ = parse_ge_steps(value)
        items = [str(lo) if lo == hi else f'"{lo}-{hi}"' for lo, hi in _merge(ranges)]
        return "[" + ", ".join(items) + "]" if items else ""
    return ""


def expand_ranges(ranges: Iterable[tuple[int, int]]) -> list[int]:
    """Every step the inclusive ranges cover, in order."""
    return [n for lo, hi in _merge(ranges) for n in range(lo, hi + 1)]
