"""Plans: acyclic partitioning, copy nodes, storage, JSON round trips and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import autopart
import autopart.api
import autopart.runtime
from autopart.errors import ModelError
from autopart.ir import VirtualDevice, load_graph
from autopart.ir.placement import erase, place
from autopart.plan.build import build_plan, build_plan_for, place_plan
from autopart.plan.partition import check_acyclic, partition_graph
from autopart.plan.schema import Plan, PlanError
from autopart.plan.selectors import Selector, SelectorError
from autopart.plan.validate import validate_plan
from autopart.runtime.plan_executor import PlanExecutor
from tests.conftest import make_model

TARGETS = [VirtualDevice.parse(t) for t in ("cpu@numpy", "cpu/0@onnxruntime", "opencl:0@opencl")]
FALLBACK = VirtualDevice.parse("cpu@numpy")


@st.composite
def random_graphs(draw: st.DrawFn) -> tuple:
    """Random DAGs of binary/unary float ops with a random target per node."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    available = ["x"]
    nodes = []
    for index in range(draw(st.integers(1, 14))):
        out = f"v{index}"
        if draw(st.booleans()) and len(available) > 1:
            a, b = draw(st.sampled_from(available)), draw(st.sampled_from(available))
            nodes.append(helper.make_node("Add", [a, b], [out], name=f"n{index}"))
        else:
            nodes.append(
                helper.make_node(
                    "Relu", [draw(st.sampled_from(available))], [out], name=f"n{index}"
                )
            )
        available.append(out)
    used = {i for n in nodes for i in n.input}
    outputs = [v for v in available[1:] if v not in used] or [available[-1]]
    graph = helper.make_graph(
        nodes,
        "random",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [4]) for o in outputs],
        initializer=[numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "unused")],
    )
    targets = {n.name: draw(st.sampled_from(TARGETS)) for n in nodes}
    return load_graph(make_model(graph), simplify_graph=False), targets


@settings(max_examples=150, deadline=None)
@given(random_graphs())
def test_partitions_never_form_a_cycle(case: tuple) -> None:
    graph, targets = case
    annotated = place(graph, targets)
    assert not any(node.virtual_device.is_set for node in graph.nodes)  # place copies
    partitions = partition_graph(annotated)
    check_acyclic(annotated, partitions)
    placed = [node.name for p in partitions for node in p.nodes]
    assert sorted(placed) == sorted(targets)
    for partition in partitions:
        assert all(targets[node.name] == partition.target for node in partition.nodes)
        assert all(node.virtual_device == partition.target for node in partition.nodes)
    plan = build_plan(annotated, FALLBACK, "random")
    assert build_plan_for(graph, targets, FALLBACK, "random").to_dict() == plan.to_dict()
    validate_plan(plan, graph)
    loaded = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert loaded.to_dict() == plan.to_dict()
    # loading writes the plan's targets onto the nodes, and they partition alike
    reloaded = place_plan(graph, loaded)
    assert reloaded.assignment() == targets
    assert build_plan(reloaded, FALLBACK, "random").to_dict() == plan.to_dict()
    assert place_plan(annotated, loaded).assignment() == targets  # a placed graph agrees
    with pytest.raises(ModelError, match="plan the graph first"):
        partition_graph(erase(annotated))
    for storage in plan.storage.values():  # values reuse buffers only on their own device
        for buffer in storage.buffers:
            assert buffer.nbytes >= max(graph.value(v).nbytes for v in buffer.values)


def test_one_copy_per_value_and_destination() -> None:
    graph = autopart.load("squeezenet")
    targets = {n.name: TARGETS[2] if n.op_type == "Relu" else FALLBACK for n in graph.nodes}
    plan = build_plan_for(graph, targets, FALLBACK, "squeezenet")
    keys = [(c.value, c.dst) for c in plan.copies]
    assert len(keys) == len(set(keys))
    assert {c.dst for c in plan.copies} == {"cpu", "opencl:0"}
    assert set(plan.tree()) == {"cpu", "opencl:0"}
    total = sum(
        graph.value(v).nbytes
        for storage in plan.storage.values()
        for b in storage.buffers
        for v in b.values
    )
    planned = sum(b.nbytes for storage in plan.storage.values() for b in storage.buffers)
    assert planned < total  # buffers are reused within a device


