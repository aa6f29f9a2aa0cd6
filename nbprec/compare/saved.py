"""The folder a :class:`~nbprec.compare.comparison.Comparison` is saved in, and reading it back.

``comparison.json`` holds the format name, the nbprec version, the comparison's meta and its rule;
``tensors.csv`` the table (every text cell byte for byte, spreadsheet-safe: :func:`nbprec.safe_text.write_table_csv`
with ``exact=True``), shapes as JSON lists; ``unmatched_bench.csv`` the benchmark tensors nothing matched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from nbprec._output import rewriting
from nbprec._record import asdict
from nbprec._version import __version__
from nbprec.columns import Columns, shape_cells
from nbprec.compare.rules import Rule, Threshold
from nbprec.errors import ComparisonError
from nbprec.formats._files import long_number
from nbprec.safe_text import restore_frame, write_table_csv

SAVE_FORMAT = "nbprec-comparison"
SHAPE_COLUMNS = ("target_shape", "bench_shape")
_TEXT_COLUMNS = {"target_name", "bench_name", "target_op", "bench_op", "op", "module", "slot", "reason"} | {
    "ground_truth", "relation", "fusion_pass", "parent", "target_checksum", "bench_checksum", "noise_from"
}  # fmt: skip
_WORD_COLUMNS = ("target_dtype", "bench_dtype", "op_type", "api", "direction", "role", "match", "compare_mode")


def write_saved(folder: Path, table: Columns, unmatched: Columns, meta: dict[str, Any], rule: Rule) -> Path:
    """Write a comparison's table, unmatched benchmark tensors, meta and rule into ``folder`` (made if needed)."""
    folder.mkdir(parents=True, exist_ok=True)
    table = table.copy()
    texts: dict[Any, str] = {}  # shapes recur: each one's JSON made once (and looked up once per tuple object)
    for column in SHAPE_COLUMNS:
        cells = shape_cells(table[column].tolist(), lambda shape: shape_json(shape, texts))
        table[column] = np.array(cells, dtype=object)
    write_table_csv(table, folder / "tensors.csv", exact=True)  # names kept byte for byte, spreadsheet-safe
    unmatched = unmatched.copy()
    if "shape" in unmatched:
        unmatched["shape"] = np.array([json.dumps(list(s)) for s in unmatched["shape"].tolist()], dtype=object)
    write_table_csv(unmatched, folder / "unmatched_bench.csv", exact=True)
    header = {"format": SAVE_FORMAT, "nbprec_version": __version__, "meta": meta, "rule": rule_to_dict(rule)}
    with rewriting(folder / "comparison.json") as fh:
        fh.write(json.dumps(header, indent=1, default=str))
    return folder


def read_saved(folder: Path) -> tuple[Any, Any, Rule, dict[str, Any] | None]:
    """(table, unmatched benchmark tensors, rule, meta) of a folder :func:`write_saved` wrote (the tables as
    DataFrames); a folder that is not one is a :class:`~nbprec.errors.ComparisonError` naming the file."""
    import pandas as pd

    try:
        header = json.loads((folder / "comparison.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ComparisonError(f"{folder / 'comparison.json'}: not a saved nbprec comparison ({exc})") from exc
    except ValueError as exc:
        raise ComparisonError(f"{folder / 'comparison.json'}: not read: it holds {long_number()}") from exc
    if header.get("format") != SAVE_FORMAT:
        raise ComparisonError(f"{folder / 'comparison.json'}: format is {header.get('format')!r}, not {SAVE_FORMAT}")
    for name in ("tensors.csv", "unmatched_bench.csv"):
        if not (folder / name).is_file():
            raise ComparisonError(
                f"{folder / name}: missing; a saved comparison holds comparison.json, tensors.csv and "
                "unmatched_bench.csv (copy the whole folder, or save the comparison again)"
            )
    table = pd.read_csv(
        folder / "tensors.csv",
        dtype=dict.fromkeys(_TEXT_COLUMNS, str),
        keep_default_na=False,
        na_values=[""],
        encoding_errors="surrogateescape",
    )
    table = restore_frame(table)
    for column in _TEXT_COLUMNS & set(table.columns):
        values = table[column]  # an all-empty text column comes back from CSV as float64 NaN
        table[column] = (values.astype(object) if values.dtype.kind == "f" else values).fillna("")
    for column in _WORD_COLUMNS:
        if column in table:
            table[column] = table[column].astype(object).fillna("").astype(str)
    for column in SHAPE_COLUMNS:
        table[column] = [tuple(json.loads(s)) if isinstance(s, str) and s else None for s in table[column]]
    if "checksum_match" in table:
        table["checksum_match"] = table["checksum_match"].map({True: True, False: False, "True": True, "False": False})
    unmatched = pd.DataFrame()
    if (folder / "unmatched_bench.csv").stat().st_size > 1:
        unmatched = restore_frame(pd.read_csv(folder / "unmatched_bench.csv", encoding_errors="surrogateescape"))
    return table, unmatched, rule_from_dict(header["rule"]), header.get("meta")


def shape_json(shape: Any, texts: dict[Any, str]) -> str:
    """A shape as a saved table holds it: JSON of its list, '' when unknown. ``texts`` caches them (shapes
    recur): a tuple of ints by itself, anything else by its ``repr``, which tells ``(1, 2)`` from ``(1.0, 2)``
    and ``(True, 2)``, which compare equal to it."""
    if type(shape) is tuple and all(type(d) is int for d in shape):  # the usual shape: keyed by itself
        text = texts.get(shape)
        if text is None:
            text = texts[shape] = "[" + ", ".join(map(str, shape)) + "]"  # json.dumps's text of a list of ints
        return text
    if shape is None or (isinstance(shape, float) and shape != shape):
        return ""
    key = repr(shape)
    text = texts.get(key)
    if text is None:
        text = texts[key] = json.dumps(list(shape))
    return text


def rule_to_dict(rule: Rule) -> dict[str, Any]:
    """A rule as ``comparison.json`` holds it."""
    data = asdict(rule)
    data["thresholds"] = [asdict(t) for t in rule.thresholds]
    return data


def rule_from_dict(data: dict[str, Any]) -> Rule:
    """The rule :func:`rule_to_dict` wrote."""
    thresholds = tuple(Threshold(**t) for t in data.get("thresholds", []))
    return Rule(
        name=data["name"],
        thresholds=thresholds,
        combine=data.get("combine", "all"),
        dtype_aware=bool(data.get("dtype_aware", False)),
        description=data.get("description", ""),
    )


__all__ = ["SAVE_FORMAT", "SHAPE_COLUMNS", "read_saved", "rule_from_dict", "rule_to_dict", "shape_json", "write_saved"]
