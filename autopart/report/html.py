"""The plan as one self-contained HTML page: graph, schedules, partitions, what is missing.

The page loads nothing: its style, script and drawings (SVG) are inline. Layout: a header
with the totals; the graph on the left (levels top-down, nodes coloured by target,
partitions shaded, copies as diamonds); on the right the predicted and measured Gantt
charts on one time axis, what the plan does not record, and the partitions table.
"""

from __future__ import annotations

from pathlib import Path

from autopart.io import atomic_write_bytes
from autopart.ir.graph import Graph
from autopart.limits import format_size
from autopart.plan.schema import Plan
from autopart.report import ReportError
from autopart.report.assets import SCRIPT, STYLE
from autopart.report.gantt_svg import gantt_lanes, gantt_svg
from autopart.report.graph_svg import draw_graph
from autopart.report.svg import COPY_COLOUR, UNKNOWN_COLOUR, attr, target_colours, tint
from autopart.report.tree import Explanation, explain, format_seconds


def write_html(plan: Plan, graph: Graph, path: str | Path) -> None:
    """Write the page for ``plan`` (of ``graph``) to ``path`` atomically.

    Raises :class:`ReportError` when ``path`` cannot be written.
    """
    page = render_html(plan, graph).encode()
    try:
        atomic_write_bytes(path, page)
    except OSError as error:
        reason = error.strerror or str(error)
        raise ReportError(f"cannot write {path}: {reason}") from None


def render_html(plan: Plan, graph: Graph) -> str:
    """The page's HTML text; every graph node is an element with ``data-node``."""
    explanation = explain(plan, graph)
    colours = target_colours(row.target for row in explanation.partitions)
    drawing = draw_graph(plan, graph, explanation, colours)
    title = f"{explanation.model} · autopart plan"
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{attr(title)}</title><style>{STYLE}</style></head><body>"
        f"{_header(plan, explanation)}<main>"
        f'<section class="graphcol">{_toolbar(explanation, colours)}'
        f'<div class="scroll">{drawing}</div></section>'
        f"<aside>{_schedules(explanation, colours)}{_missing(plan, explanation)}"
        f"{_partition_table(explanation, colours)}</aside></main>"
        f'<div id="tip" hidden></div><script>{SCRIPT}</script></body></html>\n'
    )


def _card(key: str, value: str | None, sub: str = "") -> str:
    missing = value is None
    return (
        f'<div class="card{" absent" if missing else ""}"><div class="k">{attr(key)}</div>'
        f'<div class="v">{attr("—" if missing else value)}</div>'
        f'<div class="s">{attr("not recorded" if missing else sub)}</div></div>'
    )


def _seconds(value: float | None) -> str | None:
    return None if value is None else format_seconds(value)


def _header(plan: Plan, explanation: Explanation) -> str:
    copied = sum(copy.nbytes for copy in explanation.copies)
    devices = sorted({row.device for row in explanation.partitions})
    runs = f"median of {explanation.measured_runs} runs" if explanation.measured_runs else ""
    profile = f"profile {explanation.profile[:12]}" if explanation.profile else ""
    cards = [
        _card("nodes", str(explanation.node_count), f"on {len(devices)} device(s)"),
        _card("partitions", str(len(explanation.partitions)), f"fallback {plan.fallback}"),
        _card("copies", str(len(explanation.copies)), format_size(copied)),
        _card("predicted sequential", _seconds(explanation.sequential_s), profile),
        _card(
            "predicted makespan",
            _seconds(explanation.makespan_s),
            f"objective {explanation.objective}" if explanation.objective else "",
        ),
        _card("measured", _seconds(explanation.measured_median_s), runs),
        *(
            [_card("accuracy", *explanation.accuracy.split(": ", 1))]
            if explanation.accuracy
            else []
        ),
    ]
    return (
        f"<header><div><h1>{attr(explanation.model)}<small>autopart plan</small></h1>"
        f'<div class="sub">model {attr(explanation.source)} · hash {attr(plan.model.hash[:12])}'
        f" · devices {attr(', '.join(devices))}</div></div>"
        f'<div class="cards">{"".join(cards)}</div></header>'
    )


