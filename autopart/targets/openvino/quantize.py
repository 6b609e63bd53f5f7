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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from autopart.ir import weights
from autopart.ir.graph import Graph, Node
from autopart.ir.onnx_export import to_onnx
from autopart.targets import qdq
from autopart.targets.openvino import library
from autopart.targets.openvino.agreement import agrees_in_int8
from autopart.targets.quant_ranges import tensor_ranges

INT8_RUNTIME = frozenset({"u8", "i8"})  # runtimePrecision of ops computing in int8


def quantised_bytes(
    graph: Graph,
    nodes: Sequence[Node],
    feeds: Sequence[str],
    results: Sequence[str],
    int8_nodes: Sequence[str],
) -> bytes:
    """``nodes`` of ``graph`` exported from ``feeds`` to ``results``, ``int8_nodes`` in QDQ.

    The ranges are ``graph``'s, measured once per model and calibration
    (:func:`~autopart.targets.quant_ranges.tensor_ranges`). The cache is looked up by the
    export's digest (:func:`~autopart.ir.weights.export_digest`): the export is made only
    to be quantised, not to find a cached one.
    """
    digest = weights.export_digest(graph, nodes, feeds, results)
    chosen = set(int8_nodes)
    read = {name for node in nodes if node.name in chosen for name in node.inputs if name}
    return qdq.quantise_keyed(
        lambda: to_onnx(graph, list(nodes), list(feeds), list(results)),
        f"export:{digest}",
        read,
        tensor_ranges(graph),
        int8_nodes,
    )


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
    """A one-op float model of ``op_type`` and its ranges (a constant weight if it takes one)."""
    rng = np.random.default_rng(0)
    if op_type in qdq.PASSING_OPS:
        return _passing_probe(op_type)
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


def _passing_probe(op_type: str) -> tuple[onnx.ModelProto, dict[str, tuple[float, float]]]:
    """A one-op float model of passing ``op_type`` (a 2x2 pool of stride 2), its ranges."""
    node = helper.make_node(
        op_type, ["x"], ["y"], name="probe", kernel_shape=[2, 2], strides=[2, 2]
    )
    graph = helper.make_graph(
        [node],
        "int8-probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", qdq.QDQ_OPSET)])
    return model, {"x": (-3.0, 3.0), "y": (-3.0, 3.0)}


@functools.cache
def int8_op_types() -> frozenset[str]:
    """The quantisable op types OpenVINO's CPU plugin runs in u8/i8 here, probed once.

    Each of :data:`~autopart.targets.qdq.QUANTISED_OPS` and
    :data:`~autopart.targets.qdq.PASSING_OPS` is quantised as a one-op model and
    compiled; it counts when its runtime op computes in u8 or i8. Empty without openvino,
    or where the plugin refuses the probes.
    """
    if not library.HAVE_OPENVINO:
        return frozenset()
    found = set()
    for op_type in (*qdq.QUANTISED_OPS, *qdq.PASSING_OPS):
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
    configuration one whose int8 kernel :func:`agrees_in_int8` and whose output has no
    row or column that reads only padding (:func:`reads_only_padding`).
    """
    return (
        qdq.quantisable(node, graph)
        and node.op_type in int8_op_types()
        and not reads_only_padding(node, graph)
        and agrees_in_int8(node, graph)
    )


def reads_only_padding(node: Node, graph: Graph) -> bool:
    """Whether ``node`` is a Conv with explicit pads that cover a whole kernel window.

    Such a Conv has an output row or column that reads nothing but padding. OpenVINO
    2026.4's int8 kernel gets those rows wrong once enough grouped Convs of one shape have
    been compiled in a process: 19 of 358 draws of a group-4 Conv with 2 rows of padding
    above its 2-high kernel came out with that row off by up to 3.1e4 times the output's
    magnitude, each again when compiled again in the same process, never in a fresh one,
    and none of 287 with 1 row of padding. The probe of :func:`agrees_in_int8` compiles
    each configuration once, so it passed them. A padding that wide computes nothing a
    model needs, so such a Conv keeps f32 or bf16, whatever its groups. Its float kernel errs
    there too (a [2, 1] kernel with two columns of padding before: those columns read back
    as 1e28 and more, where the same configuration's probe had agreed), so OpenVINO is not
    offered such a Conv at any precision.
    """
    if node.op_type != "Conv" or node.attrs.get("auto_pad", "NOTSET") != "NOTSET":
        return False
    pads = [int(p) for p in node.attrs.get("pads", ())]
    weight = graph.value(node.inputs[1]).shape if len(node.inputs) > 1 else None
    kernel = node.attrs.get("kernel_shape") or (weight[2:] if weight else None)
    if not pads or not kernel:
        return False
    dilations = node.attrs.get("dilations") or [1] * len(kernel)
    extents = [(int(k) - 1) * int(d) + 1 for k, d in zip(kernel, dilations, strict=False)]
    return any(pad >= extent for pad, extent in zip(pads, extents * 2, strict=False))
