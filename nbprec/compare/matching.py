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
import difflib
import functools
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from nbprec.errors import ComparisonError

MATCH_METHODS = ("mapping", "fusion", "exact", "api_call", "order", "unmatched")

#: A fusion hook gets both indexes and returns pairs of tensor names (columns ``target``, ``bench``), or of
#: index positions (columns ``t``, ``b``; a benchmark position may then serve several target tensors).
#: :class:`nbprec.compare.fusion.FusionMatcher` is the one for Ascend NPU dumps.
FusionHook = Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame]


@dataclass(frozen=True)
class MatchResult:
    """Matched pairs by index position.

    Attributes
    ----------
    pairs
        One row per target tensor: ``t`` (position in the target index), ``b`` (position in the benchmark
        index, -1 when unmatched) and ``match`` (the method).
    unmatched_bench
        Positions of benchmark tensors no target tensor matched.
    """

    pairs: pd.DataFrame
    unmatched_bench: np.ndarray

    def coverage(self) -> dict[str, int]:
        """How many target tensors each method matched, plus the unmatched counts on both sides."""
        counts = {m: int(v) for m, v in self.pairs["match"].value_counts().items()}
        out = {m: counts.get(m, 0) for m in MATCH_METHODS}
        out["unmatched_bench"] = len(self.unmatched_bench)
        return out


def normalise_api(api: str) -> str:
    """Normalise an API name across tools: case, and ``_`` / ``.`` separators.

    >>> normalise_api("Functional_linear"), normalise_api("Functional.linear")
    ('functional.linear', 'functional.linear')
    """
    return re.sub(r"[._]+", ".", str(api)).strip(".").lower()


def _align_steps(target: pd.DataFrame, bench: pd.DataFrame, column: str) -> pd.Series:
    """Bench values of ``column`` (step or rank) relabelled to the target's when each side has just one."""
    t_vals, b_vals = target[column].unique(), bench[column].unique()
    if len(t_vals) == 1 and len(b_vals) == 1 and t_vals[0] != b_vals[0]:
        return pd.Series(t_vals[0], index=bench.index)
    return bench[column]


class _Columns:
    """A dump index's columns as numpy arrays, taken once each (``override`` replaces some)."""

    def __init__(self, frame: pd.DataFrame, override: dict[str, np.ndarray] | None = None) -> None:
        self._frame, self._arrays = frame, dict(override or {})

    def __getitem__(self, column: str) -> np.ndarray:
        if column not in self._arrays:
            self._arrays[column] = self._frame[column].to_numpy()
        return self._arrays[column]


def _keyed(source: _Columns, positions: np.ndarray, columns: list[str]) -> pd.DataFrame:
    """The ``columns`` of the rows at ``positions``, and ``_pos`` (built from arrays: no ``iloc``, no copy)."""
    return pd.DataFrame({**{c: source[c][positions] for c in columns}, "_pos": positions}, copy=False)


def _unique_keys(keys: pd.DataFrame, on: list[str]) -> dict[tuple, int]:
    """{key: position} for the keys (tuples of the ``on`` columns) that occur once."""
    rows = list(zip(*(keys[c].tolist() for c in on), strict=True))
    counts = Counter(rows)
    return {k: p for k, p in zip(rows, keys["_pos"].tolist(), strict=True) if counts[k] == 1}


