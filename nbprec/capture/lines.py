"""The capture's JSON lines: the texts of its records, encoded from pieces made once.

A capture writes thousands of small records a training step: tensor records (``index.jsonl``), the edges
between ops, the module hierarchy, call stacks and call signatures. :class:`RecordLines` turns each into its
line of text and collects the lines per file for :class:`~nbprec.capture.writer.CaptureWriter`, which hands
them to the operating system. The recurring pieces are encoded once: an op's fields for all its tensors
(:meth:`RecordLines.encode_op`), a tensor's statistics for every record that reuses them
(:meth:`RecordLines.encode_stats`), and strings that recur (dtypes, slots, module paths) once per capture.

This module is compiled by mypyc where it can be (see ``setup.py``): it runs for every record, and an
interpreted call costs more than the encoding it does. Its texts are those of
:class:`~nbprec.formats.native.NativeDumpWriter` (``json.dumps`` with ``ensure_ascii=False``, NaN and the
infinities as strings); the tests hold the two to each other.
"""

from __future__ import annotations

import json
from typing import Any

from nbprec.floattext import json_texts_function
from nbprec.formats.native_read import CALLS_FILE, EDGES_FILE, MODULES_FILE, STACKS_FILE
from nbprec.stats import STAT_COLUMNS

_encode_utf8 = json.encoder.encode_basestring  # type: ignore[attr-defined]  # C versions, as json.dumps uses
_encode_ascii = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]
#: The op columns of a tensor record, in the order of :attr:`EncodedOp.fields`.
OP_COLUMNS = ("op", "op_type", "api", "call", "module", "direction")
_COUNT_COLUMNS = frozenset({"nan_count", "inf_count", "zero_count"})
_OP_FORMAT = ",".join(f'"{c}":%s' for c in OP_COLUMNS)
_STATS_FORMAT = ",".join(f'"{c}":%s' for c in STAT_COLUMNS)


def json_string(text: str) -> str:
    """``text`` as a JSON string literal (``json.dumps(text, ensure_ascii=False)``; lone surrogates escaped)."""
    encoded: str = _encode_utf8(text)
    if not encoded.isascii():
        try:
            encoded.encode("utf-8")
        except UnicodeEncodeError:  # file-name bytes that are not UTF-8: \\u escapes, as the base writer does
            escaped: str = _encode_ascii(text)
            return escaped
    return encoded


def json_float(value: Any) -> str:
    """A statistic as strict JSON text, with the meaning of :func:`nbprec.formats.native.encode_float`."""
    if value is None:
        return "null"
    x = float(value)
    if x - x == 0.0:  # finite
        return repr(x)
    if x != x:
        return '"NaN"'
    return '"Infinity"' if x > 0 else '"-Infinity"'


class EncodedOp:
    """The index fields of one op call, encoded once for all its tensors."""

    __slots__ = ("fields", "fragment")

    def __init__(self, fields: tuple[str, ...]) -> None:
        self.fields = fields  # JSON texts in OP_COLUMNS order
        self.fragment: str = _OP_FORMAT % fields


class EncodedStats:
    """One tensor's statistics, encoded once for every record that reuses them."""

    __slots__ = ("fields", "fragment")

    def __init__(self, fields: tuple[str, ...]) -> None:
        self.fields = fields  # JSON texts in STAT_COLUMNS order
        self.fragment: str = _STATS_FORMAT % fields


UNKNOWN_STATS = EncodedStats(("null",) * len(STAT_COLUMNS))
#: The C formatter of :func:`encode_stats`: set by :func:`load_formatter` (None: not built, or not loaded yet).
C_TEXTS: Any = None


def load_formatter() -> None:
    """Make the C formatter's tables (about 1 ms: at a capture's start, not at import)."""
    global C_TEXTS
    if C_TEXTS is None:
        C_TEXTS = json_texts_function()


def encode_stats(stats: tuple[Any, ...] | None) -> EncodedStats:
    """A statistics tuple (:data:`~nbprec.stats.STAT_COLUMNS` order; None: unknown) as index fields."""
    if stats is None:
        return UNKNOWN_STATS
    texts = C_TEXTS
    if texts is not None and type(stats[-1]) is int and type(stats[-2]) is int and type(stats[-3]) is int:
        try:  # the kernel's tuples (counts as ints): every value in C, floats without repr's cost
            return EncodedStats(texts(stats))
        except TypeError:  # a value of another type (numpy's): as below
            pass
    lo, hi, mean, std, norm = stats[:5]
    try:
        if (lo + hi + mean + std + norm) * 0.0 == 0.0:  # all finite (the common case): repr is JSON
            return EncodedStats(tuple([repr(v) for v in stats]))
    except TypeError:  # None: no finite value
        pass
    return EncodedStats(
        tuple(
            [
                str(int(v)) if c in _COUNT_COLUMNS and v is not None else json_float(v)
                for c, v in zip(STAT_COLUMNS, stats, strict=True)
            ]
        )
    )


class RecordLines:
    """The lines of a capture's record files, collected per file until the writer hands them on.

    Parameters
    ----------
    files
        The names of the files lines are collected for (the writer's); :attr:`lines` maps each to its list.
    """

    def __init__(self, files: list[str]) -> None:
        self.lines: dict[str, list[str]] = {name: [] for name in files}
        self.strings: dict[str, str] = {}  # recurring texts (dtype, role, slot, module path) -> JSON text
        self._edges = self.lines[EDGES_FILE]
        self._modules = self.lines[MODULES_FILE]
        self._stacks = self.lines[STACKS_FILE]
        self._calls = self.lines[CALLS_FILE]

    def string(self, text: str) -> str:
        """JSON text of a string that recurs (dtype, role, slot, module path), cached."""
        encoded = self.strings.get(text)
        if encoded is None:
            encoded = self.strings[text] = json_string(text)
        return encoded

    def encode_op(self, op: str, op_type: str, api: str, call: int, module: str, direction: str) -> EncodedOp:
        """The index fields every tensor of one op call shares."""
        op_text: str = _encode_utf8(op)
        if not op_text.isascii():
            op_text = json_string(op)
        return EncodedOp(
            (op_text, self.string(op_type), self.string(api), str(call), self.string(module), self.string(direction))
        )

    def edge(self, src: str, dst_op: str, dst_slot: str) -> None:
        """Record that op ``dst_op`` consumed tensor ``src`` as its input ``dst_slot``."""
        self._edges.append(
            f'{{"src":{json_string(src)},"dst_op":{json_string(dst_op)},"dst_slot":{self.string(dst_slot)}}}\n'
        )

    def module(self, node: str, parent: str | None) -> None:
        """Record that ``node`` sits inside module call ``parent`` (None: top)."""
        parent_text = "null" if parent is None else json_string(parent)
        self._modules.append(f'{{"node":{json_string(node)},"parent":{parent_text}}}\n')

    def stack(self, op: str, frames_json: str) -> None:
        """Record the user call stack of ``op``: ``frames_json`` is the JSON list of its frames."""
        self._stacks.append(f'{{"op":{json_string(op)},"frames":{frames_json}}}\n')

    def call(self, op: str, call_json: str) -> None:
        """Record how ``op`` was called: ``call_json`` is the JSON text of
        :func:`~nbprec.capture.signature.encode_call_json` (see :meth:`NativeDumpWriter.write_call`)."""
        if not call_json.isascii():
            try:
                call_json.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates: \u escapes
                call_json = json.dumps(json.loads(call_json), allow_nan=False, separators=(",", ":"))
        self._calls.append(f'{{"op":{json_string(op)},"call":{call_json}}}\n')
