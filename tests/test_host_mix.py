"""Targets mixed within a stage across hosts: the stage's own graph, and its ILP against brute force."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.costmodel.costs import Costs
from autopart.costmodel.network import Link, NetworkModel
from autopart.ir import VirtualDevice
from autopart.loader import load_model
from autopart.search.host_mix import MIN_GAIN, mix_stages, stage_costs, stage_graph, stage_mix
from autopart.search.hosts import HostStagePlan, search_hosts
from autopart.testing.exhaustive import exhaustive
from autopart.testing.partition_fuzz import oracle_values
from tests.test_host_search import TARGETS, _graph
from tests.test_profile import tiny_cnn

NUMPY, ORT = TARGETS


def _costs(graph_seed: int, count: int, cost_seed: int, launch: float) -> Costs:
    """Random node costs on both targets of a random graph, each launch ``launch`` seconds."""
    graph = _graph(graph_seed, count)
    rng = np.random.default_rng(cost_seed)
    node_cost = {n.name: {t: float(rng.uniform(1e-4, 1e-3)) for t in TARGETS} for n in graph.nodes}
    return Costs(graph, list(TARGETS), node_cost, launch=dict.fromkeys(TARGETS, launch))


def _one_target_s(costs: Costs, target: VirtualDevice, first: int, end: int) -> float:
    nodes = costs.graph.nodes[first:end]
    return costs.launch_cost(target) + sum(costs.cost(n, target) for n in nodes)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    count=st.integers(2, 14),
    bounds=st.tuples(st.integers(0, 13), st.integers(1, 14)),
)
def test_a_stage_graph_computes_what_its_nodes_compute_inside_the_whole(
    seed: int, count: int, bounds: tuple[int, int]
) -> None:
    """Fed the whole graph's values of its inputs, a stage's own graph makes the whole
    graph's values of its outputs; it reads nothing else from outside, and hands on
    exactly what a later node or the graph's outputs read."""
    graph = _graph(seed, count)
    first, end = sorted((min(bounds[0], count - 1), min(bounds[1], count)))
    if first == end:
        end = first + 1
    sub = stage_graph(graph, first, end)
    assert [n.name for n in sub.nodes] == [n.name for n in graph.nodes[first:end]]
    made = {v for n in graph.nodes[first:end] for v in n.outputs}
    read_later = {v for n in graph.nodes[end:] for v in n.inputs} | set(graph.outputs)
    assert set(sub.outputs) == made & read_later
    assert not set(sub.inputs) & made
    whole = oracle_values(graph, {"x": np.arange(8, dtype=np.float32)})
    alone = oracle_values(sub, {name: whole[name] for name in sub.inputs})
    for name in sub.outputs:
        np.testing.assert_array_equal(alone[name], whole[name])


def test_a_stage_graph_of_a_real_model_reads_its_constants_and_keeps_the_graph_intact(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), path)
    graph = load_model(str(path))
    before = [(n.name, list(n.inputs)) for n in graph.nodes]
    middle = len(graph.nodes) // 2
    feeds = {graph.inputs[0]: np.random.default_rng(0).normal(size=(1, 4, 8, 8)).astype("f4")}
    whole = oracle_values(graph, feeds)
    for first, end in ((0, middle), (middle, len(graph.nodes))):
        sub = stage_graph(graph, first, end)
        assert all(sub.value(v).is_const for n in sub.nodes for v in n.inputs
                   if v and graph.value(v).is_const)  # fmt: skip
        alone = oracle_values(sub, {name: whole[name] for name in sub.inputs})
        for name in sub.outputs:
            np.testing.assert_allclose(alone[name], whole[name], rtol=1e-5, atol=1e-6)
    assert [(n.name, list(n.inputs)) for n in graph.nodes] == before
    assert all(node.name in {n.name for n in graph.value(v).consumers}
               for node in graph.nodes for v in node.inputs if v)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(
    graph_seed=st.integers(0, 10_000),
    cost_seed=st.integers(0, 10_000),
    count=st.integers(2, 9),
    launch=st.sampled_from([0.0, 1e-5, 2e-4]),
    cut=st.integers(0, 8),
)
def test_a_stage_mix_is_the_brute_force_best_when_it_is_worth_its_copies(
    graph_seed: int, cost_seed: int, count: int, launch: float, cut: int
) -> None:
    """On a stage from ``cut`` to the end, the ILP's mix is kept exactly when the best of
    every assignment uses both targets and beats the stage's one target by the margin."""
    costs = _costs(graph_seed, count, cost_seed, launch)
    first, end = min(cut, count - 1), count
    target = min(TARGETS, key=lambda t: _one_target_s(costs, t, first, end))
    sub = stage_costs(costs.graph, costs, first, end)
    best, simulated = exhaustive(sub)
    only = {n: {target: c[target]} for n, c in sub.node_cost.items()}
    alone = exhaustive(Costs(sub.graph, [target], only, launch=dict(sub.launch)))[1].sequential_s
    mix = stage_mix(costs.graph, costs, target, first, end)
    worth = len(set(best.values())) > 1 and simulated.sequential_s <= alone * (1 - MIN_GAIN)
    if not worth:
        assert mix is None
        return
    assert mix is not None, (simulated.sequential_s, alone)
    assert len(set(mix.targets.values())) > 1
    assert set(mix.targets) == {n.name for n in costs.graph.nodes[first:end]}
    assert mix.ratio == pytest.approx(simulated.sequential_s / alone, rel=2e-3)


