"""The capture's dump writer: nbprec's dump format (``docs/dump-format.md``), written with little work per record.

:class:`CaptureWriter` is a :class:`~nbprec.formats.native.NativeDumpWriter` (same header, files, ``complete``
record and column cache) with a faster path for the records a capture makes by the thousand:

- index lines are assembled from pre-encoded JSON pieces: an op's fields are encoded once for all its
  tensors, a tensor's statistics once however many records reuse them, and the column cache at close reuses
  the same pieces instead of encoding every value a second time; those pieces, and the lines of every other
  record (edges, modules, stacks, calls), are made by the writer's :attr:`~CaptureWriter.lines`
  (:class:`~nbprec.capture.lines.RecordLines`, compiled where it can be);
- in mode ``"statistics"``, the usual record is appended by the C twin of :meth:`CaptureWriter.add`
  (``nbprec/capture/_indexlines.c``), which hands anything else to the Python method and keeps every record's
  index line (as bytes, written by :meth:`~CaptureWriter.flush`) and column-cache cells as it comes, whole or not
  at all (the Python method hands its records back); at close the columns are joined (0.2 ms of a MiniLM step's
  close; joined from the kept records, as a tensor-mode capture's are, 1.7-3 ms);
- lines of every file are collected and handed to the operating system every ``FLUSH_INTERVAL`` seconds in
  one write per file (a killed process loses at most that interval's records, as with the base writer);
- payloads (mode ``"tensor"``) are copied when the op is recorded and written by a background thread, with a
  ``.npy`` header cached per dtype and shape (:class:`~nbprec.capture.payloads.PayloadWriter`); a record of
  values saved before is a hard link of that file (``same_as``).
"""

from __future__ import annotations

import os
import time
from typing import Any

from nbprec.capture.lines import OP_COLUMNS, EncodedOp, EncodedStats, RecordLines, json_string, load_formatter
from nbprec.capture.payloads import PayloadWriter
from nbprec.errors import CaptureError
from nbprec.formats.native import FLUSH_INTERVAL, NativeDumpWriter, safe_file_stem
from nbprec.formats.native_read import COLUMNS_FILE, INDEX_FILE, TENSOR_DIR
from nbprec.stats import STAT_COLUMNS

try:
    from nbprec.capture._indexlines import IndexLines, column_cache
except ImportError:  # built without a C compiler: every record through the Python add, the cache in Python
    IndexLines = column_cache = None

_TAIL_COLUMNS = ("role", "slot", "dtype", "shape", "numel")
#: The column cache's columns in order (the last, "file", only when some record has a payload file).
_CACHE_COLUMNS = ("name", "step", "rank", "order", *OP_COLUMNS, *_TAIL_COLUMNS, *STAT_COLUMNS, "file")


