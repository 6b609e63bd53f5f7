"""Whether OpenVINO's kernel computes a node's configuration as ONNX specifies, per precision.

Some configurations come out wrong in OpenVINO 2026.4's int8 convolution while its f32
one is right: a 1x1 convolution with stride 2 and padding had one row too many; a grouped
1x2 kernel with stride 2 along its 1-wide axis on a 4x4 input erred by 76% of what its
terms add up to (found by the conformance suite). No rule by hand covers them, so each
configuration (signature, input shapes and weights) is run once per process: the node
alone on seeded random inputs, quantised over their range, against the same node in f32.
It agrees when its largest error is within :data:`INT8_AGREEMENT` of the magnitude its
roundings scale with: ``sum |x| |w|``, the node fed absolute inputs and weights
(:func:`~autopart.targets.probe_model.with_absolute_weights`).

A model's weighted nodes rarely share their weights, so a transformer stack of 12k nodes
asks about thousands of configurations. They are probed many at once: on the first
question about a graph, every configuration of its nodes of that op type not yet known is
laid side by side in one model per batch (:data:`BATCH_PROBES` nodes, at most
:data:`BATCH_BYTES` of weights) and run three times: in f32 and with absolute weights by
onnxruntime, the numerical oracle where it is installed (its session is built in a
fraction of OpenVINO's compile: 16.7 s against 24.0 s for the 2,400 configurations of a
12,400-node stack), and in int8 by OpenVINO. Each node is judged on its own outputs, fed
what it would be fed alone. A batch either library cannot take is probed one node at a
time. Each answer is also kept on disk for the next process on this machine and these
libraries (:mod:`~autopart.targets.openvino.agreement_store`): a second tune of a model
probes nothing.

Its float kernels err too: OpenVINO 2026.4's f32 convolution of one channel into one, 1x1,
with two or more columns of padding at the end, wrote values into the padding (found by
the conformance suite on a CPU with AVX2 alone; every other shape and padding tried was
right). So each convolution configuration OpenVINO would run in float
(:func:`agrees_in_float`) is probed too, against onnxruntime in f32, held to
:data:`FLOAT_AGREEMENT` of its magnitude at that precision. A float kernel is chosen by
the node's attributes and shapes, not by its weights, so the key leaves the weights' values
out: the 53 convolutions of resnet50 are 24 configurations, probed in 1.3 s, once per
machine and libraries.
"""

from __future__ import annotations

import functools
import hashlib
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import onnx
from onnx import helper, numpy_helper

from autopart.host_memory import release_freed_memory
from autopart.ir.graph import Graph, Node
from autopart.targets import qdq
from autopart.targets.openvino import agreement_store, library
from autopart.targets.probe_cache import ProbeCache
from autopart.targets.probe_model import node_signature, probe_model, with_absolute_weights

# An int8 kernel agrees with f32 when its largest error is within this fraction of
# sum |x| |w|: right kernels erred by 0.2-1.4% of it, wrong ones by 26% to 5.9e4 times it.
INT8_AGREEMENT = 5e-2
# A float kernel agrees within this fraction of sum |x| |w| at its precision: f32's right
# kernels err by about 1e-7 of it, the wrong 1x1 one by 30% to 2x; bf16 keeps 8 bits, as
# the conformance suite's reduced tolerance allows.
FLOAT_AGREEMENT = {"f32": 1e-3, "bf16": 5e-2}
FLOAT_PROBED = frozenset({"Conv", "ConvTranspose"})  # kernels picked by configuration
BATCH_PROBES = 64  # nodes probed in one compiled model
BATCH_BYTES = 32 << 20  # of weights in one compiled model

_AGREEMENT = ProbeCache()
_DIGESTS: dict[int, tuple[weakref.ref[np.ndarray], str]] = {}
Feeds = dict[str, np.ndarray]
Named = TypeVar("Named", onnx.ValueInfoProto, onnx.TensorProto)


def agrees_in_int8(node: Node, graph: Graph) -> bool:
    """Whether OpenVINO's int8 kernel computes ``node``'s configuration as ONNX specifies.

    Asked of a node whose configuration is not known yet, it first probes every unknown
    configuration of ``graph``'s quantisable nodes of the same op type, in batches.
    """
    return _agrees(node, graph, qdq.PRECISION, unknown=False)