def _two_halves(count: int) -> Costs:
    """A chain where numpy is quick on the first half and onnxruntime on the second."""
    graph = _graph(0, count)
    half = count // 2
    node_cost = {
        n.name: {NUMPY: 1e-4 if i < half else 1e-3, ORT: 1e-3 if i < half else 1e-4}
        for i, n in enumerate(graph.nodes)
    }
    return Costs(graph, list(TARGETS), node_cost, launch=dict.fromkeys(TARGETS, 1e-5))


def test_a_pipeline_and_replicas_run_a_mix_where_it_pays_and_are_priced_again() -> None:
    """One stage on one host, and replicas on two: each stage runs the quicker halves of
    both targets, and the plan's latency and rate are priced with the mix's time."""
    costs = _two_halves(10)
    graph = costs.graph
    slow = Link.simple(0.1, 1e9)  # a cut across hosts costs more than the whole graph
    network = NetworkModel({("host0", "host1"): slow, ("host1", "host0"): slow})
    latency, rate, replicas = search_hosts(graph, {"host0": costs, "host1": costs}, network)
    assert len(latency.stages) == 1 and replicas is not None
    for plan in (latency, rate, replicas):
        mixed = mix_stages(graph, plan, {"host0": costs, "host1": costs}, network)
        assert mixed is not None and mixed.stages == plan.stages
        assert mixed.latency_s < plan.latency_s and mixed.rate_per_s > plan.rate_per_s
        for assignment, stage in zip(mixed.assignments(graph), plan.stages, strict=False):
            host = stage[0]
            prefix = "" if host == "host0" else f"{host}:"
            placed = {assignment[n.name] for n in graph.nodes[stage[2] : stage[3]]}
            assert placed == {f"{prefix}{NUMPY}", f"{prefix}{ORT}"}
    whole = replicas.stages[0]
    one = _one_target_s(costs, whole[1], 0, len(graph.nodes))
    mixed = mix_stages(graph, replicas, {"host0": costs, "host1": costs}, network)
    assert mixed is not None
    mix = stage_mix(graph, costs, whole[1], 0, len(graph.nodes))
    assert mix is not None
    assert replicas.latency_s == pytest.approx(one)  # host0's replica: nothing to move
    assert mixed.latency_s == pytest.approx(one * mix.ratio)


def test_a_stage_on_one_quick_target_or_a_host_of_one_target_is_left_as_it_is() -> None:
    costs = _costs(1, 8, 2, 1e-5)
    for node in costs.node_cost.values():
        node[NUMPY] = node[ORT] * 10  # onnxruntime quicker on every node
    assert stage_mix(costs.graph, costs, ORT, 0, 8) is None
    one = Costs(costs.graph, [ORT], {n: {ORT: c[ORT]} for n, c in costs.node_cost.items()})
    plan = HostStagePlan("pipeline", (("host0", ORT, 0, 8),), 1.0, 1.0)
    assert mix_stages(costs.graph, plan, {"host0": one}, NetworkModel({})) is None
    assert math.isfinite(_one_target_s(one, ORT, 0, 8))


@pytest.mark.slow  # a local:2 cluster and a tune on it: about 40 s
def test_a_tune_across_hosts_runs_and_judges_a_stage_that_mixes_two_targets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenVINO's int8 target runs the convolutions only, so no stage runs on it alone.
    With numpy's convolutions priced 100x (the profile is real otherwise), the search mixes
    int8 convolutions into numpy stages; the mixed candidates compile on their hosts, run,
    and are judged like the rest."""
    from tests.test_hosts import _two_cores

    _two_cores()
    import autopart
    from autopart.tuning import hosts_tune

    real = hosts_tune._host_costs

    def slow_numpy_convolutions(*args: object, **kwargs: object) -> Costs:
        costs = real(*args, **kwargs)  # type: ignore[arg-type]
        for node in costs.graph.nodes:
            if node.op_type == "Conv" and NUMPY in costs.node_cost[node.name]:
                costs.node_cost[node.name][NUMPY] *= 100
        return costs

    monkeypatch.setattr(hosts_tune, "_host_costs", slow_numpy_convolutions)
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), model)
    int8 = VirtualDevice.parse("cpu@openvino:int8")
    report = autopart.tune(
        str(model), cluster="local:2", time_budget_s=20, profiles_dir=tmp_path / "profiles",
        output=tmp_path / "plan.json", targets=[str(NUMPY), str(int8)],
    )  # fmt: skip
    mixed = [c for c in report.candidates if c.name.endswith(" mixed")]
    assert mixed, [c.name for c in report.candidates]
    for candidate in mixed:
        for plan in candidate.plans:
            codegens = {VirtualDevice.parse(p.target).codegen for p in plan.partitions}
            assert codegens == {"numpy", "openvino"}
        assert candidate.latency_s is not None and candidate.rate_per_s is not None
        assert candidate.error is not None and math.isfinite(candidate.error)
        assert candidate.predicted.mixes
