"""The text explanation of a plan: the rows of numbers that ``autopart show`` draws.

:func:`explain` turns a plan (and its graph) into plain rows: each partition with its nodes,
each node with its cost on its target and the saving against its next-best target, each
copy with its bytes and time, and the predicted and measured totals. The command line draws
those rows as device -> unit -> codegen -> partition -> nodes (:mod:`autopart.cli.show`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.plan.schema import MeasuredRun, Plan, Prediction, ScheduleStep

WHOLE_DEVICE = "*"


ScheduleEntry = ScheduleStep  # one step of a predicted or measured schedule


@dataclass(frozen=True)
class NodeRow:
    """A node, its cost on its own target and its cheapest other target.

    ``cost_s`` is ``None`` when the prediction has no cost for the node on its target;
    ``next_best`` is ``None`` when no other target can run it (or no costs are known).
    """

    name: str
    op_type: str
    target: str
    cost_s: float | None
    next_best: str | None
    next_best_s: float | None

    @property
    def saving_s(self) -> float | None:
        """Next-best cost minus own cost (negative when the plan chose a slower target)."""
        if self.cost_s is None or self.next_best_s is None:
            return None
        return self.next_best_s - self.cost_s


@dataclass(frozen=True)
class PartitionRow:
    """A partition: its target split into parts, its nodes and its times.

    ``nodes_s`` is the sum of its nodes' costs (``None`` unless every one is known);
    ``predicted_s`` and ``measured_s`` are its durations in the two schedules.
    """

    id: str
    target: str
    device: str
    unit: str
    codegen: str
    nodes: list[NodeRow]
    nodes_s: float | None
    predicted_s: float | None
    measured_s: float | None


@dataclass(frozen=True)
class CopyRow:
    """A copy node: the value it moves, between which devices, its bytes and its times."""

    id: str
    value: str
    src: str
    dst: str
    nbytes: int
    predicted_s: float | None
    measured_s: float | None


@dataclass
class Explanation:
    """Everything the tree and the page show about one plan; absent facts are ``None``.

    ``missing`` says, one sentence each, what the plan does not record.
    """

    model: str
    source: str
    fallback: str
    node_count: int
    partitions: list[PartitionRow]
    copies: list[CopyRow]
    objective: str | None = None
    sequential_s: float | None = None
    makespan_s: float | None = None
    profile: str | None = None
    predicted_schedule: list[ScheduleEntry] = field(default_factory=list)
    measured_median_s: float | None = None
    measured_runs: int | None = None
    measured_schedule: list[ScheduleEntry] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    accuracy: str | None = None

    def partition(self, step: str) -> PartitionRow | None:
        """The partition row called ``step``, if any."""
        return next((row for row in self.partitions if row.id == step), None)


def explain(plan: Plan, graph: Graph) -> Explanation:
    """The rows of ``plan`` for ``graph``; tolerant of an absent or partial prediction."""
    predicted, measured = plan.predicted, plan.measured
    node_costs = {
        node: {target: s for target, s in entry.items() if math.isfinite(s)}
        for node, entry in (predicted.node_costs if predicted is not None else {}).items()
    }
    predicted_schedule = list(predicted.schedule) if predicted is not None else []
    measured_schedule = list(measured.schedule) if measured is not None else []
    predicted_time = {entry.step: entry.duration_s for entry in predicted_schedule}
    measured_time = {entry.step: entry.duration_s for entry in measured_schedule}

    partitions = []
    for spec in plan.partitions:
        target = VirtualDevice.parse(spec.target)
        rows = [_node_row(graph, name, spec.target, node_costs) for name in spec.nodes]
        costs = [row.cost_s for row in rows]
        partitions.append(
            PartitionRow(
                id=spec.id,
                target=spec.target,
                device=str(target.device),
                unit=WHOLE_DEVICE if target.unit is None else str(target.unit),
                codegen=str(target.codegen),
                nodes=rows,
                nodes_s=None if None in costs else math.fsum(c for c in costs if c is not None),
                predicted_s=predicted_time.get(spec.id),
                measured_s=measured_time.get(spec.id),
            )
        )
    copies = [
        CopyRow(
            c.id, c.value, c.src, c.dst, c.nbytes, predicted_time.get(c.id), measured_time.get(c.id)
        )
        for c in plan.copies
    ]

    return Explanation(
        model=plan.model.name,
        source=plan.model.source,
        fallback=plan.fallback,
        node_count=len(graph.nodes),
        partitions=partitions,
        copies=copies,
        objective=predicted.objective if predicted is not None else None,
        sequential_s=predicted.sequential_s if predicted is not None else None,
        makespan_s=predicted.makespan_s if predicted is not None else None,
        profile=predicted.profile if predicted is not None else None,
        predicted_schedule=predicted_schedule,
        measured_median_s=measured.median_s if measured is not None else None,
        measured_runs=measured.runs if measured is not None else None,
        measured_schedule=measured_schedule,
        missing=_missing(predicted, measured),
        accuracy=accuracy_line(measured, predicted),
    )


_PREDICTED_KEYS = ("objective", "sequential_s", "makespan_s", "schedule", "node_costs", "profile")
_MEASURED_KEYS = ("median_s", "runs", "schedule")


def _missing(predicted: Prediction | None, measured: MeasuredRun | None) -> list[str]:
    """One sentence for each result record, or part of one, that the plan lacks."""
    missing = []
    if predicted is None:
        missing.append(
            "no prediction: the plan was made by hand or by `autopart run --save-plan` "
            "(no node costs, no predicted schedule)"
        )
    else:
        absent = [key for key in _PREDICTED_KEYS if not getattr(predicted, key)]
        if absent:
            missing.append("the prediction lacks " + ", ".join(absent))
    if measured is None:
        missing.append("no measurement recorded in the plan")
    else:
        absent = [key for key in _MEASURED_KEYS if not getattr(measured, key)]
        if absent:
            missing.append("the measurement lacks " + ", ".join(absent))
    return missing


def _node_row(graph: Graph, name: str, target: str, costs: dict[str, dict[str, float]]) -> NodeRow:
    entry = costs.get(name, {})
    others = sorted((seconds, other) for other, seconds in entry.items() if other != target)
    next_best_s, next_best = others[0] if others else (None, None)
    return NodeRow(
        name, graph.node(name).op_type, target, entry.get(target), next_best, next_best_s
    )


# -- text ----------------------------------------------------------------------------------
def format_seconds(seconds: float | None) -> str:
    """``seconds`` as µs, ms or s with three significant digits; ``-`` when unknown."""
    if seconds is None:
        return "-"
    size = abs(seconds)
    if size < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if size < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def describe_saving(row: NodeRow) -> str:
    """How the node's target compares with its next-best target, in words."""
    if row.next_best is None:
        return "only target" if row.cost_s is not None else "no cost known"
    if row.cost_s is None:
        return f"no cost on its target; {row.next_best} {format_seconds(row.next_best_s)}"
    saving = row.saving_s or 0.0
    if saving >= 0:
        return f"saves {format_seconds(saving)} vs {row.next_best}"
    return f"{format_seconds(-saving)} slower than {row.next_best}"