def agrees_in_float(node: Node, graph: Graph, precision: str | None) -> bool:
    """Whether OpenVINO's kernel at ``precision`` (None: f32) computes ``node`` as specified.

    Only the ops of :data:`FLOAT_PROBED` reading float32 are probed (:func:`_float_probed`),
    on their first question about a graph every unknown configuration of its nodes of that
    op type at once; any other node agrees as before: a plan is still judged whole against
    the reference when it runs.
    """
    precision = precision or "f32"
    if precision not in FLOAT_AGREEMENT or not _float_probed(node, graph):
        return True
    return _agrees(node, graph, precision, unknown=True)


def _float_probed(node: Node, graph: Graph) -> bool:
    """Whether :func:`agrees_in_float` probes ``node``: of :data:`FLOAT_PROBED`, float32 in.

    A float16 node's own roundings come near the f32 threshold: it is not probed.
    """
    if node.op_type not in FLOAT_PROBED:
        return False
    return all(graph.value(name).dtype == np.float32 for name in node.inputs if name)


def _agrees(node: Node, graph: Graph, precision: str, unknown: bool) -> bool:
    """``node``'s answer at ``precision``, its graph's nodes probed first if need be.

    ``unknown`` is the answer for a node whose configuration has no key.
    """
    key = _key(node, graph, precision)
    if key is None:
        return unknown
    if not _known(key, precision):
        _probe_graph(node.op_type, graph, precision)
        release_freed_memory()  # the probe models' weights and compiles, gone
    if not _known(key, precision):  # not among the graph's nodes: probed alone
        _record([(key, probe_model(node, graph, static=True))], precision)
    return _AGREEMENT.get(key, lambda: (False, ""))[0]


def forget_answers() -> None:
    """Forget this process's answers and what it read from disk (the files stay)."""
    _AGREEMENT.clear()
    agreement_store.forget_loaded()


def _threshold(precision: str) -> float:
    """The agreement threshold at ``precision``: the scope of its answers on disk too."""
    return INT8_AGREEMENT if precision == qdq.PRECISION else FLOAT_AGREEMENT[precision]


def _known(key: tuple[Any, ...], precision: str) -> bool:
    """Whether ``key``'s answer is known: in this process, else from the answers on disk."""
    if _AGREEMENT.known(key):
        return True
    saved = agreement_store.saved_answers(_threshold(precision)).get(
        agreement_store.key_digest(key)
    )
    if saved is None:
        return False
    _AGREEMENT.put(key, (saved, ""))
    return True


def _key(node: Node, graph: Graph, precision: str) -> tuple[Any, ...] | None:
    """The configuration of ``node``: its signature and each input's shape and weights.

    In float, the precision, the signature and each input's shape: no weights' values.
    """
    signature = node_signature(node, graph)
    if signature is None:
        return None
    if precision != qdq.PRECISION:
        shapes = (tuple(graph.value(name).shape or ()) for name in node.inputs if name)
        return (precision, signature, *shapes)
    return (signature, *(_input_key(graph, name) for name in node.inputs if name))


def _input_key(graph: Graph, name: str) -> tuple[Any, ...]:
    """An input's part of an agreement key: its shape, and a digest of it where constant.

    Whether a kernel errs can depend on the weights: a grouped 1x2 convolution of stride 2
    erred by 26-81% of its magnitude with some random weights and inputs, by 0.2-0.3% with
    others of the same shapes.
    """
    value = graph.value(name)
    const = None if value.const is None else _digest(value.const)
    return (tuple(value.shape or ()), const)


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
    digest = hashlib.sha256(np.ascontiguousarray(array).data).hexdigest()  # no copy
    _DIGESTS[id(array)] = (weakref.ref(array), digest)
    return digest


def _probe_graph(op_type: str, graph: Graph, precision: str) -> None:
    """Probe every unknown configuration of ``graph``'s ``op_type`` nodes at ``precision``.

    At int8, of its quantisable nodes; in float, of those :func:`_float_probed` takes.
    """
    pending: dict[tuple[Any, ...], Node] = {}
    for node in graph.nodes:
        if node.op_type != op_type:
            continue
        if not (qdq.quantisable if precision == qdq.PRECISION else _float_probed)(node, graph):
            continue
        key = _key(node, graph, precision)
        if key is not None and key not in pending and not _known(key, precision):
            pending[key] = node
    batch: list[tuple[tuple[Any, ...], onnx.ModelProto]] = []
    size = 0
    for key, node in pending.items():
        model = probe_model(node, graph, static=True)
        weight = sum(len(t.raw_data) or 4 * _count(t.dims) for t in model.graph.initializer)
        if batch and (len(batch) >= BATCH_PROBES or size + weight > BATCH_BYTES):
            _record(batch, precision)
            batch, size = [], 0
        batch.append((key, model))
        size += weight
    if batch:
        _record(batch, precision)


