"""Maximal partitions: same-target regions merge whenever no cycle results, siblings included.

The checks here are independent of the partitioner: cycles between partitions are found by
scipy's strongly connected components, and the least number of partitions by trying every
way to split each target's nodes into groups.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import coo_array
from scipy.sparse.csgraph import connected_components

import autopart.api
from autopart.ir.graph import Graph, Node, Value
from autopart.ir.target import VirtualDevice
from autopart.plan import partition as partition_module
from autopart.plan.partition import Partition, check_acyclic, partition_graph
from autopart.targets.resolve import available_targets
from tests.conftest import make_model, run_onnxruntime

V = VirtualDevice.parse
TARGETS = [V("cpu@numpy"), V("cpu/0@onnxruntime"), V("opencl:0@opencl")]
F32 = np.dtype(np.float32)


def _graph(inputs_of: Sequence[Sequence[str]], targets: Sequence[VirtualDevice]) -> Graph:
    """Nodes ``n0, n1, ...`` reading the named values (``x0..x2`` or ``v<i>``), placed."""
    values = {f"x{i}": Value(f"x{i}", (4,), F32) for i in range(3)}
    values["w"] = Value("w", (4,), F32, np.ones(4, np.float32))
    nodes = []
    for index, (inputs, target) in enumerate(zip(inputs_of, targets, strict=True)):
        values[f"v{index}"] = Value(f"v{index}", (4,), F32)
        nodes.append(Node(f"n{index}", "Sum", list(inputs), [f"v{index}"], virtual_device=target))
    read = {name for inputs in inputs_of for name in inputs}
    outputs = [f"v{i}" for i in range(len(nodes)) if f"v{i}" not in read]
    return Graph("random", nodes, values, ["x0", "x1", "x2"], outputs, {"": 17})


@st.composite
def placed_graphs(draw: st.DrawFn, max_nodes: int, targets: int) -> Graph:
    """A random DAG of ``1..max_nodes`` nodes over three graph inputs, on ``targets`` targets.

    Inputs come from any earlier value or graph input, so independent branches, siblings and
    long skips are all common; some nodes also read a constant.
    """
    count = draw(st.integers(1, max_nodes))
    chosen = draw(st.permutations(TARGETS))[:targets]
    inputs_of = []
    for index in range(count):
        available = ["x0", "x1", "x2"] + [f"v{i}" for i in range(index)]
        picks = draw(st.lists(st.sampled_from(available), min_size=1, max_size=3, unique=True))
        inputs_of.append(picks + (["w"] if draw(st.booleans()) else []))
    placed = [draw(st.sampled_from(chosen)) for _ in range(count)]
    return _graph(inputs_of, placed)


def _edges(graph: Graph) -> list[tuple[int, int]]:
    """(producer, consumer) node positions of every data edge."""
    position = {node.name: i for i, node in enumerate(graph.nodes)}
    found = set()
    for node in graph.nodes:
        for name in node.present_inputs:
            producer = graph.value(name).producer
            if producer is not None:
                found.add((position[producer.name], position[node.name]))
    return sorted(found)


def _has_cycle(edges: list[tuple[int, int]], group: Sequence[int]) -> bool:
    """Whether the groups (``group[node]``) depend on each other in a cycle."""
    between = [(group[a], group[b]) for a, b in edges if group[a] != group[b]]
    if not between:
        return False
    rows, cols = zip(*between, strict=True)
    size = max(group) + 1
    matrix = coo_array((np.ones(len(rows)), (rows, cols)), shape=(size, size))
    count, _ = connected_components(matrix, directed=True, connection="strong")
    return count < size


def _groups(graph: Graph, partitions: list[Partition]) -> list[int]:
    home = {node.name: p.index for p in partitions for node in p.nodes}
    return [home[node.name] for node in graph.nodes]


def _set_partitions(items: list[int]) -> Iterator[list[list[int]]]:
    """Every way to split ``items`` into non-empty groups."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for smaller in _set_partitions(rest):
        yield [[first], *smaller]
        for i in range(len(smaller)):
            yield [*smaller[:i], [first, *smaller[i]], *smaller[i + 1 :]]


