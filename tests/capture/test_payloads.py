"""The payload writer's two ways (compiled C threads, a Python thread): the files numpy.save writes, snapshots,
errors."""

from __future__ import annotations

import gc
import io
from pathlib import Path

import numpy as np
import pytest

from nbprec.capture.payloads import PayloadWriter, load_native_writer, npy_header
from nbprec.errors import CaptureError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

NATIVE = load_native_writer()
WAYS = [
    pytest.param(True, marks=pytest.mark.skipif(NATIVE is None, reason="nbprec.capture._npyio was not compiled")),
    False,
]


def _npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def _arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = [rng.standard_normal(n).astype(np.float32) for n in (1, 7, 300, 70_000, 400_000)]  # 1.6 MB: > the ring
    out += [
        np.zeros((0, 3), np.float16),
        np.array(2.5),  # 0-d
        rng.integers(-9, 9, (5, 6, 7)).astype(np.int64),
        np.array([True, False]),
        rng.standard_normal((3, 4)) + 1j,
        np.arange(12, dtype=np.uint16).reshape(3, 4),  # bfloat16 payloads arrive as their bits
    ]
    return out


@pytest.mark.parametrize("native", WAYS)
def test_files_are_what_numpy_save_writes_through_a_small_ring(tmp_path: Path, native: bool) -> None:
    """Many payloads through a 1 MiB ring (it wraps, and one payload is larger than all of it)."""
    arrays = _arrays() * 20
    writer = PayloadWriter(tmp_path, max_pending=1 << 20, native=native)
    assert (writer._native is not None) == native
    for i, array in enumerate(arrays):
        writer.save(f"{i:04d}.npy", array)
    writer.close()
    for i, array in enumerate(arrays):
        assert (tmp_path / f"{i:04d}.npy").read_bytes() == _npy(array), i
    assert writer.bytes_written == sum(len(_npy(a)) for a in arrays)


@pytest.mark.parametrize("native", WAYS)
def test_a_payload_is_a_snapshot_taken_by_save(tmp_path: Path, native: bool) -> None:
    writer = PayloadWriter(tmp_path, native=native)
    source = np.arange(100_000, dtype=np.float32)
    for i in range(5):
        writer.save(f"{i}.npy", source)
        source += 1  # the caller's array changes as soon as save() returns
    writer.close()
    for i in range(5):
        np.testing.assert_array_equal(np.load(tmp_path / f"{i}.npy"), np.arange(100_000, dtype=np.float32) + i)


@pytest.mark.parametrize("native", WAYS)
def test_a_file_that_cannot_be_written_is_a_capture_error_naming_it(tmp_path: Path, native: bool) -> None:
    folder = tmp_path / "tensors"
    folder.mkdir()
    writer = PayloadWriter(folder, native=native)
    writer.save("a.npy", np.ones(4))
    writer.close()
    writer = PayloadWriter(folder, native=native)
    folder.rename(tmp_path / "moved")  # the folder is gone: the next file cannot be created
    with pytest.raises(CaptureError, match=r"b\.npy: cannot write the dump"):
        writer.save("b.npy", np.ones(4))
        writer.close()  # the error surfaces at the next save or, at the latest, here
    writer.close()  # raised once: closing again is quiet
    assert sorted(p.name for p in (tmp_path / "moved").iterdir()) == ["a.npy"]


@pytest.mark.skipif(NATIVE is None, reason="nbprec.capture._npyio was not compiled")
def test_the_compiled_writer_finishes_its_files_when_dropped_unclosed(tmp_path: Path) -> None:
    writer = NATIVE(bytes(tmp_path), 2, 1 << 20)
    array = np.arange(300_000, dtype=np.int32)
    for i in range(8):
        writer.save(f"{i}.npy".encode(), npy_header(array.dtype, array.shape), array)
    del writer
    gc.collect()
    for i in range(8):
        np.testing.assert_array_equal(np.load(tmp_path / f"{i}.npy"), array)
    with pytest.raises(ValueError, match="closed"):
        closed = NATIVE(bytes(tmp_path))
        closed.close()
        closed.save(b"x.npy", b"", b"")
