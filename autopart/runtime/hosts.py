"""Running a plan across the hosts of a cluster: one actor per stage, compiled on its host.

The plan's nodes are cut, in the graph's order, into **stages**: the longest runs of nodes
on one host. Each stage is exported (its nodes, weights and boundary) and handed to an
actor on its host, which imports it, places each node on its target with the host part
dropped, builds the stage's own plan (its partitions, and copy nodes between that host's
devices) and compiles it with that host's codegens: a host checks the targets it is given.
A stage with an int8 target is handed what its inputs hold on the model's calibration
samples, to calibrate on (:mod:`autopart.runtime.stage_calibration`).

Once compiled, the stages are wired by fixed channels (:mod:`autopart.cluster.channels`):
the driver sends each stage the feeds it reads, a stage sends each later stage the values
it reads, host to host, and the graph's outputs come back to the driver; a value moves
once between two hosts (what ``autopart network`` times). Ray places the actors and
reports a host lost; no Ray call is made per input. A stage takes its inputs in order, so
with several inputs in flight (:meth:`ClusterPlanExecutor.stream`) a stage works on one
input while the next stage works on the one before: a pipeline.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from autopart.cluster.channels import Channel, Closed, Inbox, connect, send
from autopart.cluster.session import (
    Host,
    import_ray,
    lost_host,
    one_line,
    remote_refusal,
    stop_actor,
)
from autopart.ir.feeds import validate_feeds
from autopart.ir.graph import Graph, Node
from autopart.ir.onnx_export import to_onnx
from autopart.ir.target import FIRST_HOST, VirtualDevice
from autopart.plan.schema import Plan, PlanError
from autopart.runtime.plan_executor import PlanRunResult
from autopart.runtime.stage_calibration import calibrates, stage_calibration
from autopart.targets.quant_ranges import CalibrationSamples, attach

LOCAL = FIRST_HOST  # the host this process runs on: targets without a host are on it
STAGE_TIMEOUT_S = 600.0
DRIVER = "driver"  # the process that runs the plan: it sends the feeds and takes the outputs
Route = tuple[tuple[str, int], list[str]]  # a consumer's channel address, and what it is sent


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
    """A stream of inputs through the plan: every input's latency, the rate, the outputs.

    ``seconds`` is the whole stream's, ``finished`` when each input's outputs were back
    (seconds from the start, in input order), and ``filling`` how many inputs come back
    together once the stream is under way (one per replica).
    """

    latencies: list[float]
    seconds: float
    outputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    finished: list[float] = field(default_factory=list)
    filling: int = 1

    @property
    def rate(self) -> float:
        """Inputs per second once the stream is full, else over the whole stream.

        Counted from the ``filling``-th input back to the last: the first inputs waited a
        whole latency while nothing else was under way. A stream too short for that is
        rated over its whole ``seconds``.
        """
        count, first = len(self.finished), self.filling
        if count > first and self.finished[-1] > self.finished[first - 1]:
            return (count - first) / (self.finished[-1] - self.finished[first - 1])
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
    """One stage compiled on its host (Ray makes it an actor there), served over channels."""

    def __init__(
        self,
        host: Host,
        stage: Stage,
        model: bytes,
        targets: dict[str, str],
        calibration: CalibrationSamples | None,
    ) -> None:
        import onnx

        from autopart.loader import load_model
        from autopart.plan.build import build_plan_for
        from autopart.runtime.plan_executor import PlanExecutor

        host.pin()
        graph = load_model(onnx.ModelProto.FromString(model))
        attach(graph, calibration)
        local = {name: replace(VirtualDevice.parse(t), host=None) for name, t in targets.items()}
        fallback = max(set(local.values()), key=list(local.values()).count)
        assignment = {node.name: local.get(node.name, fallback) for node in graph.nodes}
        plan = build_plan_for(graph, assignment, fallback, f"stage {stage.id} on {host.name}")
        self.host = host
        self.stage = stage
        self.executor = PlanExecutor(plan, graph)
        self.inbox: Inbox | None = None

    def open(self, authkey: bytes) -> tuple[str, int]:
        """Listen for this stage's inputs; the address its producers connect to."""
        self.inbox = Inbox(self.host.address, authkey)
        return self.inbox.address

    def wire(self, routes: dict[str, Route], senders: list[str], authkey: bytes) -> bool:
        """Connect to each consumer of ``routes``, then serve every input ``senders`` send."""
        connections = {
            consumer: (connect(address, authkey, self.stage.id), names)
            for consumer, (address, names) in routes.items()
        }
        threading.Thread(target=self._serve, args=(connections, set(senders)), daemon=True).start()
        return True

    def _serve(self, connections: dict[str, tuple[Channel, list[str]]], senders: set[str]) -> None:
        """Run each input once every sender's values for it are in; until the driver leaves."""
        assert self.inbox is not None
        pending: dict[int, dict[str, np.ndarray]] = {}
        heard: dict[int, set[str]] = {}
        while True:
            item = self.inbox.get()
            if isinstance(item, Closed):
                if item.sender == DRIVER:
                    break
                continue  # a producer lost: the driver hears of it on its own connection
            pending.setdefault(item.tag, {}).update(item.values)
            heard.setdefault(item.tag, set()).add(item.sender)
            if heard[item.tag] >= senders:
                del heard[item.tag]
                self._answer(item.tag, pending.pop(item.tag), connections)
        for connection, _ in connections.values():
            connection.close()
        self.inbox.close()

    def _answer(
        self,
        tag: int,
        feeds: dict[str, np.ndarray],
        connections: dict[str, tuple[Channel, list[str]]],
    ) -> None:
        """Run input ``tag`` and send each consumer its values; a failure goes to the driver."""
        try:
            outputs = self.executor.run(feeds, repeat=1, warmup=0).outputs
        except Exception as error:  # the stage's own failure, reported on the driver's side
            send(connections[DRIVER][0], tag, {}, error=one_line(error))
            return
        for connection, names in connections.values():
            if names:
                send(connection, tag, {name: outputs[name] for name in names})

    def ready(self) -> bool:
        """Whether the stage has compiled (a call waits for the constructor)."""
        return True


