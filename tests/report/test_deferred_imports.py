"""The grammar jsonschema's IRI format checker compiles at import is deferred in the processes nbprec starts
(nbprec._deferred_imports): nbformat, Voila and the report commands start without it, and IRI checks still
work, the real package imported at their first use."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SLOW = "rfc3987_syntax.syntax_helpers"  # the module that compiles the grammar


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
        env={**os.environ, **env},
    )  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def _installed():
    pytest.importorskip("jsonschema")
    if _python("import importlib.util, sys; sys.exit(importlib.util.find_spec('rfc3987_syntax') is None)").returncode:
        pytest.skip("rfc3987_syntax is not installed (jsonschema's format-nongpl extra): nothing to defer")


def test_deferred_until_an_iri_is_checked():
    done = _python(
        f"""
        import sys
        from nbprec._deferred_imports import defer_iri_grammar
        assert defer_iri_grammar()
        assert not defer_iri_grammar()  # once is enough
        import nbformat, jsonschema
        assert {SLOW!r} not in sys.modules
        checker = jsonschema.FormatChecker()
        assert checker.conforms("https://example.org/a?b#c", "iri")
        assert not checker.conforms("https://exa mple.org/", "iri")
        assert not checker.conforms("no scheme", "iri")
        assert checker.conforms("../a/b", "iri-reference")
        assert {SLOW!r} in sys.modules  # imported at the first check
        import rfc3987_syntax
        assert rfc3987_syntax.is_valid_syntax("iri", "urn:isbn:0451450523")
        """
    )
    assert done.returncode == 0, done.stderr


def test_other_names_come_from_the_real_module():
    done = _python(
        """
        from nbprec._deferred_imports import defer_iri_grammar
        defer_iri_grammar()
        import rfc3987_syntax
        terms = rfc3987_syntax.RFC3987_SYNTAX_TERMS
        assert "iri" in terms and "iri_reference" in terms
        """
    )
    assert done.returncode == 0, done.stderr


def test_not_installed_twice_nor_over_the_real_module():
    done = _python(
        """
        import rfc3987_syntax
        from nbprec._deferred_imports import defer_iri_grammar
        assert not defer_iri_grammar()
        import sys
        assert sys.modules["rfc3987_syntax"] is rfc3987_syntax
        """
    )
    assert done.returncode == 0, done.stderr


def _imported(stderr: str) -> set[str]:
    """The modules a process imported, from its ``-X importtime`` lines."""
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def test_voila_launcher_starts_without_the_grammar():
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "nbprec._voila", "--help"], capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Voila" in done.stdout  # Voila's own help
    imported = _imported(done.stderr)
    assert "voila.app" in imported and "jsonschema" in imported
    assert SLOW not in imported


def test_report_command_runs_without_the_grammar(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("nbclient")
    from nbprec.demo import tiny_runs

    runs = {r.name: r.path for r in tiny_runs(tmp_path / "runs")}
    out = tmp_path / "report.html"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "nbprec", "report", str(runs["tiny_bf16_faulty"]),
         str(runs["tiny_fp32"]), "-o", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.is_file()
    imported = _imported(done.stderr)
    assert "nbformat.v4" in imported and "jsonschema" in imported
    assert SLOW not in imported


def test_library_calls_leave_the_users_process_alone(tmp_path):
    """nbprec.report called from a user's own process (a notebook's kernel): nothing stands in for anything."""
    done = _python(
        f"""
        import sys, types
        from nbprec.report import write_dashboard_notebook
        write_dashboard_notebook({str(tmp_path / "d.ipynb")!r}, ".", ".")
        assert "rfc3987_syntax" in sys.modules  # imported by nbformat's jsonschema, for real
        assert {SLOW!r} in sys.modules
        """
    )
    assert done.returncode == 0, done.stderr
