"""The early worker and the engine's small-pair path on nbprec's own dumps (real captures of the tiny encoder's
training step): a comparison with them is the comparison without them, to the bit, whatever the dumps hold."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from early_support import assert_same, compare_fresh, needs_two_cores, pair_records_alone

import nbprec
from nbprec.compare import early, early_native
from nbprec.demo import tiny_runs
from nbprec.formats import _npyfile, native_read
from nbprec.formats._files import MAP_FROM


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    return {run.name: run.path for run in tiny_runs(out)}


@needs_two_cores
@pytest.mark.parametrize("target", ["tiny_bf16", "tiny_fp16", "tiny_bf16_faulty", "tiny_fp32"])
def test_the_worker_gives_the_comparison_without_it(runs, target):
    plain = compare_fresh(runs[target], runs["tiny_fp32"], "plain")
    whole = compare_fresh(runs[target], runs["tiny_fp32"], "early", wait=1.0)
    assert [done for done, _jobs in plain["taken"]] == [0]
    ((taken, jobs),) = whole["taken"]
    assert taken > 0.8 * jobs, whole["taken"]  # every pair of float payloads (the few others: integer ids)
    assert_same(plain, whole)
    assert_same(plain, compare_fresh(runs[target], runs["tiny_fp32"], "early", wait=0.0))


def test_the_worker_has_pairs_in_two_native_dumps(runs, tmp_path):
    msprobe = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe" / "fp32_tensor_mix"
    assert early.has_pairs(str(runs["tiny_bf16"]), str(runs["tiny_fp32"]))
    assert not early.has_pairs(str(runs["tiny_bf16"]), str(msprobe))  # one of each: not the worker's pairs
    assert not early.has_pairs(str(msprobe), str(runs["tiny_fp32"]))
    assert not early.has_pairs(str(runs["tiny_bf16"]), str(tmp_path))


def _payloads(run: Path, dtype: str) -> list[Path]:
    """The run's payload files of index dtype ``dtype``, in index order."""
    rows = [json.loads(line) for line in (run / "index.jsonl").read_text().splitlines()]
    return [run / row["file"] for row in rows if row.get("dtype") == dtype and row.get("file")]


def _shape(file: Path) -> tuple[int, ...]:
    head = file.read_bytes()[:128]
    start, end = _npyfile.header_span(head)
    return _npyfile.parse_header(head[start:end])[2]


def _edit_header(file: Path, old: bytes, new: bytes) -> None:
    data = file.read_bytes()
    assert old in data[:128] and len(old) == len(new)
    file.write_bytes(data.replace(old, new, 1))


def _damage(run: Path, damage: str) -> None:
    files = _payloads(run, "bfloat16")
    first, second = files[3], files[4]
    if damage == "truncated payload":
        first.write_bytes(first.read_bytes()[:-6])
    elif damage == "trailing bytes":
        first.write_bytes(first.read_bytes() + b"\0" * 16)
    elif damage == "another dtype in the header":
        _edit_header(first, b"'<u2'", b"'<i2'")
    elif damage == "Fortran order":
        two_d = next(f for f in files if len(_shape(f)) > 1)
        _edit_header(two_d, b"False", b"True ")  # (a matrix: its elements in another order)
    elif damage == "not a .npy file":
        first.write_bytes(b"PK\x03\x04" + first.read_bytes()[4:])
    elif damage == "a link to another payload":
        first.unlink()
        first.symlink_to(second.name)
    elif damage == "a FIFO":
        first.unlink()
        os.mkfifo(first)
    elif damage == "a folder":
        first.unlink()
        first.mkdir()
    elif damage == "missing payload":
        first.unlink()
    elif damage == "swapped payloads":
        a, b = first.read_bytes(), second.read_bytes()
        first.write_bytes(b)
        second.write_bytes(a)
    elif damage == "NaN in a payload":
        data = bytearray(first.read_bytes())
        data[-2:] = b"\xc0\x7f"  # a bfloat16 NaN as the last value
        first.write_bytes(bytes(data))
    elif damage in ("stale column cache", "wrong extremes in the cache", "no column cache", "damaged column cache"):
        cache = run / "index.columns.json"
        if damage == "stale column cache":
            with (run / "index.jsonl").open("a") as fh:
                fh.write("\n")
        elif damage == "no column cache":
            cache.unlink()
        elif damage == "damaged column cache":
            cache.write_bytes(cache.read_bytes()[:-100])
        else:
            data = json.loads(cache.read_text())
            data["columns"]["min"] = [v - 1.0 if isinstance(v, float) else v for v in data["columns"]["min"]]
            cache.write_text(json.dumps(data))
    else:
        raise AssertionError(damage)


