"""Match target tensors to benchmark tensors.

Matching runs in passes; each pass only sees the tensors earlier passes left unmatched, and every pair
records how it was found (the ``match`` column):

1. ``mapping``  a user mapping file (CSV or YAML, see :func:`read_mapping`) naming tensor or op pairs;
2. ``fusion``   pairs from a fusion-record hook (a callable; the Ascend readers supply one);
3. ``exact``    identical tensor names (same step and rank);
4. ``api_call`` the same normalised API name, call index, direction, role and slot;
5. ``order``    sequence alignment of the remaining op streams by op type (a longest-common-subsequence
                alignment, so an extra or missing call shifts nothing after it), then role and slot.

Nothing is dropped: target tensors without a counterpart stay in the result as ``unmatched``, and benchmark
tensors no target tensor claimed are listed by :func:`match_tensors` too.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nbprec._record import Record
from nbprec.columns import Columns, as_columns, distinct
from nbprec.errors import ComparisonError

MATCH_METHODS = ("mapping", "fusion", "exact", "api_call", "order", "unmatched")

#: A fusion hook gets both indexes (DataFrames) and returns pairs of tensor names (columns ``target``, ``bench``),
#: or of index positions (columns ``t``, ``b``; a benchmark position may then serve several target tensors).
#: :class:`nbprec.compare.fusion.FusionMatcher` is the one for Ascend NPU dumps.
FusionHook = Callable[[Any, Any], Any]


class MatchResult(Record):
    """Matched pairs by index position.

    Attributes
    ----------
    pairs
        One row per target tensor (:class:`~nbprec.columns.Columns`): ``t`` (position in the target index),
        ``b`` (position in the benchmark index, -1 when unmatched) and ``match`` (the method).
    unmatched_bench
        Positions of benchmark tensors no target tensor matched.
    """

    pairs: Columns
    unmatched_bench: np.ndarray

    def coverage(self) -> dict[str, int]:
        """How many target tensors each method matched, plus the unmatched counts on both sides."""
        methods = self.pairs["match"].tolist()
        out = {m: methods.count(m) for m in MATCH_METHODS}
        out["unmatched_bench"] = len(self.unmatched_bench)
        return out


def normalise_api(api: str) -> str:
    """Normalise an API name across tools: case, and ``_`` / ``.`` separators.

    >>> normalise_api("Functional_linear"), normalise_api("Functional.linear")
    ('functional.linear', 'functional.linear')
    """
    return re.sub(r"[._]+", ".", str(api)).strip(".").lower()


def _align_steps(target: Columns, bench: Columns, name: str) -> np.ndarray:
    """Bench values of ``name`` (step or rank) relabelled to the target's when each side has just one."""
    t_vals, b_vals = distinct(target[name]), distinct(bench[name])
    if len(t_vals) == 1 and len(b_vals) == 1 and t_vals[0] != b_vals[0]:
        return np.full(len(bench), t_vals[0], dtype=bench[name].dtype)
    return bench[name]


def _keyed(source: Columns, positions: np.ndarray, names: list[str]) -> Columns:
    """The ``names`` columns of the rows at ``positions``, and ``_pos``."""
    return Columns({**{c: source[c][positions] for c in names}, "_pos": positions}, len(positions))


def _unique_keys(keys: Columns, on: list[str]) -> dict[Any, int]:
    """{key: position} for the keys (tuples of the ``on`` columns; the value itself for one column) that occur
    once."""
    rows = keys[on[0]].tolist() if len(on) == 1 else list(zip(*(keys[c].tolist() for c in on), strict=True))
    positions = keys["_pos"].tolist()
    if len(set(rows)) == len(rows):  # (the usual case: every key once)
        return dict(zip(rows, positions, strict=True))
    counts = Counter(rows)
    return {k: p for k, p in zip(rows, positions, strict=True) if counts[k] == 1}


def _one_value(values: np.ndarray) -> Any:
    """The value every row of a column of numbers holds, or None (text columns, several values, none)."""
    if values.dtype.kind not in "biu" or not len(values) or values.min() != values.max():
        return None
    return values[0].item()


