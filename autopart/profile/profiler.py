"""Measuring what every op costs on every target, what launches cost, and what copies cost.

Ops are timed through the codegens' own ``compile`` and ``CompiledSubgraph.run_timed``, the
code the plan executor runs: a one-node subgraph per distinct signature and target, fed with
the real intermediate values of the model (computed once by the numpy reference), placed on
the target's device first. A few windows of the model are timed whole, the same way, to
calibrate op sums against fusion and cache effects (:mod:`autopart.costmodel.calibration`).
OpenCL reports device time from profiling events; codegens with no device clock report wall
time, from which the launch probe's own time is later taken off (see
:mod:`autopart.costmodel.from_profile`).

Every job (but a fusion pair's, whose producer is timed in turn with it, see
:data:`ONE_PASS_KINDS`) is measured in ``TimingSettings.passes`` passes through the whole
job list, and its median is the median of the passes' medians, so that a few seconds of
host speed-up or slow-down (common on shared machines) cannot skew one op's timing: on
squeezenet's whole OpenCL device, the ops' first-pass medians summed to 1.12-1.81x their
third's in ten profiles. Everything measured is checkpointed to the profile file every few
seconds, atomically, so an interrupted run (Ctrl-C or a kill) loses at most the last few
seconds, and a rerun measures only what is missing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from autopart.costmodel.calibration import (
    Calibration,
    calibrate,
    calibration_windows,
    op_sum,
    window_key,
)
from autopart.costmodel.cold import COLD_GAP_S
from autopart.costmodel.cuts import cold_cost, cut_cost, cut_index
from autopart.costmodel.fusion import pairs_to_measure
from autopart.costmodel.measurements import Measurement
from autopart.costmodel.transfer import pair_name, split_pair
from autopart.ir.graph import Graph, Node
from autopart.ir.signature import op_signature
from autopart.ir.target import HOST_DEVICE, VirtualDevice
from autopart.plan.partition import boundary
from autopart.profile.probe import launch_probe_graph
from autopart.profile.store import Profile
from autopart.profile.timing import TimingSettings, collect, median_of_passes, summarise_passes
from autopart.profile.transfer import SIZES, copy_sampler
from autopart.runtime.feeds import random_inputs
from autopart.targets.codegen import CompiledSubgraph, get_codegen
from autopart.targets.devices import Machine
from autopart.targets.resolve import ResolvedTarget, resolve

PROFILED_RUNS = 50  # the launch probe's runs under the codegen's profiler
CUT_SHARE = 0.5  # of an op's time budget, for jobs timing two things in turn (cut, pair)
# Jobs whose answer is a difference of two things timed in turn: drift hits both alike, so
# they take one pass with the whole budget (and compile once instead of once per pass).
ONE_PASS_KINDS = frozenset({"fused"})
Progress = Callable[[int, int, str], None]


@dataclass
class Job:
    """One thing to measure: an op, a fusion pair, a window, a launch, or a copy size.

    Pairs and calibration windows list their ``nodes``; copies name a device pair.
    """

    kind: str
    target: str
    key: str
    label: str
    node: Node | None = None
    nbytes: int = 0
    nodes: list[Node] = field(default_factory=list)


@dataclass
class ProfileReport:
    """What a profiling run did: new, reused and missing measurements, and calibrations.

    ``calibrations`` holds each target's subgraph calibration for the profiled graph, and
    ``entries`` each target's (cut, cold entry) costs for it in seconds
    (:mod:`autopart.costmodel.cuts`).
    """

    new: int = 0
    reused: int = 0
    missing: int = 0
    unsupported: int = 0
    elapsed_s: float = 0.0
    interrupted: bool = False
    targets: list[str] = field(default_factory=list)
    calibrations: list[Calibration] = field(default_factory=list)
    entries: dict[str, tuple[float, float]] = field(default_factory=dict)


def plan_jobs(
    graph: Graph, targets: Sequence[ResolvedTarget], profile: Profile, refresh: bool = False
) -> tuple[list[Job], int, int]:
    """The measurements ``profile`` lacks for ``graph`` on ``targets`` (all, if ``refresh``).

    Returns the jobs plus the counts of reused measurements and of (signature, target)
    pairs that the target cannot run (recorded as ``unsupported`` rows). Ops come first in
    the order of the graph (an op job of a codegen timed by device events also times the
    host's enqueueing, and runs again where that row alone is missing), then the layout
    conversions of each op's one-node subgraph (codegens that convert layouts only), fusion
    pairs (fusing codegens only), launches, calibration windows (timed whole and, where
    they can be cut, cut in two and entered cold by the same job), and copies. With
    ``refresh`` every measurement is planned again, whatever the profile holds; signatures
    marked unsupported stay so (that is the codegen's answer, not a timing).
    """
    jobs: list[Job] = []
    reused = unsupported = 0

    def has(kind: str, target: str, key: str) -> bool:
        return not refresh and profile.has(kind, target, key)

    seen: set[tuple[str, str]] = set()
    for resolved in targets:
        target = str(resolved.target)
        for node in graph.nodes:
            signature = op_signature(node, graph)
            if (target, signature) in seen:
                continue
            seen.add((target, signature))
            known = has("op", target, signature) and (
                resolved.codegen.clock != "event" or has("enqueue", target, signature)
            )
            if known or profile.has("unsupported", target, signature):
                reused += 1
            elif not resolved.codegen.supports(node, graph):
                profile.record(
                    "unsupported", target, signature, Measurement(0, 0, 0, 0, 0, 0, "none"),
                    op_type=node.op_type,
                )  # fmt: skip
                unsupported += 1
            else:
                jobs.append(Job("op", target, signature, f"{node.op_type} on {target}", node))
    distinct: dict[str, Node] = {}  # each signature's first node, in graph order
    for node in graph.nodes:
        distinct.setdefault(op_signature(node, graph), node)
    for resolved in (r for r in targets if r.codegen.converts_layouts):
        target = str(resolved.target)
        for signature, node in distinct.items():
            if profile.has("unsupported", target, signature):
                continue
            if has("layout", target, signature):
                reused += 1
            elif resolved.codegen.supports(node, graph):
                label = f"layouts of {node.op_type} on {target}"
                jobs.append(Job("layout", target, signature, label, node))
    fusing = [r for r in targets if r.codegen.fuses]
    pairs = pairs_to_measure(graph) if fusing else []
    for resolved in fusing:
        target = str(resolved.target)
        for pair in pairs:
            key = pair.key(graph)
            if not (
                resolved.codegen.supports(pair.producer, graph)
                and resolved.codegen.supports(pair.consumer, graph)
            ):
                continue
            if has("fused", target, key) and _paired(profile, target, key):
                reused += 1
            else:
                label = f"{pair.producer.op_type}+{pair.consumer.op_type} on {target}"
                jobs.append(Job("fused", target, key, label, nodes=[pair.producer, pair.consumer]))
    for resolved in targets:
        target = str(resolved.target)
        if all(has("launch", target, key) for key in launch_keys(resolved)):
            reused += 1
        else:
            jobs.append(Job("launch", target, "", f"launch on {target}"))
    for resolved in targets:
        target = str(resolved.target)
        supported = partial(resolved.codegen.supports, graph=graph)
        for start, end in calibration_windows(graph, supported):
            key = window_key(graph, start, end)
            window = graph.nodes[start:end]
            if cut_index(graph, window) is None:
                kind, label = "calibration", f"{len(window)} ops on {target}"
                done = has("calibration", target, key)
            else:
                kind, label = "cut", f"{len(window)} ops, whole and cut, on {target}"
                done = all(has(k, target, key) for k in ("calibration", "cut", "cold"))
            if done:
                reused += 1
            else:
                jobs.append(Job(kind, target, key, label, nodes=window))
    devices = sorted({str(r.target.device) for r in targets} - {HOST_DEVICE})
    for device in devices:
        for src, dst in ((HOST_DEVICE, device), (device, HOST_DEVICE)):
            for nbytes in SIZES:
                pair = pair_name(src, dst)
                if has("transfer", pair, str(nbytes)):
                    reused += 1
                else:
                    jobs.append(Job("transfer", pair, str(nbytes), f"copy {pair}", nbytes=nbytes))
    return jobs, reused, unsupported


class Profiler:
    """Runs measurement jobs into a profile, checkpointing to ``path`` as it goes."""

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
    ) -> ProfileReport:
        """Measure what ``profile`` lacks to plan ``graph`` over ``targets``.

        With ``refresh``, measure all of it again (:func:`plan_jobs`); the new rows replace
        the old ones. Stops early once ``budget_s`` seconds were spent (what is left is counted in
        ``missing``). On KeyboardInterrupt the measurements so far are saved and the
        interrupt propagates.
        """
        started = time.perf_counter()
        resolved = [resolve(t, self.machine) for t in targets]
        jobs, reused, unsupported = plan_jobs(graph, resolved, self.profile, refresh)
        report = ProfileReport(reused=reused, unsupported=unsupported)
        report.targets = [str(r.target) for r in resolved]
        needs_values = any(j.kind not in ("launch", "transfer") for j in jobs)
        values = _reference_values(graph) if needs_values else {}
        by_target = {str(r.target): r for r in resolved}
        last_save = time.perf_counter()
        passes = max(self.settings.passes, 1)
        settings = self.settings.per_pass()
        taken: dict[tuple[str, str, str], list[list[float]]] = {}
        steps = [
            (p, i, job)
            for p in range(passes)
            for i, job in enumerate(jobs)
            if p == 0 or job.kind not in ONE_PASS_KINDS
        ]
        try:
            for step, (pass_index, index, job) in enumerate(steps):
                if budget_s is not None and time.perf_counter() - started > budget_s:
                    report.missing = len(jobs) - index if pass_index == 0 else 0
                    break
                if progress is not None:
                    suffix = f" ({pass_index + 1}/{passes})" if passes > 1 else ""
                    progress(step, len(steps), job.label + suffix)
                budget = self.settings if job.kind in ONE_PASS_KINDS else settings
                self._run(job, graph, values, by_target, budget, taken)
                if pass_index == 0:
                    report.new += 1
                if self.path is not None and time.perf_counter() - last_save > self.checkpoint_s:
                    self.profile.save(self.path)
                    last_save = time.perf_counter()
            if progress is not None:
                progress(len(steps), len(steps), "done")
            report.calibrations = [calibrate(self.profile, graph, t) for t in report.targets]
            report.entries = {
                t: (cut_cost(self.profile, graph, t), cold_cost(self.profile, graph, t))
                for t in report.targets
            }
        except KeyboardInterrupt:
            report.interrupted = True
            raise
        finally:
            if self.path is not None and (report.new or unsupported):
                self.profile.save(self.path)
            report.elapsed_s = time.perf_counter() - started
        return report

    def _run(
        self,
        job: Job,
        graph: Graph,
        values: dict[str, np.ndarray],
        targets: dict[str, ResolvedTarget],
        settings: TimingSettings,
        taken: dict[tuple[str, str, str], list[list[float]]],
    ) -> None:
        """Take one pass's samples for ``job``, add them to ``taken``, and record.

        ``taken`` holds the samples of every pass so far, pass by pass, by (kind, target, key).
        """

        def record(
            key: str, samples: list[float], timer: str, kind: str = job.kind, **extra: Any
        ) -> None:
            passes = taken.setdefault((kind, job.target, key), [])
            passes.append(samples)
            self.profile.record(kind, job.target, key, summarise_passes(passes, timer), **extra)

        if job.kind == "fused":
            resolved = targets[job.target]
            alone: list[float] = []
            # a sample runs the producer and the pair: a share of the time will do
            share = replace(settings, max_seconds=settings.max_seconds * CUT_SHARE)
            together = collect(_pair_sampler(resolved, graph, job.nodes, values, alone), share)
            producer = taken.setdefault(("fused producer", job.target, job.key), [])
            producer.append(alone[-len(together) :])  # the warm-up runs' are left out
            record(
                job.key, together, resolved.codegen.clock,
                op_type="+".join(node.op_type for node in job.nodes),
                reference_s=median_of_passes(producer),
            )  # fmt: skip
        elif job.kind in ("op", "calibration"):
            resolved = targets[job.target]
            nodes = [job.node] if job.node is not None else job.nodes
            compiled, env = _compiled(resolved, graph, nodes, values)
            samples = collect(lambda: compiled.run_timed(env), settings)
            if job.kind == "op":
                record(job.key, samples, resolved.codegen.clock, op_type=nodes[0].op_type)
                if resolved.codegen.clock == "event":
                    # host-side times vary little, and each sample waits for the kernels
                    few = replace(settings, warmup=0, min_runs=3, max_runs=3, batch=3)
                    enqueue = collect(_enqueue_sampler(resolved, compiled, env), few)
                    record(job.key, enqueue, "wall", "enqueue", op_type=nodes[0].op_type)
            else:
                self._record_window(job, graph, samples, resolved, record)
        elif job.kind == "layout":
            assert job.node is not None
            compiled, env = _compiled(targets[job.target], graph, [job.node], values)
            samples = compiled.layout_samples(env, settings.min_runs)
            kernels = taken.setdefault(("layout kernels", job.target, job.key), [])
            kernels.append([other for _, other in samples])
            record(
                job.key, [layout for layout, _ in samples], "event",
                op_type=job.node.op_type, reference_s=median_of_passes(kernels),
            )  # fmt: skip
        elif job.kind == "cut":
            resolved = targets[job.target]
            timed: list[float] = []
            walls: list[float] = []
            sample, cold = _cut_samplers(resolved, graph, job.nodes, values, walls, timed)
            # a sample runs the window whole and cut: a share of the time will do
            share = replace(settings, max_seconds=settings.max_seconds * CUT_SHARE)
            halves = collect(sample, share)
            whole = taken.setdefault(("cut whole", job.target, job.key), [])
            whole.append(walls[-len(halves) :])  # the warm-up runs' are left out
            back_to_back = median_of_passes(whole)
            record(
                job.key, halves, "wall", op_type=f"cut of {len(job.nodes)} ops",
                reference_s=back_to_back,
            )  # fmt: skip
            # apart, after the rest (a run after the gap slows the next few runs too), and
            # only min_runs of them: each waits COLD_GAP_S first
            colds = collect(cold, replace(share, warmup=0, batch=1, max_runs=share.min_runs))
            record(
                job.key, colds, "wall", "cold", op_type=f"{len(job.nodes)} ops entered cold",
                reference_s=back_to_back,
            )  # fmt: skip
            self._record_window(job, graph, timed[-len(halves) :], resolved, record)
        elif job.kind == "launch":
            resolved = targets[job.target]
            short = self.settings.for_short_runs().per_pass()
            wall, timed, profiled = self._launch(resolved, short)
            record("wall", wall, "wall", op_type="Relu")
            record("timed", timed, resolved.codegen.clock, op_type="Relu")
            if profiled:
                record("profiled", profiled, "event", op_type="Relu")
        else:
            src, dst = split_pair(job.target)
            sample = copy_sampler(self.machine.device(src), self.machine.device(dst), job.nbytes)
            copies = self.settings.for_short_runs().per_pass()
            record(job.key, collect(sample, copies), "wall", nbytes=job.nbytes)

    def _record_window(
        self,
        job: Job,
        graph: Graph,
        samples: list[float],
        resolved: ResolvedTarget,
        record: Callable[..., None],
    ) -> None:
        """Record ``samples`` of the window ``job.nodes`` run whole as its calibration row."""
        reference = op_sum(self.profile, graph, job.nodes, job.target)
        record(
            job.key, samples, resolved.codegen.clock, "calibration",
            op_type=f"{len(job.nodes)} ops",
            reference_s=math.nan if reference is None else reference,
        )  # fmt: skip

    def _launch(
        self, resolved: ResolvedTarget, settings: TimingSettings
    ) -> tuple[list[float], list[float], list[float]]:
        """Wall times of entering a trivial partition, and what ``run_timed`` says of it.

        Layout-converting codegens also give what their own profiler says the probe's one
        kernel took (empty for the rest): a kernel that does nearly nothing, so that is the
        profiler's overhead on every kernel it times.
        """
        probe = launch_probe_graph()
        values = {"x": np.ones((1, 1), np.float32)}
        compiled, env = _compiled(resolved, probe, probe.nodes, values)
        walls = collect(wall_sampler(resolved, compiled, env), settings)
        timed = collect(lambda: compiled.run_timed(env), settings)
        if not resolved.codegen.converts_layouts:
            return walls, timed, []
        # the profiler counts whole microseconds: many runs, so that the median is not one tick
        profiled = [kernels for _, kernels in compiled.layout_samples(env, PROFILED_RUNS)]
        return walls, timed, profiled


def launch_keys(resolved: ResolvedTarget) -> tuple[str, ...]:
    """The ``launch`` row keys a complete profile holds for ``resolved``'s target."""
    return ("wall", "timed", "profiled") if resolved.codegen.converts_layouts else ("wall", "timed")


def _compiled(
    resolved: ResolvedTarget, graph: Graph, nodes: list[Node], values: dict[str, np.ndarray]
) -> tuple[CompiledSubgraph, dict[str, Any]]:
    """``nodes`` compiled for ``resolved``, and an environment holding their inputs there."""
    device, unit = resolved.placement.device, resolved.placement.unit
    env: dict[str, Any] = {
        name: device.from_host(values[name], unit) for name in boundary(graph, nodes)[0]
    }
    device.synchronize(unit)
    return _compile(resolved, graph, nodes), env


def _compile(resolved: ResolvedTarget, graph: Graph, nodes: list[Node]) -> CompiledSubgraph:
    """``nodes`` compiled for ``resolved`` as one subgraph, its inputs and outputs its edges."""
    return resolved.codegen.compile(graph, nodes, *boundary(graph, nodes), resolved.placement)


def wall_sampler(
    resolved: ResolvedTarget, compiled: CompiledSubgraph, env: dict[str, Any]
) -> Callable[[], float]:
    """A function returning the wall time of one run of ``compiled``, synchronised after."""
    device, unit = resolved.placement.device, resolved.placement.unit

    def sample() -> float:
        start = time.perf_counter()
        compiled.run(env)
        device.synchronize(unit)
        return time.perf_counter() - start

    return sample


def _enqueue_sampler(
    resolved: ResolvedTarget, compiled: CompiledSubgraph, env: dict[str, Any]
) -> Callable[[], float]:
    """A function timing how long the host takes to enqueue ``compiled`` (its ``run``).

    The device is idle when it starts and is waited for after, outside the timing.
    """
    device, unit = resolved.placement.device, resolved.placement.unit

    def sample() -> float:
        start = time.perf_counter()
        compiled.run(env)
        elapsed = time.perf_counter() - start
        device.synchronize(unit)
        return elapsed

    return sample


def _pair_sampler(
    resolved: ResolvedTarget,
    graph: Graph,
    pair: list[Node],
    values: dict[str, np.ndarray],
    producer_times: list[float],
) -> Callable[[], float]:
    """A function timing ``pair`` (producer, consumer) as one subgraph, its producer just before.

    Each call runs the producer alone and appends what ``run_timed`` said of it to
    ``producer_times``, then returns what it says of the pair. Timed in turn, the two see
    the same spells of the host, so that the little a fused consumer adds is not lost in
    the drift between two jobs measured seconds apart (Conv+Relu on onnxruntime: the pair
    minus a Conv timed in another job came out at -6 to +77 times the Relu alone).
    """
    together, env = _compiled(resolved, graph, pair, values)
    producer = pair[0]
    alone = _compile(resolved, graph, [producer])

    def sample() -> float:
        producer_times.append(alone.run_timed(env))
        return together.run_timed(env)

    return sample


def _paired(profile: Profile, target: str, key: str) -> bool:
    """Whether the ``fused`` row (target, key) holds its producer timed in turn with it."""
    row = profile.row("fused", target, key)
    return row is not None and math.isfinite(float(row["reference_s"]))


def _cut_samplers(
    resolved: ResolvedTarget,
    graph: Graph,
    nodes: list[Node],
    values: dict[str, np.ndarray],
    whole_walls: list[float],
    whole_timed: list[float],
) -> tuple[Callable[[], float], Callable[[], float]]:
    """Functions timing ``nodes`` cut in two (:func:`cut_index`), and whole entered cold.

    Each call of the first returns the wall time of the two halves in a row on
    ``resolved``. The whole, run just before (the two alternate, so drift hits both),
    appends its wall time to ``whole_walls`` and what ``run_timed`` said of it (the
    calibration sample) to ``whole_timed``. The second keeps the host busy elsewhere for
    :data:`COLD_GAP_S`, as while another partition of a plan runs, and returns the wall
    time of the whole run then.
    """
    index = cut_index(graph, nodes)
    assert index is not None
    whole, env = _compiled(resolved, graph, nodes, values)
    device, unit = resolved.placement.device, resolved.placement.unit
    halves = [_compile(resolved, graph, part) for part in (nodes[:index], nodes[index:])]

    def sample() -> float:
        start = time.perf_counter()
        whole_timed.append(whole.run_timed(env))
        device.synchronize(unit)
        whole_walls.append(time.perf_counter() - start)
        start = time.perf_counter()
        for part in halves:
            part.run(env)
            device.synchronize(unit)
        return time.perf_counter() - start

    run_whole = wall_sampler(resolved, whole, env)

    def cold() -> float:
        _busy(COLD_GAP_S)
        return run_whole()

    return sample, cold


def _busy(seconds: float) -> None:
    """Keep the calling thread busy for ``seconds`` (a sleep would let its core idle too)."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def _reference_values(graph: Graph) -> dict[str, np.ndarray]:
    """Every non-constant value of ``graph`` on seeded random inputs (numpy reference)."""
    feeds = random_inputs(graph, seed=0)
    produced = [name for node in graph.nodes for name in node.outputs if name]
    compiled = get_codegen("numpy").compile(graph, graph.nodes, graph.inputs, produced)
    env: dict[str, Any] = dict(feeds)
    compiled.run(env)
    return env
