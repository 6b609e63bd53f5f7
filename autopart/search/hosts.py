"""The search across hosts: stages of consecutive nodes, priced by profiles and the network.

A plan across hosts is a sequence of **stages**, each a run of consecutive nodes (in the
graph's order) on one host, on the target of that host quickest for the stage's own nodes
(by its profile's op sums: a codegen and a precision per stage). Hosts appear at most
once, in any order. Between two stages, the values made before the cut and read after it
move over the link between their hosts (:class:`~autopart.costmodel.network.NetworkModel`).
Each stage is one call from the local host (``host0``), priced by the link its inputs come
over (a host's link to itself, where measured, for a call within it): the graph's inputs
start on the local host, and its outputs end there, priced by their bytes alone.

- **Latency** (one input): the sum of the stages and the transfers. An exact dynamic
  programme over cut points for each order of hosts.
- **Throughput** (a stream): the slowest stage or transfer bounds the rate, since each
  host and each link works on a different input at once. Also a dynamic programme, over
  the same cut points. **Replicas** of the whole model, one per host that can hold it,
  are the other candidate: their rates add up. Where every host on the driver's machine
  is at work, each gets through fewer inputs (the network model's
  :class:`~autopart.costmodel.sharing.Sharing`, where measured).

A cut point is a node index. Graphs of more than :data:`MAX_CUTS` nodes are cut only at
the index of least crossing bytes within each of :data:`MAX_CUTS` equal spans, so the
search stays near-linear in the graph's size. ``memory`` caps the weights a host holds.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from autopart.costmodel.costs import Costs
from autopart.costmodel.network import Link, NetworkModel
from autopart.errors import AutopartError
from autopart.ir.graph import Graph
from autopart.ir.target import FIRST_HOST, VirtualDevice
from autopart.search.constraints import ConstraintError, parse_bytes

LOCAL = FIRST_HOST  # the host this process runs on: inputs start and outputs end there
MAX_CUTS = 256
_LINK = re.compile(r"^\s*(?P<a>[\w.]+)\s*-\s*(?P<b>[\w.]+)\s*=(?P<rate>[^,]+),(?P<latency>.+)$")
_LATENCY = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?(?:e-?\d+)?)\s*(?P<unit>s|ms|us|ns)\s*$")
_LATENCY_SCALE = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


class HostSearchError(AutopartError):
    """No plan across the hosts fits their memory, or no target runs a host's nodes."""


def parse_links(texts: Sequence[str]) -> NetworkModel:
    """The links ``A-B=BANDWIDTH,LATENCY`` name (``--link``), each both ways.

    BANDWIDTH is bytes per second (``1.25GB/s`` is 10 Gbit/s; the ``/s`` may be left
    out), LATENCY a time with its unit (``200us``, ``0.5ms``, ``1e-3s``). A malformed text
    is a :class:`~autopart.search.constraints.ConstraintError` (one ``error:`` line).
    """
    links: dict[tuple[str, str], Link] = {}
    for text in texts:
        match = _LINK.match(text)
        latency = None if match is None else _LATENCY.match(match["latency"])
        if match is None or latency is None or match["a"] == match["b"]:
            raise ConstraintError(f"malformed --link {text!r}: expected A-B=BANDWIDTH,LATENCY "
                                  "between two hosts, e.g. host0-host1=1.25GB/s,200us")  # fmt: skip
        try:
            rate = parse_bytes(match["rate"].strip().removesuffix("/s").removesuffix("/S"))
        except ConstraintError as error:
            raise ConstraintError(f"--link {text!r}: {error}") from None
        if rate <= 0:
            raise ConstraintError(f"--link {text!r}: the bandwidth must be above zero")
        seconds = float(latency["number"]) * _LATENCY_SCALE[latency["unit"]]
        link = Link.simple(seconds, float(rate))
        links[(match["a"], match["b"])] = links[(match["b"], match["a"])] = link
    return NetworkModel(links)


Stage = tuple[str, VirtualDevice, int, int]  # host, target, first node index, end index


