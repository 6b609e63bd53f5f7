"""Group nodes that share a target into as few partitions as acyclicity allows.

Each node's target is its :attr:`~autopart.ir.graph.Node.virtual_device`, which planning
(:func:`autopart.ir.placement.place`) or a loaded plan wrote onto it.

Merging regions is where BYOC and Relax grew cycles between partitions, and where they
left sibling regions of one target apart (TVM's MergeCompilerRegions merges those). Here a
node may join any partition of its target, not only one that feeds it, as long as no
partition it reads from depends on that partition: so regions of one target merge whenever
no cycle results, siblings included, and a plan on one target is one partition.

Two passes, each linear in the graph (times the number of targets):

1. **Phases.** Nodes are released in phases of one target each: a phase takes every node
   of its target whose producers are done, and the nodes of that target they unlock in
   turn. The next phase goes to the target whose released nodes head the path with the most
   changes of target still ahead (then to the one with more nodes released). Every
   starting target is tried and the fewest phases win.
2. **Joins.** In that order, each node joins the partition of its target that was made
   first among those it may join, or starts a new one. The partitions of one target then
   form a chain, each depending on the one before it, so what a partition depends on is
   summed up by one number per target: the last partition of that target it depends on.
   A node may join the partitions of its target after the last one its producers'
   partitions depend on.

Every partition a node does not join depends on one of its producers' partitions, so no
two partitions of one target can merge without a cycle. With two targets the count is the
least possible: the phases then alternate, and every partitioning can be ordered into such
phases with no more of them than it has partitions. With three or more, choosing the
next phase well is the shortest common supersequence problem (NP-hard), so the count can
exceed the least one. The result is checked for cycles again at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from autopart.errors import AutopartError
from autopart.ir.graph import Graph, Node
from autopart.ir.node_order import kahn_order
from autopart.ir.placement import placement
from autopart.ir.target import VirtualDevice
from autopart.targets.resolve import compile_target


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

    Same-target partitions merge whenever no cycle results (see the module docstring): no
    two partitions of one target can be merged without a cycle, and a graph whose nodes
    share one target is one partition. On a codegen that mixes precisions, targets that
    differ only in precision count as one (:func:`~autopart.targets.resolve.compile_target`):
    their partition's target is the nodes' common one, or f32 when they mix. Every node's
    virtual device must name a target (a device and a codegen), else
    :class:`autopart.errors.ModelError` names the unplanned nodes.
    """
    assignment = placement(graph)
    dag = _Dag(graph, {name: compile_target(t) for name, t in assignment.items()})
    joins = _Joins(len(dag.targets))
    for node in dag.release_order():
        joins.add(node, dag.colors[node], dag.preds[node])
    created = [Partition(index, dag.targets[color]) for index, color in enumerate(joins.color)]
    for node, owner in zip(graph.nodes, joins.owner_of(len(graph.nodes)), strict=True):
        created[owner].nodes.append(node)
    for partition in created:  # one precision throughout: the partition's own target
        exact = {assignment[node.name] for node in partition.nodes}
        if len(exact) == 1:
            partition.target = exact.pop()
    ordered = [created[i] for i in _order(joins.depends)]
    for new_index, partition in enumerate(ordered):
        partition.index = new_index
    _attach_boundaries(graph, ordered)
    return ordered


class _Dag:
    """The graph as integers: each node's producers, consumers and target (a colour)."""

    def __init__(self, graph: Graph, assignment: dict[str, VirtualDevice]) -> None:
        index = {node.name: i for i, node in enumerate(graph.nodes)}
        colors: dict[VirtualDevice, int] = {}
        self.colors = [colors.setdefault(assignment[n.name], len(colors)) for n in graph.nodes]
        self.targets = list(colors)
        self.preds = [sorted({index[p.name] for p in _producers(graph, n)}) for n in graph.nodes]
        self.users: list[list[int]] = [[] for _ in graph.nodes]
        for node, preds in enumerate(self.preds):
            for pred in preds:
                self.users[pred].append(node)

    def changes_ahead(self) -> list[int]:
        """Per node, the most stretches of one target along a path from it (its own counts)."""
        ahead = [1] * len(self.preds)
        for node in reversed(range(len(self.preds))):
            mine = self.colors[node]
            for user in self.users[node]:
                ahead[node] = max(ahead[node], ahead[user] + (self.colors[user] != mine))
        return ahead

    def release_order(self) -> list[int]:
        """The nodes phase by phase (topological inside a phase), the fewest phases found."""
        ahead = self.changes_ahead()
        sources = {self.colors[n] for n, preds in enumerate(self.preds) if not preds}
        best: tuple[int, list[int]] | None = None
        for first in sorted(sources):
            phases = self.phases(first, ahead)
            if best is None or max(phases, default=0) < best[0]:
                best = (max(phases, default=0), phases)
        phase = best[1] if best is not None else []
        return sorted(range(len(self.preds)), key=lambda node: (phase[node], node))

    def phases(self, first: int, ahead: list[int]) -> list[int]:
        """Each node's phase when phases start on target ``first`` (see the module docstring)."""
        count = len(self.targets)
        waiting = [len(preds) for preds in self.preds]
        ready: list[list[int]] = [[] for _ in range(count)]
        lead = [0] * count  # the most changes ahead among each target's released nodes
        for node, left in enumerate(waiting):
            if not left:
                ready[self.colors[node]].append(node)
                lead[self.colors[node]] = max(lead[self.colors[node]], ahead[node])
        phase_of = [0] * len(waiting)
        current, phase = first, 0
        while True:
            queue, ready[current], lead[current] = ready[current], [], 0
            while queue:
                node = queue.pop()
                phase_of[node] = phase
                for user in self.users[node]:
                    waiting[user] -= 1
                    if waiting[user] == 0:
                        color = self.colors[user]
                        if color == current:
                            queue.append(user)
                        else:
                            ready[color].append(user)
                            lead[color] = max(lead[color], ahead[user])
            waiting_targets = [c for c in range(count) if ready[c]]
            if not waiting_targets:
                return phase_of
            current = max(waiting_targets, key=lambda c: (lead[c], len(ready[c]), -c))
            phase += 1


