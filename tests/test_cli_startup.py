"""The ``nbprec`` command's parser is built without the library: the help, the version and the commands that need
no arrays start without numpy; the choices it offers are the library's own lists."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nbprec.cli import _choices, build_parser, main

#: Packages whose subcommands' parsers the whole command's parser builds (their imports are the help's cost).
OTHER_PACKAGES = ("nbprec.config", "nbprec.diagnose")


def run_fresh(arguments: list[str], stdin: str = "") -> dict:
    """``nbprec.cli.main(arguments)`` in a fresh interpreter: its exit status, its output, whether numpy was
    imported, and which of :data:`OTHER_PACKAGES` were."""
    code = (
        "import contextlib, io, json, sys\n"
        "from nbprec.cli import main\n"
        "out = io.StringIO()\n"
        "try:\n"
        "    with contextlib.redirect_stdout(out):\n"
        f"        status = main({arguments!r})\n"
        "except SystemExit as exc:\n"
        "    status = exc.code\n"
        f"others = sorted(m for m in sys.modules if m in {OTHER_PACKAGES!r})\n"
        "print(json.dumps({'status': status, 'numpy': 'numpy' in sys.modules, 'others': others,"
        " 'text': out.getvalue()}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], input=stdin, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "arguments",
    [["--help"], ["compare", "--help"], ["diagnose", "--help"], ["model-explorer", "--help"], ["config", "--help"]],
)
def test_help_is_printed_without_importing_numpy(arguments):
    result = run_fresh(arguments)
    assert result["status"] == 0 and result["numpy"] is False
    assert result["text"].startswith("usage: nbprec")


def test_the_choices_appear_in_the_help():
    text = run_fresh(["compare", "--help"])["text"]
    assert "{auto,tensor,statistics,checksum}" in text
    assert "{" + ",".join(_choices.RULE_PRESETS) + "}" in text
    explorer = run_fresh(["model-explorer", "--help"])["text"]
    assert ", ".join(_choices.EXPLORER_METRICS) in " ".join(explorer.split())


def test_version_names_the_kernel_in_use(capsys):
    from nbprec import __version__
    from nbprec.compare.metrics import KERNEL

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"nbprec {__version__} (metric kernel: {KERNEL})\n"


def test_version_alone_loads_neither_numpy_nor_the_other_packages_subcommands():
    """``nbprec --version`` names the kernel from the extension itself (not through numpy) and builds no parser of
    another package's subcommands (the configuration checks and the diagnosis imports, about 45 ms)."""
    from nbprec.compare.metrics import KERNEL

    result = run_fresh(["--version"])
    assert result["status"] == 0 and result["numpy"] is False and result["others"] == []
    assert result["text"].endswith(f"(metric kernel: {KERNEL})\n")
    assert run_fresh(["--help"])["others"] == list(OTHER_PACKAGES)  # (what the whole parser costs)


def test_the_choices_are_the_librarys_lists():
    from nbprec.compare.engine import MODES
    from nbprec.compare.rules import preset_names
    from nbprec.formats import READERS
    from nbprec.graph.model_explorer import DEFAULT_METRICS, METRICS

    assert tuple(READERS) == _choices.DUMP_FORMATS
    assert tuple(MODES) == _choices.COMPARE_MODES
    assert tuple(preset_names()) == _choices.RULE_PRESETS
    assert tuple(METRICS) == _choices.EXPLORER_METRICS
    assert tuple(DEFAULT_METRICS) == _choices.EXPLORER_DEFAULT_METRICS


def test_a_choice_outside_the_list_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser("compare").parse_args(["compare", "T", "B", "--mode", "bytes"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'bytes'" in capsys.readouterr().err


def test_a_command_builds_its_own_parser_only_and_help_before_it_lists_every_command():
    """``nbprec compare ...`` builds the compare parser alone (its start-up does not pay for the others, nor
    for :mod:`shutil`, which argparse's own formatter imports); ``nbprec --help compare`` is the help of the
    whole command, and an unknown command still gets the list of every command."""
    code = (
        "import sys\n"
        "from nbprec.cli import build_parser\n"
        "parser = build_parser('compare')\n"
        "args = parser.parse_args(['compare', 'T', 'B', '-o', 'OUT'])\n"
        "print(args.target, args.bench, args.output, 'shutil' in sys.modules)\n"
        "print(sorted(parser._subparsers._group_actions[0].choices))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["T B OUT False", "['compare']"]
    everything = run_fresh(["--help", "compare"])["text"]
    for command in ("info", "compare", "overflow", "report", "serve", "diagnose", "config"):
        assert f"    {command} " in everything, command
    unknown = subprocess.run([sys.executable, "-m", "nbprec", "bogus"], capture_output=True, text=True)
    assert unknown.returncode == 2 and "invalid choice: 'bogus'" in unknown.stderr and "'diagnose'" in unknown.stderr


@pytest.mark.parametrize("columns", [60, 120])
def test_help_is_what_argparses_own_formatter_writes_at_the_terminal_width(columns, monkeypatch):
    """The help formatter finds the width as :func:`shutil.get_terminal_size` does (``COLUMNS`` first), so the
    help is argparse's own, wrapped at the terminal's width."""
    import argparse

    monkeypatch.setenv("COLUMNS", str(columns))
    for command in ("compare", "report"):
        parser = build_parser(command)._subparsers._group_actions[0].choices[command]
        ours = parser.format_help()
        parser.formatter_class = argparse.HelpFormatter
        assert ours == parser.format_help(), command
        assert max(len(line) for line in ours.splitlines()) > columns - 20
