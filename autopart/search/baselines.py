"""Peer baselines: the assignments other systems would make from the same :class:`Costs`.

Every function returns an assignment (node name -> target) that covers every node of
``costs.graph`` and only ever picks a target in ``costs.supported(node)``, so constraints
applied by restricting ``Costs`` hold for the baselines too. A node no allowed target can
run raises :class:`BaselineError` naming it.

The one exception is :func:`whole_models`: a peer's library running the whole model as
shipped runs nodes its one-node probe refuses (OpenVINO compiles an ``If`` holding NMS as
part of a detector, never alone), so each peer has a plan that stands for it.
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import fmean

from autopart.costmodel.costs import Costs
from autopart.errors import AutopartError
from autopart.ir.graph import Graph, Node
from autopart.ir.target import HOST_DEVICE, PRECISIONS, REFERENCE_PRECISION, VirtualDevice
from autopart.search.candidates import CandidateKind, candidate_name
from autopart.targets.codegen import Role
from autopart.targets.registry import codegen_for, declared_peers, get_codegen
from autopart.targets.shipped import runs_as_shipped

Assignment = dict[str, VirtualDevice]
Lane = tuple[str, int | None]


class BaselineError(AutopartError):
    """A baseline cannot place some nodes on any target it is allowed to use."""


def single_target(costs: Costs, target: VirtualDevice, fallback: VirtualDevice) -> Assignment:
    """Every node on ``target``; nodes it cannot run go to its library, else to ``fallback``.

    A node ``target`` cannot run at its precision goes to the same device, unit and codegen
    at the nearest more exact precision among ``costs.targets`` that runs it (int8, then
    bf16, then f32), as a library runs the ops it does not quantise; only then to
    ``fallback``. Raises :class:`BaselineError` naming the nodes none of them can run.
    """
    order = [target, *more_exact(target, costs.targets), fallback]
    assignment: Assignment = {}
    stuck: list[str] = []
    allowed = set(costs.targets)
    order = [choice for choice in order if choice in allowed]
    for node in costs.graph.nodes:
        runs_on = costs.node_cost.get(node.name, {})  # a dict: no list of targets per node
        found = next((choice for choice in order if choice in runs_on), None)
        if found is None:
            stuck.append(node.name)
        else:
            assignment[node.name] = found
    if stuck:
        raise BaselineError(
            f"neither {target} nor the fallback {fallback} can run nodes {_names(stuck)}"
        )
    return assignment


def more_exact(target: VirtualDevice, targets: Sequence[VirtualDevice]) -> list[VirtualDevice]:
    """``target`` at each more exact precision found in ``targets``, nearest first."""
    wider = reversed(PRECISIONS[: PRECISIONS.index(target.computes_in)])
    siblings = [target.at_precision(None if p == REFERENCE_PRECISION else p) for p in wider]
    return [sibling for sibling in siblings if sibling in targets]


def default_priority(costs: Costs) -> list[VirtualDevice]:
    """ONNX Runtime's usual provider order: whole non-host devices, then its CPU provider.

    The CPU provider is the whole host, in f32, on the codegen playing
    :attr:`~autopart.targets.codegen.Role.HOST_PROVIDER` (``cpu@onnxruntime``), where
    ``costs`` has that target.
    """
    whole = [target for target in costs.targets if target.unit is None]
    accelerators = [target for target in whole if target.device != HOST_DEVICE]
    provider = codegen_for(Role.HOST_PROVIDER)
    host = [] if provider is None else [VirtualDevice(HOST_DEVICE, None, provider.name)]
    return accelerators + [target for target in whole if target in host]


def default_fallback(costs: Costs) -> VirtualDevice:
    """The host whole-device target that runs the most nodes (first in ``targets`` on ties).

    Raises :class:`BaselineError` when ``costs`` has no whole-device host target.
    """
    hosts = [t for t in costs.targets if t.device == HOST_DEVICE and t.unit is None]
    if not hosts:
        raise BaselineError("no whole-device host target (e.g. cpu@numpy) to fall back on")
    runs = {t: sum(t in costs.node_cost.get(n.name, {}) for n in costs.graph.nodes) for t in hosts}
    return max(hosts, key=lambda t: (runs[t], -hosts.index(t)))


def onnxruntime_ep_rule(
    costs: Costs,
    priority: Sequence[VirtualDevice] | None = None,
    fallback: VirtualDevice | None = None,
) -> Assignment:
    """ONNX Runtime's execution-provider rule.

    Providers in ``priority`` order (default :func:`default_priority`) each take every node
    they support that no earlier provider took, whatever it costs; ``fallback`` (default
    :func:`default_fallback`) gets the rest. Raises :class:`BaselineError` naming nodes that
    no provider and not the fallback can run.
    """
    order = list(default_priority(costs) if priority is None else priority)
    last = default_fallback(costs) if fallback is None else fallback
    assignment: Assignment = {}
    stuck: list[str] = []
    for node in costs.graph.nodes:
        supported = costs.supported(node)
        chosen = next((provider for provider in [*order, last] if provider in supported), None)
        if chosen is None:
            stuck.append(node.name)
        else:
            assignment[node.name] = chosen
    if stuck:
        raise BaselineError(f"no execution provider and not {last} can run nodes {_names(stuck)}")
    return assignment


def per_op_best(costs: Costs) -> Assignment:
    """Each node on its cheapest supported target (first in ``targets`` on ties).

    Transfers and launches are ignored: this is the greedy per-operator choice.
    """
    assignment: Assignment = {}
    for node in costs.graph.nodes:
        supported = _supported_or_raise(costs, node)
        entry = costs.node_cost[node.name]
        assignment[node.name] = min(supported, key=lambda target: entry[target])
    return assignment


def heft(costs: Costs) -> Assignment:
    """HEFT (Topcuoglu et al. 2002) over the node graph, with insertion into idle gaps.

    The upward rank of a node is its mean cost over its supported targets plus the largest
    (mean transfer cost of the edge + rank) over its successors; the mean transfer of an
    edge averages :meth:`Costs.transfer` over every pair of the two nodes' supported targets.
    Ready nodes are placed in decreasing rank order, each on the target giving the earliest
    finish: lanes are units (a whole-device target occupies every unit of its device), a
    value copied to a device once serves every later consumer there, graph inputs start on
    the host, and a target's launch cost is paid when no predecessor already runs there.
    Graph outputs away from the host add their copy back to the finish when comparing.
    """
    graph = costs.graph
    for node in graph.nodes:
        _supported_or_raise(costs, node)
    edges = _edges(graph)
    successors: dict[str, list[tuple[str, int]]] = {node.name: [] for node in graph.nodes}
    for (src, dst), nbytes in edges.items():
        successors[src].append((dst, nbytes))
    rank = _upward_rank(costs, successors)

    lanes = _device_lanes(costs)
    busy: dict[Lane, list[tuple[float, float]]] = {
        lane: [] for lanes_ in lanes.values() for lane in lanes_
    }
    finish: dict[str, float] = {}
    placed: Assignment = {}
    arrival: dict[tuple[str, str], float] = {}  # (value, device) -> time it is there
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    waiting = {node.name: 0 for node in graph.nodes}
    for _, dst in edges:
        waiting[dst] += 1
    ready = [(-rank[n.name], index[n.name], n.name) for n in graph.nodes if waiting[n.name] == 0]
    heapq.heapify(ready)
    entry = {target: costs.split_entry_cost(target) for target in costs.targets}
    lanes_of = {target: _lanes_of(target, lanes) for target in costs.targets}
    while ready:
        _, _, name = heapq.heappop(ready)
        node = graph.node(name)
        best: tuple[float, int, VirtualDevice, float, float, dict[tuple[str, str], float]] | None
        best = None
        beside = {placed[p] for p in _predecessors(graph, node)}
        for order, target in enumerate(costs.supported(node)):
            device = str(target.device)
            copies = _input_arrivals(costs, graph, node, device, placed, finish, arrival)
            data_ready = max(copies.values(), default=0.0)
            for value in node.present_inputs:
                data_ready = max(data_ready, arrival.get((value, device), 0.0))
            launch = 0.0 if target in beside else entry[target]
            duration = costs.cost(node, target) + launch
            target_lanes = lanes_of[target]
            start = _earliest_start(busy, target_lanes, data_ready, duration)
            end = start + duration
            back = sum(
                costs.transfer(device, HOST_DEVICE, graph.value(out).nbytes)
                for out in node.outputs
                if out in graph.outputs
            )
            score = end + back
            if best is None or (score, order) < (best[0], best[1]):
                best = (score, order, target, start, end, copies)
        assert best is not None
        _, _, target, start, end, copies = best
        placed[name] = target
        finish[name] = end
        arrival.update(copies)
        for value in node.outputs:
            if value:
                arrival[(value, str(target.device))] = end
        for lane in lanes_of[target]:
            if end > start:
                bisect.insort(busy[lane], (start, end))
        for succ, _ in successors[name]:
            waiting[succ] -= 1
            if waiting[succ] == 0:
                heapq.heappush(ready, (-rank[succ], index[succ], succ))
    return {node.name: placed[node.name] for node in graph.nodes}


@dataclass(frozen=True)
class Baseline:
    """One baseline's assignment, with its kind and (for a single target) its target."""

    kind: CandidateKind
    assignment: Assignment
    target: VirtualDevice | None = None

    @property
    def name(self) -> str:
        """The baseline's candidate name (:func:`candidate_name`)."""
        return candidate_name(self.kind, self.target)


