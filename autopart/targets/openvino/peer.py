"""The peers the ``openvino`` codegen offers: ``openvino alone`` and ``openvino alone f32``.

``openvino alone`` is ``compile_model(model, "CPU")`` with no properties at all, OpenVINO
as installed: bf16 on CPUs with avx512_bf16 or AMX, about 1e-2 off the reference. Its
error sets the default tolerance. ``openvino alone f32`` is the same with only the
f32 precision hint, the exact configuration (on a CPU where OpenVINO computes in f32
by default, the same as ``openvino alone``, and not run again). Each stands for the whole-host
``cpu@openvino`` plan at its precision, which the codegen compiles with the LATENCY hint
and that precision: OpenVINO's own defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autopart.targets.openvino import library
from autopart.targets.peer import Peer, PeerInputs, PeerModel, Runner, peer_source

_F32_HINT = {"INFERENCE_PRECISION_HINT": "f32"}  # openvino alone f32's only property


def openvino_alone(model: PeerModel, inputs: PeerInputs | None = None, f32: bool = False) -> Runner:
    """A runner for ``model`` compiled by OpenVINO for its CPU with no properties at all.

    That is OpenVINO as installed (bf16 where the CPU has it); with ``f32``, the f32
    precision hint and nothing else. With ``inputs``, inputs of dynamic shape are reshaped
    to the static shapes given (and frozen inputs to their values' shapes), and frozen
    values are fed with every run. A slow compile is paid once per process: a second
    runner of the same model imports the first one's export (:mod:`.blobs`), unless its
    large weights are files, which OpenVINO maps and reads again instead.
    """
    fixed = inputs or PeerInputs()
    source = peer_source(model)  # a file or zoo name: read once per process
    declared, wanted = list(source.inputs), list(source.outputs)
    model_bytes = source.model_bytes
    del source
    settings = dict(_F32_HINT) if f32 else {}
    compiled = library.compiled_once(model_bytes, settings, fixed.static_shapes())
    del model_bytes
    return compiled_runner(compiled, declared, wanted, fixed)


def compiled_runner(
    compiled: Any, declared: Sequence[str], wanted: Sequence[str], fixed: PeerInputs
) -> Runner:
    """A runner of an OpenVINO compiled model, named by the ONNX model's own ports.

    It is fed by the inputs ``declared`` (and ``fixed``'s frozen values) and returns the
    outputs ``wanted``, each under every name OpenVINO kept for it. It holds ``compiled``
    itself, not only its request, so that another compile of the same key shares it while
    the runner lives (:func:`~autopart.targets.openvino.library.compiled_once`).
    """
    names = [named[0] for named in library.port_names(compiled.inputs, declared)]
    outputs = library.port_names(compiled.outputs, wanted)
    return _CompiledRunner(compiled, compiled.create_infer_request(), names, outputs, fixed)


class _CompiledRunner:
    """A compiled model and its one request, run as a :data:`Runner`."""

    def __init__(
        self,
        compiled: Any,
        request: Any,
        names: Sequence[str],
        outputs: Sequence[Sequence[str]],
        fixed: PeerInputs,
    ) -> None:
        self.compiled, self.request, self.names, self.outputs = compiled, request, names, outputs
        self.fixed = fixed

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The outputs of one inference on ``feeds``, under every name each carries."""
        result = self.request.infer(self.fixed.feeds(self.names, feeds))
        return {
            name: np.asarray(result[index])
            for index, aliases in enumerate(self.outputs)
            for name in aliases
        }


def as_installed_precision() -> str | None:
    """What OpenVINO as installed computes in, as a target names it (None: f32)."""
    if not library.HAVE_OPENVINO:
        return None
    default = library.default_precision()
    return None if default == library.PRECISION else default


def _as_installed(model: PeerModel, inputs: PeerInputs | None) -> Runner:
    """The runner of ``openvino alone``: no properties at all."""
    return openvino_alone(model, inputs)


def _f32(model: PeerModel, inputs: PeerInputs | None) -> Runner:
    """The runner of ``openvino alone f32``: the f32 precision hint alone."""
    return openvino_alone(model, inputs, f32=True)


AS_INSTALLED = Peer(
    "openvino", _as_installed, precision=as_installed_precision, sets_tolerance=True
)


def _compiles_as_installed() -> bool:
    """Whether the f32 variant compiles as OpenVINO as installed does here.

    By the rule the compiled models' cache keys by
    (:func:`~autopart.targets.openvino.library.effective_config`): where the f32 hint is
    the plugin's own default, the two are one compiled model.
    """
    return library.HAVE_OPENVINO and library.effective_config(_F32_HINT) == (
        library.effective_config({})
    )


F32 = Peer("openvino", _f32, variant="f32", redundant=_compiles_as_installed)
