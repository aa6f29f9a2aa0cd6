"""``nbprec compare`` backs its heap with transparent huge pages (``nbprec/_hugeheap.c``, ``nbprec.cli.huge_heap``):
the heap's grown part is marked in the process's own memory map, processes forked afterwards inherit the mark,
``NBPREC_HUGE_PAGES=off`` leaves the process alone, and the command's files are the same either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fresh_python import RUN_COMMAND_AS

FIXTURES = Path(__file__).parent / "fixtures" / "msprobe"
NBPREC = Path(sys.executable).with_name("nbprec")

#: Run in a fresh interpreter: huge_heap(), then the heap's mappings marked for huge pages ("hg" among the VmFlags of
#: /proc/self/smaps), in this process and in a child forked after it.
PROBE = r"""
import json, os, sys
from nbprec.cli import huge_heap

def marked():
    out, current = [], None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:
                current = fields[0]
            elif fields[0] == "VmFlags:" and "hg" in fields[1:]:
                lo, hi = (int(x, 16) for x in current.split("-"))
                out.append(hi - lo)
    return out

done = huge_heap()
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, json.dumps(marked()).encode())
    os._exit(0)
os.waitpid(pid, 0)
print(json.dumps({"done": done, "here": marked(), "child": json.loads(os.read(read, 65536))}))
"""


def _probe(env_value: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NBPREC_HUGE_PAGES"}
    if env_value is not None:
        env["NBPREC_HUGE_PAGES"] = env_value
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages: Linux only")
def test_the_grown_heap_is_marked_for_huge_pages_and_a_forked_child_inherits_it():
    from nbprec.cli import HUGE_HEAP_BYTES

    seen = _probe(None)
    if not seen["done"]:
        pytest.skip("this kernel or C library refused the huge-page marking (madvise MADV_HUGEPAGE)")
    assert seen["here"] and max(seen["here"]) >= HUGE_HEAP_BYTES // 2, seen
    assert seen["child"] == seen["here"], seen


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages: Linux only")
def test_a_process_forked_from_the_warmed_up_daemon_still_grows_and_marks_its_heap():
    """The daemon serves a ``compare`` from a process forked after its imports and warm-up, whose heap holds free
    chunks of a megabyte and more: the block that grows the heap must be larger than all of them."""
    code = PROBE.replace(
        "done = huge_heap()", "from nbprec.cli.daemon_process import _warm_up\n_warm_up()\ndone = huge_heap()"
    )
    code = code.replace(
        "from nbprec.cli import huge_heap", "import nbprec.compare.engine\nfrom nbprec.cli import huge_heap"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    if not _probe(None)["done"]:
        pytest.skip("this kernel or C library refused the huge-page marking (madvise MADV_HUGEPAGE)")
    assert seen["done"] and seen["here"] and seen["child"] == seen["here"], seen


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages: Linux only")
@pytest.mark.parametrize("off", ["off", "0", "no", "FALSE"])
def test_turned_off_it_marks_nothing(off):
    seen = _probe(off)
    assert seen == {"done": False, "here": [], "child": []}


def test_a_size_that_is_not_one_is_refused():
    from nbprec import _hugeheap

    for bad in (0, -1):
        with pytest.raises(ValueError, match="not a size to reserve"):
            _hugeheap.reserve(bad)
    with pytest.raises(TypeError):
        _hugeheap.reserve("64M")


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_the_command_writes_the_same_files_with_and_without_huge_pages(tmp_path):
    """The allocator's settings change where buffers live, never a value: every file the same, byte for byte,
    and what the command prints."""
    target, bench = FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix"
    outputs = {}
    for value in ("on", "off"):
        env = {**os.environ, "NBPREC_HUGE_PAGES": value, "NBPREC_DAEMON": "off"}
        out = tmp_path / value
        cmd = [str(NBPREC), "compare", str(target), str(bench), "-o", str(out), "--no-progress"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode in (0, 1), proc.stderr
        outputs[value] = (_files(out), proc.stdout)
    assert "comparison.json" in outputs["on"][0] and outputs["on"][0] == outputs["off"][0]
    assert outputs["on"][1] == outputs["off"][1].replace(str(tmp_path / "off"), str(tmp_path / "on"))


#: Run in a fresh interpreter: a compare command, the way ``entry`` runs it (its own process, nbprec.cli.run; or the
#: daemon's served process, daemon_process._run_command), huge_heap wrapped to write what it did to ``record``.
CALL_SITE = (
    r"""