DAMAGES = [
    "truncated payload",
    "trailing bytes",
    "another dtype in the header",
    "Fortran order",
    "not a .npy file",
    "a link to another payload",
    "a FIFO",
    "a folder",
    "missing payload",
    "swapped payloads",
    "NaN in a payload",
    "stale column cache",
    "wrong extremes in the cache",
    "no column cache",
    "damaged column cache",
]


@needs_two_cores
@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_dumps_compare_the_same_with_the_worker(runs, tmp_path, damage):
    """Each damage makes the worker (and the engine's small-pair path) measure less, or measure what the arrays
    give; never differently, never a hang."""
    run = tmp_path / "tiny_bf16"
    shutil.copytree(runs["tiny_bf16"], run, symlinks=True)
    _damage(run, damage)
    plain = compare_fresh(run, runs["tiny_fp32"], "plain")
    assert_same(plain, compare_fresh(run, runs["tiny_fp32"], "early", wait=1.0))
    assert_same(plain, _general_path(run, runs["tiny_fp32"]))


def test_the_small_pair_path_gives_the_arrays_results(runs, monkeypatch):
    """The engine's small-pair path (payload bytes straight to the kernel) against the general one (the reader's
    arrays through tensor_metrics) on every pair of real captures; the path measures most of them."""
    from nbprec.compare import engine
    from nbprec.compare.executors import InlineExecutor

    taken = []
    small_pair = engine.small_pair

    def counting(*args, **kwargs):
        found = small_pair(*args, **kwargs)
        taken.append(found is not None and args[-1] == "npy")
        return found

    monkeypatch.setattr(engine, "small_pair", counting)
    comp = engine.compare(runs["tiny_bf16"], runs["tiny_fp32"], executor=InlineExecutor())
    assert sum(taken) > 0.8 * int((comp.table["compare_mode"] == "tensor").sum())
    for target in ("tiny_bf16", "tiny_fp16", "tiny_bf16_faulty"):
        assert_same(
            _general_path(runs[target], runs["tiny_fp32"]), compare_fresh(runs[target], runs["tiny_fp32"], "plain")
        )


# The comparison with the native reader's small-pair path turned off: every pair through the arrays.
_GENERAL = """
import json, sys
from nbprec.formats import native_read
native_read.PayloadLoader.small_payloads = None
import nbprec
comp = nbprec.compare(sys.argv[1], sys.argv[2])
table = comp.columns
columns = {n: [repr(v) for v in table[n].tolist()] for n in table}
print(json.dumps({"columns": columns, "problems": comp.meta["problems"], "verdict": comp.verdict().text}))
"""


