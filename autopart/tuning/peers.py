"""The peers a user would run instead of autopart, each at its library's defaults.

``onnxruntime alone`` is one InferenceSession with default session options on the CPU
provider; ``openvino alone`` is ``compile_model`` on OpenVINO's CPU device with only the
LATENCY hint and f32 precision set (its default on CPUs with bf16 units is bf16, about
1e-2 off the reference). Benchmarks time them side by side with autopart's plans and report
the ratio to each and to the best of them; a peer is never given autopart's settings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnxruntime as ort

from autopart.targets.openvino import runtime as openvino_runtime
from autopart.zoo import resolve_model

Runner = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]
ONNXRUNTIME = "onnxruntime alone"
OPENVINO = "openvino alone"


def onnxruntime_alone(model: str, parallel: bool = False) -> Runner:
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
    proto = resolve_model(model)
    session = ort.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [output.name for output in session.get_outputs()]

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(names, session.run(names, dict(feeds)), strict=True))

    return run


def openvino_alone(model: str) -> Runner:
    """A runner for ``model`` compiled by OpenVINO for its CPU: LATENCY hint, f32, no more."""
    read = openvino_runtime.read_onnx(resolve_model(model).SerializeToString())
    settings = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
    compiled = openvino_runtime.core().compile_model(read, "CPU", settings)
    request = compiled.create_infer_request()
    inputs = [port.get_any_name() for port in compiled.inputs]
    outputs = [port.get_any_name() for port in compiled.outputs]

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        result = request.infer({name: feeds[name] for name in inputs})
        return {name: np.asarray(result[index]) for index, name in enumerate(outputs)}

    return run


def peers(model: str) -> dict[str, Runner]:
    """Every peer this machine can run for ``model``, by name (OpenVINO where installed)."""
    found = {ONNXRUNTIME: onnxruntime_alone(model)}
    if openvino_runtime.HAVE_OPENVINO:
        found[OPENVINO] = openvino_alone(model)
    return found
