"""The capture's memo of the tensors it has seen: which record produced each, and its statistics.

Keyed by tensor identity (a weak reference per entry, so entries die with their tensors) and checked against
the tensor's version counter, so that statistics are reused only while a tensor holds the same values.
"""

from __future__ import annotations

import weakref
from typing import Any

from nbprec.capture.writer import EncodedStats


class _Produced:
    """What the capture knows about a tensor it has seen: who produced it, and its (encoded) statistics."""

    __slots__ = ("api_name", "module_name", "ref", "stats", "version")

    def __init__(self, ref: weakref.ref[Any], version: int) -> None:
        self.ref = ref
        self.version = version
        self.stats: EncodedStats | None = None
        self.api_name: str | None = None
        self.module_name: str | None = None


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
        if entry is None:
            key = id(t)
            entry = self._entries[key] = _Produced(weakref.KeyedRef(t, self._drop, key), t._version)
        return entry

    def stats(self, t: Any) -> EncodedStats | None:
        """The statistics noted for ``t`` while it held its current values (its version), or None."""
        entry = self.get(t)
        return entry.stats if entry is not None and entry.version == t._version else None

    def note_stats(self, t: Any, stats: EncodedStats) -> None:
        """Note ``stats`` as those of ``t``'s current values."""
        entry = self.put(t)
        entry.version = t._version
        entry.stats = stats

    def clear(self) -> None:
        """Forget everything."""
        self._entries.clear()


__all__ = ["TensorMemo"]
