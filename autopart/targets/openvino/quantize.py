"""int8 on OpenVINO: QDQ models compiled by the CPU plugin, and which ops it runs in int8.

A subgraph holding int8 nodes is exported, rewritten to QDQ for those nodes with the
graph's calibrated ranges (:func:`autopart.targets.qdq.quantise`), and compiled like any
other: OpenVINO's low-precision transformations fuse each Quantize/Dequantize pattern
into a u8 x i8 kernel, and the nodes left out compute at the partition's precision (f32,
or bf16 islands). Which quantisable op types really run in int8 is not assumed: a tiny
QDQ model of each is compiled once per process and its runtime model read back
(:func:`int8_op_types`, each op's ``runtimePrecision``).
"""

from __future__ import annotations

import functools
import hashlib
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from autopart.ir.graph import Graph, Node
from autopart.targets import qdq
from autopart.targets.openvino import library
from autopart.targets.probe_cache import ProbeCache
from autopart.targets.probe_model import node_signature, probe_model, with_absolute_weights
from autopart.targets.quant_ranges import tensor_ranges

INT8_RUNTIME = frozenset({"u8", "i8"})  # runtimePrecision of ops computing in int8
# An int8 kernel agrees with f32 when its largest error is within this fraction of
# sum |x| |w|: right kernels erred by 0.2-1.4% of it, wrong ones by 26% to 5.9e4 times it.
INT8_AGREEMENT = 5e-2


def quantised_bytes(graph: Graph, model: onnx.ModelProto, int8_nodes: Sequence[str]) -> bytes:
    """``model`` (a subgraph of ``graph``) serialised with ``int8_nodes`` in QDQ int8.

    The ranges are ``graph``'s, measured once per model and calibration
    (:func:`~autopart.targets.quant_ranges.tensor_ranges`).
    """
    return qdq.quantise(model, tensor_ranges(graph), int8_nodes)


@dataclass(frozen=True)
class RuntimeOp:
    """One op of a compiled model's runtime graph: what it was made from and computes in.

    ``sources`` are the names of the original ops folded into it (``originalLayersNames``;
    OpenVINO's ONNX frontend names an op after its node or its output tensor), ``kind``
    its ``layerType`` and ``precision`` its ``runtimePrecision``.
    """

    sources: frozenset[str]
    kind: str
    precision: str


def runtime_ops(compiled: Any) -> list[RuntimeOp]:
    """The ops of ``compiled``'s runtime model (its executable graph, after fusing)."""
    found = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if "runtimePrecision" not in info:
            continue
        names = _text(info, "originalLayersNames")
        sources = {name.split("/", 1)[0] for name in names.split(",") if name}
        sources.add(op.get_friendly_name())
        kind, precision = _text(info, "layerType"), _text(info, "runtimePrecision")
        found.append(RuntimeOp(frozenset(sources), kind, precision))
    return found


def _text(info: Any, key: str) -> str:
    """The text of rt_info entry ``key`` ("" when absent; OpenVINO's RTMap has no get)."""
    return str(info[key].astype(str)) if key in info else ""


def computes_in(ops: Sequence[RuntimeOp], node: Node) -> set[str]:
    """The runtime precisions of the ops made from ONNX ``node`` (by name or output)."""
    names = {node.name, *(name for name in node.outputs if name)}
    return {op.precision for op in ops if op.sources & names}


def in_int8(ops: Sequence[RuntimeOp], node: Node) -> bool:
    """Whether an op made from ``node`` runs in u8 or i8."""
    return bool(computes_in(ops, node) & INT8_RUNTIME)


def _probe_model(op_type: str) -> tuple[onnx.ModelProto, dict[str, tuple[float, float]]]:
    """A one-op float model of ``op_type`` with a constant weight, and its ranges."""
    rng = np.random.default_rng(0)
    if op_type == "Conv":
        x, w, y = [1, 8, 8, 8], [8, 8, 3, 3], [1, 8, 8, 8]
        attrs: dict[str, Any] = {"pads": [1, 1, 1, 1]}
    else:
        x, w, y = [4, 32], [32, 32], [4, 32]
        attrs = {"transB": 1} if op_type == "Gemm" else {}
    weight = numpy_helper.from_array(rng.standard_normal(w).astype(np.float32), "w")
    node = helper.make_node(op_type, ["x", "w"], ["y"], name="probe", **attrs)
    graph = helper.make_graph(
        [node],
        "int8-probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", qdq.QDQ_OPSET)])
    return model, {"x": (-3.0, 3.0), "w": (-3.0, 3.0), "y": (-30.0, 30.0)}


@functools.cache
def int8_op_types() -> frozenset[str]:
    """The quantisable op types OpenVINO's CPU plugin runs in u8/i8 here, probed once.

    Each of :data:`~autopart.targets.qdq.QUANTISED_OPS` is quantised as a one-op model
    and compiled; it counts when its runtime op computes in u8 or i8. Empty without
    openvino, or where the plugin refuses the probes.
    """
    if not library.HAVE_OPENVINO:
        return frozenset()
    found = set()
    for op_type in qdq.QUANTISED_OPS:
        model, ranges = _probe_model(op_type)
        try:
            rewritten = qdq.quantise(model, ranges, ["probe"])
            compiled = library.core().compile_model(
                library.read_onnx(rewritten), library.DEVICE, library.target_config(None)
            )
        except Exception:  # a library that cannot quantise or compile it: not int8 here
            continue
        probe = Node("probe", op_type, ["x", "w"], ["y"])
        if in_int8(runtime_ops(compiled), probe):
            found.add(op_type)
    return frozenset(found)


