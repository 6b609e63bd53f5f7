"""Gantt charts of schedules as SVG: one row per lane, bars per step, a shared time axis."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from autopart.report.svg import attr, clip, num
from autopart.report.tree import ScheduleEntry, format_seconds

WIDTH = 780.0
LABEL_W = 150.0
RIGHT_PAD = 22.0
ROW_H, ROW_GAP = 20.0, 5.0
AXIS_H = 30.0


def gantt_lanes(*schedules: Iterable[ScheduleEntry]) -> list[str]:
    """Every lane of the schedules: compute lanes (host first) then copy lanes, sorted."""
    lanes = {entry.lane for schedule in schedules for entry in schedule}
    return sorted(
        lanes, key=lambda lane: (lane.startswith("copy:"), not lane.startswith("cpu"), lane)
    )


def time_ticks(t_max: float) -> tuple[list[float], float, str]:
    """About five round tick times up to ``t_max``, with the scale and unit to label them."""
    scale, unit = (1e6, "µs") if t_max < 1e-3 else (1e3, "ms") if t_max < 1 else (1.0, "s")
    raw = max(t_max, 1e-9) / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    count = int(t_max / step + 1e-9)
    return [i * step for i in range(count + 1)], scale, unit


def gantt_svg(
    schedule: Sequence[ScheduleEntry],
    lanes: Sequence[str],
    t_max: float,
    colour_of: Callable[[str], str],
    label: str,
) -> str:
    """One chart: ``lanes`` as rows, ``schedule``'s steps as bars on a 0..``t_max`` axis."""
    chart_w = WIDTH - LABEL_W - RIGHT_PAD
    t_max = max(t_max, 1e-9)

    def x_of(t: float) -> float:
        return LABEL_W + chart_w * t / t_max

    height = len(lanes) * (ROW_H + ROW_GAP) + AXIS_H + 4
    axis_y = len(lanes) * (ROW_H + ROW_GAP) + 2
    parts = [
        f'<svg class="gantt" viewBox="0 0 {num(WIDTH)} {num(height)}" role="img" '
        f'aria-label="{attr(label)}">'
    ]
    ticks, scale, unit = time_ticks(t_max)
    for tick in ticks:
        x = num(x_of(tick))
        parts.append(
            f'<line class="grid" x1="{x}" x2="{x}" y1="0" y2="{num(axis_y)}"/>'
            f'<text class="tick" x="{x}" y="{num(axis_y + 15)}">{tick * scale:g}</text>'
        )
    parts.append(
        f'<text class="unit" x="{num(WIDTH - 2)}" y="{num(axis_y + 28)}">{attr(unit)}</text>'
    )
    row = {lane: i for i, lane in enumerate(lanes)}
    for lane, i in row.items():
        y = i * (ROW_H + ROW_GAP)
        parts.append(
            f'<rect class="lane" x="{num(LABEL_W)}" y="{num(y)}" width="{num(chart_w)}" '
            f'height="{num(ROW_H)}"/><text class="lanelabel" x="{num(LABEL_W - 8)}" '
            f'y="{num(y + 14.5)}">{attr(clip(lane, 22))}<title>{attr(lane)}</title></text>'
        )
    for entry in schedule:
        y = row[entry.lane] * (ROW_H + ROW_GAP)
        x, width = x_of(entry.start_s), max(x_of(entry.end_s) - x_of(entry.start_s), 1.0)
        title = (
            f"{entry.step} on {entry.lane}\n{format_seconds(entry.start_s)} → "
            f"{format_seconds(entry.end_s)} ({format_seconds(entry.duration_s)})"
        )
        kind = "copybar" if entry.lane.startswith("copy:") else "stepbar"
        parts.append(
            f'<g class="bar {kind}" data-step="{attr(entry.step)}"><title>{attr(title)}</title>'
            f'<rect x="{num(x)}" y="{num(y + 1)}" width="{num(width)}" height="{num(ROW_H - 2)}" '
            f'rx="2" fill="{colour_of(entry.step)}"/>'
        )
        if width >= 7.5 * len(entry.step) + 6:
            parts.append(
                f'<text x="{num(x + width / 2)}" y="{num(y + 14.5)}">{attr(entry.step)}</text>'
            )
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)
