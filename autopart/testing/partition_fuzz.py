"""Partition fuzzing: random convex subgraphs compiled on a codegen, checked against onnxruntime.

A *cut* is a set of nodes that is convex (no path leaves it and comes back: a contiguous
range of a random topological order always is) with a boundary: the values it is fed and
the values it must write. Besides the values other nodes read, a cut may ask for the
boundary cases every whole-subgraph codegen must handle (:data:`EXTRAS`):

- ``input``: one of its own inputs passed straight to an output;
- ``inner``: a value it computes and also reads inside;
- ``constant``: a constant it reads (an initializer) as an output.

:func:`check_cut` compiles a cut for one target, feeds it the oracle's values of its
inputs, runs it, and compares every output with the oracle: onnxruntime running the whole
model with every value an output (:func:`oracle_values`). Its verdict is one of ``ok``,
``unclaimed`` (the codegen does not claim a node: nothing to test), ``refused`` (it
claims every node but raised a one-line :class:`~autopart.errors.AutopartError`),
``mismatch`` and ``crash`` (any other exception, or an output left unwritten).
:func:`shrink` makes a failing cut minimal, keeping its verdict.
"""

from __future__ import annotations

import heapq
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from autopart.errors import AutopartError
from autopart.ir.graph import Graph, Node
from autopart.ir.onnx_export import to_onnx
from autopart.plan.partition import boundary
from autopart.targets.resolve import ResolvedTarget

EXTRAS = ("input", "inner", "constant")
RELATIVE_TOLERANCE = 1e-3  # of the output's largest magnitude (at least 1), as --check
FAILURES = ("refused", "mismatch", "crash")


@dataclass(frozen=True)
class Cut:
    """A convex set of nodes (by name, in graph order) and its boundary."""

    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    extras: tuple[str, ...] = ()  # which of EXTRAS its outputs include


@dataclass(frozen=True)
class Verdict:
    """What one target did with one cut: ``status`` (see the module) and a one-line detail."""

    target: str
    cut: Cut
    status: str
    detail: str = ""
    errors: dict[str, float] = field(default_factory=dict)


