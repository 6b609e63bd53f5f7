"""ONNX import: read a model safely, give every value a static shape, and simplify.

``load_graph(path_or_proto, input_shapes, freeze=...)`` is the single entry point. It
refuses files that are not ONNX, external data that escapes the model's folder, and values
whose shape cannot be made static, each with a one-line :class:`ModelError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper, helper, numpy_helper

from autopart.errors import ModelError, ResourceError, UnsupportedOpError
from autopart.ir.control_flow import fix_loop_shapes, unknown_shape_hint
from autopart.ir.fold_if import folded_ifs_behind
from autopart.ir.freeze import FreezeValues, frozen_arrays
from autopart.ir.graph import Graph, Node, Value
from autopart.ir.input_shapes import (
    InputShapes,
    declared_dims,
    defaulted_dims,
    resolve_input_shapes,
    shapes_from_samples,
)
from autopart.ir.node_order import sort_nodes
from autopart.ir.observe import PARTIAL_SHAPES, observe_shapes
from autopart.ir.onnx_export import to_onnx
from autopart.ir.passes import check_made_size, simplify
from autopart.ir.type_check import check_declared_types, check_types
from autopart.limits import check_fits
from autopart.ops.borrowed import onnxruntime_runs
from autopart.ops.subgraph import attribute_value, node_outer_names

# Every default-domain opset the installed onnx defines.
MIN_OPSET, MAX_OPSET = 1, onnx.defs.onnx_opset_version()
_SHAPE_INFERENCE_CONST_BYTES = 4096


def read_model(path: str | Path) -> onnx.ModelProto:
    """Parse an ONNX file, loading external data only from inside the model's folder."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"model file not found: {path}")
    if path.is_dir():
        raise ModelError(f"{path} is a directory, not an ONNX model file")
    if not path.is_file():
        raise ModelError(f"{path} is not a regular file (a device or a pipe), not an ONNX model")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError, OSError) as error:
        raise ModelError(f"{path} is not a valid ONNX model ({_first_line(error)})") from None
    _load_external_data(model, path.parent)
    return model


def _load_external_data(model: onnx.ModelProto, folder: Path) -> None:
    root = folder.resolve()
    for tensor in external_data_helper._get_all_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        entries = {entry.key: entry.value for entry in tensor.external_data}
        location = entries.get("location", "")
        target = (root / location).resolve()
        if Path(location).is_absolute() or not target.is_relative_to(root):
            raise ModelError(
                f"external data {location!r} of tensor {tensor.name!r} "
                f"escapes the model folder {root}"
            )
        if not target.is_file():
            raise ModelError(
                f"external data file {location!r} of tensor {tensor.name!r} is missing"
            )
    try:
        external_data_helper.load_external_data_for_model(model, str(root))
    except (OSError, ValueError) as error:
        raise ModelError(f"cannot load external data: {_first_line(error)}") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def load_graph(
    model: str | Path | onnx.ModelProto,
    input_shapes: InputShapes | None = None,
    simplify_graph: bool = True,
    freeze: FreezeValues | None = None,
    sample_shapes: Mapping[str, Sequence[int]] | None = None,
) -> Graph:
    """Import an ONNX model as a simplified :class:`Graph` with static shapes everywhere.

    ``input_shapes`` maps an input's name to its full shape, or a symbolic dim's name to
    its size (:mod:`autopart.ir.input_shapes`); other symbolic dims become 1. ``freeze``
    maps inputs to values they are fixed to: each becomes a constant, no longer an input
    (:mod:`autopart.ir.freeze`). ``sample_shapes`` are the shapes of the user's samples by
    input: they fix the inputs ``input_shapes`` leaves symbolic
    (:func:`~autopart.ir.input_shapes.shapes_from_samples`). Simplifying folds constants,
    and with them every ``If`` whose condition becomes constant (:mod:`autopart.ir.fold_if`),
    until nothing changes.
    """
    proto = model if isinstance(model, onnx.ModelProto) else read_model(model)
    _check(proto)
    check_declared_types(proto)
    graph = _graph_from_proto(proto, input_shapes or {}, freeze or {}, sample_shapes or {})
    check_declared_sizes(graph)
    infer_shapes(graph)
    check_types(graph)
    if simplify_graph:
        graph = _simplified(graph)
    _observe_what_depends_on_data(graph)
    _require_static_shapes(graph)
    return graph


