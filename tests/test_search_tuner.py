"""Baselines (single target, ORT EP rule, per-op best, HEFT) and the optuna tuner."""

from __future__ import annotations

import random

import numpy as np
import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from autopart.costmodel.costs import Costs, TransferModel
from autopart.ir import VirtualDevice, load_graph
from autopart.ir.graph import Graph
from autopart.search.baselines import (
    BaselineError,
    all_baselines,
    heft,
    onnxruntime_ep_rule,
    per_op_best,
    single_target,
)
from autopart.search.optuna_search import OptunaSearchError, SearchProgress, optuna_search
from autopart.search.optuna_space import build_space
from autopart.search.simulator import evaluate, peak_memory_bytes, plan_for, simulate
from tests.conftest import make_model

T = VirtualDevice.parse
NUMPY, ORT, ORT0, ORT1 = (
    T("cpu@numpy"),
    T("cpu@onnxruntime"),
    T("cpu/0@onnxruntime"),
    T("cpu/1@onnxruntime"),
)
CL, CL0, CL1 = T("opencl:0@opencl"), T("opencl:0/0@opencl"), T("opencl:0/1@opencl")
TARGETS = [NUMPY, ORT, ORT0, ORT1, CL, CL0, CL1]
TRANSFERS = {
    ("cpu", "opencl:0"): TransferModel(20e-6, 4e9),
    ("opencl:0", "cpu"): TransferModel(20e-6, 4e9),
}
PROPERTY = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def random_graph(seed: int, n_nodes: int, size: int = 1024) -> Graph:
    """A random DAG of unary and binary float ops on [size] tensors; some read a weight."""
    rng = random.Random(seed)
    available = ["x"]
    nodes = []
    for index in range(n_nodes):
        out = f"v{index}"
        kind = rng.random()
        if kind < 0.35 and len(available) > 1:
            a, b = rng.sample(available, 2)
            nodes.append(
                helper.make_node(rng.choice(["Add", "Mul"]), [a, b], [out], name=f"n{index}")
            )
        elif kind < 0.5:
            src = rng.choice(available[-3:])
            nodes.append(helper.make_node("Mul", [src, "w"], [out], name=f"n{index}"))
        else:
            src = rng.choice(available[-3:])
            nodes.append(
                helper.make_node(
                    rng.choice(["Relu", "Tanh", "Neg"]), [src], [out], name=f"n{index}"
                )
            )
        available.append(out)
    used = {i for n in nodes for i in n.input}
    outputs = [v for v in available[1:] if v not in used]
    weight = numpy_helper.from_array(np.ones(size, np.float32), "w")
    graph = helper.make_graph(
        nodes,
        "random",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [size]) for o in outputs],
        initializer=[weight],
    )
    return load_graph(make_model(graph), simplify_graph=False)


def random_costs(seed: int, n_nodes: int, support: float = 0.7) -> Costs:
    """Costs over TARGETS: cpu@numpy runs everything; others each run a node with ``support``."""
    graph = random_graph(seed, n_nodes)
    rng = random.Random(seed + 1)
    node_cost = {}
    for node in graph.nodes:
        entry = {NUMPY: rng.uniform(50e-6, 400e-6)}
        ort, cl = rng.random() < support, rng.random() < support
        base = rng.uniform(20e-6, 300e-6)
        if ort:
            entry[ORT] = base * rng.uniform(0.6, 1.0)
            entry[ORT0] = entry[ORT1] = base * rng.uniform(1.0, 1.8)
        if cl:
            entry[CL] = base * rng.uniform(0.2, 1.0)
            entry[CL0] = entry[CL1] = entry[CL] * rng.uniform(1.0, 1.8)
        node_cost[node.name] = entry
    launch = {target: rng.uniform(0, 30e-6) for target in TARGETS}
    return Costs(graph, list(TARGETS), node_cost, launch, dict(TRANSFERS))


def supported_only(costs: Costs, assignment: dict[str, VirtualDevice]) -> bool:
    return set(assignment) == {n.name for n in costs.graph.nodes} and all(
        assignment[n.name] in costs.supported(n) for n in costs.graph.nodes
    )


