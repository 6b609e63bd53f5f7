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
from dataclasses import dataclass

import numpy as np

from autopart.costmodel.costs import Costs
from autopart.errors import AutopartError
from autopart.ir.graph import Graph, Node
from autopart.ir.target import VirtualDevice
from autopart.search.constraints import ConstraintError
from autopart.search.ilp_copies import CopyTerms, live_span, memory_estimate
from autopart.search.join_graphs import (
    Edge,
    join_components,
    shortest_cycle,
    shortest_join_path,
    strong_components,
)
from autopart.search.milp_model import Columns, Expr, MilpModel, solve_milp
from autopart.search.simulator import plan_for, simulate

__all__ = ["IlpError", "IlpResult", "memory_estimate", "solve_ilp"]

Assignment = dict[str, VirtualDevice]
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
    form = Formulation(costs, memory or {})
    names = [node.name for node in form.nodes]
    truth: dict[tuple[VirtualDevice, ...], float] = {}

    def true_cost(assignment: list[VirtualDevice]) -> float:
        """The simulated sequential latency of ``assignment``, computed once."""
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
        result = solve_milp(model, left, rel_gap)
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


class Formulation:
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
    def build(self) -> tuple[MilpModel, Columns, dict[Edge, int]]:
        """The MILP with every cut so far; also the columns of ``x[n,t]`` and ``e[p,n,t]``."""
        model = MilpModel()
        x: Columns = {}
        for n, (name, targets) in enumerate(self._pairs()):
            for t in targets:
                x[(n, t)] = model.var(self.scale * self.costs.cost(name, t), integer=1)
            model.row([(x[(n, t)], 1.0) for t in targets], 1.0, 1.0)
        e = self._launches(model, x)
        self._edges(model, x, e)
        CopyTerms(self, model, x).add()
        for assignment in self.nogoods:
            chosen = [
                (x[(n, t)], 1.0) for n, t in enumerate(assignment) if len(self.targets[n]) > 1
            ]
            model.row(chosen, upper=len(chosen) - 1.0)
        return model, x, e

    def _launches(self, model: MilpModel, x: Columns) -> dict[Edge, int]:
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

    def _edges(self, model: MilpModel, x: Columns, e: dict[Edge, int]) -> None:
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
        components = join_components(joins)
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
            path, a, b = shortest_join_path(component, sources, set(_bits(self.desc[u] & members)))
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
        for group in strong_components(links):
            starts = [c for c in sorted(group) if c >= len(self.nodes)]
            for start in starts[:_CUTS_PER_COMPONENT]:
                cycle = shortest_cycle(links, group, start)
                pieces = [
                    (cycle[i - 1][1], cycle[i][0], owner[cycle[i][0]]) for i in range(len(cycle))
                ]
                edges: list[Edge] = []
                kinds = set()
                for entry, leave, where in pieces:
                    if entry == leave:
                        continue
                    component = components[where - len(self.nodes)]
                    path, _, _ = shortest_join_path(component, [entry], {leave})
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
        return live_span(self.costs.graph, self.index, name)


def _producers(graph: Graph, index: dict[str, int], node: Node) -> list[int]:
    found = []
    for name in node.present_inputs:
        producer = graph.value(name).producer
        if producer is not None:
            found.append(index[producer.name])
    return found


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
