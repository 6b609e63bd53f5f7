"""Exact assignment by integer linear programming (``scipy.optimize.milp``, i.e. HiGHS).

The ILP minimises the sequential latency of the plan
:func:`autopart.plan.build.build_plan` makes: node costs, one copy per (value, destination
device) priced by its true (source, destination) pair (graph inputs live on ``cpu``, graph
outputs must reach it), one launch per partition (with its target's cold entry: see below),
and the edge costs of :meth:`autopart.costmodel.costs.Costs.partition_cost` (a fused node
away from its producer, layout conversions where a node's inputs enter or its outputs leave
its partition).

Launches are counted by levels (:mod:`autopart.search.ilp_levels`): per target, the
partitions of that target some path must enter. The partitioner merges partitions of one
target whenever no cycle results, siblings included, so a lower bound that sees partitions
only through edges would overprice; the levels stay a lower bound of the truth. Joins are
kept exact by cuts, valid because the partitions of
:func:`autopart.plan.partition.partition_graph` never depend on each other in a cycle.
Convexity: a chain ``P`` of joins linking ``a`` to ``b`` with ``u`` on a path ``a -> u ->
b`` obeys ``sum_P e <= |P| - 1 + x[u,t]``. Cycles: joined pieces linked in a cycle by
graph edges cannot all hold together, ``sum e <= |J| - 1``, unless they are one partition
(one target ``t``, every link of the cycle joined: one row per link, relaxed by its
``e``). Joins with at most ``_EAGER_BETWEEN`` nodes in between get their convexity cuts up
front; the others are separated from each solution's joined components. Where a solution's
partitions outnumber its levels, couplings learn what the order of partitions forces
across branches. The fewest partitions of an assignment on three targets or more is
NP-hard and the partitioner's count can exceed it, so an assignment whose true cost stays
above its model value once no cut or coupling explains the difference gets a no-good, its
true cost being known. The model stays a lower bound of the truth on every assignment not
excluded, so ``min(incumbent, dual bound)`` is a proven bound; the loop stops when it
meets the incumbent or time runs out.

A partition pays its target's cold entry only when the plan runs on other targets too. The
model charges it with every launch, so it overprices exactly the assignments of every node
to one target (by that target's cold entry per partition), and is a lower bound of the
truth on every other. Those assignments are among the start assignments (for graphs of up
to ``_HEURISTIC_NODES`` nodes), which enter at their true cost, so the optimum and the
bound stay exact; on larger graphs a one-target optimum can be missed by its cold entries.
The model, its variables and its memory estimate are in
:mod:`autopart.search.ilp_formulation`.

Graphs of :data:`SERIES_MIN_NODES` nodes or more with series points (no memory caps, no
partition measured whole) are solved by segments (:mod:`autopart.search.ilp_series`): one
small ILP per kind of segment and pair of targets around it, joined by a shortest path;
plans on one target are priced whole beside it. The answer and its bound stay exact.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from autopart.costmodel.accuracy import ErrorModel
from autopart.costmodel.alone import FLOOR as ALONE_FLOOR
from autopart.costmodel.costs import Costs, PartitionKey
from autopart.ir.target import VirtualDevice
from autopart.plan.schema import Plan
from autopart.progress import Progress
from autopart.search.constraints import ConstraintError
from autopart.search.ilp_copies import memory_estimate
from autopart.search.ilp_formulation import Formulation, IlpError
from autopart.search.ilp_series import SeriesAnswer, solve_by_segments
from autopart.search.milp_model import solve_milp
from autopart.search.simulator import plan_for, simulate

__all__ = ["IlpError", "IlpResult", "memory_estimate", "solve_ilp"]

Assignment = dict[str, VirtualDevice]
# assignments the caller simulated already, each with its sequential latency (s)
Known = Sequence[tuple[Mapping[str, VirtualDevice], float]]
SERIES_MIN_NODES = 400  # below this the whole-graph ILP is quick: solve it as one


@dataclass
class IlpResult:
    """An ILP answer.

    ``objective_s`` is the simulated sequential latency of the plan of ``assignment`` (the
    best found); ``bound_s`` a proven lower bound on every assignment's; ``gap`` is
    ``(objective - bound) / objective``; ``optimal`` says the gap closed (down to the relative
    gap ``rel_gap``). ``status`` is ``optimal``, ``time_limit`` or ``stopped``;
    ``variables`` and ``constraints`` give the size of the last model solved, ``iterations``
    the number of solves and ``cuts`` the cuts learnt between them. Solved by segments,
    ``segments`` and ``kinds`` count them and their distinct kinds (0 otherwise), and the
    sizes are the largest sub-problem's. ``plan`` is the plan of ``assignment`` as the
    solver built it to simulate it (:func:`~autopart.search.simulator.plan_for`'s default
    source and fallback), where it built one.
    """

    assignment: Assignment
    objective_s: float
    bound_s: float
    gap: float
    optimal: bool
    solve_s: float
    status: str
    variables: int
    constraints: int
    iterations: int = 1
    cuts: int = 0
    segments: int = 0
    kinds: int = 0
    plan: Plan | None = field(default=None, repr=False, compare=False)


def solve_ilp(
    costs: Costs,
    memory: Mapping[str, int] | None = None,
    time_limit_s: float = 60.0,
    rel_gap: float = 1e-7,
    progress: Progress | None = None,
    by_segments: bool | None = None,
    accuracy: ErrorModel | None = None,
    known: Known = (),
) -> IlpResult:
    """The assignment of least sequential latency, proven within ``rel_gap`` if time allows.

    ``memory`` caps devices' bytes (the estimate is in the module docstring); ``accuracy``
    keeps the predicted output error within its tolerance (one row: the reduced nodes'
    error weights, :class:`~autopart.costmodel.accuracy.ErrorModel`); ``progress``
    hears of every solve (a sub-problem's, by segments). ``by_segments`` solves by
    segments where the graph has series points (``None``: from :data:`SERIES_MIN_NODES`
    nodes on; never with memory caps or partitions measured whole). The accuracy row spans
    the whole graph, so segments are solved without it and only plans within the tolerance
    are kept; when that leaves a gap, the whole ILP with the row runs too. Always returns
    the best assignment found, its simulated cost and a valid lower bound. ``known`` holds
    assignments already simulated by the caller, with their sequential latency on
    ``costs``: offered again, they are not rebuilt and simulated twice. Raises
    :class:`IlpError` when a node has no target or nothing was found in time, and
    :class:`ConstraintError` when no assignment fits the memory caps.
    """
    started = time.perf_counter()
    if by_segments is None:
        by_segments = len(costs.graph.nodes) >= SERIES_MIN_NODES
    if by_segments and not memory and not costs.measured:
        deadline = started + time_limit_s
        series = solve_by_segments(costs, deadline, rel_gap, _solve_part, progress)
        if series is not None:
            joined = _joined(costs, series, started, rel_gap, accuracy, known)
            if joined is not None and (joined.optimal or accuracy is None):
                return joined
            left = max(deadline - time.perf_counter(), 1.0)
            whole = _solve_whole(costs, None, left, rel_gap, started, progress, (), accuracy, known)
            return whole if joined is None else _better(joined, whole, rel_gap)
    return _solve_whole(
        costs, memory, time_limit_s, rel_gap, started, progress, (), accuracy, known
    )


def _solve_part(
    costs: Costs, time_limit_s: float, rel_gap: float, banned: list[Assignment]
) -> IlpResult:
    """One segment's sub-problem, solved whole, ``banned`` assignments excluded."""
    return _solve_whole(costs, None, time_limit_s, rel_gap, time.perf_counter(), banned=banned)


def _better(joined: IlpResult, whole: IlpResult, rel_gap: float) -> IlpResult:
    """The cheaper of two answers to one problem, with the higher of their lower bounds.

    On a tie the whole ILP's answer is kept; either way it is optimal when the gap between
    the cheaper answer and the higher bound closed within ``rel_gap``.
    """
    best = whole if whole.objective_s <= joined.objective_s else joined
    bound = min(max(joined.bound_s, whole.bound_s), best.objective_s)
    gap = (best.objective_s - bound) / best.objective_s if best.objective_s > 0 else 0.0
    closed = gap <= rel_gap
    return replace(
        best,
        bound_s=bound,
        gap=gap,
        optimal=closed,
        status="optimal" if closed else best.status,
        solve_s=max(joined.solve_s, whole.solve_s),
    )


def _solve_whole(
    costs: Costs,
    memory: Mapping[str, int] | None,
    time_limit_s: float,
    rel_gap: float,
    started: float,
    progress: Progress | None = None,
    banned: Sequence[Assignment] = (),
    accuracy: ErrorModel | None = None,
    known: Known = (),
) -> IlpResult:
    """The whole-graph ILP (see the module docstring), ``banned`` assignments excluded."""
    form = Formulation(costs, memory or {}, accuracy)
    excluded = [[assignment[node.name] for node in form.nodes] for assignment in banned]
    form.nogoods.extend(excluded)
    incumbent = _Incumbent(costs, [node.name for node in form.nodes], accuracy, known)
    for candidate in form.heuristics():
        if form.feasible(candidate) and candidate not in excluded:
            incumbent.offer(candidate)
    loop = _solve_with_cuts(form, incumbent, started + time_limit_s, rel_gap, memory, progress)
    best, best_cost = incumbent.best, incumbent.cost
    if best is None:
        raise IlpError(f"the ILP found no assignment within {time_limit_s:g} s")
    bound = min(loop.bound, best_cost)
    return IlpResult(
        assignment=dict(zip(incumbent.names, best, strict=True)),
        plan=incumbent.plan,
        objective_s=best_cost,
        bound_s=bound,
        gap=(best_cost - bound) / best_cost if best_cost > 0 else 0.0,
        optimal=loop.status == "optimal",
        solve_s=time.perf_counter() - started,
        status=loop.status,
        variables=loop.size[0],
        constraints=loop.size[1],
        iterations=loop.iterations,
        cuts=loop.cuts,
    )


def _joined(
    costs: Costs,
    series: SeriesAnswer,
    started: float,
    rel_gap: float,
    accuracy: ErrorModel | None = None,
    known: Known = (),
) -> IlpResult | None:
    """The answer by segments, beside every plan on one target, priced by the simulator.

    Only plans within ``accuracy`` are kept (``None`` when none is); the segments' bound,
    solved without it, stays a lower bound.

    The bound is the least of the segments' bound (plans on several targets) and the
    true cost of each plan on one target, or a lower bound of it where that already loses
    (:func:`_one_target_floor`). Each node's quickest target is offered too, in case time
    ran out before the segments gave a plan. ``known`` assignments are offered first: one
    the segments' answer only ties keeps its plan, and no plan is built to learn that.
    """
    names = [node.name for node in costs.graph.nodes]
    incumbent = _Incumbent(costs, names, accuracy, known)
    for assignment in list(incumbent.truth):  # simulated already: a tie keeps the caller's
        incumbent.offer(list(assignment))
    if series.assignment:
        incumbent.offer([series.assignment[name] for name in names])
    entries = [costs.node_cost[name] for name in names]
    incumbent.offer([min(entry, key=entry.__getitem__) for entry in entries])
    bound = series.bound_s
    floors = {
        target: _one_target_floor(costs, names, target)
        for target in costs.targets
        if all(target in entry for entry in entries)
    }
    for target in sorted(floors, key=floors.__getitem__):  # likeliest winners first
        if floors[target] < incumbent.cost:
            bound = min(bound, incumbent.offer([target] * len(names)))
        else:  # it cannot win: its floor bounds it
            bound = min(bound, floors[target])
    if incumbent.best is None:
        return None
    best = incumbent.cost
    bound = min(bound, best)
    gap = (best - bound) / best if best > 0 else 0.0
    optimal = gap <= max(rel_gap, 1e-9)
    return IlpResult(
        assignment=dict(zip(names, incumbent.best, strict=True)),
        plan=incumbent.plan,
        objective_s=best,
        bound_s=bound,
        gap=gap,
        optimal=optimal,
        solve_s=time.perf_counter() - started,
        status="optimal" if optimal else "time_limit" if not series.optimal else "stopped",
        variables=series.variables,
        constraints=series.constraints,
        iterations=series.solves,
        segments=series.segments,
        kinds=series.kinds,
    )


def _one_target_floor(costs: Costs, names: list[str], target: VirtualDevice) -> float:
    """A lower bound of the plan of every node on ``target``: one lone partition.

    Its launch and node costs (edge costs and copies only add), less the lone-partition
    saving as :meth:`Costs.partition_cost` takes it; its measurement, where it has one.
    """
    measured = costs.measured.get(PartitionKey(tuple(names), target, True))
    if measured is not None:
        return measured
    total = costs.launch_cost(target) + math.fsum(costs.cost(n, target) for n in names)
    saving = len(names) * costs.alone.get(target, 0.0)
    return max(total - saving, total * ALONE_FLOOR)


class _Incumbent:
    """The best assignment found so far, with every assignment's true cost computed once.

    ``known`` assignments (the caller's, simulated on the same costs) start with theirs.
    """

    def __init__(
        self,
        costs: Costs,
        names: list[str],
        accuracy: ErrorModel | None = None,
        known: Known = (),
    ) -> None:
        self.costs, self.names, self.accuracy = costs, names, accuracy
        self.truth: dict[tuple[VirtualDevice, ...], float] = {
            tuple(assignment[name] for name in names): cost
            for assignment, cost in known
            if all(name in assignment for name in names)
        }
        self.plan: Plan | None = None  # the best's, where it was built here
        self._built: tuple[tuple[VirtualDevice, ...], Plan] | None = None
        self.best: list[VirtualDevice] | None = None
        self.cost = math.inf

    def true_cost(self, assignment: list[VirtualDevice]) -> float:
        """The simulated sequential latency of ``assignment``, computed once."""
        key = tuple(assignment)
        if key not in self.truth:
            plan = plan_for(dict(zip(self.names, assignment, strict=True)), self.costs)
            self.truth[key] = simulate(plan, self.costs).sequential_s
            self._built = (key, plan)
        return self.truth[key]

    def offer(self, assignment: list[VirtualDevice]) -> float:
        """Keep ``assignment`` if it beats the best so far; return its true cost.

        An assignment outside the tolerance is never kept and costs infinity.
        """
        if self.accuracy is not None and not self.accuracy.fits(
            dict(zip(self.names, assignment, strict=True))
        ):
            return math.inf
        cost = self.true_cost(assignment)
        if cost < self.cost:
            self.best, self.cost = assignment, cost
            built = self._built
            self.plan = built[1] if built is not None and built[0] == tuple(assignment) else None
        self._built = None
        return cost


@dataclass
class _Loop:
    """How the cutting-plane loop ended: status, bound, solves, cuts and the last size."""

    status: str = "stopped"
    bound: float = 0.0
    iterations: int = 0
    cuts: int = 0
    size: tuple[int, int] = (0, 0)


def _solve_with_cuts(
    form: Formulation,
    incumbent: _Incumbent,
    deadline: float,
    rel_gap: float,
    memory: Mapping[str, int] | None,
    progress: Progress | None = None,
) -> _Loop:
    """Solve, learn cuts from the answer and solve again until the gap closes or time ends."""
    loop = _Loop()
    while True:
        if progress is not None:
            best = f"best {incumbent.cost * 1e3:.4g} ms" if incumbent.best else "nothing yet"
            progress(loop.iterations, 0, f"ILP solve {loop.iterations + 1}: {best}")
        left = deadline - time.perf_counter()
        if left <= 0:
            loop.status = "time_limit"
            return loop
        model, x, e = form.build()
        loop.size = (len(model.cost), len(model.row_lower))
        result = solve_milp(model, left, rel_gap)
        loop.iterations += 1
        if result.status == 2:  # every assignment left is excluded or breaks a memory cap
            if incumbent.best is None:
                raise ConstraintError(f"no assignment fits the memory caps {dict(memory or {})}")
            loop.bound, loop.status = incumbent.cost, "optimal"
            return loop
        dual = getattr(result, "mip_dual_bound", None)
        if dual is None or not math.isfinite(dual):
            dual = result.fun if result.status == 0 else None
        if result.x is not None:
            assignment = form.decode(result.x, x)
            cost = incumbent.offer(assignment)
        if dual is not None:
            loop.bound = max(loop.bound, min(incumbent.cost, dual / form.scale))
        if result.x is None:
            loop.status = "time_limit"
            return loop
        if not form.feasible(assignment):  # in HiGHS's tolerances, outside the tolerance or caps
            form.nogoods.append(list(assignment))
            loop.cuts += 1
            continue
        if incumbent.cost - loop.bound <= rel_gap * incumbent.cost:
            loop.status = "optimal"
            return loop
        if result.status != 0:
            loop.status = "time_limit"
            return loop
        added = form.learn(assignment, cost, result.fun / form.scale, result.x, e)
        loop.cuts += added
        if not added:
            return loop
