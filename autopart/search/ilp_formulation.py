"""The ILP model of :func:`autopart.search.ilp.solve_ilp` and the cuts it learns.

Variables: ``x[n,t]`` (binary) puts node ``n`` on target ``t``; ``need[v,d]`` >= each
consumer's presence on ``d`` (1 for graph outputs on ``cpu``); ``z[v,s,d]`` >=
``X[p,s] + need[v,d] - 1`` pays the copy ``s -> d`` of ``v`` made by ``p`` (``X[p,s]`` sums
``x[p,t]`` over ``s``'s targets). Launches on ``t`` pay its highest level ``level[n,t]``
>= ``level[p,t] + x[n,t] - e[p,n,t]``, tied across targets by learnt couplings
(:mod:`autopart.search.ilp_levels`). A join
``e[p,n,t]`` is ``x[p,t]`` until a cut needs its own variable (``e <= x[p,t]``); it is 0
when a node between ``p`` and ``n`` (on a path ``p -> ... -> n``) cannot run on ``t``. An
edge cost of ``n`` on ``t`` that is due unless every edge of a set is joined gets
``y >= x[n,t] - join`` per edge (an edge that can never join makes it a fixed part of
``x[n,t]``'s cost).

Memory caps (an estimate): per device ``d``, the weights (constants read by nodes on ``d``,
each counted once) plus, at each position ``k`` of the topological node order, the bytes of
the non-constant values live at ``k`` (from their producer's position, graph inputs from 0,
to their last reader's, graph outputs to the end) that reside on ``d`` (made there or
copied there) must fit the cap. Values inside partitions count too, so the estimate is
usually above the plan's ``storage`` figures, which pack boundary buffers in step order; it
does not bound them.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from autopart.costmodel.accuracy import ErrorModel
from autopart.costmodel.costs import Costs
from autopart.errors import AutopartError
from autopart.ir.graph import Graph, Node
from autopart.ir.target import VirtualDevice
from autopart.search.ilp_copies import CopyTerms, live_span, memory_estimate
from autopart.search.ilp_levels import Coupling, Levels, add_couplings, add_levels, find_couplings
from autopart.search.join_graphs import (
    Edge,
    join_components,
    shortest_cycle,
    shortest_join_path,
    strong_components,
)
from autopart.search.milp_model import Columns, Expr, MilpModel

Assignment = dict[str, VirtualDevice]
# (node, target, seconds, edges): due unless each (producer, consumer) edge joins; None: always
EdgeCost = tuple[int, VirtualDevice, float, list[tuple[int, int]] | None]
_EAGER_BETWEEN = 16
_CUT_BLOCKERS = 64  # in-between nodes a cut names at most (each gives one row)
_CUTS_PER_COMPONENT = 64  # cuts learnt from one component (or cycle group) per solve
_HEURISTIC_NODES = 2000  # beyond this, building each start assignment's plan costs too much


class IlpError(AutopartError):
    """The ILP cannot run: a node no target can run, or no answer within the time limit."""


class Formulation:
    """The ILP of a :class:`Costs` and the cuts learnt so far."""

    def __init__(
        self, costs: Costs, memory: Mapping[str, int], accuracy: ErrorModel | None = None
    ) -> None:
        self.costs, self.memory, self.accuracy = costs, dict(memory), accuracy
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
        self.couplings: dict[Coupling, frozenset[VirtualDevice]] = {}
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
        self._accuracy_row(model, x)
        for assignment in self.nogoods:
            chosen = [
                (x[(n, t)], 1.0) for n, t in enumerate(assignment) if len(self.targets[n]) > 1
            ]
            model.row(chosen, upper=len(chosen) - 1.0)
        return model, x, e

    def _accuracy_row(self, model: MilpModel, x: Columns) -> None:
        """The reduced nodes' error weights sum to at most the tolerance squared.

        The row is divided by the tolerance squared (about 1e-5), so that the solver's
        absolute feasibility tolerances (up to 1e-6) are relative ones; an answer that still
        slips over is excluded by the solve loop, which checks every answer it is given.
        """
        if self.accuracy is None:
            return
        bound = self.accuracy.tolerance**2
        scale = 1.0 / bound if bound > 0 else 1.0
        terms = [
            (column, weight * scale)
            for (n, t), column in x.items()
            if (weight := self.accuracy.weight(self.nodes[n].name, t)) > 0
        ]
        if terms:
            model.row(terms, upper=bound * scale)

    def _launches(self, model: MilpModel, x: Columns) -> dict[Edge, int]:
        e: dict[Edge, int] = {}
        for (p, n, t), integral in self.edge_vars.items():
            e[(p, n, t)] = model.var(integer=int(integral))
            model.row([(e[(p, n, t)], 1.0), (x[(p, t)], -1.0)], upper=0.0)
            model.row([(e[(p, n, t)], 1.0), (x[(n, t)], -1.0)], upper=0.0)
        coupled = {n for u, v, _ in self.couplings for n in (u, v)}
        levels: Levels = {
            t: add_levels(self, model, x, e, t, coupled)
            for t in self.costs.targets
            if self.costs.split_entry_cost(t) > 0
        }
        add_couplings(self, model, x, levels, self.couplings)
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
        convexity cuts, cycles among them cycle cuts, targets with more partitions than
        levels couplings; a difference none of them explains gets a no-good.
        """
        if true_s <= model_s * (1 + 1e-6):
            return 0
        joins = self.joins(assignment, solution, e)
        components = join_components(joins)
        added = sum(self._convexity_cuts(component, assignment) for component in components)
        added += self._cycle_cuts(components, assignment)
        learnt = find_couplings(self, assignment, set(joins), self.couplings)
        self.couplings.update(learnt)
        added += len(learnt)
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
        """Cuts for cycles between joined components, which the partitioner avoids.

        Partitions (:func:`autopart.plan.partition.partition_graph`) never depend on each
        other in a cycle, so the joins holding the pieces of a cycle together cannot all
        hold, unless the pieces are one partition: on one target ``t``, with every link of
        the cycle joined too (the escape rows).
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

    def feasible(self, assignment: list[VirtualDevice]) -> bool:
        """Whether ``assignment`` keeps within the memory caps and the tolerance."""
        names = {node.name: t for node, t in zip(self.nodes, assignment, strict=True)}
        if self.accuracy is not None and not self.accuracy.fits(names):
            return False
        if not self.memory:
            return True
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
