"""The plan's graph as SVG, laid out by :mod:`autopart.report.layout`.

Nodes are coloured by target, partitions are shaded regions, copies are diamonds on the
edges they serve, and every element has a ``<title>`` with its details.
"""

from __future__ import annotations

from autopart.errors import TargetError
from autopart.ir.graph import Graph
from autopart.ir.target import HOST_DEVICE, VirtualDevice
from autopart.limits import format_size
from autopart.plan.schema import Plan
from autopart.report.layout import NODE_H, PITCH_Y, Box, Key, Layout, Route, layered_layout
from autopart.report.svg import COPY_COLOUR, attr, clip, num, tint
from autopart.report.tree import Explanation, NodeRow, describe_saving, format_seconds

PAD_X = 7.0
PAD_Y = (PITCH_Y - NODE_H) / 2 - 4  # leaves a visible seam between partitions on adjacent levels
COPY_R = 8.0
TIMES = "\u00d7"


def draw_graph(plan: Plan, graph: Graph, explanation: Explanation, colours: dict[str, str]) -> str:
    """The SVG of ``graph`` laid out top-down, with ``plan``'s partitions and copies on it."""
    layout = layered_layout(graph)
    rows = {node.name: node for row in explanation.partitions for node in row.nodes}
    owner = {node.name: row.id for row in explanation.partitions for node in row.nodes}
    parts = [
        _partition_regions(layout, explanation, colours),
        '<g class="edges">',
        *(_edge(layout, route, graph) for route in layout.routes),
        "</g>",
        '<g class="nodes">',
    ]
    for key, box in layout.boxes.items():
        if key[0] == "node":
            node_row = rows[key[1]]
            parts.append(_node(box, graph, node_row, owner[key[1]], colours[node_row.target]))
        else:
            parts.append(_io(box, graph))
    parts += [
        "</g>",
        _copies(layout, plan, graph, explanation),
        _partition_labels(layout, explanation, colours),
    ]
    width, height = num(layout.width), num(layout.height)
    return (
        f'<svg id="graph" class="graph" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="partitioned graph">'
        f"{_defs()}{''.join(parts)}</svg>"
    )


def _defs() -> str:
    return (
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0.8 L7.5,4 L0,7.2 z" '
        'fill="#8795a1"/></marker></defs>'
    )


def shape_text(graph: Graph, value: str) -> str:
    """``name 1x3x224x224 float32`` (with a times sign; ``const`` for constants)."""
    info = graph.values.get(value)
    if info is None:
        return value
    shape = TIMES.join(str(d) for d in info.shape) if info.shape is not None else "?"
    dtype = f" {info.dtype}" if info.dtype is not None else ""
    const = " const" if info.is_const else ""
    return f"{value} {shape or 'scalar'}{dtype}{const}"


def _node(box: Box, graph: Graph, row: NodeRow, partition: str, colour: str) -> str:
    node = graph.node(row.name)
    precision = _precision(row.target)
    details = [
        f"{node.op_type} · {node.name}",
        f"target {row.target} · {precision} · partition {partition}",
        "inputs: " + "; ".join(shape_text(graph, v) for v in node.present_inputs),
        "outputs: " + "; ".join(shape_text(graph, v) for v in node.outputs if v),
        f"cost {format_seconds(row.cost_s)} · {describe_saving(row)}",
    ]
    if row.next_best is not None:
        details.append(f"next best: {row.next_best} {format_seconds(row.next_best_s)}")
    second = node.name if row.cost_s is None else f"{node.name} · {format_seconds(row.cost_s)}"
    w, h = num(box.width), num(box.height)
    # reduced precision: a dashed outline and the precision beside the op
    dash = ' stroke-dasharray="4 2" stroke-width="2"' if precision != "f32" else ""
    op_text = node.op_type if precision == "f32" else f"{node.op_type} {precision}"
    return (
        f'<g class="node" data-node="{attr(node.name)}" data-partition="{attr(partition)}" '
        f'data-target="{attr(row.target)}" data-precision="{precision}" '
        f'transform="translate({num(box.left)},{num(box.y)})">'
        f"<title>{attr(chr(10).join(details))}</title>"
        f'<rect width="{w}" height="{h}" rx="5" fill="{tint(colour, 0.55)}" stroke="{colour}"'
        f"{dash}/>"
        f'<text class="op" x="{num(box.width / 2)}" y="14">{attr(clip(op_text, 17))}</text>'
        f'<text class="nm" x="{num(box.width / 2)}" y="27">{attr(clip(second, 24))}</text></g>'
    )


def _precision(target: str) -> str:
    """The precision a target text computes in (``f32`` when it is not a target)."""
    try:
        return VirtualDevice.parse(target).computes_in
    except TargetError:
        return "f32"


def _io(box: Box, graph: Graph) -> str:
    kind, value = box.key
    return (
        f'<g class="io {kind}" data-value="{attr(value)}" '
        f'transform="translate({num(box.left)},{num(box.y)})">'
        f"<title>{attr(f'graph {kind}: {shape_text(graph, value)}')}</title>"
        f'<rect width="{num(box.width)}" height="{num(box.height)}" rx="{num(box.height / 2)}"/>'
        f'<text x="{num(box.width / 2)}" y="16">{attr(clip(f"{kind} {value}", 19))}</text></g>'
    )