def _count(dims: Sequence[int]) -> int:
    """The number of elements of a tensor of ``dims``."""
    return int(np.prod(dims, dtype=np.int64)) if dims else 1


def _record(batch: list[tuple[tuple[Any, ...], onnx.ModelProto]], precision: str) -> None:
    """Probe ``batch`` together and keep each configuration's answer, here and on disk."""
    answers = _agree([model for _, model in batch], precision)
    saved: dict[str, bool] = {}
    for (key, _), agrees in zip(batch, answers, strict=True):
        _AGREEMENT.put(key, (agrees, ""))
        saved[agreement_store.key_digest(key)] = agrees
    agreement_store.save_answers(_threshold(precision), saved)


def _agree(models: Sequence[onnx.ModelProto], precision: str) -> list[bool]:
    """Whether each of ``models`` (one node each, constants embedded) agrees at ``precision``.

    Laid side by side in one model; on two seeded draws per node, as if alone: uniform in
    [-2, 2], and +-2 at random (the extremes, where u8 x i8 products are largest: some
    wrong results depended on the data). A batch the library rejects whole is probed one
    model at a time (a model it rejects alone does not agree). A lone model is renamed in
    place (:func:`_side_by_side`): ``models`` are the probe's own, used once.
    """
    draws: list[Feeds] = [{}, {}]
    ranges: dict[str, tuple[float, float]] = {}
    for index, model in enumerate(models):
        for draw, part in zip(draws, _draws(model), strict=True):
            draw.update({_prefixed(index, name): value for name, value in part.items()})
        ranges.update({_prefixed(index, name): span for name, span in _ranges(model).items()})
    merged, outputs = _side_by_side(models)
    names = [node.name for node in merged.graph.node]
    try:  # one library's copy of the weights at a time: each is freed before the next
        exact = _each(_reference(merged.SerializeToString()), draws)
        absolute_weights = with_absolute_weights(merged).SerializeToString()
        absolute = _each(_reference(absolute_weights), [_absolute(d) for d in draws])
        del absolute_weights
        if precision == qdq.PRECISION:
            compiled = _compiled(qdq.quantised_once(merged, ranges, names))
        else:
            compiled = _compiled(merged.SerializeToString(), precision)
        got = _each(functools.partial(_infer, compiled), draws)
        del compiled
        results = list(zip(exact, absolute, got, strict=True))
    except Exception:  # a library that cannot quantise, compile or run it: not here
        if len(models) == 1:
            return [False]
        return [_agree([model], precision)[0] for model in models]
    threshold = _threshold(precision)
    return [all(_within(r, indices, threshold) for r in results) for indices in outputs]


def _each(
    run: Callable[[Feeds], dict[int, np.ndarray]], draws: Sequence[Feeds]
) -> list[dict[int, np.ndarray]]:
    """``run``'s outputs on each of ``draws``; ``run`` and what it holds go with this call."""
    return [run(draw) for draw in draws]


def _within(
    result: tuple[dict[int, np.ndarray], ...], indices: Sequence[int], threshold: float
) -> bool:
    """Whether the outputs ``indices`` of one draw are within ``threshold`` of the magnitude."""
    expected, magnitude, got = result
    scale = max(float(np.abs(magnitude[i]).max(initial=0.0)) for i in indices) or 1.0
    for index in indices:
        if got[index].shape != expected[index].shape:
            return False
        error = float(np.abs(got[index] - expected[index]).max(initial=0.0))
        if error > threshold * scale:
            return False
    return True


def _draws(model: onnx.ModelProto) -> tuple[Feeds, Feeds]:
    """The two draws one node is probed on, as when probed alone (seeded per node)."""
    rng = np.random.default_rng(0)
    inputs = model.graph.input
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in inputs}
    uniform = {name: rng.uniform(-2.0, 2.0, shape) for name, shape in shapes.items()}
    extremes = {name: 2.0 * rng.choice([-1.0, 1.0], shape) for name, shape in shapes.items()}
    return (
        {name: array.astype(np.float32) for name, array in uniform.items()},
        {name: array.astype(np.float32) for name, array in extremes.items()},
    )


