"""The ``nbprec`` command's argument parser (:func:`build_parser`) and its entry point (:func:`main`), which
parses the arguments and runs the subcommand. Building the parser imports no library module (the choices are
:mod:`nbprec.cli._choices`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from nbprec.cli._choices import COMPARE_MODES, DUMP_FORMATS, RULE_PRESETS
from nbprec.cli.comparing import _cmd_compare, _cmd_isolate
from nbprec.cli.daemon import _cmd_daemon
from nbprec.cli.dumps import _cmd_info, _cmd_ni
from nbprec.cli.overflow import _cmd_overflow
from nbprec.cli.reports import _cmd_demo, _cmd_report, _cmd_serve
from nbprec.errors import NbprecError

# The subcommands whose parsers this module builds; the others (config, model-explorer, diagnose) come from
# their own packages, imported only when the command line may name them.
#: The commands that write, execute or serve notebooks: they defer an import that costs a second (nbformat,
#: nbclient and Voila import jsonschema, whose IRI checker compiles a grammar: nbprec._deferred_imports).
_NOTEBOOK_COMMANDS = frozenset({"demo", "report", "serve"})
_OWN_COMMANDS = frozenset({"info", "demo", "compare", "isolate", "overflow", "report", "serve", "ni", "daemon"})


class _VersionAction(argparse.Action):
    """``--version``: nbprec's version and the metric kernel in use, which is looked up (the kernel imported, not
    numpy) only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show the version and the metric kernel, and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None) -> None:
        from nbprec import __version__
        from nbprec.compare._sums import KERNEL

        print(f"nbprec {__version__} (metric kernel: {KERNEL})")
        parser.exit()


def _add_rule_options(parser: argparse.ArgumentParser) -> None:
    """``--rule``, ``--threshold`` and ``--metric``: how a comparison judges its pairs."""
    parser.add_argument("--rule", choices=RULE_PRESETS, default="default", help="pass/fail rule (default: dtype-aware)")
    parser.add_argument("--threshold", type=float, metavar="VALUE", help="judge by one bound instead (vcs -c 0.98)")
    parser.add_argument("--metric", default="cosine", help="the metric --threshold bounds (default cosine)")


def _add_info(sub: Any) -> None:
    info = sub.add_parser("info", help="describe one or more dumps: format, steps, ranks, counts, problems")
    info.add_argument("paths", nargs="+", metavar="PATH", help="dump folder or file")
    info.add_argument("--format", choices=DUMP_FORMATS, help="reader to use (guessed when omitted)")
    info.add_argument("--json", action="store_true", help="print the summary as JSON")
    info.add_argument("--max-problems", type=int, default=20, help="problems to list (default 20)")
    info.set_defaults(func=_cmd_info)


def _add_demo(sub: Any) -> None:
    demo = sub.add_parser("demo", help="capture the demo runs (tiny encoder or MiniLM) and describe them")
    demo.add_argument("--out", required=True, metavar="DIR", help="folder to write the run folders into")
    demo.add_argument("--model", choices=["tiny", "minilm"], default="tiny", help="demo model (default tiny)")
    demo.add_argument("--report", action="store_true", help="end by writing the demo report (DIR/report.html)")
    demo.set_defaults(func=_cmd_demo)


def _add_compare(sub: Any) -> None:
    cmp = sub.add_parser("compare", help="compare a target dump with a benchmark dump, name the first failing op")
    cmp.add_argument("target", metavar="TARGET", help="target dump (NPU / low precision)")
    cmp.add_argument("bench", metavar="BENCH", help="benchmark dump (CPU/GPU float32)")
    cmp.add_argument("-o", "--output", metavar="DIR", help="write the tables (nbprec, msaccucmp, msprobe CSV) here")
    _add_rule_options(cmp)
    cmp.add_argument("--mode", choices=COMPARE_MODES, default="auto", help="compare payloads, statistics or checksums")
    cmp.add_argument("--mapping", metavar="FILE", help="CSV/YAML of target,bench name pairs that override matching")
    cmp.add_argument("--graph", metavar="GE_GRAPH", help="target's GE graph (ge_proto_*_Build.txt): fusion records")
    cmp.add_argument("--step", type=int, help="compare this step only")
    cmp.add_argument("--rank", type=int, help="compare this rank only")
    cmp.add_argument("--top", type=int, default=10, help="how many worst ops to list (default 10)")
    cmp.add_argument("--no-progress", action="store_true", help="no progress bar")
    cmp.add_argument(
        "--scheduler", metavar="ADDRESS", help="measure on this Dask cluster (tcp://host:8786; needs nbprec[dask])"
    )
    cmp.set_defaults(func=_cmd_compare)


