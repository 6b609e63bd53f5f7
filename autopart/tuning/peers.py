"""The peers a user would run instead of autopart, each a library as installed.

``onnxruntime alone`` is one InferenceSession with default session options on the CPU
provider; ``openvino alone`` is ``compile_model(model, "CPU")`` with no properties at all,
OpenVINO as installed (bf16 on CPUs with avx512_bf16 or AMX, about 1e-2 off the
reference); ``openvino alone f32`` is the same with only the f32 precision hint, the exact
configuration. Benchmarks time them side by side with autopart's plans and report the
ratio to each and to the best of them, with each one's output error; a peer is never
given autopart's settings. A
peer runs the model as the user gave it: when import froze inputs (``--freeze``), the peer
is fed their values instead (:class:`PeerInputs`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from autopart.ir.graph import Graph
from autopart.ir.onnx_export import to_onnx
from autopart.ir.target import HOST_DEVICE
from autopart.search.candidates import Candidate, CandidateKind
from autopart.settings import VERIFY
from autopart.targets.openvino import runtime as openvino_runtime
from autopart.tuning.accuracy import AS_INSTALLED
from autopart.zoo import resolve_model

Runner = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]
PeerModel = str | Path | onnx.ModelProto | Graph
ONNXRUNTIME = "onnxruntime alone"
OPENVINO = AS_INSTALLED  # "openvino alone": compile_model with no properties
OPENVINO_F32 = "openvino alone f32"
PEERS = (ONNXRUNTIME, OPENVINO, OPENVINO_F32)
# the codegen whose whole-device partition each peer's configuration is
PEER_CODEGENS = {ONNXRUNTIME: "onnxruntime", OPENVINO: "openvino", OPENVINO_F32: "openvino"}
# how long each peer's threads keep cores busy after a run (see measure_plans)
LINGER_S = {ONNXRUNTIME: VERIFY.spin_linger_s, OPENVINO: 0.0, OPENVINO_F32: 0.0}


@dataclass(frozen=True)
class PeerInputs:
    """How autopart's import fixed a model's inputs, for a peer running the model as it is.

    ``frozen`` are the values of frozen inputs (``--freeze``): a peer is fed them with every
    run, as a user would feed them. ``shapes`` are the static shapes of the inputs
    (``--input-shape``, symbolic dims 1 by default): the feeds have them, and OpenVINO
    compiles for them (a user reshapes a dynamic model for the one shape they run).
    """

    frozen: Mapping[str, np.ndarray] = field(default_factory=dict)
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, graph: Graph) -> PeerInputs:
        """The frozen values and input shapes ``graph`` was imported with."""
        shapes = {name: tuple(graph.value(name).shape or ()) for name in graph.inputs}
        return cls(dict(graph.meta.get("frozen", {})), shapes)

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


def onnxruntime_alone(
    model: PeerModel, parallel: bool = False, inputs: PeerInputs | None = None
) -> Runner:
    """A runner for ``model`` in a plain onnxruntime CPU session at its default options.

    ``inputs`` are the frozen values it is fed besides a run's feeds. With ``parallel`` (an
    experiment's variant, not the peer), the session runs independent branches itself
    (``ORT_PARALLEL``: two inter-op threads of one intra-op thread each, spinning off)
    instead of threading inside each op.
    """
    options = ort.SessionOptions()
    if parallel:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        options.inter_op_num_threads = 2
        options.intra_op_num_threads = 1
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    proto = peer_model(model)
    session = ort.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [output.name for output in session.get_outputs()]
    fixed = inputs or PeerInputs()
    wanted = [port.name for port in session.get_inputs()]

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(names, session.run(names, fixed.feeds(wanted, feeds)), strict=True))

    return run


def openvino_alone(model: PeerModel, inputs: PeerInputs | None = None, f32: bool = False) -> Runner:
    """A runner for ``model`` compiled by OpenVINO for its CPU with no properties at all.

    That is OpenVINO as installed (bf16 where the CPU has it); with ``f32``, the f32
    precision hint and nothing else. With ``inputs``, inputs of dynamic shape are reshaped
    to the static shapes given (and frozen inputs to their values' shapes), and frozen
    values are fed with every run.
    """
    fixed = inputs or PeerInputs()
    read = openvino_runtime.read_onnx(peer_model(model).SerializeToString())
    _reshape(read, fixed)
    settings = {"INFERENCE_PRECISION_HINT": "f32"} if f32 else {}
    compiled = openvino_runtime.core().compile_model(read, "CPU", settings)
    request = compiled.create_infer_request()
    names = [port.get_any_name() for port in compiled.inputs]
    outputs = [port.get_any_name() for port in compiled.outputs]

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        result = request.infer(fixed.feeds(names, feeds))
        return {name: np.asarray(result[index]) for index, name in enumerate(outputs)}

    return run


def _reshape(read: Any, fixed: PeerInputs) -> None:
    """Give ``read``'s inputs of dynamic shape the static shapes of ``fixed``."""
    wanted = {**fixed.shapes, **{name: a.shape for name, a in fixed.frozen.items()}}
    static = {}
    for port in read.inputs:
        name = port.get_any_name()
        if port.get_partial_shape().is_dynamic and name in wanted:
            static[name] = list(wanted[name])
    if static:
        read.reshape(static)


def peers(
    model: PeerModel, inputs: PeerInputs | None = None
) -> tuple[dict[str, Runner], list[str]]:
    """Every peer this machine can run for ``model``, by name, and why any other could not.

    ``inputs`` say how import fixed the inputs (:meth:`PeerInputs.of` the imported graph);
    each peer runs ``model`` as it is, fed the frozen values. OpenVINO is two peers where it
    is installed: as installed, and f32. A library that rejects the model is left
    out with a one-line reason: a user could not have run it that way either.
    """
    makers: dict[str, Callable[..., Runner]] = {ONNXRUNTIME: onnxruntime_alone}
    if openvino_runtime.HAVE_OPENVINO:
        makers[OPENVINO] = openvino_alone
        makers[OPENVINO_F32] = functools.partial(openvino_alone, f32=True)
    found: dict[str, Runner] = {}
    notes: list[str] = []
    for name, make in makers.items():
        try:
            found[name] = make(model, inputs=inputs)
        except Exception as error:  # neither library's exception types are specific
            first = (str(error).strip().splitlines() or [type(error).__name__])[-1]
            notes.append(f"{name} could not run this model: {first[:200]}")
    return found, notes


def peer_precision(peer: str) -> str | None:
    """The precision ``peer`` computes in, as a target names it (None: f32).

    OpenVINO as installed computes in its CPU plugin's default (bf16 where the CPU has it);
    the other peers in f32.
    """
    if peer == OPENVINO and openvino_runtime.HAVE_OPENVINO:
        default = openvino_runtime.default_precision()
        return None if default == "f32" else default
    return None


def peer_equivalents(candidates: Mapping[str, Candidate]) -> dict[str, str]:
    """Each peer's configuration among ``candidates``: the plan it amounts to, by peer name.

    That is the single-target candidate of the peer's codegen and precision on the whole
    host device, run as one partition with no node off its target: its codegen compiles a
    plan's only partition as the library compiles a model alone (onnxruntime at its default
    session options, OpenVINO with the LATENCY hint and the precision, which are its
    defaults). Peers with no such candidate are left out.
    """
    found: dict[str, str] = {}
    for peer, codegen in PEER_CODEGENS.items():
        precision = peer_precision(peer)
        for name, candidate in candidates.items():
            target = candidate.target
            if (
                candidate.kind is CandidateKind.SINGLE
                and target is not None
                and target.codegen == codegen
                and target.precision == precision
                and target.unit is None
                and target.device == HOST_DEVICE
                and candidate.off_target_nodes == 0
                and len(candidate.plan.partitions) == 1
            ):
                found[peer] = name
                break
    return found
