"""Running a plan across the hosts of a cluster: one actor per stage, compiled on its host.

The plan's nodes are cut, in the graph's order, into **stages**: the longest runs of nodes
on one host. Each stage is exported (its nodes, weights and boundary) and handed to an
actor on its host, which imports it, places each node on its target with the host part
dropped, builds the stage's own plan (its partitions, and copy nodes between that host's
devices) and compiles it with that host's codegens: a host checks the targets it is given.

A run passes each stage its inputs as Ray object references, so a value made on one host
and read on another moves once, host to host (what ``autopart network`` times). An actor
takes its calls in order, so with several inputs in flight (:meth:`ClusterPlanExecutor.stream`)
a stage works on one input while the next stage works on the one before: a pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from autopart.cluster.session import Host, import_ray, lost_host, remote_refusal, stop_actor
from autopart.ir.feeds import validate_feeds
from autopart.ir.graph import Graph, Node
from autopart.ir.onnx_export import to_onnx
from autopart.ir.target import FIRST_HOST, VirtualDevice
from autopart.plan.schema import Plan, PlanError
from autopart.runtime.plan_executor import PlanRunResult

LOCAL = FIRST_HOST  # the host this process runs on: targets without a host are on it
STAGE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Stage:
    """A run of consecutive nodes on one host, with the values it reads and hands on."""

    id: str
    host: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass
class StreamResult:
    """A stream of inputs through the plan: every input's latency, the rate, the outputs."""

    latencies: list[float]
    seconds: float
    outputs: list[dict[str, np.ndarray]] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Inputs per second over the whole stream."""
        return len(self.latencies) / self.seconds


def host_of(target: str) -> str:
    """The host a target text names (:data:`LOCAL` where it names none)."""
    return VirtualDevice.parse(target).host or LOCAL


def cut_stages(graph: Graph, assignment: Mapping[str, str]) -> list[Stage]:
    """``graph``'s nodes as stages: runs of consecutive nodes (graph order) on one host.

    ``assignment`` is every node's target text, as a plan holds it.
    """
    runs: list[tuple[str, list[Node]]] = []
    for node in graph.nodes:
        host = host_of(assignment[node.name])
        if runs and runs[-1][0] == host:
            runs[-1][1].append(node)
        else:
            runs.append((host, [node]))
    later_reads: set[str] = set(graph.outputs)
    stages: list[Stage] = []
    for index in range(len(runs) - 1, -1, -1):
        host, nodes = runs[index]
        made = {name for node in nodes for name in node.outputs if name}
        reads = [
            name
            for node in nodes
            for name in node.present_inputs
            if name not in made and not graph.value(name).is_const
        ]
        outputs = tuple(name for node in nodes for name in node.outputs if name in later_reads)
        stages.append(Stage(f"s{index}", host, tuple(n.name for n in nodes),
                            tuple(dict.fromkeys(reads)), outputs))  # fmt: skip
        later_reads |= set(reads)
    return stages[::-1]


class _StageRunner:
    """One stage compiled on its host (Ray makes it an actor there)."""

    def __init__(self, host: Host, stage: Stage, model: bytes, targets: dict[str, str]) -> None:
        import onnx

        from autopart.loader import load_model
        from autopart.plan.build import build_plan_for
        from autopart.runtime.plan_executor import PlanExecutor

        host.pin()
        graph = load_model(onnx.ModelProto.FromString(model))
        local = {name: replace(VirtualDevice.parse(t), host=None) for name, t in targets.items()}
        fallback = max(set(local.values()), key=list(local.values()).count)
        assignment = {node.name: local.get(node.name, fallback) for node in graph.nodes}
        plan = build_plan_for(graph, assignment, fallback, f"stage {stage.id} on {host.name}")
        self.stage = stage
        self.executor = PlanExecutor(plan, graph)

    def run(self, *arrays: np.ndarray) -> Any:
        """The stage's outputs for its inputs, in :attr:`Stage.outputs` order."""
        feeds = dict(zip(self.stage.inputs, arrays, strict=True))
        outputs = self.executor.run(feeds, repeat=1, warmup=0).outputs
        values = tuple(outputs[name] for name in self.stage.outputs)
        if len(values) == 1:
            return values[0]
        return values or None  # a stage nothing reads returns nothing

    def ready(self) -> bool:
        """Whether the stage has compiled (a call waits for the constructor)."""
        return True