def makespan(costs: Costs, assignment: dict[str, VirtualDevice]) -> float:
    return evaluate(assignment, costs).makespan_s


# -- baselines --------------------------------------------------------------------------------
@PROPERTY
@given(st.integers(0, 10_000), st.integers(1, 25), st.floats(0.0, 1.0))
def test_every_baseline_covers_every_node_with_supported_targets(
    seed: int, n_nodes: int, support: float
) -> None:
    costs = random_costs(seed, n_nodes, support)
    baselines = all_baselines(costs, NUMPY)
    assert {f"single:{t}" for t in TARGETS} <= set(baselines)
    assert {"ort-ep-rule", "per-op-best", "heft"} <= set(baselines)
    for name, assignment in baselines.items():
        assert supported_only(costs, assignment), name
    assert all(t == NUMPY for t in baselines["single:cpu@numpy"].values())


def test_single_target_names_nodes_no_one_can_run() -> None:
    costs = random_costs(3, 6)
    victim = costs.graph.nodes[2].name
    costs.node_cost[victim] = {ORT0: 1e-4}
    assert single_target(costs, ORT0, NUMPY)[victim] == ORT0
    with pytest.raises(BaselineError, match=victim):
        single_target(costs, CL, NUMPY)
    assert "single:opencl:0@opencl" not in all_baselines(costs, NUMPY)


def test_a_reduced_target_leaves_what_it_cannot_run_to_its_own_library_at_the_nearest_precision() -> (
    None
):
    ov_int8, ov_bf16, ov_f32 = (
        T("cpu/0@openvino:int8"),
        T("cpu/0@openvino:bf16"),
        T("cpu/0@openvino"),
    )
    costs = chain_costs()
    costs.targets = [NUMPY, ov_f32, ov_bf16, ov_int8, T("cpu/1@openvino:bf16")]
    costs.node_cost = {
        "n0": {NUMPY: 1.0, ov_f32: 1.0, ov_bf16: 1.0, ov_int8: 1.0},  # int8 runs it
        "n1": {NUMPY: 1.0, ov_f32: 1.0, ov_bf16: 1.0},  # bf16 is the nearest
        "n2": {NUMPY: 1.0, ov_f32: 1.0},  # only f32 of that library
        "n3": {NUMPY: 1.0},  # not that library at all: the fallback
        "n4": {NUMPY: 1.0, ov_f32: 1.0, T("cpu/1@openvino:bf16"): 1.0},  # another unit's bf16
    }
    assignment = single_target(costs, ov_int8, NUMPY)
    assert assignment == {"n0": ov_int8, "n1": ov_bf16, "n2": ov_f32, "n3": NUMPY, "n4": ov_f32}
    # an f32 target has nothing more exact: straight to the fallback
    assert single_target(costs, ov_f32, NUMPY)["n3"] == NUMPY


@PROPERTY
@given(st.integers(0, 10_000), st.integers(1, 25), st.permutations([ORT, CL, CL1, ORT0]))
def test_ort_ep_rule_gives_each_node_to_the_first_provider_that_runs_it(
    seed: int, n_nodes: int, priority: list[VirtualDevice]
) -> None:
    costs = random_costs(seed, n_nodes)
    assignment = onnxruntime_ep_rule(costs, priority, NUMPY)
    for node in costs.graph.nodes:
        supported = costs.supported(node)
        expected = next((p for p in priority if p in supported), NUMPY)
        assert assignment[node.name] == expected
    default = onnxruntime_ep_rule(costs)  # opencl:0 first, then cpu@onnxruntime, then numpy
    for node in costs.graph.nodes:
        supported = costs.supported(node)
        assert default[node.name] == next(p for p in [CL, ORT, NUMPY] if p in supported)


@PROPERTY
@given(st.integers(0, 10_000), st.integers(1, 25))
def test_per_op_best_picks_the_cheapest_supported_target(seed: int, n_nodes: int) -> None:
    costs = random_costs(seed, n_nodes)
    assignment = per_op_best(costs)
    for node in costs.graph.nodes:
        cheapest = min(costs.node_cost[node.name].values())
        assert costs.cost(node, assignment[node.name]) == cheapest


