"""Generate and check Ascend NPU dump and overflow-detection configurations.

A wrong dump configuration silently dumps nothing, fills the disk, or is refused when the run starts. This
package writes a correct one for a goal, and checks one a user pastes (parsed, never run):

- :func:`dump_config` / :func:`overflow_config`: a data dump of chosen steps and ops, or overflow detection,
  as a TF 2 (``npu_device``), TF 1 (``sess.run``), Estimator (``DumpConfig``) snippet, msprobe's PyTorch
  ``config.json``, or a JSON dict of options;
- :func:`validate`: a list of :class:`Finding` (severity, message, fix) for a snippet, a JSON text or file:
  CANN's and msprobe's rules, the dump folder (exists, absolute, writable by the training user) and the disk
  the dump will take;
- :func:`add_config_parser`: the ``nbprec config dump|overflow|check`` subcommands.

Only the standard library is needed (``nbprec.open`` is used to measure a sample dump). See
``docs/npu-config.md`` for the parameters of each style, every check and its limits.

Examples
--------
>>> from nbprec.config import dump_config, validate
>>> text = dump_config("/data/dump", "0|5|10", style="tf1", mode="all")
>>> [f.check for f in validate(text, check_paths=False) if f.is_error]
[]
"""

from __future__ import annotations

from nbprec.config.checks import DUMP_MODES, OVERFLOW_MODES, PRODUCTS
from nbprec.config.cli import add_config_parser
from nbprec.config.findings import ConfigError, Finding, has_errors
from nbprec.config.generate import STYLES, dump_config, overflow_config
from nbprec.config.validation import measure_sample, validate

__all__ = [
    "DUMP_MODES",
    "OVERFLOW_MODES",
    "PRODUCTS",
    "STYLES",
    "ConfigError",
    "Finding",
    "add_config_parser",
    "dump_config",
    "has_errors",
    "measure_sample",
    "overflow_config",
    "validate",
]
