"""A number of thousands of digits in any JSON file nbprec reads (issue 16): Python's ``int()`` refuses to convert
over 4,300 digits (a guard against quadratic conversion), and ``json`` lets that ``ValueError`` through, which is
not a ``JSONDecodeError``. The dump readers read such an integer as its float (infinite), as the same number
written with an exponent; the other JSON files nbprec reads (graphs, configurations, saved results) refuse it
with an error naming the file. Never a traceback.

The dumps are real: copies of the msprobe fixtures (tensor, statistics, md5) and a dump written by nbprec's own
writer; each case puts a 5,000-digit integer in place of one value of one metadata file (its first, a middle
and its last number, string or null), then opens the dump, reads its tensors and compares it with the intact copy.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nbprec
from nbprec.config import validate
from nbprec.errors import ComparisonError, NbprecError
from nbprec.formats._files import long_number, shown
from nbprec.formats._jsonstream import int_or_float
from nbprec.formats.native import NativeDumpWriter
from nbprec.graph.ge import read_fusion_result, read_ge_model
from nbprec.graph.ge_parse import GeGraphError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
LONG = "7" * 5000
#: a scalar value (a number, a string, null): after a JSON delimiter, before one
VALUE = re.compile(rb'(?<=[\[:,])(\s*)(?:-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|"(?:[^"\\\n]|\\.)*"|null)(?=\s*[,\]}\n])')
METADATA = ("dump.json", "construct.json", "stack.json", "nbprec-dump.json", "index.jsonl", "index.columns.json")


def _native(folder: Path) -> Path:
    rng = np.random.default_rng(3)
    with NativeDumpWriter(folder, run="native") as writer:
        for order in range(4):
            op = f"mlp.fc{order}.forward"
            record = {"name": f"{op}.output.0", "op": op, "order": order, "step": 0, "rank": 0}
            writer.write_tensor(record, rng.standard_normal((4, 8)).astype(np.float32))
            writer.write_module(op, "mlp")
            writer.write_stack(op, [f"train.py:{order + 1} in main"])
    return folder


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bases")
    out = {name: root / name for name in ("fp32_tensor_mix", "fp32_statistics_mix", "fp32_md5_L1")}
    for name, folder in out.items():
        shutil.copytree(FIXTURES / name, folder)
    out["native"] = _native(root / "native")
    return out


def _cases(bases: dict[str, Path]) -> list[tuple[str, str, int]]:
    cases = []
    for name, base in bases.items():
        for file in sorted(p for p in base.rglob("*") if p.name in METADATA):
            count = len(VALUE.findall(file.read_bytes()))
            for which in sorted({0, count // 2, count - 1} if count else set()):
                cases.append((name, str(file.relative_to(base)), which))
    return cases


def _with_long_number(base: Path, case: Path, file: str, which: int) -> None:
    shutil.copytree(base, case)
    path = case / file
    found = list(VALUE.finditer(path.read_bytes()))[which]
    data = path.read_bytes()
    path.write_bytes(data[: found.start()] + found.group(1) + LONG.encode() + data[found.end() :])


def test_every_metadata_file_of_every_base_has_values_to_replace(bases):
    files = {(name, Path(file).name) for name, file, _ in _cases(bases)}
    for name in ("fp32_tensor_mix", "fp32_statistics_mix", "fp32_md5_L1"):
        assert {(name, "dump.json"), (name, "stack.json")} <= files
    assert {("fp32_tensor_mix", "construct.json"), ("fp32_statistics_mix", "construct.json")} <= files  # (L1: {})
    assert {("native", "index.jsonl"), ("native", "index.columns.json"), ("native", "nbprec-dump.json")} <= files


def test_a_long_number_in_any_metadata_file_is_a_problem_or_an_error_naming_it(bases, tmp_path):
    failures = []
    outcomes = {"opened": 0, "error": 0}
    for n, (name, file, which) in enumerate(_cases(bases)):
        case = tmp_path / f"{n}-{name}"
        _with_long_number(bases[name], case, file, which)
        where = f"{name}/{file} number {which}"
        try:
            dump = nbprec.open(case)
            for position in np.flatnonzero(dump.index["has_data"].to_numpy()).tolist():
                dump.tensor(position)
            nbprec.compare(dump, nbprec.open(bases[name]))
            outcomes["opened"] += 1
        except NbprecError as exc:
            outcomes["error"] += 1
            if str(case) not in str(exc):
                failures.append(f"{where}: error without the file: {exc}")
        except Exception as exc:  # (any other exception is the failure looked for)
            failures.append(f"{where}: {type(exc).__name__}: {str(exc)[:200]}")
    assert not failures, "\n".join(failures)
    assert outcomes["opened"] and outcomes["error"], outcomes  # both ways are taken by some file


def test_a_long_number_is_read_as_the_infinity_it_is(bases, tmp_path):
    case = tmp_path / "case"
    shutil.copytree(bases["fp32_statistics_mix"], case)
    path = case / "step0/rank0/dump.json"
    text = path.read_text()
    at = text.index('"Max": ') + len('"Max": ')
    path.write_text(text[:at] + LONG + text[text.index(",", at) :])
    dump, intact = nbprec.open(case), nbprec.open(bases["fp32_statistics_mix"])
    changed = np.flatnonzero(dump.index["max"].to_numpy() != intact.index["max"].to_numpy()).tolist()
    assert len(changed) == 1 and dump.index["max"].iat[changed[0]] == np.inf


def test_the_command_line_compares_a_dump_holding_a_long_number(bases, tmp_path):
    case = tmp_path / "case"
    _with_long_number(bases["fp32_tensor_mix"], case, "step0/rank0/dump.json", 3)
    command = ["compare", str(case), str(bases["fp32_tensor_mix"]), "-o", str(tmp_path / "o")]
    done = subprocess.run(
        [sys.executable, "-m", "nbprec", *command],
        capture_output=True,
        text=True,
        env={**os.environ, "NBPREC_DAEMON": "off"},
        timeout=120,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert (tmp_path / "o").is_dir()


def test_shown_writes_huge_values_by_their_size_or_type():
    assert shown(10**5000) == "an integer of 16610 bits"
    assert shown([7, 10**5000]) == "a list too large to write out"  # (repr refuses over 4,300 digits)
    assert shown(-(2**100)) == repr(-(2**100)) and shown("x" * 500, 10) == "'xxxxxx..."


def test_graphs_configurations_and_saved_results_refuse_a_long_number_naming_the_file(bases, tmp_path):
    graph = tmp_path / "graph.json"
    graph.write_text('{"name": "g", "op": [{"name": "x", "type": "Data", "id": ' + LONG + "}]}")
    with pytest.raises(GeGraphError, match=r"graph\.json: not read: it holds a number of over 4300"):
        read_ge_model(graph)
    fusion = tmp_path / "fusion_result.json"
    fusion.write_text('{"graph_fusion": {"A": {"effect_times": "1", "match_times": ' + LONG + "}}}")
    with pytest.raises(
        GeGraphError, match=r"fusion_result\.json: line 1, column 1: not read: the value holds a number"
    ):
        read_fusion_result(fusion)
    findings = validate('{"task": "tensor", "level": "L1", "step": [' + LONG + "]}", check_paths=False)
    assert [f.message for f in findings if f.severity == "error"] == [
        "not read: the JSON holds a number of over 4300 digits, more than Python converts"
    ]
    saved = nbprec.compare(nbprec.open(bases["fp32_tensor_mix"]), nbprec.open(bases["fp32_tensor_mix"]))
    folder = saved.save(tmp_path / "saved")
    header = folder / "comparison.json"
    header.write_text(header.read_text().replace("{", '{"x": ' + LONG + ", ", 1))
    with pytest.raises(ComparisonError, match=r"comparison\.json: not read: it holds a number of over 4300 digits"):
        nbprec.Comparison.load(folder)


def _long_npy_shape(path: Path) -> None:
    """``path``'s .npy header with its first size written with 5,000 digits (the header padded as numpy pads)."""
    data = path.read_bytes()
    length = int.from_bytes(data[8:10], "little")
    header = re.sub(r"'shape': \((\d+)", "'shape': (" + LONG, data[10 : 10 + length].decode("latin1"), count=1)
    body = header.rstrip("\n").encode("latin1")
    body += b" " * ((64 - (10 + len(body) + 1) % 64) % 64) + b"\n"
    path.write_bytes(data[:8] + len(body).to_bytes(2, "little") + body + data[10 + length :])


