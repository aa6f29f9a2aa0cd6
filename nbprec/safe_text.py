"""Writing names from dumps safely: visible escapes for bytes that were not UTF-8, spreadsheet-safe CSV cells.

Op and file names come from the files users open, and some are hostile or broken (docs/security.md, "Exports and
reports"): a name holding bytes that were not UTF-8 (Python keeps them as lone surrogates) is shown with visible
``\\xNN`` escapes (:func:`visible_text`), and a CSV cell a spreadsheet would run as a formula gets one more
leading ``'`` (:func:`spreadsheet_safe`; numbers are never changed). Every CSV nbprec writes goes through
:func:`write_table_csv` or :func:`csv_cell`.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import numpy as np

from nbprec._output import rewriting
from nbprec.floattext import NumberColumn, number_column, number_texts

try:
    from nbprec._csvjoin import join_rows as _join_rows
except ImportError:  # built without a C compiler: rows joined in Python
    _join_rows = None

#: first characters that make a spreadsheet read a cell as a formula (OWASP, "CSV injection")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_SUSPECT_STARTS = frozenset([*FORMULA_STARTS, "'"])
#: a number as spreadsheets read it (signed, decimal or exponent, inf/nan, a percentage): never neutralised
_NUMBER = re.compile(r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)%?\s*", re.IGNORECASE)
_SURROGATE = re.compile("[\ud800-\udfff]")


def visible_text(text: str) -> str:
    """``text`` with each lone surrogate as a visible escape (so that it encodes as UTF-8): ``\\xNN`` for
    U+DC80 to U+DCFF, the byte that was not UTF-8 in a file name (``"op\\udcff"`` -> ``op\\xff``, as ``ls -b``
    shows it), ``\\udNNN`` for any other."""
    if text.isascii():
        return text
    return _SURROGATE.sub(
        lambda m: f"\\x{ord(m[0]) & 0xFF:02x}" if "\udc80" <= m[0] <= "\udcff" else f"\\u{ord(m[0]):04x}", text
    )


def _formula_like(text: str) -> bool:
    body = text.lstrip("'")
    return body.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(body)


def spreadsheet_safe(text: str) -> str:
    """``text`` as a CSV cell no spreadsheet runs: one more leading ``'`` when, after its leading ``'``, it
    starts with ``=``, ``+``, ``-``, ``@``, tab or CR and is not a number; else unchanged.

    >>> spreadsheet_safe("=HYPERLINK(1)"), spreadsheet_safe("-0.5"), spreadsheet_safe("Tensor.add.0.forward")
    ("'=HYPERLINK(1)", '-0.5', 'Tensor.add.0.forward')
    """
    return "'" + text if text[:1] in _SUSPECT_STARTS and _formula_like(text) else text


def spreadsheet_restore(text: str) -> str:
    """The text :func:`spreadsheet_safe` was given (it is one to one)."""
    return text[1:] if text[:1] == "'" and _formula_like(text) else text


def csv_cell(value: Any, exact: bool = False) -> Any:
    """A value as an export writes it: text spreadsheet-safe, its surrogates visible unless ``exact``."""
    return spreadsheet_safe(value if exact else visible_text(value)) if isinstance(value, str) else value


#: a line of joined cells that :func:`csv_cell` may change: one starting with a formula character or a quote that
#: is not plainly a number (what :data:`_NUMBER` also takes with spaces around goes the slow way: a false alarm)
_MAY_CHANGE = re.compile(
    r"^(?![+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)%?$)[=+\-@\t']", re.MULTILINE | re.IGNORECASE
)


def plain_cells(values: list[Any]) -> bool:
    """Whether :func:`csv_cell` leaves every string among ``values`` as it is and none holds a carriage return
    (so no row needs quoting as a whole): ASCII, no line starting as a formula, in one pass over the joined text
    rather than a call per cell. A cell holding a line feed makes it say False (then map cell by cell)."""
    if list(map(type, values)).count(str) == len(values):  # (a text column: no cell to leave out)
        return _plain_text(values)
    return _plain_text([v for v in values if isinstance(v, str)])


def _plain_text(cells: list[str]) -> bool:
    """:func:`plain_cells` of strings."""
    text = "\n".join(cells)
    return (
        text.isascii()
        and text.count("\n") == max(len(cells) - 1, 0)
        and "\r" not in text
        and (not _may_start_a_line(text) or _MAY_CHANGE.search(text) is None)
    )


#: a line (after the first) starting with a character :data:`_MAY_CHANGE` looks for: a search led by a literal line
#: feed, more than ten times faster than :data:`_MAY_CHANGE`'s over a long column
_SUSPECT_LINE = re.compile(r"\n[=+\-@\t'\r]")


def _may_start_a_line(text: str) -> bool:
    """Whether a line of ``text`` starts with a character :data:`_MAY_CHANGE` looks for (which then runs)."""
    return text[:1] in _SUSPECT_STARTS or _SUSPECT_LINE.search(text) is not None


def _map_text(frame: Any, cell: Any) -> Any:
    """``frame`` with ``cell`` applied to the strings of its text columns (the frame itself if none changes).

    ``cell`` must leave alone what :func:`plain_cells` finds plain (:func:`csv_cell` and :func:`spreadsheet_restore`
    do): such columns are not mapped cell by cell."""
    import pandas as pd

    changed = {}
    for position in range(frame.shape[1]):  # by position: column names may repeat
        column = frame.iloc[:, position]
        if isinstance(column.dtype, pd.CategoricalDtype):
            changed[position] = column.map(cell)
        elif column.dtype.kind == "O":
            values = column.tolist()
            if plain_cells(values):
                continue
            cells = [cell(v) if isinstance(v, str) else v for v in values]
            if any(a is not b for a, b in zip(cells, values, strict=True)):
                changed[position] = pd.Series(cells, index=column.index, dtype=object, name=column.name)
    if not changed:
        return frame
    out = frame.copy()
    for position, column in changed.items():
        out.isetitem(position, column)
    return out


def restore_frame(frame: Any) -> Any:
    """A table read back from :func:`write_table_csv` ``(exact=True)``, its text cells as they were."""
    return _map_text(frame, spreadsheet_restore)


def write_table_csv(table: Any, path: str | Path, *, exact: bool = False) -> Path:
    """Write ``table`` (a DataFrame, or :class:`~nbprec.columns.Columns`) as CSV (no index), every text cell
    spreadsheet-safe (:func:`spreadsheet_safe`).

    Surrogates are written as visible escapes (:func:`visible_text`; the file is UTF-8), or, when ``exact``, as
    the bytes they stand for, so that :func:`restore_frame` over ``pd.read_csv(path,
    encoding_errors="surrogateescape")`` gives the same text back (what save/load need). A table with a
    carriage return in a cell is written with every cell quoted (:func:`quoting`). Columns are written without
    pandas, byte for byte as ``DataFrame.to_csv`` writes the same values.
    """
    errors = "surrogateescape" if exact else "backslashreplace"
    if not hasattr(table, "to_csv"):  # Columns
        header, cells = list(table.columns), [_csv_cells(values, exact) for _, values in table.items()]
        text = [column for (_, values), column in zip(table.items(), cells, strict=True) if values.dtype == object]
        how = csv.QUOTE_ALL if any("\r" in "".join(column) for column in text) else csv.QUOTE_MINIMAL
        with rewriting(path, newline="", encoding="utf-8", errors=errors) as fh:
            write_csv_columns(fh, header, cells, "\n", how)
        return Path(path)
    breaks = False

    def cell(value: str) -> str:
        nonlocal breaks
        breaks = breaks or "\r" in value
        return csv_cell(value, exact)

    frame = _map_text(table, cell)
    with rewriting(path, newline="", encoding="utf-8", errors=errors) as fh:  # (as to_csv opens a path)
        frame.to_csv(fh, index=False, quoting=csv.QUOTE_ALL if breaks else csv.QUOTE_MINIMAL)
    return Path(path)


def write_csv_columns(
    fh: Any, header: list[str], columns: list[list[str] | NumberColumn], ending: str, quoting: int
) -> None:
    """Write a header and columns of text cells to the open text file ``fh`` as ``csv.writer`` writes them
    (comma-separated, ``ending`` after each row, ``quoting`` QUOTE_MINIMAL or QUOTE_ALL); a column may also be
    one of numbers (:func:`~nbprec.floattext.number_column`), written as their texts. With QUOTE_MINIMAL (the
    usual case) the rows are joined directly, a column's cells quoted only where they hold a comma, a quote or a
    line break, the numbers formatted in place: several times faster than the writer on wide tables."""
    if quoting != csv.QUOTE_MINIMAL or len(header) < 2:  # (a lone empty cell is written as "")
        writer = csv.writer(fh, lineterminator=ending, quoting=quoting)
        writer.writerow(header)
        writer.writerows(zip(*map(number_texts, columns), strict=True))
        return
    characters = (",", '"', *ending)  # what the writer quotes: as it does
    special = re.compile("[" + re.escape("".join(characters)) + "]").search
    rows = _join_rows(columns, ending, "".join(characters)) if _join_rows is not None else None
    if rows is None:  # (no C joiner, or a cell that is not ASCII)
        cells = [_quoted(number_texts(column), special, characters) for column in columns]
        rows = "".join(line + ending for line in map(",".join, zip(*cells, strict=True)))
    fh.write(",".join(_quoted(list(header), special, characters)) + ending + rows)


def _quoted(cells: list[str], special: Any, characters: tuple[str, ...]) -> list[str]:
    """Cells as QUOTE_MINIMAL writes them: in quotes (inner quotes doubled) where ``special`` finds a comma, a
    quote or a character of the row ending (``characters``, what ``special`` looks for) in them; a substring search
    of the column's joined text for each character in the usual case where none has one."""
    text = "\x00".join(cells)
    if not any(c in text for c in characters):
        return cells
    return ['"' + c.replace('"', '""') + '"' if special(c) else c for c in cells]


