"""Measuring what every op costs on every target, what launches cost, and what copies cost.

Ops are timed through the codegens' own ``compile`` and ``CompiledSubgraph.run_timed``, the
code the plan executor runs: a one-node subgraph per distinct signature and target, fed with
the real intermediate values of the model (computed once by the numpy reference), placed on
the target's device first. A few windows of the model are timed whole, the same way, to
calibrate op sums against fusion and cache effects (:mod:`autopart.costmodel.calibration`).
OpenCL reports device time from profiling events; codegens with no device clock report wall
time, from which the launch probe's own time is later taken off (see
:mod:`autopart.costmodel.from_profile`). The kinds of job are in :mod:`autopart.profile.kinds`.

Every job (but a fusion pair's, whose producer is timed in turn with it: a ``one_pass``
kind) is measured in ``TimingSettings.passes`` passes through the whole job list, and its
median is the median of the passes' medians, so that a few seconds of host speed-up or
slow-down (common on shared machines) cannot skew one op's timing: on squeezenet's whole
OpenCL device, the ops' first-pass medians summed to 1.12-1.81x their third's in ten
profiles. Everything measured is checkpointed to the profile file every few seconds,
atomically, so an interrupted run (Ctrl-C or a kill) loses at most the last few seconds. A
row counts as measured only once all its passes are in (its ``passes`` column); a row cut
short keeps the samples of the passes it has (its ``partial`` column), so a rerun takes only
the passes it lacks (:mod:`autopart.profile.jobs`), and measures what is missing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autopart.costmodel.alone import alone_saving
from autopart.costmodel.calibration import WindowFactor, calibrate
from autopart.costmodel.costs import PartitionKey
from autopart.costmodel.cuts import cold_cost, cut_cost
from autopart.costmodel.measurements import RowKind
from autopart.costmodel.partitions import partition_key
from autopart.errors import AutopartError
from autopart.host_memory import release_freed_memory, retain_freed_memory
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.plan.partition import boundary
from autopart.profile.jobs import Job, JobKind, Measuring, Planning
from autopart.profile.kinds import BY_KIND, JOB_KINDS, SCREENING_KINDS, UNSUPPORTED
from autopart.profile.speed import stamp
from autopart.profile.store import Profile
from autopart.profile.timing import TimingSettings
from autopart.profile.values import reference_values, release_values
from autopart.progress import Progress
from autopart.targets.devices import Machine
from autopart.targets.resolve import ResolvedTarget, resolve


@dataclass
class ProfileReport:
    """What a profiling run did: new, reused and missing measurements, and calibrations.

    ``new`` counts the jobs measured in full this run, ``missing`` those the budget left
    undone or cut short (a rerun measures them), ``reused`` the ones the profile held;
    ``resumed`` the jobs that took only the passes their saved rows lacked. ``notes`` say
    what reading the profile dropped (rows that failed their check, measured again).
    ``calibrations`` holds each target's subgraph calibration for the profiled graph, and
    ``entries`` each target's (cut, cold entry) costs for it in seconds
    (:mod:`autopart.costmodel.cuts`) and what a lone partition saves per node there
    (:mod:`autopart.costmodel.alone`).
    """

    new: int = 0
    reused: int = 0
    missing: int = 0
    resumed: int = 0
    unsupported: int = 0
    elapsed_s: float = 0.0
    interrupted: bool = False
    targets: list[str] = field(default_factory=list)
    calibrations: list[WindowFactor] = field(default_factory=list)
    entries: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def plan_jobs(
    graph: Graph,
    targets: Sequence[ResolvedTarget],
    profile: Profile,
    refresh: bool = False,
    passes: int = TimingSettings.passes,
    progress: Progress | None = None,
    kinds: Sequence[JobKind] = JOB_KINDS,
) -> tuple[list[Job], int, int]:
    """The measurements ``profile`` lacks for ``graph`` on ``targets`` (all, if ``refresh``).

    Returns the jobs of every kind in ``kinds`` (default
    :data:`~autopart.profile.kinds.JOB_KINDS`), in that order, plus the counts of reused
    measurements and of (signature, target) pairs that the
    target cannot run (recorded as ``unsupported`` rows); ``progress`` hears of each kind
    as it is planned. A row stored with fewer than ``passes`` passes (1 for one-pass
    kinds) is measured again, in the passes it lacks where its samples are saved (each
    job's ``passes`` and ``done``). With ``refresh`` every measurement is planned again in
    full, whatever the profile holds; signatures marked unsupported stay so (that is the
    codegen's answer, not a timing).
    """
    planning = Planning(graph, list(targets), profile, refresh, max(passes, 1))
    jobs: list[Job] = []
    for done, kind in enumerate(kinds):
        if progress is not None:
            progress(0, 0, f"planning {kind.kind.value} jobs ({done}/{len(kinds)} kinds)")
        for job in kind.plan(planning):
            job.passes = kind.passes(planning)
            job.done = planning.resumable(job, kind.rows(job, planning))
            jobs.append(job)
    return jobs, planning.reused, planning.unsupported


SAVE_SHARE = 0.1  # checkpoints take at most this share of a profiler's time


class Profiler:
    """Runs measurement jobs into a profile, checkpointing to ``path`` as it goes.

    A checkpoint is taken every ``checkpoint_s`` seconds, or less often where saving takes
    long: never sooner than ``(1 - SAVE_SHARE) / SAVE_SHARE`` times the last save's
    duration after it, so that saving a large profile (tens of MB: every model of a suite)
    takes at most :data:`SAVE_SHARE` of the time. ``checkpoint_s=0`` saves after every
    step, however long saving takes (for kill tests).
    """

    def __init__(
        self,
        profile: Profile,
        machine: Machine,
        path: Path | None = None,
        settings: TimingSettings | None = None,
        checkpoint_s: float = 3.0,
    ) -> None:
        self.profile = profile
        self.machine = machine
        self.path = path
        self.settings = settings or TimingSettings()
        self.checkpoint_s = checkpoint_s
        self.profile.meta.setdefault("settings", self.settings.to_dict())

    def profile_graph(
        self,
        graph: Graph,
        targets: Sequence[VirtualDevice | str],
        budget_s: float | None = None,
        progress: Progress | None = None,
        refresh: bool = False,
        screen: bool = False,
    ) -> ProfileReport:
        """Measure what ``profile`` lacks to plan ``graph`` over ``targets``.

        With ``screen``, take only the first pass of the ops, launches and copies
        (:data:`~autopart.profile.kinds.SCREENING_KINDS`) that have no row yet: every node
        gets a price on every target at a ``passes``-th of the cost, and a later full
        profile resumes those rows with the passes they lack. No calibration is reported.

        Measuring keeps freed host memory in the process from then on
        (:func:`autopart.host_memory.retain_freed_memory`), as the plans it prices will run.

        With ``refresh``, measure all of it again (:func:`plan_jobs`); each new row replaces
        the old one once it is complete. Stops early once ``budget_s`` seconds were spent
        (jobs left undone or with passes left are counted in ``missing``). On
        KeyboardInterrupt the measurements so far are saved and the interrupt propagates.
        """
        retain_freed_memory()
        started = time.perf_counter()
        resolved = [resolve(t, self.machine) for t in targets]
        passes = max(self.settings.passes, 1)
        jobs, reused, unsupported = plan_jobs(
            graph, resolved, self.profile, refresh, passes, progress,
            SCREENING_KINDS if screen else JOB_KINDS,
        )  # fmt: skip
        report = ProfileReport(reused=reused, unsupported=unsupported)
        report.targets = [str(r.target) for r in resolved]
        report.notes = self.profile.dropped.notes()
        needs_values = any(BY_KIND[job.kind].needs_values for job in jobs)
        if needs_values and progress is not None:
            progress(0, len(jobs), f"the numpy reference's values of {len(graph.nodes)} nodes")
        measuring = Measuring(
            self.profile, self.machine, graph, reference_values(graph) if needs_values else {},
            {str(r.target): r for r in resolved}, self.settings, refresh=refresh,
        )  # fmt: skip
        taken = [0] * len(jobs)  # each job's passes taken
        try:
            self._run(jobs, measuring, taken, started, budget_s, progress, 1 if screen else None)
            if screen:
                return report
            report.calibrations = [calibrate(self.profile, graph, t) for t in report.targets]
            report.entries = {
                t: (
                    cut_cost(self.profile, graph, t),
                    cold_cost(self.profile, graph, t),
                    alone_saving(self.profile, graph, t),
                )
                for t in report.targets
            }
        except KeyboardInterrupt:
            report.interrupted = True
            raise
        finally:
            release_values(measuring.values)
            dropped = bool(self.profile.dropped.count)  # written back without those rows
            self._finish(report, jobs, taken, started, any(taken) or bool(unsupported) or dropped)
        return report

    def profile_partitions(
        self,
        graph: Graph,
        partitions: Sequence[PartitionKey],
        budget_s: float | None = None,
        progress: Progress | None = None,
    ) -> ProfileReport:
        """Measure whole each of ``partitions`` of ``graph`` that the profile lacks.

        ``partitions`` are a candidate plan's partitions, compiled as the plan compiles them
        (``alone``: its only partition; nodes that mix precisions each at its own) and
        timed by wall clock (``partition`` rows keyed by
        :func:`~autopart.costmodel.partitions.partition_key`). Inputs are the seeded random
        inputs the ops were measured with, and the numpy reference's values inside the
        model where a partition starts there. AccuracyPolicy, checkpoints, passes and interrupts
        behave as in :meth:`profile_graph`.
        """
        started = time.perf_counter()
        passes = max(self.settings.passes, 1)
        resolved = {str(spec.target): resolve(spec.target, self.machine) for spec in partitions}
        planning = Planning(graph, list(resolved.values()), self.profile)
        jobs: list[Job] = []
        report = ProfileReport(targets=sorted(resolved))
        for spec in partitions:
            target = str(spec.target)
            nodes = [graph.node(name) for name in spec.names]
            key = partition_key(graph, nodes, spec.alone, spec.precisions)
            if any(job.target == target and job.key == key for job in jobs):
                continue
            if self.profile.complete(RowKind.PARTITION, target, key, passes) or self.profile.has(
                RowKind.UNSUPPORTED, target, key
            ):
                report.reused += 1
                continue
            mixed = " at mixed precisions" if spec.precisions else ""
            label = f"{len(nodes)} ops as one partition on {target}{mixed}"
            job = Job(
                RowKind.PARTITION, target, key, label, nodes, passes=passes,
                precisions=spec.precisions,
            )  # fmt: skip
            job.done = planning.resumable(job, [(RowKind.PARTITION, key)])
            jobs.append(job)
        inside = any(
            name not in graph.inputs for job in jobs for name in boundary(graph, job.nodes)[0]
        )
        values = reference_values(graph) if inside else dict(random_inputs(graph, seed=0))
        measuring = Measuring(self.profile, self.machine, graph, values, resolved, self.settings)
        taken = [0] * len(jobs)
        try:
            self._run(jobs, measuring, taken, started, budget_s, progress)
        except KeyboardInterrupt:
            report.interrupted = True
            raise
        finally:
            release_values(measuring.values)
            self._finish(report, jobs, taken, started, save=any(taken))
        return report

    def _finish(
        self, report: ProfileReport, jobs: list[Job], taken: list[int], started: float, save: bool
    ) -> None:
        """Count the jobs measured in full and those left, save if ``save``, note the time."""
        report.new = sum(t >= job.passes - job.done for t, job in zip(taken, jobs, strict=True))
        report.missing = len(jobs) - report.new
        report.resumed = sum(job.done > 0 for job in jobs)
        if self.path is not None and save:
            self.profile.save(self.path)
        report.elapsed_s = time.perf_counter() - started

    def _run(
        self,
        jobs: list[Job],
        measuring: Measuring,
        taken: list[int],
        started: float,
        budget_s: float | None,
        progress: Progress | None,
        last_pass: int | None = None,
    ) -> None:
        """Take every pass each job lacks, pass after pass, counting each job's in ``taken``.

        With ``last_pass``, only the passes before it are taken (a screening takes 1).

        Stops before a step once ``budget_s`` seconds from ``started`` are spent. A job whose
        codegen claimed its nodes but rejects them compiled, or fails running them (an
        :class:`AutopartError`: OpenVINO refusing a GatherND of dynamic rank), is marked
        ``unsupported`` on its target and not taken again; the run goes on. A run that
        measured anything ends by stamping the profile with the machine's speed
        (:func:`autopart.profile.speed.stamp`), so that a later tune can scale these rows.
        """
        passes = max([self.settings.passes, *(job.passes for job in jobs)])
        steps = [
            (p, i, job)
            for p in range(passes if last_pass is None else min(passes, last_pass))
            for i, job in enumerate(jobs)
            if job.done <= p < job.passes
        ]
        last_save, interval = time.perf_counter(), self.checkpoint_s
        rejected: set[tuple[str, str]] = set()
        for step, (pass_index, index, job) in enumerate(steps):
            if budget_s is not None and time.perf_counter() - started > budget_s:
                break
            if (job.target, job.key) in rejected:
                continue
            if progress is not None:
                suffix = f" ({pass_index + 1}/{passes})" if passes > 1 else ""
                progress(step, len(steps), job.label + suffix)
            try:
                BY_KIND[job.kind].measure(job, measuring)
            except AutopartError as error:  # claimed, but rejected compiled or run
                rejected.add((job.target, job.key))
                _mark_rejected(self.profile, job, error)
                measuring.compiled.pop((job.target, job.key), None)
                continue
            measuring.commit()
            taken[index] += 1
            finished = pass_index + 1 in (job.passes, last_pass)  # free what it compiled
            if finished and measuring.compiled.pop((job.target, job.key), None) is not None:
                release_freed_memory()
            elif job.kind == RowKind.PARTITION and (job.target, job.key) not in measuring.compiled:
                release_freed_memory()  # too large to hold: freed before the next one compiles
            if self.path is not None and time.perf_counter() - last_save > interval:
                began = time.perf_counter()
                self.profile.save(self.path)
                last_save = time.perf_counter()
                if self.checkpoint_s > 0:
                    saving = (last_save - began) * (1 - SAVE_SHARE) / SAVE_SHARE
                    interval = max(self.checkpoint_s, saving)
        if any(taken):
            stamp(self.profile)
        if progress is not None:
            progress(len(steps), len(steps), "done")


def _mark_rejected(profile: Profile, job: Job, error: AutopartError) -> None:
    """Record that ``job``'s target rejects its nodes (an ``unsupported`` row and why)."""
    why = (str(error).splitlines() or [""])[0][:200]
    profile.record(RowKind.UNSUPPORTED, job.target, job.key, UNSUPPORTED, f"rejected: {why}")
