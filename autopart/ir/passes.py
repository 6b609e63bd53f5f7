"""Simplifying passes over the graph IR. Each is ``Graph -> bool`` (whether it changed).

Passes edit nodes in place and end with :meth:`Graph.rebuild`. A node that replaces others
keeps the virtual device of the node it stands for.
"""

from __future__ import annotations

from collections.abc import Set

import numpy as np

from autopart.errors import ModelError, UnsupportedOpError
from autopart.ir.fold_if import inline_constant_ifs
from autopart.ir.graph import Graph, Node, Value
from autopart.limits import check_fits
from autopart.ops import KERNEL_ERRORS, bind, has_kernel, kernel_failure, refusal

# Ops whose result is not a function of their inputs must never be folded.
_NEVER_FOLD = frozenset(
    {
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
        # A loop's run time is not bounded by its sizes: never run one while importing.
        "Loop",
        "Scan",
    }
)
_PASSTHROUGH = frozenset({"Identity", "Dropout"})


def simplify(graph: Graph, keep_ifs: Set[str] = frozenset()) -> bool:
    """Run every simplifying pass once; return whether anything changed.

    An If whose condition folded to a constant is replaced by its taken branch, unless it is
    named in ``keep_ifs``; the new nodes have no shapes yet, so a caller runs shape
    inference and simplifies again until nothing changes (as import does).
    """
    changed = fold_constants(graph)
    changed |= inline_constant_ifs(graph, keep_ifs)
    changed |= remove_passthrough(graph)
    changed |= fold_batchnorm_into_conv(graph)
    changed |= eliminate_dead_code(graph)
    return changed


def _evaluate(graph: Graph, node: Node) -> tuple[np.ndarray, ...]:
    opset = graph.opset_of(node)
    kernel = bind(node.op_type, node.domain, opset, node.attrs, len(node.outputs), node.captures)
    args = [*node.inputs, *node.captures]
    try:
        return kernel(*[graph.value(name).const if name else None for name in args])
    except KERNEL_ERRORS as error:
        raise ModelError(
            f"node {node.name!r} ({node.op_type}) fails on the model's constants: "
            f"{kernel_failure(error)}"
        ) from error


def _static(graph: Graph, value: Value) -> bool:
    """Whether ``value``'s shape is known in every dim and does not depend on data."""
    shape = value.shape
    return (
        shape is not None
        and all(isinstance(dim, int | np.integer) for dim in shape)
        and value.name not in graph.meta.get("dynamic_values", ())
    )


def fold_constants(graph: Graph) -> bool:
    """Evaluate nodes whose inputs are all constant, and Shape/Size of static shapes."""
    removed: list[Node] = []
    for node in graph.nodes:
        if node.op_type in _NEVER_FOLD or not has_kernel(
            node.op_type, node.domain, graph.opset_of(node)
        ):
            continue
        inputs = [graph.value(name) for name in node.present_inputs]
        if node.op_type in ("Shape", "Size") and _static(graph, inputs[0]):
            shape = np.array(inputs[0].shape, dtype=np.int64)
            start, end = node.attrs.get("start", 0), node.attrs.get("end")
            folded: tuple[np.ndarray, ...] = (
                (shape[start:end],)
                if node.op_type == "Shape"
                else (np.array(np.prod(shape), dtype=np.int64),)
            )
        elif all(v.is_const for v in inputs):
            _check_fold_size(graph, node)
            try:
                folded = _evaluate(graph, node)
            except UnsupportedOpError:
                continue
        else:
            continue
        for name, data in zip(node.outputs, folded, strict=False):
            if name:
                _make_const(graph.value(name), data)
        removed.append(node)
    if removed:
        gone = {id(n) for n in removed}
        graph.nodes = [n for n in graph.nodes if id(n) not in gone]
        graph.rebuild()
    return bool(removed)


def _check_fold_size(graph: Graph, node: Node) -> None:
    """Weigh what folding ``node`` would allocate against the memory available."""
    for name in node.outputs:
        if name and graph.value(name).shape is not None:
            check_fits(graph.value(name).nbytes, f"folding {node.op_type} node {node.name!r}")
    check_made_size(graph, node)


def check_made_size(graph: Graph, node: Node) -> None:
    """Bound the tensor a ConstantOfShape, Expand or Tile makes from its constant inputs.

    Their output size is given by data, so shape inference (which propagates that data)
    and folding would allocate it: both ask here first.
    """
    if node.op_type not in ("ConstantOfShape", "Expand", "Tile"):
        return
    consts = [graph.value(name).const if name else None for name in node.inputs]
    sizes = [*consts, None, None][0 if node.op_type == "ConstantOfShape" else 1]
    if sizes is not None and np.issubdtype(sizes.dtype, np.integer) and (sizes < 0).any():
        raise ModelError(
            f"{node.op_type} node {node.name!r} is given a negative size: {sizes.tolist()}"
        )
    elements = 0
    if node.op_type == "ConstantOfShape" and consts and consts[0] is not None:
        elements = int(np.prod(np.asarray(consts[0], dtype=np.float64)))
    elif len(consts) > 1 and consts[1] is not None:
        other = np.asarray(consts[1], dtype=np.float64).reshape(-1)
        value = graph.value(node.inputs[0])
        shape = value.shape if value.shape is not None else ()
        if node.op_type == "Tile":
            elements = int(np.prod(np.asarray(shape, dtype=np.float64)) * np.prod(other))
        else:
            rank = max(len(shape), other.size)
            dims = np.ones(rank)
            dims[rank - len(shape) :] = shape
            dims = np.maximum(dims, np.concatenate([np.ones(rank - other.size), other]))
            elements = int(np.prod(dims))
    if elements:
        check_fits(elements * 8, f"the output of {node.op_type} node {node.name!r}")