@PROPERTY
@given(st.integers(0, 10_000), st.integers(1, 30))
def test_heft_plans_schedule_within_their_sequential_time(seed: int, n_nodes: int) -> None:
    costs = random_costs(seed, n_nodes)
    assignment = heft(costs)
    assert supported_only(costs, assignment)
    simulation = evaluate(assignment, costs)
    assert simulation.makespan_s <= simulation.sequential_s * (1 + 1e-9)


def fork_costs() -> Costs:
    """x -> a, x -> b (1 s each on either CPU unit, 1.2 s on the whole CPU), c = a + b."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Neg", ["x"], ["b"], name="b"),
        helper.make_node("Add", ["a", "b"], ["c"], name="c"),
    ]
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in "xc"]
    graph = load_graph(make_model(helper.make_graph(nodes, "fork", info[:1], info[1:])))
    heavy = {NUMPY: 1.2, ORT0: 1.0, ORT1: 1.0}
    node_cost = {"a": dict(heavy), "b": dict(heavy), "c": {NUMPY: 0.01, ORT0: 0.01, ORT1: 0.01}}
    return Costs(graph, [NUMPY, ORT0, ORT1], node_cost)


def test_heft_runs_independent_branches_on_separate_units() -> None:
    costs = fork_costs()
    assignment = heft(costs)
    assert {assignment["a"], assignment["b"]} == {ORT0, ORT1}
    simulation = evaluate(assignment, costs)
    assert simulation.makespan_s == pytest.approx(1.01)
    assert simulation.sequential_s == pytest.approx(2.01)


# -- search space -----------------------------------------------------------------------------
def chain_costs() -> Costs:
    """x -> n0 -> n1 -> n2 -> n3 (a chain) and n1 -> n4 (a fork)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["v0"], name="n0"),
        helper.make_node("Neg", ["v0"], ["v1"], name="n1"),
        helper.make_node("Tanh", ["v1"], ["v2"], name="n2"),
        helper.make_node("Relu", ["v2"], ["v3"], name="n3"),
        helper.make_node("Neg", ["v1"], ["v4"], name="n4"),
    ]
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4]) for n in ["x", "v3", "v4"]]
    graph = load_graph(
        make_model(helper.make_graph(nodes, "chain", info[:1], info[1:])), simplify_graph=False
    )
    both = {NUMPY: 1.0, CL: 0.5}
    node_cost = {f"n{i}": dict(both) for i in range(5)}
    node_cost["n3"] = {NUMPY: 1.0}
    return Costs(graph, [NUMPY, CL], node_cost, {}, dict(TRANSFERS))


def test_chains_with_one_supported_set_share_a_parameter_unless_a_seed_splits_them() -> None:
    costs = chain_costs()
    space = build_space(costs)
    assert [[space.nodes[i] for i in group] for group in space.groups] == [
        ["n0", "n1"],
        ["n2"],  # n1 forks, so n2 starts a chain
        ["n4"],
    ]
    assert space.fixed == {3: 0}
    assert space.nodes == ["n0", "n1", "n2", "n3", "n4"]
    split = (0, 1, 1, 0, 1)
    assert len(build_space(costs, [split]).groups) == 4
    assert len(build_space(costs, chains=False).groups) == 4
    assert build_space(costs, [split]).decode(build_space(costs, [split]).encode(split)) == split
    assert space.decode(space.encode(split)) == (0, 0, 1, 0, 1)  # a tie goes to the first target
    assert space.decode(space.encode((1, 1, 0, 0, 1))) == (1, 1, 0, 0, 1)


# -- tuner ------------------------------------------------------------------------------------
def tuned(costs: Costs, n_extra: int = 6, **kwargs):
    seeds = all_baselines(costs, NUMPY)
    objective = kwargs.pop("objective", "makespan")
    result = optuna_search(costs, objective, seeds, n_trials=len(seeds) + n_extra, **kwargs)
    return result, seeds


