"""``nbprec config dump|overflow|check``: the command-line shell over :mod:`nbprec.config`.

``nbprec.cli.build_parser`` calls :func:`add_config_parser` with its subparsers; each action parses its
arguments, calls one library function and prints what it returns.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from ``"123456"``, ``"500M"``, ``"2GiB"`` or ``"1.5T"`` (binary units)."""
    match = _SIZE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (bytes, or a number with K, M, G, T or P)")
    number, unit = match.groups()
    factor = 1024 ** ("kmgtp".index(unit.lower()) + 1) if unit else 1
    return int(float(number) * factor)


def _write(text: str, output: str | None) -> int:
    if output:
        Path(output).write_text(text, encoding="utf-8")
        print(f"wrote {output}")
    else:
        print(text, end="")
    return 0


def _cmd_dump(args: argparse.Namespace) -> int:
    from nbprec.config.generate import dump_config

    text = dump_config(
        args.path,
        args.steps,
        style=args.style,
        mode=args.mode,
        ops=args.ops,
        data=args.data,
        level=args.level,
        ranks=args.ranks,
    )
    return _write(text, args.output)


def _cmd_overflow(args: argparse.Namespace) -> int:
    from nbprec.config.generate import overflow_config

    text = overflow_config(
        args.path,
        args.mode,
        style=args.style,
        product=args.product,
        steps=args.steps,
        overflow_nums=args.overflow_nums,
        level=args.level,
        ranks=args.ranks,
    )
    return _write(text, args.output)


def _cmd_check(args: argparse.Namespace) -> int:
    from nbprec.config.findings import has_errors
    from nbprec.config.validation import validate

    source: Any = sys.stdin.read() if args.source == "-" else args.source
    findings = validate(
        source,
        product=args.product,
        user=args.user,
        bytes_per_step=args.bytes_per_step,
        sample_dump=args.sample_dump,
        steps=args.steps,
        devices=args.devices,
        check_paths=not args.no_paths,
    )
    if args.json:
        print(json.dumps([f.to_dict() for f in findings], indent=1))
    else:
        for finding in findings:
            print(finding.to_text())
        counts = {s: sum(f.severity == s for f in findings) for s in ("error", "warning", "info")}
        if counts["error"] or counts["warning"]:
            print(f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)")
        else:
            print(f"no problems found ({counts['info']} note(s))")
    return 1 if has_errors(findings) else 0


def add_config_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``config`` (with ``dump``, ``overflow`` and ``check``) to the ``nbprec`` command's subparsers.

    Parameters
    ----------
    subparsers
        What ``parser.add_subparsers(...)`` returned in :func:`nbprec.cli.build_parser`.

    Returns
    -------
    argparse.ArgumentParser
        The ``config`` parser. Each action sets ``func`` (returning the exit status: ``check`` returns 1 when
        an error is found).
    """
    from nbprec.config.checks import DUMP_MODES, OVERFLOW_MODES, PRODUCTS
    from nbprec.config.generate import STYLES

    config = subparsers.add_parser(
        "config", help="write or check an NPU dump / overflow-detection configuration (TF 1/2, Estimator, msprobe)"
    )
    actions = config.add_subparsers(dest="config_action", required=True, metavar="ACTION")
    styles = ", ".join(STYLES)

    dump = actions.add_parser("dump", help="write the configuration that dumps chosen steps (and ops)")
    dump.add_argument("--path", required=True, metavar="DIR", help="dump folder on the training machine (absolute)")
    dump.add_argument(
        "--steps",
        required=True,
        metavar="STEPS",
        help='steps to dump, e.g. "0|5|10" or "0|3-5|10" (quote it for the shell)',
    )
    dump.add_argument("--style", choices=STYLES, default="tf2", help=f"how the training script sets options ({styles})")
    dump.add_argument("--mode", choices=DUMP_MODES, default="output", help="which tensors of each op (default output)")
    dump.add_argument("--ops", nargs="+", metavar="OP", help="dump these ops only (default: every op)")
    dump.add_argument("--data", choices=["tensor", "stats"], default="tensor", help="whole tensors or statistics")
    dump.add_argument("--level", default="L1", help="msprobe: dump level L0, L1, L2 or mix (default L1)")
    dump.add_argument("--ranks", nargs="+", type=int, metavar="RANK", help="msprobe: ranks to dump (default: all)")
    dump.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of printing")
    dump.set_defaults(func=_cmd_dump)

    ovf = actions.add_parser("overflow", help="write the configuration that runs overflow detection")
    ovf.add_argument("--path", required=True, metavar="DIR", help="dump folder on the training machine (absolute)")
    ovf.add_argument("--mode", choices=OVERFLOW_MODES, default="all", help="what to watch (default all)")
    ovf.add_argument("--style", choices=STYLES, default="tf2", help=f"how the training script sets options ({styles})")
    ovf.add_argument("--product", choices=PRODUCTS, help="the NPU product (atlas-a2 accepts only --mode all)")
    ovf.add_argument("--steps", metavar="STEPS", help='msprobe: steps to check, e.g. "0|3-5" (default: all)')
    ovf.add_argument(
        "--overflow-nums", type=int, default=1, help="msprobe: overflows to collect before stopping (-1: never stop)"
    )
    ovf.add_argument("--level", default="L1", help="msprobe: level (default L1)")
    ovf.add_argument("--ranks", nargs="+", type=int, metavar="RANK", help="msprobe: ranks to check (default: all)")
    ovf.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of printing")
    ovf.set_defaults(func=_cmd_overflow)

    chk = actions.add_parser(
        "check", help="check a configuration (file, pasted snippet, or - for stdin); exit status 1 on an error"
    )
    chk.add_argument("source", metavar="FILE_OR_SNIPPET", help="a .py/.json file, the snippet itself, or - (stdin)")
    chk.add_argument("--product", choices=PRODUCTS, help="the NPU product (atlas-a2 accepts only overflow mode all)")
    chk.add_argument("--user", metavar="USER", help="who runs the training (name or uid): check the folder for them")
    size = chk.add_mutually_exclusive_group()
    size.add_argument(
        "--bytes-per-step", type=parse_size, metavar="N", help="bytes one step dumps on one device (e.g. 3G)"
    )
    size.add_argument("--sample-dump", metavar="DIR", help="a dump of one step: its size is measured")
    chk.add_argument("--steps", type=int, metavar="N", help="how many steps the run makes (for the disk estimate)")
    chk.add_argument("--devices", type=int, default=1, metavar="N", help="devices writing to the dump disk (default 1)")
    chk.add_argument("--no-paths", action="store_true", help="skip the folder and disk checks (config for elsewhere)")
    chk.add_argument("--json", action="store_true", help="print the findings as JSON")
    chk.set_defaults(func=_cmd_check)
    return config
