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

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from autopart.costmodel.costs import Costs
from autopart.ir.target import VirtualDevice
from autopart.progress import Progress
from autopart.search.coarsen import Segment, segment_costs, segment_key, segments, series_points
from autopart.search.simulator import evaluate

Assignment = dict[str, VirtualDevice]
ENUMERATED = 16  # sub-problems of at most this many assignments are tried one by one
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
    steps: dict[int, _Step] = {}
    path = _Path()
    for part, key in zip(parts, keys, strict=True):
        kind = kinds[key]
        if kind not in steps:
            steps[kind] = _Step.of(table, part, kind)
        path.advance(steps[kind])
    answer.value_s, answer.bound_s = path.value, path.bound
    if math.isfinite(answer.value_s):
        nodes = costs.graph.nodes
        chosen = path.walk_back([steps[kinds[key]] for key in keys], costs.targets)
        for part, key in zip(parts, chosen, strict=True):
            found = table.found[key]
            assert found is not None and found[2] is not None
            for position, target in zip(part.positions, found[2], strict=True):
                answer.assignment[nodes[position].name] = target
    return answer


@dataclass
class _Step:
    """A kind of segment as the path sees it: values ``[0]`` and bounds ``[1]`` by target.

    ``best[:, i, o]``: its least plan from entry target ``i`` to exit target ``o`` (one
    row without an entry, one column without an exit); ``pure[:, t]``: every node on
    ``t``; ``mixed[:, t]``: its least plan not all on ``t`` (the entry's target, or the
    exit's without an entry). Impossible plans cost infinity.
    """

    kind: int
    first: bool
    last: bool
    best: np.ndarray
    pure: np.ndarray
    mixed: np.ndarray

    @classmethod
    def of(cls, table: _Table, part: Segment, kind: int) -> _Step:
        """Every sub-problem of the kind, each solved once (through ``table``)."""
        costs, count = table.costs, len(table.costs.targets)
        nodes = costs.graph.nodes
        entries = [None] if part.entry is None else costs.supported(nodes[part.entry])
        exits = [None] if part.exit is None else costs.supported(nodes[part.exit])
        shape = (2, 1 if part.entry is None else count, 1 if part.exit is None else count)
        step = cls(
            kind, part.entry is None, part.exit is None,
            np.full(shape, math.inf), np.full((2, count), math.inf), np.full((2, count), math.inf),
        )  # fmt: skip
        index = {target: i for i, target in enumerate(costs.targets)}
        for into in entries:
            for out in exits:
                at = (0 if into is None else index[into], 0 if out is None else index[out])
                step._fill(table.get(("best", kind, into, out), part), step.best, at)
                one = into if into is not None else out
                if one is None or out not in (one, None):
                    continue
                step._fill(table.get(("mixed", kind, into, out), part), step.mixed, index[one])
                if out is not None:
                    step._fill(table.get(("pure", kind, into, out), part), step.pure, index[one])
        return step

    @staticmethod
    def _fill(entry: Entry | None, array: np.ndarray, at: int | tuple[int, int]) -> None:
        if entry is not None:
            array[(0, *np.atleast_1d(at))] = entry[0]
            array[(1, *np.atleast_1d(at))] = entry[1]


class _Path:
    """The shortest paths so far, by state: values ``[0]`` and bounds ``[1]`` by target.

    ``pure[:, t]``: every node so far on ``t``; ``mixed[:, t]``: the least plan on two
    targets or more whose last series point runs on ``t``. ``back`` keeps, per segment
    and exit target, how its mixed state was reached: 0 its least plan after a mixed
    state, 1 its least plan after a pure one (another target), 2 its least plan not all on
    the pure state's target; and the entry target.
    """

    def __init__(self) -> None:
        self.pure = np.zeros((2, 0))
        self.mixed = np.zeros((2, 0))
        self.back: list[tuple[np.ndarray, np.ndarray]] = []
        self.value = self.bound = math.inf

    def advance(self, step: _Step) -> None:
        """Take the next segment."""
        if step.first:
            self.pure, self.mixed = step.pure.copy(), step.mixed.copy()
            self.back.append((np.zeros(0, int), np.zeros(0, int)))
            return
        count = self.pure.shape[1]
        after_mixed = self.mixed[:, :, None] + step.best
        after_pure = np.full_like(after_mixed, math.inf)  # a last segment: only by turning
        if not step.last:  # to an exit on another target
            other = ~np.eye(count, dtype=bool)
            after_pure[:, other] = (self.pure[:, :, None] + step.best)[:, other]
        turning = self.pure + step.mixed  # [:, t]: still pure into the segment, then not
        if step.last:
            turning = turning[:, :, None]  # the mixed exit of a last segment: from any t
        options = np.stack([after_mixed, after_pure, _diagonal(turning, step.last)], axis=1)
        flat = options.reshape(2, -1, options.shape[3])  # [value|bound, how*into, out]
        choice = np.argmin(flat[0], axis=0)
        self.mixed = flat.min(axis=1)
        self.mixed[0] = flat[0][choice, np.arange(flat.shape[2])]
        self.back.append((choice // count, choice % count))
        self.pure = self.pure + step.pure
        if step.last:
            self.value, self.bound = float(self.mixed[0][0]), float(self.mixed[1][0])

    def walk_back(self, steps: list[_Step], targets: list[VirtualDevice]) -> list[Key]:
        """Each segment's plan along the least path ending in a mixed state."""
        chosen: list[Key] = []
        pure, at = False, 0
        for step, (how, into) in zip(reversed(steps), reversed(self.back), strict=True):
            out = None if step.last else targets[at]
            if step.first:
                chosen.append(("pure" if pure else "mixed", step.kind, None, out))
                continue
            if pure:
                chosen.append(("pure", step.kind, targets[at], out))
                continue
            way, source = int(how[at]), int(into[at])
            name = "mixed" if way == 2 else "best"
            chosen.append((name, step.kind, targets[source], out))
            pure, at = way > 0, source
        return chosen[::-1]


def _diagonal(turning: np.ndarray, last: bool) -> np.ndarray:
    """The turning option as a (2, into, out) array: from target t to the exit on t."""
    if last:
        return turning  # already (2, into, 1)
    count = turning.shape[1]
    array = np.full((2, count, count), math.inf)
    array[:, np.arange(count), np.arange(count)] = turning
    return array


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
        choices = [sub.supported(node) for node in sub.graph.nodes]
        if math.prod(len(c) for c in choices) <= ENUMERATED:  # a chain's one-node segments
            found = _enumerated(sub, choices, banned)
            if found is None:
                return math.inf, math.inf, None, True
            value = found[1] - entered
            return value, value, [found[0][name] for name in inner], True
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


def _enumerated(
    sub: Costs, choices: list[list[VirtualDevice]], banned: list[Assignment]
) -> tuple[Assignment, float] | None:
    """The least of every assignment of ``sub`` but ``banned``, by the simulator."""
    names = [node.name for node in sub.graph.nodes]
    best: tuple[Assignment, float] | None = None
    for combination in itertools.product(*choices):
        assignment = dict(zip(names, combination, strict=True))
        if assignment in banned:
            continue
        value = evaluate(assignment, sub).sequential_s
        if best is None or value < best[1]:
            best = (assignment, value)
    return best


def _may_mix(sub: Costs, inner: list[str], one: Target) -> bool:
    """Whether a node of the segment, its pinned series points aside, can leave ``one``."""
    return any(any(t != one for t in sub.node_cost[name]) for name in inner)
