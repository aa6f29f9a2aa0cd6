"""The remedies of the log rules, computed from the values a rule read: host memory, graph-engine memory limits.

Each ``explain_*`` function takes the values :mod:`nbprec.diagnose.rules` extracted (merged over the lines of
one event) and returns a :class:`Verdict`: severity, message, remedy and the computed values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: 1 GiB, the margin the graph engine's fix adds to the size the log printed
GIB = 1 << 30
#: what graph_memory_max_size + variable_memory_max_size may total (Ascend training devices: 31 GiB)
DEVICE_TOTAL = 31 * GIB
#: the snippet styles of the graph-engine memory fix
MEMORY_STYLES = ("tf1", "estimator", "tf2")


@dataclass(frozen=True)
class Verdict:
    """What a rule concludes from the values of one event."""

    severity: str
    message: str
    remedy: str = ""
    values: dict[str, Any] = field(default_factory=dict)


def gib(n_bytes: float) -> str:
    """Bytes as GiB with two decimals (``"15.71 GiB"``)."""
    return f"{n_bytes / GIB:.2f} GiB"


# -- host out-of-memory ---------------------------------------------------------------------------------------
_RSS_FIELDS = ("anon-rss", "file-rss", "shmem-rss")


def explain_host_oom(values: dict[str, Any]) -> Verdict:
    """The process the kernel's OOM killer killed, its resident memory, and how to make the job fit."""
    name = str(values.get("name") or "?")
    pid = values.get("pid")
    parts = {f: values[f] for f in _RSS_FIELDS if isinstance(values.get(f), int)}
    rss_kb = sum(parts.values()) if parts else None
    cgroup = bool(values.get("cgroup"))
    computed: dict[str, Any] = {"rss_kb": rss_kb}
    who = f"{name} (pid {pid})" if pid is not None else name
    killer = "the memory cgroup's (container's) out-of-memory killer" if cgroup else "the kernel's out-of-memory killer"
    if rss_kb is None:
        message = f"{who} was killed by {killer} (its resident memory is not in this log)"
        need = "more memory than it had"
    else:
        rss = rss_kb * 1024
        computed.update(rss_bytes=rss, rss_gib=round(rss / GIB, 3))
        spelled = " + ".join(f"{f} {v} kB" for f, v in parts.items())
        message = f"{who} was killed by {killer} holding {gib(rss)} resident ({spelled} = {rss_kb} kB)"
        need = f"more than {gib(rss)} of memory free for this job"
        if isinstance(values.get("total-vm"), int):
            message += f", total-vm {gib(values['total-vm'] * 1024)}"
    if cgroup:
        lines = [f"Raise the memory limit of its container or cgroup ({need}), or run fewer jobs in parallel in it:"]
    else:
        lines = [f"Use a host with {need}, or run fewer jobs in parallel on this host:"]
    if name == "aoe" or values.get("tuning"):
        lines += [
            "- lower TUNING_PARALLEL_NUM in ${install_path}/latest/tools/aoe/conf/aoe.ini (AOE's parallel tuning "
            "threads; default 8, range 1-64, advised 2/3 of the CPU cores: scale it down with the memory per job)",
            "- lower the parallel operator compile processes: export TE_PARALLEL_COMPILER=<n> before aoe "
            "(default 8, range 1-32)",
            "- tune one model at a time on this host (do not start several aoe processes together)",
        ]
    elif name == "atc":
        lines += [
            "- lower the parallel operator compile processes: export TE_PARALLEL_COMPILER=<n> before atc "
            "(default 8, range 1-32)",
            "- build one model at a time on this host",
        ]
    else:
        lines += [
            "- start fewer processes at a time on this host",
            "- if it ran AOE tuning (e.g. aoe_mode in a TensorFlow session), lower TUNING_PARALLEL_NUM in "
            "${install_path}/latest/tools/aoe/conf/aoe.ini and TE_PARALLEL_COMPILER as for aoe",
        ]
    return Verdict("error", message, "\n".join(lines), computed)


