"""Lone partitions: what a library's own defaults change when a plan has one partition.

A plan whose only partition runs on onnxruntime on a whole device gets onnxruntime's
default session options (:attr:`autopart.targets.codegen.Placement.alone`): its pool
threads spin between ops instead of sleeping. Partitions that share a plan keep spinning
off, since spinning threads would slow the lanes beside them; and one-op timings, like
every other profile row, are taken that way. On resnet50 the op sums then predicted
42.3 ms for a plan measured at 30.8 ms.

So on targets whose codegen says a lone partition differs
(:meth:`~autopart.targets.codegen.Codegen.alone_differs`), the profiler times each
calibration window both ways, shared first and alone right after (``alone`` rows, with
the shared time as ``shared_s``). A target's alone factor is the median over the model's
windows (else every model's windows on that target) of alone / shared, clipped to the
calibration's factor range; 1 where nothing was measured. A plan's only partition costs
its partition cost times that factor (:meth:`autopart.costmodel.costs.Costs.partition_cost`).
"""

from __future__ import annotations

import statistics

from autopart.costmodel.calibration import FACTOR_RANGE, model_tag
from autopart.costmodel.measurements import REFERENCE_COLUMNS, MeasurementTable, RowKind
from autopart.ir.graph import Graph


def alone_factor(profile: MeasurementTable, graph: Graph, target: str) -> float:
    """How much a lone partition on ``target`` costs per second of a shared one (1 if unknown)."""
    rows = profile.rows(RowKind.ALONE, target)
    if not len(rows):
        return 1.0
    own = rows[rows["key"].str.startswith(model_tag(graph) + "[")]
    chosen = own if len(own) else rows
    ratios = chosen["median_s"].astype(float) / chosen[REFERENCE_COLUMNS[RowKind.ALONE]].astype(
        float
    )
    ratios = ratios[ratios.notna() & (ratios > 0)]
    if not len(ratios):
        return 1.0
    low, high = FACTOR_RANGE
    return min(max(statistics.median(float(r) for r in ratios), low), high)
