"""The peer the ``onnxruntime`` codegen offers: ``onnxruntime alone``.

One InferenceSession with default session options on the CPU provider, as a user runs a
model with onnxruntime. It stands for the whole-host ``cpu@onnxruntime`` plan, whose only
partition gets the same default options (the codegen's ``alone`` placement). Its pool
threads spin on after a run
(:attr:`~autopart.targets.onnxruntime.settings.OnnxruntimeSettings.spin_linger_s`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from autopart.errors import TargetError
from autopart.ir.weights import WeightsElsewhere
from autopart.targets.held import Held
from autopart.targets.onnxruntime.settings import ONNXRUNTIME
from autopart.targets.peer import Peer, PeerInputs, PeerModel, Runner, peer_model_bytes

try:
    import onnxruntime as _ort
except ImportError:  # optional dependency: the codegen is then unavailable, and so its peer
    _ort = None


def onnxruntime_alone(
    model: PeerModel, parallel: bool = False, inputs: PeerInputs | None = None
) -> Runner:
    """A runner for ``model`` in a plain onnxruntime CPU session at its default options.

    ``inputs`` are the frozen values it is fed besides a run's feeds. With ``parallel`` (an
    experiment's variant, not the peer), the session runs independent branches itself
    (``ORT_PARALLEL``: two inter-op threads of one intra-op thread each, spinning off)
    instead of threading inside each op. Raises :class:`TargetError` without onnxruntime.
    """
    if _ort is None:
        raise TargetError("onnxruntime alone needs the onnxruntime package")
    if parallel:
        options = _ort.SessionOptions()
        options.log_severity_level = FATAL_ONLY
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.execution_mode = _ort.ExecutionMode.ORT_PARALLEL
        options.inter_op_num_threads = 2
        options.intra_op_num_threads = 1
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        session = cpu_session(peer_model_bytes(model), options)
    else:
        session = default_session(peer_model_bytes(model))
    names = [output.name for output in session.get_outputs()]
    fixed = inputs or PeerInputs()
    wanted = [port.name for port in session.get_inputs()]

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(names, session.run(names, fixed.feeds(wanted, feeds)), strict=True))

    return run


# Fatal only: a value whose shape depends on the data warns on stderr at every run
# (maskrcnn's masks), and a failed run logs its error there before raising it, which the
# run reports in one line. The level changes what is logged, not how it runs.
FATAL_ONLY = 4
_HELD = Held()


def default_session(model_bytes: bytes, intra_threads: int | None = None) -> Any:
    """A CPU session of ``model_bytes`` at onnxruntime's default options, shared while held.

    The options are a user's: the defaults, with fatal-only logging and, where given,
    ``intra_threads`` pool threads. onnxruntime alone and the whole-device plan's only
    partition are such a session of the model as shipped: while a runner holds one, the
    other is that same session, not a second one (a 12,400-node stack: 2-3 s to create,
    and a copy of the weights). Held sessions are known by weak references only. Raises
    onnxruntime's own exceptions.
    """
    assert _ort is not None
    options = _ort.SessionOptions()
    options.log_severity_level = FATAL_ONLY
    if intra_threads is not None:
        options.intra_op_num_threads = intra_threads
    key = (hashlib.sha256(model_bytes).hexdigest(), intra_threads)
    return _HELD.get_or_make(key, lambda: cpu_session(model_bytes, options))


def cpu_session(model_bytes: bytes, options: Any) -> Any:
    """An InferenceSession of ``model_bytes`` on the CPU provider, not holding the bytes.

    onnxruntime's Python session keeps the bytes it was made from for as long as it lives
    (its own comment: "this is bad as we're holding the memory indefinitely"), only to
    make itself again should an accelerator's provider fail; on the CPU provider alone
    none can, so they are let go: resnet50's session held 98 MB of them.
    """
    assert _ort is not None
    if isinstance(model_bytes, WeightsElsewhere):  # its weights are files: read from its own
        path = str(model_bytes.path())
        return _ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    session = _ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    if getattr(session, "_model_bytes", None) is model_bytes:
        session._model_bytes = None
    return session


def _alone(model: PeerModel, inputs: PeerInputs | None) -> Runner:
    """The peer's runner: :func:`onnxruntime_alone` at its defaults."""
    return onnxruntime_alone(model, inputs=inputs)


ALONE = Peer("onnxruntime", _alone, linger_s=ONNXRUNTIME.spin_linger_s)
