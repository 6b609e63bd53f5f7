"""Saved profiles: one readable CSV table per machine, with a JSON header, written atomically.

A profile file looks like::

    # autopart.profile 1
    # {"fingerprint": "…", "machine": {…}, "created": "…", "settings": {…}, …}
    kind,target,key,op_type,median_s,q1_s,q3_s,min_s,max_s,runs,timer,nbytes,reference_s,measured_at
    op,cpu@onnxruntime,"Conv:11 {…} (float32[1x64x56x56],…) -> (…)",Conv,0.00021,…

Row kinds: ``op`` (``key`` is the op signature), ``unsupported`` (a signature the target
cannot run), ``layout`` (the layout conversions of an op's one-node subgraph;
``reference_s`` is that op's own kernel time in the same runs), ``fused`` (a producer and
its consumer timed together; ``key`` joins both signatures; ``reference_s`` is the producer
alone, timed in turn with the pair in the same runs), ``launch`` (entering one
partition: ``key`` ``wall`` around ``run`` and synchronisation, ``timed`` as ``run_timed``
reports it, and on layout-converting codegens ``profiled``, the probe's kernel time under
the codegen's own profiler), ``transfer`` (``target`` is ``src->dst``, ``key`` the size in
bytes), ``calibration`` (a measured subgraph; ``reference_s`` is the op-sum prediction it
is compared with), ``cut`` (the wall time of such a subgraph cut in two, its halves run in a
row; ``reference_s`` is its wall time whole; see :mod:`autopart.costmodel.cuts`), ``cold``
(the wall time of such a subgraph entered after the host worked elsewhere for a few
milliseconds; ``reference_s`` is its wall time back to back) and ``enqueue`` (the host's
wall time to enqueue an op's one-node subgraph, for codegens timed by device events, whose
kernels can be quicker than the host hands them out).
Rows are unique by (kind, target, key); when two profiles of one machine merge, the newer
measurement wins. Files are never pickled, never half-written, and a file that cannot be
read is reported, never overwritten.
"""

from __future__ import annotations

import fcntl
import io
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from autopart.costmodel.measurements import Measurement
from autopart.errors import ProfileError
from autopart.io import atomic_write_bytes

SCHEMA = "autopart.profile"
SCHEMA_VERSION = 1
COLUMNS = [
    "kind",
    "target",
    "key",
    "op_type",
    "median_s",
    "q1_s",
    "q3_s",
    "min_s",
    "max_s",
    "runs",
    "timer",
    "nbytes",
    "reference_s",
    "measured_at",
]
KEY = ["kind", "target", "key"]
KINDS = (
    "op", "unsupported", "layout", "fused", "launch", "transfer", "calibration", "cut", "cold",
    "enqueue",
)  # fmt: skip


def now() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


