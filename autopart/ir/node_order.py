"""The order of a model's nodes: sorted where ONNX wants it, cycles refused by name."""

from __future__ import annotations

import heapq

import onnx

from autopart.errors import ModelError


def sort_nodes(graph: onnx.GraphProto) -> None:
    """Put ``graph``'s nodes in a topological order, or refuse a cycle or a missing value.

    ONNX wants nodes sorted; a model whose nodes are merely out of order is sorted here
    (stably: the lowest position first among the ready nodes). A value read that nothing
    makes, and nodes that feed each other in a cycle, are each a one-line
    :class:`ModelError` naming them. Linear in nodes and edges.
    """
    nodes = list(graph.node)
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer} | {""}
    maker = {out: index for index, node in enumerate(nodes) for out in node.output if out}
    users: list[list[int]] = [[] for _ in nodes]
    waiting = [0] * len(nodes)
    for index, node in enumerate(nodes):
        for name in dict.fromkeys(node.input):
            if name in defined:
                continue
            if name not in maker:
                raise ModelError(
                    f"invalid ONNX model: node {node.name or index!r} ({node.op_type}) reads "
                    f"{name!r}, which no node, graph input or initializer makes"
                )
            users[maker[name]].append(index)
            waiting[index] += 1
    order = kahn_order(users, waiting)
    if len(order) < len(nodes):
        cycle = _on_cycles(users, set(range(len(nodes))) - set(order))
        named = [nodes[i].name or f"#{i} {nodes[i].op_type}" for i in sorted(cycle)]
        shown = ", ".join(repr(name) for name in named[:6]) + (" ..." if len(named) > 6 else "")
        raise ModelError(f"invalid ONNX model: nodes {shown} feed each other in a cycle")
    if order != sorted(order):
        del graph.node[:]
        graph.node.extend(nodes[i] for i in order)


def kahn_order(users: list[list[int]], waiting: list[int]) -> list[int]:
    """Kahn's topological order of items ``0..n-1``, the lowest ready index first.

    ``users[i]`` lists the items that depend on ``i``; ``waiting[i]`` counts what ``i``
    depends on, and is consumed. Items on or after a cycle are left out of the order
    (their ``waiting`` stays above 0).
    """
    ready = [index for index, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        current = heapq.heappop(ready)
        order.append(current)
        for user in users[current]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    return order


def _on_cycles(users: list[list[int]], stuck: set[int]) -> set[int]:
    """Of the ``stuck`` nodes, those on a cycle or between two: the rest only follow one."""
    left = {i: sum(1 for u in users[i] if u in stuck) for i in stuck}
    readers: dict[int, list[int]] = {i: [] for i in stuck}
    for i in stuck:
        for user in users[i]:
            if user in stuck:
                readers[user].append(i)
    sinks = [i for i, count in left.items() if count == 0]
    while sinks:
        current = sinks.pop()
        stuck.discard(current)
        for reader in readers[current]:
            left[reader] -= 1
            if left[reader] == 0:
                sinks.append(reader)
    return stuck