def baselines(costs: Costs, fallback: VirtualDevice | None = None) -> list[Baseline]:
    """Every baseline, in order: each single target, the provider rule, per-op best, HEFT.

    Single targets are whole devices and units alike, in the order of ``costs.targets``.
    ``fallback`` (default :func:`default_fallback`) takes what a single target or the
    provider rule cannot run; a baseline that still leaves a node unplaceable is left out.
    """
    last = default_fallback(costs) if fallback is None else fallback
    found: list[Baseline] = []
    for target in costs.targets:
        try:
            found.append(Baseline(CandidateKind.SINGLE, single_target(costs, target, last), target))
        except BaselineError:
            continue
    with contextlib.suppress(BaselineError):
        found.append(Baseline(CandidateKind.ORT_EP_RULE, onnxruntime_ep_rule(costs, None, last)))
    found.append(Baseline(CandidateKind.PER_OP_BEST, per_op_best(costs)))
    found.append(Baseline(CandidateKind.HEFT, heft(costs)))
    return found


def whole_models(costs: Costs) -> list[Baseline]:
    """Each peer's library running the whole model as shipped, where per node it could not.

    One :attr:`CandidateKind.WHOLE` baseline per installed peer whose target (its codegen and
    precision on the whole host) is in ``costs.targets``, lacks an op cost for some node,
    and compiles a plan's only partition as the model shipped
    (:func:`autopart.targets.shipped.runs_as_shipped`). Every node goes on that target,
    those its one-node probe refuses too: the library runs them as part of the model, as
    its peer does. A peer whose target has every node's cost has its single baseline.
    """
    graph = costs.graph
    found: list[Baseline] = []
    for peer in declared_peers(available=True):
        if not peer.stands_for_plan:
            continue
        target = VirtualDevice(HOST_DEVICE, None, peer.codegen, peer.precision())
        if target not in costs.targets or any(b.target == target for b in found):
            continue
        if all(target in costs.node_cost.get(n.name, {}) for n in graph.nodes):
            continue  # its single plan is the peer
        if runs_as_shipped(graph, graph.nodes, get_codegen(peer.codegen)):
            everything = {node.name: target for node in graph.nodes}
            found.append(Baseline(CandidateKind.WHOLE, everything, target))
    return found


