"""Measuring what every op costs on every target, what launches cost, and what copies cost.

Ops are timed through the codegens' own ``compile`` and ``CompiledSubgraph.run_timed``, the
code the plan executor runs: a one-node subgraph per distinct signature and target, fed with
the real intermediate values of the model (computed once by the numpy reference), placed on
the target's device first. OpenCL reports device time from profiling events; codegens with
no device clock report wall time, from which the launch probe's own time is later taken off
(see :mod:`autopart.profile.costs`).

Everything measured is checkpointed to the profile file every few seconds, atomically, so
an interrupted run (Ctrl-C or a kill) loses at most the last few seconds and a rerun
measures only what is missing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autopart.ir.graph import Graph, Node
from autopart.ir.target import VirtualDevice
from autopart.plan.partition import boundary
from autopart.profile.probe import launch_probe_graph
from autopart.profile.signature import op_signature
from autopart.profile.store import Measurement, Profile
from autopart.profile.timing import TimingSettings, measure
from autopart.profile.transfer import SIZES, copy_sampler, pair_name
from autopart.runtime.feeds import random_inputs
from autopart.targets.codegen import get_codegen
from autopart.targets.devices import Machine
from autopart.targets.resolve import ResolvedTarget, resolve

HOST = "cpu"
Progress = Callable[[int, int, str], None]


@dataclass
class Job:
    """One thing to measure: an op signature, a launch, or a copy size on a device pair."""

    kind: str
    target: str
    key: str
    label: str
    node: Node | None = None
    nbytes: int = 0


@dataclass
class ProfileReport:
    """What a profiling run did: measurements made and reused, and what is still missing."""

    new: int = 0
    reused: int = 0
    missing: int = 0
    unsupported: int = 0
    elapsed_s: float = 0.0
    interrupted: bool = False
    targets: list[str] = field(default_factory=list)


def plan_jobs(
    graph: Graph, targets: Sequence[ResolvedTarget], profile: Profile
) -> tuple[list[Job], int, int]:
    """The measurements ``profile`` lacks for ``graph`` on ``targets``.

    Returns the jobs plus the counts of reused measurements and of (signature, target)
    pairs that the target cannot run (recorded as ``unsupported`` rows). Ops come first in
    the order of the graph, then launches, then copies.
    """
    jobs: list[Job] = []
    reused = unsupported = 0
    seen: set[tuple[str, str]] = set()
    for resolved in targets:
        target = str(resolved.target)
        for node in graph.nodes:
            signature = op_signature(node, graph)
            if (target, signature) in seen:
                continue
            seen.add((target, signature))
            known = profile.has("op", target, signature)
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
    for resolved in targets:
        target = str(resolved.target)
        if profile.has("launch", target, "wall") and profile.has("launch", target, "timed"):
            reused += 1
        else:
            jobs.append(Job("launch", target, "", f"launch on {target}"))
    devices = sorted({str(r.target.device) for r in targets} - {HOST})
    for device in devices:
        for src, dst in ((HOST, device), (device, HOST)):
            for nbytes in SIZES:
                pair = pair_name(src, dst)
                if profile.has("transfer", pair, str(nbytes)):
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
    ) -> ProfileReport:
        """Measure what ``profile`` lacks to plan ``graph`` over ``targets``.

        Stops early once ``budget_s`` seconds were spent (what is left is counted in
        ``missing``). On KeyboardInterrupt the measurements so far are saved and the
        interrupt propagates.
        """
        started = time.perf_counter()
        resolved = [resolve(t, self.machine) for t in targets]
        jobs, reused, unsupported = plan_jobs(graph, resolved, self.profile)
        report = ProfileReport(reused=reused, unsupported=unsupported)
        report.targets = [str(r.target) for r in resolved]
        values = _reference_values(graph) if any(j.kind == "op" for j in jobs) else {}
        by_target = {str(r.target): r for r in resolved}
        last_save = time.perf_counter()
        try:
            for index, job in enumerate(jobs):
                if budget_s is not None and time.perf_counter() - started > budget_s:
                    report.missing = len(jobs) - index
                    break
                if progress is not None:
                    progress(index, len(jobs), job.label)
                self._run(job, graph, values, by_target)
                report.new += 1
                if self.path is not None and time.perf_counter() - last_save > self.checkpoint_s:
                    self.profile.save(self.path)
                    last_save = time.perf_counter()
            if progress is not None:
                progress(len(jobs), len(jobs), "done")
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
    ) -> None:
        if job.kind == "op":
            assert job.node is not None
            resolved = targets[job.target]
            timer = resolved.codegen.clock
            sample = _op_sampler(resolved, graph, [job.node], values)
            result = measure(sample, self.settings, timer)
            self.profile.record("op", job.target, job.key, result, op_type=job.node.op_type)
        elif job.kind == "launch":
            wall, timed = self._launch(targets[job.target])
            self.profile.record("launch", job.target, "wall", wall, op_type="Relu")
            self.profile.record("launch", job.target, "timed", timed, op_type="Relu")
        else:
            src, _, dst = job.target.partition("->")
            sample = copy_sampler(self.machine.device(src), self.machine.device(dst), job.nbytes)
            result = measure(sample, self.settings, "wall")
            self.profile.record("transfer", job.target, job.key, result, nbytes=job.nbytes)

    def _launch(self, resolved: ResolvedTarget) -> tuple[Measurement, Measurement]:
        """Wall time of entering a trivial partition, and what ``run_timed`` says of it."""
        probe = launch_probe_graph()
        node = probe.nodes[0]
        values = {"x": np.ones((1, 1), np.float32)}
        device, unit = resolved.placement.device, resolved.placement.unit
        compiled = resolved.codegen.compile(probe, [node], ["x"], ["y"], resolved.placement)
        env: dict[str, Any] = {"x": device.from_host(values["x"], unit)}
        device.synchronize(unit)

        def wall() -> float:
            start = time.perf_counter()
            compiled.run(env)
            device.synchronize(unit)
            return time.perf_counter() - start

        timed_kind = resolved.codegen.clock
        return (
            measure(wall, self.settings, "wall"),
            measure(lambda: compiled.run_timed(env), self.settings, timed_kind),
        )


def _op_sampler(
    resolved: ResolvedTarget, graph: Graph, nodes: list[Node], values: dict[str, np.ndarray]
) -> Callable[[], float]:
    """Compile ``nodes`` for ``resolved`` and return a function timing one run of them."""
    inputs, outputs = boundary(graph, nodes)
    device, unit = resolved.placement.device, resolved.placement.unit
    compiled = resolved.codegen.compile(graph, nodes, inputs, outputs, resolved.placement)
    env: dict[str, Any] = {name: device.from_host(values[name], unit) for name in inputs}
    device.synchronize(unit)
    return lambda: compiled.run_timed(env)


def _reference_values(graph: Graph) -> dict[str, np.ndarray]:
    """Every non-constant value of ``graph`` on seeded random inputs (numpy reference)."""
    feeds = random_inputs(graph, seed=0)
    produced = [name for node in graph.nodes for name in node.outputs if name]
    compiled = get_codegen("numpy").compile(graph, graph.nodes, graph.inputs, produced)
    env: dict[str, Any] = dict(feeds)
    compiled.run(env)
    return env