class ClusterPlanExecutor:
    """Compiles each stage of ``plan`` on its host of ``hosts``, then runs it as asked.

    :class:`PlanError` when the plan names a host the cluster lacks, or a host cannot
    compile its stage (its message says why); :class:`~autopart.cluster.session.HostLostError`
    naming the host that was lost.
    """

    def __init__(self, plan: Plan, graph: Graph, hosts: Sequence[Host]) -> None:
        self.ray = import_ray()
        self.graph = graph
        by_name = {host.name: host for host in hosts}
        self.stages = cut_stages(graph, plan.assignment)
        self.hosts = [
            by_name[h] for h in dict.fromkeys(s.host for s in self.stages) if h in by_name
        ]
        missing = sorted({s.host for s in self.stages} - set(by_name))
        if missing:
            raise PlanError(f"the plan places nodes on {', '.join(missing)}, which the "
                            f"cluster lacks; its hosts: {', '.join(by_name)}")  # fmt: skip
        runner = self.ray.remote(num_cpus=0, max_restarts=0)(_StageRunner)
        self.runners = []
        for stage in self.stages:
            nodes = [graph.node(name) for name in stage.nodes]
            model = to_onnx(graph, nodes, list(stage.inputs), list(stage.outputs))
            targets = {name: plan.assignment[name] for name in stage.nodes}
            host = by_name[stage.host]
            self.runners.append(
                runner.options(scheduling_strategy=host.placement()).remote(
                    host, stage, model.SerializeToString(), targets
                )
            )
        for stage, actor in zip(self.stages, self.runners, strict=True):
            self._get(actor.ready.remote(), stage, "compiling")

    def _get(self, reference: Any, stage: Stage, doing: str) -> Any:
        """``ray.get`` of one stage's call; a refusal or a lost host as one clear error."""
        try:
            return self.ray.get(reference, timeout=STAGE_TIMEOUT_S)
        except Exception as error:  # Ray wraps what the actor raised, or reports a lost node
            refused = remote_refusal(error)
            if refused is not None:
                raise PlanError(f"host {stage.host}, {doing} stage {stage.id}: {refused}") from None
            suspects = sorted(self.hosts, key=lambda host: host.name != stage.host)
            raise lost_host(suspects, f"{doing} stage {stage.id}", error) from None

    def submit(self, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Every stage called on ``feeds``, in order: each value's reference (or array)."""
        values: dict[str, Any] = {name: self.ray.put(array) for name, array in feeds.items()}
        for stage, actor in zip(self.stages, self.runners, strict=True):
            call = actor.run.options(num_returns=len(stage.outputs) or 1)
            made = call.remote(*(values[name] for name in stage.inputs))
            refs = [made] if len(stage.outputs) <= 1 else list(made)
            values.update(zip(stage.outputs, refs, strict=False))
        return values

    def collect(
        self, values: Mapping[str, Any], feeds: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """The graph's outputs from a submitted run (waiting for them)."""
        outputs: dict[str, np.ndarray] = {}
        for name in self.graph.outputs:
            const = self.graph.value(name).const
            if name in feeds:
                outputs[name] = np.asarray(feeds[name])
            elif name in values:
                stage = next(s for s in self.stages if name in s.outputs)
                outputs[name] = self._get(values[name], stage, "running")
            elif const is not None:
                outputs[name] = const
        return outputs

    def run(
        self, feeds: Mapping[str, np.ndarray], repeat: int = 1, warmup: int = 0
    ) -> PlanRunResult:
        """Run the plan ``warmup`` untimed and ``repeat`` timed times, one input at a time."""
        checked = validate_feeds(self.graph, feeds)
        for _ in range(warmup):
            self.collect(self.submit(checked), checked)
        latencies, outputs = [], {}
        for _ in range(repeat):
            started = time.perf_counter()
            outputs = self.collect(self.submit(checked), checked)
            latencies.append(time.perf_counter() - started)
        return PlanRunResult(latencies=latencies, outputs=outputs)

    def stream(
        self, samples: Sequence[Mapping[str, np.ndarray]], in_flight: int | None = None
    ) -> StreamResult:
        """Run ``samples`` as a stream, ``in_flight`` at once (default: one per stage, plus one).

        Each input's latency runs from its submission to its last output.
        """
        return stream_through([self], samples, in_flight or len(self.stages) + 1)

    def close(self) -> None:
        """Stop every stage's actor (one on a lost host is gone already)."""
        for actor in self.runners:
            stop_actor(self.ray, actor)
        self.runners = []


def stream_through(
    executors: Sequence[ClusterPlanExecutor],
    samples: Sequence[Mapping[str, np.ndarray]],
    in_flight: int,
) -> StreamResult:
    """Run ``samples`` through ``executors`` in turn (replicas), ``in_flight`` at once.

    Input k goes to executor k mod len(executors). Outputs come back in input order; each
    input's latency runs from its submission to its last output.
    """
    checked = [validate_feeds(executors[0].graph, sample) for sample in samples]
    pending: list[tuple[float, ClusterPlanExecutor, dict[str, Any], Mapping[str, np.ndarray]]] = []
    latencies, outputs = [], []
    started = time.perf_counter()
    for index, sample in enumerate([*checked, *([None] * in_flight)]):
        if sample is not None:
            executor = executors[index % len(executors)]
            pending.append((time.perf_counter(), executor, executor.submit(sample), sample))
        if len(pending) >= in_flight or (sample is None and pending):
            submitted, executor, values, fed = pending.pop(0)
            outputs.append(executor.collect(values, fed))
            latencies.append(time.perf_counter() - submitted)
    return StreamResult(latencies, time.perf_counter() - started, outputs)
