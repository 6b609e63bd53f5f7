"""Exact assignment by integer linear programming (``scipy.optimize.milp``, i.e. HiGHS).

The ILP minimises the sequential latency of the plan :func:`build_plan` makes: node costs,
one copy per (value, destination device) priced by its true (source, destination) pair
(graph inputs live on ``cpu``, graph outputs must reach it), one launch per partition (with
its target's cold entry: see below), and the edge costs of :meth:`Costs.partition_cost` (a
fused node away from its producer, layout conversions where a node's inputs enter or its
outputs leave its partition).

Variables: ``x[n,t]`` (binary) puts node ``n`` on target ``t``; ``need[v,d]`` >= each
consumer's presence on ``d`` (1 for graph outputs on ``cpu``); ``z[v,s,d]`` >=
``X[p,s] + need[v,d] - 1`` pays the copy ``s -> d`` of ``v`` made by ``p`` (``X[p,s]`` sums
``x[p,t]`` over ``s``'s targets); ``s[n,t]`` >= ``x[n,t] - sum_p e[p,n,t]`` pays a launch
when ``n`` joins no producer ``p``'s partition. A join ``e[p,n,t]`` is ``x[p,t]`` until a
cut needs its own variable (``e <= x[p,t]``); it is 0 when a node between ``p`` and ``n``
(on a path ``p -> ... -> n``) cannot run on ``t``. An edge cost of ``n`` on ``t`` that is due
unless every edge of a set is joined gets ``y >= x[n,t] - join`` per edge (an edge that can
never join makes it a fixed part of ``x[n,t]``'s cost).

Launch counting is made exact by cuts, valid because the partitions of
:func:`partition_graph` never depend on each other in a cycle. Convexity: a chain ``P`` of
joins linking ``a`` to ``b`` with ``u`` on a path ``a -> u -> b`` obeys
``sum_P e <= |P| - 1 + x[u,t]``. Cycles: joined pieces linked in a cycle by graph edges
cannot all hold together, ``sum e <= |J| - 1``, unless they are one partition (one target
``t``, every link of the cycle joined: one row per link, relaxed by its ``e``). Joins with at
most ``_EAGER_BETWEEN`` nodes in between get their convexity cuts up front; the others are
separated from each solution's joined components. The partitioner is also greedy (a node
joins the first partition it can and partitions never merge), so the true count can still
exceed the model's; that assignment then gets a no-good cut, its true cost being known. The
model stays a lower bound of the truth on every assignment not excluded, so
``min(incumbent, dual bound)`` is a proven bound; the loop stops when it meets the
incumbent or time runs out. An assignment whose true cost is still above its model value
once no cut explains the difference (the model joined edges the partitioner did not) gets a
no-good too.

A partition pays its target's cold entry only when the plan runs on other targets too. The
model charges it with every launch, so it overprices exactly the assignments of every node
to one target (by that target's cold entry per partition), and is a lower bound of the
truth on every other. Those assignments are among the start assignments (for graphs of
up to ``_HEURISTIC_NODES`` nodes), which enter at their true cost, so the optimum and the
bound stay exact; on larger graphs a one-target optimum can be missed by its cold entries.

Memory caps (an estimate): per device ``d``, the weights (constants read by nodes on ``d``,
each counted once) plus, at each position ``k`` of the topological node order, the bytes of
the non-constant values live at ``k`` (from their producer's position, graph inputs from 0,
to their last reader's, graph outputs to the end) that reside on ``d`` (made there or
copied there) must fit the cap. Values inside partitions count too, so the estimate is
usually above the plan's ``storage`` figures, which pack boundary buffers in step order; it
does not bound them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, OptimizeResult, milp
from scipy.sparse import csr_array

from autopart.errors import AutopartError
from autopart.ir.graph import Graph, Node
from autopart.ir.target import VirtualDevice
from autopart.search.constraints import ConstraintError
from autopart.search.costs import HOST_DEVICE, Costs
from autopart.search.simulator import plan_for, simulate

Assignment = dict[str, VirtualDevice]
Expr = list[tuple[int, float]]
Edge = tuple[int, int, VirtualDevice]  # (producer, consumer, target) of a possible join
Columns = dict[tuple[int, VirtualDevice], int]
# (node, target, seconds, edges): due unless each (producer, consumer) edge joins; None: always
EdgeCost = tuple[int, VirtualDevice, float, list[tuple[int, int]] | None]
_EAGER_BETWEEN = 16
_CUT_BLOCKERS = 64  # in-between nodes a cut names at most (each gives one row)
_CUTS_PER_COMPONENT = 64  # cuts learnt from one component (or cycle group) per solve
_HEURISTIC_NODES = 2000  # beyond this, building each start assignment's plan costs too much


class IlpError(AutopartError):
    """The ILP cannot run: a node no target can run, or no answer within the time limit."""


@dataclass
class IlpResult:
    """An ILP answer.

    ``objective_s`` is the simulated sequential latency of the plan of ``assignment`` (the
    best found); ``bound_s`` a proven lower bound on every assignment's; ``gap`` is
    ``(objective - bound) / objective``; ``optimal`` says the gap closed (within the relative
    tolerance ``rel_gap``). ``status`` is ``optimal``, ``time_limit`` or ``stopped``;
    ``variables`` and ``constraints`` give the size of the last model solved, ``iterations``
    the number of solves and ``cuts`` the cuts learnt between them.
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


