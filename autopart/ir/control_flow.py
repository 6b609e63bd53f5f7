"""What the IR knows about control-flow nodes (If, Loop, Scan)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from autopart.ir.graph import Graph, Node
from autopart.ir.onnx_export import value_info

CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
_EMBED_BYTES = 4096  # outer constants embedded for the body's shape inference


def unknown_shape_hint(graph: Graph, name: str) -> str:
    """Why a control-flow output may have no static shape (empty for other values)."""
    producer = graph.value(name).producer
    if producer is None or producer.op_type not in CONTROL_FLOW:
        return ""
    if producer.op_type == "If" and producer.inputs and producer.inputs[0]:
        if graph.value(producer.inputs[0]).is_const:
            return (
                f" (an output of If node {producer.name!r}, whose taken branch computes "
                "shapes from data; declare the output's shape in the model)"
            )
        sources = _inputs_behind(graph, producer.inputs[0])
        fix = ", ".join(f"--freeze {source}=VALUE" for source in sources)
        return (
            f" (an output of If node {producer.name!r}, whose condition depends on "
            f"{'the inputs ' + str(sources) if sources else 'data'}"
            f"{'; fix them with ' + fix if sources else ''})"
        )
    return (
        f" (an output of {producer.op_type} node {producer.name!r}: its size depends on "
        "data; declare the output's shape in the model)"
    )


def fix_loop_shapes(graph: Graph) -> None:
    """Give a Loop's outputs static shapes where its iteration count is known before running.

    That is when its trip count is a constant and its condition is absent or constant, and
    the body passes its condition through unchanged (so it never stops early): the loop
    then runs exactly that many times (none if the condition is false). The body's output
    shapes come from ONNX shape inference of the body alone, its loop-carried inputs typed
    as the Loop's; they hold for every iteration only if each carried value keeps its shape,
    which is required too. Otherwise the shapes stay unknown (and import refuses them).
    """
    for node in graph.nodes:
        if node.op_type != "Loop" or not isinstance(node.attrs.get("body"), onnx.GraphProto):
            continue
        if all(_static(graph.value(name).shape) for name in node.outputs if name):
            continue
        count = _iterations(graph, node)
        shapes = _body_shapes(graph, node) if count is not None else None
        if count is None or shapes is None:
            continue
        carried = node.inputs[2:]
        if any(shapes[1 + j] != graph.value(name).shape for j, name in enumerate(carried)):
            continue
        for j, name in enumerate(node.outputs):
            value = graph.value(name) if name else None
            if value is None or _static(value.shape):
                continue
            value.shape = shapes[1 + j] if j < len(carried) else (count, *shapes[1 + j])


def _static(shape: tuple[int | None, ...] | None) -> bool:
    return shape is not None and all(dim is not None for dim in shape)


def _iterations(graph: Graph, node: Node) -> int | None:
    """How many times ``node`` (a Loop) runs, when that is fixed by constants, else None."""
    body: onnx.GraphProto = node.attrs["body"]
    trip = graph.value(node.inputs[0]).const if node.inputs and node.inputs[0] else None
    cond_name = node.inputs[1] if len(node.inputs) > 1 else ""
    cond = graph.value(cond_name).const if cond_name else np.array(True)
    if trip is None or cond is None or trip.size != 1 or cond.size != 1:
        return None
    if not bool(cond.reshape(-1)[0]):
        return 0
    cond_in, cond_out = body.input[1].name, body.output[0].name
    passes = cond_out == cond_in or any(
        n.op_type == "Identity" and list(n.output) == [cond_out] and list(n.input) == [cond_in]
        for n in body.node
    )
    return max(int(trip.reshape(-1)[0]), 0) if passes else None


def _body_shapes(graph: Graph, node: Node) -> list[tuple[int, ...]] | None:
    """Static shapes of a Loop body's outputs, its inputs typed as the Loop's; None if unknown."""
    body: onnx.GraphProto = node.attrs["body"]
    alone = onnx.GraphProto()
    alone.CopyFrom(body)
    del alone.input[:], alone.output[:]
    alone.input.extend(
        [
            helper.make_tensor_value_info(body.input[0].name, onnx.TensorProto.INT64, []),
            helper.make_tensor_value_info(body.input[1].name, onnx.TensorProto.BOOL, []),
        ]
    )
    for info, name in zip(body.input[2:], node.inputs[2:], strict=False):
        typed = value_info(graph, name)
        typed.name = info.name
        alone.input.append(typed)
    for name in node.captures:
        data = graph.value(name).const
        if data is not None and data.nbytes <= _EMBED_BYTES:
            alone.initializer.append(numpy_helper.from_array(data, name))
        else:
            alone.input.append(value_info(graph, name))
    alone.output.extend(helper.make_empty_tensor_value_info(o.name) for o in body.output)
    opsets = [helper.make_opsetid(domain, version) for domain, version in graph.opsets.items()]
    model = helper.make_model(alone, opset_imports=opsets)
    model.ir_version = max(helper.find_min_ir_version_for(opsets, ignore_unknown=True), 4)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except (onnx.shape_inference.InferenceError, RuntimeError):
        return None
    shapes = []
    for output in inferred.graph.output:
        tensor = output.type.tensor_type
        if not tensor.HasField("shape") or not all(
            d.HasField("dim_value") for d in tensor.shape.dim
        ):
            return None
        shapes.append(tuple(d.dim_value for d in tensor.shape.dim))
    return shapes


def _inputs_behind(graph: Graph, name: str) -> list[str]:
    """The graph inputs value ``name`` is computed from, in the graph's input order."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        producer = graph.value(current).producer
        if producer is not None:
            todo.extend(producer.present_inputs)
    return [source for source in graph.inputs if source in seen]
