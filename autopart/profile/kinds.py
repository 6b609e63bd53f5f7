"""The kinds of measurement job, in the order the profiler plans them (:data:`JOB_KINDS`).

Ops come first in the order of the graph (an op job of a codegen timed by device events
also times the host's enqueueing, and runs again where that row alone is missing), then the
layout conversions of each op's one-node subgraph (codegens that convert layouts only),
fusion pairs (fusing codegens only), launches, calibration windows (timed whole; where they
can be cut, cut in two and entered cold by the same job), windows compiled as a plan's only
partition where that changes the library's settings, and copies.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace
from functools import partial

from autopart.costmodel.calibration import calibration_windows, op_sum, window_key
from autopart.costmodel.cuts import cut_index
from autopart.costmodel.fusion import pairs_to_measure
from autopart.costmodel.measurements import Measurement, RowKind
from autopart.costmodel.transfer import pair_name, split_pair
from autopart.errors import AutopartError
from autopart.ir.graph import Node
from autopart.ir.memo import memoised
from autopart.ir.signature import op_signature
from autopart.ir.target import HOST_DEVICE
from autopart.profile.core_sharing import process_probe
from autopart.profile.jobs import Job, JobKind, Measuring, Planning
from autopart.profile.samplers import (
    compile_nodes,
    compiled_with_inputs,
    cut_samplers,
    enqueue_sampler,
    launch_samples,
    make_room,
    pair_sampler,
    placed_at,
    wall_sampler,
)
from autopart.profile.store import Profile
from autopart.profile.timing import collect
from autopart.profile.transfer import SIZES, copy_sampler
from autopart.targets.resolve import ResolvedTarget

CUT_SHARE = 0.5  # of an op's time budget, for jobs timing two things in turn (cut, pair)
UNSUPPORTED = Measurement(0, 0, 0, 0, 0, 0, "none", passes=0)
SHARED_RETAKES = 3  # a whole-device partition pass timed in a core-sharing spell is retaken


class OpJobs(JobKind):
    """One op signature on one target, timed as a one-node subgraph (``op`` rows).

    Signatures a target cannot run are marked with an ``unsupported`` row while planning.
    """

    kind = RowKind.OP

    def plan(self, planning: Planning) -> list[Job]:
        """One job per distinct (target, signature) lacking its op (or enqueue) row."""
        jobs: list[Job] = []
        graph, profile = planning.graph, planning.profile
        seen: set[tuple[str, str]] = set()
        for resolved in planning.targets:
            target = str(resolved.target)
            for node in graph.nodes:
                signature = op_signature(node, graph)
                if (target, signature) in seen:
                    continue
                seen.add((target, signature))
                known = self.done(planning, RowKind.OP, target, signature) and (
                    resolved.codegen.clock != "event"
                    or self.done(planning, RowKind.ENQUEUE, target, signature)
                )
                if known or profile.has(RowKind.UNSUPPORTED, target, signature):
                    planning.reused += 1
                elif not resolved.supports(node, graph):
                    profile.record(
                        RowKind.UNSUPPORTED, target, signature, UNSUPPORTED, node.op_type
                    )
                    planning.unsupported += 1
                else:
                    label = f"{node.op_type} on {target}"
                    jobs.append(Job(self.kind, target, signature, label, [node]))
        return jobs

    def rows(self, job: Job, planning: Planning) -> list[tuple[RowKind, str]]:
        """The op row, and on codegens timed by device events the enqueue row."""
        if _resolved(planning, job.target).codegen.clock == "event":
            return [(RowKind.OP, job.key), (RowKind.ENQUEUE, job.key)]
        return [(RowKind.OP, job.key)]

    def measure(self, job: Job, measuring: Measuring) -> None:
        """Time the op's ``run_timed``; on device clocks also the host's enqueueing."""
        resolved = measuring.targets[job.target]
        (node,) = job.nodes
        compiled, env = compiled_with_inputs(resolved, measuring.graph, job.nodes, measuring.values)
        settings = measuring.per_pass
        samples = collect(lambda: compiled.run_timed(env), settings)
        measuring.record(self.kind, job, job.key, samples, resolved.codegen.clock, node.op_type)
        if resolved.codegen.clock == "event":
            # host-side times vary little, and each sample waits for the kernels
            few = replace(settings, warmup=0, min_runs=3, max_runs=3, batch=3)
            enqueue = collect(enqueue_sampler(resolved, compiled, env), few)
            measuring.record(RowKind.ENQUEUE, job, job.key, enqueue, "wall", node.op_type)


class LayoutJobs(JobKind):
    """The layout conversions of an op's one-node subgraph (``layout`` rows).

    Only on codegens that convert layouts; ``kernel_s`` is the op's own kernels in the
    same runs.
    """

    kind = RowKind.LAYOUT

    def plan(self, planning: Planning) -> list[Job]:
        """One job per distinct signature the target runs, on layout-converting targets."""
        jobs: list[Job] = []
        graph, profile = planning.graph, planning.profile
        distinct: dict[str, Node] = {}  # each signature's first node, in graph order
        for node in graph.nodes:
            distinct.setdefault(op_signature(node, graph), node)
        for resolved in (r for r in planning.targets if r.codegen.converts_layouts):
            target = str(resolved.target)
            for signature, node in distinct.items():
                if profile.has(RowKind.UNSUPPORTED, target, signature):
                    continue
                if self.done(planning, self.kind, target, signature):
                    planning.reused += 1
                elif resolved.supports(node, graph):
                    label = f"layouts of {node.op_type} on {target}"
                    jobs.append(Job(self.kind, target, signature, label, [node]))
        return jobs

    def measure(self, job: Job, measuring: Measuring) -> None:
        """Take the codegen's layout samples of the op: conversions, and its own kernels."""
        (node,) = job.nodes
        resolved = measuring.targets[job.target]
        compiled, env = compiled_with_inputs(resolved, measuring.graph, job.nodes, measuring.values)
        samples = compiled.layout_samples(env, measuring.per_pass.min_runs)
        kernels = measuring.add_pass("kernel_s", job, job.key, [k for _, k in samples])
        layouts = [layout for layout, _ in samples]
        measuring.record(self.kind, job, job.key, layouts, "event", node.op_type, kernel_s=kernels)