def solve_ilp(
    costs: Costs,
    memory: Mapping[str, int] | None = None,
    time_limit_s: float = 60.0,
    rel_gap: float = 1e-7,
) -> IlpResult:
    """The assignment of least sequential latency, proven within ``rel_gap`` if time allows.

    ``memory`` caps devices' bytes (the estimate is in the module docstring). Always returns
    the best assignment found, its simulated cost and a valid lower bound. Raises
    :class:`IlpError` when a node has no target or nothing was found in time, and
    :class:`ConstraintError` when no assignment fits the memory caps.
    """
    started = time.perf_counter()
    deadline = started + time_limit_s
    form = _Formulation(costs, memory or {})
    names = [node.name for node in form.nodes]
    truth: dict[tuple[VirtualDevice, ...], float] = {}

    def true_cost(assignment: list[VirtualDevice]) -> float:
        key = tuple(assignment)
        if key not in truth:
            plan = plan_for(dict(zip(names, assignment, strict=True)), costs)
            truth[key] = simulate(plan, costs).sequential_s
        return truth[key]

    best: list[VirtualDevice] | None = None
    best_cost, bound = math.inf, 0.0
    for candidate in form.heuristics():
        if form.memory_ok(candidate) and true_cost(candidate) < best_cost:
            best, best_cost = candidate, true_cost(candidate)
    status, iterations, cuts, size = "stopped", 0, 0, (0, 0)
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            status = "time_limit"
            break
        model, x, e = form.build()
        size = (len(model.cost), len(model.row_lower))
        result = _solve(model, left, rel_gap)
        iterations += 1
        if result.status == 2:  # every assignment left is excluded or breaks a memory cap
            if best is None:
                raise ConstraintError(f"no assignment fits the memory caps {dict(memory or {})}")
            bound, status = best_cost, "optimal"
            break
        dual = getattr(result, "mip_dual_bound", None)
        if dual is None or not math.isfinite(dual):
            dual = result.fun if result.status == 0 else None
        if result.x is not None:
            assignment = form.decode(result.x, x)
            cost = true_cost(assignment)
            if cost < best_cost:
                best, best_cost = assignment, cost
        if dual is not None:
            bound = max(bound, min(best_cost, dual / form.scale))
        if result.x is None:
            status = "time_limit"
            break
        if best_cost - bound <= rel_gap * best_cost:
            status = "optimal"
            break
        if result.status != 0:
            status = "time_limit"
            break
        added = form.learn(assignment, cost, result.fun / form.scale, result.x, e)
        cuts += added
        if not added:
            break
    if best is None:
        raise IlpError(f"the ILP found no assignment within {time_limit_s:g} s")
    bound = min(bound, best_cost)
    return IlpResult(
        assignment=dict(zip(names, best, strict=True)),
        objective_s=best_cost,
        bound_s=bound,
        gap=(best_cost - bound) / best_cost if best_cost > 0 else 0.0,
        optimal=status == "optimal",
        solve_s=time.perf_counter() - started,
        status=status,
        variables=size[0],
        constraints=size[1],
        iterations=iterations,
        cuts=cuts,
    )


