"""Index rows as the measuring task reads them (:class:`nbprec.compare.tasks.Rows`): each row a mapping of every
column of the dump's index, whose columns are boxed into Python values only when a row is asked for one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import nbprec
from nbprec.compare.tasks import Rows

FIXTURES = Path(__file__).parents[1] / "fixtures" / "msprobe"


@pytest.fixture(scope="module")
def index():
    return nbprec.open(FIXTURES / "bf16_tensor_mix").columns


def test_a_row_is_a_mapping_of_every_column(index):
    rows = Rows(index)
    row = rows.row(7)
    names = list(index)
    assert list(row) == names and len(row) == len(names) > 20
    record = rows.record(7)
    assert list(record) == names
    for name in names:
        expected, got = index[name][7], record[name]
        same = got == expected or (isinstance(got, float) and np.isnan(got) and np.isnan(expected))
        assert same and type(got) is type(index[name][7:8].tolist()[0]), name  # Python values, not numpy scalars
    assert row.get("no such column", "default") == "default" and row.get("dtype") == index["dtype"][7]
    with pytest.raises(KeyError):
        row["no such column"]


def test_only_the_columns_asked_for_are_boxed(index):
    rows = Rows(index)
    row = rows.row(3)
    assert not rows._lists  # nothing boxed before a value is asked for
    assert row["file"] == index["file"][3] and row.get("shape") == index["shape"][3]
    assert set(rows._lists) == {"file", "shape"}
    assert rows.row(5)["file"] == index["file"][5] and set(rows._lists) == {"file", "shape"}  # boxed once