class FusedJobs(JobKind):
    """A producer and the consumer a fusing codegen folds into it (``fused`` rows).

    The pair is timed as one subgraph in turn with the producer alone (``producer_s``).
    """

    kind = RowKind.FUSED
    one_pass = True

    def plan(self, planning: Planning) -> list[Job]:
        """The pairs worth timing (:func:`pairs_to_measure`) that both ops run on a target."""
        jobs: list[Job] = []
        graph = planning.graph
        fusing = [r for r in planning.targets if r.codegen.fuses]
        pairs = pairs_to_measure(graph) if fusing else []
        for resolved in fusing:
            target = str(resolved.target)
            for pair in pairs:
                key = pair.key(graph)
                if not (
                    resolved.supports(pair.producer, graph)
                    and resolved.supports(pair.consumer, graph)
                ):
                    continue
                if self.done(planning, self.kind, target, key) and _paired(
                    planning.profile, target, key
                ):
                    planning.reused += 1
                else:
                    label = f"{pair.producer.op_type}+{pair.consumer.op_type} on {target}"
                    jobs.append(Job(self.kind, target, key, label, [pair.producer, pair.consumer]))
        return jobs

    def measure(self, job: Job, measuring: Measuring) -> None:
        """Time the pair and its producer in turn, in the whole budget's one pass."""
        resolved = measuring.targets[job.target]
        alone: list[float] = []
        settings = measuring.settings
        # a sample runs the producer and the pair: a share of the time will do
        share = replace(settings, max_seconds=settings.max_seconds * CUT_SHARE)
        sampler = pair_sampler(resolved, measuring.graph, job.nodes, measuring.values, alone)
        together = collect(sampler, share)
        # the warm-up runs' are left out
        producer = measuring.add_pass("producer_s", job, job.key, alone[-len(together) :])
        measuring.record(
            self.kind, job, job.key, together, resolved.codegen.clock,
            "+".join(node.op_type for node in job.nodes), producer_s=producer,
        )  # fmt: skip


def _paired(profile: Profile, target: str, key: str) -> bool:
    """Whether the ``fused`` row (target, key) holds its producer timed in turn with it."""
    row = profile.row(RowKind.FUSED, target, key)
    return row is not None and math.isfinite(float(row["producer_s"]))


