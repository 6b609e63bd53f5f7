"""The virtual device is first-class: constraints and plans live on the nodes, and planning
is idempotent: plan(erase(plan(g))) == plan(g) and plan(plan(g)) == plan(g)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.costmodel.costs import Costs
from autopart.ir.graph import Graph
from autopart.ir.placement import erase, place, placement
from autopart.plan.build import place_plan
from autopart.plan.schema import Plan
from autopart.search.constraints import (
    ConstraintError,
    Constraints,
    apply,
    matches,
    restrict,
    write_constraints,
)
from autopart.search.options import SearchOptions
from autopart.search.planner import search
from autopart.search.simulator import plan_for
from tests.test_search_exact import NUMPY, OPENCL, ORT, V, _residual, cases


def plan_graph(costs: Costs, graph: Graph, constraints: Constraints) -> tuple[Plan, Graph]:
    """Plan ``graph`` with ``costs``' prices: the chosen plan and the graph it places."""
    options = SearchOptions(constraints=constraints, method="ilp")
    outcome = search(dataclasses.replace(costs, graph=graph), options)
    plan = outcome.chosen.plan
    return plan, place_plan(graph, plan)


@st.composite
def constrained_cases(draw: st.DrawFn) -> tuple[Costs, Constraints]:
    """A random case and, sometimes, a pin and a forbid that leave every node a target."""
    costs = draw(cases())
    names = [node.name for node in costs.graph.nodes]
    pins, forbids = [], []
    if draw(st.booleans()):
        name = draw(st.sampled_from(names))
        pins.append((f"name:{name}", str(draw(st.sampled_from(costs.supported(name))))))
    if draw(st.booleans()):
        name = draw(st.sampled_from(names))
        supported = costs.supported(name)
        pinned = [V(t) for selector, t in pins if selector == f"name:{name}"]
        allowed = [t for t in supported if t not in pinned]
        if len(supported) > 1 and allowed:
            forbids.append((f"name:{name}", str(draw(st.sampled_from(allowed)))))
    return costs, Constraints(pins=pins, forbids=forbids)


@settings(max_examples=30, deadline=None)
@given(constrained_cases())
def test_planning_is_idempotent_and_survives_erasing(case: tuple[Costs, Constraints]) -> None:
    costs, constraints = case
    plan, planned = plan_graph(costs, costs.graph, constraints)
    assert planned.assignment() == {n: V(t) for n, t in plan.assignment.items()}
    assert all(node.virtual_device.is_complete for node in planned.nodes)
    for selector, target in constraints.pins:
        assert plan.assignment[selector.removeprefix("name:")] == target
    for selector, pattern in constraints.forbids:
        assert not matches(V(pattern), V(plan.assignment[selector.removeprefix("name:")]))

    erased = erase(planned)
    assert not any(node.virtual_device.is_set for node in erased.nodes)
    again, _ = plan_graph(costs, erased, constraints)
    assert again.to_dict() == plan.to_dict()

    # A planned graph keeps every node's device; the fallback is the plan's, not a node's.
    keep = Constraints(fallback=plan.fallback)
    replanned, replaced = plan_graph(costs, planned, keep)
    assert replanned.to_dict() == plan.to_dict()
    assert replaced.assignment() == planned.assignment()
    inverted = {n: {t: 1.0 / c for t, c in e.items()} for n, e in costs.node_cost.items()}
    repriced = dataclasses.replace(costs, node_cost=inverted)
    assert plan_graph(repriced, planned, keep)[0].to_dict() == plan.to_dict()  # devices hold
    same = dataclasses.replace(constraints, fallback=plan.fallback)
    assert plan_graph(costs, planned, same)[0].to_dict() == plan.to_dict()


@settings(max_examples=30, deadline=None)
@given(cases())
def test_pins_and_forbids_live_on_the_nodes(costs: Costs) -> None:
    first, last = costs.graph.nodes[0], costs.graph.nodes[-1]
    target = costs.supported(first)[-1]
    banned = costs.supported(last)[:1] if len(costs.supported(last)) > 1 else []
    constraints = Constraints(
        pins=[(f"name:{first.name}", str(target))],
        forbids=[(f"name:{last.name}", str(t)) for t in banned],
    )
    marked = write_constraints(costs, constraints)
    assert not any(node.virtual_device.is_set or node.forbidden for node in costs.graph.nodes)
    assert marked.node(first.name).virtual_device == target
    assert marked.node(last.name).forbidden == frozenset(banned)
    assert sum(node.virtual_device.is_set for node in marked.nodes) == 1
    restricted = apply(costs, constraints)
    assert restricted.graph.node(first.name).virtual_device == target
    assert restrict(dataclasses.replace(costs, graph=marked)).node_cost == restricted.node_cost
    assert restricted.supported(first.name) == [target]
    assert not set(banned) & set(restricted.supported(last.name))
    untouched = [n.name for n in costs.graph.nodes if n.name not in (first.name, last.name)]
    assert all(restricted.supported(n) == costs.supported(n) for n in untouched)


def test_a_partial_pin_allows_every_target_it_matches() -> None:
    costs = _any_costs()
    name = costs.graph.nodes[0].name
    partial = apply(costs, Constraints(pins=[(f"name:{name}", "cpu")]))
    assert set(partial.supported(name)) == {t for t in costs.supported(name) if t.device == "cpu"}
    exact = apply(costs, Constraints(pins=[(f"name:{name}", str(ORT))]))
    assert exact.supported(name) == [ORT]
    placed = place(costs.graph, {n.name: NUMPY for n in costs.graph.nodes})
    with pytest.raises(ConstraintError, match=f"node '{name}' is placed on cpu@numpy"):
        apply(
            dataclasses.replace(costs, graph=placed),
            Constraints(pins=[(f"name:{name}", "opencl:0")]),
        )


def test_plan_for_places_a_copy_and_builds_from_its_nodes() -> None:
    costs = _any_costs()
    assignment = {node.name: NUMPY for node in costs.graph.nodes}
    plan = plan_for(assignment, costs)
    assert not any(node.virtual_device.is_set for node in costs.graph.nodes)
    assert placement(place_plan(costs.graph, plan)) == assignment
    assert [p.target for p in plan.partitions] == [str(NUMPY)]


def _any_costs() -> Costs:
    """The residual graph a -> b -> c, a -> c, every node on every target at equal cost."""
    costs = _residual()
    node_cost = {n.name: {NUMPY: 1.0, ORT: 1.0, OPENCL: 1.0} for n in costs.graph.nodes}
    return dataclasses.replace(costs, targets=[NUMPY, ORT, OPENCL], node_cost=node_cost)
