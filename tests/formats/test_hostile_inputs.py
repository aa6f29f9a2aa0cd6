"""Hostile and broken dumps (issue 16): a clear error or a recorded problem, never OOM, a hang, a traceback
or a silent drop.

Every hostile file is made here, in ``tmp_path``, mostly from a copy of a real msprobe dump (``B``). Calls that
could exhaust memory or block run in a fresh interpreter (:func:`isolated`) with an address-space limit and a
timeout, so that a regression fails the test instead of taking the machine down or hanging the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import zipfile
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import nbprec
from nbprec.errors import DumpFormatError
from nbprec.formats.native import NativeDumpWriter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe"
RANK = Path("step0/rank0")
DATA = RANK / "dump_tensor_data"
VICTIM = "Functional.dropout.0.forward.input.0"  # float32 [2, 8, 32]
T0 = 1675157077176648

_RUNNER = """
import json, resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
args = json.loads(sys.argv[2])
result = {}
try:
__BODY__
except BaseException:
    import traceback
    result["crash"] = traceback.format_exc()
# this process's own peak (VmHWM): ru_maxrss would also count the parent's memory at fork/exec time
with open("/proc/self/status") as status:
    result["maxrss_mb"] = next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) // 1024
print("RESULT " + json.dumps(result, default=str))
"""


def isolated(body: str, *, memory_mb: int = 1536, timeout: float = 60, **args: object) -> dict:
    """Run ``body`` (code filling the dict ``result`` from the dict ``args``) in a fresh interpreter limited to
    ``memory_mb`` MiB of address space; its ``result``, with ``maxrss_mb``. A hang or a crash fails the test."""
    code = _RUNNER.replace("__BODY__", textwrap.indent(textwrap.dedent(body), "    "))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(memory_mb << 20), json.dumps(args, default=str)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            errors="backslashreplace",
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung: no result within {timeout} s")
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the child died (exit {done.returncode}): {done.stderr[-2000:]}"
    result = json.loads(lines[-1][len("RESULT ") :])
    assert "crash" not in result, result["crash"]
    return result


@pytest.fixture
def dump_b(tmp_path: Path) -> Path:
    """B: a private copy of a real msprobe tensor dump, for a test to damage."""
    target = tmp_path / "B"
    shutil.copytree(FIXTURES / "fp32_tensor_mix", target)
    return target


def _edit_dump_json(run: Path, edit) -> None:
    path = run / RANK / "dump.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


_OPEN_AND_READ = """
import nbprec
from nbprec.errors import NbprecError
dump = nbprec.open(args["path"])
result["problems"] = dump.problems.to_dict("records")
row = dump.row(args["name"]).copy()
result["has_data"] = bool(row["has_data"])
row["has_data"] = True  # as if the file had been swapped after the index was built
try:
    array = dump.tensor(row)
    result["read"] = [list(array.shape), str(array.dtype), bool(array.flags.writeable)]
except NbprecError as exc:
    result["error"] = str(exc)