class LaunchJobs(JobKind):
    """Entering a trivial partition on a target: the launch probe (``launch`` rows)."""

    kind = RowKind.LAUNCH
    needs_values = False

    def plan(self, planning: Planning) -> list[Job]:
        """One job per target lacking one of its :func:`launch_keys` rows."""
        jobs: list[Job] = []
        for resolved in planning.targets:
            target = str(resolved.target)
            if all(self.done(planning, self.kind, target, k) for k in launch_keys(resolved)):
                planning.reused += 1
            else:
                jobs.append(Job(self.kind, target, "", f"launch on {target}"))
        return jobs

    def rows(self, job: Job, planning: Planning) -> list[tuple[RowKind, str]]:
        """The target's :func:`launch_keys` rows."""
        return [(self.kind, key) for key in launch_keys(_resolved(planning, job.target))]

    def measure(self, job: Job, measuring: Measuring) -> None:
        """Time the probe's wall time, its ``run_timed``, and its kernel under a profiler."""
        resolved = measuring.targets[job.target]
        short = measuring.settings.for_short_runs().per_pass()
        wall, timed, profiled = launch_samples(resolved, short)
        measuring.record(self.kind, job, "wall", wall, "wall", "Relu")
        measuring.record(self.kind, job, "timed", timed, resolved.codegen.clock, "Relu")
        if profiled:
            measuring.record(self.kind, job, "profiled", profiled, "event", "Relu")


def _resolved(planning: Planning, target: str) -> ResolvedTarget:
    """The resolved target of ``planning`` named ``target``."""
    return next(r for r in planning.targets if str(r.target) == target)


def launch_keys(resolved: ResolvedTarget) -> tuple[str, ...]:
    """The ``launch`` row keys a complete profile holds for ``resolved``'s target."""
    return ("wall", "timed", "profiled") if resolved.codegen.converts_layouts else ("wall", "timed")


def _windows(
    planning: Planning, cut: bool | None = None
) -> list[tuple[ResolvedTarget, str, list[Node]]]:
    """Each target's calibration windows (target, key, nodes) that can (or cannot) be cut.

    ``cut=None`` gives every window.
    """
    graph = planning.graph
    found = []
    for resolved in planning.targets:
        supported = partial(resolved.supports, graph=graph)
        spans = memoised(
            graph,
            ("calibration windows", str(resolved.target)),
            lambda supported=supported: [
                (start, end, cut_index(graph, graph.nodes[start:end]) is not None)
                for start, end in calibration_windows(graph, supported)
            ],
        )
        for start, end, can_cut in spans:
            if cut is None or can_cut == cut:
                found.append((resolved, window_key(graph, start, end), graph.nodes[start:end]))
    return found


def _window_jobs(
    kind: JobKind,
    planning: Planning,
    windows: list[tuple[ResolvedTarget, str, list[Node]]],
    rows: tuple[RowKind, ...],
    label: str,
) -> list[Job]:
    """A ``kind`` job per window lacking one of its ``rows``; the rest count as reused.

    Each job is labelled ``"<n> <label> <target>"``.
    """
    jobs: list[Job] = []
    for resolved, key, window in windows:
        target = str(resolved.target)
        if all(kind.done(planning, row, target, key) for row in rows):
            planning.reused += 1
        else:
            text = f"{len(window)} {label} {target}"
            jobs.append(Job(kind.kind, target, key, text, window))
    return jobs


def _record_window(job: Job, samples: list[float], timer: str, measuring: Measuring) -> None:
    """Record ``samples`` of the window ``job.nodes`` run whole as its calibration row."""
    predicted = op_sum(measuring.profile, measuring.graph, job.nodes, job.target)
    measuring.record(
        RowKind.CALIBRATION, job, job.key, samples, timer, f"{len(job.nodes)} ops",
        predicted_s=math.nan if predicted is None else predicted,
    )  # fmt: skip


class CalibrationJobs(JobKind):
    """A window of the model that cannot be cut, timed whole (``calibration`` rows)."""

    kind = RowKind.CALIBRATION

    def plan(self, planning: Planning) -> list[Job]:
        """One job per such window lacking its calibration row."""
        windows = _windows(planning, cut=False)
        return _window_jobs(self, planning, windows, (self.kind,), "ops on")

    def measure(self, job: Job, measuring: Measuring) -> None:
        """Time the window's ``run_timed`` as one subgraph."""
        resolved = measuring.targets[job.target]
        compiled, env = compiled_with_inputs(resolved, measuring.graph, job.nodes, measuring.values)
        samples = collect(lambda: compiled.run_timed(env), measuring.per_pass)
        _record_window(job, samples, resolved.codegen.clock, measuring)