def _toolbar(explanation: Explanation, colours: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for row in explanation.partitions:
        counts[row.target] = counts.get(row.target, 0) + len(row.nodes)
    items = [
        f'<span><i class="sw" style="background:{tint(colour, 0.55)};border-color:{colour}">'
        f"</i>{attr(target)} ({counts.get(target, 0)})</span>"
        for target, colour in colours.items()
    ]
    items += [
        f'<span><i class="sw diamond" style="background:{COPY_COLOUR}"></i>copy</span>',
        '<span><i class="sw" style="background:#8795a140;border-color:transparent"></i>'
        "partition</span>",
        '<span><i class="sw io"></i>graph input/output</span>',
    ]
    zoom = (
        '<div class="zoom"><button data-zoom="0.8" title="zoom out">&minus;</button>'
        '<span id="zoomlevel">100%</span><button data-zoom="1.25" title="zoom in">+</button>'
        '<button data-zoom="fit" title="fit the width">fit</button>'
        '<button data-zoom="1" title="actual size">1:1</button></div>'
    )
    return (
        f'<div class="toolbar"><h2>Graph</h2><div class="legend">{"".join(items)}</div>{zoom}</div>'
    )


def _schedules(explanation: Explanation, colours: dict[str, str]) -> str:
    predicted, measured = explanation.predicted_schedule, explanation.measured_schedule
    lanes = gantt_lanes(predicted, measured)
    t_max = max((entry.end_s for entry in [*predicted, *measured]), default=0.0)
    targets = {row.id: row.target for row in explanation.partitions}
    copies = {row.id for row in explanation.copies}

    def colour_of(step: str) -> str:
        if step in targets:
            return colours[targets[step]]
        return COPY_COLOUR if step in copies else UNKNOWN_COLOUR

    objective = f", objective {explanation.objective}" if explanation.objective else ""
    runs = f", median of {explanation.measured_runs} runs" if explanation.measured_runs else ""
    charts = []
    for label, schedule, total, note in (
        ("predicted", predicted, explanation.makespan_s, objective),
        ("measured (last run)", measured, explanation.measured_median_s, runs),
    ):
        length = f" — {format_seconds(total)}" if total is not None else ""
        charts.append(f"<h3>{attr(label)}{attr(length)}{attr(note)}</h3>")
        if schedule:
            charts.append(gantt_svg(schedule, lanes, t_max, colour_of, f"{label} schedule"))
        else:
            charts.append(f'<p class="empty">no {attr(label.split()[0])} schedule in this plan</p>')
    return f"<section><h2>Schedule</h2>{''.join(charts)}</section>"


def _missing(plan: Plan, explanation: Explanation) -> str:
    if not explanation.missing and not plan.notes:
        return ""
    items = "".join(f"<li>{attr(text)}</li>" for text in explanation.missing)
    notes = "".join(f"<li>{attr(text)}</li>" for text in plan.notes)
    parts = ["<section>"]
    if items:
        parts.append(f'<h2>Not in this plan</h2><ul class="missing">{items}</ul>')
    if notes:
        parts.append(f"<h2>Notes</h2><ul>{notes}</ul>")
    parts.append("</section>")
    return "".join(parts)


def _partition_table(explanation: Explanation, colours: dict[str, str]) -> str:
    rows = []
    for row in explanation.partitions:
        colour = colours[row.target]
        predicted = row.predicted_s if row.predicted_s is not None else row.nodes_s
        rows.append(
            f'<tr data-step="{attr(row.id)}"><td><b>{attr(row.id)}</b></td>'
            f'<td><i class="sw" style="background:{tint(colour, 0.55)};border-color:{colour}">'
            f"</i>{attr(row.target)}</td><td class='n'>{len(row.nodes)}</td>"
            f"<td class='n'>{attr(format_seconds(predicted))}</td>"
            f"<td class='n'>{attr(format_seconds(row.measured_s))}</td></tr>"
        )
    return (
        f"<section><h2>Partitions ({len(explanation.partitions)})</h2>"
        '<div class="tablewrap"><table><thead><tr><th>step</th><th>target</th>'
        '<th class="n">nodes</th><th class="n">predicted</th><th class="n">measured</th></tr>'
        f"</thead><tbody>{''.join(rows)}</tbody></table></div></section>"
    )