def _merge_unique(t_keys: Columns, b_keys: Columns, on: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of positions whose keys are equal and unique on both sides (in target order). A key column of
    numbers holding one value, the same on both sides (the step and rank of a one-run pair), is left out of the
    keys: it tells no row from another."""
    if t_keys.empty or b_keys.empty:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    same = [c for c in on if (v := _one_value(t_keys[c])) is not None and v == _one_value(b_keys[c])]
    on = [c for c in on if c not in same] or on
    t_unique, b_unique = _unique_keys(t_keys, on), _unique_keys(b_keys, on)
    pairs = sorted((t, b_unique[k]) for k, t in t_unique.items() if k in b_unique)
    t = np.fromiter((p[0] for p in pairs), dtype=np.int64, count=len(pairs))
    return t, np.fromiter((p[1] for p in pairs), dtype=np.int64, count=len(pairs))


class _Matcher:
    """State of one matching run: which positions are still free on each side."""

    def __init__(self, target: Columns, bench: Columns) -> None:
        aligned = {c: _align_steps(target, bench, c) for c in ("step", "rank")}
        self.t_columns, self.b_columns = target, bench.assign(**aligned)
        self.b_of_t = np.full(len(target), -1, dtype=np.int64)
        self.method = np.full(len(target), "unmatched", dtype=object)
        self.b_taken = np.zeros(len(bench), dtype=bool)

    def free_t(self) -> np.ndarray:
        return np.flatnonzero(self.b_of_t < 0)

    def free_b(self) -> np.ndarray:
        return np.flatnonzero(~self.b_taken)

    def take(self, t: np.ndarray, b: np.ndarray, method: str) -> None:
        ok = (self.b_of_t[t] < 0) & ~self.b_taken[b]
        t, b = t[ok], b[ok]
        # a benchmark tensor may be claimed once per pass
        _, first = np.unique(b, return_index=True)
        t, b = t[first], b[first]
        self.b_of_t[t] = b
        self.method[t] = method
        self.b_taken[b] = True

    def by_positions(self, pairs: Any, method: str) -> None:
        """Match explicit position pairs (columns ``t``, ``b``); a benchmark tensor may serve several targets.

        Fusion records make one benchmark tensor the counterpart of an NPU op's input *and* of its producer's
        output, so here a benchmark position is not exclusive (a target position still is)."""
        if not len(pairs):
            return
        t = np.asarray(pairs["t"], dtype=np.int64)
        b = np.asarray(pairs["b"], dtype=np.int64)
        ok = (t >= 0) & (t < len(self.b_of_t)) & (b >= 0) & (b < len(self.b_taken))
        t, b = t[ok], b[ok]
        t, first = np.unique(t, return_index=True)
        b = b[first]
        free = self.b_of_t[t] < 0
        t, b = t[free], b[free]
        self.b_of_t[t] = b
        self.method[t] = method
        self.b_taken[b] = True

    def by_names(self, pairs: Any, method: str) -> None:
        """Match explicit (target, bench) name pairs; op names expand to their tensors by role and slot."""
        if not len(pairs):
            return
        t_pos = {n: i for i, n in enumerate(self.t_columns["name"].tolist())}
        b_pos = {n: i for i, n in enumerate(self.b_columns["name"].tolist())}
        t_list, b_list = [], []
        op_pairs = []
        for t_name, b_name in zip(pairs["target"], pairs["bench"], strict=True):
            if t_name in t_pos and b_name in b_pos:
                t_list.append(t_pos[t_name])
                b_list.append(b_pos[b_name])
            else:
                op_pairs.append((t_name, b_name))
        self.take(np.array(t_list, dtype=np.int64), np.array(b_list, dtype=np.int64), method)
        self.by_op_pairs(op_pairs, method)

    def by_op_pairs(self, op_pairs: list[tuple[str, str]], method: str) -> None:
        """Match the free tensors of paired ops by role and slot (one merge for all pairs)."""
        if not op_pairs:
            return
        t_pair = {t: i for i, (t, _) in enumerate(op_pairs)}
        b_pair = {b: i for i, (_, b) in enumerate(op_pairs)}
        cols = ["role", "slot"]
        keys = []
        for side, pair, free in ((self.t_columns, t_pair, self.free_t()), (self.b_columns, b_pair, self.free_b())):
            keyed = _keyed(side, free, ["op", *cols])
            code = np.array([pair.get(op, -1) for op in keyed.pop("op").tolist()], dtype=np.int64)
            keyed["_pair"] = code
            keys.append(keyed.take(code >= 0))
        t, b = _merge_unique(keys[0], keys[1], ["_pair", *cols])
        self.take(t, b, method)

    def by_columns(self, names: list[str], method: str, transform: Callable[[Columns], Columns]) -> None:
        if not (len(self.free_t()) and len(self.free_b())):  # every tensor of one side is matched already
            return
        t_keys = transform(_keyed(self.t_columns, self.free_t(), names))
        b_keys = transform(_keyed(self.b_columns, self.free_b(), names))
        t, b = _merge_unique(t_keys, b_keys, names)
        self.take(t, b, method)

    def by_order(self) -> None:
        """Align the op streams of each step/rank/direction by op type, then pair tensors by role and slot."""
        free_t, free_b = self.free_t(), self.free_b()
        if len(free_t) == 0 or len(free_b) == 0:
            return
        t_ops = _op_stream(self.t_columns, free_t)
        b_ops = _op_stream(self.b_columns, free_b)
        for key, (t_names, t_types) in t_ops.items():
            b_stream = b_ops.get(key)
            if b_stream is None:
                continue
            b_names, b_types = b_stream
            aligned = align_sequences(t_types, b_types)
            pairs = [(t_names[i], b_names[j]) for i, j in aligned]
            self.by_op_pairs(pairs, "order")


def align_sequences(a: list[str], b: list[str], max_edits: int = 2000) -> list[tuple[int, int]]:
    """Index pairs of a longest common subsequence of ``a`` and ``b`` (Myers' O((N+M)D) diff).

    Fast when the two streams differ by few insertions/deletions (``D`` edits), which is the usual case of
    two runs of one model. Beyond ``max_edits`` edits it falls back to difflib's greedy block matching.

    >>> align_sequences(["mm", "add", "relu", "mm"], ["mm", "relu", "mm"])
    [(0, 0), (2, 1), (3, 2)]
    """
    n, m = len(a), len(b)
    v: dict[int, int] = {1: 0}
    trace: list[dict[int, int]] = []
    for d in range(min(n + m, max_edits) + 1):
        trace.append(dict(v))
        for k in range(-d, d + 1, 2):
            x = v[k + 1] if k == -d or (k != d and v[k - 1] < v[k + 1]) else v[k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            v[k] = x
            if x >= n and y >= m:
                return _backtrack(trace, n, m)
    import difflib

    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return [(blk.a + i, blk.b + i) for blk in sm.get_matching_blocks() for i in range(blk.size)]


def _backtrack(trace: list[dict[int, int]], n: int, m: int) -> list[tuple[int, int]]:
    pairs = []
    x, y = n, m
    for d in range(len(trace) - 1, -1, -1):
        v = trace[d]
        k = x - y
        prev_k = k + 1 if k == -d or (k != d and v.get(k - 1, -1) < v.get(k + 1, -1)) else k - 1
        prev_x = v.get(prev_k, 0)
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            x, y = x - 1, y - 1
            pairs.append((x, y))
        x, y = prev_x, prev_y
    pairs.reverse()
    return pairs


def _op_stream(side: Columns, positions: np.ndarray) -> dict[tuple, tuple[list, list[str]]]:
    """Per (step, rank, direction), the ops among the rows at ``positions`` in execution order: their names and
    their type keys (normalised op type, else API)."""
    step, rank, order = side["step"][positions], side["rank"][positions], side["order"][positions]
    direction, op = side["direction"][positions], side["op"][positions]
    seen: set[tuple] = set()
    firsts = []
    for i, key in enumerate(zip(step.tolist(), rank.tolist(), direction.tolist(), op.tolist(), strict=True)):
        if key not in seen:
            seen.add(key)
            firsts.append(i)
    firsts = np.asarray(firsts, dtype=np.int64)
    _, direction_code = np.unique(direction[firsts].astype(str), return_inverse=True)
    firsts = firsts[np.lexsort((order[firsts], direction_code.reshape(-1), rank[firsts], step[firsts]))]
    op_type, api = side["op_type"][positions], side["api"][positions]
    streams: dict[tuple, tuple[list, list[str]]] = {}
    for i in firsts.tolist():
        names, types = streams.setdefault((step[i], rank[i], direction[i]), ([], []))
        names.append(op[i])
        types.append(normalise_api(op_type[i] or api[i]))
    return streams


def _api_key(keys: Columns) -> Columns:
    keys = keys.assign(api=np.array([normalise_api(a) for a in keys["api"].tolist()], dtype=object))
    return keys.take((keys["api"] != "") & (keys["call"] >= 0))


def match_tensors(
    target: Columns | Any,
    bench: Columns | Any,
    *,
    mapping: Any = None,
    fusion: FusionHook | None = None,
    by_order: bool = True,
) -> MatchResult:
    """Match the rows of two dump indexes.

    Parameters
    ----------
    target, bench
        Dump indexes (``Dump.columns``, or ``Dump.index`` DataFrames).
    mapping
        User pairs (columns ``target``, ``bench``; tensor or op names), applied first; see :func:`read_mapping`.
    fusion
        A fusion-record hook returning name pairs, applied after the mapping; it is given both indexes as
        DataFrames (pandas is imported for it), or as :class:`~nbprec.columns.Columns` when it has a true
        ``takes_columns`` attribute.
    by_order
        Whether to align the remaining op streams by order (on by default).

    Returns
    -------
    MatchResult
    """
    t_cols, b_cols = as_columns(target), as_columns(bench)
    m = _Matcher(t_cols, b_cols)
    if mapping is not None:
        m.by_names(mapping, "mapping")
    if fusion is not None:
        if getattr(fusion, "takes_columns", False):  # nbprec's own hook: no frames to build
            fused = fusion(t_cols, b_cols)
        else:
            from nbprec.dump_index import index_frame

            fused = fusion(*(x if not isinstance(x, Columns) else index_frame(x) for x in (target, bench)))
        if {"t", "b"} <= set(fused.columns):
            m.by_positions(fused, "fusion")
        else:
            m.by_names(fused, "fusion")
    m.by_columns(["step", "rank", "name"], "exact", lambda k: k)
    m.by_columns(["step", "rank", "api", "call", "direction", "role", "slot"], "api_call", _api_key)
    if by_order:
        m.by_order()
    pairs = Columns({"t": np.arange(len(t_cols)), "b": m.b_of_t, "match": m.method}, len(t_cols))
    return MatchResult(pairs=pairs, unmatched_bench=m.free_b())


def read_mapping(path: str | Path) -> Any:
    """Read a user mapping file: target name -> benchmark name, for tensors or whole ops.

    CSV: two columns with a header ``target,bench`` (``#`` starts a comment line). YAML: a mapping
    ``target_name: bench_name`` (read without a YAML library: one ``key: value`` pair per line, quotes allowed).

    Examples
    --------
    A CSV mapping file::

        target,bench
        Functional.linear.3.forward,Functional.linear.2.forward
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ComparisonError(f"{p}: cannot read mapping file: {exc.strerror or exc}") from exc
    rows: list[tuple[str, str]] = []
    if p.suffix.lower() in (".yaml", ".yml"):
        for lineno, line in enumerate(text.splitlines(), 1):
            stripped = line.split(" #")[0].strip()
            if not stripped or stripped.startswith("#") or stripped == "---":
                continue
            key, sep, value = stripped.partition(": ")
            if not sep:
                raise ComparisonError(f"{p}, line {lineno}: expected 'target_name: bench_name', got {line!r}")
            rows.append((key.strip().strip("'\""), value.strip().strip("'\"")))
    else:
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        reader = csv.reader(lines)
        header = next(reader, None)
        if header is None or [h.strip().lower() for h in header[:2]] != ["target", "bench"]:
            raise ComparisonError(f"{p}: a mapping CSV starts with the header 'target,bench', got {header!r}")
        for lineno, row in enumerate(reader, 2):
            if len(row) < 2 or not row[0].strip() or not row[1].strip():
                raise ComparisonError(f"{p}, row {lineno}: expected two names, got {row!r}")
            rows.append((row[0].strip(), row[1].strip()))
    import pandas as pd

    return pd.DataFrame(rows, columns=["target", "bench"])