@PROPERTY
@given(st.integers(0, 10_000), st.integers(2, 20))
def test_tuned_makespan_is_no_worse_than_any_baseline_and_within_sequential(
    seed: int, n_nodes: int
) -> None:
    costs = random_costs(seed, n_nodes)
    result, seeds = tuned(costs, seed=seed)
    assert supported_only(costs, result.assignment)
    simulation = evaluate(result.assignment, costs)
    assert result.value_s == pytest.approx(simulation.makespan_s)
    assert simulation.makespan_s <= simulation.sequential_s * (1 + 1e-9)
    best_seed = min(makespan(costs, s) for s in seeds.values())
    assert result.best_seed_value == pytest.approx(best_seed)
    assert result.value_s <= best_seed * (1 + 1e-12)
    assert result.new_trials == result.trials == len(seeds) + 6


def test_tuning_finds_better_than_every_seed_when_one_exists() -> None:
    costs = fork_costs()
    seeds = {
        "numpy": single_target(costs, NUMPY, NUMPY),
        "unit0": single_target(costs, ORT0, NUMPY),
    }
    result = optuna_search(costs, "makespan", seeds, n_trials=40, seed=1)
    assert result.best_seed_value == pytest.approx(2.01)
    assert result.value_s == pytest.approx(1.01)
    assert {result.assignment["a"], result.assignment["b"]} == {ORT0, ORT1}


def test_every_trial_uses_only_supported_targets(tmp_path) -> None:
    costs = random_costs(11, 15, support=0.4)
    (tmp_path / "s").mkdir()
    storage = f"sqlite:///{tmp_path}/s/study.db"
    result, _ = tuned(costs, n_extra=12, storage=storage)
    study = optuna.load_study(study_name=result.study_name, storage=storage)
    targets = [T(t) for t in study.user_attrs["autopart"]["targets"]]
    nodes = study.user_attrs["autopart"]["nodes"]
    for trial in study.get_trials():
        assignment = {
            n: targets[c] for n, c in zip(nodes, trial.user_attrs["assignment"], strict=True)
        }
        assert supported_only(costs, assignment)
        assert trial.value == pytest.approx(makespan(costs, assignment))


def test_same_seed_same_search_with_or_without_storage(tmp_path) -> None:
    costs = random_costs(5, 18)
    first, _ = tuned(costs, n_extra=15, seed=3)
    second, _ = tuned(costs, n_extra=15, seed=3, storage=f"sqlite:///{tmp_path}/study.db")
    assert first.assignment == second.assignment
    assert first.value_s == second.value_s


def test_resume_keeps_trials_and_does_not_enqueue_seeds_again(tmp_path) -> None:
    costs = random_costs(7, 12)
    seeds = {"numpy": single_target(costs, NUMPY, NUMPY), "heft": heft(costs)}
    (tmp_path / "search" / "fork").mkdir(parents=True)  # a study's folder must exist
    storage = f"sqlite:///{tmp_path}/search/fork/study.db"
    first = optuna_search(costs, "makespan", seeds, n_trials=10, storage=storage, study_name="s")
    assert (tmp_path / "search" / "fork" / "study.db").is_file()
    assert first.trials == 10
    second = optuna_search(costs, "makespan", seeds, n_trials=5, storage=storage, study_name="s")
    study = optuna.load_study(study_name="s", storage=storage)
    assert len(study.trials) == 15 and second.trials == 15 and second.new_trials == 5
    assert sorted(t.user_attrs["seed"] for t in study.trials if "seed" in t.user_attrs) == [
        "heft",
        "numpy",
    ]
    assert second.value_s <= first.value_s
    assert second.best_seed_name == first.best_seed_name


