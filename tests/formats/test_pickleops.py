"""The pickle opcode walker that reads torch.save's data.pkl: the opcodes pickletools reads, on real archives and
on damaged ones, and the same verdict as a pickletools-based reader on every mutation of them."""

from __future__ import annotations

import pickle
import pickletools
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from nbprec.formats import _ptzip
from nbprec.formats._pickleops import OPCODE_NAMES, opcodes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"


def _data_pkls() -> list[bytes]:
    """The distinct data.pkl of the msprobe fixtures' .pt files (torch.save archives written by msprobe)."""
    found: dict[bytes, None] = {}
    for path in sorted(FIXTURES.glob("*/step0/rank0/dump_tensor_data/*.pt")):
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                if name.endswith("/data.pkl"):
                    found.setdefault(archive.read(name))
    return list(found)


PKLS = _data_pkls()


def _genops(data: bytes) -> list[tuple[str, object]]:
    return [(op.name, arg) for op, arg, _pos in pickletools.genops(data)]


def test_every_opcode_is_named_as_pickletools_names_it():
    assert {op.code.encode("latin-1")[0]: op.name for op in pickletools.opcodes} == OPCODE_NAMES


def test_real_archives_give_the_opcodes_pickletools_gives():
    assert len(PKLS) >= 5  # float32, bfloat16, float16 tensors of several ranks
    for data in PKLS:
        assert list(opcodes(data)) == _genops(data)


@pytest.mark.parametrize("protocol", [2, 4])
def test_every_argument_it_decodes_is_what_pickletools_decodes(protocol):
    values = (-5, 200, 60000, -70000, 70000, 2**70, -(2**70), True, False, None, "é" * 3, "x" * 300, "")
    data = pickle.dumps((values, values), protocol=protocol)  # (the second is a memo reference: BINGET)
    ops = list(opcodes(data))
    assert ops == _genops(data)
    names = {name for name, _ in ops}
    assert {"BININT", "BININT1", "BININT2", "LONG1", "BINGET", "NEWTRUE", "NEWFALSE", "NONE"} <= names
    assert ("BINUNICODE" if protocol == 2 else "SHORT_BINUNICODE") in names
    strings = [f"s{i}" for i in range(300)]
    big = pickle.dumps(tuple(strings + strings), protocol=protocol)  # memo indices beyond 255: the LONG_ forms
    assert list(opcodes(big)) == _genops(big)
    assert {"LONG_BINGET"} | ({"LONG_BINPUT"} if protocol == 2 else {"MEMOIZE", "FRAME"}) <= dict(opcodes(big)).keys()


def test_protocol_0_forms_are_read_as_pickletools_reads_them():
    data = b"(cmodule\nname\np0\nVtext \\u00e9\ng0\ntp1\n."
    assert list(opcodes(data)) == _genops(data)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\x80\x02", "before STOP"),  # no STOP
        (b"\x80", "runs past"),  # PROTO's argument cut
        (b"X\xff\x00\x00\x00ab.", "runs past"),  # a string longer than what is left
        (b"\x8a\x09\x01.", "runs past"),  # LONG1 longer than what is left
        (b"ctorch\n", "no end of line"),  # GLOBAL's second line missing
        (b"\xff.", "not a pickle opcode"),
        (b"ctorch\\x2e_utils\n_rebuild\n.", "not a plain name"),
        (b"pabc\n.", "not a memo index"),
    ],
)
def test_malformed_bytes_are_a_value_error_naming_the_problem(data, problem):
    with pytest.raises(ValueError, match=problem):
        list(opcodes(data))


def test_an_opcode_it_does_not_decode_ends_the_walk():
    assert list(opcodes(b"\x80\x02}q\x00.")) == [("PROTO", 2), ("EMPTY_DICT", None)]


def _oracle_describe(data: bytes, monkeypatch) -> object:
    """_ptzip._describe over pickletools.genops instead of the walker (what it was before the walker)."""
    with monkeypatch.context() as patch:
        patch.setattr(_ptzip, "opcodes", _genops)
        return _verdict(data)


def _verdict(data: bytes) -> object:
    try:
        return _ptzip._describe.__wrapped__(data)
    except _ptzip._NOT_A_TENSOR:
        return "refused"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (pickletools, on names holding a backslash)
def test_every_damaged_pickle_gets_the_verdict_the_pickletools_reader_gives(monkeypatch):
    rng = random.Random(21)
    checked = 0
    for data in PKLS:
        assert _verdict(data) == _oracle_describe(data, monkeypatch) != "refused"
        cases = [data[:cut] for cut in range(len(data))]
        for _ in range(300):
            damaged = bytearray(data)
            for _ in range(rng.randint(1, 3)):
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            cases.append(bytes(damaged))
        for case in cases:
            assert _verdict(case) == _oracle_describe(case, monkeypatch), case
            checked += 1
    assert checked > 1500


def test_reading_an_archive_imports_neither_pickle_nor_re():
    code = (
        "import sys, nbprec.formats._ptzip as z, nbprec.compare.early, nbprec.compare.early_msprobe; "
        "print(sorted(m for m in ('pickle', 'pickletools', 're', 'enum') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