class ClusterPlanExecutor:
    """Compiles each stage of ``plan`` on its host of ``hosts``, wires them, then runs them.

    Once compiled, the stages are joined by fixed channels (:mod:`autopart.cluster.channels`):
    the driver sends each stage the inputs it reads, each stage sends each later stage the
    values it reads, and the stages that make the graph's outputs send them back.
    :class:`PlanError` when the plan names a host the cluster lacks, or a host cannot
    compile or run its stage (its message says why);
    :class:`~autopart.cluster.session.HostLostError` naming the host that was lost.
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
            calibration = None
            if calibrates(list(targets.values())):
                calibration = stage_calibration(graph, list(stage.inputs))
            self.runners.append(
                runner.options(scheduling_strategy=host.placement()).remote(
                    host, stage, model.SerializeToString(), targets, calibration
                )
            )
        made = {name for stage in self.stages for name in stage.outputs}
        self._awaited = {n for n in graph.outputs if n in made and n not in graph.inputs}
        self._tags = itertools.count()
        self._arrived: dict[int, dict[str, np.ndarray]] = {}
        self._inbox: Inbox | None = None
        self._to_stages: dict[str, tuple[Channel, list[str]]] = {}
        try:
            for stage, actor in zip(self.stages, self.runners, strict=True):
                self._get(actor.ready.remote(), stage, "compiling")
            self._wire(by_name.get(LOCAL, hosts[0]).address)
        except BaseException:  # a stage refused or a host lost: free what was made
            self.close()
            raise

    def _wire(self, driver_address: str) -> None:
        """Open each stage's channel and join producers to consumers; the driver's too."""
        authkey = secrets.token_bytes(32)
        self._inbox = Inbox(driver_address, authkey)
        opened = [actor.open.remote(authkey) for actor in self.runners]
        addresses = {
            s.id: tuple(self._get(r, s, "wiring")) for s, r in zip(self.stages, opened, strict=True)
        }
        made_by = {name: s.id for s in self.stages for name in s.outputs}
        feeds_of = {}
        for stage, actor in zip(self.stages, self.runners, strict=True):
            reads = {name: made_by.get(name, DRIVER) for name in stage.inputs}
            routes: dict[str, Route] = {
                DRIVER: (self._inbox.address, [n for n in stage.outputs if n in self.graph.outputs])
            }
            for later in self.stages:
                names = [n for n in later.inputs if made_by.get(n) == stage.id]
                if names and later is not stage:
                    routes[later.id] = (addresses[later.id], names)
            senders = sorted(set(reads.values())) or [DRIVER]
            if DRIVER in senders:
                feeds_of[stage.id] = [n for n, by in reads.items() if by == DRIVER]
            self._get(actor.wire.remote(routes, senders, authkey), stage, "wiring")
        self._to_stages = {
            stage_id: (connect(addresses[stage_id], authkey, DRIVER), names)
            for stage_id, names in feeds_of.items()
        }

    def _get(self, reference: Any, stage: Stage, doing: str) -> Any:
        """``ray.get`` of one stage's call; a refusal or a lost host as one clear error."""
        try:
            return self.ray.get(reference, timeout=STAGE_TIMEOUT_S)
        except Exception as error:  # Ray wraps what the actor raised, or reports a lost node
            refused = remote_refusal(error)
            if refused is not None:
                raise PlanError(f"host {stage.host}, {doing} stage {stage.id}: {refused}") from None
            raise self._lost(stage, doing, error) from None

    def _lost(self, stage: Stage, doing: str, error: BaseException) -> Exception:
        """The error for a stage that stopped answering: its host first among the suspects."""
        suspects = sorted(self.hosts, key=lambda host: host.name != stage.host)
        return lost_host(suspects, f"{doing} stage {stage.id}", error)

    def _stage(self, stage_id: str) -> Stage:
        return next(stage for stage in self.stages if stage.id == stage_id)

    def submit(self, feeds: Mapping[str, np.ndarray]) -> int:
        """Send ``feeds`` to the stages that read them; the run's tag, for :meth:`collect`."""
        tag = next(self._tags)
        self._arrived[tag] = {}
        for stage_id, (connection, names) in self._to_stages.items():
            try:
                send(connection, tag, {name: feeds[name] for name in names})
            except OSError as error:
                raise self._lost(self._stage(stage_id), "running", error) from None
        return tag

    def collect(self, tag: int, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The graph's outputs of the run ``tag`` (waiting for them)."""
        assert self._inbox is not None
        while not self._awaited <= self._arrived[tag].keys():
            try:
                item = self._inbox.get(timeout=STAGE_TIMEOUT_S)
            except queue.Empty:
                late = self._stage(self.stages[-1].id)
                raise self._lost(late, "running", TimeoutError("no answer")) from None
            if isinstance(item, Closed):
                if not any(stage.id == item.sender for stage in self.stages):
                    continue  # a stranger's connection, not a stage's
                raise self._lost(
                    self._stage(item.sender), "running", ConnectionError(item.reason)
                ) from None
            if item.error is not None:
                stage = self._stage(item.sender)
                raise PlanError(f"host {stage.host}, running stage {stage.id}: {item.error}")
            self._arrived.setdefault(item.tag, {}).update(item.values)
        arrived = self._arrived.pop(tag)
        outputs: dict[str, np.ndarray] = {}
        for name in self.graph.outputs:
            const = self.graph.value(name).const
            if name in feeds:
                outputs[name] = np.asarray(feeds[name])
            elif name in arrived:
                outputs[name] = arrived[name]
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
        """Close the channels and stop every stage's actor (one on a lost host is gone already)."""
        for connection, _ in self._to_stages.values():
            with contextlib.suppress(OSError):
                connection.close()
        self._to_stages = {}
        if self._inbox is not None:
            self._inbox.close()
            self._inbox = None
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
    pending: list[tuple[float, ClusterPlanExecutor, int, Mapping[str, np.ndarray]]] = []
    latencies, outputs, finished = [], [], []
    started = time.perf_counter()
    for index, sample in enumerate([*checked, *([None] * in_flight)]):
        if sample is not None:
            executor = executors[index % len(executors)]
            pending.append((time.perf_counter(), executor, executor.submit(sample), sample))
        if len(pending) >= in_flight or (sample is None and pending):
            submitted, executor, tag, fed = pending.pop(0)
            outputs.append(executor.collect(tag, fed))
            now = time.perf_counter()
            latencies.append(now - submitted)
            finished.append(now - started)
    seconds = time.perf_counter() - started
    return StreamResult(latencies, seconds, outputs, finished, min(len(executors), in_flight))