def _general_path(target: Path, bench: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", _GENERAL, str(target), str(bench)], capture_output=True, text=True,
                          env={**os.environ, "NBPREC_EARLY": "off"}, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_worker_reads_native_dumps_without_numpy(runs):
    count, numpy_loaded = pair_records_alone(runs["tiny_bf16"], runs["tiny_fp32"])
    assert count > 100 and not numpy_loaded


def test_the_worker_indexes_a_cache_alike_with_the_scanner_and_the_json_module(runs, monkeypatch):
    """The worker's index of each side, from the C scanner's columns and from the json module's decoding."""
    if early_native._scanned(b'{"rows": 0, "index_bytes": 0, "columns": {}}') is None:
        pytest.skip("nbprec.formats._columnscan is not built")
    for name in ("tiny_bf16", "tiny_fp16", "tiny_fp32"):
        root = str(runs[name])
        scanned = early_native._index(root)
        with monkeypatch.context() as patch:
            patch.setattr(early_native, "_scanned", lambda data: None)
            decoded = early_native._index(root)
        assert scanned == decoded and len(scanned) > 100, name


def test_the_native_loader_reads_whole_whatever_the_size(runs):
    """The meeting asks nbprec's loader once per dtype and folder (``reads_whole_any_size``): its answer is the
    same for any size."""
    dump = nbprec.open(runs["tiny_bf16"])
    loader = dump._loader
    assert loader.reads_whole_any_size
    rows = [dump.row(i) for i in range(len(dump.index))]
    assert any(loader.reads_whole(row) for row in rows)
    for row in rows:
        answer = loader.reads_whole(row)
        for numel in (0, 1, 1 << 40):
            assert loader.reads_whole({**row, "numel": numel}) == answer


def test_the_workers_names_are_the_readers():
    """The worker's copies of the native format's names (kept out of modules that import numpy) and the storage
    of each kernel dtype agree with the reader's."""
    assert early_native.HEADER_FILE == native_read.HEADER_FILE
    assert early_native.COLUMNS_FILE == native_read.COLUMNS_FILE
    assert early_native.INDEX_FILE == native_read.INDEX_FILE
    assert early_native.TENSOR_DIR == native_read.TENSOR_DIR
    for name, descr in _npyfile.KERNEL_DESCRS.items():
        assert np.dtype(native_read.RAW_BITS_STORAGE.get(name, name)).str == descr


def test_a_dump_without_a_usable_cache_is_left_to_the_reader(runs, tmp_path, monkeypatch):
    class Go:
        def __getitem__(self, i):
            return 0

    roots = (str(runs["tiny_bf16"]), str(runs["tiny_fp32"]))
    assert len(list(early._pair_records(roots, Go()))) > 100
    monkeypatch.setattr(early_native, "_CACHE_LIMIT", (runs["tiny_bf16"] / "index.columns.json").stat().st_size - 1)
    assert list(early._pair_records(roots, Go())) == []
    assert list(early._pair_records((roots[0], str(tmp_path)), Go())) == []  # not a dump: nothing


@pytest.fixture(params=["c", "python"])
def npy_reader(request, monkeypatch):
    """Which of small_npy's two ways runs: its C reader (``_zipdir.read_npy``, ``npy_start``) or its Python one."""
    if request.param == "c" and _npyfile._read_npy_c is None:
        pytest.skip("nbprec.formats._zipdir is not built")
    if request.param == "python":
        monkeypatch.setattr(_npyfile, "_read_npy_c", None)
    return request.param


def test_small_npy_reads_plain_small_files_only(tmp_path, npy_reader):
    good = tmp_path / "good.npy"
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(good, values)
    data, start = _npyfile.small_npy(str(good), "float32", (3, 4))
    assert np.frombuffer(data, np.float32, 12, start).tolist() == values.ravel().tolist()
    assert _npyfile.small_npy(str(good), "float16", (3, 4)) is None  # another dtype than the header's
    assert _npyfile.small_npy(str(good), "float32", (4, 3)) is None  # another shape
    assert _npyfile.small_npy(str(good), "int32", (3, 4)) is None  # not a kernel dtype
    fortran = tmp_path / "fortran.npy"
    np.save(fortran, np.asfortranarray(values))
    assert _npyfile.small_npy(str(fortran), "float32", (3, 4)) is None
    short = tmp_path / "short.npy"
    short.write_bytes(good.read_bytes()[:-1])
    assert _npyfile.small_npy(str(short), "float32", (3, 4)) is None
    large = tmp_path / "large.npy"
    np.save(large, np.zeros(MAP_FROM // 4, np.float32))
    assert _npyfile.small_npy(str(large), "float32", (MAP_FROM // 4,)) is None  # mapped by the reader
    link = tmp_path / "link.npy"
    link.symlink_to(good)
    fifo = tmp_path / "fifo.npy"
    os.mkfifo(fifo)
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    for other in (link, fifo, empty, tmp_path, tmp_path / "missing.npy"):
        assert _npyfile.small_npy(str(other), "float32", (3, 4)) is None, other


def _npy_headers() -> list[bytes]:
    """Headers of .npy files, numpy's own and unusual or damaged ones, each given as the whole file's start."""
    import random

    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    headers = []
    for version in ((1, 0), (2, 0), (3, 0)):
        for array in (values, values.astype(np.float16), values.astype(">f4"), np.asfortranarray(values)):
            buffer = __import__("io").BytesIO()
            np.lib.format.write_array(buffer, array, version=version)
            headers.append(buffer.getvalue())
    plain = headers[0]
    start, end = _npyfile.header_span(plain)
    text = plain[start:end]
    variants = [
        b"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }",
        b"{'descr': '<f4', 'fortran_order': False, 'shape': ( 3 ,4 ), }   \n",
        b"{'descr': '<f4', 'fortran_order': False, 'shape': (3,,4), }",
        b"{'descr': '<f4', 'fortran_order': False, 'shape': (003, 4,), }\n",
        b"{'descr': '<f4', 'fortran_order': False, 'shape': (3 4,), }",
        b"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }\n\n",
        b"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4),}",
        b"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4) }",
        b"{'descr': '<f4', 'fortran_order': False, 'shape': (3, -4), }",
        b"{'descr': '<f4', 'fortran_order': False, 'shape': (12,), }",
        b"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 4), }",
        b"{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }",
        b"{'descr': '<f4',  'fortran_order': False, 'shape': (3, 4), }",
        b"{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }",
        b"{'descr': '<f44', 'fortran_order': False, 'shape': (3, 4), }",
    ]
    for variant in variants:
        headers.append(plain[:8] + len(variant).to_bytes(2, "little") + variant + plain[end:])
    rng = random.Random(7)
    for _ in range(400):  # damaged: a byte of the header changed, the file cut short, a wrong header length
        data = bytearray(plain)
        kind = rng.randrange(3)
        if kind == 0:
            data[rng.randrange(end)] = rng.randrange(256)
        elif kind == 1:
            del data[rng.randrange(len(data)) :]
        else:
            data[8:10] = rng.randrange(len(text) + 40).to_bytes(2, "little")
        headers.append(bytes(data))
    return headers


def test_the_c_and_python_npy_readers_agree(tmp_path, monkeypatch):
    """small_npy's C reader (``_zipdir.read_npy``, and ``npy_start`` on bytes read ahead) takes exactly the files its
    Python reader takes, with the payload at the same place: numpy's headers of every version, unusual spacing and
    shapes the Python pattern accepts, other dtypes, orders and shapes, and hundreds of damaged headers."""
    if _npyfile._read_npy_c is None:
        pytest.skip("nbprec.formats._zipdir is not built")
    taken = refused = 0
    for n, data in enumerate(_npy_headers()):
        path = tmp_path / f"{n}.npy"
        path.write_bytes(data)
        for dtype, shape in (("float32", (3, 4)), ("float16", (3, 4)), ("float32", (12,)), ("float32", ())):
            c = _npyfile.small_npy(str(path), dtype, shape)
            ahead = _npyfile._npy_start_c(data, _npyfile.KERNEL_DESCRS[dtype], shape, int(dtype[5:]) // 8)
            with monkeypatch.context() as python_only:
                python_only.setattr(_npyfile, "_read_npy_c", None)
                python = _npyfile.small_npy(str(path), dtype, shape)
            assert c == python, (n, dtype, shape, data[:80])
            assert ahead == (None if python is None else python[1]), (n, dtype, shape)
            taken, refused = taken + (python is not None), refused + (python is None)
    assert taken > 20 and refused > 500, (taken, refused)  # both answers exercised


def test_threads_read_their_batches_payloads_ahead(runs, monkeypatch):
    """On threads (a notebook's ``nbprec.compare``), a batch's small ``.npy`` payloads are read ahead in one call
    that holds the GIL for none of them, as their bytes; each pair takes its two from there, none is read one by
    one, and the table is this thread's."""
    import pandas as pd

    from nbprec.compare import compare
    from nbprec.compare.executors import InlineExecutor, ThreadExecutor
    from nbprec.formats import _files

    if _files._read_small_many_c is None:
        pytest.skip("the C directory reader is not built")
    calls = {"one": 0, "many": 0}
    one, many = _npyfile.open_plain_file, _files._read_small_many_c

    def read_one(path):
        calls["one"] += 1
        return one(path)

    c_one = _npyfile._read_npy_c

    def read_one_c(path, *args):
        calls["one"] += 1
        return c_one(path, *args)

    def read_many(paths, limit, archives, wait=True):
        assert not archives  # (.npy payloads: their bytes)
        one_by_one = paths == [paths[0]] and not wait  # (small_npy(wait=False): _files.read_small_file)
        calls["one" if one_by_one else "many"] += 1
        return many(paths, limit, archives, wait)

    monkeypatch.setattr(_npyfile, "open_plain_file", read_one)
    if c_one is not None:
        monkeypatch.setattr(_npyfile, "_read_npy_c", read_one_c)
    monkeypatch.setattr(_files, "_read_small_many_c", read_many)
    threads = compare(runs["tiny_bf16"], runs["tiny_fp32"], executor=ThreadExecutor(2))
    assert calls["many"] > 0 and calls["one"] == 0, calls
    calls["many"] = 0
    inline = compare(runs["tiny_bf16"], runs["tiny_fp32"], executor=InlineExecutor())
    assert calls["many"] == 0 and calls["one"] > 0, calls
    pd.testing.assert_frame_equal(threads.table, inline.table)


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_dumps_compare_the_same_on_threads_reading_ahead(runs, tmp_path, damage):
    import pandas as pd

    from nbprec.compare import compare
    from nbprec.compare.executors import InlineExecutor, ThreadExecutor

    run = tmp_path / "tiny_bf16"
    shutil.copytree(runs["tiny_bf16"], run, symlinks=True)
    _damage(run, damage)
    threads, inline = (compare(run, runs["tiny_fp32"], executor=e) for e in (ThreadExecutor(2), InlineExecutor()))
    pd.testing.assert_frame_equal(threads.table, inline.table)
    assert threads.meta["problems"] == inline.meta["problems"]