def _add_isolate(sub: Any) -> None:
    iso = sub.add_parser("isolate", help="re-run ops on the target's own inputs in float64: each op's own error")
    iso.add_argument("target", metavar="TARGET", help="target dump captured by nbprec (tensor mode)")
    iso.add_argument("ops", nargs="+", metavar="OP", help="forward API op(s), e.g. Functional.gelu.1.forward")
    iso.add_argument("--dtype", choices=["float64", "float32"], default="float64", help="precision of the re-run")
    iso.set_defaults(func=_cmd_isolate)


def _add_overflow(sub: Any) -> None:
    ovf = sub.add_parser("overflow", help="find the first overflowing op, judge its impact, predict headroom")
    ovf.add_argument("path", metavar="PATH", help="the dump to scan (target run)")
    ovf.add_argument("--bench", metavar="PATH", help="benchmark dump: say whether the overflow changed the results")
    ovf.add_argument("--headroom", action="store_true", help="also predict overflow/underflow if cast to fp16/bf16/fp8")
    ovf.add_argument("--dtype", help="judge every float tensor against this dtype's maximum (e.g. float16)")
    ovf.add_argument("--rule", choices=RULE_PRESETS, default=None, help="comparison rule for the impact verdict")
    ovf.add_argument("--device-type", default="cuda", help="torch.autocast device type in the snippet (default cuda)")
    ovf.add_argument("--loss-scale", type=float, help="loss scale the gradients were recorded with (default: run meta)")
    ovf.add_argument("--no-payload", action="store_true", help="use the index statistics only (faster)")
    ovf.add_argument("--top", type=int, default=15, help="how many ranked ops to list (default 15)")
    ovf.add_argument("-o", "--output", metavar="DIR", help="save the report (report.json, tensors.csv, ops.csv)")
    ovf.set_defaults(func=_cmd_overflow)


def _add_report(sub: Any) -> None:
    rep = sub.add_parser("report", help="write an offline HTML report (and the executed notebook) of two runs")
    rep.add_argument("target", nargs="?", metavar="TARGET", help="target dump (NPU / low precision)")
    rep.add_argument("bench", nargs="?", metavar="BENCH", help="benchmark dump (CPU/GPU float32)")
    rep.add_argument("-o", "--output", metavar="HTML", help="the HTML file to write (the .ipynb goes next to it)")
    rep.add_argument("--notebook", metavar="IPYNB", help="where to write the executed notebook")
    _add_rule_options(rep)
    rep.add_argument("--title", default="", help="report title")
    rep.add_argument("--depth", type=int, default=4, help="subgraph depth around the culprit (default 4)")
    rep.add_argument("--fetch-assets", action="store_true", help="fetch the widget JavaScript from npm (needs npm)")
    rep.add_argument("--assets", metavar="DIR", help="folder of the fetched JavaScript (default: found/created)")
    rep.add_argument("--force", action="store_true", help="with --fetch-assets: fetch again")
    rep.set_defaults(func=_cmd_report)


def _add_serve(sub: Any) -> None:
    srv = sub.add_parser("serve", help="serve the explore dashboard of two runs as a Voila page on 127.0.0.1")
    srv.add_argument("target", metavar="TARGET", help="target dump")
    srv.add_argument("bench", metavar="BENCH", help="benchmark dump")
    srv.add_argument("--port", type=int, help="TCP port (default: a free one)")
    srv.add_argument(
        "--no-preheat",
        action="store_true",
        help="compute the dashboard when a page is opened, not ahead in a kernel started with the server",
    )
    _add_rule_options(srv)
    srv.set_defaults(func=_cmd_serve)


