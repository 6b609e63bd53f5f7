"""Lone partitions: what a library's own defaults change when a plan has one partition.

A plan whose only partition runs on onnxruntime on a whole device gets onnxruntime's
default session options (:attr:`autopart.targets.codegen.Placement.alone`): its pool
threads spin between ops instead of sleeping. Partitions that share a plan keep spinning
off, since spinning threads would slow the lanes beside them; and one-op timings, like
every other profile row, are taken that way. squeezenet's op sum then predicted 4.1 ms
for a plan measured at 2.8 ms alone.

So on targets whose codegen says a lone partition differs
(:meth:`~autopart.targets.codegen.Codegen.alone_differs`), the profiler times each
calibration window both ways, shared first and alone right after (``alone`` rows, with
the shared time as ``shared_s``). What spinning saves is the threads' wake-up at every op,
a time per node rather than a share of the compute: windows of squeezenet saved 27 us per
node and the whole model 32 us per node (4.92 ms shared, 2.83 ms alone); inception_v1's
windows ran at 0.55-0.78 of their shared time, but the whole model at 0.92, its time being
in two LRNs that spinning does not speed up. So a target's alone saving is the median over
the model's windows (else every model's windows on that target) of
(shared - alone) / nodes, in seconds per node; 0 where nothing was measured, and negative
where alone was slower (a transformer encoder's sub-millisecond ops). A plan's only
partition costs its partition cost less its nodes times that saving, never less than
:data:`FLOOR` of it (:meth:`autopart.costmodel.costs.Costs.partition_cost`).
"""

from __future__ import annotations

import math
import statistics

from autopart.costmodel.calibration import own_rows_first, window_bounds
from autopart.costmodel.measurements import REFERENCE_COLUMNS, MeasurementTable, RowKind
from autopart.ir.graph import Graph

FLOOR = 0.2  # a lone partition never costs less than this share of the same partition shared


def alone_saving(profile: MeasurementTable, graph: Graph, target: str) -> float:
    """Seconds per node a lone partition on ``target`` saves over a shared one (0 if unknown)."""
    rows = profile.rows(RowKind.ALONE, target)
    if not len(rows):
        return 0.0
    chosen, _ = own_rows_first(rows, graph)
    savings = []
    for row in chosen.itertuples(index=False):
        shared = float(getattr(row, REFERENCE_COLUMNS[RowKind.ALONE]))
        start, end = window_bounds(str(row.key))
        if end > start and not math.isnan(shared):
            savings.append((shared - float(row.median_s)) / (end - start))
    return statistics.median(savings) if savings else 0.0