@dataclass
class _Model:
    """A MILP under construction: variables with cost and bounds, and sparse rows."""

    cost: list[float] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    integer: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    cols: list[int] = field(default_factory=list)
    vals: list[float] = field(default_factory=list)
    row_lower: list[float] = field(default_factory=list)
    row_upper: list[float] = field(default_factory=list)

    def var(
        self, cost: float = 0.0, lower: float = 0.0, upper: float = 1.0, integer: int = 0
    ) -> int:
        """A new variable; returns its column."""
        self.cost.append(cost)
        self.lower.append(lower)
        self.upper.append(upper)
        self.integer.append(integer)
        return len(self.cost) - 1

    def row(self, expr: Expr, lower: float = -math.inf, upper: float = math.inf) -> None:
        """A new row ``lower <= expr <= upper``."""
        index = len(self.row_lower)
        for col, val in expr:
            self.rows.append(index)
            self.cols.append(col)
            self.vals.append(val)
        self.row_lower.append(lower)
        self.row_upper.append(upper)


def _solve(model: _Model, time_limit_s: float, rel_gap: float) -> OptimizeResult:
    """Run HiGHS on ``model``."""
    shape = (len(model.row_lower), len(model.cost))
    matrix = csr_array((model.vals, (model.rows, model.cols)), shape=shape)
    return milp(
        np.array(model.cost),
        integrality=np.array(model.integer),
        bounds=Bounds(np.array(model.lower), np.array(model.upper)),
        constraints=LinearConstraint(matrix, model.row_lower, model.row_upper)
        if shape[0]
        else None,
        options={"time_limit": max(time_limit_s, 0.01), "mip_rel_gap": rel_gap},
    )