def runs_in_int8(node: Node, graph: Graph) -> bool:
    """Whether ``node`` is quantisable and OpenVINO runs it in int8 here, correctly.

    Its op type must be one the probe found in int8 (:func:`int8_op_types`), and its
    configuration one whose int8 kernel :func:`agrees_in_int8`.
    """
    return (
        qdq.quantisable(node, graph)
        and node.op_type in int8_op_types()
        and agrees_in_int8(node, graph)
    )


_AGREEMENT = ProbeCache()


def agrees_in_int8(node: Node, graph: Graph) -> bool:
    """Whether OpenVINO's int8 kernel computes ``node``'s configuration as ONNX specifies.

    Some configurations come out wrong in OpenVINO 2026.4's int8 convolution while its f32
    one is right: a 1x1 convolution with stride 2 and padding had one row too many; a
    grouped 1x2 kernel with stride 2 along its 1-wide axis on a 4x4 input erred by 76% of
    what its terms add up to (found by the conformance suite). No rule by hand covers them,
    so each configuration (signature, input shapes and weights) is run once per process:
    ``node`` alone on seeded random inputs, quantised over their range, against the same
    model in f32 (:func:`_agrees`). It agrees when its largest error is within
    :data:`INT8_AGREEMENT` of the magnitude its roundings scale with: ``sum |x| |w|``, the
    node fed absolute inputs and weights
    (:func:`~autopart.targets.probe_model.with_absolute_weights`).
    """
    signature = node_signature(node, graph)
    if signature is None:
        return False
    key = (signature, *(_input_key(graph, name) for name in node.inputs if name))
    return _AGREEMENT.get(key, lambda: (_agrees(probe_model(node, graph, static=True)), ""))[0]


def _input_key(graph: Graph, name: str) -> tuple[Any, ...]:
    """An input's part of an agreement key: its shape, and a digest of it where constant.

    Whether a kernel errs can depend on the weights: a grouped 1x2 convolution of stride 2
    erred by 26-81% of its magnitude with some random weights and inputs, by 0.2-0.3% with
    others of the same shapes.
    """
    value = graph.value(name)
    const = None if value.const is None else _digest(value.const)
    return (tuple(value.shape or ()), const)


_DIGESTS: dict[int, tuple[weakref.ref[np.ndarray], str]] = {}


def _digest(array: np.ndarray) -> str:
    """The sha256 of ``array``'s bytes, computed once per array while it lives.

    Support is asked of every node at every stage (squeezenet's tune asked 870 times):
    hashing vgg19's 550 MB of weights at each would repeat the same work. A graph's
    constant arrays are never mutated (:meth:`~autopart.ir.graph.Graph.copy` shares them),
    so an array's identity stands for its bytes while it lives.
    """
    known = _DIGESTS.get(id(array))
    if known is not None and known[0]() is array:
        return known[1]
    digest = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
    _DIGESTS[id(array)] = (weakref.ref(array), digest)
    return digest


def _agrees(model: onnx.ModelProto) -> bool:
    """Whether ``model`` (one node, constants embedded) agrees in int8 with itself in f32.

    On two seeded draws: uniform in [-2, 2], and +-2 at random (the extremes, where u8 x
    i8 products are largest: some wrong results depended on the data).
    """
    model.graph.node[0].name = "probe"
    rng = np.random.default_rng(0)
    inputs = model.graph.input
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in inputs}
    uniform = {name: rng.uniform(-2.0, 2.0, shape) for name, shape in shapes.items()}
    extremes = {name: 2.0 * rng.choice([-1.0, 1.0], shape) for name, shape in shapes.items()}
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    ranges = {name: (-2.0, 2.0) for name in shapes}  # both draws span it
    ranges.update({n: (float(a.min()), float(a.max())) for n, a in weights.items()})
    try:
        exact, absolute = (
            _compiled(model.SerializeToString()),
            _compiled(with_absolute_weights(model).SerializeToString()),
        )
        quantised = _compiled(qdq.quantised_once(model, ranges, ["probe"]))
        for draw in (uniform, extremes):
            feeds = {name: array.astype(np.float32) for name, array in draw.items()}
            expected = _infer(exact, feeds)
            magnitude = _infer(absolute, {n: np.abs(a) for n, a in feeds.items()})
            got = _infer(quantised, feeds)
            scale = max(float(np.abs(a).max(initial=0.0)) for a in magnitude.values()) or 1.0
            for name, want in expected.items():
                if got[name].shape != want.shape:
                    return False
                if float(np.abs(got[name] - want).max(initial=0.0)) > INT8_AGREEMENT * scale:
                    return False
    except Exception:  # a library that cannot quantise, compile or run it: not int8 here
        return False
    return True


def _compiled(model: bytes) -> Any:
    """``model`` compiled by OpenVINO's CPU plugin in f32 (its QDQ nodes: in int8)."""
    return library.core().compile_model(
        library.read_onnx(model), library.DEVICE, library.target_config(None, "f32")
    )


def _infer(compiled: Any, feeds: dict[str, np.ndarray]) -> dict[int, np.ndarray]:
    """``compiled``'s outputs on ``feeds``, by output index (names may merge differently)."""
    results = compiled.create_infer_request().infer(feeds)
    return {index: np.asarray(results[index]) for index in range(len(compiled.outputs))}
