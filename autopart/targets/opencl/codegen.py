"""The ``opencl`` codegen: generated and hand-written OpenCL C through pyopencl.

``supports`` is a precise predicate per op over attributes (the values each lowering
implements, :mod:`~autopart.targets.opencl.attributes`), shapes and dtypes (float32
compute; integer tensors only as constant shape operands); ``reason`` says why not.
``compile`` groups the nodes (a matrix product absorbs per-channel Mul/Add, a same-shape
residual Add/Sum and a Relu into its epilogue; chains of elementwise ops fuse into one
kernel), lowers every group to kernel launches, uploads the constants once, and
precomputes where each intermediate is released. The compiled subgraph enqueues on the
placement's unit queue (or the device queue) and reports device time measured with
profiling events through ``run_timed``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from autopart.errors import AutopartError, TargetError
from autopart.ir.graph import Graph, Node
from autopart.ir.observe import touches_dynamic
from autopart.targets.codegen import HOST, Codegen, Placement
from autopart.targets.device_contract import Device
from autopart.targets.opencl import (
    conv,
    deconv,
    elementwise,
    matmul,
    resample,
    slicing,
    tensor_ops,
)
from autopart.targets.opencl.attributes import attribute_refusal
from autopart.targets.opencl.device import (
    OpenCLDevice,
    discover_opencl_devices,
    have_pyopencl,
    unusable_opencl_devices,
)
from autopart.targets.opencl.lowering import OPS, Builder, Group, const, is_f32, shape
from autopart.targets.opencl.subgraph import OpenCLSubgraph, Step
from autopart.targets.training import training_refusal

__all__ = [
    "OpenCLCodegen",
    "conv",
    "deconv",
    "elementwise",
    "matmul",
    "plan_groups",
    "resample",
    "slicing",
    "tensor_ops",
]

AFFINE_OPS = ("Mul", "Add", "Sub", "Div")


class OpenCLCodegen(Codegen):
    """OpenCL kernels on an :class:`OpenCLDevice`, whole device or one unit."""

    name = "opencl"
    device_kind = "opencl"
    uses_units = True
    clock = "event"
    fuses = True
    library = "pyopencl"

    @classmethod
    def available(cls) -> bool:
        """Whether pyopencl is installed (compiling also needs an OpenCL device)."""
        return have_pyopencl()

    @classmethod
    def discover_devices(cls) -> Sequence[Device]:
        """Every OpenCL device here, ``opencl:0``, ``opencl:1``, ... (none without pyopencl)."""
        return discover_opencl_devices()

    @classmethod
    def left_out_devices(cls) -> Sequence[tuple[str, str]]:
        """OpenCL devices whose compiler cannot build a one-line kernel, and why."""
        return unusable_opencl_devices()

    def supports(self, node: Node, graph: Graph) -> bool:
        """Whether the op, its attributes, input shapes and dtypes have an OpenCL lowering."""
        return self.reason(node, graph) is None

    def reason(self, node: Node, graph: Graph) -> str | None:
        """Why no OpenCL lowering runs ``node`` (one line), or None when one does."""
        impl = OPS.get(node.op_type)
        if impl is None or node.domain not in ("", "ai.onnx"):
            return f"op {node.op_type} has no OpenCL kernel"
        refused = training_refusal(node, graph) or attribute_refusal(node.op_type, node.attrs)
        if refused:
            return refused
        if any(
            graph.value(name).shape is None for name in node.present_inputs + node.outputs if name
        ):
            return "a shape is not static"
        if touches_dynamic(graph, node):
            return "a shape depends on data, and OpenCL kernels are built for one shape"
        try:
            if impl.supports(node, graph):
                return None
        except (AutopartError, KeyError, IndexError, TypeError, ValueError):
            pass
        return "no OpenCL kernel for these dtypes, shapes or non-constant operands"

    def compile(
        self,
        graph: Graph,
        nodes: Sequence[Node],
        inputs: Sequence[str],
        outputs: Sequence[str],
        placement: Placement = HOST,
    ) -> OpenCLSubgraph:
        """Lower ``nodes`` into kernels on ``placement``; constants are uploaded now.

        Inputs that are graph constants are made resident rather than read from the
        environment. Raises :class:`~autopart.errors.UnsupportedOpError` for unsupported
        nodes and :class:`~autopart.errors.TargetError` for a non-OpenCL placement or a
        kernel that fails to build.
        """
        device = placement.device
        if not isinstance(device, OpenCLDevice):
            raise TargetError(f"codegen opencl runs on opencl devices, not on {device.name}")
        self.check_supported(graph, nodes)
        builder = Builder(device, graph, placement.unit)
        steps: list[Step] = []
        for group in plan_groups(graph, nodes, outputs):
            steps.extend(OPS[group.head.op_type].lower(builder, group))
        produced = {name for step in steps for name in step.outputs}
        for step in steps:
            for name in step.inputs:
                if name not in produced and const(graph, name) is not None:
                    builder.use_constant(name)
        available = produced | set(inputs) | set(builder.constants)
        for step in steps:
            missing = [name for name in step.inputs if name not in available]
            if missing:
                raise TargetError(
                    f"opencl subgraph reads {missing[0]!r}, which is neither an input nor "
                    "produced by its nodes"
                )
        for name in outputs:
            if name not in available:
                if const(graph, name) is None:
                    raise TargetError(f"opencl subgraph output {name!r} is never produced")
                builder.use_constant(name)
        finalise(steps, outputs, set(builder.constants))
        needed = {name for step in steps for name in step.inputs} | set(outputs)
        reads = {
            name: shape(graph, name)
            for name in inputs
            if name in needed and name not in builder.constants
        }
        return OpenCLSubgraph(
            device, placement.unit, steps, builder.constants, inputs, outputs, reads
        )


# -- grouping -------------------------------------------------------------------------------------
def plan_groups(graph: Graph, nodes: Sequence[Node], outputs: Sequence[str]) -> list[Group]:
    """Group ``nodes`` for fusion, in an order where every group follows its producers.

    A value is fused away only when exactly one node of the subgraph reads it and it is
    not an output. A group runs at the position of its last node.
    """
    uses = Counter(name for node in nodes for name in set(node.present_inputs))
    escaping = set(outputs)
    open_groups: dict[str, Group] = {}
    position: dict[int, int] = {}
    groups: list[Group] = []
    for index, node in enumerate(nodes):
        group = None
        for name in node.present_inputs:
            candidate = open_groups.get(name)
            if candidate is None or uses[name] != 1 or name in escaping:
                continue
            if _absorb(candidate, node, name, graph):
                group = candidate
                del open_groups[name]
                break
        if group is None:
            group = _new_group(node, graph)
            groups.append(group)
        position[id(group)] = index
        if group.kind != "single" and node.outputs and node.outputs[0]:
            open_groups[node.outputs[0]] = group
    return sorted(groups, key=lambda g: position[id(g)])


def _new_group(node: Node, graph: Graph) -> Group:
    kind = OPS[node.op_type].kind
    group = Group(kind, [node])
    if kind == "gemm" and node.op_type in ("Gemm", "MatMul"):
        packed = matmul.packed_gemm(node, graph)
        group.meta["packed"] = packed
        c = node.inputs[2] if node.op_type == "Gemm" and len(node.inputs) > 2 else ""
        if not packed or (c and const(graph, c) is None):
            group.kind = "single"
        elif c:
            data = np.broadcast_to(const(graph, c), shape(graph, node.outputs[0]))
            if not np.all(data == data[:1]):  # a matrix C occupies the residual slot
                group.kind = "single"
    return group


def _channel_vector(data: np.ndarray, out: tuple[int, ...], axis: int) -> np.ndarray | None:
    """``data`` as one value per channel of ``out``'s ``axis``, or None if it varies elsewhere."""
    if data.ndim > len(out) or not np.issubdtype(data.dtype, np.floating):
        return None
    aligned = data.reshape((1,) * (len(out) - data.ndim) + data.shape)
    for dim, size in enumerate(aligned.shape):
        if dim != axis and size != 1:
            return None
        if dim == axis and size not in (1, out[axis]):
            return None
    return np.broadcast_to(aligned.reshape(-1), (out[axis],)).astype(np.float64)


