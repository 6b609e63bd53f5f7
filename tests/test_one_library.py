"""The ILP's precisions on one library: every node moved, its precision kept where it can be.

The op-sum prices cannot see what a library compiling the whole model gains, so the search
adds, beside the ILP's plan, that plan's precision per node on each library that mixes
precisions in one subgraph; the race then measures it.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.costmodel.accuracy import ErrorModel
from autopart.costmodel.costs import Costs
from autopart.ir.target import VirtualDevice
from autopart.loader import load_model
from autopart.search.candidates import CandidateKind, candidate_name
from autopart.search.one_library import on_one_library, one_library_assignments
from autopart.search.options import SearchOptions
from autopart.search.planner import search
from autopart.testing.scale_models import op_chain, synthetic_costs
from autopart.tuning.accuracy import plan_over_tolerance
from autopart.tuning.verify import Measured

TARGETS = [
    "cpu@numpy", "cpu@onnxruntime", "cpu@openvino", "cpu@openvino:bf16", "cpu@openvino:int8",
    "cpu/0@openvino:bf16",
]  # fmt: skip
V = VirtualDevice.parse
OPENVINO = V("cpu@openvino")
EXACTNESS = ["f32", "bf16", "int8"]


def chain_costs(nodes: int, seed: int) -> Costs:
    """Seeded costs of a chain of ``nodes`` ops on :data:`TARGETS`."""
    return synthetic_costs(load_model(op_chain(nodes, seed=seed)), TARGETS, seed)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 50), picks=st.lists(st.integers(0, len(TARGETS) - 1), min_size=12))
def test_every_node_moves_to_the_library_at_its_precision_or_a_more_exact_one(
    seed: int, picks: list[int]
) -> None:
    """Where the library runs a node at the precision it had, it keeps that precision; where
    not, it gets the nearest more exact one the library runs it at."""
    costs = chain_costs(12, seed)
    names = [node.name for node in costs.graph.nodes]
    assignment = {name: V(TARGETS[pick]) for name, pick in zip(names, picks, strict=False)}
    refused = names[seed % len(names)]  # OpenVINO cannot run this node in bf16
    costs.node_cost[refused].pop(V("cpu@openvino:bf16"), None)
    moved = on_one_library(costs, assignment, OPENVINO)
    assert set(moved) == set(assignment)
    for name, where in moved.items():
        assert where.at_precision(None) == OPENVINO
        wanted = assignment[name].computes_in
        if name == refused and wanted == "bf16":
            assert where == OPENVINO
        else:
            assert where.computes_in == wanted


def test_a_node_the_library_runs_at_no_precision_stays_where_it_was() -> None:
    costs = chain_costs(6, 0)
    names = [node.name for node in costs.graph.nodes]
    stuck = names[2]
    for precision in (None, "bf16", "int8"):
        costs.node_cost[stuck].pop(OPENVINO.at_precision(precision), None)
    assignment = {name: V("cpu@onnxruntime") for name in names}
    moved = on_one_library(costs, assignment, OPENVINO)
    assert moved[stuck] == V("cpu@onnxruntime")
    assert all(moved[name] == OPENVINO for name in names if name != stuck)


def test_one_precision_on_the_library_is_no_candidate_of_its_own() -> None:
    """Every node at one precision there is that target's single-target plan already."""
    costs = chain_costs(6, 0)
    names = [node.name for node in costs.graph.nodes]
    assert one_library_assignments(costs, {n: V("cpu@onnxruntime") for n in names}) == []
    mixed = {n: V("cpu@openvino:bf16" if i % 2 else "cpu@onnxruntime") for i, n in enumerate(names)}
    ((library, moved),) = one_library_assignments(costs, mixed)
    assert library == OPENVINO
    assert {str(t) for t in moved.values()} == {"cpu@openvino", "cpu@openvino:bf16"}
    assert one_library_assignments(costs, moved) == []  # already there: nothing differs


def alternating_costs(nodes: int) -> Costs:
    """A chain whose even nodes are far quicker in bf16 on OpenVINO and odd ones on onnxruntime."""
    costs = chain_costs(nodes, 0)
    for index, node in enumerate(costs.graph.nodes):
        entry = costs.node_cost[node.name]
        for target in entry:
            entry[target] = 1.0
        entry[V("cpu@openvino:bf16" if index % 2 == 0 else "cpu@onnxruntime")] = 1e-3
    return costs


def test_the_search_offers_the_ilps_precisions_on_openvino_as_one_partition() -> None:
    """The ILP mixes onnxruntime and OpenVINO's bf16 over many partitions; its precisions on
    OpenVINO alone are a candidate of one partition, priced and named ``ilp-on:cpu@openvino``."""
    outcome = search(alternating_costs(9), SearchOptions(precision=("f32", "bf16", "int8")))
    ilp = outcome.candidates[candidate_name(CandidateKind.ILP)]
    assert {str(t) for t in ilp.assignment.values()} >= {"cpu@onnxruntime", "cpu@openvino:bf16"}
    name = candidate_name(CandidateKind.ILP_ON_ONE, OPENVINO)
    assert name == "ilp-on:cpu@openvino"
    made = outcome.candidates[name]
    assert made.kind is CandidateKind.ILP_ON_ONE and made.target == OPENVINO
    assert len(made.plan.partitions) == 1 and len(ilp.plan.partitions) > 1
    for node, where in made.assignment.items():
        assert where.computes_in == ilp.assignment[node].computes_in
    assert made.simulation.sequential_s > 0


def test_a_plan_of_the_ilps_precisions_over_its_tolerance_tightens_the_bound() -> None:
    """The ILP's own plan within its tolerance and its precisions on OpenVINO over it (the
    library's islands less exact than predicted): the accuracy round tightens from the
    latter, by its overshoot; with both within, no round."""
    costs = alternating_costs(9)
    outcome = search(costs, SearchOptions(precision=("f32", "bf16", "int8")))
    bf16 = [n for n, t in outcome.candidates["ilp"].assignment.items() if t.precision == "bf16"]
    accuracy = ErrorModel({(n, "bf16"): 1e-6 for n in bf16}, tolerance=0.01)
    on_one = candidate_name(CandidateKind.ILP_ON_ONE, OPENVINO)

    def measured(drop: float) -> Measured:
        return Measured(latencies=[1e-3], max_error=drop, tolerance=0.01)

    within = {"ilp": measured(0.0), on_one: measured(0.0)}
    assert plan_over_tolerance(accuracy, outcome.candidates, within) is None
    over = {"ilp": measured(0.0), on_one: measured(0.08)}
    found = plan_over_tolerance(accuracy, outcome.candidates, over)
    assert found is not None
    name, tighter = found
    assert name == on_one
    assert tighter.tolerance == pytest.approx(0.01 * (0.01 / 0.08) * 0.9)
    assert plan_over_tolerance(None, outcome.candidates, over) is None