# -- graph-engine memory limits ---------------------------------------------------------------------------------
def memory_snippets(graph: int, variable: int) -> dict[str, str]:
    """The lines that set ``graph_memory_max_size`` and ``variable_memory_max_size`` (bytes) in each style."""
    return {
        "tf1": (
            "# TF 1 sess.run: on the NpuOptimizer custom optimizer of the session's ConfigProto\n"
            f'custom_op.parameter_map["graph_memory_max_size"].s = tf.compat.as_bytes(str({graph}))\n'
            f'custom_op.parameter_map["variable_memory_max_size"].s = tf.compat.as_bytes(str({variable}))'
        ),
        "estimator": (
            "# TF 1 Estimator: with your other NPURunConfig arguments\n"
            f"config = NPURunConfig(graph_memory_max_size=str({graph}), variable_memory_max_size=str({variable}))"
        ),
        "tf2": (
            "# TF 2 npu_device: before npu.open().as_default()\n"
            f"npu.global_options().graph_memory_max_size = str({graph})\n"
            f"npu.global_options().variable_memory_max_size = str({variable})"
        ),
    }


def ge_memory_setting(what: str, current: int) -> tuple[int, int] | None:
    """``(graph_memory_max_size, variable_memory_max_size)`` fixing "current ``what`` size[current] exceeds ...".

    ``what`` is ``"var"`` or ``"graph"``: the exhausted kind gets ``current + 1 GiB``, the other what is left of
    31 GiB. ``None`` when ``current + 1 GiB`` is more than 31 GiB (no setting fits).

    >>> ge_memory_setting("var", 13962468864)
    (18249785856, 15036210688)
    """
    needed = current + GIB
    if needed > DEVICE_TOTAL:
        return None
    rest = DEVICE_TOTAL - needed
    return (rest, needed) if what == "var" else (needed, rest)


def explain_ge_memory(values: dict[str, Any]) -> Verdict:
    """The graph_memory_max_size / variable_memory_max_size that fit what the graph engine asked for."""
    what = values["what"]
    current, total = values["current"], values["total"]
    name = "variable_memory_max_size" if what == "var" else "graph_memory_max_size"
    other = "graph_memory_max_size" if what == "var" else "variable_memory_max_size"
    label = "variable" if what == "var" else "graph"
    message = (
        f"the graph engine ran out of {label} memory: it needs {current} bytes ({gib(current)}) but "
        f"{name} allows {total} bytes ({gib(total)})"
    )
    needed = current + GIB
    setting = ge_memory_setting(what, current)
    computed: dict[str, Any] = {"needed": needed, "device_total": DEVICE_TOTAL, "fits": setting is not None}
    if setting is None:
        message += (
            f"; no setting fits: {name} would need {current} + {GIB} = {needed} bytes ({gib(needed)}), more than "
            f"the {DEVICE_TOTAL} bytes (31 GiB) graph and variable memory may total on the device"
        )
        shrink = (
            "fewer or smaller variables on one device (shard them across devices, keep optimizer state smaller)"
            if what == "var"
            else "a smaller graph on one device (a smaller batch size or input shapes, or split the model)"
        )
        remedy = (
            f"No graph_memory_max_size / variable_memory_max_size fits: {label} memory alone needs {gib(needed)} "
            f"with the 1 GiB margin, above the 31 GiB limit. Reduce what one device holds: {shrink}. "
            "(31 GiB is the limit of Ascend training devices; `npu-smi info -t memory -i <id>` shows another "
            "device's on-chip memory.)"
        )
        return Verdict("error", message, remedy, computed)
    graph, variable = setting
    rest = graph if what == "var" else variable
    computed.update(
        graph_memory_max_size=graph, variable_memory_max_size=variable, snippets=memory_snippets(graph, variable)
    )
    formulas = (
        f"{name} = {current} + {GIB} = {needed} bytes ({gib(needed)})\n"
        f"{other} = {DEVICE_TOTAL} - {needed} = {rest} bytes ({gib(rest)})"
    )
    if rest == 0:
        formulas += f"\n(this leaves nothing for {other}: the model is at the device's limit)"
    snippets = "\n\n".join(computed["snippets"][s] for s in MEMORY_STYLES)
    return Verdict("error", message, f"{formulas}\n\n{snippets}", computed)
