"""Saved profiles: one readable CSV table per machine, with a JSON header, written atomically.

A profile file looks like::

    # autopart.profile 4
    # {"fingerprint": "…", "machine": {…}, "created": "…", "settings": {…}, "integrity": …}
    kind,target,key,op_type,median_s,q1_s,q3_s,min_s,max_s,runs,passes,timer,nbytes,kernel_s,…
    op,cpu@onnxruntime,"Conv:11 {…} (float32[1x64x56x56],…) -> (…)",Conv,0.00021,…

Every row holds a :class:`~autopart.costmodel.measurements.Measurement` (``median_s`` to
``timer``, and ``passes``: how many of the profiler's passes through its job list its
samples came from), ``op_type`` (a label), ``nbytes``, ``measured_at`` and ``partial``: the
samples of each pass so far (JSON) while the row lacks some of its passes, so that a later
run takes only the passes it lacks (empty once complete). Row kinds
(:class:`~autopart.costmodel.measurements.RowKind`):

- ``op``: ``key`` is the op signature;
- ``unsupported``: a signature the target cannot run (no timing, ``passes`` 0);
- ``layout``: the layout conversions of an op's one-node subgraph; ``kernel_s`` is that
  op's own kernel time in the same runs;
- ``fused``: a producer and its consumer timed together; ``key`` joins both signatures;
  ``producer_s`` is the producer alone, timed in turn with the pair in the same runs;
- ``launch``: entering one partition: ``key`` ``wall`` around ``run`` and synchronisation,
  ``timed`` as ``run_timed`` reports it, and on layout-converting codegens ``profiled``, the
  probe's kernel time under the codegen's own profiler;
- ``transfer``: ``target`` is ``src->dst``, ``key`` and ``nbytes`` the size in bytes;
- ``calibration``: a measured window of a model; ``predicted_s`` is the op-sum prediction it
  is compared with;
- ``cut``: the wall time of such a window cut in two, its halves run in a row; ``whole_s``
  is its wall time whole, timed alternately with them (see :mod:`autopart.costmodel.cuts`);
- ``cold``: the wall time of such a window entered after the host worked elsewhere for a
  few milliseconds; ``warm_s`` is its wall time back to back (the cut row's ``whole_s``);
- ``enqueue``: the host's wall time to enqueue an op's one-node subgraph, for codegens
  timed by device events, whose kernels can be quicker than the host hands them out;
- ``alone``: a calibration window compiled as a plan's only partition, on targets whose
  codegen then uses other settings (:meth:`~autopart.targets.codegen.Codegen.alone_differs`);
  ``shared_s`` is the same window compiled as one partition among several, timed just
  before it (see :mod:`autopart.costmodel.alone`);
- ``partition``: a candidate plan's partition compiled and timed whole, as the plan runs
  it; ``key`` is the digest of the exported subgraph and how it is compiled (see
  :mod:`autopart.costmodel.partitions`);
- ``speed``: the machine's speed when rows were measured, a fixed probe's time on one core
  (target ``cpu/0@…``) or on every core at once (``cpu@…``); ``key`` is the time (see
  :mod:`autopart.profile.speed`).

The named reference columns (:data:`~autopart.costmodel.measurements.REFERENCE_COLUMNS`)
are empty on every other kind. The file proves it is whole: its header and each row carry a
check, and a row that fails its check is dropped and reported (:mod:`.integrity`). Files of
schema version 1 held all five reference columns in one, ``reference_s``, and no ``passes``;
they are read by moving ``reference_s`` to the column of the row's kind and taking
``passes`` from the profile's recorded settings (:func:`migrate_v1`); files of version 2
lacked ``shared_s`` (and ``alone`` rows), and files up to version 3 lacked ``partial`` and
the checks. All are written back as version 4.
Rows are unique by (kind, target, key); when two profiles of one machine merge, the newer
measurement wins. Files are never pickled, never half-written, and a file that cannot be
read is reported, never overwritten.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from autopart.costmodel.measurements import REFERENCE_COLUMNS, Measurement, RowKind
from autopart.errors import AutopartError, ProfileError
from autopart.io import atomic_write_bytes, locked, read_document, remove_leftovers
from autopart.ir.target import VirtualDevice
from autopart.profile.integrity import (
    SCHEMA,
    SCHEMA_VERSION,
    DroppedRows,
    parse_cells,
    read_text,
    write_text,
)
from autopart.profile.timing import TIMING

__all__ = ["COLUMNS", "SCHEMA", "SCHEMA_VERSION", "DroppedRows", "Profile", "migrate_v1", "now"]
TIMINGS = ["median_s", "q1_s", "q3_s", "min_s", "max_s"]
MAX_TIMING_S = 3600.0  # no one measurement the profiler takes lasts an hour
MAY_TAKE_NO_TIME = (RowKind.OP, RowKind.LAYOUT, RowKind.LAUNCH, RowKind.UNSUPPORTED)
REFERENCES = list(REFERENCE_COLUMNS.values())
COLUMNS = [
    "kind", "target", "key", "op_type", *TIMINGS, "runs", "passes", "timer", "nbytes",
    *REFERENCES, "measured_at", "partial",
]  # fmt: skip
COLUMNS_V1 = [
    "kind", "target", "key", "op_type", *TIMINGS, "runs", "timer", "nbytes", "reference_s",
    "measured_at",
]  # fmt: skip
COLUMNS_V3 = [column for column in COLUMNS if column != "partial"]
COLUMNS_V2 = [column for column in COLUMNS_V3 if column != "shared_s"]
FLOATS = [*TIMINGS, *REFERENCES, "reference_s"]
COUNTS = ["runs", "passes", "nbytes"]
KEY = ["kind", "target", "key"]
V1_ONE_PASS = (RowKind.FUSED,)  # schema-1 profilers timed these in one pass whatever the settings


def now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


class Profile:
    """Measurements of one machine: a table of rows plus metadata (fingerprint, settings…).

    ``meta["fingerprint"]`` identifies the machine; ``meta["machine"]`` describes its devices.
    Methods taking a ``kind`` take a :class:`RowKind` or its value, and raise
    ``ValueError`` for anything else. ``dropped`` says what reading its file dropped.
    """

    def __init__(self, meta: dict[str, Any], table: pd.DataFrame | None = None) -> None:
        if "fingerprint" not in meta:
            raise ProfileError("a profile needs a machine fingerprint")
        self.meta = meta
        self.table = _empty() if table is None else table
        self._index: dict[tuple[str, str, str], int] | None = None
        self.dropped = DroppedRows()

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the machine these measurements were taken on."""
        return str(self.meta["fingerprint"])

    # -- reading ---------------------------------------------------------------------------
    def _lookup(self) -> dict[tuple[str, str, str], int]:
        if self._index is None:
            keys = zip(self.table["kind"], self.table["target"], self.table["key"], strict=True)
            self._index = {key: i for i, key in enumerate(keys)}
        return self._index

    def row(self, kind: RowKind, target: str, key: str = "") -> dict[str, Any] | None:
        """The row stored under (kind, target, key), or ``None``."""
        position = self._lookup().get((RowKind(kind), target, key))
        return None if position is None else self.table.iloc[position].to_dict()

    def has(self, kind: RowKind, target: str, key: str = "") -> bool:
        """Whether a measurement is stored under (kind, target, key)."""
        return (RowKind(kind), target, key) in self._lookup()

    def complete(self, kind: RowKind, target: str, key: str, passes: int) -> bool:
        """Whether (kind, target, key) is stored with samples of at least ``passes`` passes.

        A row recorded after only some of its passes (the profiler was killed, or its
        budget ran out) is stored, and priced, but is not complete.
        """
        row = self.row(kind, target, key)
        return row is not None and int(row["passes"]) >= passes

    def passes_asked(self) -> int:
        """The passes its profiler asks of a row (its recorded settings, else the default)."""
        settings = self.meta.get("settings")
        asked = settings.get("passes") if isinstance(settings, dict) else None
        return max(asked if isinstance(asked, int) else TIMING.passes, 1)

    def measurement(self, kind: RowKind, target: str, key: str = "") -> Measurement | None:
        """The stored :class:`Measurement` under (kind, target, key), or ``None``."""
        row = self.row(kind, target, key)
        if row is None:
            return None
        return Measurement(
            *(float(row[column]) for column in TIMINGS),
            int(row["runs"]),
            str(row["timer"]),
            int(row["passes"]),
        )

    def rows(self, kind: RowKind, target: str | None = None) -> pd.DataFrame:
        """Every row of ``kind`` (optionally of one ``target``)."""
        selected = self.table["kind"] == RowKind(kind)
        if target is not None:
            selected &= self.table["target"] == target
        return self.table[selected]

    def targets(self) -> list[str]:
        """Targets with at least one op measurement."""
        return sorted(set(self.rows(RowKind.OP)["target"]))

    # -- writing ---------------------------------------------------------------------------
    def record(
        self,
        kind: RowKind,
        target: str,
        key: str,
        measurement: Measurement,
        op_type: str = "",
        nbytes: int = 0,
        *,
        kernel_s: float = math.nan,
        producer_s: float = math.nan,
        predicted_s: float = math.nan,
        whole_s: float = math.nan,
        warm_s: float = math.nan,
        shared_s: float = math.nan,
        partial: str = "",
    ) -> None:
        """Store (or replace) one measurement, with the reference column of its kind.

        ``partial`` holds the samples of its passes while it lacks some (see the module
        docstring). Raises ``ValueError`` for an unknown kind, or for a reference column
        given to a kind that has another (or none).
        """
        kind = RowKind(kind)
        given = {
            "kernel_s": kernel_s, "producer_s": producer_s, "predicted_s": predicted_s,
            "whole_s": whole_s, "warm_s": warm_s, "shared_s": shared_s,
        }  # fmt: skip
        stray = [name for name, value in given.items() if not math.isnan(value)]
        if any(name != REFERENCE_COLUMNS.get(kind) for name in stray):
            raise ValueError(f"{kind} rows have no {', '.join(stray)} column")
        row = {
            "kind": kind.value,
            "target": target,
            "key": key,
            "op_type": op_type,
            **{column: float(getattr(measurement, column)) for column in TIMINGS},
            "runs": int(measurement.runs),
            "passes": int(measurement.passes),
            "timer": measurement.timer,
            "nbytes": int(nbytes),
            **{name: float(value) for name, value in given.items()},
            "measured_at": now(),
            "partial": partial,
        }
        position = self._lookup().get((kind, target, key))
        if position is None:
            self.table.loc[len(self.table)] = row
            self._lookup()[(kind, target, key)] = len(self.table) - 1
        else:
            self.table.iloc[position] = pd.Series(row)[COLUMNS].to_numpy()

    def merge(self, other: Profile) -> Profile:
        """A new profile holding both tables; the newer row wins on equal keys.

        Of two rows measured in the same second, this profile's wins (saving a profile
        merges it with the file, whose copy of a row may be from earlier in that second).
        Both must come from the same machine (equal fingerprints).
        """
        if other.fingerprint != self.fingerprint:
            raise ProfileError(
                f"cannot merge profiles of different machines "
                f"({self.fingerprint} and {other.fingerprint})"
            )
        table = pd.concat([other.table, self.table], ignore_index=True)
        table = table.sort_values("measured_at", kind="stable")
        table = table.drop_duplicates(KEY, keep="last").sort_values(KEY, kind="stable")
        meta = {**other.meta, **self.meta}
        created = [str(p.meta.get("created", now())) for p in (self, other)]
        meta["created"] = min(created)
        return Profile(meta, table.reset_index(drop=True))

    def to_text(self) -> str:
        """The file contents: header lines, then the CSV table (schema version 4, checked)."""
        rows = self.table.sort_values(KEY, kind="stable")[COLUMNS].itertuples(index=False)
        return write_text({**self.meta, "updated": now()}, COLUMNS, rows)

    def save(self, path: str | Path) -> None:
        """Write atomically, merging with what another process saved there meanwhile.

        Temporary files that saves killed midway left beside the file are removed
        (:func:`autopart.io.remove_leftovers`).
        """
        path = Path(path)
        with locked(path):  # serialise the read-merge-write of processes saving here
            remove_leftovers(path)  # of saves killed midway: no one else writes there now
            merged = self.merge(Profile.load(path)) if path.exists() else self
            atomic_write_bytes(path, merged.to_text().encode())
        self.table = merged.table
        self._index = None

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        """Read a profile file; raise :class:`ProfileError` naming what is wrong with it.

        Rows that fail their check are dropped; :attr:`dropped` says how many and why.
        """
        text = read_document(path, "profile", ProfileError, keep_undecodable=True)
        return cls.from_text(text, str(path))

    @classmethod
    def from_text(cls, text: str, origin: str = "<text>") -> Profile:
        """Parse the contents of a profile file (see :meth:`to_text`).

        Rows that fail their check are dropped (:mod:`autopart.profile.integrity`); files of
        schema versions 1 to 3 are migrated in memory (:func:`migrate_v1`).
        """
        version, meta, cells, dropped = read_text(text, origin)
        expected = {"1": COLUMNS_V1, "2": COLUMNS_V2, "3": COLUMNS_V3}.get(version, COLUMNS)
        missing = [column for column in expected if column not in cells.columns]
        if missing:
            raise ProfileError(f"{origin} is corrupt: columns {', '.join(missing)} are missing")
        table = parse_cells(cells[expected], FLOATS, COUNTS, origin)
        if version == "2":
            table = table.assign(shared_s=np.nan)
        _check_table(table, origin)
        if version == "1":
            table = migrate_v1(table, meta)
        if version in ("1", "2", "3"):
            table = table.assign(partial=pd.Series("", table.index, dtype=object))
        profile = cls(meta, table[COLUMNS].reset_index(drop=True))
        profile.dropped = dropped
        return profile


