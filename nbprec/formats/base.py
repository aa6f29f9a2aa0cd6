"""The interface every dump format reader implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from nbprec.dump import Dump


class DumpReader(ABC):
    """Reads one dump format into a :class:`~nbprec.dump.Dump`.

    Subclasses set :attr:`name` and :attr:`description`, implement :meth:`guess_can_open` (cheap:
    look at names and at most a few bytes, never payloads) and :meth:`open` (build the index from
    metadata; give the Dump a loader that reads one payload on demand). A reader probed before others whose
    module is costly to import keeps its guess in :mod:`nbprec.formats.probes` (listed in its ``PROBES``), so that
    telling the others' dumps does not import it.
    """

    name: ClassVar[str]
    description: ClassVar[str]

    @classmethod
    @abstractmethod
    def guess_can_open(cls, path: Path) -> bool:
        """Whether ``path`` looks like this format. Must not raise on foreign input."""

    @abstractmethod
    def open(self, path: Path, **options: Any) -> Dump:
        """Read the index of the dump at ``path``."""


def take_run_option(reader: str, options: dict[str, Any]) -> str | None:
    """Pop the ``run=`` option (the run's name) and reject any other option with a message naming the reader."""
    run = options.pop("run", None)
    if options:
        raise TypeError(f"{reader} reader: unknown option(s) {', '.join(options)}; it accepts run=")
    return run