def totals(explanation: Explanation) -> list[str]:
    """Lines for the predicted totals and the measured median, for those the plan records."""
    lines = []
    if explanation.sequential_s is not None or explanation.makespan_s is not None:
        objective = f" · objective {explanation.objective}" if explanation.objective else ""
        lines.append(
            f"predicted sequential {format_seconds(explanation.sequential_s)} · "
            f"makespan {format_seconds(explanation.makespan_s)}{objective}"
        )
    if explanation.measured_median_s is not None:
        runs = f" over {explanation.measured_runs} runs" if explanation.measured_runs else ""
        lines.append(f"measured median {format_seconds(explanation.measured_median_s)}{runs}")
    if explanation.accuracy is not None:
        lines.append(explanation.accuracy)
    return lines


def accuracy_line(measured: MeasuredRun | None, predicted: Prediction | None = None) -> str | None:
    """The measured plan's drop in its metric, its budget and what it was judged on.

    E.g. ``agreement: 0.4% of answers changed (budget 1.0%, predicted 0.3%) on 8
    validation samples of 16 given``, the prediction where ``predicted`` holds one in the
    same metric; None where no drop was recorded.
    """
    if measured is None or measured.max_error is None:
        return None
    metric = measured.metric or "max-rel"
    answers = metric == "agreement" or metric.startswith("topk")
    shown = (lambda x: f"{x:.1%}") if answers else (lambda x: f"{x:.3g}")
    drop = f"{shown(measured.max_error)}{' of answers changed' if answers else ''}"
    said = [] if measured.tolerance is None else [f"budget {shown(measured.tolerance)}"]
    if predicted is not None and predicted.error is not None and predicted.error_metric == metric:
        said.append(f"predicted {shown(predicted.error)}")
    within = f" ({', '.join(said)})" if said else ""
    on = "" if measured.samples is None else f" on {measured.samples}"
    return f"{metric}: {drop}{within}{on}"