"""


# -- 1. bounded memory ---------------------------------------------------------------------------------
def test_a_payload_symlinked_to_dev_zero_is_refused(dump_b: Path) -> None:
    victim = dump_b / DATA / f"{VICTIM}.pt"
    victim.unlink()
    victim.symlink_to("/dev/zero")
    result = isolated(_OPEN_AND_READ, memory_mb=1024, path=str(dump_b), name=VICTIM)
    (problem,) = [p for p in result["problems"] if p["record"] == VICTIM]
    assert "/dev/zero" in problem["problem"] and "outside the dump" in problem["problem"]
    assert not result["has_data"]
    assert "outside the dump" in result["error"] and victim.name in result["error"]
    assert result["maxrss_mb"] < 400


def _zip(entries: list[tuple[str, int, bytes, int, int]]) -> bytes:
    """A zip archive of (name, method, stored bytes, CRC-32, uncompressed size) entries, written by hand so
    that a deflate stream can claim any size."""
    out, directory = b"", b""
    for name, method, data, crc, size in entries:
        raw = name.encode()
        header = len(out)
        out += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, method, 0, 0, crc, len(data), size, len(raw), 0)
        out += raw + data
        directory += struct.pack(
            "<4s4s4H3L5H2L", b"PK\x01\x02", b"\x14\x00\x14\x00", 0, method, 0, 0, crc, len(data), size, len(raw),
            0, 0, 0, 0, 0, header,
        )  # fmt: skip
        directory += raw
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(directory), len(out), 0)
    return out + directory + end


def _deflated_zeros(nbytes: int) -> bytes:
    """A raw deflate stream of ``nbytes`` zero bytes (a multiple of 16 MiB), built from one compressed block
    repeated (full flushes make the blocks independent): 3 GiB in about 3 MB, in milliseconds."""
    chunk = 16 << 20
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = compressor.compress(bytes(chunk)) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(bytes(chunk)) + compressor.flush(zlib.Z_FULL_FLUSH)
    return first + block * (nbytes // chunk - 1) + compressor.flush()


def _bomb(victim: Path) -> None:
    """Rewrite the torch.save archive ``victim`` with its storage deflated from 3 GiB of zeros (about 3 MB)."""
    with zipfile.ZipFile(victim) as archive:
        members = [(info.filename, archive.read(info)) for info in archive.infolist()]
    entries = []
    for name, data in members:
        if "/data/" in name:
            entries.append((name, 8, _deflated_zeros(3 << 30), 0, 3 << 30))
        else:
            entries.append((name, 0, data, zlib.crc32(data), len(data)))
    victim.write_bytes(_zip(entries))
    assert victim.stat().st_size < 8 << 20


def test_a_deflated_storage_is_inflated_no_further_than_the_tensor_needs(dump_b: Path) -> None:
    victim = dump_b / DATA / f"{VICTIM}.pt"
    _bomb(victim)
    result = isolated(_OPEN_AND_READ, memory_mb=1024, path=str(dump_b), name=VICTIM)
    assert result["read"] == [[2, 8, 32], "float32", False] or victim.name in result["error"]
    assert result["maxrss_mb"] < 400


def test_a_compressed_archive_is_never_left_to_torch_load(dump_b: Path) -> None:
    """An archive this reader does not parse itself (here a dict of tensors) goes to torch.load, which would
    inflate every entry whole: one with compressed entries (torch.save never writes them) is refused."""
    torch = pytest.importorskip("torch")
    victim = dump_b / DATA / f"{VICTIM}.pt"
    torch.save({"x": torch.zeros(2, 8, 32)}, victim)
    _bomb(victim)
    result = isolated(_OPEN_AND_READ, memory_mb=1536, path=str(dump_b), name=VICTIM)
    assert "compressed entries, which torch.save never writes: not read" in result["error"]
    assert victim.name in result["error"] and result["maxrss_mb"] < 600


def test_a_view_larger_than_the_recorded_tensor_is_refused_before_allocation(dump_b: Path) -> None:
    torch = pytest.importorskip("torch")
    victim = dump_b / DATA / f"{VICTIM}.pt"
    torch.save(torch.zeros(1).expand(20000, 20000), victim)  # a 20000x20000 view of a 1-element storage
    assert victim.stat().st_size < 4096
    result = isolated(_OPEN_AND_READ, memory_mb=1024, path=str(dump_b), name=VICTIM)
    assert "payload has shape [20000, 20000], dump.json says [2, 8, 32]" in result["error"]
    assert victim.name in result["error"] and result["maxrss_mb"] < 400
    # when nothing says what to expect, the view comes back as a view: no 1.6 GB copy
    result = isolated(
        """
        from nbprec.formats._pt import read_pt_tensor
        array = read_pt_tensor(args["file"])
        result.update(shape=list(array.shape), strides=list(array.strides), writeable=bool(array.flags.writeable))
        """,
        memory_mb=1024,
        file=str(victim),
    )
    assert result["shape"] == [20000, 20000] and result["strides"] == [0, 0] and not result["writeable"]
    assert result["maxrss_mb"] < 400


def write_big_dump_json(target: Path, entries: int) -> None:
    """A dump.json of ``entries`` ops, written straight to disk: the small API entries of a real dump, each
    repeated with a new call index (two tensors per op on average)."""
    data = json.loads((FIXTURES / "fp32_tensor_mix" / RANK / "dump.json").read_text())["data"]
    bodies = [
        (key, json.dumps(body, separators=(",", ":")))
        for key, body in data.items()
        if key.startswith("Functional.") and ".0." in key and len(json.dumps(body)) < 700
    ]
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w") as f:
        f.write('{"task":"tensor","level":"L1","framework":"pytorch","dump_data_dir":null,"data":{')
        for i in range(entries):
            key, text = bodies[i % len(bodies)]
            new_key = key.replace(".0.", f".{i // len(bodies)}.", 1)
            f.write(("," if i else "") + json.dumps(new_key) + ":" + text.replace(key + ".", new_key + "."))
        f.write("}}")


@pytest.mark.slow
def test_a_dump_json_of_200000_ops_is_indexed_in_bounded_memory(tmp_path: Path) -> None:
    """Before: 1.2 GB (5.8 GB for 10^6 ops); the index is built op by op from a streamed dump.json."""
    write_big_dump_json(tmp_path / "big" / RANK / "dump.json", 200_000)
    result = isolated(
        """
        import nbprec
        dump = nbprec.open(args["path"])
        result.update(tensors=len(dump), problems=dump.problems["problem"].tolist())
        """,
        memory_mb=2048,
        timeout=300,
        path=str(tmp_path / "big"),
    )
    assert result["tensors"] == 400_000
    assert len(result["problems"]) == 1 and "400000 payloads" in result["problems"][0]
    assert result["maxrss_mb"] < 700


# -- 2. no hang ----------------------------------------------------------------------------------------
_NO_HANG = """
import nbprec, nbprec.overflow
from nbprec.errors import NbprecError
dump = nbprec.open(args["path"])
result["problems"] = dump.problems.to_dict("records")
row = dump.row(args["name"]).copy()
try:
    dump.tensor(row)