def test_a_long_size_in_a_payload_header_is_said_in_a_users_terms(bases, tmp_path):
    native = tmp_path / "native"
    shutil.copytree(bases["native"], native)
    _long_npy_shape(sorted((native / "tensors").rglob("*.npy"))[0])
    tf = tmp_path / "tf"
    tf.mkdir()
    for i, name in enumerate(("a", "b")):
        np.save(tf / f"scope_{name}.0.{1675157077176648 + i}.npy", np.ones(4, np.float32))
    _long_npy_shape(tf / "scope_b.0.1675157077176649.npy")
    with pytest.raises(NbprecError, match=r"000000-mlp\.fc0.*cannot read the \.npy payload: a number of over 4300 d"):
        nbprec.open(native).tensor(0)
    problems = nbprec.open(tf).problems["problem"].tolist()
    assert problems == [".npy file not read: unreadable header: " + long_number()]
    assert "set_int_max_str_digits" not in long_number()


def test_a_python_without_the_digits_limit_reads_every_integer_as_an_integer(bases):
    """``PYTHONINTMAXSTRDIGITS=0`` (``sys.set_int_max_str_digits(0)``) lifts the limit: every integer stays an int,
    and nbprec's own dumps, whose header and marker are read with :func:`int_or_float`, open as before."""
    assert int_or_float("12") == 12 and type(int_or_float("-7")) is int
    assert int_or_float(LONG) == np.inf and int_or_float("-" + LONG) == -np.inf
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        assert int_or_float(LONG) == int(LONG) and type(int_or_float("12")) is int
        dump = nbprec.open(bases["native"])
    finally:
        sys.set_int_max_str_digits(before)
    assert len(dump) == 4 and dump.problems.empty


def test_the_stream_never_loops_when_its_lenient_decoder_refuses_too(tmp_path, monkeypatch):
    """No ValueError but the too-long integer's is known to come out of the decoders; were the lenient one to raise
    another, the value is an error naming the file, not a second try forever."""
    import json

    from nbprec.errors import DumpFormatError
    from nbprec.formats import _jsonstream
    from nbprec.formats._layout import read_json_file

    def refuse(text: str) -> int:
        raise ValueError(f"refused {len(text)} digits")

    path = tmp_path / "stack.json"
    path.write_text('{"a": [1, 2], "b": ' + LONG + "}")
    assert read_json_file(path) == {"a": [1, 2], "b": np.inf}
    monkeypatch.setattr(_jsonstream, "LENIENT", json.JSONDecoder(parse_int=refuse))
    with pytest.raises(DumpFormatError, match=r"stack\.json: invalid JSON at line 1, column 20 .*refused 5000 digits"):
        read_json_file(path)
