"""How a profile file proves it is whole: a checked header, and a check on every row.

A profile file of schema version 4 reads::

    # autopart.profile 4
    # {"created": "…", "fingerprint": "…", "integrity": {"check": "…", "rows": 841}, …}
    kind,target,key,op_type,median_s,…,measured_at,partial,check
    op,cpu@onnxruntime,"Conv:11 {…} (…) -> (…)",Conv,0.00021,…,d41d8cd98f00b204

- ``integrity.rows`` counts the table's rows, and ``integrity.check`` is the digest of the
  rest of the header line (its JSON, keys sorted), of that count and of the column line:
  a header that fails it is refused (:class:`ProfileError` naming the file).
- every row ends with ``check``, the 8-byte digest of its other cells exactly as written
  (:func:`row_check`). A row that fails it, or has another number of cells, is dropped;
  so is a last line the file ends inside, and rows the header counts that are not there.
  Reading reports what it dropped (:class:`DroppedRows`); the profiler measures those rows
  again, and the next save writes the file without them.

Files of versions 1 to 3 have no checks. Their rows are taken as they are, but for a
last line with no line end (the file was cut inside it) and rows whose ``measured_at``,
the last column, is empty (cut short): both are dropped and reported the same way.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from autopart.errors import ProfileError
from autopart.io import parse_json, text_digest

SCHEMA = "autopart.profile"
SCHEMA_VERSION = 4
READABLE_VERSIONS = ("1", "2", "3", "4")
CHECK = "check"  # the last column of a schema-4 table
INTEGRITY = "integrity"  # the header's key for the row count and the header's digest
ROW_CHECK_BYTES = 8


@dataclass(frozen=True)
class DroppedRows:
    """What reading a profile file dropped, and why.

    ``damaged`` counts the lines that failed their check (or had too few or too many
    cells); ``cut_short`` says the file ended inside its last row. ``rows`` is how many
    the header counts and ``kept`` how many were read (the rest are dropped, those the file
    lacks too). ``checked`` is false for files without checks (versions 1 to 3), where only
    rows cut short can be found and ``rows`` is unknown (None).
    """

    origin: str = "<text>"
    damaged: int = 0
    cut_short: bool = False
    rows: int | None = None
    kept: int = 0
    checked: bool = True

    @property
    def count(self) -> int:
        """How many rows were dropped."""
        if self.rows is None:
            return self.damaged + int(self.cut_short)
        return max(self.rows - self.kept, 0)

    def notes(self) -> list[str]:
        """One line saying how many rows were dropped and why; none when nothing was."""
        if not self.count:
            return []
        reasons = [
            *(["damaged"] if self.damaged else []),
            *(["the file ends inside its last row"] if self.cut_short else []),
            *(
                ["missing: the file ends early"]
                if self.count > self.damaged + self.cut_short
                else []
            ),
        ]
        rows = f"{self.count} rows that failed their" if self.count > 1 else "1 row that failed its"
        return [
            f"profile {self.origin}: dropped {rows} check ({'; '.join(reasons)}); "
            "they are measured again where a model needs them"
        ]


def row_check(cells: Sequence[str]) -> str:
    """The check of a row: the digest of its cells, exactly as they are written."""
    return text_digest(json.dumps(list(cells)), ROW_CHECK_BYTES)


def cell_text(value: Any) -> str:
    """How a cell is written: floats exactly (``repr``), NaN as an empty cell."""
    if isinstance(value, str):
        return value
    if isinstance(value, float | np.floating):
        return "" if math.isnan(value) else repr(float(value))
    if isinstance(value, int | np.integer):
        return str(int(value))
    return "" if value is None or value is pd.NA else str(value)


def write_text(meta: dict[str, Any], columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """The text of a schema-4 file holding ``rows`` (in ``columns``) under ``meta``.

    Rows with a carriage return in a cell are quoted whole (a CSV reader ends a line at an
    unquoted one); other cells are quoted only where CSV needs it.
    """
    buffer = io.StringIO()
    minimal = csv.writer(buffer, lineterminator="\n")
    quoted = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL)
    count = 0
    for values in rows:
        cells = [cell_text(value) for value in values]
        writer = quoted if any("\r" in cell for cell in cells) else minimal
        writer.writerow([*cells, row_check(cells)])
        count += 1
    heading = io.StringIO()
    csv.writer(heading, lineterminator="").writerow([*columns, CHECK])
    column_line = heading.getvalue()
    header = {**meta, INTEGRITY: {"rows": count, CHECK: _header_check(meta, count, column_line)}}
    return (
        f"# {SCHEMA} {SCHEMA_VERSION}\n"
        f"# {json.dumps(header, sort_keys=True, default=str)}\n"
        f"{column_line}\n{buffer.getvalue()}"
    )


def _header_check(meta: dict[str, Any], rows: int, column_line: str) -> str:
    return text_digest(f"{json.dumps(meta, sort_keys=True, default=str)}\n{rows}\n{column_line}")


def read_text(text: str, origin: str) -> tuple[str, dict[str, Any], pd.DataFrame, DroppedRows]:
    """Split a profile file into its version, metadata and table of cell texts.

    Rows that fail their check (or, in files without checks, were cut short) are dropped
    and counted in the :class:`DroppedRows`. Raises :class:`ProfileError` naming
    ``origin`` for a file that is not a profile, of an unknown version, or whose header
    (metadata and column names) is damaged.
    """
    lines = text.split("\n", 2)
    if len(lines) < 3 or not lines[0].startswith(f"# {SCHEMA} "):
        raise ProfileError(f"{origin} is not an autopart profile (no '# {SCHEMA}' header)")
    version = lines[0].removeprefix(f"# {SCHEMA} ").strip()
    if version not in READABLE_VERSIONS:
        raise ProfileError(
            f"{origin} has profile schema version {version!r}; this autopart reads "
            f"versions 1 to {SCHEMA_VERSION}"
        )
    meta = parse_json(lines[1].removeprefix("#"), f"{origin} is corrupt: ", ProfileError)
    if not isinstance(meta, dict) or not isinstance(meta.get("fingerprint"), str):
        raise ProfileError(f"{origin} is corrupt: its header has no machine fingerprint")
    body, cut_short = _whole_lines(lines[2])
    if version != str(SCHEMA_VERSION):
        if INTEGRITY in meta:  # only schema 4 writes one: the version line is damaged
            raise ProfileError(f"{origin} is damaged: version {version} with a checked header")
        if not text.isascii():  # no check would catch bytes that are not UTF-8
            _check_utf8(text, origin)
        table, damaged = _read_unchecked(body, origin)
        dropped = DroppedRows(origin, damaged, cut_short, kept=len(table), checked=False)
        return version, meta, table, dropped
    column_line, _, rows = body.partition("\n")
    expected = _verify_header(meta, column_line, origin)
    columns = column_line.split(",")[:-1]
    kept: list[list[str]] = []
    damaged = 0
    reader = csv.reader(io.StringIO(rows, newline=""))
    line = 0
    with _cells_up_to(len(rows)):  # a row cut short keeps its samples in one cell
        for cells in reader:
            whole = len(cells) == len(columns) + 1 and cells[-1] == row_check(cells[:-1])
            if whole:
                kept.append(cells[:-1])
            else:
                damaged += max(1, reader.line_num - line)  # a stray quote joins lines
            line = reader.line_num
    table = pd.DataFrame(kept, columns=columns, dtype=object)
    return version, meta, table, DroppedRows(origin, damaged, cut_short, expected, len(kept))


@contextmanager
def _cells_up_to(size: int) -> Iterator[None]:
    """Let the csv module read cells of up to ``size`` characters (128 KiB otherwise)."""
    previous = csv.field_size_limit(max(size, csv.field_size_limit()))
    try:
        yield
    finally:
        csv.field_size_limit(previous)


def _check_utf8(text: str, origin: str) -> None:
    """Raise :class:`ProfileError` if ``text`` holds bytes that were not UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as failure:
        raise ProfileError(f"profile {origin} is not UTF-8 text: {failure.reason}") from None


