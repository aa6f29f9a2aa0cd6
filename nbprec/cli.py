"""The ``nbprec`` command line: a thin shell over the library.

Each subcommand parses its arguments, calls one library function and prints what it returns.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from nbprec.errors import NbprecError


def _human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _cmd_info(args: argparse.Namespace) -> int:
    from nbprec.formats import open_dump

    for path in args.paths:
        dump = open_dump(path, format=args.format)
        summary = dump.summary()
        if args.json:
            print(json.dumps(summary, indent=1, default=str))
            continue
        print(f"{summary['path']}")
        print(f"  format      {summary['format']}" + (f"  ({_meta_text(summary['meta'])})" if summary["meta"] else ""))
        print(f"  steps       {summary['steps']}")
        print(f"  ranks       {summary['ranks']}")
        print(f"  ops         {summary['ops']}")
        print(f"  tensors     {summary['tensors']} ({summary['with_payload']} with payload)")
        print(f"  by dtype    {_counts_text(summary['by_dtype'])}")
        print(f"  by role     {_counts_text(summary['by_role'])}")
        print(f"  direction   {_counts_text(summary['by_direction'])}")
        print(f"  bytes       {_human_bytes(summary['bytes'])} ({summary['bytes']})")
        print(f"  problems    {summary['problems']}")
        for row in dump.problems.head(args.max_problems).itertuples(index=False):
            record = f" [{row.record}]" if row.record else ""
            print(f"    - {row.file}{record}: {row.problem}")
        if len(dump.problems) > args.max_problems:
            print(f"    ... and {len(dump.problems) - args.max_problems} more (use --max-problems)")
    return 0


def _meta_text(meta: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in meta.items() if isinstance(v, (str, int, float)))


def _counts_text(counts: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in counts.items()) or "-"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``nbprec`` command."""
    from nbprec import __version__
    from nbprec.formats import READERS

    parser = argparse.ArgumentParser(prog="nbprec", description="Find where a neural network loses precision.")
    parser.add_argument("--version", action="version", version=f"nbprec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    info = sub.add_parser("info", help="describe one or more dumps: format, steps, ranks, counts, problems")
    info.add_argument("paths", nargs="+", metavar="PATH", help="dump folder or file")
    info.add_argument("--format", choices=list(READERS), help="reader to use (guessed when omitted)")
    info.add_argument("--json", action="store_true", help="print the summary as JSON")
    info.add_argument("--max-problems", type=int, default=20, help="problems to list (default 20)")
    info.set_defaults(func=_cmd_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``nbprec`` command; returns the exit status (1 on a nbprec error, with the message on stderr)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except NbprecError as exc:
        print(f"nbprec: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("nbprec: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