def oracle_values(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor value of ``graph`` on ``feeds``, computed by onnxruntime alone.

    The whole graph is exported with every value it computes as an output and run in one
    session; values of unknown dtype (sequences, optionals) are left out.
    """
    import onnxruntime as ort

    produced = [
        name
        for node in graph.nodes
        for name in node.outputs
        if name and graph.value(name).dtype is not None
    ]
    outputs = list(dict.fromkeys([*produced, *graph.outputs]))
    model = to_onnx(graph, graph.nodes, graph.inputs, outputs)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    results = session.run(outputs, {name: feeds[name] for name in graph.inputs})
    values = {name: np.asarray(feeds[name]) for name in graph.inputs}
    values.update(zip(outputs, (np.asarray(r) for r in results), strict=True))
    for name, value in graph.values.items():
        if value.const is not None:
            values.setdefault(name, value.const)
    return values


def random_order(graph: Graph, rng: np.random.Generator) -> list[Node]:
    """A topological order of ``graph``'s nodes with ties broken at random (Kahn's, a heap)."""
    waiting = {node.name: 0 for node in graph.nodes}
    users: dict[str, list[Node]] = {node.name: [] for node in graph.nodes}
    for node in graph.nodes:
        producers = {
            p.name for name in node.present_inputs if (p := graph.value(name).producer) is not None
        }
        waiting[node.name] = len(producers)
        for producer in producers:
            users[producer].append(node)
    keys = rng.random(len(graph.nodes))
    key = {node.name: keys[i] for i, node in enumerate(graph.nodes)}
    ready = [(key[n.name], n.name) for n in graph.nodes if waiting[n.name] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, name = heapq.heappop(ready)
        node = graph.node(name)
        order.append(node)
        for user in users[name]:
            waiting[user.name] -= 1
            if waiting[user.name] == 0:
                heapq.heappush(ready, (key[user.name], user.name))
    return order


def random_cut(
    graph: Graph, rng: np.random.Generator, max_nodes: int = 24, extras: bool = True
) -> Cut:
    """A random convex cut of at most ``max_nodes`` nodes, with random boundary ``extras``."""
    order = random_order(graph, rng)
    size = int(rng.integers(1, min(max_nodes, len(order)) + 1))
    start = int(rng.integers(0, len(order) - size + 1))
    chosen = {node.name for node in order[start : start + size]}
    nodes = [node for node in graph.nodes if node.name in chosen]
    return with_extras(graph, nodes, rng if extras else None)


def with_extras(graph: Graph, nodes: Sequence[Node], rng: np.random.Generator | None) -> Cut:
    """The cut of ``nodes`` with its own boundary, plus random :data:`EXTRAS` when ``rng``."""
    inputs, outputs = boundary(graph, nodes)
    added: list[str] = []
    if rng is not None:
        inner = [
            name
            for node in nodes
            for name in node.outputs
            if name and name not in outputs and graph.value(name).dtype is not None
        ]
        constants = [
            name
            for node in nodes
            for name in node.present_inputs
            if graph.value(name).is_const and graph.value(name).dtype is not None
        ]
        for kind, pool in (("input", inputs), ("inner", inner), ("constant", constants)):
            if pool and rng.random() < 0.5:
                outputs.append(str(rng.choice(pool)))
                added.append(kind)
    names = tuple(node.name for node in nodes)
    return Cut(names, tuple(inputs), tuple(dict.fromkeys(outputs)), tuple(added))


def check_cut(
    graph: Graph, cut: Cut, resolved: ResolvedTarget, values: Mapping[str, np.ndarray]
) -> Verdict:
    """Compile ``cut`` for ``resolved``, run it on ``values``, compare with ``values``."""
    target = str(resolved.target)
    nodes = [graph.node(name) for name in cut.nodes]
    unclaimed = [node for node in nodes if not resolved.supports(node, graph)]
    if unclaimed:
        return Verdict(target, cut, "unclaimed", f"{unclaimed[0].op_type} {unclaimed[0].name}")
    if not cut.outputs:
        return Verdict(target, cut, "unclaimed", "the cut writes nothing")
    device, unit = resolved.placement.device, resolved.placement.unit
    try:
        compiled = resolved.codegen.compile(
            graph, nodes, list(cut.inputs), list(cut.outputs), resolved.placement
        )
        env: dict[str, Any] = {name: device.from_host(values[name], unit) for name in cut.inputs}
        compiled.run(env)
        device.synchronize(unit)
        missing = [name for name in cut.outputs if name not in env]
        if missing:
            return Verdict(target, cut, "crash", f"outputs not written: {', '.join(missing)}")
        got = {name: np.asarray(device.to_host(env[name])) for name in cut.outputs}
    except AutopartError as error:
        return Verdict(target, cut, "refused", str(error).splitlines()[0])
    except Exception as error:  # a crash is what the fuzzer is for: keep where it happened
        where = traceback.extract_tb(error.__traceback__)[-1]
        place = f"{where.filename.rsplit('/', 1)[-1]}:{where.lineno}"
        return Verdict(target, cut, "crash", f"{type(error).__name__}: {error} ({place})")
    return compare(target, cut, got, values)


def compare(
    target: str, cut: Cut, got: Mapping[str, np.ndarray], values: Mapping[str, np.ndarray]
) -> Verdict:
    """The verdict on outputs ``got`` against the oracle's ``values`` (see the module)."""
    errors: dict[str, float] = {}
    for name, want in ((n, np.asarray(values[n])) for n in cut.outputs):
        have = got[name]
        if have.shape != want.shape:
            detail = f"{name}: shape {have.shape}, onnxruntime {want.shape}"
            return Verdict(target, cut, "mismatch", detail)
        errors[name] = output_error(have, want)
        if errors[name] > RELATIVE_TOLERANCE:
            detail = f"{name}: error {errors[name]:.2e} (dtype {want.dtype})"
            return Verdict(target, cut, "mismatch", detail, errors)
    return Verdict(target, cut, "ok", "", errors)