@dataclass(frozen=True)
class HostStagePlan:
    """Stages as (host, target, first node index, end index), and what they predict.

    ``kind`` is ``pipeline`` (one stage or several) or ``replicas`` (each stage is the
    whole graph, on its own host, taking every n-th input). ``latency_s`` is one input's
    time; ``rate_per_s`` the stream's inputs per second. ``mixes``, where given, has one
    entry per stage: None where the stage runs all on its ``target``, else its nodes'
    own targets on its host (:mod:`autopart.search.host_mix`), every node of the stage.
    """

    kind: str
    stages: tuple[Stage, ...]
    latency_s: float
    rate_per_s: float
    mixes: tuple[Mapping[str, VirtualDevice] | None, ...] = ()

    def assignments(self, graph: Graph) -> list[dict[str, str]]:
        """Every node's target text, once per plan to run (one per replica)."""
        mixes = self.mixes or (None,) * len(self.stages)
        if self.kind == "replicas":
            return [
                _place(graph, [stage], [mix]) for stage, mix in zip(self.stages, mixes, strict=True)
            ]
        return [_place(graph, self.stages, mixes)]


def _place(
    graph: Graph, stages: Sequence[Stage], mixes: Sequence[Mapping[str, VirtualDevice] | None]
) -> dict[str, str]:
    assignment = {}
    for (host, target, first, end), mix in zip(stages, mixes, strict=True):
        for node in graph.nodes[first:end]:
            where = target if mix is None else mix[node.name]
            assignment[node.name] = str(where) if host == LOCAL else f"{host}:{where}"
    return assignment


@dataclass
class _Host:
    """One host's prefix sums on each of its targets (rows): seconds, unsupported nodes.

    ``weights`` are the prefix sums of the weights its nodes read first, ``cap`` what it
    may hold. A stage on it runs on the target quickest for that stage's own nodes.
    """

    name: str
    targets: list[VirtualDevice]
    launch: np.ndarray
    seconds: np.ndarray
    unsupported: np.ndarray
    weights: np.ndarray
    cap: float

    def _each_target_s(self, first: int, end: int) -> np.ndarray:
        """Seconds of nodes ``first:end`` on each target; inf where one cannot run them."""
        runs = self.unsupported[:, end] == self.unsupported[:, first]
        spent = self.launch + self.seconds[:, end] - self.seconds[:, first]
        return np.where(runs, spent, math.inf)

    def stage_s(self, first: int, end: int) -> float:
        """Seconds of nodes ``first:end`` as one stage here; inf where it cannot hold them."""
        if self.weights[end] - self.weights[first] > self.cap:
            return math.inf
        return float(self._each_target_s(first, end).min())

    def target_for(self, first: int, end: int) -> VirtualDevice:
        """The target quickest for nodes ``first:end`` (the first of equals)."""
        return self.targets[int(np.argmin(self._each_target_s(first, end)))]


def search_hosts(
    graph: Graph,
    costs: Mapping[str, Costs],
    network: NetworkModel,
    memory: Mapping[str, int] | None = None,
) -> tuple[HostStagePlan, HostStagePlan, HostStagePlan | None]:
    """The quickest plan for one input, the fastest pipeline and the replicas, if any fit.

    ``costs`` are each host's (its profile's, targets without a host); ``memory`` caps a
    host's weights in bytes. :class:`HostSearchError` when no pipeline fits.
    """
    hosts = [_prefixes(graph, name, cost, (memory or {}).get(name)) for name, cost in costs.items()]
    flows = _Flows(*_crossing(graph), network)
    cuts = _cut_points(flows.crossing)
    best_latency: HostStagePlan | None = None
    best_rate: HostStagePlan | None = None
    for count in range(1, len(hosts) + 1):
        for order in itertools.permutations(hosts, count):
            found = _order(order, cuts, flows)
            if found is None:
                continue
            if best_latency is None or found[0].latency_s < best_latency.latency_s:
                best_latency = found[0]
            if best_rate is None or found[1].rate_per_s > best_rate.rate_per_s:
                best_rate = found[1]
    if best_latency is None or best_rate is None:
        raise HostSearchError("no plan across the hosts fits their memory with targets that "
                              "run every node")  # fmt: skip
    return best_latency, best_rate, _replicas(hosts, len(graph.nodes), flows)


def _prefixes(graph: Graph, name: str, costs: Costs, cap: int | None) -> _Host:
    """``name``'s prefix sums on each of its targets, and of the weights its nodes hold."""
    weights = np.zeros(len(graph.nodes) + 1)
    seen: set[str] = set()
    for index, node in enumerate(graph.nodes):
        fresh = [v for v in node.present_inputs if graph.value(v).is_const and v not in seen]
        seen.update(fresh)
        weights[index + 1] = weights[index] + sum(graph.value(v).nbytes for v in fresh)
    targets = list(costs.targets)
    if not targets:
        raise HostSearchError(f"host {name}'s profile prices no target")
    times = np.array([
        [costs.cost(n, target) if target in costs.supported(n) else math.inf for n in graph.nodes]
        for target in targets
    ]).reshape(len(targets), len(graph.nodes))  # fmt: skip
    missing = np.isinf(times)
    zero = np.zeros((len(targets), 1))
    unsupported = np.hstack([zero, np.cumsum(missing, axis=1)])
    seconds = np.hstack([zero, np.cumsum(np.where(missing, 0.0, times), axis=1)])
    launch = np.array([costs.launch_cost(target) for target in targets])
    return _Host(name, targets, launch, seconds, unsupported, weights,
                 math.inf if cap is None else float(cap))  # fmt: skip


