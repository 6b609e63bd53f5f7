"""Elementwise ops with numpy broadcasting, fused into one generated kernel per chain.

A chain of elementwise nodes (each consuming the previous one's output, which nothing else
reads) becomes one kernel: every operand is loaded once, each node is one C expression,
only the last result is stored. Operand layouts are reduced first: dims of size one are
dropped and adjacent dims merged wherever every operand stays affine in the merged index.
The kernel runs over (inner index, outer row); a work-item decodes its row's outer
coordinates with a few integer divisions and adds the inner index times the inner stride.
The source depends on the expressions, the collapsed rank and each operand's kind (full,
row-broadcast, inner-broadcast, strided, scalar), never on sizes or strides, which are
kernel arguments; constant scalars are arguments too, so few programs are ever built.
Transpose and Expand (in :mod:`tensor_ops`) reuse the generator as strided and broadcasting
copies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autopart.ir.graph import Graph, Node
from autopart.targets.opencl.lowering import (
    Builder,
    Group,
    const,
    is_f32,
    register,
    shape,
    single_f32_output,
)
from autopart.targets.opencl.subgraph import IN, OUT, Launch, Step

MAX_OPERANDS = 12
# ops fused into one kernel at most: a longer chain makes several kernels, so that grouping
# stays linear in the chain and no kernel's source grows without end (a 50,000-op chain)
MAX_CHAIN = 256
MAX_ELEMENTS = 2**31 - 1


def literal(value: float) -> str:
    """``value`` as an OpenCL C float literal."""
    value = float(np.float32(value))
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    return f"{value!r}f"


def _attr(node: Node, name: str, default: float) -> str:
    return literal(node.attrs.get(name, default))


UNARY: dict[str, str] = {
    "Relu": "RELU({0})",
    "Abs": "ABSF({0})",
    "Neg": "(-{0})",
    "Exp": "exp({0})",
    "Log": "log({0})",
    "Sqrt": "sqrt({0})",
    "Reciprocal": "(1.0f / {0})",
    "Floor": "floor({0})",
    "Ceil": "ceil({0})",
    "Round": "rint({0})",
    "Sign": "sign({0})",
    "Sin": "sin({0})",
    "Cos": "cos({0})",
    "Tan": "tan({0})",
    "Asin": "asin({0})",
    "Acos": "acos({0})",
    "Atan": "atan({0})",
    "Sinh": "sinh({0})",
    "Cosh": "cosh({0})",
    "Asinh": "asinh({0})",
    "Acosh": "acosh({0})",
    "Atanh": "atanh({0})",
    "Tanh": "tanh({0})",
    "Erf": "erf({0})",
    "Sigmoid": "(1.0f / (1.0f + exp(-{0})))",
    "Softsign": "({0} / (1.0f + ABSF({0})))",
    "Softplus": "(RELU({0}) + log1p(exp(-ABSF({0}))))",
    "Mish": "({0} * tanh(RELU({0}) + log1p(exp(-ABSF({0})))))",
    "HardSwish": "({0} * CLAMPF({0} / 6.0f + 0.5f, 0.0f, 1.0f))",
}
BINARY: dict[str, str] = {
    "Add": "({0} + {1})",
    "Sub": "({0} - {1})",
    "Mul": "({0} * {1})",
    "Div": "({0} / {1})",
    "Pow": "pow({0}, {1})",
    "PRelu": "({0} >= 0.0f ? {0} : {0} * {1})",
}
VARIADIC = ("Sum", "Max", "Min", "Mean")


def _with_attrs(node: Node, graph: Graph) -> str | None:
    """The expression template of an op whose constants come from attributes or inputs."""
    op = node.op_type
    if op == "LeakyRelu":
        return f"({{0}} >= 0.0f ? {{0}} : {{0}} * {_attr(node, 'alpha', 0.01)})"
    if op == "Elu":
        return f"({{0}} > 0.0f ? {{0}} : {_attr(node, 'alpha', 1.0)} * expm1({{0}}))"
    if op == "Celu":
        alpha = _attr(node, "alpha", 1.0)
        return f"({{0}} > 0.0f ? {{0}} : {alpha} * expm1({{0}} / {alpha}))"
    if op == "Selu":
        alpha = _attr(node, "alpha", 1.67326319217681884765625)
        gamma = _attr(node, "gamma", 1.05070102214813232421875)
        return f"({gamma} * ({{0}} > 0.0f ? {{0}} : {alpha} * expm1({{0}})))"
    if op == "HardSigmoid":
        alpha, beta = _attr(node, "alpha", 0.2), _attr(node, "beta", 0.5)
        return f"CLAMPF({{0}} * {alpha} + {beta}, 0.0f, 1.0f)"
    if op == "ThresholdedRelu":
        return f"({{0}} > {_attr(node, 'alpha', 1.0)} ? {{0}} : 0.0f)"
    if op == "Gelu":
        if node.attrs.get("approximate", "none") == "tanh":
            return (
                "(0.5f * {0} * (1.0f + tanh(0.7978845608028654f * "
                "({0} + 0.044715f * {0} * {0} * {0}))))"
            )
        return "(0.5f * {0} * (1.0f + erf({0} * 0.7071067811865476f)))"
    if op == "Clip":
        low, high = _clip_bounds(node, graph)
        return f"CLAMPF({{0}}, {literal(low)}, {literal(high)})"
    return None


def _clip_bounds(node: Node, graph: Graph) -> tuple[float, float]:
    low = node.attrs.get("min", -np.inf)
    high = node.attrs.get("max", np.inf)
    inputs = [*node.inputs, "", ""]
    if inputs[1]:
        low = float(np.asarray(const(graph, inputs[1])).ravel()[0])
    if inputs[2]:
        high = float(np.asarray(const(graph, inputs[2])).ravel()[0])
    return float(low), float(high)


ATTR_OPS = (
    "LeakyRelu",
    "Elu",
    "Celu",
    "Selu",
    "HardSigmoid",
    "ThresholdedRelu",
    "Gelu",
    "Clip",
)
ELEMENTWISE_OPS = frozenset([*UNARY, *BINARY, *VARIADIC, *ATTR_OPS, "BatchNormalization"])


def data_inputs(node: Node) -> list[str]:
    """The inputs an elementwise node reads as tensors (attribute-like inputs excluded)."""
    if node.op_type in UNARY or node.op_type in ATTR_OPS:
        return node.inputs[:1]
    if node.op_type == "BatchNormalization":
        return node.inputs[:1]
    return node.present_inputs


def broadcast_shape(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    """Numpy's broadcast of ``shapes``, or None when they do not broadcast."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def supports_elementwise(node: Node, graph: Graph) -> bool:
    """Float32 data inputs broadcasting (numpy rules) to the float32 output's shape."""
    if not single_f32_output(node, graph):
        return False
    op = node.op_type
    names = data_inputs(node)
    if not names or not all(is_f32(graph, name) for name in names):
        return False
    if op in BINARY and len(names) != 2:
        return False
    if op == "Clip" and any(name and const(graph, name) is None for name in node.inputs[1:3]):
        return False
    if op == "PRelu" and graph.opset_of(node) < 7:
        return False
    if "axis" in node.attrs and op in BINARY:  # legacy (opset < 7) axis broadcasting
        return False
    if op == "BatchNormalization" and not _supports_batch_norm(node, graph):
        return False
    out = shape(graph, node.outputs[0])
    if math.prod(out) > MAX_ELEMENTS:
        return False
    return broadcast_shape([shape(graph, name) for name in names]) == out


