"""The names the command line offers as choices, written out here so that building its parser imports no
library module: ``nbprec --help``, ``nbprec --version`` and the commands that need no arrays (``diagnose``,
``config``) start without numpy, the readers or the kernel.

Each tuple is the library's own list spelled again; ``tests/test_cli_startup.py`` holds every one to it, so a
new reader, mode, rule preset or metric that is not added here fails that test rather than going missing from
the command line.
"""

from __future__ import annotations

#: The readers of :data:`nbprec.formats.READERS`, in its order (``--format``).
DUMP_FORMATS = ("nbprec", "msprobe", "ptdbg", "cann", "tf_npy")

#: :data:`nbprec.compare.engine.MODES` (``compare --mode``).
COMPARE_MODES = ("auto", "tensor", "statistics", "checksum")

#: :func:`nbprec.compare.rules.preset_names` (``--rule``).
RULE_PRESETS = ("default", "precision_tool", "cann", "msprobe", "ptdbg")

#: The metrics of :data:`nbprec.graph.model_explorer.METRICS` and its defaults (``model-explorer --metrics``).
EXPLORER_METRICS = ("status", "cosine", "1-cosine", "max_abs_err", "rel_euclidean", "in_cosine")
EXPLORER_DEFAULT_METRICS = ("status", "cosine", "1-cosine", "max_abs_err", "rel_euclidean")

#: The commands the command daemon runs (:mod:`nbprec.cli.daemon`): bounded jobs that read dumps and exit (not
#: ``serve``, ``report`` or ``demo``, which start servers or kernels of their own).
SERVED_COMMANDS = frozenset({"compare", "isolate", "overflow", "info", "ni"})
