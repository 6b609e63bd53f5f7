"""Measurement jobs: what one job is, and what a kind of job plans from and measures with.

A :class:`JobKind` knows which of its jobs a graph on some targets needs that a profile
lacks (:meth:`JobKind.plan`, given a :class:`Planning`) and how to take one pass of one
job's samples and record them (:meth:`JobKind.measure`, given a :class:`Measuring`). The
kinds themselves are in :mod:`autopart.profile.kinds`.

A row counts as measured only once all its passes are in
(:meth:`autopart.profile.store.Profile.complete`). The profiler records every row after each
pass, with the samples of its passes so far (its ``partial`` column), so that a checkpoint
keeps what was measured: a job whose rows were cut short after k of their n passes (a kill,
a spent budget) takes only the n - k passes it lacks in a later run, and its rows summarise
the samples of all n. Under ``--refresh`` a complete saved row is replaced only once its new
measurement is complete.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from autopart.costmodel.measurements import REFERENCE_COLUMNS, RowKind
from autopart.ir.graph import Graph, Node
from autopart.profile.samplers import CompiledCache
from autopart.profile.store import Profile
from autopart.profile.timing import TimingSettings, median_of_passes, summarise_passes
from autopart.targets.devices import Machine
from autopart.targets.resolve import ResolvedTarget

SamplesByPass = dict[tuple[str, str, str], list[list[float]]]
SAMPLES = "samples"  # a row's own samples in its ``partial`` record
SAMPLED_REFERENCES = {"kernel_s": RowKind.LAYOUT, "producer_s": RowKind.FUSED,
                      "whole_s": RowKind.CUT}  # fmt: skip
"""Reference columns taken pass by pass (:meth:`Measuring.add_pass`), by the row holding them."""


@dataclass
class Job:
    """One thing to measure: an op, a fusion pair, a window, a launch, or a copy size.

    ``kind`` is the row kind the job is named after (:class:`JobKind` ``.kind``); ops,
    pairs and windows list their ``nodes``; copies name a device pair as ``target`` and
    their size in ``nbytes``. The job takes ``passes`` passes in full, of which its rows
    already hold ``done`` (resumed from a run cut short; 0 for a job measured anew). A
    partition whose nodes mix precisions gives each node's in ``precisions``.
    """

    kind: RowKind
    target: str
    key: str
    label: str
    nodes: list[Node] = field(default_factory=list)
    nbytes: int = 0
    passes: int = 1
    done: int = 0
    precisions: tuple[str, ...] = ()


@dataclass
class Planning:
    """What :meth:`JobKind.plan` reads, and the counts it adds to.

    ``passes`` is how many passes the profiler takes of every job but one-pass ones; with
    ``refresh`` no stored row counts as measured (but ``unsupported`` marks stand).
    """

    graph: Graph
    targets: list[ResolvedTarget]
    profile: Profile
    refresh: bool = False
    passes: int = 1
    reused: int = 0
    unsupported: int = 0

    def done(self, kind: RowKind, target: str, key: str, passes: int) -> bool:
        """Whether (kind, target, key) is stored with all its ``passes`` (never on refresh)."""
        return not self.refresh and self.profile.complete(kind, target, key, passes)

    def resumable(self, job: Job, rows: list[tuple[RowKind, str]]) -> int:
        """How many of ``job``'s passes all its ``rows`` (kind, key) hold the samples of.

        0 on refresh, for one-pass jobs, and where any row lacks its samples.
        """
        if self.refresh or job.passes <= 1:
            return 0
        held = [
            len(saved_passes(self.profile, kind, job.target, key).get(SAMPLES, []))
            for kind, key in rows
        ]
        return min([*held, job.passes - 1]) if held else 0


def saved_passes(profile: Profile, kind: RowKind, target: str, key: str) -> dict[str, Any]:
    """The samples of each pass a row cut short holds (its ``partial`` column), by series.

    ``samples`` holds the row's own; a reference column taken pass by pass its own. Empty
    when the row is absent or complete, or its record does not agree with its ``passes``.
    """
    row = profile.row(kind, target, key)
    if row is None or not row["partial"]:
        return {}
    try:
        record = json.loads(row["partial"])
    except ValueError:
        return {}
    passes = int(row["passes"])
    wanted = {SAMPLES} | {name for name, owner in SAMPLED_REFERENCES.items() if owner == kind}
    if not isinstance(record, dict) or set(record) != wanted or passes < 1:
        return {}
    if not all(_series(record[name], passes) for name in wanted):
        return {}
    return record


def _series(passes: Any, count: int) -> bool:
    """Whether ``passes`` is ``count`` lists of finite non-negative seconds, none empty."""
    return (
        isinstance(passes, list)
        and len(passes) == count
        and all(
            isinstance(samples, list)
            and samples
            and all(
                isinstance(value, int | float) and math.isfinite(value) and value >= 0
                for value in samples
            )
            for samples in passes
        )
    )


@dataclass
class Measuring:
    """What :meth:`JobKind.measure` measures with, and the samples of the passes so far.

    ``settings`` are the profiler's whole budget per measurement; :attr:`per_pass` one
    pass's share. ``values`` are the graph's intermediate values (numpy reference), empty
    when no job needs them. ``taken`` holds every pass's samples so far, pass by pass, by
    (row kind or reference column, target, key); a resumed job's start with the passes
    its rows hold. With ``refresh``, a complete saved row stands until its new
    measurement is complete. Rows are recorded in the profile at :meth:`commit`, once a
    job's pass is over, so that an interrupt in the middle of one leaves its rows alike.
    ``compiled`` keeps what a kind compiles once for all its passes, by (target, key): a
    whole partition, whose compile can take seconds (within its bound, :class:`CompiledCache`).
    """

    profile: Profile
    machine: Machine
    graph: Graph
    values: Mapping[str, Any]
    targets: dict[str, ResolvedTarget]
    settings: TimingSettings
    taken: SamplesByPass = field(default_factory=dict)
    refresh: bool = False
    pending: list[Callable[[], None]] = field(default_factory=list)
    compiled: CompiledCache = field(default_factory=CompiledCache)

    @property
    def per_pass(self) -> TimingSettings:
        """The settings of one pass (:meth:`TimingSettings.per_pass`)."""
        return self.settings.per_pass()

    def _passes(self, series: str, row: RowKind, job: Job, key: str) -> list[list[float]]:
        """The samples so far of ``series`` of row (``row``, job's target, key).

        The first time, those of the ``job.done`` passes the saved row holds.
        """
        name = row if series == SAMPLES else series
        passes = self.taken.get((name, job.target, key))
        if passes is None:
            saved = saved_passes(self.profile, row, job.target, key) if job.done else {}
            passes = [list(samples) for samples in saved.get(series, [])[: job.done]]
            self.taken[(name, job.target, key)] = passes
        return passes

    def add_pass(self, name: str, job: Job, key: str, samples: list[float]) -> float:
        """Add one pass's ``samples`` of a reference time; the median of its passes so far.

        ``name`` is one of :data:`SAMPLED_REFERENCES`.
        """
        passes = self._passes(name, SAMPLED_REFERENCES[name], job, key)
        passes.append(samples)
        return median_of_passes(passes)

    def record(
        self,
        kind: RowKind,
        job: Job,
        key: str,
        samples: list[float],
        timer: str,
        op_type: str = "",
        **references: float,
    ) -> None:
        """Add one pass's ``samples`` of row (kind, job's target, key); store it at commit.

        The row summarises every pass so far (:func:`summarise_passes`; its ``passes``
        counts them) and, until it has all ``job.passes``, keeps their samples.
        ``references`` are its kind's reference column, by name.
        """
        passes = self._passes(SAMPLES, kind, job, key)
        passes.append(samples)
        measured = summarise_passes(passes, timer)
        complete = len(passes) >= job.passes
        if not complete and self.refresh and self.profile.complete(kind, job.target, key, 1):
            return  # the saved row stands until the new one is complete
        partial = "" if complete else self._partial(kind, job.target, key)
        self.pending.append(
            functools.partial(
                self.profile.record, kind, job.target, key, measured, op_type, job.nbytes,
                partial=partial, **references,
            )
        )  # fmt: skip

    def commit(self) -> None:
        """Record in the profile the rows of the job pass just taken."""
        for record in self.pending:
            record()
        self.pending.clear()

    def _partial(self, kind: RowKind, target: str, key: str) -> str:
        """The ``partial`` record of a row: the samples of its passes so far (JSON)."""
        record = {SAMPLES: self.taken[(kind, target, key)]}
        reference = REFERENCE_COLUMNS.get(kind)
        if reference in SAMPLED_REFERENCES:
            record[reference] = self.taken.get((reference, target, key), [])
        return json.dumps(record, separators=(",", ":"))


class JobKind:
    """A kind of measurement job: which jobs a graph needs, and how to measure one.

    ``kind`` names the jobs' main row kind. Jobs of a ``one_pass`` kind answer with a
    difference of two things timed in turn: drift hits both alike, so they take one pass
    with the whole budget (and compile once instead of once per pass). Jobs of a kind that
    ``needs_values`` read the graph's intermediate values.
    """

    kind: ClassVar[RowKind]
    one_pass: ClassVar[bool] = False
    needs_values: ClassVar[bool] = True

    def passes(self, planning: Planning) -> int:
        """How many passes a job of this kind takes in full."""
        return 1 if self.one_pass else planning.passes

    def done(self, planning: Planning, kind: RowKind, target: str, key: str) -> bool:
        """Whether row (kind, target, key), recorded by jobs of this kind, is measured."""
        return planning.done(kind, target, key, self.passes(planning))

    def rows(self, job: Job, planning: Planning) -> list[tuple[RowKind, str]]:
        """The rows (kind, key) that measuring ``job`` records, on ``job.target``."""
        return [(self.kind, job.key)]

    def plan(self, planning: Planning) -> list[Job]:
        """The jobs of this kind that ``planning.profile`` lacks; counts what it reuses."""
        raise NotImplementedError

    def measure(self, job: Job, measuring: Measuring) -> None:
        """Take one pass's samples of ``job`` and record its rows in ``measuring.profile``."""
        raise NotImplementedError
