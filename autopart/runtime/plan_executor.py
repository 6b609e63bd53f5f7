"""Running a plan on real targets: one worker per lane, dependency counting, copy nodes.

The executor does what the plan says and decides nothing. It writes the plan's targets onto
its copy of the graph's nodes (:func:`autopart.plan.build.place_plan`), and compiles each
partition for the virtual device its nodes carry, which must be the partition's target.
Each partition runs on its target's lane (a unit, or the whole device); each copy on the
lane of its device pair.
Steps start when the steps they depend on have finished, so different units and devices
run at the same time. Tensors live in one environment per device and are dropped as soon
as their last reader on that device has finished.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from autopart.costmodel.measurements import Latencies
from autopart.host_memory import retain_freed_memory
from autopart.ir.feeds import check_run_fits, validate_feeds
from autopart.ir.graph import Graph, Node
from autopart.ir.target import HOST_DEVICE, VirtualDevice
from autopart.plan.build import place_plan
from autopart.plan.schema import CopySpec, PartitionSpec, Plan, PlanError
from autopart.plan.validate import validate_plan
from autopart.runtime.executor import collect_outputs
from autopart.targets.codegen import CompiledSubgraph
from autopart.targets.devices import Device, Machine, discover
from autopart.targets.resolve import belongs, resolve


@dataclass
class StepTiming:
    """When a step ran, in seconds since the start of its run, and on which lane."""

    step: str
    lane: str
    start: float
    end: float


@dataclass
class PlanRunResult(Latencies):
    """Outputs of the last run, whole-plan latencies, and per-step timings of the last run."""

    outputs: dict[str, np.ndarray]
    steps: list[StepTiming] = field(default_factory=list)


@dataclass
class _Step:
    id: str
    lane: str
    after: list[str]
    reads: list[tuple[str, str]]  # (device, value) pairs this step reads
    spec: PartitionSpec | CopySpec
    compiled: CompiledSubgraph | None = None
    device: Device | None = None
    source: Device | None = None
    unit: int | None = None


class PlanExecutor:
    """Compiles every partition of ``plan`` once, then runs it as often as asked.

    ``graph`` may be unplanned or already carry targets; :class:`PlanError` is raised when
    a node's virtual device disagrees with the plan.
    """

    def __init__(self, plan: Plan, graph: Graph, machine: Machine | None = None) -> None:
        retain_freed_memory()  # runs reuse their buffers, as in a serving process
        check_run_fits(graph)
        self.machine = machine or discover()
        validate_plan(plan, graph, self.machine)
        self.plan = plan
        self.graph = place_plan(graph, plan)
        self.steps = {step.id: step for step in self._compile()}
        self.users: dict[str, list[str]] = {step_id: [] for step_id in self.steps}
        for step in self.steps.values():
            for dependency in step.after:
                self.users[dependency].append(step.id)
        self.readers: dict[tuple[str, str], int] = {}
        for step in self.steps.values():
            for key in step.reads:
                self.readers[key] = self.readers.get(key, 0) + 1
        self.lanes = sorted({step.lane for step in self.steps.values()})
        only = next(iter(self.steps.values())) if len(self.steps) == 1 else None
        self._alone = only if only is not None and only.compiled is not None else None
        self._pools: dict[str, ThreadPoolExecutor] = {}

    def _compile(self) -> list[_Step]:
        steps = []
        alone = len(self.plan.partitions) == 1
        for spec in self.plan.partitions:
            nodes = [self.graph.node(name) for name in spec.nodes]
            resolved = resolve(_target_of(spec, nodes), self.machine)
            placement = replace(resolved.placement, alone=alone)
            compiled = resolved.codegen.compile(
                self.graph, nodes, spec.inputs, spec.outputs, placement
            )
            device = resolved.placement.device
            unit = resolved.placement.unit
            lane = f"{device.name}/{'*' if unit is None else unit}"
            reads = [(device.name, name) for name in spec.inputs]
            steps.append(
                _Step(spec.id, lane, spec.after, reads, spec, compiled, device, None, unit)
            )
        for copy in self.plan.copies:
            source, target = self.machine.device(copy.src), self.machine.device(copy.dst)
            lane = f"copy:{copy.src}->{copy.dst}"
            steps.append(
                _Step(
                    copy.id, lane, copy.after, [(copy.src, copy.value)], copy, None, target, source
                )
            )
        return steps

    @property
    def linger_s(self) -> float:
        """How long the plan's libraries keep cores busy after a run (the longest step's)."""
        return max((s.compiled.linger_s for s in self.steps.values() if s.compiled), default=0.0)

    # -- running -----------------------------------------------------------------------------
    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        repeat: int = 1,
        warmup: int = 0,
        concurrent: bool = True,
    ) -> PlanRunResult:
        """Run the plan ``warmup`` untimed and ``repeat`` timed times on ``feeds``.

        With ``concurrent=False`` the steps run one after another in the plan's order.
        """
        checked = validate_feeds(self.graph, feeds)
        if self._alone is not None:
            return self._run_alone(self._alone, checked, repeat, warmup)
        result = PlanRunResult({})
        for index in range(warmup + max(repeat, 1)):
            start = time.perf_counter()
            if concurrent and len(self.lanes) > 1:
                envs, timings = self._run_concurrent(checked, start)
            else:
                envs, timings = self._run_sequential(checked, start)
            elapsed = time.perf_counter() - start
            if index >= warmup:
                result.latencies.append(elapsed)
                result.steps = timings
            result.outputs = collect_outputs(self.graph, envs.get(HOST_DEVICE, {}))
        return result

    def _run_alone(
        self, step: _Step, feeds: dict[str, np.ndarray], repeat: int, warmup: int
    ) -> PlanRunResult:
        """:meth:`run` for a plan of one partition and no copies: the partition, timed bare.

        A one-partition plan is the library running the whole model, so its runs carry no
        more than that library's own call: no environments per device, dependency counts or
        releases, which cost the 0.1 ms transformer encoder 8% of its time; where the
        subgraph offers a bare call
        (:meth:`~autopart.targets.codegen.CompiledSubgraph.whole_runner`), not even its
        environment (through it, a 7.5 us tabular model's plan measured 1.09x onnxruntime
        alone).
        """
        assert step.compiled is not None and step.device is not None
        compiled, device, unit = step.compiled, step.device, step.unit
        result = PlanRunResult({})
        begin = end = 0.0
        bare = compiled.whole_runner()
        if bare is not None:  # the library's own call, as when it runs the model alone
            values = {name: np.ascontiguousarray(array) for name, array in feeds.items()}
            for index in range(warmup + max(repeat, 1)):
                begin = time.perf_counter()
                outputs = bare(values)
                end = time.perf_counter()
                if index >= warmup:
                    result.latencies.append(end - begin)
            result.outputs = collect_outputs(self.graph, {**values, **outputs})
        else:
            for index in range(warmup + max(repeat, 1)):
                env = dict(feeds)
                begin = time.perf_counter()
                compiled.run(env)
                device.synchronize(unit)
                result.outputs = collect_outputs(self.graph, env)
                end = time.perf_counter()
                if index >= warmup:
                    result.latencies.append(end - begin)
        result.steps = [StepTiming(step.id, step.lane, 0.0, end - begin)]
        return result

    def _fresh_envs(self, feeds: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
        envs: dict[str, dict[str, Any]] = {name: {} for name in self.machine.devices}
        envs[HOST_DEVICE].update(feeds)
        return envs

    def _execute(self, step: _Step, envs: dict[str, dict[str, Any]], origin: float) -> StepTiming:
        begin = time.perf_counter()
        if step.compiled is not None:
            assert step.device is not None
            step.compiled.run(envs[step.device.name])
            step.device.synchronize(step.unit)
        else:
            copy = step.spec
            assert (
                isinstance(copy, CopySpec) and step.source is not None and step.device is not None
            )
            host = step.source.to_host(envs[copy.src][copy.value])
            envs[copy.dst][copy.value] = step.device.from_host(host)
        end = time.perf_counter()
        return StepTiming(step.id, step.lane, begin - origin, end - origin)

    def _release(self, step: _Step, envs: dict[str, dict[str, Any]], remaining: dict) -> None:
        for key in step.reads:
            remaining[key] -= 1
            device, value = key
            if remaining[key] == 0 and not (device == HOST_DEVICE and value in self.graph.outputs):
                envs[device].pop(value, None)

    def _run_sequential(self, feeds: Mapping[str, np.ndarray], origin: float) -> tuple[dict, list]:
        envs = self._fresh_envs(feeds)
        remaining = dict(self.readers)
        timings = []
        for step_id in self.plan.order:
            step = self.steps[step_id]
            timings.append(self._execute(step, envs, origin))
            self._release(step, envs, remaining)
        return envs, timings

    def _pool(self, lane: str) -> ThreadPoolExecutor:
        if lane not in self._pools:
            self._pools[lane] = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"autopart-{lane}"
            )
        return self._pools[lane]

    def _run_concurrent(self, feeds: Mapping[str, np.ndarray], origin: float) -> tuple[dict, list]:
        envs = self._fresh_envs(feeds)
        remaining = dict(self.readers)
        waiting = {step_id: len(step.after) for step_id, step in self.steps.items()}
        running: dict[Future[StepTiming], str] = {}
        ready = [step_id for step_id in self.plan.order if waiting[step_id] == 0]
        timings = []

        def finish(step_id: str, timing: StepTiming) -> None:
            timings.append(timing)
            self._release(self.steps[step_id], envs, remaining)
            for user in self.users[step_id]:
                waiting[user] -= 1
                if waiting[user] == 0:
                    ready.append(user)

        while ready or running:
            if len(ready) == 1 and not running:
                # Nothing can overlap with it: run it here and skip a thread hand-off.
                step_id = ready.pop()
                finish(step_id, self._execute(self.steps[step_id], envs, origin))
                continue
            for step_id in ready:
                step = self.steps[step_id]
                running[self._pool(step.lane).submit(self._execute, step, envs, origin)] = step_id
            ready.clear()
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                step_id = running.pop(future)
                finish(step_id, future.result())
        return envs, sorted(timings, key=lambda t: t.start)

    def close(self) -> None:
        """Stop the worker threads."""
        for pool in self._pools.values():
            pool.shutdown(wait=True)
        self._pools.clear()

    def __enter__(self) -> PlanExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _target_of(spec: PartitionSpec, nodes: list[Node]) -> VirtualDevice:
    """The partition's target; every node's virtual device must belong to it.

    That is the target itself, or, on a codegen that mixes precisions, that target at any
    precision (:func:`~autopart.targets.resolve.belongs`).
    """
    target = VirtualDevice.parse(spec.target)
    devices = {node.virtual_device for node in nodes}
    if not devices or not all(belongs(device, target) for device in devices):
        shown = ", ".join(sorted(map(str, devices)))
        raise PlanError(f"partition {spec.id} runs on {spec.target} but its nodes are on {shown}")
    return target