import json, sys
import nbprec.cli
entry, record, target, bench, out = sys.argv[1:6]
real = nbprec.cli.huge_heap

def recorded():
    done = real()
    with open(record, "w") as fh:
        json.dump({"done": done, "forks_before": FORKS[0]}, fh)
    return done

FORKS = [0]
sys.addaudithook(lambda event, args: FORKS.__setitem__(0, FORKS[0] + 1) if event == "os.fork" else None)
nbprec.cli.huge_heap = recorded
argv = ["compare", target, bench, "-o", out, "--no-progress"]
"""
    + RUN_COMMAND_AS
)


@pytest.mark.parametrize("entry", ["run", "served"])
def test_the_compare_command_takes_the_huge_heap_before_it_forks(tmp_path, entry):
    """Both places a ``compare`` command runs call huge_heap: the command's own process before its early worker is
    forked (which inherits the marked heap), and the daemon's served process; other commands do not."""
    target, bench = FIXTURES / "bf16_tensor_mix", FIXTURES / "fp32_tensor_mix"
    seen = _compare_recording_the_heap(tmp_path, entry, target, bench)
    assert seen["forks_before"] == 0, seen  # before any worker
    if sys.platform.startswith("linux") and _probe(None)["done"]:
        assert seen["done"] is True, seen


@pytest.mark.parametrize("entry", ["run", "served"])
@pytest.mark.parametrize("task", ["statistics_mix", "md5_L1"])
def test_dumps_without_payloads_are_compared_without_the_huge_heap(tmp_path, entry, task):
    """msprobe statistics and md5 dumps hold no payload to read: neither place marks the heap (its huge pages only
    made the command's forks dearer), and the comparison is the same."""
    seen = _compare_recording_the_heap(tmp_path, entry, FIXTURES / f"bf16_{task}", FIXTURES / f"fp32_{task}")
    assert seen is None


def test_without_payloads_needs_msprobe_dumps_on_both_sides(tmp_path):
    from nbprec.compare.early_msprobe import without_payloads

    stats, tensors = FIXTURES / "bf16_statistics_mix", FIXTURES / "fp32_tensor_mix"
    assert without_payloads(str(stats), str(FIXTURES / "fp32_statistics_mix"))
    assert not without_payloads(str(stats), str(tensors))  # payloads on one side
    assert not without_payloads(str(tensors), str(stats))
    assert not without_payloads(str(stats), str(tmp_path))  # no dump.json found: not known to be payload-free
    assert not without_payloads(str(stats), str(tmp_path / "missing"))


def _compare_recording_the_heap(tmp_path: Path, entry: str, target: Path, bench: Path) -> dict | None:
    """Run ``nbprec compare target bench`` as ``entry`` runs it; what huge_heap did (None: not called)."""
    record = tmp_path / "record.json"
    env = {k: v for k, v in os.environ.items() if k != "NBPREC_HUGE_PAGES"}
    env["NBPREC_DAEMON"] = "off"
    cmd = [sys.executable, "-c", CALL_SITE, entry, str(record), str(target), str(bench), str(tmp_path / "out")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    assert (tmp_path / "out" / "tensors.csv").is_file()
    return json.loads(record.read_text()) if record.exists() else None


def test_a_switch_is_on_unless_set_to_an_off_value(monkeypatch):
    from nbprec._switches import switched_off

    monkeypatch.delenv("NBPREC_SOME_SWITCH", raising=False)
    assert not switched_off("NBPREC_SOME_SWITCH")
    for value in ("1", "on", "yes", "", "maybe"):
        monkeypatch.setenv("NBPREC_SOME_SWITCH", value)
        assert not switched_off("NBPREC_SOME_SWITCH"), value
    for value in ("0", "off", " Off ", "NO", "false"):
        monkeypatch.setenv("NBPREC_SOME_SWITCH", value)
        assert switched_off("NBPREC_SOME_SWITCH"), value
