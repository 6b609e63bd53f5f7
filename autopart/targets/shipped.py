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
from pathlib import Path

from autopart.errors import TargetError
from autopart.host_memory import release_freed_memory
from autopart.ir import weights
from autopart.ir.graph import Graph, Node
from autopart.targets.codegen import HOST, Codegen, Placement
from autopart.targets.peer import PeerInputs
from autopart.zoo import resolve_model, zoo_names


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
    made = _serialised(source, graph, weights_apart)
    if made is None or not _fits(made, graph):
        return None
    return ShippedModel(
        made.model_bytes, list(made.feeds), list(made.produced), PeerInputs.of(graph)
    )


@dataclass(frozen=True)
class _Serialised:
    """A model as shipped, serialised, with its fed inputs and its outputs by name."""

    model_bytes: bytes
    feeds: tuple[str, ...]
    produced: tuple[str, ...]


# Large models as shipped, serialised with their weights apart, by source: asking again
# (a plan's check, then its compile, then the next plan's) reads nothing. Each holds the
# graph's structure only; its weights are files that live as long as the process.
_APART: dict[tuple[str, ...], _Serialised] = {}
_APART_KEPT = 8


def _serialised(source: str, graph: Graph, apart: bool) -> _Serialised | None:
    """The model ``source`` names, serialised (its weights apart with ``apart``).

    None if it no longer loads, cannot be serialised, or does not fit ``graph``
    (:func:`_fits`). A large model serialised apart is kept by :func:`_source_key`, and
    not read again.
    """
    key = _source_key(source) if apart else None
    kept = None if key is None else _APART.get(key)
    if kept is not None and _weights_there(kept.model_bytes):
        return kept
    try:
        model = resolve_model(source)
    except Exception:  # a source that no longer loads: the export stands in
        return None
    constants = {tensor.name for tensor in model.graph.initializer}
    feeds = tuple(port.name for port in model.graph.input if port.name not in constants)
    produced = tuple(port.name for port in model.graph.output)
    if not _fits(_Serialised(b"", feeds, produced), graph):
        return None
    try:
        model_bytes = weights.serialised_apart(model) if apart else model.SerializeToString()
    except ValueError:  # over protobuf's 2 GB: the export, with its weights apart, stands in
        return None
    del model
    made = _Serialised(model_bytes, feeds, produced)
    if isinstance(model_bytes, weights.WeightsElsewhere):
        release_freed_memory()  # the large model read and parsed: not carried into a compile
        if key is not None:
            while len(_APART) >= _APART_KEPT:
                del _APART[next(iter(_APART))]
            _APART[key] = made
    return made


def _weights_there(model_bytes: bytes) -> bool:
    """Whether the folder of the weights ``model_bytes`` refers to is still there."""
    return not isinstance(model_bytes, weights.WeightsElsewhere) or model_bytes.folder.is_dir()


def _source_key(source: str) -> tuple[str, ...] | None:
    """What identifies ``source``'s model: a zoo name, or a file's path, size and mtime.

    None for a file that cannot be read (nothing is kept for it).
    """
    if source in zoo_names():  # made the same from its name in every process
        return ("zoo", source)
    try:
        stat = Path(source).resolve().stat()
    except OSError:
        return None
    return ("file", str(Path(source).resolve()), str(stat.st_size), str(stat.st_mtime_ns))


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


def _fits(model: _Serialised, graph: Graph) -> bool:
    """Whether ``model``'s ports are ``graph``'s by name.

    It is fed the graph's inputs and the frozen ones (:class:`PeerInputs`), and makes every
    output of the graph.
    """
    inputs = PeerInputs.of(graph)
    if set(model.feeds) != set(graph.inputs) | set(inputs.frozen):
        return False
    return set(graph.outputs) <= set(model.produced)