def _absorb(group: Group, node: Node, name: str, graph: Graph) -> bool:
    """Try to fuse ``node`` (which reads ``group``'s output ``name``) into ``group``."""
    if group.kind == "elementwise":
        if elementwise.can_extend(group, node, graph):
            group.nodes.append(node)
            return True
        return False
    if group.kind != "gemm" or not node.outputs or not node.outputs[0]:
        return False
    out = shape(graph, group.output)
    if shape(graph, node.outputs[0]) != out or not is_f32(graph, node.outputs[0]):
        return False
    op = node.op_type
    others = [other for other in node.present_inputs if other != name]
    if op == "Relu" and not group.relu:
        group.relu = True
    elif op in AFFINE_OPS and len(node.present_inputs) == 2 and len(others) == 1:
        if group.relu or group.residual is not None:
            return False
        data = const(graph, others[0])
        axis = 1 if group.head.op_type == "Conv" else len(out) - 1
        vector = None if data is None else _channel_vector(np.asarray(data), out, axis)
        if vector is None:
            return _absorb_residual(group, node, others[0], graph)
        if op in ("Sub", "Div") and node.inputs[0] != name:
            return False
        _fold(group, op, vector)
    elif op == "Sum" and len(node.present_inputs) == 2 and len(others) == 1:
        return _absorb_residual(group, node, others[0], graph)
    else:
        return False
    group.nodes.append(node)
    return True


def _absorb_residual(group: Group, node: Node, other: str, graph: Graph) -> bool:
    if node.op_type not in ("Add", "Sum") or group.relu or group.residual is not None:
        return False
    if const(graph, other) is not None or not is_f32(graph, other):
        return False
    if shape(graph, other) != shape(graph, group.output):
        return False
    group.residual = other
    group.nodes.append(node)
    return True


def _fold(group: Group, op: str, vector: np.ndarray) -> None:
    """Compose ``x -> x op vector`` after the group's current per-channel affine map."""
    channels = vector.shape[0]
    scale = group.scale.astype(np.float64) if group.scale is not None else np.ones(channels)
    shift = group.shift.astype(np.float64) if group.shift is not None else np.zeros(channels)
    if op == "Mul":
        scale, shift = scale * vector, shift * vector
    elif op == "Div":
        scale, shift = scale / vector, shift / vector
    elif op == "Add":
        shift = shift + vector
    else:
        shift = shift - vector
    group.scale, group.shift = scale, shift


# -- buffer lifetimes ------------------------------------------------------------------------------
def finalise(steps: list[Step], outputs: Sequence[str], constants: set[str]) -> None:
    """Mark outputs that escape (directly or through views) and each value's last use."""
    escaping = set(outputs)
    for step in reversed(steps):
        if step.view is not None and escaping.intersection(step.outputs):
            escaping.update(step.inputs)
    keep = set(outputs) | constants
    last: dict[str, int] = {}
    for index, step in enumerate(steps):
        step.escapes = [name in escaping for name in step.outputs]
        for name in step.inputs:
            last[name] = index
        for name in step.outputs:
            last.setdefault(name, index)
    for name, index in last.items():
        if name not in keep:
            steps[index].free.append(name)