def _ranges(model: onnx.ModelProto) -> dict[str, tuple[float, float]]:
    """The calibrated range of each tensor the node reads: the draws' span, the weights'."""
    ranges = {v.name: (-2.0, 2.0) for v in model.graph.input}  # both draws span it
    for tensor in model.graph.initializer:
        weight = numpy_helper.to_array(tensor)
        ranges[tensor.name] = (float(weight.min()), float(weight.max()))
    return ranges


def _absolute(feeds: Feeds) -> Feeds:
    """``feeds`` with every value made absolute."""
    return {name: np.abs(value) for name, value in feeds.items()}


def _prefixed(index: int, name: str) -> str:
    """The name of the ``index``-th model's tensor ``name`` in the side-by-side model."""
    return f"p{index}_{name}" if name else ""


def _side_by_side(models: Sequence[onnx.ModelProto]) -> tuple[onnx.ModelProto, list[list[int]]]:
    """One model running ``models``' nodes side by side, and each one's output indices.

    A single model is renamed in place, not copied: a node probed alone may read hundreds
    of MiB of weights (vgg19's first FC layer: 392 MiB).
    """
    if len(models) == 1:
        return _renamed_in_place(models[0]), [list(range(len(models[0].graph.output)))]
    nodes: list[onnx.NodeProto] = []
    inputs: list[onnx.ValueInfoProto] = []
    outputs: list[onnx.ValueInfoProto] = []
    initializers: list[onnx.TensorProto] = []
    spans: list[list[int]] = []
    for index, model in enumerate(models):
        for node in model.graph.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            nodes.append(_node_renamed(index, copy))
        inputs += [_renamed(index, value) for value in model.graph.input]
        spans.append(list(range(len(outputs), len(outputs) + len(model.graph.output))))
        outputs += [_renamed(index, value) for value in model.graph.output]
        initializers += [_renamed(index, tensor) for tensor in model.graph.initializer]
    graph = helper.make_graph(nodes, "int8-probes", inputs, outputs, initializers)
    first = models[0]
    merged = helper.make_model(graph, opset_imports=list(first.opset_import))
    merged.ir_version = first.ir_version
    return merged, spans


def _renamed_in_place(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``, its node and tensors renamed as the first of a side-by-side model."""
    graph = model.graph
    for node in graph.node:
        _node_renamed(0, node)
    for value in (*graph.input, *graph.output, *graph.value_info, *graph.initializer):
        value.name = _prefixed(0, value.name)
    return model


def _node_renamed(index: int, node: onnx.NodeProto) -> onnx.NodeProto:
    """``node``, renamed in place as the ``index``-th model's node of a side-by-side model."""
    node.name = f"probe{index}"
    node.input[:] = [_prefixed(index, name) for name in node.input]
    node.output[:] = [_prefixed(index, name) for name in node.output]
    return node


def _renamed(index: int, proto: Named) -> Named:
    """A copy of ``proto`` (a value's type or a tensor) under its side-by-side name."""
    copy = type(proto)()
    copy.CopyFrom(proto)
    copy.name = _prefixed(index, proto.name)
    return copy


def _compiled(model: bytes, precision: str = "f32") -> Any:
    """``model`` compiled by OpenVINO's CPU plugin at ``precision`` (QDQ nodes: in int8)."""
    return library.core().compile_model(
        library.read_onnx(model), library.DEVICE, library.target_config(None, precision)
    )


def _reference(model: bytes) -> Callable[[Feeds], dict[int, np.ndarray]]:
    """``model``'s f32 outputs by output index, as the probe expects them.

    onnxruntime's, the numerical oracle, where it is installed (its session is built in a
    fraction of OpenVINO's compile); else OpenVINO's own in f32.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        compiled = _compiled(model)
        return lambda feeds: _infer(compiled, feeds)
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return lambda feeds: dict(enumerate(np.asarray(v) for v in session.run(None, feeds)))


def _infer(compiled: Any, feeds: Feeds) -> dict[int, np.ndarray]:
    """``compiled``'s outputs on ``feeds``, by output index (names may merge differently)."""
    results = compiled.create_infer_request().infer(feeds)
    return {index: np.asarray(results[index]) for index in range(len(compiled.outputs))}
