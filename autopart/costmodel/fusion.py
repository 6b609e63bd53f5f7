"""Fusion pairs: what an op adds when a fusing codegen runs it together with its producer.

Codegens that fuse inside a subgraph (onnxruntime folds a Relu or a residual Add into the
Conv before it; the OpenCL codegen puts them in the matrix product's epilogue or in one
elementwise kernel) make a one-op timing of the consumer wrong for a partition: alone it
reads and writes a whole tensor, fused it is nearly free. For every such *pair* the profiler
also times producer and consumer as one two-node subgraph (row kind ``fused``); the
consumer's cost is then what the pair takes beyond the producer alone.

A pair is a node reading, as its only reader, the output of another node, producing as many
elements as it reads from it (elementwise, batch norm, residual add…). The node is charged
its fused cost on that target whatever the placement of its producer: plans nearly always
keep such pairs together, since splitting them costs a launch and a copy. Only a few pairs
of each class (producer op, consumer op) are timed; the others take their class's median
ratio of fused to alone cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autopart.ir.analysis import node_flops
from autopart.ir.graph import Graph, Node
from autopart.ir.memo import memoised
from autopart.ir.signature import op_signature
from autopart.settings import tuned


@dataclass(frozen=True)
class FusionSettings:
    """Which producer/consumer pairs the profiler times together (costmodel.fusion)."""

    light_flops: int = tuned(
        8, "consumers of at most this many FLOPs per output element are fusion candidates"
    )
    per_class: int = tuned(
        4,
        "pairs timed per (producer op, consumer op) class; the rest use the class ratio "
        "(experiments/exp_fusion_pairs.py)",
    )


FUSION = FusionSettings()


@dataclass(frozen=True)
class FusionPair:
    """``consumer`` reads ``producer``'s output at input position ``index``, its only reader."""

    producer: Node
    consumer: Node
    index: int

    @property
    def kind(self) -> tuple[str, str]:
        """The pair's class: producer and consumer op types."""
        return self.producer.op_type, self.consumer.op_type

    def key(self, graph: Graph) -> str:
        """The profile key of the pair: both signatures and the input position."""
        producer = op_signature(self.producer, graph)
        return f"{producer} =>{self.index} {op_signature(self.consumer, graph)}"


def fusion_pairs(graph: Graph) -> dict[str, FusionPair]:
    """The pair each node forms with its producer, by consumer node name (see module doc).

    The consumer must be light (at most ``FUSION.light_flops`` operations per output element,
    so a Relu or an Add but not a 1x1 Conv) and produce as many elements as it reads from the
    producer, whose only output it is the only reader of. Computed once per graph
    (:mod:`autopart.ir.memo`); the caller gets its own dict.
    """
    return dict(memoised(graph, "fusion_pairs", lambda: _find_pairs(graph)))


def _find_pairs(graph: Graph) -> dict[str, FusionPair]:
    pairs: dict[str, FusionPair] = {}
    for node in graph.nodes:
        outputs = [graph.value(name) for name in node.outputs if name]
        if len(outputs) != 1 or outputs[0].shape is None:
            continue
        size = math.prod(int(dim) for dim in outputs[0].shape)
        if node_flops(graph, node) > FUSION.light_flops * size:
            continue
        for index, name in enumerate(node.inputs):
            value = graph.values.get(name) if name else None
            if value is None or value.producer is None or value.shape is None:
                continue
            producer = value.producer
            sole_reader = all(c is node for c in value.consumers)
            same_size = math.prod(int(dim) for dim in value.shape) == size
            single_output = len([n for n in producer.outputs if n]) == 1
            if sole_reader and same_size and single_output and name not in graph.outputs:
                pairs[node.name] = FusionPair(producer, node, index)
                break
    return pairs


def pairs_to_measure(graph: Graph, per_class: int = FUSION.per_class) -> list[FusionPair]:
    """Distinct pairs worth timing: up to ``per_class`` per (producer op, consumer op).

    The largest consumers of each class come first; pairs left out are costed from the
    fused-to-alone ratio of the measured pairs of their class
    (:func:`autopart.costmodel.op_costs.op_costs`).
    """
    distinct: dict[str, FusionPair] = {}
    for pair in fusion_pairs(graph).values():
        distinct.setdefault(pair.key(graph), pair)
    by_class: dict[tuple[str, str], list[FusionPair]] = {}
    for pair in distinct.values():
        by_class.setdefault(pair.kind, []).append(pair)
    chosen = []
    for members in by_class.values():
        members.sort(key=lambda pair: -graph.value(pair.consumer.outputs[0]).nbytes)
        chosen.extend(members[:per_class])
    order = {node.name: i for i, node in enumerate(graph.nodes)}
    return sorted(chosen, key=lambda pair: order[pair.consumer.name])
