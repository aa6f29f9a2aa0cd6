"""nbprec never imports tensorflow by itself, and without it nbprec.tf says how to install it."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_importing_nbprec_and_nbprec_tf_imports_no_tensorflow() -> None:
    done = _run(
        """
        import sys
        import nbprec, nbprec.tf, nbprec.tf.writer, nbprec.tf.naming
        nbprec.tf.parse_steps("0|3-5|10")
        assert "tensorflow" not in sys.modules and "keras" not in sys.modules, sorted(sys.modules)
        print("ok")
        """
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_missing_tensorflow_names_the_extra() -> None:
    done = _run(
        """
        import sys
        sys.modules["tensorflow"] = None  # as if TensorFlow were not installed
        import nbprec.tf
        from nbprec.errors import MissingDependencyError

        calls = {
            "enable": lambda: nbprec.tf.enable("x"),
            "dump": lambda: nbprec.tf.dump("x"),
            "set_dump_path": lambda: nbprec.tf.set_dump_path("x"),
            "DumpCallback": lambda: nbprec.tf.DumpCallback,
            "autodump": lambda: __import__("nbprec.tf.autodump"),
        }
        for name, call in calls.items():
            try:
                call()
            except MissingDependencyError as exc:
                assert 'pip install "nbprec[tf]"' in str(exc), (name, str(exc))
                assert isinstance(exc, ImportError)
                print(name, "ok")
            else:
                raise AssertionError(f"{name} did not raise")
        """
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [
        w for name in ("enable", "dump", "set_dump_path", "DumpCallback", "autodump") for w in (name, "ok")
    ]
