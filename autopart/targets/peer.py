"""Peers: a codegen's library run alone, as a user would run it instead of autopart.

A codegen offers its peers (:meth:`~autopart.targets.codegen.Codegen.peers`) as
:class:`Peer` declarations: a name, how to build a runner for a model, the precision it
computes in and how long it keeps cores busy after a run. ``bench`` and ``tune`` time every
peer of the installed codegens beside autopart's plans (:mod:`autopart.tuning.peers`). A
peer runs the model as the user gave it: when import froze inputs (``--freeze``), the peer
is fed their values instead (:class:`PeerInputs`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from autopart.host_memory import release_freed_memory
from autopart.ir.graph import Graph
from autopart.ir.onnx_export import to_onnx
from autopart.ir.weights import WeightsElsewhere, serialised_apart
from autopart.targets import quant_ranges
from autopart.zoo import resolve_model, zoo_names

Runner = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]
PeerModel = str | Path | onnx.ModelProto | Graph


@dataclass(frozen=True)
class PeerInputs:
    """How autopart's import fixed a model's inputs, for a peer running the model as it is.

    ``frozen`` are the values of frozen inputs (``--freeze``): a peer is fed them with every
    run, as a user would feed them. ``shapes`` are the static shapes of the inputs
    (``--input-shape``, symbolic dims 1 by default): the feeds have them, and OpenVINO
    compiles for them (a user reshapes a dynamic model for the one shape they run).
    ``calibration`` are the samples an int8 peer calibrates on, the same as autopart's
    own int8 (:mod:`autopart.targets.quant_ranges`).
    """

    frozen: Mapping[str, np.ndarray] = field(default_factory=dict)
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    calibration: Sequence[Mapping[str, np.ndarray]] = ()

    @classmethod
    def of(cls, graph: Graph) -> PeerInputs:
        """The frozen values, input shapes and calibration samples of ``graph``."""
        shapes = {name: tuple(graph.value(name).shape or ()) for name in graph.inputs}
        calibration = quant_ranges.calibration_of(graph).samples
        return cls(dict(graph.meta.get("frozen", {})), shapes, calibration)

    def static_shapes(self) -> dict[str, tuple[int, ...]]:
        """The static shape of every input: those of ``shapes``, and the frozen values'."""
        return {**self.shapes, **{name: np.shape(value) for name, value in self.frozen.items()}}

    def feeds(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """The arrays a peer whose inputs are ``names`` is given: ``feeds`` and frozen values."""
        return {name: feeds[name] if name in feeds else self.frozen[name] for name in names}


def peer_model(model: PeerModel) -> onnx.ModelProto:
    """The ONNX model a user would hand a library: the file or zoo model as it is.

    A :class:`Graph` (the API accepts one) is exported as it stands, simplified by import.
    """
    if isinstance(model, Graph):
        return to_onnx(model)
    return resolve_model(model)


def peer_model_bytes(model: PeerModel, proto: onnx.ModelProto | None = None) -> bytes:
    """:func:`peer_model` serialised (``proto``, where the caller made it already).

    A model read fresh from its file or zoo name (or exported from a Graph) keeps its large
    weights as files the library maps, and ``proto`` is changed so
    (:func:`autopart.ir.weights.serialised_apart`); a file or zoo name with no ``proto``
    is :func:`source_model`'s, read once per process; a ModelProto given is the caller's,
    and is serialised whole.
    """
    if isinstance(model, str | Path) and proto is None:
        return source_model(model).model_bytes
    proto = peer_model(model) if proto is None else proto
    if isinstance(model, onnx.ModelProto):
        return proto.SerializeToString()
    return serialised_apart(proto)


def peer_source(model: PeerModel) -> SourceModel:
    """:func:`peer_model` serialised as :func:`peer_model_bytes` does, with its ports.

    A file or zoo name is :func:`source_model`'s, read once per process; the parsed model
    of anything else is not kept beside its bytes.
    """
    if isinstance(model, str | Path):
        return source_model(model)
    proto = peer_model(model)
    return SourceModel.of(proto, peer_model_bytes(model, proto))


@dataclass(frozen=True)
class SourceModel:
    """A model as shipped, serialised, and its ports by name.

    ``inputs`` are all its declared inputs, ``feeds`` those that are not initializers (what
    it is fed), ``outputs`` its outputs; ``model_bytes`` refer to its large weights as files
    (:class:`~autopart.ir.weights.WeightsElsewhere`) where it is large.
    """

    model_bytes: bytes
    inputs: tuple[str, ...]
    feeds: tuple[str, ...]
    outputs: tuple[str, ...]

    @classmethod
    def of(cls, proto: onnx.ModelProto, model_bytes: bytes) -> SourceModel:
        """``proto``'s ports, with ``model_bytes`` (its serialisation) beside them."""
        constants = {tensor.name for tensor in proto.graph.initializer}
        inputs = tuple(port.name for port in proto.graph.input)
        feeds = tuple(name for name in inputs if name not in constants)
        outputs = tuple(port.name for port in proto.graph.output)
        return cls(model_bytes, inputs, feeds, outputs)


# Large models as shipped, serialised with their weights apart, by source: asking again
# (each peer, a plan's check, its compile, the next plan's) reads nothing. Each holds the
# graph's structure only; its weights are files that live as long as the process.
_SOURCES: dict[tuple[str, ...], SourceModel] = {}
_SOURCES_KEPT = 8


def source_model(source: str | Path) -> SourceModel:
    """The model a file or zoo name holds, serialised with its large weights apart.

    A large model (its weights apart, :func:`~autopart.ir.weights.serialised_apart`) is
    read once per process and kept by source (a zoo name, or a file's path, size and
    modification time) while its weights' folder is there; a vgg19 read and parsed held
    1.1 GiB for the moment. Raises what :func:`~autopart.zoo.resolve_model` raises.
    """
    key = _source_key(str(source))
    kept = None if key is None else _SOURCES.get(key)
    if kept is not None and _weights_there(kept.model_bytes):
        return kept
    proto = resolve_model(source)
    made = SourceModel.of(proto, serialised_apart(proto))
    del proto
    if isinstance(made.model_bytes, WeightsElsewhere):
        release_freed_memory()  # the large model read and parsed: not carried into a compile
        if key is not None:
            while len(_SOURCES) >= _SOURCES_KEPT:
                del _SOURCES[next(iter(_SOURCES))]
            _SOURCES[key] = made
    return made


def _weights_there(model_bytes: bytes) -> bool:
    """Whether the folder of the weights ``model_bytes`` refers to is still there."""
    return not isinstance(model_bytes, WeightsElsewhere) or model_bytes.folder.is_dir()


def _source_key(source: str) -> tuple[str, ...] | None:
    """What identifies ``source``'s model: a zoo name, or a file's path, size and mtime.

    None for a file that cannot be read (nothing is kept for it).
    """
    if source in zoo_names():  # made the same from its name in every process
        return ("zoo", source)
    try:
        path = Path(source).resolve()
        stat = path.stat()
    except OSError:
        return None
    return ("file", str(path), str(stat.st_size), str(stat.st_mtime_ns))


def in_f32() -> str | None:
    """The precision of a peer that computes in f32, as a target names it: None."""
    return None


def never() -> bool:
    """A peer that is never another peer's configuration on any machine."""
    return False


@dataclass(frozen=True)
class Peer:
    """One configuration of a codegen's library, run alone at the library's defaults.

    It is named ``<codegen> alone``, then its ``variant`` if any (``openvino alone f32``),
    and its ratio column in ``bench`` is ``vs_<codegen>[_<variant>]``. ``build(model,
    inputs)`` returns a :data:`Runner` for ``model`` (:data:`PeerModel`) fed ``inputs``'
    frozen values (None: none); it raises when the library rejects the model. The peer
    stands for ``codegen``'s single-target plan on the whole host at ``precision()`` (None:
    f32), asked only when needed (it may probe the library). ``linger_s`` is how long its
    threads keep cores busy after a run returns. A ``sets_tolerance`` peer's error on the
    evaluation samples sets the default tolerance (:mod:`autopart.tuning.accuracy`).
    ``redundant()`` says whether, on this machine, it compiles as another peer of its
    codegen does (a variant naming the precision its library computes in by default): it
    is then not run where the peers available here are (:func:`declared_peers`).

    A ``tool`` peer is the library with a tool a user runs on the model first (NNCF's or
    onnxruntime's int8 quantisation): it is named ``<codegen> + <tool>`` (``openvino +
    nncf int8``) and stands for no plan of autopart's, whose int8 is its own.
    """

    codegen: str
    build: Callable[[PeerModel, PeerInputs | None], Runner]
    variant: str = ""
    precision: Callable[[], str | None] = in_f32
    linger_s: float = 0.0
    sets_tolerance: bool = False
    tool: str = ""
    redundant: Callable[[], bool] = never

    @property
    def name(self) -> str:
        """``<codegen> alone`` and its variant (``openvino alone f32``); ``<codegen> + <tool>``."""
        if self.tool:
            return f"{self.codegen} + {self.tool}"
        return " ".join([self.codegen, "alone", *self.variant.split()])

    @property
    def column(self) -> str:
        """Its ratio column in ``bench``: ``vs_onnxruntime``, ``vs_openvino_nncf_int8``."""
        return "_".join(["vs", self.codegen, *(self.tool or self.variant).split()])

    @property
    def stands_for_plan(self) -> bool:
        """Whether it amounts to its codegen's single-target plan at its precision."""
        return not self.tool
