"""The ILP's launch count: per-target levels, and the couplings it learns between them.

The partitioner (:func:`autopart.plan.partition.partition_graph`) merges partitions of one
target whenever no cycle results, siblings included, so a partition need not be held
together by edges and counting the nodes that join no producer would overprice it. The
model counts launches by levels instead. Fix a topological order of a plan's partitions;
``level[n,t]`` is the number of partitions of ``t`` up to ``n``'s own. Along an edge
``p -> n`` it cannot fall, and it rises by one where ``n`` runs on ``t`` but ``p`` is not in
its partition: ``level[n,t] >= level[p,t] + x[n,t] - e[p,n,t]``. The launches on ``t`` are
at least every level. The true partitions satisfy all of this, so the model stays a lower
bound of the truth.

Levels alone miss what the order of partitions forces across branches: ``a -> b`` beside
``b' -> a'`` (``a, a'`` on ``A``, ``b, b'`` on ``B``) needs three partitions, yet every path
enters one of each. Two nodes of ``t`` at one level of ``t`` are in one partition, so they
share every other level too; when a solution's partitions split two nodes the model put at
one level, a coupling of the pair learns that: either their levels of ``t`` differ, or all
their levels agree (``z``, ``w`` binary; big-M rows, void unless both run on ``t``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Protocol

from autopart.costmodel.costs import Costs
from autopart.ir.graph import Node
from autopart.ir.placement import place
from autopart.ir.target import VirtualDevice
from autopart.plan.partition import partition_graph
from autopart.search.join_graphs import Edge
from autopart.search.milp_model import Columns, Expr, MilpModel, negate


class Formulation(Protocol):
    """What the launch levels read of the ILP they join: its nodes, targets and joins.

    :class:`autopart.search.ilp_formulation.Formulation` is the one implementation; the
    protocol keeps this module from importing it back.
    """

    costs: Costs
    nodes: list[Node]
    index: dict[str, int]  # node name -> topological position
    targets: list[list[VirtualDevice]]  # each node's targets
    preds: list[list[int]]  # each node's producers, by position
    users: list[list[int]]  # each node's consumers, by position
    scale: float  # seconds -> objective units

    def may_join(self, p: int, n: int, t: VirtualDevice) -> bool:
        """Whether ``n`` on ``t`` could ever share a partition with its producer ``p``."""
        ...


Coupling = tuple[int, int, VirtualDevice]  # two nodes that may share a partition of a target
Levels = dict[VirtualDevice, dict[int, int]]  # target -> node -> column of level[n,t]
_PER_TARGET = 16  # new couplings learnt per target from one solution


def add_levels(
    form: Formulation,
    model: MilpModel,
    x: Columns,
    e: dict[Edge, int],
    t: VirtualDevice,
    coupled: set[int],
) -> dict[int, int]:
    """Level columns of ``t`` and the launches on ``t``, which are at least every level.

    Nodes that can run ``t``, nodes in ``coupled`` and the nodes after them get a column;
    the others are at level 0. The launches cost ``split_entry_cost(t)`` each.
    """
    top = _top(form, t)
    level: dict[int, int] = {}
    launches = model.var(form.scale * form.costs.split_entry_cost(t), upper=top)
    for n, preds in enumerate(form.preds):
        reached = [p for p in preds if p in level]
        can_run = t in form.targets[n]
        if not can_run and not reached and n not in coupled:
            continue
        level[n] = model.var(upper=top)
        if can_run:
            model.row([(level[n], 1.0), (x[(n, t)], -1.0)], lower=0.0)
        for p in reached:
            model.row([(level[n], 1.0), (level[p], -1.0)], lower=0.0)
            if can_run:
                expr: Expr = [(level[n], 1.0), (level[p], -1.0), (x[(n, t)], -1.0)]
                if form.may_join(p, n, t):
                    expr.append((e.get((p, n, t), x[(p, t)]), 1.0))
                model.row(expr, lower=0.0)
        if not form.users[n]:
            model.row([(launches, 1.0), (level[n], -1.0)], lower=0.0)
    return level


def add_couplings(
    form: Formulation,
    model: MilpModel,
    x: Columns,
    levels: Levels,
    couplings: Mapping[Coupling, frozenset[VirtualDevice]],
) -> None:
    """The rows of each coupling (module docstring), relaxed unless both nodes run on ``t``.

    ``couplings`` maps each pair to the other targets whose levels it ties; ``levels``
    must hold columns for both nodes on each (:func:`add_levels` with them ``coupled``).
    With ``z`` = 1 the pair shares those levels; with ``z`` = 0 its levels of ``t`` differ
    by one at least, ``w`` saying which is higher. Each row's big M bounds its difference.
    """
    for (u, v, t), others in couplings.items():
        same, higher = model.var(integer=1), model.var(integer=1)
        for s in others:
            big = _top(form, s) + 1
            off: Expr = [(x[(u, t)], -big), (x[(v, t)], -big)]  # 0 when both run on t
            gap = _difference(levels[s], u, v)
            model.row([*gap, (same, -big), *off], lower=-3 * big)
            model.row([*negate(gap), (same, -big), *off], lower=-3 * big)
        big = _top(form, t) + 1
        off = [(x[(u, t)], -big), (x[(v, t)], -big)]
        gap = _difference(levels[t], v, u)  # level[v,t] - level[u,t]
        model.row([*gap, (higher, -big), (same, big), *off], lower=1 - 3 * big)
        model.row([*negate(gap), (higher, big), (same, big), *off], lower=1 - 2 * big)


def _top(form: Formulation, t: VirtualDevice) -> float:
    """The highest level of ``t``: one partition per node that can run it."""
    return float(sum(1 for targets in form.targets if t in targets))


def find_couplings(
    form: Formulation,
    assignment: list[VirtualDevice],
    joined: set[Edge],
    known: Mapping[Coupling, frozenset[VirtualDevice]],
) -> dict[Coupling, frozenset[VirtualDevice]]:
    """Couplings that explain why ``assignment`` needs more launches than its levels count.

    ``joined`` holds the joins the model made, ``known`` the couplings learnt before. For
    each priced target whose partitions outnumber its highest level: at each level holding
    two partitions or more, a pair of nodes from two of them, the pair whose other levels
    differ the most, tying the levels that differ (at most ``_PER_TARGET`` pairs per
    target that are new or tie more levels than before).
    """
    graph = form.costs.graph
    names = {node.name: t for node, t in zip(form.nodes, assignment, strict=True)}
    partitions = partition_graph(place(graph, names))
    home = {form.index[node.name]: p.index for p in partitions for node in p.nodes}
    priced = [t for t in form.costs.targets if form.costs.split_entry_cost(t) > 0]
    levels = {t: _levels_of(form, assignment, joined, t) for t in priced}
    found: dict[Coupling, frozenset[VirtualDevice]] = {}
    for t in priced:
        count = sum(1 for p in partitions if p.target == t)
        if count <= max(levels[t], default=0):
            continue
        by_level: dict[int, dict[int, list[int]]] = {}
        for n, level in enumerate(levels[t]):
            if assignment[n] == t:
                by_level.setdefault(level, {}).setdefault(home[n], []).append(n)
        new = 0
        for level in sorted(by_level):
            for first, second in itertools.combinations(list(by_level[level].values()), 2):
                u, v = _farthest(first, second, levels)
                ties = frozenset(s for s in priced if s != t and levels[s][u] != levels[s][v])
                pair = (u, v, t)
                before = known.get(pair, frozenset()) | found.get(pair, frozenset())
                if new < _PER_TARGET and not ties <= before:
                    found[pair] = before | ties
                    new += 1
    return found


def _levels_of(
    form: Formulation, assignment: list[VirtualDevice], joined: set[Edge], t: VirtualDevice
) -> list[int]:
    """The least levels of ``t`` the model allows for ``assignment`` and its joins."""
    level = [0] * len(form.nodes)
    for n, preds in enumerate(form.preds):
        on = int(assignment[n] == t)
        level[n] = on
        for p in preds:
            level[n] = max(level[n], level[p] + on * int((p, n, t) not in joined))
    return level


def _farthest(
    first: list[int], second: list[int], levels: Mapping[VirtualDevice, list[int]]
) -> tuple[int, int]:
    """The nodes of ``first`` and ``second`` (32 of each at most) whose levels differ most."""

    def spread(pair: tuple[int, int]) -> int:
        return sum(abs(level[pair[0]] - level[pair[1]]) for level in levels.values())

    u, v = max(((u, v) for u in first[:32] for v in second[:32]), key=spread)
    return (min(u, v), max(u, v))


def _difference(level: dict[int, int], a: int, b: int) -> Expr:
    """``level[a] - level[b]``."""
    return [(level[a], 1.0), (level[b], -1.0)]
