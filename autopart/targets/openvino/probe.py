"""What the ``openvino`` codegen supports: one-node probes compiled once per signature.

For every distinct node signature (:func:`~autopart.targets.probe_model.node_signature`,
plus each input's rank and its constant data where small) a one-node ONNX model with the
node's static input shapes and its constant inputs embedded
(:func:`~autopart.targets.probe_model.probe_model`) is read from memory and compiled for
the CPU; the answer is memoised for the life of the process. Nodes that OpenVINO compiles
but computes differently from ONNX are refused by rule (:func:`known_mismatch`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autopart.ir.graph import Graph, Node
from autopart.settings import COMMON
from autopart.targets.openvino import library
from autopart.targets.probe_cache import ProbeCache
from autopart.targets.probe_model import has_graph_attribute, node_signature, probe_model

# Constant inputs up to this many elements are part of a probe's key by value (shapes,
# axes, pads); larger ones (weights) by dtype and shape only. Float constants are by value
# only up to SMALL_FLOAT_CONSTANT (scales, clip bounds): a float vector is a bias or a
# norm's scale, whose values decide nothing, and each block of a stack has its own.
SMALL_CONSTANT = 64
SMALL_FLOAT_CONSTANT = 8

_PROBES = ProbeCache()
DYNAMIC_QUANTISATION = frozenset({"DynamicQuantizeLinear", "DynamicQuantizeLSTM"})


def probe_key(node: Node, graph: Graph) -> tuple[Any, ...] | None:
    """The memoisation key of ``node``'s probe; ``None`` when an input's dtype or rank is unknown.

    It extends :func:`~autopart.targets.probe_model.node_signature` (domain, op, opset,
    dtypes, attributes) with each input's rank and, for constant inputs, their shape and
    (when small) their data: OpenVINO's CPU plugin needs a static rank, and some ops accept
    only constant shape-like inputs. Dimensions are left out, as in the base key.
    """
    base = node_signature(node, graph)
    if base is None:
        return None
    inputs: list[Any] = []
    for name in node.inputs:
        if not name:
            inputs.append(None)
            continue
        value = graph.value(name)
        if value.shape is None:
            return None
        data = value.const
        if data is None:
            inputs.append(len(value.shape))
        elif data.size <= (
            SMALL_FLOAT_CONSTANT if np.issubdtype(data.dtype, np.floating) else SMALL_CONSTANT
        ):
            inputs.append(("const", data.shape, data.tobytes()))
        else:
            inputs.append(("const", data.shape))
    return (*base, tuple(inputs))


# a constant whose float32 spacing (|c| * 2**-24) exceeds the check tolerance for a term of 1
ABSORBING_MAGNITUDE = COMMON.check_tolerance * 2.0**24


def known_mismatch(node: Node, graph: Graph) -> str | None:
    """Why OpenVINO would compile ``node`` but compute something else than ONNX says, or None.

    Two differences found by the conformance suite, decided from attributes and shapes:

    - Softmax, LogSoftmax and Hardmax before opset 13 flatten the input from ``axis`` on;
      OpenVINO applies them along ``axis`` alone, which agrees only when the dimensions
      after ``axis`` are all 1.
    - Pooling with ``ceil_mode`` drops a last window that would start past the input and
      its begin padding; OpenVINO keeps it, and its output is one longer there.
    - AveragePool with ``ceil_mode`` and ``count_include_pad``: a last window that runs
      past the end padding averages over the padded input it covers; OpenVINO divides by
      the whole window.
    - The dynamic quantisation of activations (:data:`DYNAMIC_QUANTISATION`, written by
      onnxruntime's quantiser): one node alone agrees, but compiled among the MatMuls it
      feeds OpenVINO computes otherwise. Found by the corpus: of five models shipped
      quantised with them, one was 2.4% off onnxruntime on OpenVINO, one 2.6% and one
      had a class answer change (an error of 1), beyond five steps of their 8-bit range;
      with these nodes left to the reference, 0, 5e-4 and 0.
    - A Mul by a constant so large that it absorbs other terms (:func:`absorbing_constant`).
    """
    first = graph.value(node.inputs[0]).shape if node.inputs and node.inputs[0] else None
    if node.op_type in ("Softmax", "LogSoftmax", "Hardmax") and graph.opset_of(node) < 13:
        axis = int(node.attrs.get("axis", 1)) % max(len(first or ()), 1)
        if first is None or int(np.prod(first[axis + 1 :])) != 1:
            return f"{node.op_type} before opset 13 over several axes (OpenVINO takes one)"
    if node.attrs.get("ceil_mode") and node.attrs.get("auto_pad", "NOTSET") == "NOTSET":
        kernel = list(node.attrs.get("kernel_shape", []))
        sizes = list(first[2:]) if first is not None else []
        if len(sizes) != len(kernel):
            return f"{node.op_type} with ceil_mode needs a known spatial shape"
        count = len(kernel)
        strides = list(node.attrs.get("strides") or [1] * count)
        dilations = list(node.attrs.get("dilations") or [1] * count)
        pads = list(node.attrs.get("pads") or [0] * 2 * count)
        for i in range(count):
            span = sizes[i] + pads[i] + pads[i + count] - (kernel[i] - 1) * dilations[i] - 1
            windows = -(-span // strides[i]) + 1
            if (windows - 1) * strides[i] >= sizes[i] + pads[i]:
                return (
                    f"{node.op_type} with ceil_mode and a window past the input (OpenVINO keeps it)"
                )
            reach = (windows - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1
            overhang = reach > sizes[i] + pads[i] + pads[i + count]
            if node.op_type == "AveragePool" and node.attrs.get("count_include_pad") and overhang:
                return (
                    "AveragePool with ceil_mode and count_include_pad whose last window runs past "
                    "the padding (OpenVINO divides by the whole window)"
                )
    absorbing = absorbing_constant(node, graph)
    if absorbing is not None:
        return absorbing
    if node.op_type in DYNAMIC_QUANTISATION:
        return (
            f"{node.op_type}: OpenVINO rewrites a model's dynamic quantisation of activations "
            "and computes it otherwise than onnxruntime rounds it"
        )
    return None


def absorbing_constant(node: Node, graph: Graph) -> str | None:
    """Why a Mul by a constant of magnitude over :data:`ABSORBING_MAGNITUDE` is refused, or None.

    OpenVINO reassociates chains of Add and Mul whose other operands are constants: an
    attention mask ``bias + (1 - mask) * c`` with ``c`` the float's lowest value (as
    transformers writes it) becomes ``(bias + c) - mask * c``, and ``bias + c`` rounds to
    ``c``: the bias is lost (a text encoder with its position bias folded: every score 0,
    its outputs 45% off onnxruntime, OpenVINO alone as much). A constant ``c`` absorbs any
    term under its float32 spacing, ``|c| * 2**-24``; past :data:`ABSORBING_MAGNITUDE` that
    spacing exceeds the check tolerance for a term of order 1. Left to another target, the
    Mul's product reaches OpenVINO as an input, which it cannot fold.
    """
    if node.op_type != "Mul":
        return None
    for name in node.present_inputs:
        data = graph.value(name).const
        if data is None or data.dtype.kind != "f" or data.size == 0:
            continue
        finite = np.abs(data[np.isfinite(data)])
        if finite.size and float(finite.max()) > ABSORBING_MAGNITUDE:
            return (
                f"Mul by a constant of magnitude {float(finite.max()):.3g}: OpenVINO reassociates "
                "it with other constants, whose terms it absorbs"
            )
    return None


def _run_probe(node: Node, graph: Graph) -> tuple[bool, str]:
    """Compile ``node`` alone for OpenVINO's CPU plugin; any failure means no."""
    try:
        model = library.read_onnx(probe_model(node, graph, static=True).SerializeToString())
        library.core().compile_model(model, library.DEVICE, library.target_config((0,)))
    except Exception as error:  # OpenVINO raises RuntimeError and others; all mean "no"
        return False, library.first_line(error)
    return True, ""


def probe(node: Node, graph: Graph) -> tuple[bool, str]:
    """Whether OpenVINO's CPU plugin runs ``node``, and why not when it does not.

    Refuses without probing: nodes with graph attributes (If, Loop, Scan), nodes with an
    input of unknown dtype or rank, nodes OpenVINO computes differently from ONNX
    (:func:`known_mismatch`), and everything when openvino is missing. Otherwise the
    answer for the node's :func:`probe_key` is computed once (reading and compiling a
    one-node model: 15-60 ms on this machine) and memoised in a module-level table.
    """
    if not library.HAVE_OPENVINO:
        return False, library.MISSING_MESSAGE
    if has_graph_attribute(node):
        return False, f"{node.op_type} has a graph attribute (control flow is not run on openvino)"
    key = probe_key(node, graph)
    if key is None:
        return False, f"{node.op_type} has an input of unknown dtype or rank"
    mismatch = known_mismatch(node, graph)
    if mismatch is not None:
        return False, mismatch
    return _PROBES.get(key, lambda: _run_probe(node, graph))


def clear_probe_cache() -> None:
    """Forget every memoised probe (for tests)."""
    _PROBES.clear()
