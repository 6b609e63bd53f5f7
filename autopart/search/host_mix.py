"""Targets mixed within a stage across hosts: the exact local search on each stage's nodes.

:func:`~autopart.search.hosts.search_hosts` prices each stage on the one target of its
host quickest for the stage's own nodes. A stage's host builds its own partitions from
per-node targets, so it can run a mix of its targets as a local plan runs one. This
module takes a plan the host search chose and, for each stage, solves the local ILP
(:func:`~autopart.search.ilp.solve_ilp`) over the stage's own nodes on its host's
:class:`~autopart.costmodel.costs.Costs`, with the copies between the host's targets and
each partition's launch priced as a local tune prices them. Where the mix is predicted
quicker than the stage's one target by more than :data:`MIN_GAIN`, the stage runs it, and
the plan is priced again with the stage's time scaled by the mix's ratio to its one target.

The cuts and the order of hosts stay those of the host search: the mix is searched for
each stage after the cuts, not jointly with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autopart.costmodel.costs import Costs
from autopart.costmodel.network import NetworkModel
from autopart.errors import AutopartError
from autopart.ir.graph import Graph, Node, Value
from autopart.ir.target import VirtualDevice
from autopart.plan.partition import boundary
from autopart.search.hosts import HostStagePlan, Stage, repriced
from autopart.search.ilp import solve_ilp
from autopart.search.simulator import plan_for, simulate

MIN_GAIN = 0.02  # a mix predicted less than 2% quicker than one target is not worth its copies
STAGE_LIMIT_S = 5.0  # each stage's ILP


@dataclass(frozen=True)
class StageMix:
    """One stage's mix: every node's target on its host, and its time over its one target's."""

    targets: Mapping[str, VirtualDevice]
    ratio: float


def mix_stages(
    graph: Graph,
    plan: HostStagePlan,
    costs: Mapping[str, Costs],
    network: NetworkModel,
    time_limit_s: float = STAGE_LIMIT_S,
    memo: dict[Stage, StageMix | None] | None = None,
) -> HostStagePlan | None:
    """``plan`` with each stage's targets mixed where that is predicted quicker (see module).

    ``costs`` are each host's, as :func:`~autopart.search.hosts.search_hosts` took them;
    ``time_limit_s`` bounds each stage's ILP. ``memo`` keeps each stage's answer for the
    next plan of the same search (the replicas' stage is often the quickest plan's). None
    where no stage gains by a mix.
    """
    memo = {} if memo is None else memo
    seconds: list[float] = []
    mixes: list[Mapping[str, VirtualDevice] | None] = []
    for stage in plan.stages:
        host, target, first, end = stage
        host_costs = costs[host]
        nodes = graph.nodes[first:end]
        one_s = host_costs.launch_cost(target) + sum(host_costs.cost(n, target) for n in nodes)
        if stage not in memo:
            memo[stage] = stage_mix(graph, host_costs, target, first, end, time_limit_s)
        mix = memo[stage]
        seconds.append(one_s if mix is None else one_s * mix.ratio)
        mixes.append(None if mix is None else mix.targets)
    if all(mix is None for mix in mixes):
        return None
    return repriced(graph, plan, seconds, mixes, network)


def stage_mix(
    graph: Graph,
    costs: Costs,
    target: VirtualDevice,
    first: int,
    end: int,
    time_limit_s: float = STAGE_LIMIT_S,
) -> StageMix | None:
    """The ILP's mix of ``costs``' targets for nodes ``first:end``, if it beats ``target`` alone.

    Both are simulated on the stage's own costs (:func:`stage_costs`); the mix is kept when
    it uses more than one target and is predicted at least :data:`MIN_GAIN` quicker.
    """
    if len(costs.targets) < 2 or end <= first:
        return None
    sub = stage_costs(graph, costs, first, end)
    names = [node.name for node in sub.graph.nodes]
    if any(target not in sub.supported(name) for name in names):
        return None
    alone = {name: target for name in names}
    try:
        alone_s = simulate(plan_for(alone, sub, fallback=target), sub).sequential_s
        found = solve_ilp(sub, time_limit_s=time_limit_s, rel_gap=1e-3, known=[(alone, alone_s)])
    except AutopartError:  # no answer in time, a node no target runs, a plan not built
        return None
    if len(set(found.assignment.values())) < 2 or found.objective_s > alone_s * (1 - MIN_GAIN):
        return None
    return StageMix(dict(found.assignment), found.objective_s / alone_s)


def stage_costs(graph: Graph, costs: Costs, first: int, end: int) -> Costs:
    """``costs`` for nodes ``first:end`` of ``graph`` alone, as their stage runs them.

    The stage's graph (:func:`stage_graph`) reads what earlier nodes made as its inputs
    and hands on what later nodes or the graph's outputs read; every price of its nodes,
    launches, copies and edge costs are ``costs``', and nothing was measured whole.
    """
    sub = stage_graph(graph, first, end)
    inside = {node.name for node in sub.nodes}

    def kept(table: Mapping[str, dict[VirtualDevice, float]]) -> dict[str, dict]:
        return {name: dict(entry) for name, entry in table.items() if name in inside}

    fused = {n: p for n, p in costs.fused_producer.items() if n in inside and p in inside}
    return Costs(sub, list(costs.targets), kept(costs.node_cost), dict(costs.launch),
                 dict(costs.transfers), fused, kept(costs.unfused), kept(costs.layout),
                 dict(costs.cold), dict(costs.alone))  # fmt: skip


def stage_graph(graph: Graph, first: int, end: int) -> Graph:
    """Nodes ``first:end`` of ``graph`` (in its order) as a graph of their own.

    Its inputs and outputs are the nodes' boundary (:func:`~autopart.plan.partition.boundary`:
    the non-constant values read from outside, and those made for later nodes or the
    graph's outputs). Constants come along, sharing their arrays.
    """
    nodes = graph.nodes[first:end]
    inputs, outputs = boundary(graph, nodes)
    reads = [name for node in nodes for name in node.present_inputs]
    touched = dict.fromkeys([*reads, *(name for node in nodes for name in node.outputs if name)])
    values = {}
    for name in touched:
        value = graph.value(name)
        values[name] = Value(value.name, value.shape, value.dtype, value.const)
    copies = [
        Node(node.name, node.op_type, list(node.inputs), list(node.outputs), dict(node.attrs),
             node.domain, node.virtual_device, dict(node.meta), node.forbidden,
             list(node.captures))
        for node in nodes
    ]  # fmt: skip
    return Graph(f"{graph.name}[{first}:{end}]", copies, values, inputs, outputs,
                 dict(graph.opsets), {"source": graph.meta.get("source", graph.name)})  # fmt: skip
