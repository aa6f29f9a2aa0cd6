"""``validate``: read a pasted configuration, check its rules, its dump folder and the disk it will use."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbprec.config.checks import DumpPlan, check_ascend, check_product, describe
from nbprec.config.checks_msprobe import check_msprobe
from nbprec.config.findings import ConfigError, Finding, human_bytes
from nbprec.config.parse import AscendConfig, Computed, MsprobeConfig, read_json, read_mapping, read_python
from nbprec.config.paths import check_dump_path, check_free_space

if TYPE_CHECKING:
    from nbprec.dump import Dump

ConfigSource = str | os.PathLike[str] | dict[str, Any]


def _looks_like_path(text: str) -> bool:
    stripped = text.strip()
    return bool(stripped) and "\n" not in stripped and not any(c in stripped for c in "=({[\"'")


def read_config(source: ConfigSource) -> list[AscendConfig | MsprobeConfig] | Finding:
    """Every configuration in ``source`` (a snippet, a JSON text, a file path or a dict), or the error finding."""
    if isinstance(source, dict):
        return read_mapping(source)
    if isinstance(source, os.PathLike) or _looks_like_path(str(source)):
        path = Path(source).expanduser()
        if not path.is_file():
            return Finding(
                "error",
                f"{path}: no such file (give a config file, or paste the snippet itself)",
                "",
                "not-found",
            )
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            return Finding("error", f"{path}: cannot be read as text ({exc})", "", "not-found")
        is_json = path.suffix.lower() == ".json" or text.lstrip().startswith("{")
    else:
        text = str(source)
        is_json = text.lstrip().startswith("{")
    configs = read_json(text) if is_json else read_python(text)
    if isinstance(configs, list) and not configs:
        return Finding(
            "error",
            "no dump settings found: expected npu.global_options().dump_config.* (TF 2), "
            'custom_op.parameter_map["..."] (TF 1 sess.run) or DumpConfig(...) (Estimator)',
            "",
            "not-found",
        )
    return configs


def measure_sample(sample: str | os.PathLike[str] | Dump) -> dict[str, float]:
    """Bytes per step and device of a sample dump, by tensor role (``input``, ``output``, ...).

    The bytes are element counts times item sizes, as :meth:`nbprec.Dump.nbytes` counts them, divided by the
    number of steps and ranks the sample holds.
    """
    from nbprec.dtypes import NUMPY_DTYPES
    from nbprec.formats import open_dump

    dump = sample if hasattr(sample, "index") and hasattr(sample, "nbytes") else open_dump(sample)
    index = dump.index
    if not len(index):
        return {}
    sizes = index["dtype"].map(lambda d: NUMPY_DTYPES[d].itemsize if d in NUMPY_DTYPES else 0)
    nbytes = index["numel"].clip(lower=0) * sizes
    divisor = max(1, len(dump.steps)) * max(1, len(dump.ranks))
    by_role = nbytes.groupby(index["role"].fillna("")).sum()
    return {str(role): float(total) / divisor for role, total in by_role.items()}


def _estimate(
    plan: DumpPlan,
    folder: Path | None,
    *,
    bytes_per_step: int | None,
    sample_dump: Any,
    run_steps: int | None,
    devices: int,
) -> list[Finding]:
    if not plan.tensors or (bytes_per_step is None and sample_dump is None):
        return []
    findings: list[Finding] = []
    if bytes_per_step is not None:
        per_step = float(bytes_per_step)
        basis = f"{human_bytes(per_step)} per step"
    else:
        try:
            by_role = measure_sample(sample_dump)
        except Exception as exc:  # a sample that cannot be read is a finding, not a crash
            return [Finding("error", f"the sample dump {sample_dump} cannot be read: {exc}", "", "disk-estimate")]
        kept = {r: b for r, b in by_role.items() if r in plan.roles or r not in ("input", "output")}
        per_step = sum(kept.values())
        missing = sorted(plan.roles - set(by_role))
        roles = ", ".join(sorted(kept)) or "nothing"
        basis = f"{human_bytes(per_step)} per step and device measured on the sample ({roles})"
        if missing and by_role:
            findings.append(
                Finding(
                    "info",
                    f"the sample holds no {' or '.join(missing)} tensors, which this configuration dumps: the estimate "
                    "leaves them out",
                    "",
                    "disk-estimate",
                )
            )
    steps = plan.steps
    if steps is None:
        findings.append(
            Finding(
                "info",
                f"every step is dumped ({basis}): give the run's number of steps for a disk estimate",
                "",
                "disk-unknown",
            )
        )
        return findings
    devices = plan.devices if plan.devices else devices
    estimate = int(per_step * steps * devices)
    detail = f"{basis} x {steps} step{'s' if steps != 1 else ''} x {devices} device{'s' if devices != 1 else ''}"
    if folder is None:
        findings.append(
            Finding("info", f"the dump needs about {human_bytes(estimate)} ({detail})", "", "disk-estimate")
        )
        return findings
    for finding in check_free_space(folder, estimate):
        findings.append(Finding(finding.severity, f"{finding.message} ({detail})", finding.fix, finding.check))
    return findings


def validate(
    source: ConfigSource,
    *,
    product: str | None = None,
    user: str | int | None = None,
    bytes_per_step: int | None = None,
    sample_dump: str | os.PathLike[str] | Dump | None = None,
    steps: int | None = None,
    devices: int = 1,
    check_paths: bool = True,
) -> list[Finding]:
    """Check an Ascend dump / overflow configuration and say what is wrong and what to write instead.

    Parameters
    ----------
    source
        A pasted Python snippet (TF 2 ``npu.global_options().dump_config``, TF 1 ``parameter_map``, Estimator
        ``DumpConfig``), a JSON text (msprobe's config.json or a dict of options), a path to a file holding
        either, or an already-parsed dict. The snippet is parsed, never run.
    product
        ``"atlas-training"``, ``"atlas-a2"`` or ``"atlas-a3"`` when known (A2 accepts only overflow mode ``all``).
    user
        Who will run the training (name or uid): the dump folder's permissions are checked for that user from
        its owner, group and mode bits. None checks the user running this call with ``os.access``.
    bytes_per_step, sample_dump
        For a disk estimate of a tensor dump: the bytes one step dumps on one device, or a dump of one step to
        measure (its element counts times item sizes, :meth:`nbprec.Dump.nbytes`).
    steps
        How many steps the run makes: needed to estimate a dump of every step; steps past it are reported.
    devices
        How many devices write into the dump folder's file system (msprobe's ``rank`` list overrides it).
    check_paths
        False skips the dump folder and disk checks (to check a configuration written for another machine).

    Returns
    -------
    list of Finding
        In the order found: errors (CANN or msprobe rejects the run, or nothing useful is dumped), warnings
        (it runs, but not as meant) and notes; empty when there is nothing to say.

    Examples
    --------
    >>> snippet = '''
    ... custom_op.parameter_map["enable_dump"].b = True
    ... custom_op.parameter_map["enable_dump_debug"].b = True
    ... custom_op.parameter_map["dump_path"].s = tf.compat.as_bytes("/tmp")
    ... custom_op.parameter_map["dump_step"].s = tf.compat.as_bytes("0|5")
    ... '''
    >>> [f.check for f in validate(snippet) if f.is_error]
    ['both-enabled']
    """
    product = check_product(product)
    if steps is not None and steps < 1:
        raise ConfigError(f"steps (the run's number of steps) must be at least 1, not {steps}")
    if devices < 1:
        raise ConfigError(f"devices (writing into the dump folder) must be at least 1, not {devices}")
    if bytes_per_step is not None and sample_dump is not None:
        raise ConfigError("give bytes_per_step or sample_dump, not both")
    configs = read_config(source)
    if isinstance(configs, Finding):
        return [configs]
    findings: list[Finding] = []
    for config in configs:
        if len(configs) > 1:
            findings.append(Finding("info", f"checking the {describe(config)} settings", "", "config-style"))
        if isinstance(config, MsprobeConfig):
            found, plan = check_msprobe(config, run_steps=steps)
        else:
            found, plan = check_ascend(config, product=product, run_steps=steps)
        findings += found
        writes = isinstance(config, MsprobeConfig) or any(
            config.value(name) is True for name in ("enable_dump", "enable_dump_debug")
        )
        folder = None
        if check_paths and writes and plan.path is not None and not isinstance(plan.path, Computed):
            path_findings, folder = check_dump_path(plan.path, tool=plan.tool, user=user)
            findings += path_findings
            if plan.tool == "msprobe" and isinstance(plan.path, str):
                findings += _msprobe_path_rules(plan.path)
        findings += _estimate(
            plan, folder, bytes_per_step=bytes_per_step, sample_dump=sample_dump, run_steps=steps, devices=devices
        )
    return findings


def _msprobe_path_rules(value: str) -> list[Finding]:
    from nbprec.config.checks_msprobe import MSPROBE_PATH

    findings = []
    real = os.path.realpath(os.path.expanduser(value))
    if not MSPROBE_PATH.match(real):
        bad = sorted({c for c in real if not MSPROBE_PATH.match(c)})
        findings.append(
            Finding(
                "error",
                f"dump_path {value!r} holds characters msprobe refuses ({''.join(bad)!r}): only letters, digits "
                "and _ . : / -",
                '"dump_path": "' + "".join(c if MSPROBE_PATH.match(c) else "_" for c in value) + '"',
                "dump-path-chars",
            )
        )
    if len(real) > 4096 or len(os.path.basename(real)) > 255:
        findings.append(
            Finding(
                "error",
                "dump_path is longer than msprobe accepts (4096 characters, 255 per name)",
                "",
                "dump-path-chars",
            )
        )
    return findings


__all__ = ["measure_sample", "read_config", "validate"]
