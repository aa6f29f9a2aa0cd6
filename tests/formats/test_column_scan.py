"""The C scanner of a native dump's column cache (``nbprec/formats/_columnscan.c``) against the streaming Python
reader of ``nbprec/formats/native_columns.py``: on real captures, on caches holding every kind of value the writer
may write, and on damaged ones, the scanner reads the same columns, of the same types, as the stream, or steps
aside, and a dump opens the same way."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import nbprec
from nbprec.demo import tiny_runs
from nbprec.dump import Problem
from nbprec.formats import native_columns
from nbprec.formats.native import NativeDumpWriter
from nbprec.formats.native_columns import COLUMNS_FILE, INDEX_FILE, SCAN_KINDS

scan = pytest.importorskip("nbprec.formats._columnscan", reason="nbprec.formats._columnscan is not built").scan


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Real captures of the tiny encoder's training step: tensors and statistics."""
    root = tmp_path_factory.mktemp("scan")
    found = {run.name: run.path for run in tiny_runs(root / "tensors")}
    found.update({f"{run.name}_stats": run.path for run in tiny_runs(root / "stats", mode="statistics")})
    return found


def _both(run: Path) -> tuple[tuple, tuple]:
    """(columns, problems) of ``run``'s cache as read_columns reads it (the scanner first), then without the scanner."""
    found = []
    for scanner in (native_columns._scan, None):
        kept, native_columns._scan = native_columns._scan, scanner
        try:
            problems: list[Problem] = []
            found.append((native_columns.read_columns(run, problems), [p.problem for p in problems]))
        finally:
            native_columns._scan = kept
    return found[0], found[1]


def _assert_same_columns(got: dict | None, want: dict | None) -> None:
    assert (got is None) == (want is None)
    if got is None:
        return
    assert list(got) == list(want)
    for column in want:
        a, b = got[column], want[column]
        assert a.dtype == b.dtype and a.shape == b.shape, column
        if a.dtype == object:
            assert a.tolist() == b.tolist(), column
            assert [type(v) for v in a.tolist()] == [type(v) for v in b.tolist()], column
            # repeated values (op types, dtypes, shapes) one object each, as the stream holds them
            assert len({id(v) for v in a.tolist()}) == len({id(v) for v in b.tolist()}), column
        else:
            np.testing.assert_array_equal(a, b, err_msg=column)
            if a.dtype.kind == "f":  # -0.0 and 0.0 told apart
                assert np.signbit(a).tolist() == np.signbit(b).tolist(), column


@pytest.mark.parametrize("name", ["tiny_bf16", "tiny_fp16", "tiny_fp32", "tiny_bf16_stats", "tiny_fp32_stats"])
def test_real_captures_scan_as_they_stream(runs, name):
    run = runs[name]
    assert scan((run / COLUMNS_FILE).read_bytes(), SCAN_KINDS) is not None  # the scanner reads what nbprec writes
    (got, got_problems), (want, want_problems) = _both(run)
    assert got is not None and got_problems == want_problems == []
    _assert_same_columns(got, want)


def _cache(run: Path) -> dict:
    return json.loads((run / COLUMNS_FILE).read_bytes())


def _put(run: Path, cache: dict | str | bytes) -> None:
    if isinstance(cache, dict):
        cache = json.dumps(cache, ensure_ascii=False)
    (run / COLUMNS_FILE).write_bytes(cache.encode("utf-8") if isinstance(cache, str) else cache)


@pytest.fixture
def small(tmp_path) -> Path:
    """A native dump of four tensors written by nbprec's writer (the column cache as it comes)."""
    run = tmp_path / "run"
    with NativeDumpWriter(run) as writer:
        for i, (name, array) in enumerate(
            [
                ("enc.q.forward.input.0", np.arange(6, dtype=np.float32).reshape(2, 3)),
                ("enc.q.forward.output.0", np.array([np.nan, np.inf, -0.0], np.float32)),
                ("enc.k.forward.output.0", np.zeros((0, 4), np.float16)),
                ("enc.k.forward.input.0", np.ones(5, np.float64) * 1e300),
            ]
        ):
            writer.write_tensor({"name": name, "op": name.rsplit(".", 2)[0], "order": i, "step": 0, "rank": 0}, array)
    return run