class CutJobs(JobKind):
    """A window timed whole, cut in two, and entered cold (calibration, cut and cold rows)."""

    kind = RowKind.CUT

    def plan(self, planning: Planning) -> list[Job]:
        """One job per window that can be cut and lacks one of its three rows."""
        rows = (RowKind.CALIBRATION, RowKind.CUT, RowKind.COLD)
        return _window_jobs(
            self, planning, _windows(planning, cut=True), rows, "ops, whole and cut, on"
        )

    def rows(self, job: Job, planning: Planning) -> list[tuple[RowKind, str]]:
        """The window's calibration, cut and cold rows."""
        return [(kind, job.key) for kind in (RowKind.CALIBRATION, RowKind.CUT, RowKind.COLD)]

    def measure(self, job: Job, measuring: Measuring) -> None:
        """Time the window whole and cut in turn, then whole after the host worked elsewhere."""
        resolved = measuring.targets[job.target]
        timed: list[float] = []
        walls: list[float] = []
        graph, values = measuring.graph, measuring.values
        sample, cold = cut_samplers(resolved, graph, job.nodes, values, walls, timed)
        settings = measuring.per_pass
        # a sample runs the window whole and cut: a share of the time will do
        share = replace(settings, max_seconds=settings.max_seconds * CUT_SHARE)
        halves = collect(sample, share)
        # the warm-up runs' are left out
        whole = measuring.add_pass("whole_s", job, job.key, walls[-len(halves) :])
        ops = len(job.nodes)
        measuring.record(
            self.kind, job, job.key, halves, "wall", f"cut of {ops} ops", whole_s=whole
        )
        # apart, after the rest (a run after the gap slows the next few runs too), and
        # only min_runs of them: each waits COLD_ENTRY.gap_s first
        colds = collect(cold, replace(share, warmup=0, batch=1, max_runs=share.min_runs))
        measuring.record(
            RowKind.COLD, job, job.key, colds, "wall", f"{ops} ops entered cold", warm_s=whole
        )
        _record_window(job, timed[-len(halves) :], resolved.codegen.clock, measuring)


class AloneJobs(JobKind):
    """A calibration window compiled as a plan's only partition (``alone`` rows).

    Only on targets whose codegen then uses other settings (onnxruntime on a whole
    device: its pool threads spin). The same job first times the window compiled as one
    partition among several (``shared_s``), so that drift hits both alike.
    """

    kind = RowKind.ALONE
    one_pass = True

    def plan(self, planning: Planning) -> list[Job]:
        """One job per calibration window lacking its row, on targets where alone differs."""
        windows = [
            (resolved, key, window)
            for resolved, key, window in _windows(planning)
            if resolved.codegen.alone_differs(resolved.placement)
        ]
        return _window_jobs(self, planning, windows, (self.kind,), "ops alone on")

    def measure(self, job: Job, measuring: Measuring) -> None:
        """Time the window's ``run_timed`` compiled shared, then compiled alone."""
        resolved = measuring.targets[job.target]
        graph, values = measuring.graph, measuring.values
        shared, env = compiled_with_inputs(resolved, graph, job.nodes, values)
        lone = compile_nodes(resolved, graph, job.nodes, alone=True)
        settings = measuring.settings
        # two things timed in turn: a share of the time each
        share = replace(settings, max_seconds=settings.max_seconds * CUT_SHARE)
        before = collect(lambda: shared.run_timed(env), share)
        samples = collect(lambda: lone.run_timed(env), share)
        time.sleep(lone.linger_s)  # its threads may still spin: let the next job start clean
        measuring.record(
            self.kind, job, job.key, samples, resolved.codegen.clock,
            f"{len(job.nodes)} ops alone", shared_s=statistics.median(before),
        )  # fmt: skip


