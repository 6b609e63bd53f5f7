"""The int8 peer of the ``openvino`` codegen: ``openvino + nncf int8``.

What a user does to run a model in int8 with OpenVINO: read it, quantise it with NNCF's
post-training ``nncf.quantize`` at its defaults (its default preset, every calibration
sample up to its subset size) on the calibration samples
(:attr:`~autopart.targets.peer.PeerInputs.calibration`, the ones autopart's own int8 is
calibrated on), and compile the result for the CPU with no properties, as OpenVINO as
installed does (what NNCF leaves in float then computes in bf16 on CPUs with bf16 units).
NNCF is an optional extra (``pip install -e ".[int8-peers]"``): without it the peer cannot
be built, and the rows that would show it say why. It stands for no plan of autopart's
(:attr:`~autopart.targets.peer.Peer.stands_for_plan`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from autopart.errors import TargetError
from autopart.targets.openvino import library
from autopart.targets.openvino.peer import compiled_runner
from autopart.targets.peer import Peer, PeerInputs, PeerModel, Runner, peer_source

PRECISION = "int8"
MISSING = "NNCF is not installed: pip install -e '.[int8-peers]' (or pip install nncf)"


def nncf_int8(model: PeerModel, inputs: PeerInputs | None = None) -> Runner:
    """A runner of ``model`` quantised by ``nncf.quantize`` at its defaults, on OpenVINO.

    Raises :class:`TargetError` without NNCF, OpenVINO or calibration samples, or with
    NNCF's or OpenVINO's first line when either rejects the model.
    """
    if importlib.util.find_spec("nncf") is None:
        raise TargetError(MISSING)
    if not library.HAVE_OPENVINO:
        raise TargetError("openvino + nncf int8 needs the openvino package")
    fixed = inputs or PeerInputs()
    if not fixed.calibration:
        raise TargetError("openvino + nncf int8 needs calibration samples")
    source = peer_source(model)  # a large file or zoo name: read once, its weights as files
    declared, wanted = list(source.inputs), list(source.outputs)
    ov_model = library.read_onnx(source.model_bytes)
    del source
    shapes = fixed.static_shapes()
    if shapes:
        library.reshape_dynamic(ov_model, shapes)
    ports = library.port_names(ov_model.inputs, declared)
    samples = [_feed(fixed.feeds(declared, sample), ports) for sample in fixed.calibration]
    try:
        quantised = _quantize(ov_model, samples)
        compiled = library.core().compile_model(quantised, library.DEVICE, {})
    except Exception as error:  # NNCF's and OpenVINO's errors are of many types
        raise TargetError(f"nncf.quantize failed: {library.first_line(error)[:200]}") from None
    return compiled_runner(compiled, declared, wanted, fixed)


def _feed(sample: Mapping[str, Any], ports: list[list[str]]) -> dict[str, Any]:
    """One calibration item as NNCF hands it to the model: values by the model's port names."""
    return {aliases[0]: sample[aliases[0]] for aliases in ports if aliases[0] in sample}


def _quantize(ov_model: Any, samples: list[dict[str, Any]]) -> Any:
    """``nncf.quantize`` of ``ov_model`` at its defaults on ``samples``, its logs kept quiet."""
    import nncf

    with _quiet():
        return nncf.quantize(ov_model, nncf.Dataset(samples))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Keep NNCF's progress bars and advice off the user's stderr while it quantises."""
    logger = logging.getLogger("nncf")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(None), contextlib.redirect_stderr(None):
            yield
    finally:
        logger.setLevel(level)


def _precision() -> str:
    """What the peer computes in, as a target names it: int8."""
    return PRECISION


NNCF_INT8 = Peer("openvino", nncf_int8, precision=_precision, tool="nncf int8")