def test_workers_sharing_a_study_see_each_others_trials(tmp_path) -> None:
    costs = random_costs(13, 12)
    seeds = {"numpy": single_target(costs, NUMPY, NUMPY), "heft": heft(costs)}
    storage = f"sqlite:///{tmp_path}/study.db"
    inner = []

    def second_worker(progress: SearchProgress) -> None:
        if progress.new_trials == 3:  # another worker joins and finishes 4 trials meanwhile
            inner.append(
                optuna_search(
                    costs, "makespan", seeds, n_trials=4, seed=9, storage=storage, study_name="s"
                )
            )

    outer = optuna_search(
        costs,
        "makespan",
        seeds,
        n_trials=8,
        storage=storage,
        study_name="s",
        progress=second_worker,
    )
    assert inner[0].trials == 7 and outer.trials == 12 and outer.new_trials == 8
    assert outer.value_s <= inner[0].value_s
    study = optuna.load_study(study_name="s", storage=storage)
    assert sum("seed" in t.user_attrs for t in study.trials) == 2
    best = min(study.trials, key=lambda t: t.value)
    nodes, targets = study.user_attrs["autopart"]["nodes"], study.user_attrs["autopart"]["targets"]
    rebuilt = {n: T(targets[c]) for n, c in zip(nodes, best.user_attrs["assignment"], strict=True)}
    assert rebuilt == outer.assignment and best.value == outer.value_s


def test_resume_refuses_a_study_of_other_constraints(tmp_path) -> None:
    costs = random_costs(7, 8)
    storage = f"sqlite:///{tmp_path}/study.db"
    optuna_search(costs, "makespan", {}, n_trials=3, storage=storage, study_name="s")
    victim = next(n.name for n in costs.graph.nodes if len(costs.supported(n)) > 1)
    costs.node_cost[victim] = {NUMPY: 1e-4}
    with pytest.raises(OptunaSearchError, match="constraints"):
        optuna_search(costs, "makespan", {}, n_trials=3, storage=storage, study_name="s")
    with pytest.raises(OptunaSearchError, match="objective"):
        optuna_search(costs, "pareto", {}, n_trials=3, storage=storage, study_name="s")


def test_an_interrupt_propagates_keeping_finished_trials_and_a_later_call_resumes(tmp_path) -> None:
    costs = random_costs(9, 12)
    seeds = {"numpy": single_target(costs, NUMPY, NUMPY)}
    storage = f"sqlite:///{tmp_path}/study.db"
    seen: list[SearchProgress] = []

    def stop_after_four(progress: SearchProgress) -> None:
        seen.append(progress)
        if progress.new_trials == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as interrupted:
        optuna_search(
            costs,
            "makespan",
            seeds,
            n_trials=50,
            storage=storage,
            study_name="s",
            progress=stop_after_four,
        )
    assert interrupted.value.__notes__ == [
        f"kept 4 finished trials in study database {tmp_path}/study.db (study 's')"
    ]
    assert [(p.trial, p.new_trials) for p in seen] == [(1, 1), (2, 2), (3, 3), (4, 4)]
    study = optuna.load_study(study_name="s", storage=storage)
    assert len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == 4
    second = optuna_search(costs, "makespan", seeds, n_trials=3, storage=storage, study_name="s")
    assert second.trials == 7 and second.new_trials == 3
    assert second.value_s <= seen[-1].best_s


