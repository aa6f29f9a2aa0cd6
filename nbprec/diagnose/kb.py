"""Why atc does not hit the knowledge base aoe tuned: the parameters of the two commands that differ.

aoe tunes the graph that its parameters build; atc finds the tuned results only for the same graph, so the
parameters of :data:`PARAMETERS` must agree. Each is compared by what it means, not as text: shapes as sets
of ``name:dims`` (inputs in any order, spaces ignored; ``-1`` and ranges as written), node lists as sets,
names case-insensitively where atc reads them so, files by path (and by content when both can be read here),
and a parameter one side leaves out against its documented default (``precision_mode`` defaults to
``force_fp16``, ``op_select_implmode`` to ``high_performance``, ``input_format`` to NCHW or, for TensorFlow,
NHWC). Where no default is known, "not set" is a value of its own and the message says so.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nbprec.diagnose.commands import Command
from nbprec.diagnose.findings import Finding

#: --framework -> input_format default (atc: Caffe, MindSpore, ONNX NCHW; TensorFlow NHWC)
FORMAT_DEFAULTS = {"0": "NCHW", "1": "NCHW", "3": "NHWC", "5": "NCHW"}
FRAMEWORKS = {"0": "Caffe", "1": "MindSpore", "3": "TensorFlow", "5": "ONNX"}
#: precision_mode values that mean the same
PRECISION_SYNONYMS = {"cube_fp16in_fp32out": "force_fp32", "allow_mix_precision_fp16": "allow_mix_precision"}
#: precision_mode_v2 values and the precision_mode value each matches
PRECISION_V2 = {
    "fp16": "force_fp16",
    "origin": "must_keep_origin_dtype",
    "cube_fp16in_fp32out": "force_fp32",
    "mixed_float16": "allow_mix_precision",
    "mixed_bfloat16": "allow_mix_precision_bf16",
}
_MAX_COMPARED_FILE = 64 << 20


@dataclass(frozen=True)
class Parameter:
    """One parameter aoe and atc must agree on.

    Parameters
    ----------
    name
        The option name (``input_shape``).
    affects
        What a difference changes in the compiled graph (said in the finding).
    form
        How values compare: ``upper``/``lower`` (one word, case-insensitive), ``number``, ``path`` (a file),
        ``shape`` (``name:dims;...`` as a set), ``set;``/``set,`` (names separated by ``;`` or ``,``, any order),
        ``flags`` (``true,false,...``; not set is all false), ``profiles`` (as written, spaces ignored),
        ``output_type`` (one dtype, or ``node:index:dtype;...`` as a set) or ``precision``.
    default
        The value aoe and atc use when the option is not given (``None``: not set is a value of its own).
    """

    name: str
    affects: str
    form: str
    default: str | None = None


PARAMETERS: tuple[Parameter, ...] = (
    Parameter("input_format", "input format", "upper"),  # default: FORMAT_DEFAULTS by --framework
    Parameter("input_shape", "input shapes", "shape"),
    Parameter("output_type", "output dtypes", "output_type"),
    Parameter("insert_op_conf", "graph structure (AIPP pre-processing ops inserted at the inputs)", "path"),
    Parameter("fusion_switch_file", "graph structure (which fusion passes run)", "path"),
    Parameter("enable_scope_fusion_passes", "graph structure (scope fusion passes)", "set,"),
    Parameter("enable_small_channel", "graph structure (small-channel convolution optimisation)", "number", "0"),
    Parameter("out_nodes", "output nodes", "set;"),
    Parameter("input_fp16_nodes", "input dtypes (float16 inputs)", "set;"),
    Parameter("is_input_adjust_hw_layout", "input dtypes and format (float16 NC1HWC0 inputs)", "flags", "false"),
    Parameter("is_output_adjust_hw_layout", "output dtypes and format (float16 NC1HWC0 outputs)", "flags", "false"),
    Parameter("precision_mode", "precision (the dtype each op runs in)", "precision", "force_fp16"),
    Parameter("op_precision_mode", "precision (per-op implementation modes)", "path"),
    Parameter("modify_mixlist", "precision (the mixed-precision lists)", "path"),
    Parameter("keep_dtype", "precision (ops kept in their original dtype)", "path"),
    Parameter(
        "op_select_implmode", "precision (high-precision or high-performance kernels)", "lower", "high_performance"
    ),
    Parameter("optypelist_for_implmode", "precision (op types the implementation mode applies to)", "set,"),
    Parameter("dynamic_batch_size", "input shapes (dynamic batch profiles)", "profiles"),
    Parameter("dynamic_image_size", "input shapes (dynamic image size profiles)", "profiles"),
    Parameter("dynamic_dims", "input shapes (dynamic dimension profiles)", "profiles"),
)


@dataclass(frozen=True)
class _Value:
    key: Any  # what is compared
    shown: str  # how the finding shows it
    known: bool = True  # False: not set, and its default is unknown


def _no_space(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _shape(text: str) -> frozenset[tuple[str, str]]:
    inputs = set()
    for item in _no_space(text).split(";"):
        if item:
            name, _, dims = item.rpartition(":")
            inputs.add((name, dims))
    return frozenset(inputs)


def _output_type(text: str) -> Any:
    items = [i for i in _no_space(text).split(";") if i]
    if len(items) == 1 and ":" not in items[0]:
        return items[0].upper()
    return frozenset(i.rpartition(":")[0] + ":" + i.rpartition(":")[2].upper() for i in items)


def _flags(text: str) -> tuple[int, ...]:
    return tuple(i for i, f in enumerate(_no_space(text).lower().split(",")) if f in ("true", "1"))


def _number(text: str) -> str:
    text = text.strip()
    try:
        return str(int(text))
    except ValueError:
        return text.lower()


_FORMS: dict[str, Callable[[str], Any]] = {
    "upper": lambda t: t.strip().upper(),
    "lower": lambda t: t.strip().lower(),
    "number": _number,
    "path": lambda t: os.path.normpath(t.strip()) if t.strip() else "",
    "shape": _shape,
    "set;": lambda t: frozenset(i for i in _no_space(t).split(";") if i),
    "set,": lambda t: frozenset(i for i in _no_space(t).split(",") if i),
    "flags": _flags,
    "profiles": _no_space,
    "output_type": _output_type,
}


def _precision(command: Command) -> _Value:
    v1, v2 = command.value("precision_mode"), command.value("precision_mode_v2")
    if v1 is not None and v1.strip():
        value = v1.strip().lower()
        return _Value(PRECISION_SYNONYMS.get(value, value), f"--precision_mode={v1}")
    if v2 is not None and v2.strip():
        value = v2.strip().lower()
        return _Value(PRECISION_V2.get(value, f"v2:{value}"), f"--precision_mode_v2={v2}")
    return _Value("force_fp16", "not set (default force_fp16)")


def _value(param: Parameter, command: Command) -> _Value:
    if param.form == "precision":
        return _precision(command)
    raw = command.value(param.name)
    if raw is not None and raw.strip():  # an empty value (--out_nodes="") is not set
        return _Value(_FORMS[param.form](raw), f"--{param.name}={raw}")
    if param.name == "input_format":
        framework = (command.value("framework") or "").strip()
        default = FORMAT_DEFAULTS.get(framework)
        if default is None:
            return _Value(None, "not set (its default depends on --framework, which is not given)", known=False)
        return _Value(default, f"not set (default {default} for {FRAMEWORKS[framework]})")
    if param.default is not None:
        return _Value(_FORMS[param.form](param.default), f"not set (default {param.default})")
    if param.form in ("set;", "set,"):
        return _Value(frozenset(), "not set")
    if param.form == "flags":
        return _Value((), "not set")
    return _Value(None, "not set")


def _digest(path: str) -> str | None:
    try:
        if os.path.getsize(path) > _MAX_COMPARED_FILE:
            return None
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def _same_files(a: str, b: str) -> bool | None:
    """Whether two differently written paths hold the same bytes (``None``: one cannot be read here)."""
    da, db = _digest(a), _digest(b)
    return None if da is None or db is None else da == db


@dataclass(frozen=True)
class Mismatch:
    """One parameter on which aoe and atc differ, and how to change atc."""

    param: Parameter
    aoe: _Value
    atc: _Value
    note: str
    set_to: str | None  # the atc option to write (--name=value), or None to remove it
    remove: tuple[str, ...]  # atc options to remove


def mismatches(aoe: Command, atc: Command) -> list[Mismatch]:
    """Every parameter of :data:`PARAMETERS` on which ``aoe`` and ``atc`` differ."""
    out = []
    for param in PARAMETERS:
        a, t = _value(param, aoe), _value(param, atc)
        if a.key == t.key and a.known and t.known:
            continue
        note = ""
        if param.form == "path" and a.key and t.key:
            same = _same_files(aoe.value(param.name) or "", atc.value(param.name) or "")
            if same:
                continue
            if same is None:
                note = " (the paths differ and the files cannot both be read here; the same bytes would not differ)"
            else:
                note = " (the two files differ)"
        if not (a.known and t.known):
            if a.shown == t.shown:  # both not set, default unknown: the same
                continue
            note = " (its default is not known here, so not set is compared as a value of its own)"
        set_to, remove = _change(param, aoe, atc)
        out.append(Mismatch(param, a, t, note, set_to, remove))
    return out


def _change(param: Parameter, aoe: Command, atc: Command) -> tuple[str | None, tuple[str, ...]]:
    """The option to write in atc (``None``: remove it) and the atc options to remove."""
    names = ("precision_mode", "precision_mode_v2") if param.form == "precision" else (param.name,)
    given = next(((n, aoe.value(n)) for n in names if aoe.value(n) is not None), None)
    remove = tuple(n for n in names if atc.value(n) is not None and (given is None or n != given[0]))
    if given is None:
        return None, remove
    return f"{given[0]}={given[1]}", remove


def tune_bank_finding(aoe: Command, atc: Command) -> Finding | None:
    """A finding when the two command lines set TUNE_BANK_PATH (where aoe writes the tuned knowledge base and
    atc reads it) differently: an error when both set it, a warning when one does (the other may have it
    exported in its shell)."""
    ours, theirs = aoe.env.get("TUNE_BANK_PATH"), atc.env.get("TUNE_BANK_PATH")
    if ours is None and theirs is None:
        return None
    if ours is not None and theirs is not None and os.path.normpath(ours) == os.path.normpath(theirs):
        return None
    severity = "error" if ours is not None and theirs is not None else "warning"
    if ours is not None:
        shown = f"TUNE_BANK_PATH={theirs}" if theirs is not None else "no TUNE_BANK_PATH on its command line"
        message = (
            f"aoe wrote its knowledge base under TUNE_BANK_PATH={ours}, atc has {shown}: atc reads the "
            "knowledge base from TUNE_BANK_PATH (or the default location) only"
        )
        remedy = f"export TUNE_BANK_PATH={ours} before atc (or write it in front of the atc command)"
    else:
        message = (
            f"atc reads the knowledge base from TUNE_BANK_PATH={theirs}, but aoe's command line sets no "
            "TUNE_BANK_PATH: unless it was exported for aoe, aoe wrote to the default location"
        )
        remedy = f"export TUNE_BANK_PATH={theirs} before aoe, or leave TUNE_BANK_PATH out of the atc command"
    values = {"parameter": "TUNE_BANK_PATH", "aoe": ours, "atc": theirs}
    return Finding("kb-bank-path", severity, atc.where or "<atc>", message, values, remedy)


def mismatch_values(m: Mismatch, aoe: Command, atc: Command) -> dict[str, Any]:
    """The JSON-ready values of a mismatch finding."""
    return {
        "parameter": m.param.name,
        "aoe": aoe.value(m.param.name) if m.param.form != "precision" else _precision(aoe).shown,
        "atc": atc.value(m.param.name) if m.param.form != "precision" else _precision(atc).shown,
        "aoe_shown": m.aoe.shown,
        "atc_shown": m.atc.shown,
        "affects": m.param.affects,
        "aoe_where": aoe.where,
    }