def _path(points: list[tuple[float, float]]) -> str:
    """Curves across the gaps between levels, straight lines through dummy boxes."""
    (x, y), rest = points[0], points[1:]
    d = [f"M{num(x)},{num(y)}"]
    for i, (nx, ny) in enumerate(rest):
        if i % 2 == 0:
            mid = (y + ny) / 2
            d.append(f"C{num(x)},{num(mid)} {num(nx)},{num(mid)} {num(nx)},{num(ny)}")
        else:
            d.append(f"L{num(nx)},{num(ny)}")
        x, y = nx, ny
    return " ".join(d)


def _edge(layout: Layout, route: Route, graph: Graph) -> str:
    title = "\n".join(shape_text(graph, value) for value in route.values)
    return (
        f'<path class="edge" d="{_path(route.points(layout.boxes))}" marker-end="url(#arrow)">'
        f"<title>{attr(title)}</title></path>"
    )


def _device(target: str) -> str:
    return str(VirtualDevice.parse(target).device)


def _copies(layout: Layout, plan: Plan, graph: Graph, explanation: Explanation) -> str:
    """A diamond per copy, half-way along the first leg of an edge to a reader on ``dst``."""
    routes: dict[Key, list[Route]] = {}
    for route in layout.routes:
        routes.setdefault(route.src, []).append(route)
    taken: dict[tuple[float, float], int] = {}
    parts = ['<g class="copies">']
    for spec, row in zip(plan.copies, explanation.copies, strict=True):
        producer = graph.values[spec.value].producer if spec.value in graph.values else None
        src: Key = ("node", producer.name) if producer else ("input", spec.value)

        def serves(route: Route, dst: str = spec.dst, value: str = spec.value) -> bool:
            kind, name = route.dst
            if value not in route.values:
                return False
            if kind == "output":
                return dst == HOST_DEVICE
            return kind == "node" and _device(plan.assignment[name]) == dst

        chosen = [r for r in routes.get(src, []) if serves(r)]
        if chosen:
            (x0, y0), (x1, y1) = chosen[0].points(layout.boxes)[:2]
            x, y = (x0 + x1) / 2, (y0 + y1) / 2
        elif src in layout.boxes:
            box = layout.boxes[src]
            x, y = box.x, box.bottom + PAD_Y / 2
        else:
            continue
        spot = (round(x), round(y))
        x += 2.4 * COPY_R * taken.get(spot, 0)
        taken[spot] = taken.get(spot, 0) + 1
        title = (
            f"copy {row.id}: {shape_text(graph, row.value)}\n{row.src} → {row.dst} · "
            f"{format_size(row.nbytes)}\npredicted {format_seconds(row.predicted_s)} · "
            f"measured {format_seconds(row.measured_s)}"
        )
        r = COPY_R
        parts.append(
            f'<g class="copy" data-copy="{attr(row.id)}" data-step="{attr(row.id)}" '
            f'transform="translate({num(x)},{num(y)})"><title>{attr(title)}</title>'
            f'<path d="M0,{-r} L{r},0 L0,{r} L{-r},0 z" fill="{COPY_COLOUR}"/>'
            f'<text x="{num(r + 3)}" y="3.5">{attr(row.id)}</text></g>'
        )
    parts.append("</g>")
    return "".join(parts)


def _regions(layout: Layout, explanation: Explanation) -> dict[str, dict[int, tuple[float, ...]]]:
    """Per partition and level: left, right, top, bottom of its nodes there, padded."""
    regions: dict[str, dict[int, tuple[float, ...]]] = {}
    for row in explanation.partitions:
        levels: dict[int, tuple[float, ...]] = {}
        for node in row.nodes:
            box = layout.boxes[("node", node.name)]
            left, right = box.left - PAD_X, box.right + PAD_X
            top, bottom = box.y - PAD_Y, box.bottom + PAD_Y
            if box.level in levels:
                old = levels[box.level]
                left, right = min(left, old[0]), max(right, old[1])
            levels[box.level] = (left, right, top, bottom)
        regions[row.id] = levels
    return regions


def _partition_regions(layout: Layout, explanation: Explanation, colours: dict[str, str]) -> str:
    """Each partition as one translucent shape: a band per level, joined across the gaps."""
    parts = ['<g class="partitions">']
    for pid, levels in _regions(layout, explanation).items():
        row = explanation.partition(pid)
        assert row is not None
        shapes = []
        for level, (left, right, top, bottom) in sorted(levels.items()):
            shapes.append(
                f'<rect x="{num(left)}" y="{num(top)}" width="{num(right - left)}" '
                f'height="{num(bottom - top)}" rx="9"/>'
            )
            below = levels.get(level + 1)
            if below is not None:
                seam_top, seam_bottom = bottom - 9, below[2] + 9  # under the rounded corners
                shapes.append(
                    f'<path d="M{num(left)},{num(seam_top)} L{num(right)},{num(seam_top)} '
                    f'L{num(below[1])},{num(seam_bottom)} L{num(below[0])},{num(seam_bottom)} z"/>'
                )
        parts.append(
            f'<g class="partition" data-partition="{attr(pid)}" data-step="{attr(pid)}" '
            f'fill="{colours[row.target]}">{"".join(shapes)}</g>'
        )
    parts.append("</g>")
    return "".join(parts)


def _partition_labels(layout: Layout, explanation: Explanation, colours: dict[str, str]) -> str:
    parts = ['<g class="plabels">']
    for pid, levels in _regions(layout, explanation).items():
        row = explanation.partition(pid)
        assert row is not None
        left, _, top, _ = levels[min(levels)]
        parts.append(
            f'<text x="{num(left + 6)}" y="{num(top + 12)}" fill="{colours[row.target]}" '
            f'data-step="{attr(pid)}">{attr(pid)}</text>'
        )
    parts.append("</g>")
    return "".join(parts)