class Profile:
    """Measurements of one machine: a table of rows plus metadata (fingerprint, settings…).

    ``meta["fingerprint"]`` identifies the machine; ``meta["machine"]`` describes its devices.
    """

    def __init__(self, meta: dict[str, Any], table: pd.DataFrame | None = None) -> None:
        if "fingerprint" not in meta:
            raise ProfileError("a profile needs a machine fingerprint")
        self.meta = meta
        self.table = _empty() if table is None else table
        self._index: dict[tuple[str, str, str], int] | None = None

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

    def row(self, kind: str, target: str, key: str = "") -> dict[str, Any] | None:
        """The row stored under (kind, target, key), or ``None``."""
        position = self._lookup().get((kind, target, key))
        return None if position is None else self.table.iloc[position].to_dict()

    def has(self, kind: str, target: str, key: str = "") -> bool:
        """Whether a measurement is stored under (kind, target, key)."""
        return (kind, target, key) in self._lookup()

    def measurement(self, kind: str, target: str, key: str = "") -> Measurement | None:
        """The stored :class:`Measurement` under (kind, target, key), or ``None``."""
        row = self.row(kind, target, key)
        if row is None:
            return None
        return Measurement(
            float(row["median_s"]),
            float(row["q1_s"]),
            float(row["q3_s"]),
            float(row["min_s"]),
            float(row["max_s"]),
            int(row["runs"]),
            str(row["timer"]),
        )

    def rows(self, kind: str, target: str | None = None) -> pd.DataFrame:
        """Every row of ``kind`` (optionally of one ``target``)."""
        selected = self.table["kind"] == kind
        if target is not None:
            selected &= self.table["target"] == target
        return self.table[selected]

    def targets(self) -> list[str]:
        """Targets with at least one op measurement."""
        return sorted(set(self.rows("op")["target"]))

    # -- writing ---------------------------------------------------------------------------
    def record(
        self,
        kind: str,
        target: str,
        key: str,
        measurement: Measurement,
        op_type: str = "",
        nbytes: int = 0,
        reference_s: float = math.nan,
    ) -> None:
        """Store (or replace) one measurement."""
        if kind not in KINDS:
            raise ValueError(f"unknown row kind {kind!r}")
        row = {
            "kind": kind,
            "target": target,
            "key": key,
            "op_type": op_type,
            "median_s": float(measurement.median_s),
            "q1_s": float(measurement.q1_s),
            "q3_s": float(measurement.q3_s),
            "min_s": float(measurement.min_s),
            "max_s": float(measurement.max_s),
            "runs": int(measurement.runs),
            "timer": measurement.timer,
            "nbytes": int(nbytes),
            "reference_s": float(reference_s),
            "measured_at": now(),
        }
        position = self._lookup().get((kind, target, key))
        if position is None:
            self.table.loc[len(self.table)] = row
            self._lookup()[(kind, target, key)] = len(self.table) - 1
        else:
            self.table.iloc[position] = pd.Series(row)[COLUMNS].to_numpy()

    def merge(self, other: Profile) -> Profile:
        """A new profile holding both tables; the newer row wins on equal keys.

        Both must come from the same machine (equal fingerprints).
        """
        if other.fingerprint != self.fingerprint:
            raise ProfileError(
                f"cannot merge profiles of different machines "
                f"({self.fingerprint} and {other.fingerprint})"
            )
        table = pd.concat([self.table, other.table], ignore_index=True)
        table = table.sort_values("measured_at", kind="stable")
        table = table.drop_duplicates(KEY, keep="last").sort_values(KEY, kind="stable")
        meta = {**other.meta, **self.meta}
        created = [str(p.meta.get("created", now())) for p in (self, other)]
        meta["created"] = min(created)
        return Profile(meta, table.reset_index(drop=True))

    def to_text(self) -> str:
        """The file contents: the two header lines, then the CSV table."""
        meta = {**self.meta, "updated": now()}
        buffer = io.StringIO()
        buffer.write(f"# {SCHEMA} {SCHEMA_VERSION}\n")
        buffer.write(f"# {json.dumps(meta, sort_keys=True, default=str)}\n")
        self.table.sort_values(KEY, kind="stable").to_csv(buffer, index=False)
        return buffer.getvalue()

    def save(self, path: str | Path) -> None:
        """Write atomically, merging with what another process saved there meanwhile."""
        path = Path(path)
        with _locked(path):
            merged = self.merge(Profile.load(path)) if path.exists() else self
            atomic_write_bytes(path, merged.to_text().encode())
        self.table = merged.table
        self._index = None

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        """Read a profile file; raise :class:`ProfileError` naming what is wrong with it."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ProfileError(f"profile not found: {path}") from None
        except (OSError, UnicodeDecodeError) as error:
            raise ProfileError(f"profile {path} cannot be read: {error}") from None
        return cls.from_text(text, str(path))

    @classmethod
    def from_text(cls, text: str, origin: str = "<text>") -> Profile:
        """Parse the contents of a profile file (see :meth:`to_text`)."""
        lines = text.split("\n", 2)
        if len(lines) < 3 or not lines[0].startswith(f"# {SCHEMA} "):
            raise ProfileError(f"{origin} is not an autopart profile (no '# {SCHEMA}' header)")
        version = lines[0].removeprefix(f"# {SCHEMA} ").strip()
        if version != str(SCHEMA_VERSION):
            raise ProfileError(
                f"{origin} has profile schema version {version!r}; this autopart reads "
                f"version {SCHEMA_VERSION}"
            )
        try:
            meta = json.loads(lines[1].removeprefix("#"))
            table = pd.read_csv(
                io.StringIO(lines[2]),
                dtype=_DTYPES,
                keep_default_na=False,
                na_values={"reference_s": ["", "nan"]},
            )
        except (
            json.JSONDecodeError,
            ValueError,
            pd.errors.ParserError,
            pd.errors.EmptyDataError,
        ) as error:
            raise ProfileError(f"{origin} is corrupt: {error}") from None
        if not isinstance(meta, dict) or "fingerprint" not in meta:
            raise ProfileError(f"{origin} is corrupt: its header has no machine fingerprint")
        missing = [column for column in COLUMNS if column not in table.columns]
        if missing:
            raise ProfileError(f"{origin} is corrupt: columns {', '.join(missing)} are missing")
        table = table[COLUMNS]
        try:
            numeric = table[["median_s", "q1_s", "q3_s", "min_s", "max_s"]].astype(float)
        except ValueError as error:
            raise ProfileError(f"{origin} is corrupt: {error}") from None
        if numeric.isna().any().any() or (numeric < 0).any().any():
            raise ProfileError(f"{origin} is corrupt: a timing is missing or negative")
        unknown = sorted(set(table["kind"]) - set(KINDS))
        if unknown:
            raise ProfileError(f"{origin} is corrupt: unknown row kinds {unknown}")
        return cls(meta, table.reset_index(drop=True))


_DTYPES = {
    "kind": str,
    "target": str,
    "key": str,
    "op_type": str,
    "timer": str,
    "measured_at": str,
    **dict.fromkeys(("median_s", "q1_s", "q3_s", "min_s", "max_s", "reference_s"), "float64"),
    **dict.fromkeys(("runs", "nbytes"), "int64"),
}


def _empty() -> pd.DataFrame:
    table = pd.DataFrame({column: pd.Series(dtype=object) for column in COLUMNS})
    return table


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise read-merge-write cycles of processes saving the same profile."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