def _least_partitions(graph: Graph) -> int:
    """The fewest same-target groups whose dependencies form no cycle, by trying them all."""
    edges = _edges(graph)
    by_target: dict[VirtualDevice, list[int]] = {}
    for i, node in enumerate(graph.nodes):
        by_target.setdefault(node.virtual_device, []).append(i)
    best = len(graph.nodes)
    choices = [list(_set_partitions(nodes)) for nodes in by_target.values()]
    for combination in itertools.product(*choices):
        groups = [group for split in combination for group in split]
        if len(groups) >= best:
            continue
        label = [0] * len(graph.nodes)
        for index, group in enumerate(groups):
            for node in group:
                label[node] = index
        if not _has_cycle(edges, label):
            best = len(groups)
    return best


def _check_well_formed(graph: Graph, partitions: list[Partition]) -> None:
    """Every node once, one target per partition, topological inside and between them."""
    placed = [node.name for p in partitions for node in p.nodes]
    assert sorted(placed) == sorted(node.name for node in graph.nodes)
    assert [p.index for p in partitions] == list(range(len(partitions)))
    position = {node.name: i for i, node in enumerate(graph.nodes)}
    group = _groups(graph, partitions)
    for partition in partitions:
        assert all(node.virtual_device == partition.target for node in partition.nodes)
        spots = [position[node.name] for node in partition.nodes]
        assert spots == sorted(spots)
    for producer, consumer in _edges(graph):
        assert group[producer] <= group[consumer]  # partitions come in a topological order
    assert not _has_cycle(_edges(graph), group)
    check_acyclic(graph, partitions)


def _mergeable_pairs(graph: Graph, partitions: list[Partition]) -> list[tuple[int, int]]:
    """Pairs of same-target partitions that could become one without a cycle."""
    edges, group = _edges(graph), _groups(graph, partitions)
    found = []
    for a, b in itertools.combinations(partitions, 2):
        if a.target == b.target:
            merged = [a.index if g == b.index else g for g in group]
            if not _has_cycle(edges, merged):
                found.append((a.index, b.index))
    return found


@settings(max_examples=120, deadline=None)
@given(placed_graphs(max_nodes=40, targets=1))
def test_a_plan_on_one_target_is_one_partition(graph: Graph) -> None:
    partitions = partition_graph(graph)
    _check_well_formed(graph, partitions)
    assert len(partitions) == 1
    assert [node.name for node in partitions[0].nodes] == [node.name for node in graph.nodes]


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 3).flatmap(lambda targets: placed_graphs(max_nodes=30, targets=targets)))
def test_no_two_partitions_of_one_target_can_merge(graph: Graph) -> None:
    partitions = partition_graph(graph)
    _check_well_formed(graph, partitions)
    assert _mergeable_pairs(graph, partitions) == []


@settings(max_examples=300, deadline=None)
@given(placed_graphs(max_nodes=8, targets=2))
def test_two_targets_get_the_least_number_of_partitions(graph: Graph) -> None:
    partitions = partition_graph(graph)
    _check_well_formed(graph, partitions)
    assert len(partitions) == _least_partitions(graph)


@settings(max_examples=100, deadline=None)
@given(placed_graphs(max_nodes=8, targets=3))
def test_three_targets_never_beat_the_least_number_and_stay_maximal(graph: Graph) -> None:
    # three or more targets make the least number NP-hard (module docstring): the
    # partitioner may use more, but no fewer, and none of its partitions can merge
    partitions = partition_graph(graph)
    _check_well_formed(graph, partitions)
    assert len(partitions) >= _least_partitions(graph)
    assert _mergeable_pairs(graph, partitions) == []


def test_siblings_reading_the_graph_input_share_one_partition() -> None:
    """Three branches from ``x0`` on one target, joined: one partition, not three."""
    cpu, ort = TARGETS[0], TARGETS[1]
    inputs_of = [["x0"], ["v0"], ["x0"], ["v2"], ["x0"], ["v1", "v3", "v4"]]
    graph = _graph(inputs_of, [ort] * 6)
    assert len(partition_graph(graph)) == 1
    # a branch on another target in the middle: the other two branches still merge
    split = _graph(inputs_of, [ort, ort, cpu, cpu, ort, ort])
    partitions = partition_graph(split)
    _check_well_formed(split, partitions)
    assert [[node.name for node in p.nodes] for p in partitions] == [
        ["n2", "n3"],
        ["n0", "n1", "n4", "n5"],
    ]


