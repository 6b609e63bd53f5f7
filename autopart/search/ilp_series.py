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
from autopart.search.simulator import evaluate

Assignment = dict[str, VirtualDevice]
Target = VirtualDevice | None
Entry = tuple[float, float, list[VirtualDevice] | None, bool]  # value, bound, targets, optimal
Key = tuple[str, int, Target, Target]  # how (best, pure, mixed), kind, entry and exit targets
State = tuple[bool, Target]  # every node so far on one target; the last series point's


class SubAnswer(Protocol):
    """What a sub-problem's solve reports (an :class:`autopart.search.ilp.IlpResult`)."""

    assignment: Assignment
    objective_s: float
    bound_s: float
    optimal: bool
    variables: int
    constraints: int


SubSolver = Callable[[Costs, float, float, list[Assignment]], SubAnswer]
"""Solves a sub-problem: (costs, time limit in seconds, relative gap, banned) -> answer."""


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
    """The least plan on several targets, by segments; ``None`` without a series point.

    A shortest path over states (the last series point's target, and whether every node
    so far ran on that one target): a plan on one target is priced whole elsewhere, and
    a segment priced as if split would misprice it, so the path ends only in plans that
    use two targets or more. ``assignment`` is empty when there is none. Sub-problems left
    when ``deadline`` (a :func:`time.perf_counter` time) has passed are bounded by the sum
    of their node costs alone. ``progress`` hears of each sub-problem before it is solved.
    """
    points = series_points(costs.graph)
    if not points:
        return None
    parts = segments(costs.graph, points)
    keys = [segment_key(costs, part) for part in parts]
    kinds = {key: index for index, key in enumerate(dict.fromkeys(keys))}
    answer = SeriesAnswer({}, math.inf, math.inf, True, len(parts), len(kinds))
    table = _Table(costs, answer, solve, progress, (deadline, rel_gap))
    nodes = costs.graph.nodes
    layer: dict[State, tuple[float, float]] = {(True, None): (0.0, 0.0)}
    back: list[dict[State, tuple[State, Key]]] = []
    for part, key in zip(parts, keys, strict=True):
        exits = list(costs.supported(nodes[part.exit])) if part.exit is not None else [None]
        step: dict[State, tuple[float, float]] = {}
        choice: dict[State, tuple[State, Key]] = {}
        for (pure, into), (value, bound) in layer.items():
            for out in exits:
                for how, after in _moves(pure, into, out):
                    entry = table.get((how, kinds[key], into, out), part)
                    if entry is None:
                        continue
                    if value + entry[0] < step.get(after, (math.inf, 0.0))[0]:
                        choice[after] = ((pure, into), (how, kinds[key], into, out))
                    old = step.get(after, (math.inf, math.inf))
                    step[after] = (min(old[0], value + entry[0]), min(old[1], bound + entry[1]))
        layer = step
        back.append(choice)
    end: State = (False, None)
    if end not in layer:
        return answer  # no plan on two targets: every node has one
    answer.value_s, answer.bound_s = layer[end]
    if math.isfinite(answer.value_s):
        for index in reversed(range(len(parts))):
            end, found = back[index][end]
            targets = table.found[found]
            assert targets is not None and targets[2] is not None
            for position, target in zip(parts[index].positions, targets[2], strict=True):
                answer.assignment[nodes[position].name] = target
    return answer


def _moves(pure: bool, into: Target, out: Target) -> list[tuple[str, State]]:
    """The ways through a segment from state (pure, into) to its exit on ``out``.

    ``best``: the segment's least plan; ``pure``: every node on the one target so far;
    ``mixed``: its least plan not all on that target. A plan still pure at the end runs on
    one target: it is priced whole elsewhere, so the last segment never keeps it.
    """
    one = into if into is not None else out  # the target a plan still pure would have
    if not pure or one is None or out not in (one, None):
        return [("best", (False, out))]
    moves = [("mixed", (False, out))]
    if out is not None:
        moves.append(("pure", (True, out)))
    return moves


class _Table:
    """Each kind's sub-problem answers, by (how, kind, entry target, exit target)."""

    def __init__(
        self,
        costs: Costs,
        answer: SeriesAnswer,
        solve: SubSolver,
        progress: Progress | None,
        limits: tuple[float, float],
    ) -> None:
        self.costs, self.answer, self.solve, self.progress = costs, answer, solve, progress
        self.deadline, self.rel_gap = limits
        self.found: dict[Key, Entry | None] = {}

    def get(self, key: Key, part: Segment) -> Entry | None:
        """The segment's value, bound and inner targets for ``key`` (``None``: no such plan)."""
        if key not in self.found:
            how, _, into, out = key
            one = into if into is not None else out
            sub = segment_costs(self.costs, part, into, out)
            inner = [self.costs.graph.nodes[p].name for p in part.positions]
            if how == "pure":
                self.found[key] = self._pure(sub, inner, one, into)
            elif how == "mixed" and not _may_mix(sub, inner, one):
                self.found[key] = None
            else:
                best = self.get(("best", key[1], into, out), part) if how == "mixed" else None
                if best is not None and any(t != one for t in best[2] or ()):
                    self.found[key] = best  # the least plan is mixed already
                else:
                    banned = [{n.name: one for n in sub.graph.nodes}] if how == "mixed" else []
                    self.found[key] = self._solved(key, sub, inner, into, banned)
        return self.found[key]

    def _pure(self, sub: Costs, inner: list[str], one: Target, into: Target) -> Entry | None:
        """Every node of the segment on ``one``, priced by the simulator."""
        if one is None or any(one not in sub.node_cost[name] for name in inner):
            return None
        value = evaluate({node.name: one for node in sub.graph.nodes}, sub).sequential_s
        value -= self.costs.split_entry_cost(into) if into is not None else 0.0
        return value, value, [one] * len(inner), True

    def _solved(
        self, key: Key, sub: Costs, inner: list[str], into: Target, banned: list[Assignment]
    ) -> Entry:
        """The sub-problem solved by the ILP, ``banned`` assignments excluded."""
        answer = self.answer
        entered = self.costs.split_entry_cost(into) if into is not None else 0.0
        left = self.deadline - time.perf_counter()
        if self.progress is not None:
            self.progress(
                answer.solves, 0, f"ILP by segments: kind {key[1] + 1} of {answer.kinds}, "
                f"{len(inner)} nodes, {into} to {key[3]}",
            )  # fmt: skip
        if left <= 0:  # no time: no plan, and the node costs alone as a bound
            answer.optimal = False
            lower = sum(min(entry.values()) for entry in sub.node_cost.values())
            return math.inf, lower, None, False
        result = self.solve(sub, left, self.rel_gap, banned)
        answer.solves += 1
        answer.variables = max(answer.variables, result.variables)
        answer.constraints = max(answer.constraints, result.constraints)
        answer.optimal = answer.optimal and result.optimal
        targets = [result.assignment[name] for name in inner]
        return result.objective_s - entered, result.bound_s - entered, targets, result.optimal


def _may_mix(sub: Costs, inner: list[str], one: Target) -> bool:
    """Whether a node of the segment, its pinned series points aside, can leave ``one``."""
    return any(any(t != one for t in sub.node_cost[name]) for name in inner)
