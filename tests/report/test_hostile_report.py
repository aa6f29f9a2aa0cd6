"""``nbprec report`` written where it is likely to be written: a home folder holding a clone named ``nbprec``.

One real report run (a subprocess, so that the kernel's own output is captured too) of msprobe dumps renamed
by the test (tests/hostile_names.py): a name holding a byte that is not UTF-8 and formula-like names. The
kernel must import the installed nbprec, not the folder beside the report; nothing may print the kernel's
"running over TCP without encryption" warning; the page must show the names with visible escapes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser_support import code_notebook
from hostile_names import hostile_pair

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytestmark = pytest.mark.slow

TCP_WARNING = "without encryption"


@pytest.fixture(scope="module")
def home_report(tmp_path_factory):
    """(process, HTML path): ``nbprec report T B -o ~/report.html`` run in a home folder holding a clone
    ``nbprec/`` (a folder without ``__init__.py``: a namespace package for any kernel started there)."""
    home = tmp_path_factory.mktemp("home")
    (home / "nbprec" / "docs").mkdir(parents=True)
    (home / "nbprec" / "README.md").write_text("a clone of nbprec\n")
    target, bench = hostile_pair(tmp_path_factory.mktemp("runs"))
    out = home / "report.html"
    script = Path(sys.executable).with_name("nbprec")  # the installed command, as a user runs it
    if not script.is_file():
        pytest.skip(f"no nbprec command next to {sys.executable}")
    argv = [script, "report", os.fsencode(target), os.fsencode(bench), "-o", str(out)]
    proc = subprocess.run(argv, cwd=home, capture_output=True, check=False, timeout=900)
    return proc, out


def test_the_report_kernel_does_not_import_the_folder_beside_the_report(home_report):
    proc, out = home_report
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert out.is_file() and out.with_suffix(".ipynb").is_file()
    assert b"has no attribute" not in proc.stderr


def test_no_kernel_transport_warning_is_printed(home_report):
    proc, _ = home_report
    assert TCP_WARNING not in (proc.stdout + proc.stderr).decode(errors="replace")


def test_names_that_are_not_utf8_show_as_visible_escapes(home_report):
    _, out = home_report
    page = out.read_bytes().decode("utf-8")  # valid UTF-8
    body = re.sub(r"<script\b[^>]*>.*?</script>", "", page, flags=re.DOTALL | re.IGNORECASE)
    assert "Torch.re\\xfflu.1.backward" in body  # the worst ops and the verdict name it, escaped
    assert "\udcff" not in page
    assert "bf16 \\xff run" in body  # the target's folder, in the report's title line


def test_a_failing_cell_is_reported_in_plain_text(tmp_path):
    from nbprec.report import ReportError, execute_notebook

    with pytest.raises(ReportError) as err:
        execute_notebook(code_notebook(["x = 1", "import nbprec\nnbprec.no_such_thing"]))
    message = str(err.value)
    assert "\x1b" not in message  # IPython colours its tracebacks; nbprec's messages carry none of it
    assert "AttributeError" in message and "no_such_thing" in message and "cell 2" in message


@pytest.mark.parametrize("fails", [False, True])
def test_the_kernels_own_log_is_shown_only_when_the_run_fails(capfd, fails: bool):
    """What the kernel process logs on its standard error (a shutdown traceback of its own, say) is not printed by a
    report run that succeeds, and is by one that fails, after nbprec's message."""
    from nbprec.report import ReportError, execute_notebook

    code = "get_ipython().kernel.log.error('the kernel logs this')" + ("\nraise ValueError('stop')" if fails else "")
    nb = code_notebook([code])
    if fails:
        with pytest.raises(ReportError, match="ValueError: stop"):
            execute_notebook(nb)
    else:
        execute_notebook(nb)
    err = capfd.readouterr().err
    assert ("the kernel logs this" in err) is fails
    assert ("the report kernel's log:" in err) is fails


def test_a_long_kernel_log_is_shown_by_its_end(capfd):
    """A failed run whose kernel wrote much on its standard error (ipykernel copies a cell's stderr there too)
    shows the log's last KERNEL_LOG_SHOWN bytes, and says so."""
    from nbprec.report import ReportError, execute_notebook
    from nbprec.report.notebook import KERNEL_LOG_SHOWN

    code = "import os\nfor k in range(3000): os.write(2, b'line %05d of the kernel log\\n' % k)\nraise ValueError('x')"
    with pytest.raises(ReportError, match="ValueError"):
        execute_notebook(code_notebook([code]))
    err = capfd.readouterr().err
    assert f"(its last {KERNEL_LOG_SHOWN:,} bytes of" in err
    assert "line 02999 of the kernel log" in err and "line 00000 of" not in err