def _crossing(graph: Graph) -> tuple[np.ndarray, float, np.ndarray]:
    """Bytes crossing each cut point, the inputs' bytes, and outputs' bytes made before each."""
    count = len(graph.nodes)
    index = {name: i for i, node in enumerate(graph.nodes) for name in node.outputs if name}
    last: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for name in node.present_inputs:
            if not graph.value(name).is_const:
                last[name] = i
    delta = np.zeros(count + 2)
    for name, reader in last.items():
        made = index.get(name, -1)  # a graph input is made before the first node
        delta[made + 1] += graph.value(name).nbytes
        delta[reader + 1] -= graph.value(name).nbytes
    crossing = np.cumsum(delta)[: count + 1]
    inputs = float(sum(graph.value(name).nbytes for name in graph.inputs if name in last))
    made_outputs = np.zeros(count + 1)
    for name in graph.outputs:
        if name in index:
            made_outputs[index[name] + 1] += graph.value(name).nbytes
    return crossing, inputs, np.cumsum(made_outputs)


def _cut_points(crossing: np.ndarray) -> list[int]:
    """Every node index, or where least crosses in each of :data:`MAX_CUTS` equal spans."""
    count = len(crossing) - 1
    if count <= MAX_CUTS:
        return list(range(count + 1))
    bounds = np.linspace(1, count, MAX_CUTS + 1).astype(int)
    chosen = {
        int(lo + np.argmin(crossing[lo:hi])) for lo, hi in itertools.pairwise(bounds) if hi > lo
    }
    return sorted({0, count} | chosen)


@dataclass
class _Flows:
    """What moves between hosts: bytes crossing each node index, the inputs, the outputs."""

    crossing: np.ndarray
    inputs: float
    outputs: np.ndarray
    network: NetworkModel

    def link_s(self, a: str, b: str, nbytes: float) -> float:
        """Seconds for a stage on ``b`` to be called with ``nbytes`` made on ``a``.

        A host's link to itself prices a call within it; without one, that is free.
        """
        if a == b and (a, a) not in self.network.links:
            return 0.0
        return self.network.seconds(a, b, max(nbytes, 0.0))

    def pipeline_rate(self, stages: Sequence[Stage], bottleneck: float) -> float:
        """Inputs per second through ``stages`` whose slowest part takes ``bottleneck``.

        Less what the hosts on the driver's machine lose when all of them are at work
        (:class:`~autopart.costmodel.sharing.Sharing`, where measured).
        """
        sharing = self.network.sharing
        if sharing is not None and sharing.applies([stage[0] for stage in stages]):
            return sharing.efficiency(bottleneck) / bottleneck
        return 1.0 / bottleneck

    def replicas_rate(self, hosts: Sequence[str], seconds: Sequence[float]) -> float:
        """Inputs per second of replicas on ``hosts``, each taking its ``seconds`` an input.

        Their rates add up, each shared host's at its efficiency when all of them are at
        work (as :meth:`pipeline_rate`).
        """
        sharing = self.network.sharing
        if sharing is None or not sharing.applies(hosts):
            return sum(1.0 / s for s in seconds)
        return sum(
            (sharing.efficiency(s) if host in sharing.hosts else 1.0) / s
            for host, s in zip(hosts, seconds, strict=True)
        )

    def back_s(self, a: str, nbytes: float) -> float:
        """Seconds for the outputs' ``nbytes`` to reach the local host from ``a`` (no call)."""
        link = self.network.link(a, LOCAL)
        return 0.0 if link is None or nbytes <= 0 else link.bytes_seconds(nbytes)


