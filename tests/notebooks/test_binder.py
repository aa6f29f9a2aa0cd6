"""Binder: a fresh virtualenv built only from binder/ files runs postBuild and the quickstart notebook.

The build (tests/binder_support.py) mirrors repo2docker on a copy of the repository's files. It takes a few
minutes (it installs torch, TensorFlow, JupyterLab, the widget libraries and nbprec), so the session starts it in
the background as soon as this test is collected (tests/conftest.py); the test waits for it and checks each step.
"""

from __future__ import annotations

import binder_support
import pytest

pytestmark = pytest.mark.slow


def test_binder_environment_runs_the_quickstart():
    build = binder_support.build()
    done, skipped = build.wait()
    if skipped:
        pytest.skip(skipped)
    steps = {step.name: step for step in done}
    for step in steps.values():
        assert step.returncode == 0, step.failure()
    assert list(steps) == ["venv", "install", "postBuild", "quickstart", "pip list"]
    assert "demo report:" in steps["postBuild"].stdout
    assert (build.repo / "demo-output" / "report.html").is_file()
    assert "quickstart ok" in steps["quickstart"].stdout
    assert "jupyterlab" in steps["pip list"].stdout.lower()
    print("binder: " + ", ".join(f"{name} {step.seconds:.0f} s" for name, step in steps.items()))