def _merge_unique(t_keys: pd.DataFrame, b_keys: pd.DataFrame, on: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of positions whose keys are equal and unique on both sides (in target order)."""
    if t_keys.empty or b_keys.empty:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    t_unique, b_unique = _unique_keys(t_keys, on), _unique_keys(b_keys, on)
    pairs = sorted((t, b_unique[k]) for k, t in t_unique.items() if k in b_unique)
    t = np.fromiter((p[0] for p in pairs), dtype=np.int64, count=len(pairs))
    return t, np.fromiter((p[1] for p in pairs), dtype=np.int64, count=len(pairs))


class _Matcher:
    """State of one matching run: which positions are still free on each side."""

    def __init__(self, target: pd.DataFrame, bench: pd.DataFrame) -> None:
        self.target = target
        aligned = {c: _align_steps(target, bench, c).to_numpy() for c in ("step", "rank")}
        self._bench_index = bench
        self.t_columns, self.b_columns = _Columns(target), _Columns(bench, aligned)
        self.b_of_t = np.full(len(target), -1, dtype=np.int64)
        self.method = np.full(len(target), "unmatched", dtype=object)
        self.b_taken = np.zeros(len(bench), dtype=bool)

    @functools.cached_property
    def bench(self) -> pd.DataFrame:
        """The benchmark index with its step and rank relabelled to the target's (see :func:`_align_steps`)."""
        return self._bench_index.assign(step=self.b_columns["step"], rank=self.b_columns["rank"])

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

    def by_positions(self, pairs: pd.DataFrame, method: str) -> None:
        """Match explicit position pairs (columns ``t``, ``b``); a benchmark tensor may serve several targets.

        Fusion records make one benchmark tensor the counterpart of an NPU op's input *and* of its producer's
        output, so here a benchmark position is not exclusive (a target position still is)."""
        if pairs.empty:
            return
        t = pairs["t"].to_numpy(np.int64)
        b = pairs["b"].to_numpy(np.int64)
        ok = (t >= 0) & (t < len(self.b_of_t)) & (b >= 0) & (b < len(self.b_taken))
        t, b = t[ok], b[ok]
        t, first = np.unique(t, return_index=True)
        b = b[first]
        free = self.b_of_t[t] < 0
        t, b = t[free], b[free]
        self.b_of_t[t] = b
        self.method[t] = method
        self.b_taken[b] = True

    def by_names(self, pairs: pd.DataFrame, method: str) -> None:
        """Match explicit (target, bench) name pairs; op names expand to their tensors by role and slot."""
        if pairs.empty:
            return
        t_pos = {n: i for i, n in enumerate(self.t_columns["name"])}
        b_pos = {n: i for i, n in enumerate(self.b_columns["name"])}
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
        t_keys = _keyed(self.t_columns, self.free_t(), ["op", *cols])
        b_keys = _keyed(self.b_columns, self.free_b(), ["op", *cols])
        t_keys["_pair"] = t_keys.pop("op").map(t_pair)
        b_keys["_pair"] = b_keys.pop("op").map(b_pair)
        t, b = _merge_unique(t_keys.dropna(subset=["_pair"]), b_keys.dropna(subset=["_pair"]), ["_pair", *cols])
        self.take(t, b, method)

    def by_columns(self, columns: list[str], method: str, transform: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
        if not (len(self.free_t()) and len(self.free_b())):  # every tensor of one side is matched already
            return
        t_keys = transform(_keyed(self.t_columns, self.free_t(), columns))
        b_keys = transform(_keyed(self.b_columns, self.free_b(), columns))
        t, b = _merge_unique(t_keys, b_keys, columns)
        self.take(t, b, method)

    def by_order(self) -> None:
        """Align the op streams of each step/rank/direction by op type, then pair tensors by role and slot."""
        free_t, free_b = self.free_t(), self.free_b()
        if len(free_t) == 0 or len(free_b) == 0:
            return
        groups = ["step", "rank", "direction"]
        t_ops = _op_stream(self.target.iloc[free_t], groups)
        b_ops = _op_stream(self.bench.iloc[free_b], groups)
        for key, t_stream in t_ops.items():
            b_stream = b_ops.get(key)
            if b_stream is None:
                continue
            t_names, b_names = t_stream["op"].tolist(), b_stream["op"].tolist()
            aligned = align_sequences(t_stream["type_key"].tolist(), b_stream["type_key"].tolist())
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


def _op_stream(frame: pd.DataFrame, groups: list[str]) -> dict[tuple, pd.DataFrame]:
    ops = frame.drop_duplicates(groups + ["op"]).sort_values(groups + ["order"], kind="stable")
    ops = ops.assign(type_key=[normalise_api(t or a) for t, a in zip(ops["op_type"], ops["api"], strict=True)])
    return {key: g for key, g in ops.groupby(groups, sort=False)}


def _api_key(keys: pd.DataFrame) -> pd.DataFrame:
    keys = keys.copy()
    keys["api"] = keys["api"].map(normalise_api)
    return keys[(keys["api"] != "") & (keys["call"] >= 0)]


def match_tensors(
    target: pd.DataFrame,
    bench: pd.DataFrame,
    *,
    mapping: pd.DataFrame | None = None,
    fusion: FusionHook | None = None,
    by_order: bool = True,
) -> MatchResult:
    """Match the rows of two dump indexes.

    Parameters
    ----------
    target, bench
        Dump indexes (``Dump.index``).
    mapping
        User pairs (columns ``target``, ``bench``; tensor or op names), applied first; see :func:`read_mapping`.
    fusion
        A fusion-record hook returning name pairs, applied after the mapping.
    by_order
        Whether to align the remaining op streams by order (on by default).

    Returns
    -------
    MatchResult
    """
    m = _Matcher(target, bench)
    if mapping is not None:
        m.by_names(mapping, "mapping")
    if fusion is not None:
        fused = fusion(target, bench)
        if {"t", "b"} <= set(fused.columns):
            m.by_positions(fused, "fusion")
        else:
            m.by_names(fused, "fusion")
    m.by_columns(["step", "rank", "name"], "exact", lambda k: k)
    m.by_columns(["step", "rank", "api", "call", "direction", "role", "slot"], "api_call", _api_key)
    if by_order:
        m.by_order()
    pairs = pd.DataFrame({"t": np.arange(len(target)), "b": m.b_of_t, "match": m.method})
    return MatchResult(pairs=pairs, unmatched_bench=m.free_b())


def read_mapping(path: str | Path) -> pd.DataFrame:
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
    return pd.DataFrame(rows, columns=["target", "bench"])