class _Joins:
    """Partitions made so far: each one's target, rank in its target's chain and ancestry.

    ``last[p][t]`` is the rank of the last partition of target ``t`` that ``p`` depends on
    (-1 if none). Because the partitions of one target form a chain, this tells exactly
    which partitions ``p`` depends on.
    """

    def __init__(self, targets: int) -> None:
        self.targets = targets
        self.color: list[int] = []
        self.rank: list[int] = []
        self.last: list[list[int]] = []
        self.users: list[set[int]] = []
        self.depends: list[set[int]] = []
        self.chains: list[list[int]] = [[] for _ in range(targets)]
        self.owner: dict[int, int] = {}
        self.raised = 0  # partitions whose ``last`` grew after one of their ancestors'

    def add(self, node: int, color: int, preds: list[int]) -> None:
        """Put ``node`` (of target ``color``) in the first partition it may join, or a new one."""
        feeding = {self.owner[pred] for pred in preds}
        after = max((self.last[f][color] for f in feeding), default=-1)
        chain = self.chains[color]
        if after + 1 < len(chain):
            chosen = chain[after + 1]
        else:
            chosen = len(self.color)
            self.color.append(color)
            self.rank.append(len(chain))
            self.last.append([-1] * self.targets)
            self.users.append(set())
            self.depends.append(set())
            chain.append(chosen)
        self.owner[node] = chosen
        grown = list(self.last[chosen])
        for source in feeding - {chosen}:
            self.users[source].add(chosen)
            self.depends[chosen].add(source)
            grown = _upper(grown, self._floor(source))
        if grown != self.last[chosen]:
            self.last[chosen] = grown
            self._raise_users(chosen)

    def owner_of(self, count: int) -> list[int]:
        """Each node's partition, for nodes ``0 .. count - 1``."""
        return [self.owner[node] for node in range(count)]

    def _floor(self, partition: int) -> list[int]:
        """What depending on ``partition`` means: its ancestry and itself."""
        floor = list(self.last[partition])
        color = self.color[partition]
        floor[color] = max(floor[color], self.rank[partition])
        return floor

    def _raise_users(self, start: int) -> None:
        """Carry a partition's grown ancestry on to the partitions that depend on it."""
        work = [start]
        while work:
            partition = work.pop()
            floor = self._floor(partition)
            for user in self.users[partition]:
                grown = _upper(self.last[user], floor)
                if grown != self.last[user]:
                    self.last[user] = grown
                    self.raised += 1
                    work.append(user)


def _upper(mine: list[int], other: list[int]) -> list[int]:
    return [max(a, b) for a, b in zip(mine, other, strict=True)]


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
    order = kahn_order(users, waiting)
    if len(order) != len(depends):
        stuck = [i for i, count in enumerate(waiting) if count > 0]
        raise PartitionCycleError(f"partitions {stuck} form a cycle")
    return order


def boundary(graph: Graph, nodes: Sequence[Node]) -> tuple[list[str], list[str]]:
    """Boundary values of ``nodes``: (inputs, outputs), each in first-use order.

    Inputs are the non-constant values read from outside; outputs are the values produced
    for other nodes or for the graph's outputs.
    """
    return _boundary(graph, nodes, set(graph.outputs))


def _boundary(
    graph: Graph, nodes: Sequence[Node], graph_outputs: set[str]
) -> tuple[list[str], list[str]]:
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
        if name in graph_outputs or any(c.name not in inside for c in graph.value(name).consumers)
    ]
    return inputs, outputs


def _attach_boundaries(graph: Graph, partitions: list[Partition]) -> None:
    """Record each partition's non-constant inputs and the outputs others (or the graph) use."""
    graph_outputs = set(graph.outputs)
    for partition in partitions:
        partition.inputs, partition.outputs = _boundary(graph, partition.nodes, graph_outputs)


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