class _Formulation:
    """The ILP of a :class:`Costs` and the cuts learnt so far."""

    def __init__(self, costs: Costs, memory: Mapping[str, int]) -> None:
        self.costs, self.memory = costs, dict(memory)
        graph = costs.graph
        self.nodes = list(graph.nodes)
        self.index = {node.name: i for i, node in enumerate(self.nodes)}
        self.targets = [costs.supported(node) for node in self.nodes]
        for node, targets in zip(self.nodes, self.targets, strict=True):
            if not targets:
                raise IlpError(f"no target can run {node.op_type} node {node.name!r}")
        self.preds = [sorted(set(_producers(graph, self.index, node))) for node in self.nodes]
        self._closures()
        reference = sum(min(costs.cost(n, t) for t in ts) for n, ts in self._pairs())
        reference += sum(costs.split_entry_cost(t) for t in costs.targets)
        self.scale = 1e6 / reference if reference > 0 else 1.0
        self.cuts: dict[tuple[tuple[Edge, ...], tuple[int, ...], tuple[Edge, ...]], None] = {}
        self.edge_vars: dict[Edge, bool] = {}  # edge -> whether its variable must be integral
        self.nogoods: list[list[VirtualDevice]] = []
        self.edge_costs = self._edge_cost_terms()
        self.priced = {t for t in costs.targets if costs.split_entry_cost(t) > 0} | {
            t for _, t, _, _ in self.edge_costs
        }
        for n, preds in enumerate(self.preds):
            for p in preds:
                between = _bits(self.between(p, n))
                if 0 < len(between) <= _EAGER_BETWEEN:
                    for t in self.targets[n]:
                        if self.may_join(p, n, t) and t in self.priced:
                            self._add_cut(((p, n, t),), tuple(between))

    def _edge_cost_terms(self) -> list[EdgeCost]:
        """Each edge cost as ``(n, t, seconds, edges)``: due unless every edge is joined.

        ``edges`` are (producer, consumer) pairs; ``None`` means the cost is always due (a
        graph input entering, a graph output leaving).
        """
        costs, graph = self.costs, self.costs.graph
        terms: list[EdgeCost] = []
        for n, node in enumerate(self.nodes):
            producer = costs.fused_producer.get(node.name)
            entering: list[tuple[int, int]] | None = [(p, n) for p in self.preds[n]]
            if any(
                not graph.value(name).is_const and graph.value(name).producer is None
                for name in node.present_inputs
            ):
                entering = None
            leaving: list[tuple[int, int]] | None = [(n, c) for c in self.users[n]]
            if any(name in graph.outputs for name in node.outputs if name):
                leaving = None
            for t in self.targets[n]:
                extra = costs.unfused.get(node.name, {}).get(t, 0.0)
                if producer is not None and extra > 0.0:
                    terms.append((n, t, extra, [(self.index[producer], n)]))
                layout = costs.layout.get(node.name, {}).get(t, 0.0)
                if layout > 0.0:
                    terms.append((n, t, layout / 2, entering))
                    terms.append((n, t, layout / 2, leaving))
        return terms

    def _pairs(self) -> list[tuple[str, list[VirtualDevice]]]:
        return [(node.name, ts) for node, ts in zip(self.nodes, self.targets, strict=True)]

    def _closures(self) -> None:
        """Descendant and ancestor bitsets, and per target the nodes that cannot run it."""
        count = len(self.nodes)
        users: list[list[int]] = [[] for _ in range(count)]
        for n, preds in enumerate(self.preds):
            for p in preds:
                users[p].append(n)
        self.users = [sorted(set(found)) for found in users]
        self.desc, self.anc = [0] * count, [0] * count
        for n in reversed(range(count)):
            for user in users[n]:
                self.desc[n] |= self.desc[user] | (1 << user)
        for n in range(count):
            for p in self.preds[n]:
                self.anc[n] |= self.anc[p] | (1 << p)
        self.unable = {
            t: sum(1 << n for n in range(count) if t not in self.targets[n])
            for t in self.costs.targets
        }

    def between(self, a: int, b: int) -> int:
        """Bitset of the nodes on some path ``a -> ... -> b``, ``a`` and ``b`` excluded."""
        return self.desc[a] & self.anc[b]

    def may_join(self, p: int, n: int, t: VirtualDevice) -> bool:
        """Whether ``n`` on ``t`` could ever share a partition with its producer ``p``."""
        return t in self.targets[p] and not self.between(p, n) & self.unable.get(t, 0)

    def _add_cut(
        self,
        edges: tuple[Edge, ...],
        blockers: tuple[int, ...] = (),
        escapes: tuple[Edge, ...] = (),
    ) -> bool:
        """Learn ``sum_edges e <= |edges| - 1``; returns whether it is new.

        With blockers or escapes, one row each, relaxed by ``x[u,t]`` or ``e[j]``.
        """
        key = (tuple(sorted(edges, key=lambda e: (e[0], e[1]))), blockers, escapes)
        if key in self.cuts:
            return False
        self.cuts[key] = None
        integral = len(edges) + len(escapes) > 1
        for edge in (*edges, *escapes):
            self.edge_vars[edge] = self.edge_vars.get(edge, False) or integral
        return True

    # -- the model ------------------------------------------------------------------------
    def build(self) -> tuple[_Model, Columns, dict[Edge, int]]:
        """The MILP with every cut so far; also the columns of ``x[n,t]`` and ``e[p,n,t]``."""
        model = _Model()
        x: Columns = {}
        for n, (name, targets) in enumerate(self._pairs()):
            for t in targets:
                x[(n, t)] = model.var(self.scale * self.costs.cost(name, t), integer=1)
            model.row([(x[(n, t)], 1.0) for t in targets], 1.0, 1.0)
        e = self._launches(model, x)
        self._edges(model, x, e)
        _Transfers(self, model, x).add()
        for assignment in self.nogoods:
            chosen = [
                (x[(n, t)], 1.0) for n, t in enumerate(assignment) if len(self.targets[n]) > 1
            ]
            model.row(chosen, upper=len(chosen) - 1.0)
        return model, x, e

    def _launches(self, model: _Model, x: Columns) -> dict[Edge, int]:
        e: dict[Edge, int] = {}
        for (p, n, t), integral in self.edge_vars.items():
            e[(p, n, t)] = model.var(integer=int(integral))
            model.row([(e[(p, n, t)], 1.0), (x[(p, t)], -1.0)], upper=0.0)
            model.row([(e[(p, n, t)], 1.0), (x[(n, t)], -1.0)], upper=0.0)
        for n, targets in enumerate(self.targets):
            for t in targets:
                price = self.costs.split_entry_cost(t)
                if price <= 0:
                    continue
                expr: Expr = [(model.var(self.scale * price), 1.0), (x[(n, t)], -1.0)]
                for p in self.preds[n]:
                    if self.may_join(p, n, t):
                        expr.append((e.get((p, n, t), x[(p, t)]), 1.0))
                model.row(expr, lower=0.0)
        for edges, blockers, escapes in self.cuts:
            t = edges[0][2]
            joins: Expr = [(e[edge], 1.0) for edge in edges]
            if not blockers and not escapes:
                model.row(joins, upper=len(edges) - 1.0)
            for u in blockers:
                held = [(x[(u, t)], -1.0)] if t in self.targets[u] else []
                model.row([*joins, *held], upper=len(edges) - 1.0)
            for edge in escapes:
                model.row([*joins, (e[edge], -1.0)], upper=len(edges) - 1.0)
        return e

    def _edges(self, model: _Model, x: Columns, e: dict[Edge, int]) -> None:
        """The edge costs: ``y >= x[n,t] - join`` for each edge whose crossing makes one due."""
        for n, t, seconds, edges in self.edge_costs:
            price = self.scale * seconds
            if edges is None or not all(
                t in self.targets[c] and self.may_join(p, c, t) for p, c in edges
            ):
                model.cost[x[(n, t)]] += price  # some edge can never be joined
                continue
            due = model.var(price)
            for p, c in edges:
                other = c if p == n else p
                join = e.get((p, c, t), x[(other, t)])
                model.row([(due, 1.0), (x[(n, t)], -1.0), (join, 1.0)], lower=0.0)

    def device_expr(self, x: Columns, n: int, device: str) -> Expr:
        """``X[n,device]``: the sum of ``x[n,t]`` over ``n``'s targets on ``device``."""
        return [(x[(n, t)], 1.0) for t in self.targets[n] if str(t.device) == device]

    def devices_of(self, n: int) -> set[str]:
        """The devices ``n`` can run on."""
        return {str(t.device) for t in self.targets[n]}

    def decode(self, solution: np.ndarray, x: Columns) -> list[VirtualDevice]:
        """Each node's target in a MILP solution."""
        return [max(ts, key=lambda t: solution[x[(n, t)]]) for n, ts in enumerate(self.targets)]

    # -- learning from a solution ---------------------------------------------------------
    def joins(
        self, assignment: list[VirtualDevice], solution: np.ndarray, e: dict[Edge, int]
    ) -> list[Edge]:
        """The joins the model used in ``solution`` (edges whose ``e`` is 1)."""
        used = []
        for n, t in enumerate(assignment):
            if t not in self.priced:
                continue
            for p in self.preds[n]:
                edge = (p, n, t)
                held = edge not in e or solution[e[edge]] > 0.5
                if assignment[p] == t and self.may_join(p, n, t) and held:
                    used.append(edge)
        return used

    def learn(
        self,
        assignment: list[VirtualDevice],
        true_s: float,
        model_s: float,
        solution: np.ndarray,
        e: dict[Edge, int],
    ) -> int:
        """Cut off the joins the model made wrongly in ``solution``; returns the cuts added.

        ``true_s`` is the assignment's simulated cost, ``model_s`` the model's value of
        ``solution``; nothing is learnt when they agree. Non-convex joined components get
        convexity cuts, cycles among them cycle cuts; a difference neither explains gets a
        no-good.
        """
        if true_s <= model_s * (1 + 1e-6):
            return 0
        joins = self.joins(assignment, solution, e)
        components = _components(joins)
        added = sum(self._convexity_cuts(component, assignment) for component in components)
        added += self._cycle_cuts(components, assignment)
        if not added:
            self.nogoods.append(list(assignment))
            added = 1
        return added

    def _convexity_cuts(
        self, component: dict[int, list[Edge]], assignment: list[VirtualDevice]
    ) -> int:
        """Cuts for the nodes off the component's target on paths that leave and re-enter it."""
        members = 0
        below = above = 0
        for n in component:
            members |= 1 << n
            below |= self.desc[n]
            above |= self.anc[n]
        t = next(iter(component.values()))[0][2]
        added = 0
        outside = [u for u in _bits(below & above & ~members) if assignment[u] != t]
        for u in outside[:_CUTS_PER_COMPONENT]:
            sources = _bits(self.anc[u] & members)
            path, a, b = _path(component, sources, set(_bits(self.desc[u] & members)))
            blockers = _bits(self.between(a, b))
            if len(blockers) > _CUT_BLOCKERS:
                blockers = sorted({u, *blockers[:_CUT_BLOCKERS]})
            added += self._add_cut(path, tuple(blockers))
        return added

    def _cycle_cuts(
        self, components: list[dict[int, list[Edge]]], assignment: list[VirtualDevice]
    ) -> int:
        """Cuts for cycles between joined components, which :func:`partition_graph` avoids.

        Partitions never depend on each other in a cycle, so the joins holding the pieces
        of a cycle together cannot all hold, unless the pieces are one partition: on one
        target ``t``, with every link of the cycle joined too (the escape rows).
        """
        owner = list(range(len(self.nodes)))
        for index, component in enumerate(components):
            for n in component:
                owner[n] = len(self.nodes) + index
        links: dict[int, dict[int, tuple[int, int]]] = {}
        for n, preds in enumerate(self.preds):
            for p in preds:
                if owner[p] != owner[n]:
                    links.setdefault(owner[p], {}).setdefault(owner[n], (p, n))
        added = 0
        for group in _strong_components(links):
            starts = [c for c in sorted(group) if c >= len(self.nodes)]
            for start in starts[:_CUTS_PER_COMPONENT]:
                cycle = _cycle(links, group, start)
                pieces = [
                    (cycle[i - 1][1], cycle[i][0], owner[cycle[i][0]]) for i in range(len(cycle))
                ]
                edges: list[Edge] = []
                kinds = set()
                for entry, leave, where in pieces:
                    if entry == leave:
                        continue
                    component = components[where - len(self.nodes)]
                    path, _, _ = _path(component, [entry], {leave})
                    edges += path
                    kinds.add(path[0][2])
                if not kinds:
                    continue
                t = kinds.pop()
                escapes = tuple((v, w, t) for v, w in cycle)
                if kinds or not all(self.may_join(v, w, t) for v, w, _ in escapes):
                    escapes = ()
                added += self._add_cut(tuple(edges), (), escapes)
        return added

    # -- starting points and checks -------------------------------------------------------
    def heuristics(self) -> list[list[VirtualDevice]]:
        """Start assignments: each node's fastest target, then each single target."""
        fastest = [min(ts, key=lambda t: self.costs.cost(n, t)) for n, ts in self._pairs()]
        candidates = [fastest]
        if len(self.nodes) <= _HEURISTIC_NODES:
            for target in self.costs.targets:
                candidates.append(
                    [
                        target if target in ts else f
                        for ts, f in zip(self.targets, fastest, strict=True)
                    ]
                )
        return candidates

    def memory_ok(self, assignment: list[VirtualDevice]) -> bool:
        """Whether ``assignment`` keeps every capped device within the memory estimate."""
        if not self.memory:
            return True
        names = {node.name: t for node, t in zip(self.nodes, assignment, strict=True)}
        estimate = memory_estimate(self.costs, names)
        return all(estimate.get(device, 0) <= cap for device, cap in self.memory.items())

    def live_span(self, name: str) -> tuple[int, int]:
        """First and last topological positions at which value ``name`` is held."""
        return _live_span(self.costs.graph, self.index, name)


