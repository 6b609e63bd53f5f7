"""Cut costs: what entering and leaving a partition costs inside a real model.

The launch probe enters a trivial one-element partition back to back, which is what a
codegen charges for a call and nothing more. A cut inside a model costs more: onnxruntime
converts the blocked (NCHWc) layout back and forth at the new edges, the values crossing it
are materialised for the next partition, and the next partition starts with colder caches
and sleeping pool threads. Measured on resnet50 with a dozen single Relus moved off a
whole-device onnxruntime partition, every partition switch added 0.4 to 0.6 ms that the
launch probe (about 0.03 ms) and the op costs did not predict; on squeezenet 0.1 to 0.2 ms.

So the profiler splits each calibration window of the model in two at its middle (never
between a producer and the consumer it fuses with) and times, back to back on the target,
the window whole and the two halves in a row, each followed by a synchronisation as in the
plan executor. A ``cut`` row stores the wall times of the halves in a row; its
``whole_s`` is the median wall time of the window whole, timed alternately with them.
A target's cut cost is the median over the model's cut rows of the difference (else over
every model's rows on that target), and entering a partition
is charged the larger of it and the launch probe's wall time
(:func:`autopart.costmodel.from_profile.costs_from_profile`).

A target with no cut row at all borrows the median of the other targets of its codegen
(its device and units alike: one library), else of every target, own model's rows first at
each step; 0 only where the profile has no row of the kind. The profiler measures job after
job, target after target, so a budget that ends the cut jobs midway leaves some targets
with rows and others without; pricing those at 0 made a split onto them look free, and a
search preferred exactly the targets whose cuts it knew least about.

Back to back is not how a partition of a split plan is entered: its lane sat idle while the
other partitions ran. So the same job, once the window is timed whole and cut, times it
whole again a few times, each run after keeping the host busy for a few milliseconds (not
interleaved with the rest: a run after such a gap slows the next few runs too); a ``cold``
row stores those wall times, with the back-to-back whole as ``warm_s``. Measured with
inception_v1's and squeezenet's windows, entering after 5 ms of host work cost 0.2-0.5 ms
more on every target, onnxruntime, numpy and OpenCL alike; a lone LRN on an OpenCL unit took
1.3 ms instead of 0.5 ms. A target's cold-entry cost is the median difference, read like the
cut cost, and every partition of a plan on more than one target pays it
(:meth:`autopart.costmodel.costs.Costs.partition_cost`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from autopart.costmodel.calibration import own_rows_first
from autopart.costmodel.fusion import fusion_pairs
from autopart.costmodel.measurements import REFERENCE_COLUMNS, MeasurementTable, RowKind
from autopart.ir.graph import Graph, Node
from autopart.ir.target import VirtualDevice


def cut_index(graph: Graph, nodes: Sequence[Node]) -> int | None:
    """Where to split ``nodes`` in two, or ``None`` where nowhere will do.

    The position is the one nearest the middle whose node does not fuse with a producer
    among ``nodes``; ``None`` when ``nodes`` has fewer than two nodes or no such place.
    """
    fused = fusion_pairs(graph)
    names = {node.name for node in nodes}
    middle = len(nodes) // 2
    candidates = sorted(range(1, len(nodes)), key=lambda i: (abs(i - middle), i))
    for index in candidates:
        pair = fused.get(nodes[index].name)
        if pair is None or pair.producer.name not in names:
            return index
    return None


def cut_cost(profile: MeasurementTable, graph: Graph, target: str) -> float:
    """The median cost of one cut on ``target``, in seconds (0 where no cut was measured).

    The cut rows of ``graph`` are used when the profile has them, else every model's rows
    on ``target``; a target with none borrows its codegen's, else every target's (see the
    module). Noise can make a window's difference negative; the cost is never below 0.
    """
    return _median_excess(profile, RowKind.CUT, graph, target)


def cold_cost(profile: MeasurementTable, graph: Graph, target: str) -> float:
    """What entering a partition on ``target`` after other work costs beyond back to back.

    Read from the ``cold`` rows like :func:`cut_cost` from the ``cut`` rows: the median
    over ``graph``'s windows (else every model's) of the cold wall time less the window's
    back-to-back wall time, never below 0; borrowed as :func:`cut_cost` borrows, and 0
    where no cold entry was measured.
    """
    return _median_excess(profile, RowKind.COLD, graph, target)


def _median_excess(profile: MeasurementTable, kind: RowKind, graph: Graph, target: str) -> float:
    """The median of ``median_s`` less the kind's reference column, own model's rows first.

    The rows are ``target``'s, else its codegen's other targets', else every target's
    (see the module); 0 where there are none.
    """
    rows = profile.rows(kind, target)
    if not len(rows):
        every = profile.rows(kind)
        codegen = VirtualDevice.parse(target).codegen
        named = {str(t) for t in every["target"]}
        same = [t for t in named if VirtualDevice.parse(t).codegen == codegen]
        rows = every[every["target"].astype(str).isin(same)] if same else every
    if not len(rows):
        return 0.0
    chosen, _ = own_rows_first(rows, graph)
    added = chosen["median_s"].astype(float) - chosen[REFERENCE_COLUMNS[kind]].astype(float)
    return max(statistics.median(float(value) for value in added), 0.0)
