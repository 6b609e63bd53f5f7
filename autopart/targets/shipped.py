"""The model as shipped, for a plan whose one partition is the whole model.

A plan whose nodes all share one target, at one precision, is one partition: that library
running the whole model, which is what its peer does. So it is compiled from the model the
user gave (the file or zoo model the graph was imported from, ``graph.meta["source"]``),
unchanged, exactly as the peer compiles it, not from autopart's export of its import:
import folds constants, inlines ``If`` branches and folds BatchNormalization into the Conv
before it, and a library compiling the folded model rounds differently in bf16
(densenet121 in bf16: 4.5e-3 off the reference as shipped, 6.4e-3 as exported) and may run
at another speed. As for the peer, frozen inputs (``--freeze``) are fed their values with
every run, and a library that compiles for one shape (OpenVINO) is given the graph's static
input shapes (:class:`~autopart.targets.peer.PeerInputs`). The model itself is not edited:
onnxruntime 1.32 crashed creating a session for a held-out speech model once its frozen input was an
initializer and its other inputs had static shapes.

:func:`shipped_whole` answers None, and the codegen compiles its export, whenever the
correspondence is not exact: a graph made in memory, a source that no longer loads, or a
model whose inputs or outputs are not the graph's by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from autopart.errors import TargetError
from autopart.ir.graph import Graph, Node
from autopart.targets.codegen import HOST, Codegen, Placement
from autopart.targets.peer import PeerInputs, SourceModel, source_model
from autopart.zoo import resolve_model


@dataclass(frozen=True)
class ShippedModel:
    """The model as shipped: its bytes, the inputs it is fed and the outputs it makes.

    ``feeds`` are its inputs in its own order: the graph's inputs and the frozen ones, whose
    values ``inputs.frozen`` holds (with the static shapes, ``inputs.shapes``); ``produced``
    every output it computes, in its order (the graph's outputs among them).
    """

    model_bytes: bytes
    feeds: list[str]
    produced: list[str]
    inputs: PeerInputs


def shipped_whole(
    graph: Graph,
    nodes: Sequence[Node],
    placement: Placement,
    precisions: Sequence[str | None],
    weights_apart: bool = False,
) -> ShippedModel | None:
    """The model as shipped when ``nodes`` are all of ``graph``, alone, at one precision.

    ``precisions`` are the nodes' precisions. None when the partition is not its plan's
    only one, holds fewer nodes than the graph, mixes precisions, or the model as shipped
    does not correspond to the graph (see the module docstring). With ``weights_apart``,
    a large model's bytes refer to its weights as files
    (:func:`autopart.ir.weights.weights_apart`), for a library that reads them there.
    """
    source = graph.meta.get("source")
    if not placement.alone or len(nodes) != len(graph.nodes) or len(set(precisions)) > 1:
        return None
    if not isinstance(source, str) or not source:
        return None
    return _serialised(source, graph, weights_apart)


def shipped_bytes(
    graph: Graph,
    nodes: Sequence[Node],
    placement: Placement,
    precisions: Sequence[str | None],
    weights_apart: bool = False,
) -> bytes:
    """The bytes of :func:`shipped_whole` made again, for a compiled model's source.

    Raises :class:`~autopart.errors.TargetError` when the model as shipped no longer loads.
    """
    shipped = shipped_whole(graph, nodes, placement, precisions, weights_apart)
    if shipped is None:
        raise TargetError(f"the model as shipped ({graph.meta.get('source')}) no longer loads")
    return shipped.model_bytes


def runs_as_shipped(graph: Graph, nodes: Sequence[Node], codegen: Codegen) -> bool:
    """Whether ``codegen`` compiles ``nodes``, a plan's only partition, as the model shipped.

    True when the codegen takes that path (:attr:`Codegen.runs_shipped`) and ``nodes``
    are the whole of ``graph``, whose model as shipped corresponds to it. Such a partition
    runs whatever the library runs as a model, nodes its one-node probe refuses included.
    """
    if not codegen.runs_shipped:
        return False
    alone = replace(HOST, alone=True)  # weights apart: the answer needs no copy of them
    return shipped_whole(graph, nodes, alone, [None], weights_apart=True) is not None


def _serialised(source: str, graph: Graph, apart: bool) -> ShippedModel | None:
    """The model ``source`` names, serialised (its weights apart with ``apart``).

    None if it no longer loads, cannot be serialised, or does not fit ``graph``
    (:func:`_fits`). With ``apart`` it is :func:`~autopart.targets.peer.source_model`'s,
    read once per process for a large model.
    """
    try:
        if apart:
            made = source_model(source)
        else:
            model = resolve_model(source)
            made = SourceModel.of(model, model.SerializeToString())
    except Exception:  # no longer loads, or over protobuf's 2 GB: the export stands in
        return None
    inputs = PeerInputs.of(graph)
    shipped = ShippedModel(made.model_bytes, list(made.feeds), list(made.outputs), inputs)
    return shipped if _fits(shipped, graph) else None


def _fits(model: ShippedModel, graph: Graph) -> bool:
    """Whether ``model``'s ports are ``graph``'s by name.

    It is fed the graph's inputs and the frozen ones (its :class:`PeerInputs`), and makes
    every output of the graph.
    """
    if set(model.feeds) != set(graph.inputs) | set(model.inputs.frozen):
        return False
    return set(graph.outputs) <= set(model.produced)
