"""Model inputs: validation of user-given arrays and seeded random inputs."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from autopart.errors import InputError
from autopart.ir.graph import Graph, Node
from autopart.limits import check_fits


def describe(graph: Graph, name: str) -> str:
    """``name: dtype[shape]`` for messages."""
    value = graph.value(name)
    return f"{name}: {value.dtype}{list(value.shape or ())}"


def validate_feeds(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Check that ``feeds`` name exactly the graph's inputs with their shapes and dtypes."""
    missing = [name for name in graph.inputs if name not in feeds]
    if missing:
        expected = ", ".join(describe(graph, n) for n in missing)
        raise InputError(f"missing input(s): {expected}")
    unknown = sorted(set(feeds) - set(graph.inputs))
    if unknown:
        raise InputError(f"unknown input(s) {unknown}; the model's inputs are {graph.inputs}")
    checked = {}
    for name in graph.inputs:
        array = np.asarray(feeds[name])
        value = graph.value(name)
        if array.dtype != value.dtype:
            raise InputError(f"input {name!r} has dtype {array.dtype}, expected {value.dtype}")
        if value.shape is not None and tuple(array.shape) != tuple(value.shape):
            raise InputError(
                f"input {name!r} has shape {list(array.shape)}, expected {list(value.shape)}"
            )
        checked[name] = array
    return checked


# ops whose output holds only values of the input at that position, rearranged or repeated
_KEEPS_VALUES = {
    "Cast": (0,), "Concat": None, "Expand": (0,), "Flatten": (0,), "Gather": (0,),
    "GatherElements": (0,), "GatherND": (0,), "Identity": (0,), "Reshape": (0,),
    "Slice": (0,), "Split": (0,), "Squeeze": (0,), "Tile": (0,), "Transpose": (0,),
    "Unsqueeze": (0,),
}  # fmt: skip
# ops that read input 1 as indices into an axis of input 0 (the axis attribute, default 0)
_INDEXES_AXIS = {"Gather", "GatherElements", "ScatterElements", "Scatter"}
_INDEXES_LEADING = {"GatherND", "ScatterND"}  # the last index axis indexes the leading axes


def _index_bound(graph: Graph, name: str) -> int | None:
    """The smallest axis that ``name``'s values index, if any op uses them as indices.

    The values are followed through ops that only move or repeat them (a Cast, an Expand,
    a Gather taking rows of them: :data:`_KEEPS_VALUES`) to the ops that index with them:
    Gather, GatherElements, ScatterElements (the size of the data's ``axis``) and GatherND,
    ScatterND (the smallest of the leading data axes they index). Each value is visited
    once, so the walk is linear in the graph.
    """
    bounds: list[int] = []
    seen, waiting = {name}, [name]
    while waiting:
        current = waiting.pop()
        for consumer in graph.value(current).consumers:
            bound = _indexed_axis(graph, consumer, current)
            if bound is not None:
                bounds.append(bound)
            keeps = _KEEPS_VALUES.get(consumer.op_type, ())
            positions = range(len(consumer.inputs)) if keeps is None else keeps
            if any(consumer.inputs[i] == current for i in positions if i < len(consumer.inputs)):
                fresh = [out for out in consumer.outputs if out and out not in seen]
                seen.update(fresh)
                waiting.extend(fresh)
    return min(bounds) if bounds else None


def _indexed_axis(graph: Graph, node: Node, name: str) -> int | None:
    """The size of the axis ``node`` indexes with ``name`` (its input 1), if it does and known."""
    if len(node.inputs) < 2 or node.inputs[1] != name:
        return None
    data, indices = graph.value(node.inputs[0]).shape, graph.value(name).shape
    if not data or not all(isinstance(d, int) and d > 0 for d in data):
        return None
    if node.op_type in _INDEXES_AXIS:
        return int(data[int(node.attrs.get("axis", 0)) % len(data)])
    if node.op_type in _INDEXES_LEADING and indices and isinstance(indices[-1], int):
        batch = int(node.attrs.get("batch_dims", 0))
        leading = data[batch : batch + int(indices[-1])]
        return int(min(leading)) if len(leading) else None
    return None


