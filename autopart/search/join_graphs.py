"""Graph searches over the ILP's joins: components, strongly connected groups, cycles, paths.

A join ``(producer, consumer, target)`` puts two adjacent nodes in one partition. The exact
search (:mod:`autopart.search.ilp`) looks at the joins of each solution to find the cuts
that make its launch count exact.
"""

from __future__ import annotations

from autopart.ir.target import VirtualDevice

Edge = tuple[int, int, VirtualDevice]  # (producer, consumer, target) of a possible join


def join_components(joins: list[Edge]) -> list[dict[int, list[Edge]]]:
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


def strong_components(links: dict[int, dict[int, tuple[int, int]]]) -> list[set[int]]:
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


def shortest_cycle(
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


def shortest_join_path(
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
    step = parent[n]
    while step is not None:
        path.append(step)
        n = step[0] if step[1] == n else step[1]
        step = parent[n]
    return tuple(path), n, b
