"""The exact ILP at scale: one small ILP per kind of segment, joined by dynamic programming.

:mod:`autopart.search.coarsen` cuts the graph at its series points into segments that
price independently once the series points' targets are fixed, and groups the segments
into kinds of equal structure and costs. For each kind and each pair of targets of its
entry and exit series points, the whole-graph ILP (:func:`autopart.search.ilp.solve_ilp`)
solves the kind's sub-problem once; a shortest path over the series points' targets then
joins the segments (Alpa's stage DP, on Collage's idea of pricing what cannot be split
once). The same path over the sub-problems' proven bounds gives a lower bound on every
plan on more than one target. A transformer stack of 400 blocks has a few kinds of
segment; a chain of 50,000 ops as many kinds as it has distinct ops.

Work is linear in the graph (the path, the keys) plus the sub-problems of each kind:
targets of the entry times targets of the exit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from autopart.costmodel.costs import Costs
from autopart.ir.target import VirtualDevice
from autopart.progress import Progress
from autopart.search.coarsen import Segment, segment_costs, segment_key, segments, series_points
from autopart.search.simulator import plan_for, simulate

Assignment = dict[str, VirtualDevice]
Entry = tuple[float, float, list[VirtualDevice], bool]  # value, bound, inner targets, optimal


class SubAnswer(Protocol):
    """What a sub-problem's solve reports (an :class:`autopart.search.ilp.IlpResult`)."""

    assignment: Assignment
    objective_s: float
    bound_s: float
    optimal: bool
    variables: int
    constraints: int


SubSolver = Callable[[Costs, float, float], SubAnswer]
"""Solves a sub-problem: (costs, time limit in seconds, relative gap) -> answer."""


@dataclass
class SeriesAnswer:
    """The joined answer: an assignment of every node and what backs it.

    ``value_s`` is the assignment's price as a plan on several targets (the sum of its
    segments' optima); ``bound_s`` a proven lower bound on every plan on more than one
    target. ``optimal`` says every sub-problem was solved to optimality. ``segments`` and
    ``kinds`` count segments and distinct kinds; ``solves`` the sub-problems solved;
    ``variables`` and ``constraints`` the largest sub-problem's size.
    """

    assignment: Assignment
    value_s: float
    bound_s: float
    optimal: bool
    segments: int
    kinds: int
    solves: int = 0
    variables: int = 0
    constraints: int = 0


def solve_by_segments(
    costs: Costs,
    deadline: float,
    rel_gap: float,
    solve: SubSolver,
    progress: Progress | None = None,
) -> SeriesAnswer | None:
    """The least plan by segments (see the module docstring); ``None`` without a series point.

    Sub-problems left when ``deadline`` (a :func:`time.perf_counter` time) has passed are
    answered by each node's quickest target and bounded by the sum of node costs alone.
    ``progress`` hears of each sub-problem before it is solved.
    """
    points = series_points(costs.graph)
    if not points:
        return None
    parts = segments(costs.graph, points)
    keys = [segment_key(costs, part) for part in parts]
    kinds = {key: index for index, key in enumerate(dict.fromkeys(keys))}
    answer = SeriesAnswer({}, 0.0, 0.0, True, len(parts), len(kinds))
    table = _Table(costs, answer, solve, progress)
    nodes = costs.graph.nodes
    value: dict[VirtualDevice | None, float] = {None: 0.0}
    bound: dict[VirtualDevice | None, float] = {None: 0.0}
    back: list[dict[VirtualDevice | None, VirtualDevice | None]] = []
    for part, key in zip(parts, keys, strict=True):
        exits: list[VirtualDevice | None] = (
            list(costs.supported(nodes[part.exit])) if part.exit is not None else [None]
        )
        step_value: dict[VirtualDevice | None, float] = {}
        step_bound: dict[VirtualDevice | None, float] = {}
        choice: dict[VirtualDevice | None, VirtualDevice | None] = {}
        for out in exits:
            for into in value:
                entry = table.entry(part, (kinds[key], into, out), deadline, rel_gap)
                if value[into] + entry[0] < step_value.get(out, math.inf):
                    step_value[out] = value[into] + entry[0]
                    choice[out] = into
                step_bound[out] = min(step_bound.get(out, math.inf), bound[into] + entry[1])
        value, bound = step_value, step_bound
        back.append(choice)
    end = min(value, key=lambda t: value[t])
    answer.value_s, answer.bound_s = value[end], min(bound.values())
    out: VirtualDevice | None = end
    for index in reversed(range(len(parts))):
        into = back[index][out]
        _, _, targets, _ = table.found[(kinds[keys[index]], into, out)]
        for position, target in zip(parts[index].positions, targets, strict=True):
            answer.assignment[nodes[position].name] = target
        out = into
    return answer


class _Table:
    """Each kind's sub-problem answers, by (kind, entry target, exit target)."""

    def __init__(
        self, costs: Costs, answer: SeriesAnswer, solve: SubSolver, progress: Progress | None
    ) -> None:
        self.costs, self.answer, self.solve, self.progress = costs, answer, solve, progress
        self.found: dict[tuple[int, VirtualDevice | None, VirtualDevice | None], Entry] = {}

    def entry(
        self,
        part: Segment,
        key: tuple[int, VirtualDevice | None, VirtualDevice | None],
        deadline: float,
        rel_gap: float,
    ) -> Entry:
        """The segment's value and bound with its series points on ``key``'s targets."""
        found = self.found.get(key)
        if found is not None:
            return found
        costs, answer = self.costs, self.answer
        _, into, out = key
        sub = segment_costs(costs, part, into, out)
        entered = costs.split_entry_cost(into) if into is not None else 0.0
        inner = [costs.graph.nodes[p].name for p in part.positions]
        left = deadline - time.perf_counter()
        if self.progress is not None:
            self.progress(
                answer.solves, 0, f"ILP by segments: kind {key[0] + 1} of {answer.kinds}, "
                f"{len(inner)} nodes, {into} to {out}",
            )  # fmt: skip
        if left > 0:
            result = self.solve(sub, left, rel_gap)
            answer.solves += 1
            answer.variables = max(answer.variables, result.variables)
            answer.constraints = max(answer.constraints, result.constraints)
            targets = [result.assignment[name] for name in inner]
            value, lower, optimal = result.objective_s, result.bound_s, result.optimal
        else:
            quickest = {
                node.name: min(sub.supported(node), key=lambda t, n=node: sub.cost(n, t))
                for node in sub.graph.nodes
            }
            targets = [quickest[name] for name in inner]
            value = simulate(plan_for(quickest, sub), sub).sequential_s
            lower = entered + sum(min(e.values()) for e in sub.node_cost.values())
            optimal = False
        answer.optimal = answer.optimal and optimal
        found = self.found[key] = (value - entered, lower - entered, targets, optimal)
        return found
