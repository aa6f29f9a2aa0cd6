"""How many cores this process may run on (its CPU affinity where the system says, else the machine's count)."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may use: its affinity mask's size on Linux, else ``os.cpu_count()``; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


__all__ = ["usable_cores"]