def test_a_branch_back_from_another_target_does_not_pull_a_partition_forward() -> None:
    """A -> B -> A beside B -> A: joining in the graph's order would take four partitions."""
    cpu, ort = TARGETS[0], TARGETS[1]
    inputs_of = [["x0"], ["x0"], ["v1"], ["v0"], ["v3"]]
    graph = _graph(inputs_of, [ort, cpu, ort, cpu, ort])
    partitions = partition_graph(graph)
    _check_well_formed(graph, partitions)
    assert len(partitions) == _least_partitions(graph) == 3


def _three_branches() -> onnx.ModelProto:
    """Three branches from two graph inputs, two joined by a Concat, one on its own."""
    rng = np.random.default_rng(0)
    h = onnx.helper
    weights = [
        onnx.numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), n)
        for n in ("w1", "w2")
    ]
    nodes = [
        h.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c1"], ["b1"]),
        h.make_node("Conv", ["x", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c2"], ["b2"]),
        h.make_node("Relu", ["y"], ["b3"]),
        h.make_node("Concat", ["b1", "b2", "b3"], ["joined"], axis=1),
        h.make_node("Add", ["y", "y"], ["alone"]),  # shares no value with the others' nodes
    ]
    spec = [1, 4, 8, 8]
    graph = h.make_graph(
        nodes,
        "three_branches",
        [h.make_tensor_value_info(n, onnx.TensorProto.FLOAT, spec) for n in ("x", "y")],
        [
            h.make_tensor_value_info("joined", onnx.TensorProto.FLOAT, [1, 12, 8, 8]),
            h.make_tensor_value_info("alone", onnx.TensorProto.FLOAT, spec),
        ],
        initializer=weights,
    )
    return make_model(graph)


@pytest.mark.parametrize(
    "target", ["cpu@numpy", "cpu@onnxruntime", "cpu@openvino", "opencl:0@opencl"]
)
def test_one_target_runs_as_one_partition_on_every_codegen(target: str) -> None:
    if target not in {str(t) for t in available_targets()}:
        pytest.skip(f"{target} is not available here")
    model = _three_branches()
    plan, graph = autopart.api.make_plan(model, [], target)
    assert [p.target for p in plan.partitions] == [target]
    assert len(plan.partitions[0].nodes) == len(graph.nodes)
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal((1, 4, 8, 8)).astype(np.float32) for n in ("x", "y")}
    result = autopart.api.run_plan(plan, graph, feeds)
    expected = dict(zip(["joined", "alone"], run_onnxruntime(model, feeds), strict=True))
    for name, want in expected.items():
        np.testing.assert_allclose(result.outputs[name], want, rtol=1e-3, atol=1e-4)


def _layered(count: int, seed: int) -> Graph:
    """``count`` nodes in runs of a few nodes per target, reading recent values and skips."""
    rng = np.random.default_rng(seed)
    inputs_of: list[list[str]] = []
    targets = []
    color = 0
    for index in range(count):
        if rng.random() < 0.3:
            color = int(rng.integers(len(TARGETS)))
        recent = [f"v{i}" for i in range(max(0, index - 6), index)] or ["x0"]
        picks = {str(rng.choice(recent)) for _ in range(int(rng.integers(1, 3)))}
        if index and rng.random() < 0.05:
            picks.add(f"v{int(rng.integers(index))}")  # a long skip
        if rng.random() < 0.02:
            picks.add(f"x{int(rng.integers(3))}")  # a new branch from a graph input
        inputs_of.append(sorted(picks))
        targets.append(TARGETS[color])
    return _graph(inputs_of, targets)


def test_twenty_thousand_nodes_partition_in_linear_work() -> None:
    graph = _layered(20_000, seed=0)
    started = time.perf_counter()
    partitions = partition_graph(graph)
    assert time.perf_counter() - started < 30.0  # generous: about a second when unloaded
    check_acyclic(graph, partitions)
    assert len({p.target for p in partitions}) == 3 and len(partitions) > 100
    # the only superlinear step: partitions whose ancestry grows after one of their
    # ancestors' grew; count it directly
    dag = partition_module._Dag(graph, graph.assignment())
    joins = partition_module._Joins(len(dag.targets))
    for node in dag.release_order():
        joins.add(node, dag.colors[node], dag.preds[node])
    assert joins.raised <= len(graph.nodes)
    assert len(joins.color) == len(partitions)


@pytest.mark.parametrize("seed", range(3))
def test_layered_graphs_are_maximal(seed: int) -> None:
    graph = _layered(300, seed)
    partitions = partition_graph(graph)
    _check_well_formed(graph, partitions)
    assert _mergeable_pairs(graph, partitions) == []
