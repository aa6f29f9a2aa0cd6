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


def test_a_name_is_found_as_a_test_of_names_finds_it(tmp_path):
    """``find_first_file`` with a name (what msprobe's guess asks for) and with a test of names: the same file, at
    the same depth, and never an entry that is not a file (a FIFO, a folder, a dangling link of that name)."""
    root = tmp_path / "r"
    (root / "rank0").mkdir(parents=True)
    (root / "rank0" / "dump.json").write_text("{}", encoding="utf-8")
    os.mkfifo(root / "dump.json")  # not a file: passed over
    (root / "stack.json").mkdir()
    os.symlink(root / "missing", root / "construct.json")
    for wanted in ("dump.json", lambda n: n == "dump.json"):
        assert find_first_file(root, wanted, max_depth=0) is None
        assert find_first_file(root, wanted, max_depth=1) == root / "rank0" / "dump.json"
        assert find_first_file(root, wanted, max_depth=1, dir_pattern="step*") is None
    for name in ("stack.json", "construct.json"):
        assert find_first_file(root, name, max_depth=1) is None
    (root / "first.npy").write_bytes(b"")
    (root / "second.npy").write_bytes(b"")
    listed = [e.name for e in os.scandir(root) if e.name.endswith(".npy")]
    assert find_first_file(root, lambda n: n.endswith(".npy"), max_depth=0).name == listed[0]  # the folder's order


def test_run_folders_reached_through_links_are_runs(tmp_path):
    """nbprec's guess takes ``rank{M}`` and ``step{N}`` folders that are links to folders, as it did when it
    listed them itself; a link that dangles, or to a file, is no folder."""
    from nbprec.formats.probes import HEADER_FILE, find_run_folders

    real = tmp_path / "elsewhere" / "rank0"
    real.mkdir(parents=True)
    (real / HEADER_FILE).write_text("{}", encoding="utf-8")
    tree = tmp_path / "tree"
    (tree / "step3").mkdir(parents=True)
    os.symlink(real, tree / "step3" / "rank0")
    os.symlink(tmp_path / "missing", tree / "step3" / "rank1")
    (tree / "step3" / "rank2").write_text("not a folder", encoding="utf-8")
    os.symlink(tree / "step3", tree / "step4")
    found = [(step, rank, path.name) for step, rank, path in find_run_folders(tree)]
    assert found == [(3, 0, "rank0"), (4, 0, "rank0")]
    assert guess_format(tree) == "nbprec"


def test_the_cann_guess_tells_names_as_the_name_parser_does():
    """The CANN reader's guess passes over names that cannot follow its naming rule (they do not end with a
    number) without the parser: every name the parser takes is still taken."""
    from nbprec.formats.cann_index import dump_or_mapping
    from nbprec.formats.cann_tree import parse_file_name

    names = [
        "Conv2D.conv1_Conv2D.3.4.1700000000000001",
        "MatMul.fc.1.2",
        "Opdebug.Node_OpDebug.5.6.1700000000000002",
        "Add.a.1.2.3.4.5.6.7.8",
        "Add.a.1.2\n",
        "Add.a.1.2\n\n",
        "Add.a.1.\u0662",
        "op1.0.1700000000000001.npy",
        "Conv2D.conv1.3.4.1700000000000001.output.0.npy",
        "ge_proto_00000001_Build.txt",
        "mapping.csv",
        "x",
        "",
        "1",
        "a.1",
    ]
    for name in names:
        expected = name == "mapping.csv" or not isinstance(parse_file_name(name), str)
        assert dump_or_mapping(name) == expected, name


def test_a_flat_folder_of_other_files_is_told_without_parsing_each_name(tmp_path, monkeypatch):
    """Telling a TensorFlow dump (a flat folder of .npy files) parses none of its names as CANN dump names: at
    100,000 files, the readers' guesses took 0.46-0.53 s before, 0.10-0.18 s after (2026-12-07)."""
    from nbprec.formats import cann_index

    folder = _flat_npy_folder(tmp_path / "tf", 40)
    parsed = []
    real = cann_index.parse_file_name
    monkeypatch.setattr(cann_index, "parse_file_name", lambda name: parsed.append(name) or real(name))
    assert guess_format(folder) == "tf_npy"
    assert parsed == []
    (folder / "Add.a.1.2.1700000000000003").write_bytes(b"\x00" * 8)  # one name of the rule: parsed, as before
    assert guess_format(folder) in ("cann", "tf_npy")
    assert parsed == ["Add.a.1.2.1700000000000003"]
