"""A layered (Sugiyama-style) top-down layout of a graph, computed without dependencies.

Levels are longest paths from the graph inputs; edges spanning several levels pass through
dummy points so they route around nodes; the order within each level comes from
barycenter sweeps (keeping the order with the fewest crossings); x positions come from
least-squares placement that pulls nodes under their neighbours without overlaps.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from autopart.ir.graph import Graph

NODE_W, NODE_H = 132.0, 34.0
IO_W, IO_H = 112.0, 24.0
DUMMY_W = 10.0
GAP_X, PITCH_Y = 22.0, 74.0
MARGIN = 28.0
SWEEPS = 12

Key = tuple[str, str]  # ("node" | "input" | "output" | "dummy", name)


@dataclass
class Box:
    """A laid-out vertex: ``x`` is its centre, ``y`` its top edge."""

    key: Key
    level: int
    x: float = 0.0
    y: float = 0.0
    width: float = NODE_W
    height: float = NODE_H

    @property
    def left(self) -> float:
        """The x of its left edge."""
        return self.x - self.width / 2

    @property
    def right(self) -> float:
        """The x of its right edge."""
        return self.x + self.width / 2

    @property
    def bottom(self) -> float:
        """The y of its bottom edge."""
        return self.y + self.height


@dataclass
class Route:
    """An edge from ``src`` to ``dst`` carrying ``values``, through ``via`` dummy boxes."""

    src: Key
    dst: Key
    values: list[str]
    via: list[Box] = field(default_factory=list)

    def points(self, boxes: dict[Key, Box]) -> list[tuple[float, float]]:
        """Start (bottom of ``src``), the top and bottom of each dummy, end (top of ``dst``)."""
        start, end = boxes[self.src], boxes[self.dst]
        points = [(start.x, start.bottom)]
        for dummy in self.via:
            points += [(dummy.x, dummy.y), (dummy.x, dummy.bottom)]
        return [*points, (end.x, end.y)]


@dataclass
class Layout:
    """Boxes of nodes, graph inputs and outputs by key, the routes, and the drawing's size."""

    boxes: dict[Key, Box]
    routes: list[Route]
    width: float
    height: float


def layered_layout(graph: Graph) -> Layout:
    """Lay ``graph`` out top-down: inputs on top, outputs under their producers."""
    boxes, edges = _vertices_and_edges(graph)
    if not boxes:
        return Layout({}, [], 2 * MARGIN, 2 * MARGIN)
    _assign_levels(boxes, edges)
    routes = _routes(boxes, edges)
    layers = _layers(boxes, routes)
    _order(layers, routes)
    _place(layers, routes)
    left = min(box.left for box in boxes.values())
    for layer in layers:
        for box in layer:
            box.x += MARGIN - left
            box.y = MARGIN + box.level * PITCH_Y + (NODE_H - box.height) / 2
    width = max(box.right for box in boxes.values()) + MARGIN
    height = max(box.bottom for box in boxes.values()) + MARGIN
    return Layout(
        {key: box for key, box in boxes.items() if key[0] != "dummy"}, routes, width, height
    )


def _vertices_and_edges(graph: Graph) -> tuple[dict[Key, Box], dict[tuple[Key, Key], list[str]]]:
    boxes: dict[Key, Box] = {}
    edges: dict[tuple[Key, Key], list[str]] = {}

    def source(value: str) -> Key | None:
        producer = graph.values[value].producer
        if producer is not None:
            return ("node", producer.name)
        if value in graph.inputs and not graph.values[value].is_const:
            boxes.setdefault(("input", value), Box(("input", value), 0, width=IO_W, height=IO_H))
            return ("input", value)
        return None

    for node in graph.nodes:
        boxes[("node", node.name)] = Box(("node", node.name), 0)
    for node in graph.nodes:
        for value in dict.fromkeys(node.present_inputs):
            src = source(value)
            if src is not None:
                edges.setdefault((src, ("node", node.name)), []).append(value)
    for value in graph.outputs:
        src = source(value)
        if src is not None:
            key = ("output", value)
            boxes[key] = Box(key, 0, width=IO_W, height=IO_H)
            edges.setdefault((src, key), []).append(value)
    return boxes, edges


def _assign_levels(boxes: dict[Key, Box], edges: dict[tuple[Key, Key], list[str]]) -> None:
    """Longest path from the top; sources with no inputs sink to just above their readers."""
    preds: dict[Key, list[Key]] = {key: [] for key in boxes}
    succs: dict[Key, list[Key]] = {key: [] for key in boxes}
    for src, dst in edges:
        preds[dst].append(src)
        succs[src].append(dst)
    order = _topological(boxes, preds, succs)
    for key in order:
        if key[0] == "input":
            boxes[key].level = 0
        else:
            boxes[key].level = max((boxes[p].level + 1 for p in preds[key]), default=1)
    for key in reversed(order):
        if key[0] == "node" and not preds[key] and succs[key]:
            boxes[key].level = max(1, min(boxes[s].level for s in succs[key]) - 1)