def all_baselines(costs: Costs, fallback: VirtualDevice | None = None) -> dict[str, Assignment]:
    """Every baseline of :func:`baselines`, as assignments by candidate name.

    Names are ``single:<target>`` for each target, ``ort-ep-rule``, ``per-op-best`` and
    ``heft``.
    """
    return {baseline.name: baseline.assignment for baseline in baselines(costs, fallback)}


# -- helpers ---------------------------------------------------------------------------------
def _names(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _supported_or_raise(costs: Costs, node: Node) -> list[VirtualDevice]:
    supported = costs.supported(node)
    if not supported:
        raise BaselineError(f"no allowed target can run node {node.name!r} ({node.op_type})")
    return supported


def _predecessors(graph: Graph, node: Node) -> Iterable[str]:
    for value in node.present_inputs:
        producer = graph.value(value).producer
        if producer is not None:
            yield producer.name


def _edges(graph: Graph) -> dict[tuple[str, str], int]:
    """Node-to-node edges and the bytes that flow along each (each value counted once)."""
    edges: dict[tuple[str, str], int] = {}
    for node in graph.nodes:
        for value in dict.fromkeys(node.present_inputs):
            producer = graph.value(value).producer
            if producer is not None:
                key = (producer.name, node.name)
                edges[key] = edges.get(key, 0) + graph.value(value).nbytes
    return edges


def _upward_rank(costs: Costs, successors: dict[str, list[tuple[str, int]]]) -> dict[str, float]:
    rank: dict[str, float] = {}
    devices = {node.name: [str(t.device) for t in costs.supported(node)] for node in costs.graph}
    moved: dict[tuple[str, str, int], float] = {}  # the transfers of one edge repeat

    def transfer(src: str, dst: str, nbytes: int) -> float:
        key = (src, dst, nbytes)
        if key not in moved:
            moved[key] = costs.transfer(src, dst, nbytes)
        return moved[key]

    for node in reversed(costs.graph.nodes):
        supported = costs.supported(node)
        mean_cost = fmean(costs.cost(node, target) for target in supported)
        tail = 0.0
        for succ, nbytes in successors[node.name]:
            pairs = [transfer(a, b, nbytes) for a in devices[node.name] for b in devices[succ]]
            tail = max(tail, fmean(pairs) + rank[succ])
        rank[node.name] = mean_cost + tail
    return rank


def _device_lanes(costs: Costs) -> dict[str, list[Lane]]:
    """Each device's lanes: its units named by targets, or one whole-device lane."""
    units: dict[str, set[int]] = {}
    for target in costs.targets:
        entry = units.setdefault(str(target.device), set())
        if target.unit is not None:
            entry.add(target.unit)
    return {
        device: [(device, unit) for unit in sorted(found)] if found else [(device, None)]
        for device, found in units.items()
    }


def _lanes_of(target: VirtualDevice, lanes: dict[str, list[Lane]]) -> list[Lane]:
    if target.unit is None:
        return lanes[str(target.device)]
    return [(str(target.device), target.unit)]


def _input_arrivals(
    costs: Costs,
    graph: Graph,
    node: Node,
    device: str,
    placed: Assignment,
    finish: dict[str, float],
    arrival: dict[tuple[str, str], float],
) -> dict[tuple[str, str], float]:
    """The copies ``node`` would add on ``device``: (value, device) -> arrival time."""
    copies: dict[tuple[str, str], float] = {}
    for value in dict.fromkeys(node.present_inputs):
        meta = graph.value(value)
        if meta.is_const or (value, device) in arrival:
            continue
        if meta.producer is None:
            copies[(value, device)] = costs.transfer(HOST_DEVICE, device, meta.nbytes)
        else:
            src = str(placed[meta.producer.name].device)
            ready = finish[meta.producer.name]
            copies[(value, device)] = ready + costs.transfer(src, device, meta.nbytes)
    return copies


def _earliest_start(
    busy: dict[Lane, list[tuple[float, float]]],
    lanes: list[Lane],
    ready: float,
    duration: float,
) -> float:
    """The earliest time >= ``ready`` at which every lane in ``lanes`` is idle for ``duration``."""
    if duration <= 0:
        return ready
    candidates = {ready}
    for lane in lanes:
        intervals = busy[lane]  # disjoint and sorted, so their ends are sorted too
        after = bisect.bisect_right(intervals, ready, key=lambda interval: interval[1])
        candidates.update(end for _, end in intervals[after:])
    for start in sorted(candidates):
        if all(_idle(busy[lane], start, start + duration) for lane in lanes):
            return start
    raise AssertionError("the latest end is always free")  # pragma: no cover


def _idle(intervals: list[tuple[float, float]], start: float, end: float) -> bool:
    """Whether no interval of the sorted, disjoint ``intervals`` overlaps [start, end)."""
    position = bisect.bisect_left(intervals, (end, float("-inf")))
    return position == 0 or intervals[position - 1][1] <= start
