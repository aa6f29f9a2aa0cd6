"""The ``nbprec`` command ends its process at once when done (``nbprec.cli.run``): what it printed is all there,
its files are whole, and its exit status is the command's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "msprobe"


def _nbprec(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nbprec", *args], capture_output=True, text=True, **kwargs)


def test_everything_printed_and_written_is_there(tmp_path):
    out = tmp_path / "out"
    done = _nbprec("compare", str(FIXTURES / "bf16_tensor_mix"), str(FIXTURES / "fp32_tensor_mix"), "-o", str(out))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1].startswith(f"wrote {out}/") and any(line.startswith("first failing op") for line in lines)
    tensors = (out / "tensors.csv").read_text(encoding="utf-8").splitlines()
    assert len(tensors) == 1 + 279  # the header and every tensor: the file was closed before the process ended
    assert (out / "compare_msprobe.csv").read_text(encoding="utf-8").count("\n") == 1 + 279


def test_an_error_is_said_and_the_status_kept(tmp_path):
    done = _nbprec("compare", str(tmp_path / "missing"), str(FIXTURES / "fp32_tensor_mix"))
    assert done.returncode == 1 and "nbprec: error:" in done.stderr and "no such file or folder" in done.stderr


def test_a_reader_that_stops_early_is_no_error(tmp_path):
    """``nbprec compare ... | head -1``: the rest of the output has nowhere to go; no traceback, status 0, whether
    the output is written as it is printed or held until the end."""
    pair = [str(FIXTURES / "bf16_tensor_mix"), str(FIXTURES / "fp32_tensor_mix")]
    for unbuffered in ("1", ""):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        if unbuffered:
            env["PYTHONUNBUFFERED"] = unbuffered
        writer = subprocess.Popen(
            [sys.executable, "-m", "nbprec", "compare", *pair], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        assert writer.stdout is not None
        writer.stdout.close()  # the reader is gone before the command prints anything
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0 and b"Traceback" not in err, err.decode()


def test_the_command_sets_up_its_process_before_numpy(monkeypatch):
    """run() keeps numpy's BLAS to one thread (its spinning pool would take the cores the comparison's workers
    measure on) unless the user said otherwise, and ends with main's status; importing nbprec's command line
    loads no numpy, so the setting is in time."""
    import nbprec.cli as cli
    from nbprec import _gc

    code = "import sys, nbprec.cli; print('numpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
    ended = []
    monkeypatch.setattr(cli, "main", lambda: 3)
    monkeypatch.setattr(cli.os, "_exit", ended.append)
    monkeypatch.setattr(_gc, "_SPARED", None)  # (run() says the process frees nothing: this one goes on)
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    cli.run()
    assert ended == [3] and os.environ["OPENBLAS_NUM_THREADS"] == "1"
    assert _gc._SPARED == []  # (spare keeps what it is given from now on)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    cli.run()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"