class CaptureWriter(NativeDumpWriter):
    """A :class:`~nbprec.formats.native.NativeDumpWriter` with the capture's fast record path.

    Parameters are those of :class:`~nbprec.formats.native.NativeDumpWriter`, and ``links``: whether a record
    may have its payload file made a hard link of an earlier one (see :meth:`add`).
    """

    def __init__(self, path: str | os.PathLike[str], *, links: bool = True, **options: Any) -> None:
        load_formatter()
        super().__init__(path, **options)
        #: the encoders of every record but the tensor records, and the lines collected per file
        self.lines = RecordLines(list(self._files))
        self._lines = self.lines.lines
        self._strings = self.lines.strings
        self._rows: list[tuple[Any, ...]] = []  # per record: its encoded columns, for the column cache
        self._seen: set[tuple[int, str]] = set()
        self._shapes: dict[tuple[int, ...], str] = {}
        self._payloads = PayloadWriter(self._path / TENSOR_DIR) if self._mode == "tensor" else None
        self._has_files = False
        self._links = links
        self._fast: Any = None  # the C twin of add, while it takes records
        self._kept: Any = None  # the C twin holding every record's index line and cells (else _lines and _rows)
        if IndexLines is not None and self._payloads is None:  # the usual record in C; the rest to the method
            slow = CaptureWriter.add.__get__(self)
            self._fast = self._kept = IndexLines(
                self._seen,
                self._strings,
                self._shapes,
                slow,
                self.flush,
                FLUSH_INTERVAL,
            )
            self.add = self._fast.add  # type: ignore[method-assign]

    # -- records -------------------------------------------------------------------------------------------
    def add(
        self,
        name: str,
        step: int,
        rank: int,
        order: int,
        op: EncodedOp,
        role: str,
        slot: str,
        dtype: str,
        shape: tuple[int, ...],
        numel: int,
        stats: EncodedStats,
        payload: Any = None,
        owned: bool = False,
        same_as: str | None = None,
    ) -> str | None:
        """Append one tensor record; ``payload`` (a contiguous numpy array, mode ``"tensor"``) is saved too.

        ``dtype`` is the canonical dtype name; a bfloat16/float8 payload is passed as its raw bits. The
        payload is copied before this returns unless ``owned`` (it is already a copy nothing else changes).
        ``same_as`` instead of a payload: the payload file of an earlier record of this writer holding the same
        values, made this record's file too as a hard link (only where :meth:`can_link`).

        Returns the name of the record's payload file (in the tensor folder), or None without one.
        """
        key = (step, name)
        seen = self._seen
        if key in seen:
            raise CaptureError(f"{self._path}: tensor {name!r} written twice for step {step}, rank {rank}")
        if self._closed:
            raise CaptureError(f"{self._path}: the dump writer is closed")
        name_text = json_string(name)
        shape_text = self._shapes.get(shape)
        if shape_text is None:
            shape_text = self._shapes[shape] = "[" + ",".join(str(int(d)) for d in shape) + "]"
        strings = self._strings  # role, slot and dtype recur: their JSON texts are looked up, made once
        role_text = strings.get(role) or self.lines.string(role)
        slot_text = strings.get(slot) or self.lines.string(slot)
        dtype_text = strings.get(dtype) or self.lines.string(dtype)
        file_text = file_name = None
        if (payload is not None or same_as is not None) and self._payloads is not None:
            file_name = f"{safe_file_stem(name, self.count)}.npy"
            if same_as is not None:
                self._payloads.link(file_name, same_as)
            else:
                self._payloads.save(file_name, payload, owned)
            file_text = json_string(f"{TENSOR_DIR}/{file_name}")
            self._has_files = True
        line = (
            f'{{"name":{name_text},"step":{step},"rank":{rank},"order":{order},{op.fragment},"role":{role_text},'
            f'"slot":{slot_text},"dtype":{dtype_text},"shape":{shape_text},"numel":{numel},{stats.fragment}'
            + ("}\n" if file_text is None else f',"file":{file_text}}}\n')
        )
        cells = (name_text, step, rank, order, op, role_text, slot_text, dtype_text, shape_text, numel, stats)
        if self._kept is None:
            self._lines[INDEX_FILE].append(line)
            self._rows.append((*cells, file_text))
        else:  # the C twin keeps the lines and cells of all records, in order
            self._kept.row((*cells, file_text), line)
        seen.add(key)
        now = time.monotonic()
        if now - self._last_flush >= FLUSH_INTERVAL:
            self._last_flush = now
            self.flush()
        return file_name

    @property
    def count(self) -> int:
        """How many tensor records were written."""
        if self._closed:
            return self._count
        return len(self._rows) if self._kept is None else self._kept.count

    def can_link(self) -> bool:
        """Whether :meth:`add` may make a record's payload a hard link of an earlier one (``same_as``)."""
        return self._links and self._payloads is not None and self._payloads.can_link()

    # -- the base writer's record methods ---------------------------------------------------------------
    def _append(self, file_name: str, obj: Any) -> None:
        """The base writer's line writer (``write_edge``, ``write_module``, ...): lines stay in order."""
        self.flush()
        super()._append(file_name, obj)

    def write_tensor(self, record: Any, array: Any = None, stats: Any = None) -> None:
        """Not for a capture's dump: its records go through :meth:`add` (one column cache for all of them)."""
        raise NotImplementedError("CaptureWriter records tensors with add(); use NativeDumpWriter for write_tensor")

    write_tensor_blocks = write_tensor

    # -- flushing and closing --------------------------------------------------------------------------
    def flush(self) -> None:
        """Hand every collected line to the operating system now (also done every FLUSH_INTERVAL seconds)."""
        with self._io(self._path):
            if self._kept is not None and (data := self._kept.take()):  # the index's lines, kept in C as bytes
                raw = self._files[INDEX_FILE].buffer  # (nothing is written to the index through its text layer)
                raw.write(data)
                raw.flush()
            for name, lines in self._lines.items():
                if lines:
                    handle = self._files[name]
                    handle.write("".join(lines))
                    lines.clear()
                    handle.flush()

    def close(self, *, error: BaseException | None = None) -> None:
        """Finish the payloads, write the collected lines, then close as the base writer does."""
        if self._closed:
            return
        if self._fast is not None:  # later records reach the Python add, which refuses them
            self._fast.close()
            self._fast = None
            del self.add
        self._count = self.count
        first: BaseException | None = None
        if self._payloads is not None:
            try:
                self._payloads.close()
            except BaseException as exc:
                first = exc
        try:
            self.flush()
        except BaseException as exc:
            first = first or exc
        super().close(error=error or first)
        if first is not None and error is None:
            raise first

    def _write_columns(self) -> None:
        """The column cache of the base writer, joined from the records' encoded pieces (in C where built)."""
        rows = self._rows
        names = _CACHE_COLUMNS if self._has_files else _CACHE_COLUMNS[:-1]
        if self._kept is not None:  # collected as the records came
            body = self._kept.columns(names)
        elif column_cache is not None:
            body = column_cache(rows, names)
        else:
            body = self._columns_text(rows).encode("utf-8")
        index_bytes = (self._path / INDEX_FILE).stat().st_size
        head = f'{{"rows":{self.count},"index_bytes":{index_bytes},"columns":{{'.encode()
        tmp = self._path / (COLUMNS_FILE + ".tmp")
        try:
            tmp.write_bytes(head + body + b"}}")
            tmp.replace(self._path / COLUMNS_FILE)
        finally:
            tmp.unlink(missing_ok=True)
        self._rows = []
        self._kept = None

    def _columns_text(self, rows: list[tuple[Any, ...]]) -> str:
        """The column cache's columns as JSON members, in Python (transposed by ``zip``): ``column_cache``'s text."""
        parts: list[str] = []

        def column(name: str, values: Any) -> None:
            parts.append(f'"{name}":[{",".join(values)}]')

        if rows:
            names, steps, ranks, orders, ops, roles, slots, dtypes, shapes, numels, stats, files = zip(
                *rows, strict=True
            )
            column("name", names)
            for c, values in zip(("step", "rank", "order"), (steps, ranks, orders), strict=True):
                column(c, map(str, values))
            for c, values in zip(OP_COLUMNS, zip(*[o.fields for o in ops], strict=True), strict=True):
                column(c, values)
            for c, values in zip(_TAIL_COLUMNS[:4], (roles, slots, dtypes, shapes), strict=True):
                column(c, values)
            column("numel", map(str, numels))
            for c, values in zip(STAT_COLUMNS, zip(*[x.fields for x in stats], strict=True), strict=True):
                column(c, values)
            if self._has_files:
                column("file", ["null" if f is None else f for f in files])
        return ",".join(parts)


__all__ = ["CaptureWriter"]