def _add_ni(sub: Any) -> None:
    ni = sub.add_parser(
        "ni", help="node info: an op's type, module, inputs/outputs with statistics and metrics, neighbours"
    )
    ni.add_argument("name", metavar="NAME", help="op name, e.g. Functional.linear.0.forward")
    ni.add_argument("--target", metavar="PATH", help="target dump")
    ni.add_argument("--graph", metavar="GE_GRAPH", help="GE graph (ge_proto_*_Build.txt or JSON): type, pass, origin")
    ni.add_argument("--bench", metavar="PATH", help="benchmark dump: compare and show metrics")
    ni.add_argument("--step", type=int, help="the op at this step (default: the first step that has it)")
    ni.add_argument("--rank", type=int, help="the op on this rank (default: the first rank that has it)")
    ni.add_argument("--depth", type=int, default=2, help="subgraph depth up and down (default 2)")
    ni.add_argument("--svg", metavar="FILE", help="draw the subgraph to this SVG file (needs Graphviz dot)")
    ni.set_defaults(func=_cmd_ni)


def _add_daemon(sub: Any) -> None:
    dmn = sub.add_parser("daemon", help="the background process that starts compare, info, ... without imports")
    dmn.add_argument("action", choices=["status", "stop"], help="show this environment's daemon, or stop it")
    dmn.set_defaults(func=_cmd_daemon)


#: Each own subcommand's parser, added to the subparsers ``sub`` by its function.
_OWN_PARSERS = {
    "info": _add_info,
    "demo": _add_demo,
    "compare": _add_compare,
    "isolate": _add_isolate,
    "overflow": _add_overflow,
    "report": _add_report,
    "serve": _add_serve,
    "ni": _add_ni,
    "daemon": _add_daemon,
}


def _terminal_columns() -> int:
    """The terminal's width as :func:`shutil.get_terminal_size` gives it (``COLUMNS``, else the terminal of
    standard output, else 80), without importing :mod:`shutil` (and the compression modules it imports)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's help formatter, with the width argparse would take, found without importing :mod:`shutil`
    (argparse makes a formatter for every ``add_argument``; its import cost each command 2 ms of start-up)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, _terminal_columns() - 2 if width is None else width)


class _Parser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose help formatter is :class:`_HelpFormatter` unless told
    otherwise; the subcommands' parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser(command: str | None = None, *, others: bool = True) -> argparse.ArgumentParser:
    """The argument parser of the ``nbprec`` command; given the ``command`` the arguments name (one of this
    module's own), only that command's parser is built (the other packages' subcommands are left out, and their
    imports are not paid); ``others=False`` leaves them out too (``nbprec --version``). Building it imports no
    library module (the choices are :mod:`nbprec.cli._choices`): the help, the version and the commands that need
    no arrays start without numpy."""
    parser = _Parser(prog="nbprec", description="Find where a neural network loses precision.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for name, add in _OWN_PARSERS.items():
        if command not in _OWN_COMMANDS or name == command:
            add(sub)
    if command in _OWN_COMMANDS or not others:
        return parser
    from nbprec.cli.model_explorer import add_model_explorer_parser
    from nbprec.config import add_config_parser
    from nbprec.diagnose import add_diagnose_parser

    add_config_parser(sub)
    add_model_explorer_parser(sub)
    add_diagnose_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``nbprec`` command; returns the exit status (1 on a nbprec error, with the message on stderr)."""
    for stream in (sys.stdout, sys.stderr):  # names holding bytes that were not UTF-8 print escaped, as on stderr
        if getattr(stream, "errors", "") == "strict" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    args_list = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in args_list if not a.startswith("-")), None)
    if command is not None and {"-h", "--help"} & set(args_list[: args_list.index(command)]):
        command = None  # `nbprec --help compare`: the help of every command
    if command in _OWN_COMMANDS:
        parser = build_parser(command)
    elif args_list == ["--version"]:  # answered without the other packages' subcommands
        parser = build_parser(others=False)
    else:
        parser = build_parser()
    args = parser.parse_args(args_list)
    if command in _NOTEBOOK_COMMANDS:  # this process is the command's own (a kernel's %nbprec is left alone)
        from nbprec._deferred_imports import defer_iri_grammar

        defer_iri_grammar()
    try:
        return int(args.func(args) or 0)
    except NbprecError as exc:
        print(f"nbprec: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("nbprec: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the output was piped into a command that stopped reading (| head): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
