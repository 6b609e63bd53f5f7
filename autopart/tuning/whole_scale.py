"""Op costs scaled to the screen's whole timings where the model's own windows are missing.

The search prices a node by its one-op timing, scaled by the target's calibration factor
from windows of the model timed whole (:mod:`autopart.costmodel.calibration`). Under a
budget a large model's full profile is cut before those windows are measured, and its op
sums can be far off what the target takes for the whole model: on a 50,000-node chain,
numpy's op sum was 42.7 ms against 166 ms timed whole (its executor's cost per node),
onnxruntime's 61.8 ms against 28 ms (its fusion). An exact search over such sums optimises
the wrong model: it picked numpy for every node.

The screen has timed each whole device's single-target plan (:mod:`autopart.tuning.screen`).
Where a target's plan runs every node on it in one partition and the profile holds no
calibration window of this model on that target (nor on its whole device), its op costs
are scaled so that, with its launch, they sum to that timing; a unit is scaled as its whole
device at the same codegen and precision is. A plan that runs some nodes on a fallback in
the same partition (int8's, with the nodes int8 cannot run) scales its target by what the
timing leaves once the fallback's nodes, priced as their own target's timing scales them,
are taken off. As the windows' default rule does, the factor
is applied only where the op sum is off by more than
:attr:`~autopart.costmodel.calibration.CalibrationSettings.gross_error`, and clipped to
:attr:`~autopart.costmodel.calibration.CalibrationSettings.factor_range`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from autopart.costmodel.calibration import CALIBRATION, calibration_rows
from autopart.costmodel.costs import Costs
from autopart.costmodel.measurements import MeasurementTable
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.plan.schema import Plan
from autopart.tuning.single_plans import single_name
from autopart.tuning.verify import Measured


def whole_factor(costs: Costs, target: VirtualDevice, plan: Plan, whole_s: float) -> float | None:
    """The factor that brings ``target``'s op sum for ``plan`` to ``whole_s`` (None: none).

    None unless ``plan`` runs every node of the model on ``target`` in one partition, its op
    sum is off by more than the gross error, and the timing exceeds the launch.
    """
    if len(plan.partitions) != 1 or any(str(t) != str(target) for t in plan.assignment.values()):
        return None
    return op_sum_factor(costs, target, whole_s)


def fallback_factor(
    costs: Costs, target: VirtualDevice, plan: Plan, whole_s: float,
    known: Mapping[VirtualDevice, float],
) -> float | None:  # fmt: skip
    """The factor for ``target`` from a plan that runs some nodes on a fallback beside it.

    ``plan`` is one partition whose nodes are on ``target`` or on targets of ``known``
    factors (1.0: timed whole and within the gross error of their op sums), as an int8
    plan is with the nodes int8 cannot run on its fallback. Those nodes' scaled costs are
    taken off ``whole_s``; what is left scales ``target``'s nodes of the plan, as
    :func:`op_sum_factor` scales a whole model's. None where ``plan`` is not of that form,
    or nothing is left beyond the launch.
    """
    if len(plan.partitions) != 1:
        return None
    mine: list[str] = []
    rest_s = 0.0
    for name, where in plan.assignment.items():
        parsed = VirtualDevice.parse(str(where))
        if parsed == target:
            mine.append(name)
        elif parsed in known and parsed in costs.node_cost[name]:
            rest_s += costs.node_cost[name][parsed] * known[parsed]
        else:
            return None
    if not mine or len(mine) == len(plan.assignment):
        return None
    return op_sum_factor(costs, target, whole_s - rest_s, mine)


def op_sum_factor(
    costs: Costs, target: VirtualDevice, whole_s: float, nodes: list[str] | None = None
) -> float | None:
    """The factor that brings ``nodes``' op sum (default every node's) on ``target`` to ``whole_s``.

    ``whole_s`` is those nodes timed on ``target`` alone, in one partition. None where
    the op sum, with one launch, is within the gross error of it, or the timing does not
    exceed the launch; else clipped to the factor range.
    """
    launch = costs.launch_cost(target)
    names = costs.node_cost if nodes is None else nodes
    summed = sum(costs.node_cost[name][target] for name in names)
    if summed <= 0.0 or whole_s <= launch:
        return None
    if abs((launch + summed) / whole_s - 1.0) <= CALIBRATION.gross_error:
        return None
    low, high = CALIBRATION.factor_range
    return min(max((whole_s - launch) / summed, low), high)


def scale_to_whole(
    costs: Costs,
    profile: MeasurementTable,
    plans: Mapping[str, Plan],
    whole: Mapping[str, Measured],
) -> dict[VirtualDevice, float]:
    """Scale ``costs`` in place where the screen's timings say so (see the module).

    ``plans`` and ``whole`` are the screen's single-target plans and what it timed whole,
    by name. Returns the factor applied to each target scaled.
    """
    graph = costs.graph
    by_device: dict[VirtualDevice, float] = {}
    known: dict[VirtualDevice, float] = {}  # timed whole on every node: 1.0 where near
    with_fallback: list[VirtualDevice] = []
    for target in costs.targets:
        device = dataclasses.replace(target, unit=None)
        name = single_name(device)
        if target.unit is None and name in plans and name in whole:
            plan = plans[name]
            if any(VirtualDevice.parse(str(t)) != device for t in plan.assignment.values()):
                with_fallback.append(device)
                continue
            factor = whole_factor(costs, device, plan, whole[name].median_s)
            known[device] = 1.0 if factor is None else factor
            if factor is not None:
                by_device[device] = factor
    for device in with_fallback:
        name = single_name(device)
        factor = fallback_factor(costs, device, plans[name], whole[name].median_s, known)
        if factor is not None:
            by_device[device] = factor
    applied: dict[VirtualDevice, float] = {}
    for target in costs.targets:
        device = dataclasses.replace(target, unit=None)
        factor = by_device.get(device)
        if factor is None or any(_own_windows(profile, graph, str(t)) for t in {target, device}):
            continue
        for entry in costs.node_cost.values():
            if target in entry:
                entry[target] *= factor
        for entry in costs.unfused.values():
            if target in entry:
                entry[target] *= factor
        applied[target] = factor
    return applied


def _own_windows(profile: MeasurementTable, graph: Graph, target: str) -> bool:
    """Whether the profile holds calibration windows of this very model on ``target``."""
    return calibration_rows(profile, graph, target)[1]


def note(applied: Mapping[VirtualDevice, float]) -> list[str]:
    """One note naming the targets scaled and by how much (none if none was)."""
    if not applied:
        return []
    named = ", ".join(f"{target} x{factor:.2g}" for target, factor in applied.items())
    return [
        "op costs scaled to the screen's whole timings (this model's calibration windows "
        f"were not measured in the budget): {named}"
    ]
