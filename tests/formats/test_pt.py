"""Reading torch.save files without torch and without unpickling: bit-exact, and refusing anything unusual."""

from __future__ import annotations

import pickle
import zipfile

import numpy as np
import pytest
from threads_support import ticks_inside

from nbprec.errors import DumpFormatError
from nbprec.formats._pt import read_pt_tensor

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "float16", "bfloat16", "int64", "int8", "uint8", "bool", "float8_e4m3fn"]
)
def test_round_trip_is_bit_exact(tmp_path, dtype):
    t = (torch.randn(3, 5) * 4).to(getattr(torch, dtype))
    torch.save(t, tmp_path / "t.pt")
    got = read_pt_tensor(tmp_path / "t.pt")
    from nbprec.formats._torch import torch_to_numpy

    want = torch_to_numpy(t)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def test_views_scalars_and_empty_tensors(tmp_path):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    cases = {"transposed": base.t(), "slice": base[1:3, ::2], "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 3)}
    for name, t in cases.items():
        torch.save(t, tmp_path / f"{name}.pt")
        got = read_pt_tensor(tmp_path / f"{name}.pt")
        np.testing.assert_array_equal(got, t.numpy())
        assert got.shape == tuple(t.shape), name


def test_anything_but_one_plain_tensor_is_left_to_torch(tmp_path):
    torch.save({"a": torch.ones(2)}, tmp_path / "dict.pt")
    torch.save(torch.ones(2), tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    (tmp_path / "junk.pt").write_bytes(b"not a zip")
    for name in ("dict", "legacy", "junk"):
        assert read_pt_tensor(tmp_path / f"{name}.pt") is None


class _Boom:
    def __reduce__(self):
        return (print, ("pickle code ran",))


def test_a_hostile_pickle_is_never_executed(tmp_path, capsys):
    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("evil/data.pkl", pickle.dumps(_Boom(), protocol=2))
        archive.writestr("evil/data/0", b"\\0" * 8)
    assert read_pt_tensor(path) is None
    assert "pickle code ran" not in capsys.readouterr().out


def test_a_tensor_larger_than_its_storage_is_an_error(tmp_path):
    torch.save(torch.arange(6, dtype=torch.float32), tmp_path / "t.pt")
    with zipfile.ZipFile(tmp_path / "t.pt") as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    key = next(n for n in members if "/data/" in n)
    members[key] = members[key][:8]  # storage cut to 2 values
    with zipfile.ZipFile(tmp_path / "cut.pt", "w") as archive:
        for n, data in members.items():
            archive.writestr(n, data)
    with pytest.raises(DumpFormatError, match="reaches element 5 of a storage of 2"):
        read_pt_tensor(tmp_path / "cut.pt")


# -- the archive parsed here: memory-mapped storages, the central directory, ZIP64, hostile directories -----


def test_a_large_tensor_is_a_read_only_view_of_the_mapped_file(tmp_path):
    t = torch.randn(1024, 300)  # 1.2 MB: mapped, not read
    torch.save(t, tmp_path / "big.pt")
    got = read_pt_tensor(tmp_path / "big.pt")
    assert not got.flags.writeable and got.base is not None
    assert got.tobytes() == t.numpy().tobytes()
    small = torch.arange(70_000, dtype=torch.float32)  # 280 KB: the file is read in one go, the tensor a view of it
    torch.save(small, tmp_path / "small.pt")
    got = read_pt_tensor(tmp_path / "small.pt")
    assert got.tobytes() == small.numpy().tobytes() and not got.flags.writeable
    base = got
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base, bytes) and len(base) == (tmp_path / "small.pt").stat().st_size


def _members(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {n: archive.read(n) for n in archive.namelist()}


def test_a_compressed_archive_is_still_read_exactly(tmp_path):
    t = torch.randn(64, 64, dtype=torch.float64)
    torch.save(t, tmp_path / "t.pt")
    with zipfile.ZipFile(tmp_path / "deflated.pt", "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in _members(tmp_path / "t.pt").items():
            archive.writestr(name, data)
    assert read_pt_tensor(tmp_path / "deflated.pt").tobytes() == t.numpy().tobytes()


def _with_directory(src, dst, patch_entry) -> None:
    """Copy a zip archive, rewriting its central directory entry by entry (``patch_entry(info) -> (fields,
    extra)``) and ending it with a plain end record."""
    import struct

    data = src.read_bytes()
    with zipfile.ZipFile(src) as archive:
        infos = archive.infolist()
        cd_start = archive.start_dir  # where the original central directory begins
    directory = b""
    for info in infos:
        sizes, extra = patch_entry(info)
        name = info.filename.encode()
        directory += struct.pack(
            "<4s6H3L5H2L", b"PK\x01\x02", 0x031E, 45, 0x0800, 0, 0, 0, 0, sizes[0], sizes[1], len(name),
            len(extra), 0, 0, 0, 0, sizes[2],
        ) + name + extra  # fmt: skip
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(infos), len(infos), len(directory), cd_start, 0)
    dst.write_bytes(data[:cd_start] + directory + end)


def test_zip64_sizes_in_the_central_directory_are_followed(tmp_path, monkeypatch):
    import struct

    from nbprec.formats import _pt

    t = torch.randn(100, 100)
    torch.save(t, tmp_path / "t.pt")

    def zip64(info):
        if "/data/" in info.filename:  # sizes and offset in the ZIP64 extra field, 0xFFFFFFFF in their place
            extra = struct.pack("<2H3Q", 1, 24, info.file_size, info.compress_size, info.header_offset)
            return (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), extra
        return (info.compress_size, info.file_size, info.header_offset), b""

    _with_directory(tmp_path / "t.pt", tmp_path / "zip64.pt", zip64)
    monkeypatch.setattr(_pt, "_read_storage_zipfile", lambda path: pytest.fail("fell back to zipfile"))
    assert read_pt_tensor(tmp_path / "zip64.pt").tobytes() == t.numpy().tobytes()


def test_a_directory_pointing_past_the_file_is_an_error_or_refused(tmp_path):
    t = torch.randn(100, 100)
    torch.save(t, tmp_path / "t.pt")

    def oversized(info):  # the storage claims more bytes than the file holds
        grow = 1 << 20 if "/data/" in info.filename else 0
        return (info.compress_size + grow, info.file_size + grow, info.header_offset), b""

    def elsewhere(info):  # every entry's header lies beyond the end of the file
        return (info.compress_size, info.file_size, info.header_offset + (1 << 30)), b""

    _with_directory(tmp_path / "t.pt", tmp_path / "oversized.pt", oversized)
    with pytest.raises(DumpFormatError, match="runs past the end of the file"):
        read_pt_tensor(tmp_path / "oversized.pt")
    _with_directory(tmp_path / "t.pt", tmp_path / "elsewhere.pt", elsewhere)
    assert read_pt_tensor(tmp_path / "elsewhere.pt") is None  # left to torch.load, which reports it


@pytest.mark.parametrize("cut", [10, 1000, 40_000])
def test_truncated_archives_never_crash(tmp_path, cut):
    torch.save(torch.randn(100, 100), tmp_path / "t.pt")
    data = (tmp_path / "t.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) - cut])
    try:
        got = read_pt_tensor(tmp_path / "cut.pt")
    except DumpFormatError as exc:
        assert "cut.pt" in str(exc)
    else:
        assert got is None


# -- the directory reader in C (nbprec/formats/_zipdir.c) and its pure-Python twin ------------------------


def test_the_c_directory_reader_is_built():
    # `make install` compiles it (setup.py); without it every .pt file costs about 40 us more to open
    from nbprec.formats import _ptzip

    assert _ptzip._zip_entries_c is not None, "nbprec.formats._zipdir was not built: reinstall with a C compiler"


def _outcome(reader, path, whole_below=0):
    """What a directory reader makes of a file: its result, or 'refused' (the archive is not understood)."""
    import os

    from nbprec.formats import _ptzip

    fd = os.open(path, os.O_RDONLY)
    try:
        return reader(fd, os.fstat(fd).st_size, whole_below)
    except (_ptzip._Unsupported, ValueError):
        return "refused"
    finally:
        os.close(fd)


def _small_outcome(reader, path):
    """What ``_zipdir.read_small`` makes of a file: its result (None: not a small regular file), or 'refused'."""
    from nbprec.formats import _ptzip

    try:
        return reader(str(path), _ptzip.MAP_FROM)
    except ValueError:
        return "refused"


def _damaged_archives(tmp_path) -> list:
    """Real torch.save archives (small, large, ZIP64, compressed, a dict, junk) and, from a seeded generator,
    hundreds of damaged copies: cut short anywhere, bytes overwritten in the directory and in the headers."""
    import struct

    rng = np.random.default_rng(11)
    originals = []
    for name, value in {"small": torch.ones(3), "big": torch.randn(128, 130), "dict": {"a": torch.ones(2)}}.items():
        torch.save(value, tmp_path / f"{name}.pt")
        originals.append(tmp_path / f"{name}.pt")

    def zip64(info):
        extra = struct.pack("<2H3Q", 1, 24, info.file_size, info.compress_size, info.header_offset)
        return (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), extra

    _with_directory(tmp_path / "big.pt", tmp_path / "zip64.pt", zip64)
    with zipfile.ZipFile(tmp_path / "deflated.pt", "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in _members(tmp_path / "small.pt").items():
            archive.writestr(name, data)
    (tmp_path / "junk.pt").write_bytes(b"PK\x05\x06" + bytes(30))
    originals += [tmp_path / "zip64.pt", tmp_path / "deflated.pt", tmp_path / "junk.pt"]
    damaged = []
    for k, src in enumerate(originals):
        data = src.read_bytes()
        for j in range(40):
            out = tmp_path / f"d{k}_{j}.pt"
            if j % 4 == 0:  # cut short
                out.write_bytes(data[: int(rng.integers(0, len(data)))])
            else:  # a few bytes overwritten near the end (directory) or the start (local headers)
                buf = bytearray(data)
                for _ in range(int(rng.integers(1, 4))):
                    near_end = rng.random() < 0.7
                    span = min(len(buf), 400)
                    pos = len(buf) - 1 - int(rng.integers(0, span)) if near_end else int(rng.integers(0, span))
                    buf[pos] = int(rng.choice([0, 0xFF, int(rng.integers(0, 256))]))
                out.write_bytes(bytes(buf))
            damaged.append(out)
    return originals + damaged


def test_the_c_and_python_directory_readers_agree_on_good_and_damaged_archives(tmp_path):
    from nbprec.formats import _ptzip

    if _ptzip._zip_entries_c is None:
        pytest.skip("nbprec.formats._zipdir is not built")
    paths = _damaged_archives(tmp_path)
    outcomes = {"refused": 0, "read": 0}
    for path in paths:
        python = _outcome(_ptzip._zip_entries_py, path)
        c = _outcome(_ptzip._zip_entries_c, path)
        assert c == python, path.name
        outcomes["refused" if c == "refused" else "read"] += 1
        # read whole (one read for a small file): the same entries, and the whole file as the head
        python_whole = _outcome(_ptzip._zip_entries_py, path, 1 << 30)
        assert _outcome(_ptzip._zip_entries_c, path, 1 << 30) == python_whole, path.name
        if c == "refused":
            assert python_whole == "refused", path.name
        else:
            assert python_whole[1] == c[1] and python_whole[0] == path.read_bytes() and c[0] == python_whole[0][:4096]
        # the one-call reader of small files (open, fstat, read, close, then the same parse) agrees with both
        small = _small_outcome(_ptzip._read_small_c, path) if _ptzip._read_small_c is not None else None
        if small is not None:
            whole = _outcome(_ptzip._zip_entries_py, path, _ptzip.MAP_FROM)
            assert small == (whole if 0 < path.stat().st_size < _ptzip.MAP_FROM else None), path.name
        # and the reader built on them never crashes: a tensor, None (left to torch) or an error naming the file
        try:
            read_pt_tensor(path)
        except DumpFormatError as exc:
            assert path.name in str(exc)
    assert outcomes["refused"] > 50 and outcomes["read"] > 50, outcomes  # both kinds were exercised


def test_a_hostile_directory_size_is_refused_without_reading_it(tmp_path):
    """A (sparse) 80 MB file whose end record claims a central directory of nearly all of it: both readers
    refuse it from the end record, before reading or allocating the claimed size."""
    import struct

    from nbprec.formats import _ptzip

    path = tmp_path / "hostile.pt"
    size = 80 << 20
    with path.open("wb") as f:
        f.truncate(size - 22)
        f.seek(size - 22)
        f.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, size - 22, 0, 0))
    import os

    readers = [_ptzip._zip_entries_py] + ([_ptzip._zip_entries_c] if _ptzip._zip_entries_c is not None else [])
    for reader in readers:
        fd = os.open(path, os.O_RDONLY)
        try:
            with pytest.raises((_ptzip._Unsupported, ValueError), match="central directory of more than 64 MiB"):
                reader(fd, size)
        finally:
            os.close(fd)


def test_the_small_archive_path_reads_what_the_general_one_reads_or_leaves_it(tmp_path):
    """``read_small_pt`` (the one-open path of small msprobe payloads) gives the general reader's array, bit
    for bit, for plain contiguous tensors of the expected dtype and shape, and None (the general reader then
    decides, with its checks and messages) for everything else."""
    import os

    from nbprec.dtypes import NUMPY_DTYPES
    from nbprec.formats._pt import read_small_pt

    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    plain = {
        "float32": base,
        "bfloat16": (base / 7).to(torch.bfloat16),
        "float16": (base / 7).to(torch.float16),
        "int64": base.to(torch.int64),
        "bool": base > 5,
        "offset view": base[2:],  # a contiguous view whose storage starts before it
        "scalar": torch.tensor(2.5),
    }
    for name, t in plain.items():
        path = tmp_path / f"{name}.pt"
        torch.save(t, path)
        want = read_pt_tensor(path)
        got = read_small_pt(str(path), want.dtype, tuple(t.shape))
        assert got is not None and got.dtype == want.dtype and got.shape == want.shape, name
        assert got.tobytes() == want.tobytes() and not got.flags.writeable, name
    path = tmp_path / "float32.pt"
    f32 = NUMPY_DTYPES["float32"]
    assert read_small_pt(str(path), NUMPY_DTYPES["float16"], (4, 6)) is None  # another dtype than recorded
    assert read_small_pt(str(path), f32, (6, 4)) is None  # another shape
    assert read_small_pt(str(path), f32.newbyteorder(), (4, 6)) is None  # the other byte order
    torch.save(base.t(), tmp_path / "strided.pt")
    torch.save(torch.zeros(0, 3), tmp_path / "empty.pt")
    torch.save(torch.zeros(300_000), tmp_path / "large.pt")  # 1.2 MB: mapped by the general reader
    torch.save({"a": torch.ones(2)}, tmp_path / "dict.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a zip")
    os.symlink(path, tmp_path / "link.pt")
    os.mkfifo(tmp_path / "fifo.pt")
    (tmp_path / "zero.pt").write_bytes(b"")
    os.mkdir(tmp_path / "folder.pt")
    for name, shape in [("strided", (6, 4)), ("empty", (0, 3)), ("large", (300_000,)), ("dict", (2,)),
                        ("junk", (2,)), ("link", (4, 6)), ("fifo", (4, 6)), ("missing", (4, 6)), ("zero", (4, 6)),
                        ("folder", (4, 6))]:  # fmt: skip
        assert read_small_pt(str(tmp_path / f"{name}.pt"), f32, shape) is None, name


def test_small_files_are_read_in_one_call_without_following_links_or_blocking(tmp_path, monkeypatch):
    """``_zipdir.read_small`` (C) and its Python path read a small regular file whole, in one call, and give
    None for a symbolic link (even to a good file), a FIFO with no writer (at once, not blocking), a folder, an
    empty file, a missing one and one of MAP_FROM bytes or more: the caller's checked path then says why."""
    import os

    from nbprec.formats import _files, _ptzip

    torch.save(torch.arange(6, dtype=torch.float32), tmp_path / "good.pt")
    os.symlink(tmp_path / "good.pt", tmp_path / "link.pt")
    os.mkfifo(tmp_path / "fifo.pt")
    os.mkdir(tmp_path / "folder.pt")
    (tmp_path / "zero.pt").write_bytes(b"")
    with open(tmp_path / "big.pt", "wb") as f:
        f.truncate(_ptzip.MAP_FROM)
    good = (tmp_path / "good.pt").read_bytes()
    c_reader = _ptzip._read_small_c
    readers = {"python": _ptzip._small_archive}  # (its Python path: the C reader taken away below)
    if c_reader is not None:
        readers["c"] = lambda path: c_reader(path, _ptzip.MAP_FROM)
    monkeypatch.setattr(_ptzip, "_read_small_c", None)
    for reader in readers.values():
        head, entries = reader(str(tmp_path / "good.pt"))
        assert head == good and any(name.endswith(b"data.pkl") for name in entries)
        for name in ("link", "fifo", "folder", "zero", "big", "missing"):
            assert reader(str(tmp_path / f"{name}.pt")) is None, name
    if c_reader is not None:  # the same files read in one call (threads reading a batch ahead): the same answers
        names = ("good", "link", "fifo", "folder", "zero", "big", "missing", "good")
        paths = [str(tmp_path / f"{name}.pt") for name in names]
        many = _files._read_small_many_c(paths, _ptzip.MAP_FROM)
        assert [m is not None for m in many] == [True, False, False, False, False, False, False, True]
        assert many[0] == many[-1] == c_reader(str(tmp_path / "good.pt"), _ptzip.MAP_FROM)
        whole = _files._read_small_many_c(paths, _ptzip.MAP_FROM, False)  # (the files' bytes: nbprec's .npy)
        assert whole == [good, None, None, None, None, None, None, good]


def test_the_c_small_file_reader_lets_other_threads_run_while_it_reads(tmp_path):
    """``_zipdir.read_small`` reads without the GIL: in a notebook, where ``nbprec.compare`` measures on
    threads, one thread's read runs beside another's Python. This thread keeps ticking while another reads a
    file of 192 MiB."""
    from nbprec.formats import _ptzip

    if _ptzip._read_small_c is None:
        pytest.skip("the C directory reader is not built")
    path = tmp_path / "large.bin"
    with open(path, "wb") as f:  # written, not sparse: the read copies every page
        block = np.random.default_rng(0).bytes(1 << 20)
        for _ in range(192):
            f.write(block)
    path.read_bytes()  # in the page cache

    def read() -> None:
        with pytest.raises(ValueError, match="end-of-central-directory"):  # read whole, then not an archive
            _ptzip._read_small_c(str(path), 1 << 30)

    inside, seconds = ticks_inside(read)
    assert inside, f"no tick of this thread during the {1e3 * seconds:.0f} ms read"


def test_reading_ahead_a_name_no_file_can_have_reads_nothing_ahead(tmp_path):
    """A batch holding a name with a NUL byte (a hostile index) reads nothing ahead; each pair's own read then
    refuses that one name, and takes the others as usual."""
    from nbprec.formats import _files, _ptzip

    torch.save(torch.arange(6, dtype=torch.float32), tmp_path / "good.pt")
    good = str(tmp_path / "good.pt")
    try:
        _files.read_ahead([good, str(tmp_path / "bad\0.pt")])
        assert not getattr(_files._ahead, "files", None)
        assert _ptzip.small_tensor(good, "float32", (6,)) is not None
    finally:
        _files.forget_ahead()


def test_the_c_and_python_tensor_locators_agree(tmp_path):
    """``_zipdir.tensor_start`` (C) finds the one tensor of a small archive exactly where ``_tensor_start`` (its
    Python twin) finds it, and refuses what it refuses: plain tensors of every layout asked for with their own,
    another dtype and another shape, big-endian and compressed archives, several tensors, and hundreds of damaged
    archives."""

    from nbprec.formats import _ptzip

    if _ptzip._tensor_start_c is None or _ptzip._read_small_c is None:
        pytest.skip("nbprec.formats._zipdir is not built")
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    tensors = {
        "float32": base, "bfloat16": base.to(torch.bfloat16), "float16": base.to(torch.float16),
        "int64": base.to(torch.int64), "bool": base > 5, "offset view": base[2:], "scalar": torch.tensor(2.5),
        "strided": base.t(), "empty": torch.zeros(0, 3), "ones": torch.ones(1, 1, 5),
    }  # fmt: skip
    for name, t in tensors.items():
        torch.save(t, tmp_path / f"{name}.pt")
    big_endian = tmp_path / "big_endian.pt"
    members = _members(tmp_path / "float32.pt")
    with zipfile.ZipFile(big_endian, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, b"big\n" if member.endswith("byteorder") else data)
    asked = [(name, str(t.dtype).removeprefix("torch."), tuple(t.shape)) for name, t in tensors.items()]
    asked = [(tmp_path / f"{name}.pt", dtype, shape) for name, dtype, shape in asked]
    asked.append((big_endian, "float32", (4, 6)))
    asked += [(path, "float16", (4, 6)) for path in (tmp_path / "float32.pt", tmp_path / "float16.pt")]
    asked += [(tmp_path / "float32.pt", "float32", (6, 4)), (tmp_path / "float32.pt", "float32", [4, 6])]
    asked += [(path, "float32", (128, 130)) for path in _damaged_archives(tmp_path)]
    found = refused = 0
    for path, dtype, shape in asked:
        try:
            small = _ptzip._read_small_c(str(path), _ptzip.MAP_FROM)
        except ValueError:  # (not an archive the directory reader understands)
            continue
        if small is None:
            continue
        head, entries = small
        python = _ptzip._tensor_start(head, entries, dtype, tuple(shape) if isinstance(shape, tuple) else shape)
        if isinstance(shape, tuple):
            c = _ptzip._tensor_start_c(head, entries, dtype, _ptzip.ITEMSIZES.get(dtype, 0), shape, _ptzip._description)
            assert c == python, (path.name, dtype, shape)
        assert _ptzip.small_tensor(str(path), dtype, shape) == (None if python is None else (head, *python))
        found, refused = found + (python is not None), refused + (python is None)
    assert found > 10 and refused > 50, (found, refused)  # both answers were exercised
