"""Format probing: find_first_file, and one listing per folder shared by the readers' guesses."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from fresh_python import run_python

from nbprec.formats import _probe, guess_format
from nbprec.formats._probe import find_first_file, shared_listings


def _flat_npy_folder(root: Path, count: int) -> Path:
    root.mkdir()
    for k in range(count):
        np.save(root / f"op{k}.0.{1000 + k}.npy", np.zeros(2, np.float32))
    return root


def _count_listings(monkeypatch) -> dict[str, int]:
    counts: dict[str, int] = {}
    real = _probe._scan

    def scan(folder):
        counts[os.fspath(folder)] = counts.get(os.fspath(folder), 0) + 1
        return real(folder)

    monkeypatch.setattr(_probe, "_scan", scan)
    return counts


def test_guessing_lists_the_folder_once_for_all_readers(tmp_path, monkeypatch):
    folder = _flat_npy_folder(tmp_path / "tf", 30)
    counts = _count_listings(monkeypatch)
    assert guess_format(folder) == "tf_npy"
    assert counts[os.fspath(folder)] == 1  # msprobe's, ptdbg's and CANN's guesses all probed it
    counts.clear()
    find_first_file(folder, lambda name: False, max_depth=0)
    find_first_file(folder, lambda name: False, max_depth=0)
    assert counts[os.fspath(folder)] == 2  # outside a guess, each probe lists afresh


def test_shared_listings_nest_and_end(tmp_path, monkeypatch):
    folder = _flat_npy_folder(tmp_path / "tf", 3)
    counts = _count_listings(monkeypatch)
    with shared_listings():
        with shared_listings():
            assert find_first_file(folder, lambda n: n.startswith("op1."), max_depth=0).name == "op1.0.1001.npy"
        assert find_first_file(folder, lambda n: n.startswith("op2."), max_depth=0).name == "op2.0.1002.npy"
    assert counts[os.fspath(folder)] == 1
    (folder / "later.npy").write_bytes(b"")
    assert find_first_file(folder, lambda n: n == "later.npy", max_depth=0) is not None  # not a stale listing


def test_links_that_loop_or_dangle_are_not_files(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    os.symlink(folder / "b", folder / "a")
    os.symlink(folder / "a", folder / "b")
    os.symlink(folder / "missing", folder / "c")
    (folder / "sub").mkdir()
    (folder / "sub" / "a").write_bytes(b"x")
    assert find_first_file(folder, lambda n: n in ("a", "b", "c"), max_depth=1) == folder / "sub" / "a"


def test_telling_a_format_imports_no_reader_probed_before_it(tmp_path):
    """The guesses of the readers probed first (nbprec's, msprobe's, ptdbg's) need only the standard library
    (:mod:`nbprec.formats.probes`): telling a CANN or TensorFlow dump imports none of those readers, and each
    format is still told apart, the readers' own ``guess_can_open`` giving the same answers."""
    from nbprec.formats import READERS, reader_class
    from nbprec.formats.cann_write import dump_folder, write_dump_file
    from nbprec.formats.native import NativeDumpWriter

    write_dump_file(dump_folder(tmp_path / "cann"), "fc/MatMul", "MatMul", inputs=[np.ones((2, 3), np.float16)])
    _flat_npy_folder(tmp_path / "tf", 2)
    with NativeDumpWriter(tmp_path / "native", run="native") as writer:
        writer.write_tensor({"name": "a.output.0", "op": "a", "order": 0}, np.ones(3, np.float32))
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
    expected = {tmp_path / "cann": "cann", tmp_path / "tf": "tf_npy", tmp_path / "native": "nbprec"}
    expected[fixtures / "fp32_tensor_mix"] = "msprobe"
    for path, name in expected.items():
        assert guess_format(path) == name
        assert [n for n in READERS if reader_class(n).guess_can_open(path)][:1] == [name]
    code = (
        "import sys\n"
        "from nbprec.formats import guess_format\n"
        f"print(guess_format({str(tmp_path / 'cann')!r}), guess_format({str(tmp_path / 'tf')!r}))\n"
        "readers = ('native_read', 'native_tree', 'msprobe', 'msprobe_index', 'ptdbg')\n"
        "print(*[r for r in readers if 'nbprec.formats.' + r in sys.modules])\n"
    )
    assert run_python(code).splitlines() == ["cann tf_npy"]  # (and no reader named on a second line)
