"""The near-linear rewrites give what the algorithms they replaced gave.

Each test keeps the old algorithm as its oracle (the code before issue 31's scale work) and
compares on random graphs, the shipped fixtures, and fabricated profiles: the topological
order, the calibration windows' search order and support checks, the fusion pairs, the op
costs read once per signature, and the memo behind them. Partition keys must not change
with the process's string hashing.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.costmodel.calibration import _nearest_first, calibration_windows
from autopart.costmodel.fusion import FUSION, FusionPair, fusion_pairs
from autopart.costmodel.measurements import Measurement, RowKind
from autopart.costmodel.op_costs import OpCosts, node_time, op_costs
from autopart.ir.analysis import node_flops
from autopart.ir.graph import Graph, Node, Value
from autopart.ir.signature import op_signature
from autopart.loader import load_model
from autopart.profile import Profile
from autopart.testing.scale_models import op_chain, transformer_stack

FIXTURES = Path(__file__).parent / "fixtures"
F32 = np.dtype(np.float32)
MODELS = ["transformer_encoder.onnx", "bert_tiny.onnx", "mobilenetv3_small.onnx"]


# -- the old algorithms ----------------------------------------------------------------------
def old_topological_order(graph: Graph) -> list[Node]:
    """Graph._topological_order before: the ready list sorted at every step."""
    position = {id(node): i for i, node in enumerate(graph.nodes)}
    waiting = {
        id(node): sum(1 for n in set(node.present_inputs) if graph.values[n].producer)
        for node in graph.nodes
    }
    ready = [node for node in graph.nodes if waiting[id(node)] == 0]
    order: list[Node] = []
    while ready:
        ready.sort(key=lambda n: position[id(n)], reverse=True)
        node = ready.pop()
        order.append(node)
        for name in node.outputs:
            for consumer in {id(c): c for c in graph.values[name].consumers}.values():
                waiting[id(consumer)] -= 1
                if waiting[id(consumer)] == 0:
                    ready.append(consumer)
    return order


def old_fusion_pairs(graph: Graph) -> dict[str, FusionPair]:
    """fusion_pairs before: numpy sizes, reader sets by identity, no memo."""
    pairs: dict[str, FusionPair] = {}
    for node in graph.nodes:
        outputs = [graph.value(name) for name in node.outputs if name]
        if len(outputs) != 1 or outputs[0].shape is None:
            continue
        size = int(np.prod(outputs[0].shape, dtype=np.int64))
        if node_flops(graph, node) > FUSION.light_flops * size:
            continue
        for index, name in enumerate(node.inputs):
            value = graph.values.get(name) if name else None
            if value is None or value.producer is None or value.shape is None:
                continue
            producer = value.producer
            sole_reader = {id(c) for c in value.consumers} == {id(node)}
            same_size = int(np.prod(value.shape, dtype=np.int64)) == size
            single_output = len([n for n in producer.outputs if n]) == 1
            if sole_reader and same_size and single_output and name not in graph.outputs:
                pairs[node.name] = FusionPair(producer, node, index)
                break
    return pairs


def old_op_costs(profile: Profile, graph: Graph, target: str, base: float) -> OpCosts:
    """op_costs before: every row read again for every node."""

    def at_least_enqueue(measured: Measurement, signature: str) -> Measurement:
        enqueue = profile.measurement(RowKind.ENQUEUE, target, signature)
        if measured.timer == "wall" or enqueue is None:
            return measured
        return replace(measured, median_s=max(measured.median_s, enqueue.median_s))

    result = OpCosts()
    raw: dict[str, Measurement] = {}
    layouts: dict[str, tuple[float, float]] = {}
    profiled = profile.measurement(RowKind.LAUNCH, target, "profiled")
    overhead = profiled.median_s if profiled is not None else 0.0
    for node in graph.nodes:
        signature = op_signature(node, graph)
        measured = profile.measurement(RowKind.OP, target, signature)
        if measured is None:
            if not profile.has(RowKind.UNSUPPORTED, target, signature):
                result.missing.append(node)
            continue
        raw[node.name] = at_least_enqueue(measured, signature)
        layout = profile.row(RowKind.LAYOUT, target, signature)
        if layout is not None:
            kernels = float(np.nan_to_num(layout["kernel_s"])) - overhead
            layouts[node.name] = (float(layout["median_s"]), max(kernels, 0.0))
        else:
            layouts[node.name] = (0.0, 0.0)
    base = min([base, *(m.median_s for m in raw.values() if m.timer == "wall")])
    for name, measured in raw.items():
        result.seconds[name] = node_time(measured, base, *layouts[name])
        taken_off = node_time(measured, base) - result.seconds[name]
        if taken_off > 0.0:
            result.layout[name] = taken_off
    marginal: dict[str, float] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    pairs = {name: pair for name, pair in fusion_pairs(graph).items() if name in result.seconds}
    for name, pair in pairs.items():
        row = profile.row(RowKind.FUSED, target, pair.key(graph))
        producer = raw.get(pair.producer.name)
        if row is None or producer is None:
            continue
        if np.isfinite(row["producer_s"]):
            paired = replace(producer, median_s=float(row["producer_s"]))
            producer = at_least_enqueue(paired, op_signature(pair.producer, graph))
        alone = result.seconds[name]
        marginal[name] = min(max(float(row["median_s"]) - producer.median_s, 0.0), alone)
        if alone > 0.0:
            ratios.setdefault(pair.kind, []).append(marginal[name] / alone)
    for name, pair in pairs.items():
        alone = result.seconds[name]
        if name in marginal:
            result.seconds[name] = marginal[name]
        elif pair.kind in ratios:
            result.seconds[name] *= statistics.median(ratios[pair.kind])
        else:
            continue
        result.fused += 1
        result.unfused[name] = alone - result.seconds[name]
    return result


def old_calibration_windows(count: int, width: int, ok: list[bool]) -> list[tuple[int, int]]:
    """calibration_windows before: every start sorted, every node asked first."""
    windows: list[tuple[int, int]] = []
    for centre in (1 / 6, 1 / 2, 5 / 6):
        wanted = round(centre * count - width / 2)
        starts = sorted(range(count - width + 1), key=lambda s: (abs(s - wanted), s))
        for start in starts:
            end = start + width
            clear = all(end <= s or start >= e for s, e in windows)
            if clear and all(ok[start:end]):
                windows.append((start, end))
                break
    return sorted(windows)


# -- graphs ----------------------------------------------------------------------------------
def random_dag(seed: int, count: int) -> Graph:
    """A random DAG whose node list is shuffled (import sorts it)."""
    rng = np.random.default_rng(seed)
    values = {"x": Value("x", (8,), F32)}
    nodes = []
    for i in range(count):
        pool = ["x", *(f"v{j}" for j in range(i))]
        picks = sorted({str(rng.choice(pool)) for _ in range(int(rng.integers(1, 4)))})
        values[f"v{i}"] = Value(f"v{i}", (8,), F32)
        nodes.append(Node(f"n{i}", "Sum" if len(picks) > 1 else "Relu", picks, [f"v{i}"]))
    order = rng.permutation(count)
    shuffled = [nodes[i] for i in order]
    used = {name for node in nodes for name in node.inputs}
    outputs = [f"v{i}" for i in range(count) if f"v{i}" not in used]
    graph = Graph.__new__(Graph)
    graph.name, graph.nodes, graph.values = "random", shuffled, values
    graph.inputs, graph.outputs, graph.opsets, graph.meta = ["x"], outputs, {"": 17}, {}
    graph._link()
    return graph


def models() -> list[Graph]:
    """The shipped fixtures and a small generated stack and chain."""
    found = [load_model(FIXTURES / name) for name in MODELS]
    return [*found, load_model(transformer_stack(100)), load_model(op_chain(40))]


# -- tests -----------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 40))
def test_the_topological_order_is_the_one_the_sorted_ready_list_gave(seed: int, count: int) -> None:
    graph = random_dag(seed, count)
    expected = [node.name for node in old_topological_order(graph)]
    assert [node.name for node in graph._topological_order()] == expected


@settings(max_examples=200, deadline=None)
@given(wanted=st.integers(-50, 80), count=st.integers(1, 60))
def test_starts_come_nearest_first_as_the_sort_gave_them(wanted: int, count: int) -> None:
    expected = sorted(range(count), key=lambda s: (abs(s - wanted), s))
    assert list(_nearest_first(wanted, count)) == expected


@settings(max_examples=100, deadline=None)
@given(count=st.integers(12, 400), data=st.data())
def test_calibration_windows_are_the_ones_the_eager_search_found(
    count: int, data: st.DataObject
) -> None:
    graph = load_model(op_chain(count))
    ok = data.draw(st.lists(st.booleans(), min_size=count, max_size=count))
    if data.draw(st.booleans()):  # mostly supported: windows are found, some of them moved
        holes = data.draw(st.sets(st.integers(0, count - 1), max_size=count // 10))
        ok = [i not in holes for i in range(count)]
    asked: list[int] = []
    index = {node.name: i for i, node in enumerate(graph.nodes)}

    def supported(node: Node) -> bool:
        asked.append(index[node.name])
        return ok[index[node.name]]

    found = calibration_windows(graph, supported)
    width = min(max(count // 8, 2), 40)
    assert found == old_calibration_windows(count, width, ok)
    assert len(asked) == len(set(asked))  # each node asked once at most


def test_fusion_pairs_are_the_ones_numpy_sizes_gave() -> None:
    for graph in models():
        expected = old_fusion_pairs(graph)
        found = fusion_pairs(graph)
        assert found == expected
        found.clear()  # the caller's own dict: the memo keeps its pairs
        assert fusion_pairs(graph) == expected


def _fabricated(graph: Graph, target: str, seed: int) -> Profile:
    """Random op, layout, enqueue, launch and fused rows for ``graph``'s signatures."""
    rng = np.random.default_rng(seed)
    profile = Profile({"fingerprint": "fabricated"})

    def timing(seconds: float, timer: str = "wall") -> Measurement:
        return Measurement(seconds, seconds, seconds, seconds, seconds, 5, timer)

    timer = "event" if rng.random() < 0.5 else "wall"
    profile.record(RowKind.LAUNCH, target, "profiled", timing(float(rng.uniform(0, 4e-6))))
    for node in graph.nodes:
        signature = op_signature(node, graph)
        if profile.has(RowKind.OP, target, signature) or rng.random() < 0.05:
            continue
        profile.record(RowKind.OP, target, signature, timing(float(rng.uniform(1e-6, 1e-4)), timer))
        if rng.random() < 0.5:
            enqueue = timing(float(rng.uniform(1e-6, 3e-5)))
            profile.record(RowKind.ENQUEUE, target, signature, enqueue)
        if rng.random() < 0.5:
            layout = timing(float(rng.uniform(0, 2e-5)), "event")
            kernel = float(rng.uniform(0, 5e-5))
            profile.record(RowKind.LAYOUT, target, signature, layout, kernel_s=kernel)
    for pair in fusion_pairs(graph).values():
        key = pair.key(graph)
        if profile.has(RowKind.FUSED, target, key) or rng.random() < 0.4:
            continue
        producer = float(rng.uniform(1e-6, 1e-4)) if rng.random() < 0.7 else float("nan")
        fused = timing(float(rng.uniform(1e-6, 2e-4)), timer)
        profile.record(RowKind.FUSED, target, key, fused, producer_s=producer)
    return profile