def _edits():
    """(what, how the cache is changed, whether the scanner still reads it)."""

    def column(name, values):
        def edit(cache):
            cache["columns"][name] = values(cache["columns"].get(name, [])) if callable(values) else values

        return edit

    def rows(cache):
        return cache["rows"]

    return [
        ("as written", lambda cache: None, True),
        ("a name in Chinese", column("name", lambda v: ["层." + v[0], *v[1:]]), True),
        ("null statistics", column("mean", lambda v: [None] * len(v)), True),
        ("non-finite statistics as strings", column("min", lambda v: ["NaN", "Infinity", "-Infinity", v[3]]), True),
        ("integers among statistics", column("max", lambda v: [0, -0, 10**20, 7]), True),
        ("null integers", column("order", lambda v: [None, 1, None, 3]), True),
        ("null text", column("op_type", lambda v: [None, "Linear", None, "Linear"]), True),
        ("a null file", column("file", lambda v: [None, *v[1:]]), True),
        ("null has_data", column("has_data", lambda v: [None, True, False, True]), True),
        ("odd shapes", column("shape", lambda v: [None, "x", [], [2**40, 3]]), True),
        ("an unknown column", lambda cache: cache["columns"].update(extra=[{"a": [1]}] * rows(cache)), True),
        ("an escaped name", column("name", lambda v: ['a"b', *v[1:]]), False),
        ("a null name", column("name", lambda v: [None, *v[1:]]), False),
        ("a float among integers", column("order", lambda v: [1.0, *v[1:]]), False),
        ("a huge integer", column("numel", lambda v: [10**19, *v[1:]]), False),
        ("a bool among statistics", column("std", lambda v: [True, *v[1:]]), False),
        ("text among statistics", column("norm", lambda v: ["1.5", *v[1:]]), False),
        ("a number among text", column("role", lambda v: [1, *v[1:]]), False),
        ("a shape of floats", column("shape", lambda v: [[1.0, 2], *v[1:]]), False),
        ("a short column", column("min", lambda v: v[:-1]), False),
        ("a column not a list", column("max", 3), False),
        ("stale", lambda cache: cache.update(index_bytes=cache["index_bytes"] + 1), True),
        ("rows missing", lambda cache: cache.pop("rows"), False),
        ("no columns", lambda cache: cache.pop("columns"), False),
    ]


@pytest.mark.parametrize(("what", "edit", "scanned"), _edits(), ids=[e[0] for e in _edits()])
def test_edited_caches_scan_as_they_stream_or_are_left_to_it(small, what, edit, scanned):
    cache = _cache(small)
    edit(cache)
    _put(small, cache)
    assert (scan((small / COLUMNS_FILE).read_bytes(), SCAN_KINDS) is not None) == scanned
    (got, got_problems), (want, want_problems) = _both(small)
    assert got_problems == want_problems
    _assert_same_columns(got, want)


@pytest.mark.parametrize(
    "text",
    [
        '{"columns": {}, "rows": 0, "index_bytes": 1}',  # the sizes after the columns: stale
        '{"rows": 0, "index_bytes": 1, "columns": {}, "columns": {}}',
        '{"rows": 0, "index_bytes": 1, "columns": {"name": [], "name": []}}',
        '{"rows": 0, "index_bytes": 1.0, "columns": {"name": []}}',
        "[1, 2]",
        "",
        '{"rows": 0, "index_bytes": 1, "columns": {"name": []}} trailing',
        '\ufeff{"rows": 0, "index_bytes": 1, "columns": {"name": []}}',
        '{"rows": 1, "index_bytes": 1, "columns": {"name": ["a\udcff"]}}',
    ],
)
def test_odd_caches_are_left_to_the_stream(small, text):
    data = text.encode("utf-8", "surrogatepass")
    _put(small, data)
    assert scan(data, SCAN_KINDS) is None
    (got, got_problems), (want, want_problems) = _both(small)
    assert got is None and want is None and got_problems == want_problems and got_problems


@pytest.mark.parametrize("cut", [1, 2, 7, 100, 0.5, 0.9])
def test_truncated_and_flipped_caches_match_the_stream(runs, tmp_path, cut):
    """Cut at a few places and with bytes changed: the scanner never reads a damaged cache differently."""
    source = runs["tiny_bf16_stats"]
    data = (source / COLUMNS_FILE).read_bytes()
    run = tmp_path / "run"
    run.mkdir()
    (run / INDEX_FILE).write_bytes((source / INDEX_FILE).read_bytes())
    end = len(data) - cut if isinstance(cut, int) else int(len(data) * cut)
    rng = np.random.default_rng(end)
    for damaged in (data[:end], _flipped(data, rng), _flipped(data, rng)):
        _put(run, damaged)
        (got, got_problems), (want, want_problems) = _both(run)
        assert got_problems == want_problems
        _assert_same_columns(got, want)


def _flipped(data: bytes, rng: np.random.Generator) -> bytes:
    out = bytearray(data)
    for at in rng.integers(0, len(out), 3).tolist():
        out[at] = int(rng.choice(list(b'0-9.,:"[]{}ne \\')))
    return bytes(out)


def test_a_dump_opens_the_same_with_and_without_the_scanner(runs, monkeypatch):
    run = runs["tiny_fp16"]
    with_scanner = nbprec.open(run)
    monkeypatch.setattr(native_columns, "_scan", None)
    streamed = nbprec.open(run)
    assert with_scanner.index.equals(streamed.index) and len(with_scanner.problems) == len(streamed.problems) == 0


def test_bad_kinds_are_refused():
    data = b'{"rows": 0, "index_bytes": 0, "columns": {}}'
    refused = ({"name": ("x", None)}, {"name": "t"}, {"step": ("i", None)}, {1: ("t", None)}, {"name": ("\x00", None)})
    for kinds in (*refused, {"name": ("\u0166", None)}, {"name": ("tt", None)}, {"name": ("t",)}):
        with pytest.raises(ValueError, match="kind one of"):
            scan(data, kinds)
    assert scan(data, {}) == (0, 0, {})
