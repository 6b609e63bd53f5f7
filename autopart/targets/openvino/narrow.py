"""Whether a serialised ONNX model stores any tensor in 8 bits or fewer.

OpenVINO's CPU plugin quantises activations to int8 on the side (its dynamic quantization)
only where weights are stored compressed: in int8, int4, or an 8-bit float or narrower. A
model that stores none computes the same with that setting on or off, so its compile with
it off is its compile as installed (:func:`autopart.targets.openvino.library.settled_config`).
"""

from __future__ import annotations

import threading

import onnx

_NARROW_NAMES = (
    "INT8", "UINT8", "INT4", "UINT4", "INT2", "UINT2", "FLOAT4E2M1", "FLOAT8E8M0",
    "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ",
)  # fmt: skip
NARROW_TYPES = frozenset(
    getattr(onnx.TensorProto, name) for name in _NARROW_NAMES if hasattr(onnx.TensorProto, name)
)
_KNOWN: dict[str, bool] = {}  # by the model's SHA-256
_LOCK = threading.Lock()


def stores_narrow_tensors(digest: str, model_bytes: bytes) -> bool:
    """Whether ``model_bytes`` (SHA-256 ``digest``) holds a constant of 8 bits or fewer.

    Its initializers, its Constant nodes' tensors and those of every subgraph, by their
    declared type (weights stored in files beside the model too). Remembered by digest: a
    model is parsed once per process. A model that cannot be parsed counts as narrow.
    """
    with _LOCK:
        known = _KNOWN.get(digest)
    if known is None:
        known = _scan(model_bytes)
        with _LOCK:
            _KNOWN[digest] = known
    return known


def _scan(model_bytes: bytes) -> bool:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(model_bytes)
    except Exception:  # protobuf's DecodeError: an unreadable model is taken as narrow
        return True
    return _graph_narrow(model.graph)


def _graph_narrow(graph: onnx.GraphProto) -> bool:
    if any(tensor.data_type in NARROW_TYPES for tensor in graph.initializer):
        return True
    if any(sparse.values.data_type in NARROW_TYPES for sparse in graph.sparse_initializer):
        return True
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t") and attribute.t.data_type in NARROW_TYPES:
                return True
            if any(tensor.data_type in NARROW_TYPES for tensor in attribute.tensors):
                return True
            if attribute.HasField("g") and _graph_narrow(attribute.g):
                return True
            if any(_graph_narrow(body) for body in attribute.graphs):
                return True
    return False