def _order(
    order: Sequence[_Host], cuts: list[int], flows: _Flows
) -> tuple[HostStagePlan, HostStagePlan] | None:
    """The best latency and rate of stages on hosts in this ``order``, each non-empty."""
    count = len(cuts)
    first = order[0]
    start = flows.link_s(LOCAL, first.name, flows.inputs)
    # latency[s][j]: the stages up to s end at cut j; rate is the bottleneck instead
    latency = np.full((len(order), count), math.inf)
    neck = np.full((len(order), count), math.inf)
    back: dict[tuple[int, int, str], int] = {}
    for j in range(1, count):
        stage = first.stage_s(0, cuts[j])
        latency[0, j], neck[0, j] = start + stage, max(start, stage)
    for s in range(1, len(order)):
        host, before = order[s], order[s - 1]
        for j in range(s + 1, count):
            for i in range(s, j):
                stage = host.stage_s(cuts[i], cuts[j])
                if math.isinf(stage):
                    continue
                move = flows.link_s(before.name, host.name, float(flows.crossing[cuts[i]]))
                through = latency[s - 1, i] + move + stage
                if through < latency[s, j]:
                    latency[s, j], back[(s, j, "l")] = through, i
                bottleneck = max(neck[s - 1, i], move, stage)
                if bottleneck < neck[s, j]:
                    neck[s, j], back[(s, j, "r")] = bottleneck, i
    last = len(order) - 1
    if math.isinf(latency[last, count - 1]):
        return None
    plans = []
    for key in ("l", "r"):
        stages, j = [], count - 1
        for s in range(last, -1, -1):
            i = back[(s, j, key)] if s else 0
            stages.append((order[s].name, order[s].target_for(cuts[i], cuts[j]), cuts[i], cuts[j]))
            j = i
        stages.reverse()
        seconds = [
            host.stage_s(first, end) for host, (_, _, first, end) in zip(order, stages, strict=True)
        ]
        total, bottleneck = _predict(stages, seconds, flows)
        rate = flows.pipeline_rate(stages, bottleneck)
        plans.append(HostStagePlan("pipeline", tuple(stages), total, rate))
    return plans[0], plans[1]


def _predict(
    stages: Sequence[Stage], seconds: Sequence[float], flows: _Flows
) -> tuple[float, float]:
    """One input's time through ``stages`` (each taking its ``seconds``), and the slowest part.

    The time sums the stages, the transfers between them, the inputs' and the outputs';
    the slowest stage or transfer bounds a stream, each host and link busy with its own
    input.
    """
    parts = [flows.link_s(LOCAL, stages[0][0], flows.inputs)]
    for index, ((host, _, first, _), stage_s) in enumerate(zip(stages, seconds, strict=True)):
        if index:
            moved = float(flows.crossing[first])
            parts.append(flows.link_s(stages[index - 1][0], host, moved))
        parts.append(stage_s)
    parts.append(flows.back_s(stages[-1][0], float(flows.outputs[-1])))
    return sum(parts), max(max(parts), 1e-12)


def repriced(
    graph: Graph,
    plan: HostStagePlan,
    seconds: Sequence[float],
    mixes: Sequence[Mapping[str, VirtualDevice] | None],
    network: NetworkModel,
) -> HostStagePlan:
    """``plan`` with each stage taking its ``seconds`` and running its ``mixes``, priced again.

    The transfers are priced as :func:`search_hosts` prices them: a pipeline's latency sums
    its stages and transfers and its rate is one over the slowest; replicas' rates add up.
    """
    flows = _Flows(*_crossing(graph), network)
    if plan.kind == "replicas":
        whole = [stage_s + _replica_moves(stage[0], flows)
                 for stage, stage_s in zip(plan.stages, seconds, strict=True)]  # fmt: skip
        latency_s = min(whole)
        rate = flows.replicas_rate([stage[0] for stage in plan.stages], whole)
    else:
        latency_s, bottleneck = _predict(plan.stages, seconds, flows)
        rate = flows.pipeline_rate(plan.stages, bottleneck)
    return HostStagePlan(plan.kind, plan.stages, latency_s, rate, tuple(mixes))


def _replicas(hosts: Sequence[_Host], count: int, flows: _Flows) -> HostStagePlan | None:
    """Every host that can hold the whole graph, taking inputs in turn; None if under two."""
    whole = []
    for host in hosts:
        stage = host.stage_s(0, count)
        if not math.isinf(stage):
            whole.append((host, stage + _replica_moves(host.name, flows)))
    if len(whole) < 2:
        return None
    stages = tuple((host.name, host.target_for(0, count), 0, count) for host, _ in whole)
    rate = flows.replicas_rate([host.name for host, _ in whole], [s for _, s in whole])
    return HostStagePlan("replicas", stages, min(seconds for _, seconds in whole), rate)


def _replica_moves(host: str, flows: _Flows) -> float:
    """Seconds to send a replica on ``host`` its inputs and bring its outputs back."""
    return flows.link_s(LOCAL, host, flows.inputs) + flows.back_s(host, float(flows.outputs[-1]))