def output_error(have: np.ndarray, want: np.ndarray) -> float:
    """The largest error of ``have`` relative to ``want``'s largest magnitude (at least 1).

    Floats: NaN must meet NaN and infinities their own sign. Other dtypes must be equal
    (an error of 1 otherwise). An empty tensor has error 0.
    """
    if want.size == 0:
        return 0.0
    if not np.issubdtype(want.dtype, np.floating):
        return 0.0 if np.array_equal(have.astype(want.dtype), want) else 1.0
    have64, want64 = have.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(have64), np.isnan(want64)):
        return float("inf")
    finite = np.isfinite(want64)
    if not np.array_equal(have64[~finite & ~np.isnan(want64)], want64[~finite & ~np.isnan(want64)]):
        return float("inf")
    if not finite.any():
        return 0.0
    scale = max(float(np.abs(want64[finite]).max()), 1.0)
    return float(np.abs(have64[finite] - want64[finite]).max()) / scale


def shrink(
    graph: Graph,
    cut: Cut,
    resolved: ResolvedTarget,
    values: Mapping[str, np.ndarray],
    budget: int = 200,
) -> Verdict:
    """A smallest cut found that fails as ``cut`` does (same status) on ``resolved``.

    Greedily drops one node at a time (keeping the cut convex, its extras where they still
    exist) and then one extra output at a time, while the status stays the same; at most
    ``budget`` checks.
    """
    verdict = check_cut(graph, cut, resolved, values)
    status, checks, progress = verdict.status, 1, True
    while progress and checks < budget:
        progress = False
        for candidate in _smaller(graph, verdict.cut):
            checks += 1
            attempt = check_cut(graph, candidate, resolved, values)
            if attempt.status == status:
                verdict, progress = attempt, True
                break
            if checks >= budget:
                break
    return verdict


def _smaller(graph: Graph, cut: Cut) -> list[Cut]:
    """Cuts of one node fewer (still convex), then of one extra output fewer."""
    smaller = []
    kept = set(cut.outputs)
    for drop in cut.nodes:
        nodes = [graph.node(name) for name in cut.nodes if name != drop]
        if not nodes or not is_convex(graph, nodes):
            continue
        base = with_extras(graph, nodes, None)
        names = {n for node in nodes for n in [*node.outputs, *node.present_inputs]}
        extra = [n for n in cut.outputs if n in kept and n in names and n not in base.outputs]
        outputs = tuple(dict.fromkeys([*base.outputs, *extra]))
        smaller.append(replace(base, outputs=outputs, extras=cut.extras))
    own = set(with_extras(graph, [graph.node(n) for n in cut.nodes], None).outputs)
    for name in cut.outputs:
        if name not in own:
            smaller.append(replace(cut, outputs=tuple(o for o in cut.outputs if o != name)))
    return smaller


def is_convex(graph: Graph, nodes: Sequence[Node]) -> bool:
    """Whether no path leaves ``nodes`` and comes back into them."""
    inside = {node.name for node in nodes}
    outside_reached: set[str] = set()
    stack = [
        consumer.name
        for node in nodes
        for name in node.outputs
        if name
        for consumer in graph.value(name).consumers
        if consumer.name not in inside
    ]
    while stack:
        name = stack.pop()
        if name in outside_reached:
            continue
        outside_reached.add(name)
        for output in graph.node(name).outputs:
            if not output:
                continue
            for consumer in graph.value(output).consumers:
                if consumer.name in inside:
                    return False
                stack.append(consumer.name)
    return True
