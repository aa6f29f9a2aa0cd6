"""The ``nbprec`` command line: a thin shell over the library.

Each subcommand parses its arguments, calls one library function and prints what it returns. The parser and
:func:`main` are :mod:`nbprec.cli.parser`; the commands live in :mod:`nbprec.cli.dumps` (info, ni),
:mod:`nbprec.cli.comparing` (compare, isolate), :mod:`nbprec.cli.overflow` (overflow),
:mod:`nbprec.cli.reports` (demo, report, serve), :mod:`nbprec.cli.daemon` (daemon) and :mod:`nbprec.config.cli`
(config). This module holds :func:`run`, the console script, which imports the parser only when the command
does not go to the command daemon (a client imports nothing else: it starts in a few hundredths of a second).
"""

from __future__ import annotations

import os
import sys

from nbprec._switches import switched_off
from nbprec.cli import daemon
from nbprec.cli._choices import SERVED_COMMANDS

#: What this package offers from :mod:`nbprec.cli.parser`, imported when first asked for.
_FROM_PARSER = frozenset({"main", "build_parser", "_OWN_COMMANDS", "_VersionAction"})


def __getattr__(name: str) -> object:
    if name in _FROM_PARSER:
        from nbprec.cli import parser

        return getattr(parser, name)
    raise AttributeError(f"module 'nbprec.cli' has no attribute {name!r}")


#: Environment of the ``nbprec`` command's process, unless the user set these: numpy's BLAS (OpenBLAS) starts a
#: thread per core when numpy is imported, and they spin waiting for work for a while; the command never hands
#: BLAS work big enough to share, and on a small machine those threads take the cores its own workers measure on
#: (about 50 ms of a 2-core machine's CPU in a 0.3 s comparison).
PROCESS_ENVIRONMENT = {"OPENBLAS_NUM_THREADS": "1"}

#: Bytes of heap ``compare`` marks for transparent huge pages before it reads any payload (:func:`huge_heap`): more
#: than the comparison's buffers hold at once on the benchmarks' pairs (its heap grew by 14-25 MB on a 413 MB pair).
HUGE_HEAP_BYTES = 64 << 20


def huge_heap() -> bool:
    """Back this process's heap with transparent huge pages for the comparison's payload buffers
    (``nbprec/_hugeheap.c``), unless ``NBPREC_HUGE_PAGES=off``; whether it was done. The command's own process
    calls it for ``compare`` before it forks any worker (they inherit it), and so does the daemon's process for a
    served ``compare``; the library never does (a user's process keeps its allocator's settings). On the msprobe
    pairs of ``bench/compare.py`` the command faulted about 40% fewer pages and took 5-8% less time
    (``bench/commands.py --baseline-env NBPREC_HUGE_PAGES=off --compare T B --compare-only``)."""
    if switched_off("NBPREC_HUGE_PAGES"):
        return False
    try:
        from nbprec import _hugeheap
    except ImportError:  # built without its C extensions
        return False
    return _hugeheap.reserve(HUGE_HEAP_BYTES)


def compare_heap(paths: tuple[str, str] | None) -> bool:
    """:func:`huge_heap` for ``nbprec compare`` of ``paths`` (:func:`nbprec.compare.early.compare_paths`; None:
    not known), unless both are msprobe dumps without payloads (statistics and md5 tasks: nothing to read). There
    huge pages only make the forks of the command's helpers dearer (the first write to a huge page after a fork
    copies all of it): the command on the 4,035-tensor statistics and md5 pairs of ``bench/README.md`` took 0.176
    and 0.175 s with them against 0.158 s without (paired 1.11), while on pairs with payloads they save 1-4%
    (``bench/commands.py --baseline-env NBPREC_HUGE_PAGES=off``, 2026-12-05). Whether the heap was marked."""
    from nbprec.compare.early_msprobe import without_payloads

    if paths is not None and without_payloads(*paths):
        return False
    return huge_heap()


def run() -> None:
    """The ``nbprec`` command (console script and ``python -m nbprec``): :func:`main` in a process set up for it
    (:data:`PROCESS_ENVIRONMENT`, before numpy is imported), then the process ends at once with its status. Every
    file is closed and every helper process waited for by then; what is left is the interpreter's own teardown
    (freeing every object and module, a few tens of milliseconds), which the command does not need.

    ``compare`` starts measuring pairs in a forked worker before numpy is imported (:mod:`nbprec.compare.early`).
    The commands of :data:`~nbprec.cli._choices.SERVED_COMMANDS` run in a process forked from this environment's
    command daemon when one is up (:mod:`nbprec.cli.daemon`); when none is, the command runs here and then starts
    one."""
    for name, value in PROCESS_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    args = sys.argv[1:]
    served = next((a for a in args if not a.startswith("-")), None) in SERVED_COMMANDS and daemon.enabled()
    status = daemon.run_on_daemon(args) if served else None
    if status is not None:  # it ran beside the daemon, with this process's streams
        os._exit(status)
    early = None
    if args[:1] == ["compare"]:  # measure pairs on another core while numpy and the library load
        from nbprec.compare import early  # (here: the daemon's client and the other commands do not load it)

        paths = early.compare_paths(args)
        compare_heap(paths)  # (before the worker is forked: it inherits the marked heap)
        if paths is not None:
            early.start(*paths, graph=early.graph_option(args))
    from nbprec._gc import spare_until_exit
    from nbprec.cli import main  # (here, not at the top: a client of the daemon never builds the parser)

    spare_until_exit()  # (this process ends with os._exit below)
    status = main()
    if early is not None:
        early.discard()  # (a command that stopped before comparing: its results are not wanted)
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105  (contextlib is not imported by the daemon's client)
            stream.flush()
        except (OSError, ValueError):  # a closed or broken output: nothing left to say there
            pass
    if served:  # no daemon took it: start one for the next command
        daemon.start_daemon()
    os._exit(status)


if __name__ == "__main__":
    run()