def _observe_what_depends_on_data(graph: Graph) -> None:
    """Give values whose shapes depend on data the shapes of one reference run.

    They are marked dynamic (:mod:`autopart.ir.observe`). When that run fails, the values
    stay without shapes and the refusal names them, with its hint.
    """
    if not _missing_static_shapes(graph):
        return
    unknown = [
        name
        for node in graph.nodes
        for name in node.outputs
        if name
        and (
            graph.value(name).dtype is None
            or graph.value(name).shape is None
            or None in graph.value(name).shape  # type: ignore[operator]
        )
    ]
    with contextlib.suppress(ModelError):
        observe_shapes(graph, unknown)


def _simplified(graph: Graph) -> Graph:
    """``graph`` simplified until nothing changes, its Ifs folded where that keeps shapes static.

    Inside an If node a branch's values may be dynamic (its kernel runs the branch whole);
    folded, they need static shapes like any other. So when a value lacks one because an If
    was folded, simplifying starts over from ``graph`` with that If kept a node (as before
    folding existed); each start keeps at least one more If, and most models start once.
    """
    may_fold = any(node.op_type == "If" for node in graph.nodes)
    kept: set[str] = set()
    while True:
        attempt = graph.copy() if may_fold else graph  # the copy shares the constants
        while simplify(attempt, kept):
            infer_shapes(attempt)
        blamed = folded_ifs_behind(attempt, _missing_static_shapes(attempt)) - kept
        if not blamed:
            return attempt
        kept |= blamed


def _check(proto: onnx.ModelProto) -> None:
    if not proto.HasField("graph") or not (proto.graph.node or proto.graph.output):
        raise ModelError("the file holds no ONNX graph")
    default = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if default is not None and not MIN_OPSET <= default <= MAX_OPSET:
        raise ModelError(f"opset {default} is not supported (supported: {MIN_OPSET}-{MAX_OPSET})")
    _check_text(proto.graph)
    _check_ops_exist(proto)
    sort_nodes(proto.graph)
    try:
        onnx.checker.check_model(_skeleton(proto))
    except (onnx.checker.ValidationError, ValueError) as error:
        raise ModelError(f"invalid ONNX model: {_first_line(error)}") from None


def _check_text(graph: onnx.GraphProto) -> None:
    """Refuse names that are not UTF-8 text (protobuf hands them over as bytes)."""
    names: list[object] = [graph.name]
    for node in graph.node:
        names += [node.op_type, node.domain, node.name, *node.input, *node.output]
    for values in (graph.input, graph.output, graph.value_info, graph.initializer):
        names += [value.name for value in values]
    if not all(isinstance(name, str) for name in names):
        raise ModelError("invalid ONNX model: a name in its graph is not UTF-8 text")


def _check_ops_exist(proto: onnx.ModelProto) -> None:
    """Refuse ops that no ONNX schema defines, naming every one with its nodes.

    An op of onnxruntime's own (``com.microsoft``) is known too: the reference borrows its
    kernel (:mod:`autopart.ops.borrowed`).
    """
    functions = {(f.domain, f.name) for f in proto.functions}
    unknown: dict[str, list[str]] = {}
    for index, node in enumerate(proto.graph.node):
        domain = "" if node.domain == "ai.onnx" else node.domain
        if (domain, node.op_type) in functions or onnx.defs.has(node.op_type, domain):
            continue
        if onnxruntime_runs(node.op_type, domain, _opset(proto, domain)):
            continue  # onnxruntime's own op: the reference borrows its kernel
        label = f"{domain}::{node.op_type}" if domain else node.op_type
        unknown.setdefault(label, []).append(node.name or f"#{index}")
    if unknown:
        listed = "; ".join(
            f"{op} (nodes {', '.join(names)})" for op, names in sorted(unknown.items())
        )
        raise UnsupportedOpError(f"unknown op(s): {listed}")


def _opset(proto: onnx.ModelProto, domain: str) -> int:
    """The opset ``proto`` imports for ``domain`` (1 when it imports none)."""
    found = [
        o.version for o in proto.opset_import if (o.domain or "") in (domain, f"ai.onnx{domain}")
    ]
    return found[0] if found else 1


