"""File names of a TensorFlow benchmark dump: ``{op_name}.{output_index}.{timestamp}.npy`` (FORMATS.md section 1).

The rules are tfdbg_ascend's: the tensor name ``scope/op:idx`` becomes ``scope_op.idx.<micros>.npy`` (``/`` ->
``_``, ``:`` -> ``.``); the op part must then match ``[A-Za-z0-9_-]+`` and the whole file name must fit in
255 characters. A tensor whose name breaks a rule is not written: it is listed with the reason. This module
needs no TensorFlow.
"""

from __future__ import annotations

import re

from nbprec.formats.tf_npy import MAX_NAME_LENGTH, NAME_PATTERN

#: What an op name may hold once ``/`` became ``_`` (the reader's rule).
OP_NAME = re.compile(r"[A-Za-z0-9_-]+")
#: The index file written beside the ``.npy`` files (JSON lines; see ``docs/tensorflow.md``).
INDEX_FILE = "nbprec_tf_dump.jsonl"


def dump_op_name(op_name: str) -> str:
    """The op part of a dump file name: ``/`` replaced by ``_`` (as tfdbg_ascend does).

    Examples
    --------
    >>> dump_op_name("sequential/dense/MatMul")
    'sequential_dense_MatMul'
    """
    return op_name.replace("/", "_")


def dump_file_name(op_name: str, slot: int, timestamp: int) -> str:
    """``{op_name}.{output_index}.{timestamp}.npy`` for the output ``slot`` of ``op_name`` (a TF op name).

    Examples
    --------
    >>> dump_file_name("dense/MatMul", 0, 1675157077176648)
    'dense_MatMul.0.1675157077176648.npy'
    """
    return f"{dump_op_name(op_name)}.{slot}.{timestamp}.npy"


def name_problem(op_name: str, slot: int, timestamp: int) -> str | None:
    """Why the output ``slot`` of ``op_name`` cannot be written under the naming rule, or None if it can.

    Examples
    --------
    >>> name_problem("dense/MatMul", 0, 1675157077176648) is None
    True
    >>> name_problem("dense.1/MatMul", 0, 1)
    "op name 'dense.1_MatMul' holds characters outside [A-Za-z0-9_-] ('.'): the file name could not be parsed back"
    """
    op = dump_op_name(op_name)
    if not OP_NAME.fullmatch(op):
        bad = "".join(sorted({c for c in op if not OP_NAME.fullmatch(c)}))
        return (
            f"op name {op!r} holds characters outside [A-Za-z0-9_-] ({bad!r}): the file name could not be parsed back"
        )
    name = dump_file_name(op_name, slot, timestamp)
    if len(name) > MAX_NAME_LENGTH:
        return f"file name would be {len(name)} characters, over the {MAX_NAME_LENGTH}-character limit"
    if NAME_PATTERN.fullmatch(name) is None:  # pragma: no cover - the checks above imply the pattern
        return "file name does not follow {op_name}.{output_index}.{timestamp}.npy"
    return None


def unique_name(base: str, taken: dict[str, object], owner: object) -> str:
    """``base``, or ``base_1``, ``base_2``, ... : the first that is free or already ``owner``'s; records it.

    Distinct ops that share a name in one step (eager ops run twice, equal node names in two functions) get
    TensorFlow-style suffixes in the order they first run, so the names are stable from run to run.

    Examples
    --------
    >>> taken = {}
    >>> unique_name("MatMul", taken, 1), unique_name("MatMul", taken, 2), unique_name("MatMul", taken, 1)
    ('MatMul', 'MatMul_1', 'MatMul')
    """
    name, k = base, 0
    while taken.get(name, owner) != owner:
        k += 1
        name = f"{base}_{k}"
    taken[name] = owner
    return name


__all__ = ["INDEX_FILE", "OP_NAME", "dump_file_name", "dump_op_name", "name_problem", "unique_name"]
