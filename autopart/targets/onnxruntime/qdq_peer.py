"""The int8 peer of the ``onnxruntime`` codegen: ``onnxruntime + qdq int8``.

What a user does to run a model in int8 with onnxruntime alone: quantise it with
``onnxruntime.quantization.quantize_static`` at its defaults (QDQ format, signed 8-bit
activations and weights, per tensor, MinMax calibration) on the calibration samples
(:attr:`~autopart.targets.peer.PeerInputs.calibration`, the ones autopart's own int8 is
calibrated on), then run the quantised model in a session at its default options. It stands
for no plan of autopart's (:attr:`~autopart.targets.peer.Peer.stands_for_plan`).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.version_converter

from autopart.errors import TargetError
from autopart.targets.onnxruntime.peer import _ort, cpu_session
from autopart.targets.onnxruntime.settings import ONNXRUNTIME
from autopart.targets.peer import Peer, PeerInputs, PeerModel, Runner, peer_model

PRECISION = "int8"
EXTERNAL_DATA_BYTES = 1 << 30  # a model this large is saved with its weights beside it


def qdq_int8(model: PeerModel, inputs: PeerInputs | None = None) -> Runner:
    """A runner of ``model`` quantised by ``quantize_static`` at its defaults, on onnxruntime.

    Raises :class:`TargetError` without onnxruntime or calibration samples, or with the
    quantiser's or the session's first line when either rejects the model.
    """
    if _ort is None:
        raise TargetError("onnxruntime + qdq int8 needs the onnxruntime package")
    fixed = inputs or PeerInputs()
    if not fixed.calibration:
        raise TargetError("onnxruntime + qdq int8 needs calibration samples")
    proto = peer_model(model)
    wanted = [value.name for value in proto.graph.input]
    samples = [fixed.feeds(wanted, sample) for sample in fixed.calibration]
    with tempfile.TemporaryDirectory(prefix="autopart-qdq-") as folder:
        source, quantised = Path(folder) / "model.onnx", Path(folder) / "int8.onnx"
        large = proto.ByteSize() > EXTERNAL_DATA_BYTES
        converted = _opset_the_quantiser_converts(proto)
        onnx.save(proto, str(source), save_as_external_data=large or converted is not None)
        del proto
        try:
            if converted is not None:
                _convert_structure(source, converted)
            with _quiet_quantiser():
                _quantize(source, quantised, samples, large)
            options = _ort.SessionOptions()
            options.log_severity_level = 4  # fatal only, as the f32 peer
            session = cpu_session(_model_bytes(quantised, large), options)
        except Exception as error:  # the quantiser's and onnxruntime's errors are of many types
            line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise TargetError(f"onnxruntime's quantize_static failed: {line[:200]}") from None
    names = [output.name for output in session.get_outputs()]
    ports = [port.name for port in session.get_inputs()]

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(names, session.run(names, fixed.feeds(ports, feeds)), strict=True))

    return run


QUANTISER_OPSET = 11  # what quantize_static converts a model of an opset below 10 to


def _opset_the_quantiser_converts(model: onnx.ModelProto) -> int | None:
    """The opset ``quantize_static`` converts ``model`` to first, if it does (else None).

    As onnxruntime's ``update_opset_version`` at the defaults: a default-domain opset
    below 10 becomes :data:`QUANTISER_OPSET`.
    """
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    return QUANTISER_OPSET if versions and versions[0] < 10 else None


def _convert_structure(source: Path, opset: int) -> None:
    """Convert the model saved at ``source``, its weights beside it, to ``opset`` in place.

    The converter the quantiser calls, given the structure alone: its weights stay in
    their files, which the converted model still names. The quantiser, finding the opset
    it wants, converts nothing: converting vgg19 whole (opset 9) held it three times over,
    3.1 GiB. The model that reaches the quantiser is the same, weights and structure
    (checked on the zoo's opset-9 models). Where the converter rejects the structure
    alone, ``source`` is left as it was, for the quantiser to convert whole as it would.
    """
    structure = onnx.load(str(source), load_external_data=False)
    try:
        converted = onnx.version_converter.convert_version(structure, opset)
    except Exception:  # the converter's errors are of many types; the quantiser's own try
        return
    del structure
    written = source.with_name(f"{source.stem}.converted{source.suffix}")
    onnx.save(converted, str(written))
    written.replace(source)


def _quantize(source: Path, target: Path, samples: Sequence[dict[str, Any]], large: bool) -> None:
    """``quantize_static`` of ``source`` to ``target`` at its defaults, fed ``samples``."""
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    class Samples(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.left: Iterator[dict[str, Any]] = iter(samples)

        def get_next(self) -> dict[str, Any] | None:
            return next(self.left, None)

    quantize_static(str(source), str(target), Samples(), use_external_data_format=large)


def _model_bytes(path: Path, large: bool) -> bytes:
    """The quantised model's bytes, its external weights loaded in where it has them."""
    if not large:
        return path.read_bytes()
    return onnx.load(str(path)).SerializeToString()


ORT_DEFAULT_SEVERITY = 2  # onnxruntime's default logger level: warnings


@contextlib.contextmanager
def _quiet_quantiser() -> Iterator[None]:
    """Keep the quantiser's advice and its calibration sessions' warnings off stderr.

    The calibration sessions are the quantiser's own, at onnxruntime's default log level:
    a model that declares an output's shape wrongly warns at every calibration run.
    """
    assert _ort is not None
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    _ort.set_default_logger_severity(3)
    try:
        yield
    finally:
        root.setLevel(level)
        _ort.set_default_logger_severity(ORT_DEFAULT_SEVERITY)


def _precision() -> str:
    """What the peer computes in, as a target names it: int8."""
    return PRECISION


QDQ_INT8 = Peer(
    "onnxruntime", qdq_int8, precision=_precision, linger_s=ONNXRUNTIME.spin_linger_s,
    tool="qdq int8",
)  # fmt: skip
