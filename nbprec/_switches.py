"""The environment variables that turn one of the commands' speed-ups off (``NBPREC_DAEMON``, ``NBPREC_EARLY``,
``NBPREC_HUGE_PAGES``): each is on unless set to ``0``, ``off``, ``no`` or ``false`` (any case, spaces around).
Imported by the daemon's client, so it imports nothing but :mod:`os`."""

from __future__ import annotations

import os

#: The values that turn a switch off (compared lower-cased, without the spaces around).
OFF = frozenset({"0", "off", "no", "false"})


def switched_off(variable: str) -> bool:
    """Whether the environment variable ``variable`` turns its feature off; unset, it is on."""
    return os.environ.get(variable, "on").strip().lower() in OFF
