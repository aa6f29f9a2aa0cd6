"""The collector helpers: paused_gc restores the collector's state, and what a large block keeps skips the
young collections' scan without escaping full collections; rarer_collections raises the young threshold for a
block and gives the program's back; spare keeps what the command's process would free on its way out, and only
there."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest
from fresh_python import RUN_COMMAND_AS, run_python

from nbprec._gc import PROMOTE_FROM, frozen_heap, paused_gc, rarer_collections
from nbprec.errors import DumpFormatError


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    thresholds = gc.get_threshold()
    gc.enable()
    gc.collect()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    (gc.enable if was else gc.disable)()


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_paused_gc_restores_the_state_it_found(collector_on):
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    with paused_gc():
        assert not gc.isenabled()
    assert not gc.isenabled()


def _oldest_holds(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects(generation=2))


def test_what_a_large_block_keeps_moves_to_the_oldest_generation(collector_on):
    with paused_gc():
        kept = [[i] for i in range(3 * PROMOTE_FROM)]
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle made in the block
        gone = weakref.ref(a)
        del a, b
    assert _oldest_holds(kept[0]) and _oldest_holds(kept[-1])  # no young collection scans them
    assert gone() is not None  # young collections no longer see the cycle ...
    gc.collect(1)
    assert gone() is not None
    gc.collect()  # ... a full one does
    assert gone() is None


def test_a_small_block_or_a_program_that_froze_objects_is_left_alone(collector_on):
    with paused_gc():
        few = [[] for _ in range(PROMOTE_FROM // 10)]
    assert not _oldest_holds(few[0])
    gc.freeze()
    with paused_gc():
        many = [[] for _ in range(2 * PROMOTE_FROM)]
    assert gc.get_freeze_count() > 0  # the program's frozen objects stay frozen
    assert not _oldest_holds(many[0])


def test_frozen_heap_keeps_older_objects_out_of_scans_for_the_block(collector_on):
    old = [[] for _ in range(1000)]
    with frozen_heap():
        assert gc.get_freeze_count() >= len(old)
    assert gc.get_freeze_count() == 0


def test_rarer_collections_raises_the_young_threshold_and_restores_it(collector_on):
    gc.set_threshold(700, 10, 10)
    with rarer_collections(5000):
        assert gc.get_threshold() == (5000, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)
    gc.set_threshold(80_000, 5, 5)  # a program's higher threshold is left as it is
    with rarer_collections(5000):
        assert gc.get_threshold() == (80_000, 5, 5)
    assert gc.get_threshold() == (80_000, 5, 5)
    gc.set_threshold(0, 10, 10)  # 0: the program turned automatic collection off, and it stays off
    with rarer_collections(5000):
        assert gc.get_threshold() == (0, 10, 10)
    assert gc.get_threshold() == (0, 10, 10)


def test_rarer_collections_keeps_thresholds_the_program_set_in_the_block(collector_on):
    gc.set_threshold(700, 10, 10)
    with rarer_collections(5000):
        gc.set_threshold(1234, 3, 4)
    assert gc.get_threshold() == (1234, 3, 4)


def test_cycles_made_in_the_block_are_still_collected(collector_on):
    """Rarer, not never: once the block allocated more containers than the threshold, the young collection runs
    and frees a garbage cycle made in the block."""
    gc.set_threshold(700, 10, 10)
    gc.collect()  # the young count starts at 0
    with rarer_collections(2000):
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        few = [[] for _ in range(1000)]  # fewer than the threshold: no collection yet
        assert gone() is not None
        many = [[] for _ in range(3000)]  # more: a young collection ran
        assert gone() is None
    assert len(few) + len(many) == 4000


def _msprobe_dump(tmp_path: Path) -> Path:
    return Path(__file__).parent / "fixtures" / "msprobe" / "bf16_tensor_mix"


def _cann_dump(tmp_path: Path) -> Path:
    from nbprec.formats.cann_write import CannTensor, dump_folder, write_dump_file

    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 4, 4, 4).astype(np.float16)
    outputs = [CannTensor(x, "NC1HWC0", "NCHW")]
    write_dump_file(dump_folder(tmp_path / "cann"), "conv", "Conv2D", inputs=[x], outputs=outputs)
    return tmp_path / "cann"


def _tf_dump(tmp_path: Path) -> Path:
    folder = tmp_path / "tf"
    folder.mkdir()
    np.save(folder / "scope_conv.0.1675157077176648.npy", np.ones((2, 3), dtype=np.float32))
    return folder


@pytest.mark.parametrize("make", [_msprobe_dump, _cann_dump, _tf_dump], ids=["msprobe", "cann", "tf_npy"])
def test_every_reader_indexes_with_the_collector_paused(collector_on, make, monkeypatch, tmp_path):
    """``nbprec.open`` runs the reader with the collector off (an index is many objects in no cycle: 0.79 of the
    time on a 100,000-tensor CANN tree) and gives it back as it found it, on success and on error."""
    import nbprec
    from nbprec import formats

    path = make(tmp_path)
    reader = formats.reader_class(formats.guess_format(path))
    seen = []
    real_open = reader.open

    def spying_open(self, *args, **kwargs):
        seen.append(gc.isenabled())
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(reader, "open", spying_open)
    dump = nbprec.open(path)
    assert seen == [False] and gc.isenabled() and len(dump)
    gc.disable()
    nbprec.open(path)
    assert seen == [False, False] and not gc.isenabled()
    gc.enable()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "dump.json").write_text("{not json")
    with pytest.raises(DumpFormatError):
        nbprec.open(bad, format="msprobe")
    assert gc.isenabled()


def test_spare_keeps_objects_only_in_a_process_that_ends_without_freeing():
    """Before spare_until_exit, spare changes nothing (the object goes with its last reference); after it, what
    spare was given stays (the process frees nothing on its way out)."""
    out = run_python(
        "import weakref\n"
        "from nbprec import _gc\n"
        "class Thing: pass\n"
        "a = Thing(); ra = weakref.ref(a); _gc.spare(a); del a\n"
        "_gc.spare_until_exit()\n"
        "b = Thing(); rb = weakref.ref(b); _gc.spare(b); del b\n"
        "print(ra() is None, rb() is not None)\n"
    )
    assert out == "True True"


#: Run in a fresh interpreter: ``nbprec compare`` as ``entry`` runs it (its own process, nbprec.cli.run; or the
#: daemon's served process), nbprec._gc.spare wrapped to write to ``record`` whether it kept what it was given.
SPARING = (
    r"""
