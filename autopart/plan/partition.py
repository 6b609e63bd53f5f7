"""Group nodes that share a target into partitions without ever creating a cycle.

Each node's target is its :attr:`~autopart.ir.graph.Node.virtual_device`, which planning
(:func:`autopart.ir.placement.place`) or a loaded plan wrote onto it.

Merging regions is where BYOC and Relax grew cycles between partitions: a node joins a
partition of the same target only if no path leads from that partition to the node
through another partition. The result is checked again at the end.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from autopart.errors import AutopartError
from autopart.ir.graph import Graph, Node
from autopart.ir.placement import placement
from autopart.ir.target import VirtualDevice


class PartitionCycleError(AutopartError):
    """The partitions of a plan depend on each other in a cycle."""


@dataclass
class Partition:
    """Nodes (in topological order) that one codegen compiles and runs as one subgraph."""

    index: int
    target: VirtualDevice
    nodes: list[Node] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)


def partition_graph(graph: Graph) -> list[Partition]:
    """Split ``graph`` into partitions of equal target, in a topological order of partitions.

    Every node's virtual device must name a target (a device and a codegen), else
    :class:`autopart.errors.ModelError` names the unplanned nodes.
    """
    assignment = placement(graph)
    owner: dict[str, int] = {}  # node name -> partition index
    partitions: list[Partition] = []
    depends: list[set[int]] = []  # partition -> partitions that feed it directly

    def reaches(start: int, goal: int) -> bool:
        """Whether ``start`` depends on ``goal`` through partition edges."""
        stack, seen = [start], set()
        while stack:
            current = stack.pop()
            if current == goal:
                return True
            if current not in seen:
                seen.add(current)
                stack.extend(depends[current])
        return False

    for node in graph.nodes:
        target = assignment[node.name]
        feeding = {owner[p.name] for p in _producers(graph, node)}
        chosen = None
        for candidate in sorted(feeding):
            if partitions[candidate].target != target:
                continue
            if any(other != candidate and reaches(other, candidate) for other in feeding):
                continue  # joining would close a loop through another partition
            chosen = candidate
            break
        if chosen is None:
            chosen = len(partitions)
            partitions.append(Partition(chosen, target))
            depends.append(set())
        partitions[chosen].nodes.append(node)
        owner[node.name] = chosen
        depends[chosen].update(f for f in feeding if f != chosen)
    ordered = [partitions[i] for i in _order(depends)]
    for new_index, partition in enumerate(ordered):
        partition.index = new_index
    _attach_boundaries(graph, ordered)
    return ordered


def _producers(graph: Graph, node: Node) -> list[Node]:
    found = []
    for name in node.present_inputs:
        producer = graph.value(name).producer
        if producer is not None:
            found.append(producer)
    return found


def _order(depends: list[set[int]]) -> list[int]:
    """A topological order of partitions given their direct dependencies (lowest first)."""
    waiting = [len(sources) for sources in depends]
    users: list[list[int]] = [[] for _ in depends]
    for index, sources in enumerate(depends):
        for source in sources:
            users[source].append(index)
    ready = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        current = heapq.heappop(ready)
        order.append(current)
        for user in users[current]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    if len(order) != len(depends):
        stuck = [i for i, count in enumerate(waiting) if count > 0]
        raise PartitionCycleError(f"partitions {stuck} form a cycle")
    return order


def boundary(graph: Graph, nodes: Sequence[Node]) -> tuple[list[str], list[str]]:
    """Boundary values of ``nodes``: (inputs, outputs), each in first-use order.

    Inputs are the non-constant values read from outside; outputs are the values produced
    for other nodes or for the graph's outputs.
    """
    inside = {node.name for node in nodes}
    produced = [o for node in nodes for o in node.outputs if o]
    made_here = set(produced)
    consumed = [i for node in nodes for i in node.present_inputs]
    inputs = [
        name
        for name in dict.fromkeys(consumed)
        if not graph.value(name).is_const and name not in made_here
    ]
    outputs = [
        name
        for name in produced
        if name in graph.outputs or any(c.name not in inside for c in graph.value(name).consumers)
    ]
    return inputs, outputs


def _attach_boundaries(graph: Graph, partitions: list[Partition]) -> None:
    """Record each partition's non-constant inputs and the outputs others (or the graph) use."""
    for partition in partitions:
        partition.inputs, partition.outputs = boundary(graph, partition.nodes)


def check_acyclic(graph: Graph, partitions: list[Partition]) -> None:
    """Raise :class:`PartitionCycleError` if the partitions' dependencies form a cycle."""
    home = {node.name: p.index for p in partitions for node in p.nodes}
    depends: list[set[int]] = [set() for _ in partitions]
    for partition in partitions:
        for node in partition.nodes:
            for producer in _producers(graph, node):
                if home[producer.name] != partition.index:
                    depends[partition.index].add(home[producer.name])
    _order(depends)
