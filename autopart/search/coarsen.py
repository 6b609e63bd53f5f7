"""Cutting a graph into segments at its series points, for the exact search at scale.

A node ``a`` is a *series point* when every other node is its ancestor (and so before it in
the topological order) or its descendant (after it), and none of its outputs is a graph
output. A transformer stack has two per block (the residual Adds), a chain one per node.
The segments between consecutive series points price independently under the cost model
of :mod:`autopart.search.simulator` once the series points' targets are fixed, when no
value but a series point's outputs crosses a series point:

- **Copies.** A copy is charged once per (value, destination device): the copies of
  ``a``'s outputs belong to the segment after it (its readers are all there), every other
  copy to the segment of its value's producer.
- **Partitions.** A partition holding nodes on both sides of ``a`` holds ``a`` too: a node
  ``u`` before ``a`` is its ancestor and a node ``w`` after it its descendant, so a
  partition with ``u`` and ``w`` but not ``a`` would depend on ``a``'s partition and that
  on it. So the partitions of the whole plan are those of each segment, glued at the series
  points: ``a``'s partition is counted once, in the segment it ends.
- **Edge costs.** ``a``'s layout conversions split the same way: entering its partition (its
  inputs) in the segment it ends, leaving it (its readers) in the segment after. A fused
  consumer and its producer never lie across a series point other than ``a`` itself.

A *shared* value may also reach over series points (a value or graph input read by three
nodes or more, such as an attention mask read by every layer; a residual connection read
twice never does): the partition argument still holds, but its copies, the layout
conversion where it leaves its producer's partition and an unfused consumer's extra are
shared between segments. A segment then reads it as a constant: those costs are dropped,
so each segment's optimum stays a lower bound of its share, and the bound of the whole
stays proven; the plan found is priced whole by the simulator, and the gap reports what the
relaxation may have cost.

The cold entries and the lone-partition saving depend on the whole plan (on more than one
target, or one partition). Segments are priced as in a plan on several targets, every
partition paying its cold entry; plans on one target are priced whole apart
(:mod:`autopart.search.ilp_series`).

Segments of equal structure and costs (the blocks of a stack, the repeated ops of a chain)
share one :func:`segment_key`, so each kind is solved once (:func:`segment_costs` builds the
sub-problem). The whole pass is linear in the graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autopart.costmodel.costs import Costs
from autopart.ir.graph import Graph, Node, Value
from autopart.ir.target import VirtualDevice

SHARED_READERS = 3  # a value read this often may reach over series points (a mask, a bias)


@dataclass(frozen=True)
class Segment:
    """Nodes ``positions`` of the topological order, entered after series point ``entry``.

    ``entry`` is ``None`` for the first segment; ``closed`` says the last position is the
    next series point (every segment but the last).
    """

    entry: int | None
    positions: tuple[int, ...]
    closed: bool

    @property
    def exit(self) -> int | None:
        """The series point that ends the segment, if it is closed."""
        return self.positions[-1] if self.closed else None


def series_points(graph: Graph) -> list[int]:
    """The positions of ``graph``'s series points (see the module docstring), ascending.

    Every node before ``k`` is its ancestor exactly when each of them is read by some node
    at ``k`` or before (following the nearest reader forward then ends at ``k``); every
    node after ``k`` its descendant exactly when each of them reads some node at ``k`` or
    after. Two scans: the running largest nearest reader, the running least latest producer.
    A value (or graph input) may reach over ``k`` only if it is *shared*
    (:data:`SHARED_READERS` readers or more): a residual connection keeps its segment whole,
    and exact.
    """
    nodes = graph.nodes
    count = len(nodes)
    index = {node.name: i for i, node in enumerate(nodes)}
    outputs = set(graph.outputs)
    nearest, latest = [count] * count, [-1] * count  # a sink's reader, a source's producer
    spanned = [0] * (count + 1)  # +1 where a value that is not shared starts reaching over
    for value in graph.values.values():
        readers = sorted({index[c.name] for c in value.consumers})
        if value.is_const or not readers:
            continue
        p = -1 if value.producer is None else index[value.producer.name]  # inputs: before all
        if p >= 0:
            nearest[p] = min(nearest[p], readers[0])
            for n in readers:
                latest[n] = max(latest[n], p)
        if len(readers) < SHARED_READERS and readers[-1] > p + 1:
            spanned[p + 1] += 1
            spanned[readers[-1]] -= 1
    after = [count] * (count + 1)  # after[k]: the least latest producer of nodes k ..
    for n in reversed(range(count)):
        after[n] = min(after[n + 1], latest[n])
    points: list[int] = []
    before, crossing = -1, 0  # the largest nearest reader before k; values reaching over k
    for k in range(count - 1):
        crossing += spanned[k]
        made_output = any(name in outputs for name in nodes[k].outputs if name)
        if before <= k and after[k + 1] >= k and not crossing and not made_output:
            points.append(k)
        before = max(before, nearest[k])
    return points


def segments(graph: Graph, points: list[int] | None = None) -> list[Segment]:
    """The segments between ``points`` (default: :func:`series_points`), in order."""
    points = series_points(graph) if points is None else points
    found: list[Segment] = []
    start, entry = 0, None
    cuts = set(points)
    for point in [*points, len(graph.nodes) - 1]:
        closed = point in cuts
        found.append(Segment(entry, tuple(range(start, point + 1)), closed))
        start, entry = point + 1, point
    return found


def segment_key(costs: Costs, segment: Segment) -> tuple[object, ...]:
    """What the segment's sub-problem depends on, with node names replaced by positions.

    Equal keys give equal sub-problems (:func:`segment_costs`), so their answers are shared.
    """
    graph = costs.graph
    members = ([] if segment.entry is None else [segment.entry]) + list(segment.positions)
    local = {graph.nodes[p].name: i for i, p in enumerate(members)}
    outputs = set(graph.outputs)
    parts: list[object] = [segment.entry is None, segment.closed]
    for i, position in enumerate(members):
        node = graph.nodes[position]
        reads: list[object] = []
        for name in node.present_inputs:
            value = graph.value(name)
            made_by = local.get(value.producer.name) if value.producer is not None else None
            if made_by is not None:
                reads.append((made_by, value.producer.outputs.index(name), value.nbytes))
            elif segment.entry is None and value.producer is None and not value.is_const:
                reads.append(("input", name, value.nbytes))
            else:
                reads.append("constant")  # in the sub-problem: weights, or reached over
        made = tuple((graph.value(o).nbytes, o in outputs) for o in node.outputs if o)
        entering = i == 0 and segment.entry is not None
        parts.append(
            (
                tuple(reads),
                made,
                None if entering else _by_target(costs.node_cost.get(node.name, {})),
                None if entering else local.get(costs.fused_producer.get(node.name, "")),
                None if entering else _by_target(costs.unfused.get(node.name, {})),
                _by_target(costs.layout.get(node.name, {})),
            )
        )
    return tuple(parts)


def _by_target(entry: dict[VirtualDevice, float]) -> tuple[tuple[int, float], ...]:
    """``entry`` as (target identity, seconds) pairs: equal pairs mean equal entries.

    Identities rather than targets, as hashing a target is slow; equal targets that are
    distinct objects only make two kinds of one.
    """
    return tuple((id(target), seconds) for target, seconds in entry.items())


def segment_costs(
    costs: Costs,
    segment: Segment,
    entry_target: VirtualDevice | None,
    exit_target: VirtualDevice | None,
) -> Costs:
    """The sub-problem of ``segment`` with its series points on the given targets.

    Its graph holds the segment's nodes, after a copy of the entry series point with no
    inputs that costs nothing and runs only on ``entry_target``; its exit series point runs
    only on ``exit_target``. Values made outside it but by the entry, and graph inputs
    after the first segment, are constants (see the module docstring). Every partition pays
    its target's cold entry as a launch (a plan on several targets), no partition is alone,
    and nothing is measured whole. Its optimum less the entry's launch (its partition is
    counted where it ends) is the segment's share of the optimum of the whole plan with
    those series points (a lower bound of it where values reach over series points).
    """
    graph = costs.graph
    nodes = [graph.nodes[p] for p in segment.positions]
    values: dict[str, Value] = {}
    inside = set(_made(graph, segment))

    def keep(name: str) -> None:
        if name and name not in values:
            old = graph.value(name)
            relaxed = old.const is None and name not in inside
            if segment.entry is None and old.producer is None:
                relaxed = False  # the first segment reads the graph inputs
            const = np.zeros(0, old.dtype or np.float32) if relaxed else old.const
            values[name] = Value(name, old.shape, old.dtype, const)

    sub_nodes: list[Node] = []
    node_cost = {node.name: dict(costs.node_cost.get(node.name, {})) for node in nodes}
    if segment.entry is not None:
        entry = graph.nodes[segment.entry]
        sub_nodes.append(Node(entry.name, entry.op_type, [], list(entry.outputs)))
        node_cost[entry.name] = {entry_target: 0.0} if entry_target is not None else {}
    for node in nodes:
        sub_nodes.append(
            Node(
                node.name,
                node.op_type,
                list(node.inputs),
                list(node.outputs),
                node.attrs,
                node.domain,
                captures=list(node.captures),
            )
        )
    for node in sub_nodes:
        for name in [*node.present_inputs, *node.outputs]:
            keep(name)
    if segment.exit is not None and exit_target is not None:
        exit_name = graph.nodes[segment.exit].name
        node_cost[exit_name] = {exit_target: costs.node_cost[exit_name][exit_target]}
    made = {name for node in nodes for name in node.outputs if name}
    inputs = [name for name in graph.inputs if name in values and not values[name].is_const]
    outputs = [name for name in graph.outputs if name in made]
    sub_graph = Graph(graph.name, sub_nodes, values, inputs, outputs, dict(graph.opsets))
    names = set(node_cost)
    inner = {node.name for node in nodes}
    return Costs(
        sub_graph,
        list(costs.targets),
        node_cost,
        launch={t: costs.split_entry_cost(t) for t in costs.targets},
        transfers=dict(costs.transfers),
        fused_producer={
            n: costs.fused_producer[n]
            for n in inner
            if costs.fused_producer.get(n) in names  # only the segment's own: not the whole's
        },
        unfused={n: dict(costs.unfused[n]) for n in inner if n in costs.unfused},
        layout={n: dict(costs.layout[n]) for n in names if n in costs.layout},
    )


def _made(graph: Graph, segment: Segment) -> list[str]:
    """The values the segment's nodes and its entry series point make."""
    members = ([] if segment.entry is None else [segment.entry]) + list(segment.positions)
    return [name for p in members for name in graph.nodes[p].outputs if name]


def reads_over(graph: Graph, segment: Segment) -> bool:
    """Whether the segment reads a value that reaches over its entry (priced relaxed)."""
    made = set(_made(graph, segment))
    return any(
        graph.value(name).const is None
        and name not in made
        and not (segment.entry is None and graph.value(name).producer is None)
        for p in segment.positions
        for name in graph.nodes[p].present_inputs
    )
