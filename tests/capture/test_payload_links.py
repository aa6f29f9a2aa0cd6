"""What a capture reuses for a tensor recorded again: the statistics it measured, and the payload file it saved
(a hard link: same values, one inode); never once the values changed, seen by torch or not."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import nbprec
from nbprec.capture import payloads, recorder
from nbprec.capture.payloads import PayloadWriter, load_native_writer

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

WAYS = [
    pytest.param(
        True, marks=pytest.mark.skipif(load_native_writer() is None, reason="nbprec.capture._npyio was not compiled")
    ),
    False,
]


def _inode(dump: nbprec.Dump, name: str) -> int:
    return os.stat(dump.path / str(dump.row(name)["file"])).st_ino


def _capture_reuses(path: Path, **options: Any) -> dict[str, np.ndarray]:
    """y recorded three times unchanged, then changed in place and recorded again; the values it had."""
    from nbprec.capture import capture

    x = torch.linspace(-2, 2, 50_000)
    with capture(None, path, level="apis", mode="tensor", **options):
        y = torch.relu(x)  # output of relu
        y * 2  # input of mul.0
        y + 1  # input of add.0
        before = y.numpy().copy()
        y.add_(1.0)  # input of add_ (its snapshot: the values before), then its output
        y * 3  # input of mul.1: the changed values
    return {"before": before, "after": y.numpy().copy()}


def test_a_tensor_recorded_again_unchanged_is_a_link_and_a_changed_one_is_not(tmp_path: Path) -> None:
    values = _capture_reuses(tmp_path / "run")
    dump = nbprec.open(tmp_path / "run")
    assert len(dump.problems) == 0
    first = "Torch.relu.0.forward.output.0"
    same = [first, "Tensor.mul.0.forward.input.0", "Tensor.add.0.forward.input.0"]
    for name in same:
        np.testing.assert_array_equal(dump.tensor(name), values["before"])
        assert _inode(dump, name) == _inode(dump, first), name
    assert len({str(dump.row(name)["file"]) for name in same}) == 3  # a file name per record, as before
    assert os.stat(dump.path / str(dump.row(first)["file"])).st_nlink == 3
    snapshot = "Tensor.add_.0.forward.input.0"  # the values before the in-place op: a copy of its own
    np.testing.assert_array_equal(dump.tensor(snapshot), values["before"])
    assert _inode(dump, snapshot) != _inode(dump, first)
    changed = ["Tensor.add_.0.forward.output.0", "Tensor.mul.1.forward.input.0"]
    for name in changed:
        np.testing.assert_array_equal(dump.tensor(name), values["after"])
        assert _inode(dump, name) != _inode(dump, first), name
    assert _inode(dump, changed[1]) == _inode(dump, changed[0])  # unchanged since add_ wrote it


@pytest.mark.parametrize("why", ["the file system has none", "links=False"])
def test_without_hard_links_every_record_gets_its_own_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    if why == "links=False":
        values = _capture_reuses(tmp_path / "run", links=False)
    else:  # FAT, some network shares
        monkeypatch.setattr(payloads, "links_work", lambda folder: False)
        values = _capture_reuses(tmp_path / "run")
    dump = nbprec.open(tmp_path / "run")
    names = ["Torch.relu.0.forward.output.0", "Tensor.mul.0.forward.input.0", "Tensor.add.0.forward.input.0"]
    assert len({_inode(dump, name) for name in names}) == 3
    for name in names:
        np.testing.assert_array_equal(dump.tensor(name), values["before"])
    assert not list((tmp_path / "run" / "tensors").glob(".nbprec-link-probe*"))


def test_links_to_one_file_stop_at_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nbprec.capture import capture

    monkeypatch.setattr(recorder, "MAX_LINKS", 2)
    x = torch.arange(6, dtype=torch.float32)
    with capture(None, tmp_path / "run", level="apis", mode="tensor"):
        y = torch.neg(x)
        for _ in range(5):
            y * 2  # y recorded again five times
    dump = nbprec.open(tmp_path / "run")
    names = ["Torch.neg.0.forward.output.0"] + [f"Tensor.mul.{i}.forward.input.0" for i in range(5)]
    inodes = [_inode(dump, name) for name in names]
    assert inodes == [inodes[0]] * 3 + [inodes[3]] * 3 and inodes[0] != inodes[3]
    for name in names:
        np.testing.assert_array_equal(dump.tensor(name), -np.arange(6, dtype=np.float32))


@pytest.mark.parametrize("native", WAYS)
def test_the_writer_never_writes_through_a_name_left_by_an_earlier_capture(tmp_path: Path, native: bool) -> None:
    """An earlier capture's ``b.npy`` is a link of its ``a.npy``; a new capture into the folder rewrites both."""
    old, new_a, new_b = (np.full(1000, v, np.float32) for v in (1.0, 2.0, 3.0))
    writer = PayloadWriter(tmp_path, native=native)
    assert writer.can_link()
    writer.save("a.npy", old)
    writer.link("b.npy", "a.npy")
    writer.link("c.npy", "b.npy")
    writer.close()
    assert writer.links == 2 and os.stat(tmp_path / "a.npy").st_nlink == 3
    writer = PayloadWriter(tmp_path, native=native)  # overwrite=True: the same names again
    writer.save("a.npy", new_a)
    writer.save("b.npy", new_b)
    writer.link("c.npy", "a.npy")  # c.npy exists (a link of the old a.npy): replaced
    writer.close()
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), new_a)
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy"), new_b)
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), new_a)
    assert os.stat(tmp_path / "c.npy").st_ino == os.stat(tmp_path / "a.npy").st_ino
    assert os.stat(tmp_path / "b.npy").st_nlink == 1