class _Transfers:
    """The copy terms of the model and, for capped devices, the memory rows."""

    def __init__(self, form: _Formulation, model: _Model, x: Columns) -> None:
        self.form, self.model, self.x = form, model, x
        self.resident: dict[str, list[tuple[str, Expr, float]]] = {d: [] for d in form.memory}

    def add(self) -> None:
        """Add every value's copy terms, then the memory rows."""
        for name, producer in _activations(self.form.costs.graph, self.form.index):
            needs = self._needs(name, producer)
            self._price(name, producer, needs)
            for device, entries in self.resident.items():
                self._residence(device, name, producer, needs, entries)
        for device, entries in self.resident.items():
            self._memory_rows(device, entries)

    def _needs(self, name: str, producer: int | None) -> dict[str, Expr]:
        """``need[v,d]`` for each device ``d`` a copy of ``v`` may go to (``[]``: always)."""
        form, graph = self.form, self.form.costs.graph
        sources = {HOST_DEVICE} if producer is None else form.devices_of(producer)
        wanted: dict[str, list[int]] = {}
        for c in sorted({form.index[c.name] for c in graph.value(name).consumers}):
            for d in form.devices_of(c):
                wanted.setdefault(d, []).append(c)
        if name in graph.outputs:
            wanted[HOST_DEVICE] = []
        needs: dict[str, Expr] = {}
        for d, users in wanted.items():
            if sources == {d}:
                continue
            if not users:
                needs[d] = []
            elif len(users) == 1:
                needs[d] = form.device_expr(self.x, users[0], d)
            else:
                need = self.model.var()
                for c in users:
                    self.model.row([(need, 1.0), *_negate(form.device_expr(self.x, c, d))], 0.0)
                needs[d] = [(need, 1.0)]
        return needs

    def _price(self, name: str, producer: int | None, needs: dict[str, Expr]) -> None:
        form, model = self.form, self.model
        nbytes = form.costs.graph.value(name).nbytes
        sources = {HOST_DEVICE} if producer is None else form.devices_of(producer)
        for d, need in needs.items():
            for s in sorted(sources - {d}):
                price = form.scale * form.costs.transfer(s, d, nbytes)
                if price <= 0:
                    continue
                if len(sources) == 1 and not need:
                    model.var(price, lower=1.0)
                elif len(sources) == 1:
                    for col, coef in need:
                        model.cost[col] += price * coef
                else:
                    assert producer is not None
                    home = _negate(form.device_expr(self.x, producer, s))
                    lower = -1.0 if need else 0.0  # an empty ``need`` is the constant 1
                    model.row([(model.var(price), 1.0), *home, *_negate(need)], lower)

    def _residence(
        self,
        device: str,
        name: str,
        producer: int | None,
        needs: dict[str, Expr],
        entries: list[tuple[str, Expr, float]],
    ) -> None:
        """Record ``r[v,device]``: 1 when ``v`` is made on or copied to ``device``."""
        nbytes = float(self.form.costs.graph.value(name).nbytes)
        if producer is None:
            home: Expr | None = [] if device == HOST_DEVICE else None
        else:
            home = self.form.device_expr(self.x, producer, device) or None
        need = needs.get(device)
        if home == [] or need == []:
            entries.append((name, [], nbytes))
        elif home is not None and need is not None:
            r = self.model.var()
            self.model.row([(r, 1.0), *_negate(home)], lower=0.0)
            self.model.row([(r, 1.0), *_negate(need)], lower=0.0)
            entries.append((name, [(r, 1.0)], nbytes))
        elif home is not None or need is not None:
            entries.append((name, home or need or [], nbytes))

    def _memory_rows(self, device: str, entries: list[tuple[str, Expr, float]]) -> None:
        form, model = self.form, self.model
        graph = form.costs.graph
        weights = model.var(upper=math.inf)
        terms: Expr = [(weights, 1.0)]
        for const, readers in _constant_readers(graph).items():
            on_device = [n for n in readers if device in form.devices_of(n)]
            nbytes = float(graph.value(const).nbytes)
            if len(on_device) == 1:
                terms += [
                    (col, -nbytes) for col, _ in form.device_expr(self.x, on_device[0], device)
                ]
            elif on_device:
                w = model.var()
                for n in on_device:
                    model.row([(w, 1.0), *_negate(form.device_expr(self.x, n, device))], 0.0)
                terms.append((w, -nbytes))
        model.row(terms, 0.0, 0.0)
        spans = [form.live_span(name) for name, _, _ in entries]
        starting: dict[int, list[int]] = {}
        for i, (first, _) in enumerate(spans):
            starting.setdefault(first, []).append(i)
        checkpoints = sorted({last for _, last in spans})
        live: set[int] = set()
        position = 0
        for checkpoint in checkpoints:
            while position <= checkpoint:
                live.update(starting.get(position, ()))
                position += 1
            live = {i for i in live if spans[i][1] >= checkpoint}
            expr: Expr = [(weights, 1.0)]
            fixed = 0.0
            for i in live:
                _, resid, nbytes = entries[i]
                expr += [(col, nbytes * coef) for col, coef in resid]
                fixed += 0.0 if resid else nbytes
            model.row(expr, upper=form.memory[device] - fixed)


