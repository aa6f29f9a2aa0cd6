"""The capture's memo of the tensors it has seen: which record produced each, its statistics, its payload file.

Keyed by tensor identity (a weak reference per entry, so entries die with their tensors) and checked against
the tensor's version counter, so that statistics and payload files are reused only while a tensor holds the
same values. Some ops change an input without telling its counter (batch norm's running statistics): the
recorder forgets those inputs (:meth:`TensorMemo.forget`). Writes made behind torch's back (through ``.data``,
or a numpy view of the memory) are not noticed: a later record of the tensor in the same step repeats the
earlier one's statistics and payload.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from nbprec.capture.lines import EncodedStats


class _Produced:
    """What the capture knows about a tensor it has seen: who produced it, its (encoded) statistics, and the
    payload file holding its values (``file`` at ``file_version``, with ``links`` hard links made to it)."""

    __slots__ = ("api_name", "file", "file_version", "links", "module_name", "ref", "stats", "version")

    def __init__(self, ref: weakref.ref[Any], version: int) -> None:
        self.ref = ref
        self.version = version
        self.stats: EncodedStats | None = None
        self.api_name: str | None = None
        self.module_name: str | None = None
        self.file: str | None = None
        self.file_version = -1
        self.links = 0


class TensorMemo:
    """Tensor identity -> producing op's tensor names and cached statistics (entries die with the tensor)."""

    def __init__(self) -> None:
        self._entries: dict[int, _Produced] = {}
        entries = self._entries

        def drop(ref: weakref.KeyedRef) -> None:  # one callback for every entry (it holds the dict, not self)
            current = entries.get(ref.key)
            if current is not None and current.ref is ref:
                del entries[ref.key]

        self._drop = drop

    def get(self, t: Any) -> _Produced | None:
        """The entry of tensor ``t`` (the same object), or None."""
        entry = self._entries.get(id(t))
        return entry if entry is not None and entry.ref() is t else None

    def put(self, t: Any) -> _Produced:
        """The entry of ``t``, created (or reset, for a different object with a recycled id) if needed."""
        entry = self.get(t)
        return entry if entry is not None else self._new_entry(t, id(t), t._version)

    def _new_entry(self, t: Any, key: int, version: int) -> _Produced:
        """A fresh entry for ``t`` (whose ``id`` is ``key``), replacing any entry of a dead tensor with that id."""
        entry = self._entries[key] = _Produced(weakref.KeyedRef(t, self._drop, key), version)
        return entry

    def stats(self, t: Any) -> EncodedStats | None:
        """The statistics noted for ``t`` while it held its current values (its version), or None."""
        entry = self.get(t)
        return entry.stats if entry is not None and entry.version == t._version else None

    def stats_or(self, t: Any, make: Callable[[Any], EncodedStats]) -> EncodedStats:
        """The statistics noted for ``t``'s current values, or else ``make(t)``, noted as them (what
        :meth:`stats` and :meth:`note_stats` do, in one look-up: a gradient's hook asks for every gradient)."""
        key = id(t)
        entry = self._entries.get(key)
        version = t._version
        if entry is not None and entry.ref() is t:
            if entry.version == version and entry.stats is not None:
                return entry.stats
        else:
            entry = self._new_entry(t, key, version)
        stats = entry.stats = make(t)
        entry.version = version
        return stats

    def note_stats(self, t: Any, stats: EncodedStats) -> None:
        """Note ``stats`` as those of ``t``'s current values."""
        entry = self.put(t)
        entry.version = t._version
        entry.stats = stats

    def payload_file(self, t: Any, limit: int) -> str | None:
        """The payload file already holding ``t``'s current values (counted as linked once more), or None.

        None too once ``limit`` links were made to it (a file system caps them): the values are saved afresh.
        """
        entry = self.get(t)
        if entry is None or entry.file is None or entry.file_version != t._version or entry.links >= limit:
            return None
        entry.links += 1
        return entry.file

    def note_file(self, t: Any, file: str) -> None:
        """Note that payload file ``file`` holds ``t``'s current values."""
        entry = self.put(t)
        entry.file, entry.file_version, entry.links = file, t._version, 0

    def forget(self, t: Any) -> None:
        """Forget ``t``'s statistics and payload file (an op changed its values unseen); who made it stays."""
        entry = self.get(t)
        if entry is not None:
            entry.stats = None
            entry.file = None

    def clear(self) -> None:
        """Forget everything."""
        self._entries.clear()


__all__ = ["TensorMemo"]
