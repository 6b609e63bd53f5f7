"""Kernels borrowed from onnxruntime for the ops the numpy reference has none of.

Models as they ship hold ops beyond the ONNX standard that onnxruntime runs: its
quantiser's ``com.microsoft::DynamicQuantizeLSTM``, the ``ai.onnx.ml`` ops of
scikit-learn's converter. Refusing such a model would refuse what onnxruntime runs. So an
op the registry has no kernel of, but onnxruntime's CPU provider has, is computed by
onnxruntime itself, one node at a time: the reference then means "ONNX's semantics, as
numpy computes them, and as onnxruntime computes the ops numpy lacks". Every other op
stays numpy's, and a kernel written later takes precedence.

A borrowed kernel builds a one-node model for the dtypes and ranks it is called with
(dims left unknown, so any size runs), compiles it once and keeps the session.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from autopart.errors import UnsupportedOpError

CPU = "CPUExecutionProvider"
_LOCK = threading.Lock()


@cache
def _onnxruntime_kernels() -> dict[tuple[str, str], list[tuple[int, int]]]:
    """Onnxruntime's CPU kernels: (domain, op type) -> version ranges ({} without it)."""
    try:
        from onnxruntime.capi import _pybind_state as state
    except ImportError:
        return {}
    found: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for kernel in state.get_all_opkernel_def():
        if kernel.provider == CPU:
            domain = "" if kernel.domain in ("", "ai.onnx") else kernel.domain
            found.setdefault((domain, kernel.op_name), []).append(tuple(kernel.version_range))
    return found


# Ops whose outputs are random: no run of them can be checked against another, so the
# reference refuses them rather than borrow onnxruntime's draws.
RANDOM_OPS = frozenset(
    {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Multinomial",
     "Bernoulli"}
)  # fmt: skip


def onnxruntime_runs(op_type: str, domain: str, opset: int) -> bool:
    """Whether onnxruntime's CPU provider has a kernel of ``domain::op_type`` at ``opset``.

    Random ops (:data:`RANDOM_OPS`) never count: their outputs cannot be checked.
    """
    if op_type in RANDOM_OPS:
        return False
    canonical = "" if domain in ("", "ai.onnx") else domain
    ranges = _onnxruntime_kernels().get((canonical, op_type), [])
    return any(low <= opset <= high for low, high in ranges)


def borrowed_kernel(
    op_type: str, domain: str, opset: int, attrs: Mapping[str, Any], num_outputs: int
) -> Callable[..., tuple[np.ndarray, ...]]:
    """The kernel of a node that onnxruntime runs: ``f(*inputs) -> tuple of outputs``.

    Absent optional inputs are passed as None; outputs are all ``num_outputs`` of them.
    Raises :class:`UnsupportedOpError` when onnxruntime has no kernel for the op either,
    or rejects the node.
    """
    if not onnxruntime_runs(op_type, domain, opset):
        name = f"{domain}::{op_type}" if domain else op_type
        raise UnsupportedOpError(f"op {name} has no reference kernel, nor one in onnxruntime")
    attributes = [_attribute(key, value) for key, value in attrs.items()]
    sessions: dict[tuple[Any, ...], Any] = {}

    def call(*inputs: np.ndarray | None) -> tuple[np.ndarray, ...]:
        key = tuple(None if x is None else (np.asarray(x).dtype.str, np.ndim(x)) for x in inputs)
        with _LOCK:
            session = sessions.get(key)
            if session is None:
                session = sessions[key] = _session(
                    op_type, domain, opset, attributes, inputs, num_outputs
                )
        feeds = {f"in{i}": np.asarray(x) for i, x in enumerate(inputs) if x is not None}
        try:
            return tuple(session.run(None, feeds))
        except Exception as error:  # onnxruntime's exception types are not importable stably
            raise ValueError(f"onnxruntime: {str(error).splitlines()[0]}") from None

    return call


def _session(
    op_type: str,
    domain: str,
    opset: int,
    attributes: list[onnx.AttributeProto],
    inputs: tuple[np.ndarray | None, ...],
    num_outputs: int,
) -> Any:
    """An onnxruntime session of the one node, for inputs of these dtypes and ranks."""
    import onnxruntime as ort

    names = ["" if x is None else f"in{i}" for i, x in enumerate(inputs)]
    outputs = [f"out{i}" for i in range(num_outputs)]
    node = helper.make_node(op_type, names, outputs, domain=domain or None)
    node.attribute.extend(attributes)
    declared = [
        helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype), [None] * np.ndim(x)
        )
        for name, x in zip(names, inputs, strict=True)
        if x is not None
    ]
    results = [onnx.ValueInfoProto(name=name) for name in outputs]
    graph = helper.make_graph([node], "borrowed", declared, results)
    imports = [helper.make_opsetid(domain, opset)]
    if domain:
        imports.append(helper.make_opsetid("", 17))
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    try:
        return ort.InferenceSession(model.SerializeToString(), options, providers=[CPU])
    except Exception as error:  # onnxruntime's exception types are not importable stably
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UnsupportedOpError(f"onnxruntime rejects {op_type}: {first}") from None


def _attribute(name: str, value: Any) -> onnx.AttributeProto:
    """An attribute as ONNX spells it, from the Python value import made of it."""
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, numpy_helper.from_array(value))
    if isinstance(value, bytes):
        return helper.make_attribute(name, value)
    if isinstance(value, list | tuple) and value and isinstance(value[0], bytes):
        return helper.make_attribute(name, list(value))
    return helper.make_attribute(name, value)