def _whole_lines(body: str) -> tuple[str, bool]:
    """``body`` up to its last line end, and whether a line after it was cut off there."""
    if not body or body.endswith("\n"):
        return body, False
    return body[: body.rfind("\n") + 1], True


def _verify_header(meta: dict[str, Any], column_line: str, origin: str) -> int:
    """Check the header of a schema-4 file (removing its integrity record from ``meta``).

    Returns how many rows the header counts.
    """
    record = meta.pop(INTEGRITY, None)
    rows = record.get("rows") if isinstance(record, dict) else None
    check = record.get(CHECK) if isinstance(record, dict) else None
    if (
        not isinstance(rows, int)
        or isinstance(rows, bool)
        or rows < 0
        or not column_line.endswith(f",{CHECK}")
        or check != _header_check(meta, rows, column_line)
    ):
        raise ProfileError(
            f"{origin} is damaged: its header (machine, settings and columns) fails its check"
        )
    return rows


def _read_unchecked(body: str, origin: str) -> tuple[pd.DataFrame, int]:
    """The table of a file without row checks, and how many rows were cut short.

    A row whose last cell, ``measured_at``, is empty lacks its last cells: it is dropped.
    """
    try:
        table = pd.read_csv(
            io.StringIO(body),
            dtype=object,  # cells as text, as in files with checks
            lineterminator="\n",  # to_csv left a carriage return in a key unquoted
            keep_default_na=False,
            na_filter=False,
        )
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise ProfileError(f"{origin} is corrupt: {error}") from None
    if "measured_at" not in table.columns:
        return table, 0
    whole = table["measured_at"] != ""
    return table[whole].reset_index(drop=True), int((~whole).sum())


def parse_cells(
    table: pd.DataFrame, floats: Sequence[str], counts: Sequence[str], origin: str
) -> pd.DataFrame:
    """``table`` of cell texts with its ``floats`` and ``counts`` columns parsed.

    An empty cell is NaN; a cell that is not a number (or a count not a whole number)
    raises :class:`ProfileError`.
    """
    table = table.copy()
    for column in table.columns:
        if column in floats:
            table[column] = _numbers(table[column], column, origin, float, np.float64)
        elif column in counts:
            table[column] = _numbers(table[column], column, origin, int, np.int64)
    return table


def _numbers(cells: pd.Series, column: str, origin: str, kind: type, dtype: type) -> np.ndarray:
    values = []
    for cell in cells:
        try:
            values.append(kind(cell) if cell != "" or kind is int else math.nan)
        except (ValueError, OverflowError):
            what = (
                f"a {column} count is missing or not a whole number"
                if kind is int
                else (f"{column} {str(cell)[:40]!r} is not a number")
            )
            raise ProfileError(f"{origin} is corrupt: {what}") from None
    try:
        return np.array(values, dtype=dtype)
    except OverflowError:
        raise ProfileError(f"{origin} is corrupt: a {column} count is out of range") from None