def _chain_plan() -> tuple[Plan, object]:
    graph = autopart.load("squeezenet")
    return autopart.api.make_plan(graph, ["Conv=cpu/0@onnxruntime"], "cpu@numpy")


def test_cycle_between_partitions_is_refused() -> None:
    plan, graph = _chain_plan()
    first, second, third = plan.partitions[:3]
    assert first.target == third.target != second.target
    first.nodes += third.nodes  # a -> b -> a through the middle partition
    plan.partitions.remove(third)
    with pytest.raises(PlanError, match="cycle"):
        validate_plan(plan, graph)


def test_tampered_assignment_is_refused() -> None:
    plan, graph = _chain_plan()
    node = plan.partitions[0].nodes[0]
    plan.assignment[node] = "cpu@numpy"
    with pytest.raises(PlanError, match=f"node '{node}' is assigned"):
        validate_plan(plan, graph)


def test_the_executor_reads_targets_from_the_nodes() -> None:
    plan, graph = _chain_plan()
    with PlanExecutor(plan, graph) as executor:
        assert not any(node.virtual_device.is_set for node in graph.nodes)  # a copy is placed
        for spec in plan.partitions:
            for name in spec.nodes:
                assert executor.graph.node(name).virtual_device == VirtualDevice.parse(spec.target)
    node = plan.partitions[0].nodes[0]
    moved = place_plan(graph, plan)
    moved.node(node).virtual_device = VirtualDevice.parse("opencl:0@opencl")
    with pytest.raises(PlanError, match=f"node '{node}' is placed on opencl:0@opencl but the plan"):
        PlanExecutor(plan, moved)
    partial = graph.copy()
    partial.node(node).virtual_device = VirtualDevice(plan.assignment[node].split("/")[0])
    with PlanExecutor(plan, partial) as executor:  # a partial device agrees
        assert str(executor.graph.node(node).virtual_device) == plan.assignment[node]


def test_plan_for_another_model_is_refused() -> None:
    plan, _ = _chain_plan()
    with pytest.raises(PlanError, match="not this one"):
        validate_plan(plan, autopart.load("shufflenet"))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(version=99), "version 99"),
        (lambda d: d.update(schema="other"), "not an autopart plan"),
        (lambda d: d.pop("partitions"), "malformed"),
        (lambda d: d["tree"].update(extra={}), "tree disagrees"),
    ],
)
def test_foreign_or_broken_documents_are_refused(tmp_path: Path, mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    plan, _ = _chain_plan()
    document = plan.to_dict()
    mutate(document)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    with pytest.raises(PlanError, match=message):
        Plan.load(path)


def test_corrupt_plan_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text('{"schema": "autopart.plan", "vers')
    with pytest.raises(PlanError, match="not a readable plan"):
        Plan.load(path)


def test_mixed_plan_runs_matches_and_round_trips(tmp_path: Path) -> None:
    plan, graph = _chain_plan()
    path = tmp_path / "plan.json"
    plan.save(path)
    loaded, loaded_graph = autopart.api.load_plan(path)
    feeds = autopart.runtime.random_inputs(graph, seed=4)
    reference = autopart.run(graph, feeds).outputs
    for candidate, g in ((plan, graph), (loaded, loaded_graph)):
        result = autopart.api.run_plan(candidate, g, feeds, repeat=1)
        for name, expected in reference.items():
            np.testing.assert_allclose(result.outputs[name], expected, rtol=1e-4, atol=1e-6)
        sequential = autopart.api.run_plan(candidate, g, feeds, repeat=1, concurrent=False)
        assert len(sequential.steps) == len(candidate.order)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("Conv", 26), ("Conv#1", 1), ("Conv#3-10", 8), ("idx:0-4", 5), ("re:^n1$", 1)],
)
def test_selectors(text: str, expected: int) -> None:
    graph = autopart.load("squeezenet")
    assert len(Selector(text).select(graph)) == expected


@pytest.mark.parametrize("text", ["Convv", "Conv#0", "idx:5-2", "re:(", "?!"])
def test_bad_selectors_are_refused(text: str) -> None:
    with pytest.raises(SelectorError):
        Selector(text).select(autopart.load("squeezenet"))
