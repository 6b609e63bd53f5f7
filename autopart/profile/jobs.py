"""Measurement jobs: what one job is, and what a kind of job plans from and measures with.

A :class:`JobKind` knows which of its jobs a graph on some targets needs that a profile
lacks (:meth:`JobKind.plan`, given a :class:`Planning`) and how to take one pass of one
job's samples and record them (:meth:`JobKind.measure`, given a :class:`Measuring`). The
kinds themselves are in :mod:`autopart.profile.kinds`.

A row counts as measured only once all its passes are in
(:meth:`autopart.profile.store.Profile.complete`): the profiler records every row after each
pass, so that a checkpoint keeps what was measured, but a rerun measures a row cut short by
a kill or a spent budget again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from autopart.costmodel.measurements import RowKind
from autopart.ir.graph import Graph, Node
from autopart.profile.store import Profile
from autopart.profile.timing import TimingSettings, median_of_passes, summarise_passes
from autopart.targets.devices import Machine
from autopart.targets.resolve import ResolvedTarget

SamplesByPass = dict[tuple[str, str, str], list[list[float]]]


@dataclass
class Job:
    """One thing to measure: an op, a fusion pair, a window, a launch, or a copy size.

    ``kind`` is the row kind the job is named after (:class:`JobKind` ``.kind``); ops,
    pairs and windows list their ``nodes``; copies name a device pair as ``target`` and
    their size in ``nbytes``.
    """

    kind: RowKind
    target: str
    key: str
    label: str
    nodes: list[Node] = field(default_factory=list)
    nbytes: int = 0


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


@dataclass
class Measuring:
    """What :meth:`JobKind.measure` measures with, and the samples of the passes so far.

    ``settings`` are the profiler's whole budget per measurement; :attr:`per_pass` one
    pass's share. ``values`` are the graph's intermediate values (numpy reference), empty
    when no job needs them. ``taken`` holds every pass's samples so far, pass by pass, by
    (row kind or reference column, target, key). ``compiled`` keeps what a kind compiles
    once for all its passes, by (target, key): a whole partition, whose compile can take
    seconds.
    """

    profile: Profile
    machine: Machine
    graph: Graph
    values: dict[str, np.ndarray]
    targets: dict[str, ResolvedTarget]
    settings: TimingSettings
    taken: SamplesByPass = field(default_factory=dict)
    compiled: dict[tuple[str, str], Any] = field(default_factory=dict)

    @property
    def per_pass(self) -> TimingSettings:
        """The settings of one pass (:meth:`TimingSettings.per_pass`)."""
        return self.settings.per_pass()

    def add_pass(self, name: str, target: str, key: str, samples: list[float]) -> float:
        """Add one pass's ``samples`` of a reference time; the median of its passes so far."""
        passes = self.taken.setdefault((name, target, key), [])
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
        """Add one pass's ``samples`` of row (kind, job's target, key) and store the row.

        The row summarises every pass so far (:func:`summarise_passes`; its ``passes``
        counts them). ``references`` are its kind's reference column, by name.
        """
        passes = self.taken.setdefault((kind, job.target, key), [])
        passes.append(samples)
        measured = summarise_passes(passes, timer)
        self.profile.record(kind, job.target, key, measured, op_type, job.nbytes, **references)


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

    def plan(self, planning: Planning) -> list[Job]:
        """The jobs of this kind that ``planning.profile`` lacks; counts what it reuses."""
        raise NotImplementedError

    def measure(self, job: Job, measuring: Measuring) -> None:
        """Take one pass's samples of ``job`` and record its rows in ``measuring.profile``."""
        raise NotImplementedError