@pytest.mark.parametrize("seed", range(4))
def test_op_costs_read_once_per_signature_are_the_costs_read_per_node(seed: int) -> None:
    for graph in models():
        profile = _fabricated(graph, "cpu@onnxruntime", seed)
        found = op_costs(profile, graph, "cpu@onnxruntime", 3e-6)
        expected = old_op_costs(profile, graph, "cpu@onnxruntime", 3e-6)
        assert dataclasses.asdict(found) == dataclasses.asdict(expected)


def test_signatures_are_forgotten_when_the_graph_is_rebuilt() -> None:
    graph = load_model(op_chain(3))
    first = graph.nodes[0]
    before = op_signature(first, graph)
    graph.values[first.outputs[0]].shape = (2, 2)
    assert op_signature(first, graph) == before  # the same nodes: the memo holds
    graph.rebuild()
    assert op_signature(first, graph) != before
    stranger = dataclasses.replace(first, attrs={"alpha": 1.0})
    assert op_signature(stranger, graph) != op_signature(first, graph)  # not the memo's node


def test_partition_keys_do_not_change_with_the_string_hash_seed() -> None:
    script = (
        "from autopart.loader import load_model\n"
        "from autopart.costmodel.partitions import partition_key\n"
        f"graph = load_model({str(FIXTURES / 'transformer_encoder.onnx')!r})\n"
        "print(partition_key(graph, graph.nodes, True))\n"
    )
    root = Path(__file__).resolve().parent.parent
    keys = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True, text=True, check=True, cwd=root,
            env={**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": str(root)},
        ).stdout
        for seed in (1, 2, 3)
    }  # fmt: skip
    assert len(keys) == 1