def test_interrupt_inside_a_trial_stores_only_finished_trials(monkeypatch, tmp_path) -> None:
    costs = random_costs(9, 10)
    storage = f"sqlite:///{tmp_path}/study.db"
    calls = []

    def interrupted_once(plan, costs_):
        calls.append(1)
        if len(calls) in (1, 3):  # the seed's trial, then a sampled one
            raise KeyboardInterrupt
        return simulate(plan, costs_)

    monkeypatch.setattr("autopart.search.optuna_search.simulate", interrupted_once)
    seeds = {"numpy": single_target(costs, NUMPY, NUMPY)}
    with pytest.raises(KeyboardInterrupt) as interrupted:
        optuna_search(costs, "makespan", seeds, n_trials=10, storage=storage, study_name="s")
    assert "kept 0 finished trials" in interrupted.value.__notes__[0]
    assert optuna.load_study(study_name="s", storage=storage).trials == []
    with pytest.raises(KeyboardInterrupt) as interrupted:
        optuna_search(costs, "makespan", seeds, n_trials=10, storage=storage, study_name="s")
    assert "kept 1 finished trials" in interrupted.value.__notes__[0]
    (trial,) = optuna.load_study(study_name="s", storage=storage).trials
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert trial.user_attrs["seed"] == "numpy"  # the interrupted seed ran again


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.integers(3, 15))
def test_pareto_front_is_non_dominated_and_holds_the_fastest_seed(seed: int, n_nodes: int) -> None:
    costs = random_costs(seed, n_nodes)
    result, seeds = tuned(costs, n_extra=10, objective="pareto", seed=seed)
    front = result.pareto
    assert front and result.value_s == front[0][1] and result.assignment == front[0][0]
    for assignment, span, peak in front:
        assert supported_only(costs, assignment)
        plan = plan_for(assignment, costs)
        assert span == pytest.approx(simulate(plan, costs).makespan_s)
        assert peak == peak_memory_bytes(plan)
    for i, (_, span_a, peak_a) in enumerate(front):
        for j, (_, span_b, peak_b) in enumerate(front):
            if i != j:
                assert not (span_b <= span_a and peak_b <= peak_a)
    assert result.value_s <= min(makespan(costs, s) for s in seeds.values()) * (1 + 1e-12)
    for s in seeds.values():  # no seed dominates a point of the front strictly
        plan = plan_for(s, costs)
        span, peak = simulate(plan, costs).makespan_s, peak_memory_bytes(plan)
        assert any(f[1] <= span and f[2] <= peak for f in front)


def test_seeds_with_unsupported_targets_are_refused() -> None:
    costs = random_costs(2, 6)
    victim = next(n.name for n in costs.graph.nodes if CL not in costs.supported(n))
    bad = {n.name: CL for n in costs.graph.nodes}
    with pytest.raises(OptunaSearchError, match=victim):
        optuna_search(costs, "makespan", {"all-cl": bad}, n_trials=2)
    with pytest.raises(OptunaSearchError, match="misses"):
        optuna_search(costs, "makespan", {"empty": {}}, n_trials=2)


def test_baselines_carry_their_kind_and_target_and_names_are_built_from_them() -> None:
    from autopart.search.baselines import baselines
    from autopart.search.candidates import CandidateKind, candidate_name

    costs = random_costs(4, 10)
    found = baselines(costs, NUMPY)
    singles = [b for b in found if b.kind is CandidateKind.SINGLE]
    assert [b.target for b in singles] == TARGETS
    assert all(b.kind.is_baseline for b in found)
    assert [b.kind for b in found[len(singles) :]] == [
        CandidateKind.ORT_EP_RULE,
        CandidateKind.PER_OP_BEST,
        CandidateKind.HEFT,
    ]
    assert {b.name: b.assignment for b in found} == all_baselines(costs, NUMPY)
    assert candidate_name(CandidateKind.SINGLE, CL0) == "single:opencl:0/0@opencl"
    assert candidate_name(CandidateKind.PARETO, index=2) == "pareto-2"
    assert candidate_name(CandidateKind.ILP) == "ilp"
    assert not CandidateKind.TUNED.is_baseline


def test_the_optuna_search_refuses_the_latency_objective() -> None:
    costs = random_costs(2, 6)
    with pytest.raises(OptunaSearchError, match="latency"):
        optuna_search(costs, "latency", {}, n_trials=2)


def test_search_options_take_objectives_and_methods_by_name_and_refuse_others() -> None:
    from autopart.errors import AutopartError
    from autopart.search.options import Method, Objective, SearchOptions

    options = SearchOptions(objective="makespan", method="optuna")
    assert options.objective is Objective.MAKESPAN and options.method is Method.OPTUNA
    assert f"{options.objective}" == "makespan"  # study names and saved plans spell the value
    with pytest.raises(AutopartError, match="latency, makespan, pareto or throughput"):
        SearchOptions(objective="fastest")
    with pytest.raises(AutopartError, match="ilp, optuna or auto"):
        SearchOptions(method="exhaustive")
