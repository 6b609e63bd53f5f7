"""Partitions measured whole: what a plan's partitions cost as their codegens compile them.

Op sums miss what a library does to a whole subgraph: OpenVINO fuses and keeps blocked
layouts between ops, onnxruntime pays its per-session overhead once, not per op. So, as
Collage measured its candidates, the partitions of the candidate plans are compiled and
timed whole (``partition`` profile rows), and where a partition was measured its
measurement prices it (:attr:`autopart.costmodel.costs.Costs.measured`); everything else
is still priced from op sums.

A row is keyed by the SHA-256 of the exported subgraph (its nodes and boundary as the
codegen receives them, and the SHA-256 of each weight) and whether it was compiled as its
plan's only partition (:func:`partition_key`), so a rerun, or another model holding the
same subgraph, costs nothing more. The weights are hashed in place, once per graph: a
key never copies them (exporting resnet50's 98 MiB of weights into the hashed bytes took
0.3-0.5 GiB at the peak of its tune, once per whole-model target).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from autopart.costmodel.costs import PartitionKey
from autopart.costmodel.measurements import MeasurementTable, RowKind
from autopart.ir.graph import Graph, Node
from autopart.ir.hashing import graph_hash
from autopart.ir.onnx_export import to_onnx
from autopart.ir.weights import weight_digest
from autopart.plan.partition import boundary

KEYS_KEPT = 256
_KEYS: OrderedDict[tuple[object, ...], str] = OrderedDict()
_LOCK = threading.Lock()


def partition_key(
    graph: Graph, nodes: Sequence[Node], alone: bool, precisions: Sequence[str] = ()
) -> str:
    """The profile key of ``nodes`` of ``graph`` as one subgraph, compiled ``alone`` or not.

    The digest of the exported subgraph (nodes, boundary values, and each weight's own
    digest in the order the export declares them) with
    ``:alone`` or ``:shared`` after it; ``:shipped`` for every node of a model imported
    from a file, alone, which codegens compile from the model as shipped
    (:mod:`autopart.targets.shipped`). Nodes that mix precisions give each node's
    precision in ``precisions`` (:func:`~autopart.costmodel.costs.node_precisions`), and
    the digest covers them; a partition of one precision keys without them.

    Remembered by the graph's hash and the node names (the last :data:`KEYS_KEPT`): a
    tune keys each whole-model partition for every target and stage, and exporting and
    hashing a 50,000-node one took 4 s each time.
    """
    memo = (
        graph_hash(graph), tuple(node.name for node in nodes), alone, tuple(precisions),
        bool(graph.meta.get("source")),
    )  # fmt: skip
    with _LOCK:
        known = _KEYS.get(memo)
        if known is not None:
            _KEYS.move_to_end(memo)
            return known
    key = _partition_key(graph, nodes, alone, precisions)
    with _LOCK:
        _KEYS[memo] = key
        while len(_KEYS) > KEYS_KEPT:
            _KEYS.popitem(last=False)
    return key


def _partition_key(
    graph: Graph, nodes: Sequence[Node], alone: bool, precisions: Sequence[str]
) -> str:
    """:func:`partition_key`, computed."""
    inputs, outputs = boundary(graph, nodes)
    # every weight is declared as a typed input rather than embedded, and hashed apart
    model = to_onnx(graph, list(nodes), inputs, outputs, embed_constants=0)
    model.graph.name = ""  # the model's name is not part of what a codegen compiles
    del model.metadata_props[:]
    model.doc_string = model.graph.doc_string = ""
    hashed = hashlib.sha256(model.SerializeToString())
    for declared in model.graph.input[len(inputs) :]:
        hashed.update(weight_digest(graph, declared.name))
    if precisions:
        hashed.update(("precisions:" + ",".join(precisions)).encode())
    digest = hashed.hexdigest()[:32]
    if not alone:
        return f"{digest}:shared"
    whole = len(nodes) == len(graph.nodes) and bool(graph.meta.get("source")) and not precisions
    return f"{digest}:{'shipped' if whole else 'alone'}"


def measured_partitions(
    profile: MeasurementTable, graph: Graph, partitions: Iterable[PartitionKey]
) -> dict[PartitionKey, float]:
    """The measured median of each of ``partitions`` that ``profile`` holds complete.

    The result is keyed alike, as :attr:`Costs.measured` is. A row cut short (fewer
    passes than its profiler asks for) still counts: a partition measured once is nearer
    the truth than its op sum.
    """
    found: dict[PartitionKey, float] = {}
    for spec in partitions:
        nodes = [graph.node(name) for name in spec.names]
        key = partition_key(graph, nodes, spec.alone, spec.precisions)
        row = profile.measurement(RowKind.PARTITION, str(spec.target), key)
        if row is not None and row.passes > 0:
            found[spec] = row.median_s
    return found