import json, sys
from nbprec import _gc
entry, record, target, bench, out = sys.argv[1:6]
real = _gc.spare

def recorded(*objects):
    real(*objects)
    with open(record, "w") as fh:
        json.dump({"kept": _gc._SPARED is not None, "types": [type(o).__name__ for o in objects]}, fh)

_gc.spare = recorded  # (before the engine imports it)
argv = ["compare", target, bench, "-o", out, "--no-progress"]
"""
    + RUN_COMMAND_AS
)


@pytest.mark.parametrize("entry", ["run", "served"])
def test_the_compare_command_keeps_the_opened_dumps_to_its_end(tmp_path, entry):
    """Both places a command runs (its own process and the daemon's served one) end with os._exit: there the
    comparison's opened dumps are not freed on the way (spared), and the command's files are all written."""
    fixtures = Path(__file__).parent / "fixtures" / "msprobe"
    record = tmp_path / "record.json"
    env = {**os.environ, "NBPREC_DAEMON": "off"}
    cmd = [sys.executable, "-c", SPARING, entry, str(record), str(fixtures / "bf16_tensor_mix"),
           str(fixtures / "fp32_tensor_mix"), str(tmp_path / "out")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    seen = json.loads(record.read_text())
    assert seen["kept"] is True and seen["types"].count("Dump") == 2, seen
    assert (tmp_path / "out" / "compare_msprobe.csv").read_text(encoding="utf-8").count("\n") == 1 + 279


def test_a_library_comparison_frees_its_dumps(tmp_path):
    """In a process that frees (any but the command's), the dumps a comparison opened go when it returns."""
    fixtures = Path(__file__).parent / "fixtures" / "msprobe"
    out = run_python(
        "import gc, nbprec\n"
        "from nbprec.dump import Dump\n"
        f"comp = nbprec.compare({str(fixtures / 'bf16_tensor_mix')!r}, {str(fixtures / 'fp32_tensor_mix')!r})\n"
        "gc.collect()\n"
        "print(len(comp.columns), sum(isinstance(o, Dump) for o in gc.get_objects()))\n"
    )
    assert out == "279 0"
