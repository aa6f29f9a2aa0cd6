"""Reading torch.save files without torch and without unpickling: bit-exact, and refusing anything unusual."""

from __future__ import annotations

import pickle
import zipfile

import numpy as np
import pytest

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
