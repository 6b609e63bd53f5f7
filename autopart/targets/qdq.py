"""int8 as ONNX's QDQ form, shared by every codegen that runs QDQ models.

A node computing in int8 reads its activation through QuantizeLinear/DequantizeLinear
(u8, asymmetric, the calibrated range of that tensor, :mod:`autopart.targets.quant_ranges`)
and its weight through DequantizeLinear (i8, symmetric, one scale per output channel);
where the CPU sums u8 x i8 pairs in i16 (AVX2 without VNNI or AMX), the weight takes 7
bits (onnxruntime's ``reduce_range``), as a pair of full-range products would saturate;
its output stays float (the QDQ quantizer's ``OpTypesToExcludeOutputQuantization``), so
the nodes after it compute at their own precision. A library that runs QDQ models
(OpenVINO) fuses each such pattern into an int8 kernel.

Weighted ops are quantised (:data:`QUANTISED_OPS`, with a constant float weight:
:func:`quantisable`): onnxruntime's QDQ quantizer rewrites them and OpenVINO's CPU plugin
runs them in u8/i8 (read back from its runtime model). So are the ops that pass quantised
levels on unchanged (:data:`PASSING_OPS`): a MaxPool at int8 reads its input through
Quantize/Dequantize and its output shares that scale, so the library pools u8 values where
a Conv before it would otherwise hand bf16 or f32 to the pool and the Conv after it quantise
again (a VGG16 classifier: 9.4 to 7.5 ms, NNCF's own time). Max commutes with a monotone
rounding, so the pool's output is the rounded max either way. Models are rewritten by
onnxruntime's own ``QDQQuantizer`` given the precomputed ranges (:func:`quantise`), never
by hand, and cached in autopart's cache folder by the digest of the subgraph, the ranges
it reads and the nodes chosen, so a rerun does not quantise again.

:class:`FakeQuantisation` emulates that in the numpy reference for the sensitivity of
each node: it rounds a node's activation and weight through the same scale and zero-point
rule (onnxruntime's ``compute_scale_zp`` and ``quantize_data``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from autopart.errors import TargetError
from autopart.io import atomic_write_bytes
from autopart.ir import weights
from autopart.ir.graph import Graph, Node
from autopart.targets.cpu_units import int8_sums_in_i16
from autopart.targets.quant_ranges import Ranges, cache_dir

PRECISION = "int8"
QUANTISED_OPS = ("Conv", "MatMul", "Gemm")
PASSING_OPS = ("MaxPool",)  # int8 in, the same levels out: onnxruntime's direct 8-bit ops
QDQ_OPSET = 13  # per-channel DequantizeLinear (its ``axis``) needs opset 13
# The largest i8 weight level, by whether the CPU sums int8 pairs in i16 (7 bits there).
WEIGHT_LEVELS = {False: 127, True: 64}
_HEADER = b"autopart-qdq2 "  # then the body's BLAKE2b digest in hex, a newline and the body

# How many models were quantised in this process (not read from the cache), for tests.
quantisations = 0
_LOCK = threading.Lock()


def quantisable(node: Node, graph: Graph) -> bool:
    """Whether ``node`` is rewritten to int8: a weighted op, or a passing one, on float32.

    Conv (not ConvTranspose) and Gemm with a constant weight and no bias or a constant 1-D
    one (onnxruntime quantises no other); MatMul with a constant 2-D weight (per-channel
    scales along its output columns, as onnxruntime does); a :data:`PASSING_OPS` node on a
    float32 input whose only output is its values (a MaxPool's indices are not levels).
    """
    if node.op_type in PASSING_OPS:
        outputs = [name for name in node.outputs if name]
        return len(outputs) == 1 and graph.value(node.inputs[0]).dtype == np.float32
    if node.op_type not in QUANTISED_OPS or len(node.present_inputs) < 2:
        return False
    activation, weight = graph.value(node.inputs[0]), graph.value(node.inputs[1])
    if activation.dtype != np.float32 or weight.const is None:
        return False
    if weight.const.dtype != np.float32:
        return False
    if len(node.inputs) > 2 and node.inputs[2]:  # the quantizer folds a bias into int32
        bias = graph.value(node.inputs[2]).const
        if bias is None or bias.ndim != 1:
            return False
    if node.op_type == "MatMul":
        return weight.const.ndim == 2
    return True


def weight_axis(node: Node) -> int:
    """The axis of ``node``'s weight that holds output channels (one scale each)."""
    if node.op_type == "Gemm":
        return 0 if node.attrs.get("transB", 0) else 1
    return 1 if node.op_type == "MatMul" else 0


def _tensors_data(ranges: Mapping[str, tuple[float, float]]) -> Any:
    """The TensorsData (MinMax) of onnxruntime holding ``ranges``."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorsData

    return TensorsData(
        CalibrationMethod.MinMax,
        {
            name: (np.array(low, np.float32), np.array(high, np.float32))
            for name, (low, high) in ranges.items()
        },
    )


def quantise(model: onnx.ModelProto, ranges: Ranges, nodes: Collection[str]) -> bytes:
    """``model`` serialised with its ``nodes`` in QDQ int8, the rest as they were (cached).

    ``ranges`` are the calibrated ranges of (at least) the tensors ``nodes`` read. The
    model is converted to opset :data:`QDQ_OPSET` first where older (onnx's version
    converter). ``model`` is left as it was. Raises :class:`TargetError` when onnx or
    onnxruntime cannot.
    """
    read = {name for node in model.graph.node if node.name in nodes for name in node.input}
    source = model.SerializeToString()
    digest = hashlib.sha256(source).hexdigest()
    del source

    def copied() -> onnx.ModelProto:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy

    return quantise_keyed(copied, f"bytes:{digest}", read, ranges, nodes)


def quantise_keyed(
    make: Callable[[], onnx.ModelProto],
    digest: str,
    read: Collection[str],
    ranges: Ranges,
    nodes: Collection[str],
) -> bytes:
    """As :func:`quantise`, for the model ``make()`` returns, made only if not cached.

    ``digest`` names the model's content (two models alike, and only those, share it);
    ``read`` are the tensors its ``nodes`` read. The cache is keyed by it, the ranges of
    ``read`` and ``nodes``: a large model is neither made nor serialised to find its
    cached quantisation. ``make()``'s model is consumed.
    """
    global quantisations
    used = {name: list(ranges[name]) for name in sorted(read) if name in ranges}
    keyed = hashlib.sha256(digest.encode())
    keyed.update(json.dumps([used, sorted(nodes), int8_sums_in_i16()], sort_keys=True).encode())
    path = cache_dir() / f"qdq-{keyed.hexdigest()[:40]}.onnx"
    cached = _read_model(path)
    if cached is not None:
        return cached
    rewritten = _quantised(make(), used, nodes)
    with _LOCK:
        quantisations += 1
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, _HEADER + _digest(rewritten) + b"\n" + rewritten)
    except Exception:  # an unwritable cache only costs quantising again
        pass
    return rewritten


def quantised_once(model: onnx.ModelProto, ranges: Ranges, nodes: Collection[str]) -> bytes:
    """As :func:`quantise`, neither cached nor counted: for throwaway probe models.

    ``model`` is left as it was. Raises :class:`TargetError` as :func:`quantise` does.
    """
    return _quantised(onnx.ModelProto.FromString(model.SerializeToString()), ranges, nodes)


def _quantised(model: onnx.ModelProto, ranges: Mapping[str, Any], nodes: Collection[str]) -> bytes:
    """The QDQQuantizer of onnxruntime run on ``model`` for ``nodes``, serialised."""
    from onnxruntime.quantization.qdq_quantizer import QDQQuantizer
    from onnxruntime.quantization.quant_utils import QuantType

    try:
        model = _weights_aside(model, _for_quantiser)
        chosen = [node.name for node in model.graph.node if node.name in nodes]
        others = [node.name for node in model.graph.node if node.name not in nodes]
        quantizer = QDQQuantizer(
            model,
            True,  # per-channel weights
            int8_sums_in_i16(),  # 7-bit weights where full ones saturate (AVX2)
            QuantType.QInt8,
            QuantType.QUInt8,
            _tensors_data({name: (low, high) for name, (low, high) in ranges.items()}),
            chosen,
            others,
            [*QUANTISED_OPS, *PASSING_OPS],
            {
                "OpTypesToExcludeOutputQuantization": list(QUANTISED_OPS),
                "ForceQuantizeNoInputCheck": True,  # a passing op quantises its own input
            },
        )
        quantizer.quantize_model()
        return quantizer.model.model.SerializeToString()
    except Exception as error:  # onnx's and onnxruntime's errors are of many types
        text = str(error).strip()
        line = text.splitlines()[0] if text else type(error).__name__
        raise TargetError(f"cannot quantise the subgraph to int8: {line}") from None


def _for_quantiser(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` at opset :data:`QDQ_OPSET` or later, with every shape inferred.

    It is marked as onnxruntime's quantiser marks a model whose shapes it inferred
    (``add_infer_metadata``): onnx's inference, which it would otherwise run again on a deep
    copy saved to disk and loaded back, a whole model more in memory (vgg19: 0.55 GiB).
    """
    from onnxruntime.quantization.quant_utils import add_infer_metadata

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < QDQ_OPSET:
        model = onnx.version_converter.convert_version(model, QDQ_OPSET)
    inferred = onnx.shape_inference.infer_shapes(model)
    add_infer_metadata(inferred)
    return inferred


def _weights_aside(
    model: onnx.ModelProto, rewrite: Callable[[onnx.ModelProto], onnx.ModelProto]
) -> onnx.ModelProto:
    """``rewrite(model)`` with ``model``'s large weights' bytes set aside, put back by name.

    onnx's converter and shape inference copy the whole model several times over, and
    need no weight's values but the small ones that give shapes: vgg19's int8 export
    peaked at 2.7 GiB over the model in them. ``model`` is consumed. A weight the rewrite
    renamed or dropped is a :class:`TargetError`.
    """
    aside: dict[str, bytes] = {}
    for tensor in model.graph.initializer:
        if weights.raw_size(tensor) >= weights.TENSOR_BYTES:
            aside[tensor.name] = tensor.raw_data
            tensor.ClearField("raw_data")
    made = rewrite(model)
    del model
    for tensor in made.graph.initializer:
        if tensor.name in aside:
            tensor.raw_data = aside.pop(tensor.name)
    if aside:
        raise TargetError(f"onnx's rewrite lost the weight {next(iter(aside))}")
    return made


def _read_model(path: Path) -> bytes | None:
    """The cached model in ``path`` when its digest checks, else None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    end = data.find(b"\n")
    header, body = data[: max(end, 0)], memoryview(data)[end + 1 :]
    if end < 0 or not header.startswith(_HEADER) or header[len(_HEADER) :] != _digest(body):
        return None
    return data[end + 1 :]


def _digest(body: bytes | memoryview) -> bytes:
    """The BLAKE2b digest of ``body`` in hex, as the header of a cached model holds it.

    Hashed as it is: a model of hundreds of MiB is not copied, nor spelled out in hex.
    """
    return hashlib.blake2b(body, digest_size=16).hexdigest().encode()


def _channel_scales(weight: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per output channel of ``weight``: the i8 (symmetric) zero points and scales."""
    from onnx import TensorProto
    from onnxruntime.quantization.quant_utils import quantize_data

    moved = np.moveaxis(weight, axis, 0)
    zeros, scales = [], []
    for channel in moved:
        zero, scale, _ = quantize_data(channel.ravel(), TensorProto.INT8, True, int8_sums_in_i16())
        zeros.append(float(zero))
        scales.append(float(scale))
    shape = [1] * weight.ndim
    shape[axis] = -1
    return (
        np.asarray(zeros, np.float32).reshape(shape),
        np.asarray(scales, np.float32).reshape(shape),
    )


def activation_scale(low: float, high: float) -> tuple[float, float]:
    """The u8 (asymmetric) zero point and scale of a tensor calibrated to [low, high]."""
    from onnx import TensorProto
    from onnxruntime.quantization.quant_utils import compute_scale_zp, get_qmin_qmax_for_qType

    qmin, qmax = get_qmin_qmax_for_qType(TensorProto.UINT8)
    zero, scale = compute_scale_zp(np.float32(low), np.float32(high), qmin, qmax, False)
    return float(zero), float(scale)


def fake_quantise(value: np.ndarray, zero: Any, scale: Any, low: int, high: int) -> np.ndarray:
    """``value`` quantised (round half to even, clipped to [low, high]) and dequantised."""
    levels = np.clip(np.rint(value / scale) + zero, low, high)
    return ((levels - zero) * scale).astype(np.float32)


class FakeQuantisation:
    """Emulates int8 nodes in the reference: a :class:`~autopart.targets.codegen.Reduction`.

    A quantisable node computes on its activation fake-quantised with its calibrated
    range (u8) and its weight per channel (i8), exactly as :func:`quantise` rewrites it;
    its output and every other node are left exact. Weights are rounded once. A passing
    node's output is its rounded input's max, which rounding again leaves as it is; an
    int8 node after it reads it on the pool's input scale, not its own range's (each
    node's sensitivity is taken alone, and the two ranges differ by what the pool drops).
    """

    def __init__(self, graph: Graph, ranges: Ranges) -> None:
        self.graph, self.ranges = graph, ranges
        self._weights: dict[str, np.ndarray] = {}

    def inputs(self, node: str, args: Sequence[Any]) -> list[Any]:
        """``args`` of ``node`` as its int8 kernel sees them."""
        found = self.graph.node(node)
        if not quantisable(found, self.graph) or found.inputs[0] not in self.ranges:
            return list(args)
        zero, scale = activation_scale(*self.ranges[found.inputs[0]])
        rounded = list(args)
        rounded[0] = fake_quantise(np.asarray(args[0], np.float32), zero, scale, 0, 255)
        if found.op_type in PASSING_OPS:
            return rounded
        if node not in self._weights:
            weight = np.asarray(args[1], np.float32)
            zeros, scales = _channel_scales(weight, weight_axis(found))
            bound = WEIGHT_LEVELS[int8_sums_in_i16()]
            self._weights[node] = fake_quantise(weight, zeros, scales, -bound, bound)
        rounded[1] = self._weights[node]
        return rounded

    def outputs(self, node: str, values: Sequence[Any]) -> list[Any]:
        """``values`` unchanged: a quantised node's output stays float."""
        return list(values)

    def covers(self, node: str) -> bool:
        """Whether ``node`` computes differently in int8 (it is quantisable)."""
        return quantisable(self.graph.node(node), self.graph)