@pytest.mark.parametrize("native", WAYS)
def test_a_link_that_cannot_be_made_is_a_capture_error_naming_it(tmp_path: Path, native: bool) -> None:
    from nbprec.errors import CaptureError

    writer = PayloadWriter(tmp_path, native=native)
    with pytest.raises(CaptureError, match=r"b\.npy: cannot write the dump"):
        writer.link("b.npy", "missing.npy")  # no such source
        writer.close()
    writer.close()
    assert not (tmp_path / "b.npy").exists()


@pytest.mark.parametrize("mode", ["tensor", "statistics"])
def test_running_statistics_batch_norm_changes_unseen_are_measured_again(tmp_path: Path, mode: str) -> None:
    """F.batch_norm updates its running mean without bumping the tensor's version: nothing stale is reused."""
    from nbprec.capture import capture

    batch = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    with capture(None, tmp_path / "run", level="apis", mode=mode):
        mean = torch.zeros(4)  # recorded: zeros
        torch.nn.functional.batch_norm(batch, mean, torch.ones(4), training=True)
        torch.nn.functional.batch_norm(batch, mean, torch.ones(4), training=True)
        mean * 1  # after both updates
    dump = nbprec.open(tmp_path / "run")
    column_means = batch.mean(0).numpy()
    expected = {
        "Torch.zeros.0.forward.output.0": np.zeros(4, np.float32),
        "Functional.batch_norm.0.forward.input.1": 0.1 * column_means,  # inputs are recorded after the call
        "Functional.batch_norm.1.forward.input.1": 0.19 * column_means,
        "Tensor.mul.0.forward.input.0": 0.19 * column_means,
    }
    for name, values in expected.items():
        row = dump.row(name)
        assert row["min"] == pytest.approx(values.min(), rel=1e-6), name
        assert row["max"] == pytest.approx(values.max(), rel=1e-6), name
        if mode == "tensor":
            np.testing.assert_allclose(dump.tensor(name), values, rtol=1e-6, err_msg=name)


def _write(run: Path, how: str, values: list[np.ndarray], overwrite: bool) -> list[str]:
    from nbprec.formats.native import NativeDumpWriter

    writer = NativeDumpWriter(run, mode="tensor", overwrite=overwrite)
    names = [f"Torch.relu.{i}.forward.output.0" for i in range(len(values))]
    for name, array in zip(names, values, strict=True):
        record = {"name": name, "op": name.rsplit(".", 2)[0], "role": "output", "slot": "0"}
        if how == "blocks":
            writer.write_tensor_blocks(record, [array[:50], array[50:]], dtype=np.float32, shape=array.shape)
        else:
            writer.write_tensor(record, array)
    writer.close()
    return names


@pytest.mark.parametrize("how", ["write_tensor", "blocks"])
def test_the_format_writer_replaces_a_name_that_is_a_link_over_an_earlier_dump(tmp_path: Path, how: str) -> None:
    """``overwrite=True`` over a dump whose files are hard links of one another: each name gets its own values."""
    run = tmp_path / "run"
    names = _write(run, how, [np.zeros(100, np.float32)] * 3, overwrite=False)
    first = nbprec.open(run)
    files = [run / str(first.row(name)["file"]) for name in names]
    for file in files[1:]:  # as a capture saves a tensor recorded three times
        file.unlink()
        os.link(files[0], file)
    new = [np.full(100, i + 1, np.float32) for i in range(3)]
    assert _write(run, how, new, overwrite=True) == names
    replaced = nbprec.open(run)
    assert [run / str(replaced.row(name)["file"]) for name in names] == files  # the same names were written
    for name, values in zip(names, new, strict=True):
        np.testing.assert_array_equal(replaced.tensor(name), values, err_msg=name)