def migrate_v1(table: pd.DataFrame, meta: dict[str, Any]) -> pd.DataFrame:
    """A schema-1 table in the columns of schema 3 (schema 4 adds ``partial``).

    ``reference_s`` moves to the reference column of each row's kind. ``passes`` is what the
    profiler that wrote the file asked for (``meta["settings"]["passes"]``; 1 if it
    recorded none, as profilers before passes), 1 for the kinds it timed in one pass, and 0
    for ``unsupported`` rows. A schema-1 row cut short by a kill cannot be told apart.
    """
    table = table.copy()
    kinds = table["kind"]
    for kind, column in REFERENCE_COLUMNS.items():
        table[column] = table["reference_s"].where(kinds == kind, np.nan)
    settings = meta.get("settings")
    asked = settings.get("passes", 1) if isinstance(settings, dict) else 1
    passes = np.where(kinds.isin(V1_ONE_PASS), 1, int(asked))
    table["passes"] = np.where(kinds == RowKind.UNSUPPORTED, 0, passes).astype("int64")
    return table[COLUMNS_V3]


def _check_table(table: pd.DataFrame, origin: str) -> None:
    """Raise :class:`ProfileError` for missing or negative timings, or unknown kinds."""
    try:
        numeric = table[TIMINGS].astype(float)
    except ValueError as error:
        raise ProfileError(f"{origin} is corrupt: {error}") from None
    if numeric.isna().any().any() or (numeric < 0).any().any():
        raise ProfileError(f"{origin} is corrupt: a timing is missing or negative")
    unknown = sorted(set(table["kind"]) - {kind.value for kind in RowKind})
    if unknown:
        raise ProfileError(f"{origin} is corrupt: unknown row kinds {unknown}")
    measured = table["kind"] != RowKind.UNSUPPORTED.value
    if not (numeric[measured] <= MAX_TIMING_S).all().all():
        raise ProfileError(f"{origin} is corrupt: a time is infinite or over {MAX_TIMING_S:.0f} s")
    # a view, a missing layout conversion or an empty probe under a profiler take no kernel
    # time, nor does a fused pair of views on a device clock; copies, windows, cuts, cold
    # entries and fused pairs are timed whole
    device_fused = (table["kind"] == RowKind.FUSED.value) & (table["timer"] != "wall")
    timed = ~table["kind"].isin([kind.value for kind in MAY_TAKE_NO_TIME]) & ~device_fused
    if not (numeric["median_s"][timed] > 0).all():
        raise ProfileError(f"{origin} is corrupt: a copy, window or fused pair took no time")
    for column in ("runs", "nbytes", *(["passes"] if "passes" in table else [])):
        counts = pd.to_numeric(table[column], errors="coerce")
        if counts.isna().any() or (counts < 0).any():
            raise ProfileError(f"{origin} is corrupt: a {column} count is missing or negative")
    if not (pd.to_numeric(table["runs"])[measured] > 0).all():
        raise ProfileError(f"{origin} is corrupt: a measured row has no runs")
    references = [c for c in REFERENCES if c in table]
    values = table[references].astype(float) if references else pd.DataFrame()
    if (np.isinf(values) | (values < 0)).any().any() or (values > MAX_TIMING_S).any().any():
        raise ProfileError(f"{origin} is corrupt: a reference time is infinite or out of range")
    for kind, target in zip(table["kind"], table["target"], strict=True):
        _check_target(kind, target, origin)


def _check_target(kind: str, target: str, origin: str) -> None:
    """Raise :class:`ProfileError` unless ``target`` is a full target (a pair for copies)."""
    copy = kind == RowKind.TRANSFER.value
    names = target.split("->") if copy else [target]
    try:
        parsed = [VirtualDevice.parse(name) for name in names if name]
    except AutopartError:
        parsed = []
    complete = all(t.device and (t.codegen is None) == copy for t in parsed)
    if len(parsed) != (2 if copy else 1) or len(names) != len(parsed) or not complete:
        raise ProfileError(f"{origin} is corrupt: {target!r} is not a target of a {kind} row")


def _empty() -> pd.DataFrame:
    table = pd.DataFrame({column: pd.Series(dtype=object) for column in COLUMNS})
    return table
