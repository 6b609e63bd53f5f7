"""The peers a user would run instead of autopart, each at its library's defaults.

``onnxruntime alone`` is one InferenceSession with default session options on the CPU
provider; ``openvino alone`` is ``compile_model`` on OpenVINO's CPU device with only the
LATENCY hint and f32 precision set (its default on CPUs with bf16 units is bf16, about
1e-2 off the reference). Benchmarks time them side by side with autopart's plans and report
the ratio to each and to the best of them; a peer is never given autopart's settings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from autopart.ir.graph import Graph
from autopart.ir.onnx_export import to_onnx
from autopart.ir.target import HOST_DEVICE
from autopart.search.candidates import Candidate, CandidateKind
from autopart.settings import VERIFY
from autopart.targets.openvino import runtime as openvino_runtime
from autopart.zoo import resolve_model

Runner = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]
PeerModel = str | Path | onnx.ModelProto | Graph
ONNXRUNTIME = "onnxruntime alone"
OPENVINO = "openvino alone"
PEERS = (ONNXRUNTIME, OPENVINO)
# the codegen whose whole-device partition each peer's configuration is
PEER_CODEGENS = {ONNXRUNTIME: "onnxruntime", OPENVINO: "openvino"}
# how long each peer's threads keep cores busy after a run (see measure_plans)
LINGER_S = {ONNXRUNTIME: VERIFY.spin_linger_s, OPENVINO: 0.0}


def peer_model(model: PeerModel) -> onnx.ModelProto:
    """The ONNX model a user would hand a library: the file or zoo model as it is.

    A :class:`Graph` (the API accepts one) is exported as it stands, simplified by import.
    """
    if isinstance(model, Graph):
        return to_onnx(model)
    return resolve_model(model)


def onnxruntime_alone(model: PeerModel, parallel: bool = False) -> Runner:
    """A runner for ``model`` in a plain onnxruntime CPU session at its default options.

    With ``parallel`` (an experiment's variant, not the peer), the session runs independent
    branches itself (``ORT_PARALLEL``: two inter-op threads of one intra-op thread each,
    spinning off) instead of threading inside each op.
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

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(names, session.run(names, dict(feeds)), strict=True))

    return run


def openvino_alone(model: PeerModel) -> Runner:
    """A runner for ``model`` compiled by OpenVINO for its CPU: LATENCY hint, f32, no more."""
    read = openvino_runtime.read_onnx(peer_model(model).SerializeToString())
    settings = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
    compiled = openvino_runtime.core().compile_model(read, "CPU", settings)
    request = compiled.create_infer_request()
    inputs = [port.get_any_name() for port in compiled.inputs]
    outputs = [port.get_any_name() for port in compiled.outputs]

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        result = request.infer({name: feeds[name] for name in inputs})
        return {name: np.asarray(result[index]) for index, name in enumerate(outputs)}

    return run


def peers(model: PeerModel) -> tuple[dict[str, Runner], list[str]]:
    """Every peer this machine can run for ``model``, by name, and why any other could not.

    OpenVINO is a peer where it is installed. A library that rejects the model is left
    out with a one-line reason: a user could not have run it that way either.
    """
    makers: dict[str, Callable[[PeerModel], Runner]] = {ONNXRUNTIME: onnxruntime_alone}
    if openvino_runtime.HAVE_OPENVINO:
        makers[OPENVINO] = openvino_alone
    found: dict[str, Runner] = {}
    notes: list[str] = []
    for name, make in makers.items():
        try:
            found[name] = make(model)
        except Exception as error:  # neither library's exception types are specific
            first = (str(error).strip().splitlines() or [type(error).__name__])[-1]
            notes.append(f"{name} could not run this model: {first[:200]}")
    return found, notes


def peer_equivalents(candidates: Mapping[str, Candidate]) -> dict[str, str]:
    """Each peer's configuration among ``candidates``: the plan it amounts to, by peer name.

    That is the single-target candidate of the peer's codegen on the whole host device,
    run as one partition with no node off its target: its codegen compiles a plan's only
    partition as the library compiles a model alone (onnxruntime at its default session
    options, OpenVINO with the peer's properties). Peers with no such candidate are left out.
    """
    found: dict[str, str] = {}
    for peer, codegen in PEER_CODEGENS.items():
        for name, candidate in candidates.items():
            target = candidate.target
            if (
                candidate.kind is CandidateKind.SINGLE
                and target is not None
                and target.codegen == codegen
                and target.unit is None
                and target.device == HOST_DEVICE
                and candidate.off_target_nodes == 0
                and len(candidate.plan.partitions) == 1
            ):
                found[peer] = name
                break
    return found
