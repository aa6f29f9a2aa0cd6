"""``nbprec demo``, ``nbprec report`` and ``nbprec serve``: the demo runs, offline reports, the live dashboard."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from nbprec.cli._text import _count, _human_bytes, _rule_arg
from nbprec.cli.dumps import _cmd_info
from nbprec.errors import NbprecError


def _cmd_demo(args: argparse.Namespace) -> int:
    from nbprec.demo import next_steps, run_demo

    runs = run_demo(args.out, args.model, echo=print)
    for run in runs:
        print(f"wrote {run.path}  ({run.description})" + (f"\n  {run.note}" if run.note else ""))
    print()
    status = _cmd_info(argparse.Namespace(paths=[r.path for r in runs], format=None, json=False, max_problems=5))
    culprit = _demo_comparisons(runs)
    from nbprec.demo.remedy import demo_remedy  # the last step: the remedy, verified

    print("\n" + "\n".join(demo_remedy(args.out, args.model)))
    report = None
    if getattr(args, "report", False):
        from nbprec.report.demo import write_demo_report

        report = write_demo_report(args.out, runs, echo=print).html
        print(f"demo report: {report.resolve()}")
    steps = next_steps(runs, culprit, report)
    if steps:
        print()
        print("\n".join(steps))
    return status


def _demo_comparisons(runs: list) -> str | None:
    """The main job on the demo runs: compare every target with its benchmark and isolate the culprit.

    Returns the first culprit found (the op the "next, try" lines drill into), or ``None``.
    """
    from nbprec.compare import compare
    from nbprec.demo import demo_pairs

    pairs = demo_pairs(runs)
    found = None
    if not pairs:
        return found
    print("\ncomparing each target with its float32 benchmark (default dtype-aware rule):")
    for target, bench in pairs:
        comp = compare(target.path, bench.path)
        s = comp.summary()
        first = s["first_failing_op"] or "none: differences are precision noise"
        failing = _count(s["failing_ops"], "failing op").rjust(len("failing ops") + 5)
        print(f"  {target.name:<20} {failing} of {s['ops']}; first failing op: {first}")
        culprit = comp.first_failing_op()
        found = found or (None if culprit is None else str(culprit["op"]))
        if culprit is not None and target.path.joinpath("calls.jsonl").is_file():
            try:
                verdict = comp.isolate(str(culprit["op"])).verdict
            except NbprecError as exc:
                verdict = f"not re-run ({exc})"
            print(f"  {'':<20} {culprit['op']} re-run in float64 on its own inputs: {verdict}")
    return found


def _cmd_report(args: argparse.Namespace) -> int:
    """``nbprec report``: write the offline HTML report (and its executed notebook), or fetch its JavaScript."""
    from nbprec.report import fetch_assets, find_assets, missing_assets_message, write_report

    if args.fetch_assets:
        assets = fetch_assets(args.assets, force=args.force)
        versions = ", ".join(f"{k} {v}" for k, v in assets.versions.items())
        print(f"report assets in {assets.folder}" + (f" ({versions})" if versions else ""))
        if not (args.target and args.bench):
            return 0
    if not (args.target and args.bench and args.output):
        raise SystemExit("nbprec report: give TARGET BENCH -o REPORT.html (or --fetch-assets)")
    if find_assets(args.assets) is None:
        print(f"note: {missing_assets_message()}", file=sys.stderr)
    report = write_report(
        args.target, args.bench, args.output, rule=_rule_arg(args), title=args.title, depth=args.depth,
        notebook=args.notebook, assets=args.assets,
    )  # fmt: skip
    size = _human_bytes(report.export.bytes)
    live = "live widgets embedded" if report.offline_widgets else "static tables and plots only"
    print(f"wrote {report.notebook}")
    print(f"wrote {report.html}  ({size}, {live}; opens offline from disk)")
    for problem in report.export.missing:
        print(f"  note: {problem}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    """``nbprec serve``: the explore dashboard as a Voila page on 127.0.0.1, until interrupted."""
    from nbprec.report import serve

    def stop_on_signal(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through `finally`: Voila is stopped, not left running

    # installed before Voila starts, so that a signal at any moment stops it (serve() stops it on errors)
    previous = {sig: signal.signal(sig, stop_on_signal) for sig in _STOP_SIGNALS}
    try:
        start = time.monotonic()
        server = serve(args.target, args.bench, port=args.port, rule=_rule_arg(args), preheat=not args.no_preheat)
        try:
            print(f"nbprec dashboard: {server.url}  (Voila; press Ctrl-C to stop)", flush=True)
            if server.preheat:
                print("preparing the dashboard ahead in a kernel, so that the page opens at once ...", flush=True)
                if server.wait_ready():
                    took = time.monotonic() - start
                    if server.problem is None:
                        print(f"dashboard ready ({took:.1f} s): open {server.url}", flush=True)
                    else:
                        print(f"nbprec: the dashboard could not be built ({took:.1f} s): {server.problem}; the page "
                              "shows the traceback (mend the dumps or options, then start nbprec serve again)",
                              file=sys.stderr, flush=True)  # fmt: skip
            server.process.wait()
        finally:
            server.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


# kill, systemd and a closed terminal end `nbprec serve` with these; Ctrl-C raises KeyboardInterrupt

_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