def _csv_cells(values: np.ndarray, exact: bool) -> list[str] | NumberColumn:
    """A column's cells as ``DataFrame.to_csv`` writes them (NaN and None empty, numbers as numpy prints them),
    text through :func:`csv_cell`; float64 and integer columns as columns of numbers (formatted as the rows are
    joined)."""
    if values.dtype == np.float64 or values.dtype.kind in "iu":  # repr's text (numpy's shortest round-trip
        return number_column(values, "")  # text, as to_csv writes it); str of each int
    if values.dtype.kind == "f":  # float32, float16: their own shortest text
        texts = values.astype(str)
        texts[np.isnan(values)] = ""
        return texts.tolist()
    if values.dtype.kind == "b":  # (str of each Python bool: numpy's own text, faster than astype)
        return list(map(str, values.tolist()))
    items = values.tolist()
    if set(map(type, items)) == {str}:  # a text column: as it is, unless a cell needs changing
        return items if _plain_text(items) else [csv_cell(v, exact) for v in items]
    plain = plain_cells(items)
    return [
        ("" if v is None or (isinstance(v, float) and v != v) else str(v))
        if not isinstance(v, str)
        else (v if plain else csv_cell(v, exact))
        for v in items
    ]


def quoting(rows: list[list[Any]]) -> int:
    """How to quote ``rows``: every cell when one holds a carriage return, else as needed.

    Python's CSV writer quotes a line feed but not a lone carriage return, which readers take as the end of a
    row: a name holding one could start a row of its own (and a formula in its first cell).
    """
    return csv.QUOTE_ALL if any(isinstance(c, str) and "\r" in c for row in rows for c in row) else csv.QUOTE_MINIMAL


__all__ = [
    "FORMULA_STARTS",
    "csv_cell",
    "plain_cells",
    "quoting",
    "restore_frame",
    "spreadsheet_restore",
    "spreadsheet_safe",
    "visible_text",
    "write_csv_columns",
    "write_table_csv",
]
