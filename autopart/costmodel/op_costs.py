"""Each node's cost on one target, from a profile.

A node costs its one-op time less the entry and less the layout conversions its one-node
subgraph made at its edges; a consumer that a fusing codegen folds into its
producer costs what the pair takes beyond the producer, timed in turn with the pair where
the profile has that (:mod:`autopart.costmodel.fusion`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

import numpy as np

from autopart.costmodel.fusion import FusionPair, fusion_pairs
from autopart.costmodel.measurements import Measurement, MeasurementTable, RowKind
from autopart.ir.graph import Graph, Node
from autopart.ir.signature import op_signature


@dataclass
class OpCosts:
    """Seconds per node name on one target; ``missing`` nodes have no timing at all.

    ``fused`` counts the nodes charged at a fused cost (measured pair or class ratio);
    ``unfused[name]`` is what such a node costs beyond that when its producer is not in
    its partition. ``layout[name]`` is what its one-node subgraph spent converting layouts
    at its edges, taken off ``seconds``: a partition pays it back where the node sits at
    one of its edges (:meth:`autopart.costmodel.costs.Costs.partition_cost`).
    """

    seconds: dict[str, float] = field(default_factory=dict)
    missing: list[Node] = field(default_factory=list)
    fused: int = 0
    unfused: dict[str, float] = field(default_factory=dict)
    layout: dict[str, float] = field(default_factory=dict)


def node_time(
    measured: Measurement, base: float, layout: float = 0.0, kernels: float = 0.0
) -> float:
    """The cost of one op from its one-node measurement.

    Wall-clock timings lose the entry ``base`` and the ``layout`` conversions the one-node
    subgraph made at its own edges (a partition makes those once, at its edges), but never
    drop below the op's own ``kernels`` time measured with those conversions.
    """
    if measured.timer != "wall":
        return measured.median_s
    return max(measured.median_s - base - layout, kernels, 0.0)


def op_costs(profile: MeasurementTable, graph: Graph, target: str, base: float) -> OpCosts:
    """The cost of every node of ``graph`` on ``target``.

    ``base`` is the launch probe's own timed entry on ``target``, taken off wall-clock
    timings, but never more than the cheapest op's own wall time (a noisy probe above it
    would make every small op free). So is each op's ``layout`` row, where the profile has
    one: the layout conversions its one-node subgraph made at its edges, taken off down to
    the op's own kernel time in the same runs (the row's ``kernel_s``), less what the
    codegen's profiler itself adds to each kernel it times (the launch probe's ``profiled``
    row: onnxruntime's profiler puts 3-7 us on a one-element Relu, so without it every tiny
    op would cost at least that much). An op timed by
    device events costs at least what the host takes to enqueue it (its ``enqueue`` row,
    where the profile has one): a kernel quicker than that waits for the host. Nodes marked
    unsupported are left out; nodes with no row at all are ``missing``.
    """
    result = OpCosts()
    raw: dict[str, Measurement] = {}
    layouts: dict[str, tuple[float, float]] = {}
    profiled = profile.measurement(RowKind.LAUNCH, target, "profiled")
    profiler_overhead = profiled.median_s if profiled is not None else 0.0
    by_signature: dict[str, tuple[Measurement | None, tuple[float, float], bool]] = {}
    for node in graph.nodes:
        signature = op_signature(node, graph)
        if signature not in by_signature:
            by_signature[signature] = _signature_rows(profile, target, signature, profiler_overhead)
        measured, layout, unsupported = by_signature[signature]
        if measured is None:
            if not unsupported:
                result.missing.append(node)
            continue
        raw[node.name] = measured
        layouts[node.name] = layout
    # entering a subgraph cannot cost more than the cheapest one-op subgraph took whole
    base = min([base, *(m.median_s for m in raw.values() if m.timer == "wall")])
    for name, measured in raw.items():
        result.seconds[name] = node_time(measured, base, *layouts[name])
        taken_off = node_time(measured, base) - result.seconds[name]
        if taken_off > 0.0:
            result.layout[name] = taken_off
    marginal: dict[str, float] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    pairs = {name: pair for name, pair in fusion_pairs(graph).items() if name in result.seconds}
    paired: dict[str, tuple[float, float] | None] = {}  # by pair key: (pair, producer) s
    for name, pair in pairs.items():
        key = pair.key(graph)
        if key not in paired:
            paired[key] = _pair_times(profile, graph, target, pair, key, raw)
        times = paired[key]
        if times is None:
            continue
        alone = result.seconds[name]
        marginal[name] = min(max(times[0] - times[1], 0.0), alone)
        if alone > 0.0:
            ratios.setdefault(pair.kind, []).append(marginal[name] / alone)
    medians = {kind: statistics.median(found) for kind, found in ratios.items()}
    for name, pair in pairs.items():
        alone = result.seconds[name]
        if name in marginal:
            result.seconds[name] = marginal[name]
        elif pair.kind in medians:
            result.seconds[name] *= medians[pair.kind]
        else:
            continue
        result.fused += 1
        result.unfused[name] = alone - result.seconds[name]
    return result


def _pair_times(
    profile: MeasurementTable,
    graph: Graph,
    target: str,
    pair: FusionPair,
    key: str,
    raw: dict[str, Measurement],
) -> tuple[float, float] | None:
    """The pair's time and its producer's (timed in turn with it where the row has that).

    ``None`` when the pair or its producer has no timing. Equal keys give equal times.
    """
    row = profile.row(RowKind.FUSED, target, key)
    producer = raw.get(pair.producer.name)
    if row is None or producer is None:
        return None
    if np.isfinite(row["producer_s"]):  # the producer, timed in turn with the pair
        paired = replace(producer, median_s=float(row["producer_s"]))
        signature = op_signature(pair.producer, graph)
        producer = _at_least_enqueue(paired, profile, target, signature)
    return float(row["median_s"]), producer.median_s


def _signature_rows(
    profile: MeasurementTable, target: str, signature: str, profiler_overhead: float
) -> tuple[Measurement | None, tuple[float, float], bool]:
    """What :func:`op_costs` reads of one signature, once per signature.

    Its op time (at least its enqueue), its (layout, kernel) seconds and, when it has no
    op row, whether it is marked unsupported.
    """
    measured = profile.measurement(RowKind.OP, target, signature)
    if measured is None:
        return None, (0.0, 0.0), profile.has(RowKind.UNSUPPORTED, target, signature)
    measured = _at_least_enqueue(measured, profile, target, signature)
    layout = profile.row(RowKind.LAYOUT, target, signature)
    if layout is None:
        return measured, (0.0, 0.0), False
    kernels = float(np.nan_to_num(layout["kernel_s"])) - profiler_overhead
    return measured, (float(layout["median_s"]), max(kernels, 0.0)), False


def _at_least_enqueue(
    measured: Measurement, profile: MeasurementTable, target: str, signature: str
) -> Measurement:
    """``measured``, raised to the host's enqueue time of ``signature`` for device clocks.

    A kernel quicker than the host hands it out waits for the host. A fused pair's marginal
    then comes out as its time less max(producer, enqueue): the pair is one enqueue, like
    its producer alone.
    """
    return _raised_to(measured, profile.measurement(RowKind.ENQUEUE, target, signature))


def _raised_to(measured: Measurement, enqueue: Measurement | None) -> Measurement:
    """``measured`` raised to ``enqueue``'s median on device clocks (see above)."""
    if measured.timer == "wall" or enqueue is None:
        return measured
    return replace(measured, median_s=max(measured.median_s, enqueue.median_s))