def memory_estimate(costs: Costs, assignment: Mapping[str, VirtualDevice]) -> dict[str, int]:
    """Per device, the bytes the ILP's memory caps limit under ``assignment``.

    Weights read by the device's nodes (each constant once) plus the peak, over the
    topological node order, of the non-constant values resident there (see the module
    docstring). Devices holding nothing are left out.
    """
    graph = costs.graph
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    device_of = [str(assignment[node.name].device) for node in graph.nodes]
    estimate: dict[str, int] = {}
    for const, readers in _constant_readers(graph).items():
        for device in {device_of[n] for n in readers}:
            estimate[device] = estimate.get(device, 0) + graph.value(const).nbytes
    load: dict[str, np.ndarray] = {}
    for name, producer in _activations(graph, index):
        value = graph.value(name)
        places = {HOST_DEVICE if producer is None else device_of[producer]}
        places |= {device_of[index[c.name]] for c in value.consumers}
        if name in graph.outputs:
            places.add(HOST_DEVICE)
        first, last = _live_span(graph, index, name)
        for device in places:
            delta = load.setdefault(device, np.zeros(len(graph.nodes) + 1, dtype=np.int64))
            delta[first] += value.nbytes
            delta[last + 1] -= value.nbytes
    for device, delta in load.items():
        estimate[device] = estimate.get(device, 0) + int(np.cumsum(delta).max(initial=0))
    return estimate