def _supports_batch_norm(node: Node, graph: Graph) -> bool:
    if node.attrs.get("training_mode", 0) or not node.attrs.get("spatial", 1):
        return False
    if len(node.present_inputs) != 5 or len(shape(graph, node.inputs[0])) < 2:
        return False
    channels = shape(graph, node.inputs[0])[1]
    for name in node.inputs[1:5]:
        data = const(graph, name)
        if data is None or data.size != channels or not np.issubdtype(data.dtype, np.floating):
            return False
    return True


# -- operands and layout ------------------------------------------------------------------------
@dataclass
class Operand:
    """One tensor a fused kernel reads: a step input (by name) or resident constant data."""

    shape: tuple[int, ...]
    name: str | None = None  # graph value read per run
    data: np.ndarray | None = None  # constant data, uploaded once
    strides: tuple[int, ...] | None = None  # element strides over the output dims

    @property
    def scalar(self) -> bool:
        """A constant with one element: passed as a float kernel argument."""
        return self.data is not None and self.data.size == 1


def broadcast_strides(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-contiguous ``in_shape`` tensor broadcast to ``out_shape``."""
    rank = len(out_shape)
    padded = (1,) * (rank - len(in_shape)) + tuple(in_shape)
    strides, step = [0] * rank, 1
    for axis in range(rank - 1, -1, -1):
        strides[axis] = 0 if padded[axis] == 1 else step
        step *= padded[axis]
    return tuple(strides)


def collapse(
    out_shape: tuple[int, ...], strides: list[tuple[int, ...]]
) -> tuple[list[int], list[list[int]]]:
    """Drop 1-dims and merge adjacent dims where every operand stays affine; rank >= 1."""
    keep = [axis for axis, size in enumerate(out_shape) if size != 1]
    dims = [out_shape[axis] for axis in keep] or [1]
    cols = [[s[axis] for axis in keep] or [0] for s in strides]
    axis = len(dims) - 2
    while axis >= 0:
        if all(col[axis] == col[axis + 1] * dims[axis + 1] for col in cols):
            dims[axis : axis + 2] = [dims[axis] * dims[axis + 1]]
            for col in cols:
                col[axis : axis + 2] = [col[axis + 1]]
        axis -= 1
    return dims, cols


def generate(expressions: list[str], kinds: list[str], rank: int) -> str:
    """OpenCL C for a fused kernel ``ew`` over ``rank`` collapsed dims.

    ``kinds[j]`` is operand ``j``'s layout: ``full`` (same as the output), ``row`` (inner
    stride 1), ``bcast`` (inner stride 0), ``strided`` or ``scalar``. ``expressions`` are
    C expressions over ``v<j>`` (operands) and ``t<k>`` (earlier results); the last is
    stored.
    """
    outer = range(1, rank)
    params = ["__global float* restrict out", "const int L"]
    params += [f"const int D{k}" for k in outer]
    loads = []
    for j, kind in enumerate(kinds):
        if kind == "scalar":
            params.append(f"const float v{j}")
            continue
        params.append(f"__global const float* restrict in{j}")
        first = 0 if kind == "strided" else 1
        if kind != "full":
            params += [f"const int s{j}_{k}" for k in range(first, rank)]
        terms = [f"i{k} * s{j}_{k}" for k in outer]
        if kind == "full":
            index = "(size_t)r * L + j"
        else:
            head = {"row": ["j"], "bcast": [], "strided": [f"j * s{j}_0"]}[kind]
            index = " + ".join(head + terms) or "0"
        loads.append(f"    const float v{j} = in{j}[{index}];")
    decode = []
    for k in outer:
        if k < rank - 1:
            decode.append(f"    const int i{k} = q % D{k}; q /= D{k};")
        else:
            decode.append(f"    const int i{k} = q;")
    body = [f"    const float t{k} = {expr};" for k, expr in enumerate(expressions)]
    lines = [
        f"__kernel void ew({', '.join(params)})",
        "{",
        "    const int j = get_global_id(0);",
        "    const int r = get_global_id(1);",
        "    if (j >= L) return;",
        "    int q = r;",
        *decode,
        *loads,
        *body,
        f"    out[(size_t)r * L + j] = t{len(expressions) - 1};",
        "}",
    ]
    return "\n".join(lines) + "\n"


def fused_step(
    builder: Builder,
    node: Node,
    operands: list[Operand],
    expressions: list[str],
    out_name: str,
    out_shape: tuple[int, ...],
) -> Step:
    """One step computing ``expressions`` over ``operands`` into ``out_name``."""
    buffers = [op for op in operands if not op.scalar]
    strides = [op.strides or broadcast_strides(op.shape, out_shape) for op in buffers]
    dims, cols = collapse(out_shape, strides)
    rank = len(dims)
    kinds, args, inputs = [], [], []
    columns = iter(cols)
    for op in operands:
        if op.scalar:
            kinds.append("scalar")
            args.append([np.float32(np.asarray(op.data).ravel()[0])])
            continue
        col = next(columns)
        contiguous = [math.prod(dims[k + 1 :]) for k in range(rank)]
        kind = (
            "full"
            if col == contiguous
            else "row"
            if col[-1] == 1
            else "bcast"
            if col[-1] == 0
            else "strided"
        )
        kinds.append(kind)
        if op.name is not None:
            buffer = IN[len(inputs)]
            inputs.append(op.name)
        else:
            buffer = builder.upload(np.asarray(op.data, dtype=np.float32))
        first = 0 if kind == "strided" else 1
        args.append(
            [buffer] + [np.int32(col[rank - 1 - k]) for k in range(first, rank) if kind != "full"]
        )
    source = generate(expressions, kinds, rank)
    kernel = builder.kernel_from_source(source, "ew", node)
    inner, rows = dims[-1], math.prod(dims[:-1])
    flat = [OUT[0], np.int32(inner)] + [np.int32(dims[rank - 1 - k]) for k in range(1, rank)]
    for group in args:
        flat.extend(group)
    launch = Launch(kernel, (inner, rows), None, flat)
    return Step(node.name, inputs, [out_name], [out_shape], launches=[launch])


# -- lowering of fused chains ---------------------------------------------------------------------
# x ** e for constant exponents that need no pow() (a slow library call on CPU devices)
POWERS = {
    0.5: "sqrt({0})", 1.0: "{0}", 2.0: "({0} * {0})", 3.0: "({0} * {0} * {0})",
    4.0: "(({0} * {0}) * ({0} * {0}))", -1.0: "(1.0f / {0})", -0.5: "rsqrt({0})",
}  # fmt: skip


def _template(node: Node, graph: Graph) -> Callable[[list[str]], str]:
    op = node.op_type
    exponent = const(graph, node.inputs[1]) if op == "Pow" else None
    if exponent is not None and exponent.size == 1 and float(exponent.ravel()[0]) in POWERS:
        power = POWERS[float(exponent.ravel()[0])]
        return lambda args: power.format(args[0])
    if op in UNARY:
        return lambda args: UNARY[op].format(*args)
    if op in BINARY:
        return lambda args: BINARY[op].format(*args)
    if op == "Sum":
        return lambda args: "(" + " + ".join(args) + ")"
    if op == "Mean":
        return lambda args: f"(({' + '.join(args)}) / {literal(len(args))})"
    if op in ("Max", "Min"):
        fn = "MAXF" if op == "Max" else "MINF"

        def nested(args: list[str]) -> str:
            result = args[0]
            for arg in args[1:]:
                result = f"{fn}({result}, {arg})"
            return result

        return nested
    if op == "BatchNormalization":
        return lambda args: f"({args[0]} * {args[1]} + {args[2]})"
    template = _with_attrs(node, graph)
    assert template is not None
    return lambda args: template.format(*args)


def _batch_norm_operands(node: Node, graph: Graph) -> list[Operand]:
    scale, bias, mean, var = (np.asarray(const(graph, n), np.float64) for n in node.inputs[1:5])
    epsilon = float(node.attrs.get("epsilon", 1e-5))
    inv = scale / np.sqrt(var + epsilon)
    shift = bias - mean * inv
    rank = len(shape(graph, node.inputs[0]))
    channel = (-1,) + (1,) * (rank - 2)
    return [
        Operand(tuple(inv.reshape(channel).shape), data=inv.astype(np.float32).reshape(channel)),
        Operand(tuple(inv.reshape(channel).shape), data=shift.astype(np.float32).reshape(channel)),
    ]


def lower_chain(builder: Builder, group: Group) -> list[Step]:
    """One fused kernel for a chain of elementwise nodes."""
    graph = builder.graph
    operands: list[Operand] = []
    index: dict[str, str] = {}  # value name -> C variable
    expressions: list[str] = []

    def operand(op: Operand, key: str | None) -> str:
        if key is not None and key in index:
            return index[key]
        operands.append(op)
        var = f"v{len(operands) - 1}"
        if key is not None:
            index[key] = var
        return var

    for node in group.nodes:
        args = []
        for name in data_inputs(node):
            data = const(graph, name)
            if name in index:
                args.append(index[name])
            elif data is not None:
                args.append(operand(Operand(shape(graph, name), data=data), name))
            else:
                args.append(operand(Operand(shape(graph, name), name=name), name))
        if node.op_type == "BatchNormalization":
            args += [operand(op, None) for op in _batch_norm_operands(node, graph)]
        expressions.append(_template(node, graph)(args))
        index[node.outputs[0]] = f"t{len(expressions) - 1}"
    out = group.output
    return [fused_step(builder, group.head, operands, expressions, out, shape(graph, out))]


register(*ELEMENTWISE_OPS, supports=supports_elementwise, kind="elementwise")(lower_chain)


def can_extend(group: Group, node: Node, graph: Graph) -> bool:
    """Whether elementwise ``node`` (reading ``group``'s output) may join the chain."""
    if node.op_type not in ELEMENTWISE_OPS or not supports_elementwise(node, graph):
        return False
    if shape(graph, node.outputs[0]) != shape(graph, group.output):
        return False
    if len(group.nodes) >= MAX_CHAIN:
        return False
    return operand_count([*group.nodes, node]) <= MAX_OPERANDS


def operand_count(nodes: list[Node]) -> int:
    """How many tensors a kernel fusing ``nodes`` loads (batch norms bring two each)."""
    produced = {node.outputs[0] for node in nodes}
    external = {name for node in nodes for name in data_inputs(node) if name not in produced}
    return len(external) + 2 * sum(node.op_type == "BatchNormalization" for node in nodes)