def _topological(
    boxes: dict[Key, Box], preds: dict[Key, list[Key]], succs: dict[Key, list[Key]]
) -> list[Key]:
    waiting = {key: len(preds[key]) for key in boxes}
    ready = [key for key in boxes if waiting[key] == 0]
    order: list[Key] = []
    while ready:
        key = ready.pop(0)
        order.append(key)
        for succ in succs[key]:
            waiting[succ] -= 1
            if waiting[succ] == 0:
                ready.append(succ)
    return order


def _routes(boxes: dict[Key, Box], edges: dict[tuple[Key, Key], list[str]]) -> list[Route]:
    routes = []
    for (src, dst), values in edges.items():
        route = Route(src, dst, values)
        for level in range(boxes[src].level + 1, boxes[dst].level):
            key = ("dummy", f"{len(boxes)}")
            dummy = Box(key, level, width=DUMMY_W, height=NODE_H)
            boxes[key] = dummy
            route.via.append(dummy)
        routes.append(route)
    return routes


def _layers(boxes: dict[Key, Box], routes: list[Route]) -> list[list[Box]]:
    layers: list[list[Box]] = [[] for _ in range(max(b.level for b in boxes.values()) + 1)]
    for box in boxes.values():
        layers[box.level].append(box)
    return layers


def _chains(routes: list[Route]) -> list[tuple[Key, Key]]:
    """Every edge between adjacent levels, dummies included."""
    pairs = []
    for route in routes:
        keys = [route.src, *(d.key for d in route.via), route.dst]
        pairs += list(itertools.pairwise(keys))
    return pairs


def _order(layers: list[list[Box]], routes: list[Route]) -> None:
    """Barycenter sweeps down and up; each layer keeps the best order seen."""
    pairs = _chains(routes)
    up: dict[Key, list[Key]] = {}
    down: dict[Key, list[Key]] = {}
    for a, b in pairs:
        down.setdefault(a, []).append(b)
        up.setdefault(b, []).append(a)
    best = [list(layer) for layer in layers]
    best_crossings = _crossings(layers, down)
    for sweep in range(SWEEPS):
        downward = sweep % 2 == 0
        indices = range(1, len(layers)) if downward else range(len(layers) - 2, -1, -1)
        for index in indices:
            fixed = layers[index - 1] if downward else layers[index + 1]
            position = {box.key: i for i, box in enumerate(fixed)}
            neighbours = up if downward else down
            layer = layers[index]

            def barycenter(
                item: tuple[int, Box],
                position: dict[Key, int] = position,
                neighbours: dict[Key, list[Key]] = neighbours,
            ) -> float:
                i, box = item
                linked = [position[k] for k in neighbours.get(box.key, []) if k in position]
                return sum(linked) / len(linked) if linked else float(i)

            layers[index] = [box for _, box in sorted(enumerate(layer), key=barycenter)]
        crossings = _crossings(layers, down)
        if crossings < best_crossings:
            best, best_crossings = [list(layer) for layer in layers], crossings
    layers[:] = best


def _crossings(layers: list[list[Box]], down: dict[Key, list[Key]]) -> int:
    total = 0
    for upper, lower in itertools.pairwise(layers):
        position = {box.key: i for i, box in enumerate(lower)}
        ends = sorted(
            (i, position[k]) for i, box in enumerate(upper) for k in down.get(box.key, [])
        )
        for a in range(len(ends)):
            for b in range(a + 1, len(ends)):
                if ends[a][0] < ends[b][0] and ends[a][1] > ends[b][1]:
                    total += 1
    return total


def _place(layers: list[list[Box]], routes: list[Route]) -> None:
    """Pull each box to the mean x of its neighbours, keeping order and spacing."""
    up: dict[Key, list[Box]] = {}
    down: dict[Key, list[Box]] = {}
    boxes = {box.key: box for layer in layers for box in layer}
    for a, b in _chains(routes):
        down.setdefault(a, []).append(boxes[b])
        up.setdefault(b, []).append(boxes[a])
    for layer in layers:
        _pack(layer, [box.x for box in layer])
    for sweep in range(2 * SWEEPS):
        downward = sweep % 2 == 0
        neighbours = up if downward else down
        for layer in layers if downward else reversed(layers):
            desired = []
            for box in layer:
                linked = neighbours.get(box.key, [])
                desired.append(sum(b.x for b in linked) / len(linked) if linked else box.x)
            _pack(layer, desired)


def _pack(layer: Sequence[Box], desired: Sequence[float]) -> None:
    """Closest x to ``desired`` (least squares) keeping order and a gap between neighbours.

    With offsets ``o_i`` (the minimal distance from the first box), ``x_i - o_i`` must be
    non-decreasing: pool adjacent violators solves that isotonic regression exactly.
    """
    offsets, total = [], 0.0
    for i, box in enumerate(layer):
        if i:
            total += (layer[i - 1].width + box.width) / 2 + GAP_X
        offsets.append(total)
    blocks: list[list[float]] = []  # [sum of targets, count]
    for target in (d - o for d, o in zip(desired, offsets, strict=True)):
        blocks.append([target, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            merged = blocks.pop()
            blocks[-1][0] += merged[0]
            blocks[-1][1] += merged[1]
    i = 0
    for block_sum, count in blocks:
        for _ in range(int(count)):
            layer[i].x = block_sum / count + offsets[i]
            i += 1