def _live_span(graph: Graph, index: dict[str, int], name: str) -> tuple[int, int]:
    """First and last topological positions at which value ``name`` is held."""
    value = graph.value(name)
    first = 0 if value.producer is None else index[value.producer.name]
    if name in graph.outputs:
        return first, len(graph.nodes) - 1
    return first, max((index[c.name] for c in value.consumers), default=first)


def _activations(graph: Graph, index: dict[str, int]) -> list[tuple[str, int | None]]:
    """Non-constant values that are read or output, with their producer's position."""
    found = []
    for name, value in graph.values.items():
        if value.is_const or not (value.consumers or name in graph.outputs):
            continue
        if value.producer is not None:
            found.append((name, index[value.producer.name]))
        elif name in graph.inputs:
            found.append((name, None))
    return found


def _constant_readers(graph: Graph) -> dict[str, list[int]]:
    """Each constant read by some node, with the positions of its readers."""
    readers: dict[str, list[int]] = {}
    for n, node in enumerate(graph.nodes):
        for name in dict.fromkeys(node.present_inputs):
            if graph.value(name).is_const:
                readers.setdefault(name, []).append(n)
    return readers


def _producers(graph: Graph, index: dict[str, int], node: Node) -> list[int]:
    found = []
    for name in node.present_inputs:
        producer = graph.value(name).producer
        if producer is not None:
            found.append(index[producer.name])
    return found