class PartitionJobs(JobKind):
    """A candidate plan's partition, compiled as the plan compiles it and timed whole.

    Never planned from a graph alone: the tune hands the partitions of its candidate plans
    to :meth:`autopart.profile.profiler.Profiler.profile_partitions`. The key says whether
    the partition is its plan's only one (:func:`autopart.costmodel.partitions.partition_key`),
    which changes how some codegens compile it.
    """

    kind = RowKind.PARTITION

    def plan(self, planning: Planning) -> list[Job]:
        """None: partition jobs come from candidate plans, not from the graph."""
        return []

    def measure(self, job: Job, measuring: Measuring) -> None:
        """Time the partition's wall clock around ``run`` and synchronisation.

        On a whole device, a pass timed while both cores ran at one core's speed (the race's
        probe, :mod:`autopart.profile.core_sharing`, right after it) is timed again, at
        most :data:`SHARED_RETAKES` times: such a row would price the plan the next tune
        predicts (its only partition) 1.6-1.9x too slow.

        A partition its codegen rejects (:class:`AutopartError` while compiling) is marked
        with an ``unsupported`` row instead, as the race drops a plan that fails to compile.
        """
        resolved = measuring.targets[job.target]
        alone = not job.key.endswith(":shared")
        graph, values = measuring.graph, measuring.values
        if measuring.profile.has(RowKind.UNSUPPORTED, job.target, job.key):
            return
        found = measuring.compiled.get((job.target, job.key))
        if found is None:  # compiled once for every pass, while memory and the cache allow
            make_room(measuring.compiled, graph, job.nodes)
            try:
                with placed_at(job.nodes, resolved.target, job.precisions):
                    found = compiled_with_inputs(resolved, graph, job.nodes, values, alone)
            except AutopartError:
                label = f"{len(job.nodes)} ops the codegen rejects"
                measuring.profile.record(
                    RowKind.UNSUPPORTED, job.target, job.key, UNSUPPORTED, label
                )
                return
            measuring.compiled.keep((job.target, job.key), found, graph.parameter_bytes(job.nodes))
        compiled, env = found
        # A partition may be a whole plan of 0.1 ms: sampled for a share of the time, as
        # copies are, the many runs average over the swings a few dozen runs would catch.
        timing = measuring.settings.for_short_runs().per_pass()
        samples = collect(wall_sampler(resolved, compiled, env), timing)
        for _ in range(SHARED_RETAKES if resolved.placement.unit is None else 0):
            probe = process_probe()
            if probe is None or not probe.shared():
                break
            samples = collect(wall_sampler(resolved, compiled, env), timing)
        time.sleep(compiled.linger_s)  # its threads may still spin: let the next job start clean
        label = f"{len(job.nodes)} ops as one partition"
        measuring.record(self.kind, job, job.key, samples, "wall", label)


class TransferJobs(JobKind):
    """Copies of each size in :data:`SIZES` between the host and each device (``transfer``)."""

    kind = RowKind.TRANSFER
    needs_values = False

    def plan(self, planning: Planning) -> list[Job]:
        """One job per (direction, size) lacking its row, for every device but the host."""
        jobs: list[Job] = []
        devices = sorted({str(r.target.device) for r in planning.targets} - {HOST_DEVICE})
        for device in devices:
            for src, dst in ((HOST_DEVICE, device), (device, HOST_DEVICE)):
                pair = pair_name(src, dst)
                for nbytes in SIZES:
                    if self.done(planning, self.kind, pair, str(nbytes)):
                        planning.reused += 1
                    else:
                        label = f"copy {pair}"
                        jobs.append(Job(self.kind, pair, str(nbytes), label, nbytes=nbytes))
        return jobs

    def measure(self, job: Job, measuring: Measuring) -> None:
        """Time copies of ``job.nbytes`` as the plan executor makes them."""
        src, dst = (measuring.machine.device(name) for name in split_pair(job.target))
        copies = measuring.settings.for_short_runs().per_pass()
        samples = collect(copy_sampler(src, dst, job.nbytes), copies)
        measuring.record(self.kind, job, job.key, samples, "wall")


JOB_KINDS: tuple[JobKind, ...] = (
    OpJobs(), LayoutJobs(), FusedJobs(), LaunchJobs(), CalibrationJobs(), CutJobs(),
    AloneJobs(), TransferJobs(),
)  # fmt: skip
"""Every kind of job planned from a graph, in planning order."""
SCREENING_KINDS: tuple[JobKind, ...] = tuple(
    kind for kind in JOB_KINDS if kind.kind in (RowKind.OP, RowKind.LAUNCH, RowKind.TRANSFER)
)
"""The kinds a screening pass takes (:meth:`~autopart.profile.profiler.Profiler.profile_graph`
with ``screen``): enough to price every node on every target, one pass each."""
PARTITIONS = PartitionJobs()
BY_KIND: dict[RowKind, JobKind] = {kind.kind: kind for kind in (*JOB_KINDS, PARTITIONS)}
"""Each job kind by the row kind its jobs are named after (:attr:`Job.kind`)."""