def _make_const(value: Value, data: np.ndarray) -> None:
    value.const = data if data.flags.c_contiguous else data.copy()
    value.shape = tuple(data.shape)
    value.dtype = data.dtype


def remove_passthrough(graph: Graph) -> bool:
    """Remove Identity and (inference-time) Dropout by rewiring their consumers."""
    changed = False
    for node in list(graph.nodes):
        if node.op_type not in _PASSTHROUGH or not node.present_inputs:
            continue
        if node.op_type == "Dropout" and (_may_train(graph, node) or _refused(graph, node)):
            continue  # training drops at random: the kernel refuses it, never ignores it
        source, result = node.inputs[0], node.outputs[0]
        if any(
            name
            for name in node.outputs[1:]
            if graph.value(name).consumers or name in graph.outputs
        ):
            continue  # a Dropout mask is used
        if result in graph.outputs:
            producer = graph.value(source).producer
            if producer is None or source in graph.outputs:
                continue
            producer.outputs = [result if o == source else o for o in producer.outputs]
            _rename_uses(graph, source, result)
        else:
            _rename_uses(graph, result, source)
        graph.nodes.remove(node)
        graph.rebuild()
        changed = True
    return changed


def _refused(graph: Graph, node: Node) -> bool:
    """Whether the reference kernels refuse ``node`` (so no pass may compute it either)."""
    opset = graph.opset_of(node)
    return refusal(node.op_type, node.domain, opset, node.attrs, len(node.inputs)) is not None


def _may_train(graph: Graph, node: Node) -> bool:
    """Whether a Dropout's ``training_mode`` input is present and not a constant false."""
    if len(node.inputs) < 3 or not node.inputs[2]:
        return False
    flag = graph.value(node.inputs[2]).const
    return flag is None or bool(np.asarray(flag).item())


def _rename_uses(graph: Graph, old: str, new: str) -> None:
    for node in graph.nodes:
        node.rename_input(old, new)


def fold_batchnorm_into_conv(graph: Graph) -> bool:
    """Fold an inference BatchNormalization into the Conv that alone feeds it.

    Legal when the Conv's output has no other use and every weight is constant.
    """
    changed = False
    for bn in list(graph.nodes):
        if bn.op_type != "BatchNormalization" or len([o for o in bn.outputs if o]) != 1:
            continue
        if _refused(graph, bn):
            continue  # training or per-activation statistics: not a fold of running stats
        conv = graph.value(bn.inputs[0]).producer
        params = [graph.value(name) for name in bn.inputs[1:5]]
        if (
            conv is None
            or conv.op_type != "Conv"
            or len(graph.value(conv.outputs[0]).consumers) != 1
            or conv.outputs[0] in graph.outputs
            or not all(p.is_const for p in params)
            or not graph.value(conv.inputs[1]).is_const
            or (
                len(conv.inputs) > 2 and conv.inputs[2] and not graph.value(conv.inputs[2]).is_const
            )
        ):
            continue
        scale, shift, mean, var = (p.const for p in params)  # type: ignore[misc]
        weight = graph.value(conv.inputs[1]).const
        assert weight is not None
        epsilon = float(bn.attrs.get("epsilon", 1e-5))
        factor = (scale / np.sqrt(var + epsilon)).astype(np.float64)
        bias = graph.value(conv.inputs[2]).const if len(conv.inputs) > 2 and conv.inputs[2] else 0.0
        new_weight = (weight * factor.reshape(-1, *([1] * (weight.ndim - 1)))).astype(weight.dtype)
        new_bias = ((bias - mean) * factor + shift).astype(weight.dtype)
        w_name, b_name = f"{conv.name}/folded_W", f"{conv.name}/folded_B"
        graph.values[w_name] = Value(w_name, new_weight.shape, new_weight.dtype, new_weight)
        graph.values[b_name] = Value(b_name, new_bias.shape, new_bias.dtype, new_bias)
        conv.inputs = [conv.inputs[0], w_name, b_name]
        conv.outputs = [bn.outputs[0]]
        conv.meta.setdefault("fused", []).append(bn.name)
        graph.nodes.remove(bn)
        graph.rebuild()
        changed = True
    return changed


def eliminate_dead_code(graph: Graph) -> bool:
    """Drop nodes whose outputs nobody uses, and values nothing refers to."""
    changed = False
    while True:
        dead = [
            node
            for node in graph.nodes
            if not any(graph.value(o).consumers or o in graph.outputs for o in node.outputs if o)
        ]
        if not dead:
            break
        for node in dead:
            graph.nodes.remove(node)
        graph.rebuild()
        changed = True
    used = set(graph.inputs) | set(graph.outputs)
    used.update(name for node in graph.nodes for name in [*node.present_inputs, *node.outputs])
    used.discard("")
    unused = [name for name in graph.values if name not in used]
    for name in unused:
        del graph.values[name]
    return changed