def _components(joins: list[Edge]) -> list[dict[int, list[Edge]]]:
    """Connected components of the joins (undirected), each node with its incident joins."""
    adjacent: dict[int, list[Edge]] = {}
    for edge in joins:
        adjacent.setdefault(edge[0], []).append(edge)
        adjacent.setdefault(edge[1], []).append(edge)
    seen: set[int] = set()
    components = []
    for start in adjacent:
        if start in seen:
            continue
        component: dict[int, list[Edge]] = {}
        stack = [start]
        seen.add(start)
        while stack:
            n = stack.pop()
            component[n] = adjacent[n]
            for p, c, _ in adjacent[n]:
                other = c if p == n else p
                if other not in seen:
                    seen.add(other)
                    stack.append(other)
        components.append(component)
    return components


def _strong_components(links: dict[int, dict[int, tuple[int, int]]]) -> list[set[int]]:
    """Strongly connected components with two or more members (iterative Tarjan)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    found = []
    for root in links:
        if root in index:
            continue
        work = [(root, iter(links.get(root, {})))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(links.get(succ, {}))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(group)
    return found


def _cycle(
    links: dict[int, dict[int, tuple[int, int]]], group: set[int], start: int
) -> list[tuple[int, int]]:
    """The node edges of a shortest cycle through ``start`` inside ``group``, in order."""
    parent: dict[int, tuple[int, tuple[int, int]]] = {}
    queue = [start]
    for current in queue:
        for succ, witness in links.get(current, {}).items():
            if succ not in group:
                continue
            if succ == start:
                cycle = [witness]
                while current != start:
                    current, edge = parent[current]
                    cycle.append(edge)
                return cycle[::-1]
            if succ not in parent:
                parent[succ] = (current, witness)
                queue.append(succ)
    raise AssertionError("a strongly connected group has a cycle through each member")


def _path(
    component: dict[int, list[Edge]], sources: list[int], goals: set[int]
) -> tuple[tuple[Edge, ...], int, int]:
    """A shortest undirected path of joins from some source to some goal: (joins, a, b)."""
    parent: dict[int, Edge | None] = dict.fromkeys(sources)
    queue = list(sources)
    b = -1
    for n in queue:
        if n in goals:
            b = n
            break
        for edge in component[n]:
            other = edge[1] if edge[0] == n else edge[0]
            if other not in parent:
                parent[other] = edge
                queue.append(other)
    assert b >= 0, "a component's nodes are connected"
    path = []
    n = b
    while (edge := parent[n]) is not None:
        path.append(edge)
        n = edge[0] if edge[1] == n else edge[1]
    return tuple(path), n, b


def _negate(expr: Expr) -> Expr:
    return [(col, -coef) for col, coef in expr]


def _bits(bits: int) -> list[int]:
    """The indices of the set bits of ``bits``, ascending."""
    if bits.bit_count() < 64:
        found = []
        while bits:
            low = bits & -bits
            found.append(low.bit_length() - 1)
            bits ^= low
        return found
    raw = np.frombuffer(bits.to_bytes((bits.bit_length() + 7) // 8, "little"), np.uint8)
    return np.flatnonzero(np.unpackbits(raw, bitorder="little")).tolist()
