"""From a profile to the :class:`~autopart.costmodel.costs.Costs` a search reads.

A node's cost on a target is its signature's median time there. Codegens without a device
clock time ops by wall clock around a whole ``run``, which includes entering the subgraph;
the launch probe's own ``run_timed`` time is taken off those, since the partition's launch is
charged once, separately: the launch probe's wall time around ``run`` plus synchronisation,
or what a cut inside the model's windows cost on that target where that is more
(:mod:`autopart.costmodel.cuts`). A partition of a split plan also pays what entering the
target after other work costs beyond that (its cold entry, from the same module); a plan's
only partition is scaled by what its library's own defaults change
(:mod:`autopart.costmodel.alone`).
Consumers that a fusing codegen folds into their producer cost what the pair takes beyond
the producer (:mod:`autopart.costmodel.op_costs`). Op costs are then scaled by the target's
subgraph calibration factor where its windows say the op sum is grossly off, or always or
never on request (:mod:`autopart.costmodel.calibration`).
"""

from __future__ import annotations

from collections.abc import Sequence

from autopart.costmodel.alone import alone_saving
from autopart.costmodel.calibration import DEFAULT_MODE, calibrate
from autopart.costmodel.costs import Costs
from autopart.costmodel.cuts import cold_cost, cut_cost
from autopart.costmodel.fusion import fusion_pairs
from autopart.costmodel.measurements import MeasurementTable, RowKind
from autopart.costmodel.op_costs import op_costs
from autopart.costmodel.transfer import TransferFit, fit_transfer, split_pair
from autopart.errors import ProfileError
from autopart.ir.graph import Graph
from autopart.ir.target import HOST_DEVICE, VirtualDevice


def profile_targets(profile: MeasurementTable) -> list[VirtualDevice]:
    """Targets the profile has launch measurements for, in a stable order."""
    names = sorted(set(profile.rows(RowKind.LAUNCH)["target"]))
    return [VirtualDevice.parse(name) for name in names]


def transfer_fits(profile: MeasurementTable) -> dict[tuple[str, str], TransferFit]:
    """The fitted transfer model of every device pair the profile measured at two sizes or more.

    A pair measured at fewer sizes (its measurements were cut short by a budget or an
    interrupt) has no fit: a plan crossing it is unpriced, as if it were not measured.
    """
    fits = {}
    rows = profile.rows(RowKind.TRANSFER)
    for pair, group in rows.groupby("target"):
        if group["nbytes"].nunique() < 2:
            continue
        fits[split_pair(str(pair))] = fit_transfer(
            group["nbytes"].to_numpy(), group["median_s"].to_numpy()
        )
    return fits


def costs_from_profile(
    graph: Graph,
    profile: MeasurementTable,
    targets: Sequence[VirtualDevice | str] | None = None,
    calibration: str = DEFAULT_MODE,
) -> Costs:
    """Costs of ``graph`` on ``targets`` (default: every target in ``profile``).

    A node is runnable on a target when the profile holds its signature's timing there.
    ``calibration`` says when op costs are scaled by each target's subgraph calibration
    factor (:meth:`~autopart.costmodel.calibration.WindowFactor.factor_for`): ``"gross"`` (the
    default) only where the windows agree that the op sum is off by more than half, since
    elsewhere the plain op sums predicted this project's machine better
    (``experiments/exp_calibration_variants.py``); ``"on"`` wherever they agree; ``"off"``
    never.
    Raises :class:`ProfileError` naming what is missing when the profile does not cover
    ``graph`` on a target (neither a timing nor an ``unsupported`` mark for a signature).
    """
    chosen = [
        VirtualDevice.parse(t) if isinstance(t, str) else t
        for t in (targets if targets is not None else profile_targets(profile))
    ]
    node_cost: dict[str, dict[VirtualDevice, float]] = {node.name: {} for node in graph.nodes}
    launch: dict[VirtualDevice, float] = {}
    cold: dict[VirtualDevice, float] = {}
    alone: dict[VirtualDevice, float] = {}
    unfused: dict[str, dict[VirtualDevice, float]] = {}
    layout: dict[str, dict[VirtualDevice, float]] = {}
    for target in chosen:
        name = str(target)
        wall = profile.measurement(RowKind.LAUNCH, name, "wall")
        timed = profile.measurement(RowKind.LAUNCH, name, "timed")
        if wall is None or timed is None:
            raise ProfileError(
                f"the profile has no launch measurement for {name}; run `autopart profile`"
            )
        launch[target] = max(wall.median_s, cut_cost(profile, graph, name))
        cold[target] = cold_cost(profile, graph, name)
        alone[target] = alone_saving(profile, graph, name)
        costs = op_costs(profile, graph, name, timed.median_s)
        factor = calibrate(profile, graph, name, costs).factor_for(calibration)
        missing = costs.missing
        for node_name, seconds in costs.seconds.items():
            node_cost[node_name][target] = seconds * factor
        for node_name, extra in costs.unfused.items():
            unfused.setdefault(node_name, {})[target] = extra * factor
        for node_name, extra in costs.layout.items():
            layout.setdefault(node_name, {})[target] = extra
        if missing:
            ops = sorted({node.op_type for node in missing})
            raise ProfileError(
                f"the profile lacks {len(missing)} op timing(s) of {graph.name} on {name} "
                f"({', '.join(ops)}); run `autopart profile {graph.name}`"
            )
    transfers = {pair: fit.model for pair, fit in transfer_fits(profile).items()}
    devices = {str(t.device) for t in chosen} - {HOST_DEVICE}
    lacking = [
        d
        for d in sorted(devices)
        if (HOST_DEVICE, d) not in transfers or (d, HOST_DEVICE) not in transfers
    ]
    if lacking:
        raise ProfileError(
            f"the profile has no transfer measurements for {', '.join(lacking)}; "
            "run `autopart profile`"
        )
    producers = {name: pair.producer.name for name, pair in fusion_pairs(graph).items()}
    return Costs(
        graph, chosen, node_cost, launch, transfers, producers, unfused, layout, cold, alone
    )
