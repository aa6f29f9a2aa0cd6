"""``nbprec diagnose FILE_OR_TEXT... [--json]``: the command-line shell over :mod:`nbprec.diagnose`.

``nbprec.cli.build_parser`` calls :func:`add_diagnose_parser` with its subparsers.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from nbprec.diagnose.engine import diagnose

    result = diagnose(*args.sources)
    if args.json:
        print(result.to_json())
    else:
        sys.stdout.write(result.to_text())
    return 1 if result.has_errors else 0


def add_diagnose_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``diagnose`` to the ``nbprec`` command's subparsers.

    Parameters
    ----------
    subparsers
        What ``parser.add_subparsers(...)`` returned in :func:`nbprec.cli.build_parser`.

    Returns
    -------
    argparse.ArgumentParser
        The ``diagnose`` parser; its ``func`` returns the exit status (1 when a finding is an error).
    """
    parser = subparsers.add_parser(
        "diagnose",
        help="diagnose tuning/conversion failures in logs (host OOM, GE memory limits) and aoe/atc command pairs",
        description=(
            "Diagnose known Ascend tuning and conversion failures with computed remedies: processes killed by "
            "the out-of-memory killer, graph-engine memory limits, and an atc command that misses the "
            "knowledge base an aoe command tuned (give both commands). Other error and warning lines are "
            "summarised. Exit status 1 when a finding is an error."
        ),
    )
    parser.add_argument(
        "sources",
        nargs="+",
        metavar="FILE_OR_TEXT",
        help="a log file or folder (.gz read too), - for standard input, or the text itself (an aoe or atc command)",
    )
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    parser.set_defaults(func=_cmd_diagnose)
    return parser
