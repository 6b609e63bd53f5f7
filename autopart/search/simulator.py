"""The cost model: a plan's predicted latency, sequential and as a concurrent list schedule.

Every step of a plan has a cost. A partition costs its target's launch plus the sum of its
nodes' costs and the edge costs its boundary makes them pay (:meth:`Costs.partition_cost`),
and, when the plan runs on more than one target, its target's cold entry (its target sat
idle while the others ran); a copy costs :meth:`Costs.transfer` of its bytes. Those are the
``step_cost`` and ``sequential_s`` the search ranks by, every cold entry paid whole. In the
schedule a partition pays its cold entry by :func:`cold_share` of how long its target has
sat idle since its previous partition ended: the penalty grows as ``1 - exp(-idle / tau)``
(``experiments/exp_cold_entry.py``), and a partition following its target's previous one
by a fraction of a millisecond pays little of it. A partition on unit
``u`` of device ``d`` occupies lane ``d/u``; a whole-device partition occupies every unit
lane of ``d`` (the units named for ``d`` in ``costs.targets`` or in the plan; ``d/*`` when
there are none). Copies run one at a time on lane ``copy:src->dst``.

The schedule is non-delay list scheduling: a step is ready when every step in its ``after``
list has finished; whenever lanes are free, the ready step earliest in ``plan.order`` whose
lanes are all free starts at once. As no lane ever idles while a startable step waits, the
makespan never exceeds the sequential time (the sum of every step's cost).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autopart.costmodel.cold import COLD_ENTRY, cold_share
from autopart.costmodel.costs import Costs
from autopart.errors import AutopartError
from autopart.ir.target import VirtualDevice
from autopart.plan.build import build_plan_for
from autopart.plan.schema import CopySpec, PartitionSpec, Plan


class SimulationError(AutopartError):
    """A plan cannot be costed: a node runs on a target the costs say cannot run it."""


@dataclass
class ScheduledStep:
    """One step of the schedule: which ``lane`` it ran on (the first, if several) and when."""

    step: str
    lane: str
    start_s: float
    end_s: float


@dataclass
class Simulation:
    """A plan's predicted latency.

    ``sequential_s`` is the sum of every step's cost (one stream); ``makespan_s`` is the end
    of the concurrent list schedule ``schedule``; ``step_cost`` is each step's cost by id,
    with every cold entry whole (a step's span in the schedule can be shorter: see
    :func:`cold_share`).
    """

    sequential_s: float
    makespan_s: float
    schedule: list[ScheduledStep]
    step_cost: dict[str, float]


@dataclass(frozen=True)
class _Step:
    id: str
    cost: float
    lanes: tuple[str, ...]
    after: tuple[str, ...]
    target: str = ""  # a partition's; empty for copies
    cold: float = 0.0  # the part of ``cost`` that is its cold entry


def plan_for(
    assignment: Mapping[str, VirtualDevice],
    costs: Costs,
    source: str = "",
    fallback: VirtualDevice | None = None,
) -> Plan:
    """The plan of ``costs.graph`` placed by ``assignment`` (every node's full target).

    Writes ``assignment`` onto a copy of the graph's nodes (:func:`autopart.ir.placement.place`)
    and builds the plan from them (:func:`autopart.plan.build.build_plan`). ``source``
    defaults to the graph's recorded source (else its name); ``fallback`` to the first of
    ``costs.targets``.
    """
    graph = costs.graph
    chosen_fallback = fallback if fallback is not None else costs.targets[0]
    where = source or str(graph.meta.get("source", graph.name))
    return build_plan_for(graph, assignment, chosen_fallback, where)


def simulate(plan: Plan, costs: Costs, cold_ramp_s: float = COLD_ENTRY.ramp_s) -> Simulation:
    """Cost every step of ``plan`` and list-schedule them; see the module docstring.

    ``cold_ramp_s`` is the time constant of :func:`cold_share` (0: cold entries whole).
    """
    steps = _steps(plan, costs)
    starts, ends, lanes = _schedule([steps], cold_ramp_s)
    schedule = [
        ScheduledStep(step.id, lanes[0][i], starts[0][i], ends[0][i])
        for i, step in enumerate(steps)
    ]
    schedule.sort(key=lambda item: (item.start_s, item.end_s, item.step))
    return Simulation(
        sequential_s=math.fsum(step.cost for step in steps),
        makespan_s=max(ends[0], default=0.0),
        schedule=schedule,
        step_cost={step.id: step.cost for step in steps},
    )


def evaluate(assignment: Mapping[str, VirtualDevice], costs: Costs) -> Simulation:
    """Simulate the plan of ``assignment`` (:func:`plan_for` then :func:`simulate`)."""
    return simulate(plan_for(assignment, costs), costs)


def stand_in(plan: Plan, priced: Simulation) -> Simulation:
    """``plan``, which its op costs cannot price, priced as the plan ``priced`` simulated.

    For a plan of one partition that has not been timed whole (a library running the whole
    model, nodes without an op cost on its target included): its steps run one after
    another, the partition taking ``priced``'s sequential seconds and copies none.
    """
    lanes = {p.id: f"{VirtualDevice.parse(p.target).device}/*" for p in plan.partitions}
    copies = {c.id: f"copy:{c.src}->{c.dst}" for c in plan.copies}
    lanes.update(copies)
    share = priced.sequential_s / max(len(plan.partitions), 1)
    schedule, now, step_cost = [], 0.0, {}
    for step in plan.order:
        cost = 0.0 if step in copies else share
        schedule.append(ScheduledStep(step, lanes[step], now, now + cost))
        step_cost[step] = cost
        now += cost
    return Simulation(now, now, schedule, step_cost)


def peak_memory_bytes(plan: Plan) -> int:
    """Sum over devices of the weights plus the activation peak recorded in ``plan.storage``."""
    return sum(s.weights_bytes + s.activation_peak_bytes for s in plan.storage.values())


def _steps(plan: Plan, costs: Costs) -> list[_Step]:
    """The plan's steps in ``plan.order``, with their cost and the lanes they occupy."""
    by_id: dict[str, PartitionSpec | CopySpec] = {p.id: p for p in plan.partitions}
    by_id.update({c.id: c for c in plan.copies})
    targets = {p.id: VirtualDevice.parse(p.target) for p in plan.partitions}
    units: dict[str, set[int]] = {}
    for target in [*costs.targets, *targets.values()]:
        if target.unit is not None:
            units.setdefault(str(target.device), set()).add(target.unit)
    split = len({p.target for p in plan.partitions}) > 1
    alone = len(plan.partitions) == 1  # as the plan executor compiles it
    steps = []
    for step_id in plan.order:
        spec = by_id[step_id]
        if isinstance(spec, CopySpec):
            cost = costs.transfer(spec.src, spec.dst, spec.nbytes)
            lanes: tuple[str, ...] = (f"copy:{spec.src}->{spec.dst}",)
        else:
            target = targets[step_id]
            own = _node_targets(plan, spec)
            if not costs.is_measured(spec.nodes, target, alone, own):
                for node in spec.nodes:  # a clear error for a node it cannot run
                    _node_cost(costs, node, own[node] if own else target)
            cost = costs.partition_cost(spec.nodes, target, split, alone, own)
            cold = costs.cold_cost(target) if split else 0.0
            device = str(target.device)
            if target.unit is not None:
                lanes = (f"{device}/{target.unit}",)
            else:
                lanes = tuple(f"{device}/{u}" for u in sorted(units.get(device, ()))) or (
                    f"{device}/*",
                )
            steps.append(_Step(step_id, cost, lanes, tuple(spec.after), str(target), cold))
            continue
        steps.append(_Step(step_id, cost, lanes, tuple(spec.after)))
    return steps


def _node_targets(plan: Plan, spec: PartitionSpec) -> dict[str, VirtualDevice] | None:
    """Each node's own target where ``spec`` mixes precisions, else None (all are its own)."""
    texts = [plan.assignment.get(node, spec.target) for node in spec.nodes]
    if all(text == spec.target for text in texts):
        return None
    return {node: VirtualDevice.parse(text) for node, text in zip(spec.nodes, texts, strict=True)}


def _node_cost(costs: Costs, node: str, target: VirtualDevice) -> float:
    entry = costs.node_cost.get(node, {})
    if target not in entry:
        raise SimulationError(f"node {node!r} has no cost on {target}: the target cannot run it")
    return entry[target]


def _schedule(
    runs: Sequence[list[_Step]], ramp_s: float
) -> tuple[list[list[float]], list[list[float]], list[list[str]]]:
    """Non-delay list schedule of every run's steps; (starts, ends, first lanes) per run.

    A partition's duration is its cost less the share of its cold entry that
    :func:`cold_share` waives for how long its target sat idle before it started. Ready
    steps wait in one heap per lane set, keyed by (run, position); there are few lane sets,
    so each start looks at every heap's head once.
    """
    index_of = [{step.id: i for i, step in enumerate(steps)} for steps in runs]
    waiting = [[len(set(step.after)) for step in steps] for steps in runs]
    users: list[list[list[int]]] = []
    for r, steps in enumerate(runs):
        table: list[list[int]] = [[] for _ in steps]
        for i, step in enumerate(steps):
            for dep in set(step.after):
                table[index_of[r][dep]].append(i)
        users.append(table)
    queues: dict[tuple[str, ...], list[tuple[int, int]]] = {}
    busy: set[str] = set()
    starts = [[0.0] * len(steps) for steps in runs]
    ends = [[0.0] * len(steps) for steps in runs]
    for r, steps in enumerate(runs):
        for i, step in enumerate(steps):
            if waiting[r][i] == 0:
                heapq.heappush(queues.setdefault(step.lanes, []), (r, i))
    running: list[tuple[float, int, int, int]] = []
    idle_since: dict[str, float] = {}  # a target's last partition's end
    now, sequence = 0.0, 0
    while True:
        while True:
            best = None
            for lanes, queue in queues.items():
                if queue and not busy.intersection(lanes) and (best is None or queue[0] < best[0]):
                    best = (queue[0], lanes)
            if best is None:
                break
            (r, i), lanes = best
            heapq.heappop(queues[lanes])
            busy.update(lanes)
            step = runs[r][i]
            since = idle_since.get(step.target)
            idle = None if since is None else now - since
            waived = step.cold * (1.0 - cold_share(idle, ramp_s))
            starts[r][i] = now
            ends[r][i] = now + step.cost - waived
            heapq.heappush(running, (ends[r][i], sequence, r, i))
            sequence += 1
        if not running:
            break
        now = running[0][0]
        while running and running[0][0] == now:
            _, _, r, i = heapq.heappop(running)
            busy.difference_update(runs[r][i].lanes)
            if runs[r][i].target:
                idle_since[runs[r][i].target] = now
            for user in users[r][i]:
                waiting[r][user] -= 1
                if waiting[r][user] == 0:
                    heapq.heappush(queues.setdefault(runs[r][user].lanes, []), (r, user))
    left = [steps[i].id for r, steps in enumerate(runs) for i in range(len(steps)) if waiting[r][i]]
    if left:
        raise SimulationError(f"plan steps {left[:5]} wait on each other and never start")
    lanes_of = [[step.lanes[0] for step in steps] for steps in runs]
    return starts, ends, lanes_of