except NbprecError as exc:
    result["tensor"] = type(exc).__name__
row["has_data"] = True
try:
    dump.tensor(row)
except NbprecError as exc:
    result["forced"] = str(exc)
result["compare"] = len(nbprec.compare(args["path"], args["bench"]).table)
result["scan"] = len(nbprec.overflow.scan(dump, payload=True).tensors)
"""


def _assert_fifo_reported(result: dict, fifo: Path, name: str) -> None:
    (problem,) = [p for p in result["problems"] if p["file"] == str(fifo)]
    assert problem["record"] == name and "not a regular file (a FIFO)" in problem["problem"]
    assert result["tensor"] == "TensorDataUnavailableError"
    assert "not a regular file (a FIFO)" in result["forced"] and fifo.name in result["forced"]


def test_a_fifo_payload_in_an_msprobe_dump_never_blocks(dump_b: Path) -> None:
    fifo = dump_b / DATA / f"{VICTIM}.pt"
    fifo.unlink()
    os.mkfifo(fifo)
    result = isolated(_NO_HANG, path=str(dump_b), name=VICTIM, bench=str(FIXTURES / "fp32_tensor_mix"))
    _assert_fifo_reported(result, fifo, VICTIM)
    assert result["compare"] == 279 and result["scan"] == 279
    info = subprocess.run(
        [sys.executable, "-m", "nbprec", "info", str(dump_b)], capture_output=True, text=True, timeout=60
    )
    assert info.returncode == 0 and fifo.name in info.stdout and "not a regular file (a FIFO)" in info.stdout


def _native_dump(path: Path) -> list[str]:
    rng = np.random.default_rng(0)
    names = []
    with NativeDumpWriter(path, run=path.name) as writer:
        for order in range(4):
            name = f"mlp.{order}.forward.output.0"
            writer.write_tensor(
                {"name": name, "op": f"mlp.{order}.forward", "order": order, "step": 0, "rank": 0},
                rng.standard_normal((4, 8)).astype(np.float32),
            )
            names.append(name)
    return names


def test_a_fifo_payload_in_a_native_dump_never_blocks(tmp_path: Path) -> None:
    names = _native_dump(tmp_path / "run")
    _native_dump(tmp_path / "bench")
    fifo = next((tmp_path / "run" / "tensors").glob("000001-*.npy"))
    fifo.unlink()
    os.mkfifo(fifo)
    result = isolated(_NO_HANG, path=str(tmp_path / "run"), name=names[1], bench=str(tmp_path / "bench"))
    _assert_fifo_reported(result, fifo, names[1])
    assert result["compare"] == 4 and result["scan"] == 4


# -- 3. clear messages ---------------------------------------------------------------------------------
def test_dump_data_dir_outside_the_dump_is_not_read(dump_b: Path) -> None:
    shutil.rmtree(dump_b / DATA)

    def edit(data: dict) -> None:
        data["dump_data_dir"] = "/etc"
        data["data"]["Functional.linear.0.forward"]["output"][0]["data_name"] = "passwd"

    _edit_dump_json(dump_b, edit)
    result = isolated(_OPEN_AND_READ, path=str(dump_b), name="passwd")
    problems = [p["problem"] for p in result["problems"]]
    assert any("dump_data_dir '/etc'" in p and "outside the dump and was not read" in p for p in problems)
    assert not result["has_data"] and "/etc/passwd" not in result["error"]
    assert "payload file missing" in result["error"]


def test_a_dump_data_dir_holding_a_real_msprobe_tensor_folder_is_used(dump_b: Path, tmp_path: Path) -> None:
    shutil.move(dump_b / RANK, tmp_path / "moved")  # the tensors stay elsewhere, dump.json says where
    (dump_b / RANK).mkdir()
    shutil.copy(tmp_path / "moved" / "dump.json", dump_b / RANK / "dump.json")
    _edit_dump_json(dump_b, lambda data: data.update(dump_data_dir=str(tmp_path / "moved" / "dump_tensor_data")))
    dump = nbprec.open(dump_b)
    assert dump.index["has_data"].all() and len(dump.problems) == 0
    assert dump.tensor(VICTIM).shape == (2, 8, 32)


def test_a_payload_symlinked_out_of_the_dump_is_not_read(dump_b: Path) -> None:
    victim = dump_b / DATA / f"{VICTIM}.pt"
    victim.unlink()
    victim.symlink_to("/etc/shadow")
    inner = dump_b / DATA / "Functional.dropout.0.forward.output.0.pt"  # a link inside the dump is fine
    (dump_b / "kept").mkdir()
    shutil.move(inner, dump_b / "kept" / inner.name)
    inner.symlink_to(dump_b / "kept" / inner.name)
    result = isolated(_OPEN_AND_READ, path=str(dump_b), name=VICTIM)
    (problem,) = result["problems"]
    assert problem["record"] == VICTIM and "symbolic link to /etc/shadow" in problem["problem"]
    assert "lies outside the dump: not read" in problem["problem"]
    assert "outside the dump" in result["error"] and "IndexError" not in result["error"]
    assert nbprec.open(dump_b).tensor("Functional.dropout.0.forward.output.0").shape == (2, 8, 32)


def test_an_empty_pt_file_says_so(dump_b: Path) -> None:
    (dump_b / DATA / f"{VICTIM}.pt").write_bytes(b"")
    with pytest.raises(DumpFormatError, match=r"empty file \(0 bytes\): not a torch\.save archive") as info:
        nbprec.open(dump_b).tensor(VICTIM)
    assert info.value.record == VICTIM and info.value.path.endswith(f"{VICTIM}.pt")


def test_a_tensorflow_bfloat16_npy_saved_as_2_byte_void_is_read_as_bfloat16(tmp_path: Path) -> None:
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
    for folder, array in (("bf16", x.astype(ml_dtypes.bfloat16)), ("fp32", x)):
        (tmp_path / folder).mkdir()
        np.save(tmp_path / folder / f"dense_MatMul.0.{T0}.npy", array)
        np.save(tmp_path / folder / f"dense_Relu.0.{T0 + 5}.npy", np.maximum(array, 0))
    header = (tmp_path / "bf16" / f"dense_MatMul.0.{T0}.npy").read_bytes()[:80]
    assert b"V2'" in header  # what numpy writes for ml_dtypes.bfloat16
    dump = nbprec.open(tmp_path / "bf16")
    assert list(dump.index["dtype"]) == ["bfloat16", "bfloat16"] and len(dump.problems) == 0
    assert "read as bfloat16" in dump.meta["assumptions"][0]
    loaded = dump.tensor("dense_MatMul.0")
    assert loaded.dtype == ml_dtypes.bfloat16 and loaded.tobytes() == x.astype(ml_dtypes.bfloat16).tobytes()
    table = nbprec.compare(tmp_path / "bf16", tmp_path / "fp32").table
    assert (table["reason"] == "").all() and (table["cosine"] > 0.999).all()
    np.save(tmp_path / "bf16" / f"scope_Cast.0.{T0 + 9}.npy", x.astype(ml_dtypes.float8_e4m3fn))  # a 1-byte void
    dump = nbprec.open(tmp_path / "bf16")
    (problem,) = dump.problems.to_dict("records")
    assert problem["record"] == "scope_Cast.0" and "does not say their real dtype" in problem["problem"]
    assert not dump.row("scope_Cast.0")["has_data"]


def test_a_step_folder_symlinked_to_another_is_read_once(dump_b: Path) -> None:
    (dump_b / "step1").symlink_to("step0")
    dump = nbprec.open(dump_b)
    assert len(dump) == 279 and dump.steps == [0]
    (problem,) = dump.problems.to_dict("records")
    assert problem["file"] == str(dump_b / "step1") and "read already: skipped" in problem["problem"]


# -- 4. TensorFlow .npy problems are recorded with the tensor they would have been ---------------------
def test_every_bad_tensorflow_npy_is_a_problem_naming_file_and_tensor(tmp_path: Path) -> None:
    folder = tmp_path / "tf"
    folder.mkdir()
    good = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.save(folder / f"scope_Good.0.{T0}.npy", good)
    data = (folder / f"scope_Good.0.{T0}.npy").read_bytes()
    with (folder / "huge").open("wb") as f:  # a header declaring 4 TB, then 96 bytes
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
    huge = (folder / "huge").read_bytes() + data[-96:]
    (folder / "huge").unlink()
    bad = {
        "scope_Truncated": data[:-7],
        "scope_ShortHeader": data[:30],
        "scope_BadHeader": data[:10] + b"{'descr': 'nonsense'" + data[30:],
        "scope_WrongMagic": b"PK\x03\x04" + data[4:],
        "scope_Huge": huge,
        "scope_Empty": b"",
        "scope_Descr": data.replace(b"'<f4'", b"'<x9'"),
    }
    for op, content in bad.items():
        (folder / f"{op}.0.{T0 + 1}.npy").write_bytes(content)
    dump = nbprec.open(folder)
    assert list(dump.index["name"]) == ["scope_Good.0"]
    problems = {p["record"]: p for p in dump.problems.to_dict("records")}
    assert set(problems) == {f"{op}.0" for op in bad}
    for op in bad:
        assert problems[f"{op}.0"]["file"] == str(folder / f"{op}.0.{T0 + 1}.npy")
    assert "truncated payload" in problems["scope_Truncated.0"]["problem"]
    assert "truncated payload" in problems["scope_Huge.0"]["problem"]
    assert "wrong magic" in problems["scope_WrongMagic.0"]["problem"]
    assert "empty file (0 bytes)" in problems["scope_Empty.0"]["problem"]
    assert "unreadable header" in problems["scope_Descr.0"]["problem"]


def test_a_fifo_in_a_tensorflow_dump_never_blocks(tmp_path: Path) -> None:
    folder = tmp_path / "tf"
    folder.mkdir()
    np.save(folder / f"scope_Good.0.{T0}.npy", np.ones(3, np.float32))
    os.mkfifo(folder / f"scope_Pipe.0.{T0 + 1}.npy")
    result = isolated(
        """
        import nbprec
        result["problems"] = nbprec.open(args["path"]).problems.to_dict("records")
        """,
        path=str(folder),
    )
    (problem,) = result["problems"]
    assert problem["record"] == "scope_Pipe.0" and "not a regular file (a FIFO)" in problem["problem"]


# -- 5. names that are not UTF-8 -------------------------------------------------------------------------
def _has_surrogates(value: object) -> bool:
    return isinstance(value, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in value)


def test_msprobe_names_that_are_not_utf8_are_kept_escaped(dump_b: Path) -> None:
    """An op key with a ``\\udcff`` escape (what json writes for a file-name byte that is not UTF-8), payload
    files named with that byte, a data_name no file can have, and a raw byte that is not UTF-8."""
    folder = dump_b / DATA

    def edit(data: dict) -> None:
        body = data["data"].pop("Functional.linear.0.forward")
        for entry in body["input_args"] + body["output"]:
            if isinstance(entry, dict) and entry.get("data_name"):
                renamed = entry["data_name"].replace("linear", "lin\udcffear")
                os.rename(folder / entry["data_name"], folder / renamed)  # the byte 0xff in the file name
                entry["data_name"] = renamed
        data["data"]["Functional.lin\udcffear.0.forward"] = body
        tensor = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [1], "data_name": "bad\ud800.pt"}
        data["data"]["Functional.bad.0.forward"] = {"output": [tensor]}
        data["framework"] = "pyt@rch"

    _edit_dump_json(dump_b, edit)
    path = dump_b / RANK / "dump.json"
    path.write_bytes(path.read_bytes().replace(b"pyt@rch", b"pyt\xffrch"))
    dump = nbprec.open(dump_b)
    name = "Functional.lin\udcffear.0.forward.output.0"
    assert dump.row(name)["op"] == "Functional.lin\udcffear.0.forward" and dump.row(name)["has_data"]
    assert dump.tensor(name).shape == (2, 8, 64)
    assert dump.meta["framework"] == "pyt\udcffrch"
    problems = {p["record"]: p["problem"] for p in dump.problems.to_dict("records")}
    assert "lone surrogates" in problems["bad\ud800"] and not dump.row("bad\ud800")["has_data"]
    assert "not valid UTF-8 (first bad byte at offset" in problems[""]
    assert not any(_has_surrogates(p) for p in dump.problems["problem"])  # the sentences are escaped
    columns = {c for c in dump.index.columns if dump.index[c].map(_has_surrogates).any()}
    assert columns == {"name", "op", "op_type", "api", "file"}
    assert len(nbprec.compare(dump_b, FIXTURES / "fp32_tensor_mix").table) == 280
    nbprec.overflow.scan(dump, payload=True)


def test_tensorflow_native_and_cann_names_that_are_not_utf8(tmp_path: Path) -> None:
    from nbprec.formats.cann_write import dump_folder, write_dump_file

    tf = tmp_path / "tf"
    tf.mkdir()
    np.save(tf / f"scope_Good.0.{T0}.npy", np.ones(3, np.float32))
    np.save(os.fsdecode(os.fsencode(tf) + f"/scope_B\xff.0.{T0 + 1}.npy".encode("latin-1")), np.ones(3, np.float32))
    dump = nbprec.open(tf)
    assert list(dump.index["name"]) == ["scope_Good.0"]
    (problem,) = dump.problems.to_dict("records")
    assert problem["file"].endswith(f"scope_B\udcff.0.{T0 + 1}.npy") and "naming rule" in problem["problem"]

    with NativeDumpWriter(tmp_path / "native") as writer:
        writer.write_tensor(
            {"name": "m\udcff.0.forward.output.0", "op": "m\udcff.0.forward", "module": "x\ud800"}, np.ones(3)
        )
    for cache in (True, False):
        if not cache:
            (tmp_path / "native" / "index.columns.json").unlink()
        dump = nbprec.open(tmp_path / "native")
        assert dump.row("m\udcff.0.forward.output.0")["module"] == "x\ud800" and len(dump.problems) == 0
        assert dump.tensor(0).tolist() == [1.0, 1.0, 1.0]

    step = dump_folder(tmp_path / "npu")
    write_dump_file(step, "lay\udcffer/Relu", "Relu", inputs=[np.ones((2, 3), np.float16)], record_op_name=False)
    dump = nbprec.open(tmp_path / "npu")
    assert dump.index["op"].tolist() == ["lay\udcffer_Relu"] and dump.tensor(0).shape == (2, 3)


def test_hostile_numbers_in_dump_json_are_problems_not_crashes(dump_b: Path) -> None:
    def edit(data: dict) -> None:
        tensor = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [1]}
        data["data"][f"Functional.huge.{'9' * 30}.forward"] = {"output": [tensor]}
        data["data"][f"Functional.long.{'1' * 5000}.forward"] = {"output": [tensor]}
        data["data"]["Functional.square.\u00b2.forward"] = {"output": [tensor]}  # a digit int() refuses
        data["data"]["Functional.big.0.forward"] = {"output": [{**tensor, "shape": [10**10, 10**10]}]}
        data["data"]["Functional.bigger.0.forward"] = {"output": [{**tensor, "shape": [10**30, 0]}]}
        data["data"]["Functional.odd.0.forward"] = {"output": [{**tensor, "dtype": "x" * 10_000}]}

    _edit_dump_json(dump_b, edit)
    dump = nbprec.open(dump_b)
    assert len(dump) == 279 + 6
    problems = {p["record"]: p["problem"] for p in dump.problems.to_dict("records")}
    for key in (f"Functional.huge.{'9' * 30}.forward", "Functional.square.\u00b2.forward"):
        assert "does not follow msprobe's naming" in problems[key] and dump.row(f"{key}.output.0")["call"] == -1
    assert "more elements than an index can count" in problems["Functional.big.0.forward.output.0"]
    assert "not a list of sizes" in problems["Functional.bigger.0.forward.output.0"]
    assert len(problems["Functional.odd.0.forward.output.0"]) < 200