def is_float(dtype: np.dtype | type) -> bool:
    """Whether ``dtype`` is a floating-point type: numpy's, or ml_dtypes' bfloat16/float8/4."""
    found = np.dtype(dtype)
    return np.issubdtype(found, np.floating) or found.name.startswith(("bfloat", "float"))


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs: standard normal floats; integers valid as indices.

    Floats include bfloat16 and the float8 types (rounded from the normal draw; its
    magnitude for float8e8m0, which has no sign). Integer inputs whose values some op uses
    as indices (a Gather's, a ScatterElements', a GatherND's, also through the ops that
    only move them: :func:`_index_bound`) draw from the smallest axis they index; other
    integer and boolean inputs draw from {0, 1} (typical of masks).
    """
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in graph.inputs:
        value = graph.value(name)
        shape, dtype = value.shape or (), value.dtype
        assert dtype is not None
        if is_float(dtype):
            draw = rng.standard_normal(shape)
            unsigned = "e8m0" in np.dtype(dtype).name
            feeds[name] = (np.abs(draw) if unsigned else draw).astype(dtype)
        elif dtype == np.bool_:
            feeds[name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[name] = rng.integers(0, _index_bound(graph, name) or 2, shape).astype(dtype)
    return feeds


def live_peak_bytes(graph: Graph) -> int:
    """The most bytes ``graph``'s values hold at once when its nodes run in their order.

    Constants and graph inputs live throughout; a node's outputs live from it to their
    last reader (a graph output to the end), as the executors keep them: the reference
    frees each value after its last reader, and a plan's steps hold only what later steps
    read. Both of a node's inputs and outputs are counted while it runs. Linear in the
    graph's size.
    """
    last: dict[str, int] = {}
    for index, node in enumerate(graph.nodes):
        for name in node.inputs:
            if name:
                last[name] = index
    end = len(graph.nodes)
    for name in graph.outputs:
        last[name] = end
    resident = {name for name in graph.inputs} | {
        name for name, value in graph.values.items() if value.is_const
    }
    freed: list[int] = [0] * (end + 1)
    live = sum(graph.values[name].nbytes for name in resident if name in graph.values)
    peak = live
    for index, node in enumerate(graph.nodes):
        for name in node.outputs:
            if name and name not in resident and name in graph.values:
                live += graph.values[name].nbytes
                freed[last.get(name, index)] += graph.values[name].nbytes
        peak = max(peak, live)
        live -= freed[index]
    return peak


def check_run_fits(graph: Graph) -> None:
    """Refuse to run ``graph`` when the values it holds at once exceed the memory available.

    The bound is :func:`live_peak_bytes`, weights included, and twice the largest value
    again for the temporaries a kernel or the random inputs make (drawn in float64, then
    cast). Adding every value's size instead, as if no buffer were freed, refused models
    onnxruntime runs: a video transformer whose values sum to 10.9 GiB holds 0.5 GiB at
    once.
    """
    largest = max((value.nbytes for value in graph.values.values()), default=0)
    total = live_peak_bytes(graph) + 2 * largest
    check_fits(total, f"running {graph.name!r} (the values it holds at once)")


# The operands that set a size, a count, a threshold or a branch: (op type, input index).
_CONTROLS = {
    "NonMaxSuppression": (2, 3, 4), "TopK": (1,), "Range": (0, 1, 2), "Resize": (2, 3),
    "Upsample": (1,), "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,),
    "Slice": (1, 2, 3, 4), "Pad": (1, 2), "OneHot": (1,), "If": (0,), "Loop": (0, 1),
    "Split": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "ReduceSum": (1,), "ReduceMean": (1,),
    "ReduceMax": (1,), "ReduceMin": (1,), "CenterCropPad": (1,), "STFT": (1, 3),
    "Trilu": (1,), "CumSum": (1,), "Gather": (1,),
}  # fmt: skip
# Ops through which a scalar still sets what it reaches (arithmetic on sizes and thresholds).
_CARRIERS = frozenset(
    {"Cast", "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Floor", "Ceil", "Round", "Sqrt", "Log",
     "Exp", "Reciprocal", "Min", "Max", "Clip", "Concat", "Unsqueeze", "Squeeze", "Reshape",
     "Identity", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And",
     "Or", "Pow", "Mod", "Sign", "Where"}
)  # fmt: skip


def controlling_inputs(graph: Graph) -> list[str]:
    """The scalar inputs that set sizes, counts, thresholds or branches, in input order.

    A graph input of at most one element whose value reaches, through arithmetic on it
    (:data:`_CARRIERS`), an operand that sets a size, a count, a threshold or a branch
    (:data:`_CONTROLS`): a sample rate, ``fmin``/``fmax``, a score threshold, a step count.
    Random values make no sense there; such inputs are the ones to ``--freeze``. Gather's
    indices count only for a scalar (an index, not a token sequence).
    """
    return [name for name in scalar_inputs(graph) if _reaches_control(graph, name)]


def scalar_inputs(graph: Graph) -> list[str]:
    """The graph inputs of at most one element, in input order."""
    return [
        name
        for name in graph.inputs
        if (shape := graph.value(name).shape) is not None
        and int(np.prod(shape, dtype=np.int64)) <= 1
    ]


def _reaches_control(graph: Graph, start: str) -> bool:
    """Whether ``start`` flows, through carriers only, into a controlling operand."""
    seen, stack = {start}, [start]
    while stack:
        name = stack.pop()
        for node in graph.value(name).consumers:
            positions = [i for i, n in enumerate(node.inputs) if n == name]
            if any(i in _CONTROLS.get(node.op_type, ()) for i in positions):
                return True
            if name in node.captures and node.op_type in ("If", "Loop", "Scan"):
                return True  # read inside a branch or body: it steers control flow there
            if node.op_type in _CARRIERS:
                for output in node.outputs:
                    if output and output not in seen:
                        seen.add(output)
                        stack.append(output)
    return False