def _skeleton(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model with large initializers declared as typed inputs instead of embedded.

    The checker serialises the model it is given; without the weights that stays cheap.
    A graph output declared with no shape at all (onnxruntime runs such models; the checker
    requires the field) gets one symbolic dim here, for the checker only: import infers
    its shape as for any other value.
    """
    skeleton = onnx.ModelProto()
    skeleton.CopyFrom(proto) if not proto.graph.initializer else _copy_structure(proto, skeleton)
    for output in skeleton.graph.output:
        kind = output.type
        if kind.HasField("tensor_type") and not kind.tensor_type.HasField("shape"):
            kind.tensor_type.shape.dim.add().dim_param = "undeclared"
    return skeleton


def _copy_structure(proto: onnx.ModelProto, skeleton: onnx.ModelProto) -> None:
    graph = proto.graph
    for field_name in ("ir_version", "producer_name", "domain", "model_version"):
        setattr(skeleton, field_name, getattr(proto, field_name))
    skeleton.opset_import.extend(proto.opset_import)
    skeleton.functions.extend(proto.functions)
    target = skeleton.graph
    target.name = graph.name
    target.node.extend(graph.node)
    target.output.extend(graph.output)
    target.value_info.extend(graph.value_info)
    declared = {i.name for i in graph.input}
    target.input.extend(graph.input)
    for tensor in graph.initializer:
        if len(tensor.raw_data) + 4 * len(tensor.float_data) <= _SHAPE_INFERENCE_CONST_BYTES:
            target.initializer.append(tensor)
        elif tensor.name not in declared:
            target.input.append(
                helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims)
            )


def _type_of(
    info: onnx.ValueInfoProto, declared: bool = True
) -> tuple[tuple[int | None, ...] | None, np.dtype | None]:
    """The shape (None for an unknown dim) and dtype of ``info``, each None when unknown.

    In a ``declared`` type a negative dim is unknown (an exporter's -1); one that shape
    inference computed is kept, for :func:`check_declared_sizes` to refuse.
    """
    kind = info.type
    if kind.HasField("optional_type") and kind.optional_type.elem_type.HasField("tensor_type"):
        kind = kind.optional_type.elem_type  # an optional tensor is fed as a tensor
    tensor = kind.tensor_type
    if not kind.HasField("tensor_type") or tensor.elem_type == 0:
        return None, None
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
    except KeyError:
        raise ModelError(
            f"value {info.name!r} has element type {tensor.elem_type}, which onnx does not know"
        ) from None
    if not tensor.HasField("shape"):
        return None, dtype
    dims = tuple(
        d.dim_value if d.HasField("dim_value") and (d.dim_value >= 0 or not declared) else None
        for d in tensor.shape.dim
    )
    return dims, dtype


def _graph_from_proto(
    proto: onnx.ModelProto,
    input_shapes: InputShapes,
    freeze: FreezeValues,
    sample_shapes: Mapping[str, Sequence[int]],
) -> Graph:
    g = proto.graph
    values: dict[str, Value] = {}

    def value(name: str) -> Value:
        return values.setdefault(name, Value(name))

    for tensor in g.initializer:
        data = numpy_helper.to_array(tensor)
        values[tensor.name] = Value(tensor.name, tuple(data.shape), data.dtype, data)
    initializer_names = set(values)
    infos = [i for i in g.input if i.name not in initializer_names]
    inputs = [i.name for i in infos]
    declared = {i.name: (declared_dims(i), _type_of(i)[1]) for i in infos}
    frozen = frozen_arrays(declared, freeze)
    dims_of = {name: dims for name, (dims, _) in declared.items() if name not in frozen}
    input_shapes = {**input_shapes, **shapes_from_samples(dims_of, input_shapes, sample_shapes)}
    shapes = resolve_input_shapes(
        {name: dims for name, (dims, _) in declared.items()},
        input_shapes,
        {name: tuple(array.shape) for name, array in frozen.items()},
    )
    for info in [*g.input, *g.value_info, *g.output]:
        if info.name in initializer_names:
            continue
        shape, dtype = _type_of(info)
        v = value(info.name)
        v.shape = tuple(shape) if shape is not None else v.shape  # type: ignore[arg-type]
        v.dtype = dtype or v.dtype
    for name in inputs:
        values[name].shape = shapes[name]
    for name, array in frozen.items():
        values[name].const = array
    nodes = []
    names: set[str] = set()
    for index, proto_node in enumerate(g.node):
        name = proto_node.name or f"{proto_node.op_type}_{index}"
        if name in names:
            name = f"{name}_{index}"
        names.add(name)
        for out in proto_node.output:
            if out:
                value(out)
        for inp in proto_node.input:
            if inp:
                value(inp)
        attrs = {a.name: attribute_value(a) for a in proto_node.attribute}
        nodes.append(
            Node(
                name,
                proto_node.op_type,
                list(proto_node.input),
                list(proto_node.output),
                attrs,
                proto_node.domain,
                captures=node_outer_names(attrs),
            )
        )
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in proto.opset_import}
    outputs = [o.name for o in g.output]
    for name in outputs:
        value(name)
    kept = [name for name in inputs if name not in frozen]
    graph = Graph(g.name or "model", nodes, values, kept, outputs, opsets)
    graph.meta["model_inputs"] = inputs
    graph.meta["defaulted_dims"] = defaulted_dims(
        {name: dims for name, (dims, _) in declared.items()}, input_shapes, frozen
    )
    if frozen:
        graph.meta["frozen"] = frozen
    return graph


def infer_shapes(graph: Graph) -> None:
    """Run ONNX shape inference (with data propagation) and record static shapes."""
    for node in graph.nodes:
        check_made_size(graph, node)  # inference propagates data: it would make them too
    skeleton = to_onnx(graph, inputs=graph.inputs, embed_constants=_SHAPE_INFERENCE_CONST_BYTES)
    for output in skeleton.graph.output:  # a declared symbolic shape must not pin inference
        dims = output.type.tensor_type.shape.dim
        if any(not dim.HasField("dim_value") for dim in dims):
            output.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(skeleton, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, RuntimeError) as error:
        raise ModelError(f"shape inference failed: {_first_line(error)}") from None
    except MemoryError:
        raise ResourceError(
            "shape inference ran out of memory: a declared size is too big"
        ) from None
    for info in [*inferred.graph.value_info, *inferred.graph.output]:
        shape, dtype = _type_of(info, declared=False)
        value = graph.values.get(info.name)
        if value is None or value.is_const:
            continue
        if shape is not None and all(d is not None for d in shape):
            value.shape = shape  # type: ignore[assignment]
        elif shape is not None:  # a rank and some dims: what observing keeps static
            graph.meta.setdefault(PARTIAL_SHAPES, {})[info.name] = shape
        if dtype is not None:
            value.dtype = dtype
    fix_loop_shapes(graph)
    check_declared_sizes(graph)


def check_declared_sizes(graph: Graph) -> None:
    """Refuse negative dims, and any value larger than the memory available, before use.

    Runs after every shape inference, so before constants are folded and before inputs
    are made: a declared ``[100000, 100000]`` input or a ``ConstantOfShape`` of 1e11
    elements is one clear error, not an allocation (:func:`autopart.limits.check_fits`).
    """
    largest: Value | None = None  # if it fits, all do: one look at the memory left
    for value in graph.values.values():
        shape = value.shape
        if shape is None:
            continue
        if any(isinstance(dim, int | np.integer) and dim < 0 for dim in shape):
            raise ModelError(f"value {value.name!r} has a negative dimension: {list(shape)}")
        if largest is None or value.nbytes > largest.nbytes:
            largest = value
    if largest is not None:
        check_fits(largest.nbytes, f"value {largest.name!r} {largest.dtype}{list(largest.shape)}")


def _missing_static_shapes(graph: Graph) -> list[str]:
    """The used node outputs whose shape or dtype is unknown, or whose unknown dims matter."""
    return [
        name
        for node in graph.nodes
        for name in node.outputs
        if name
        and (graph.value(name).consumers or name in graph.outputs)
        and (
            graph.value(name).shape is None
            or graph.value(name).dtype is None
            or (None in graph.value(name).shape and _shapes_matter(graph, name))  # type: ignore[operator]
        )
    ]


def _shapes_matter(graph: Graph, name: str) -> bool:
    """Whether an unknown dim of ``name`` matters: other nodes read it, or an If makes it.

    An output whose size depends on data (Unique's, NonZero's) may stay dynamic when no
    node reads it: the reference computes it whole. A value that other nodes read needs
    its shape, for their shapes and for every cost of the plan.
    """
    return bool(graph.value(name).consumers) or bool(unknown_shape_hint(graph, name))


def _require_static_shapes(graph: Graph) -> None:
    missing = _missing_static_shapes(graph)
    if missing:
        shown = ", ".join(missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        hint = next((h for name in missing if (h := unknown_shape_hint(graph, name))), "")
        defaulted = graph.meta.get("defaulted_dims") or []
        if not hint and defaulted:
            shown_dims = ", ".join(defaulted[:5])
            hint = (
                f" (the symbolic dims {shown_dims} were taken as 1, which the model may not "
                "accept: give their sizes with --input-shape NAME=SIZE)"
            )
        raise ModelError(f"could not infer a static shape for {shown}{hint}")
