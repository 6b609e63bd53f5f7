"""Scale: the exact search by segments, and every stage on generated graphs of thousands of nodes.

The search by segments (:mod:`autopart.search.coarsen`, :mod:`autopart.search.ilp_series`)
is checked against brute force and against the whole-graph ILP on random DAGs built of
blocks joined at series points; series points against their definition. The generated
transformer stack and chain (:mod:`autopart.testing.scale_models`) are searched, costed and
planned for profiling at 5,000 nodes in the default run, at 12,400 and 50,000 in the slow one.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from autopart.costmodel import costs_from_profile
from autopart.costmodel.accuracy import ErrorModel
from autopart.costmodel.costs import Costs, TransferModel
from autopart.costmodel.measurements import Measurement, RowKind
from autopart.ir.graph import Graph, Node, Value
from autopart.ir.signature import op_signature
from autopart.ir.target import VirtualDevice
from autopart.loader import load_model
from autopart.profile import Profile
from autopart.profile.profiler import plan_jobs
from autopart.runtime.executor import Executor
from autopart.search import ilp, ilp_series
from autopart.search.coarsen import SHARED_READERS, segment_key, segments, series_points
from autopart.search.planner import search
from autopart.search.simulator import evaluate
from autopart.targets.resolve import resolve
from autopart.testing.exhaustive import exhaustive
from autopart.testing.scale_models import BLOCK_NODES, op_chain, synthetic_costs, transformer_stack
from autopart.tuning.partitions import too_split_to_race
from tests.opencl_here import needs_opencl

V = VirtualDevice.parse
NUMPY, ORT, OPENCL = V("cpu@numpy"), V("cpu@onnxruntime"), V("opencl:0@opencl")
TARGETS = [NUMPY, ORT, OPENCL]
F32 = np.dtype(np.float32)
MANY = ["cpu@numpy", "cpu@onnxruntime", "cpu/0@onnxruntime", "cpu/1@onnxruntime", "opencl:0@opencl"]


# -- random graphs of blocks ---------------------------------------------------------------
def block_graph(rng: np.random.Generator, blocks: int, reach: bool = False) -> Graph:
    """Blocks (one node, a diamond, a residual pair) in a row, some with a side output.

    With ``reach``, a value of the first block (a mask) and a second graph input are read
    by later blocks too: they reach over series points.
    """
    values = {"x": Value("x", (int(rng.integers(1, 64)),), F32)}
    nodes: list[Node] = []
    outputs: list[str] = []

    def add(inputs: list[str]) -> str:
        out = f"v{len(nodes)}"
        values[out] = Value(out, (int(rng.integers(1, 256)),), F32)
        if rng.random() < 0.2:
            weight = f"w{len(nodes)}"
            values[weight] = Value(weight, (4,), F32, np.ones(4, np.float32))
            inputs = [*inputs, weight]
        nodes.append(Node(f"n{len(nodes)}", "Sum", inputs, [out]))
        return out

    current, reaching = "x", []
    if reach:
        values["mask"] = Value("mask", (int(rng.integers(1, 64)),), F32)
        reaching = ["mask", add(["x"])]
        current = reaching[1]
    for _ in range(blocks):
        shape = int(rng.integers(3))
        if reaching and rng.random() < 0.5:
            current = add([current, str(rng.choice(reaching))])
        elif shape == 0:
            current = add([current])
        elif shape == 1:
            left, right = add([current]), add([current])
            current = add([left, right])
        else:
            inner = add([current])
            current = add([inner, current])
        if rng.random() < 0.15:
            outputs.append(current)
    outputs.append(current)
    inputs = ["x", "mask"] if reach else ["x"]
    return Graph("blocks", nodes, values, inputs, sorted(set(outputs)), {"": 17})


def random_costs(rng: np.random.Generator, graph: Graph, combinations: int | None) -> Costs:
    """Random node, launch, cold, copy and edge costs; at most ``combinations`` assignments."""
    node_cost: dict[str, dict[VirtualDevice, float]] = {}
    for node in graph.nodes:
        entry = {t: float(rng.uniform(0.1, 10.0)) for t in TARGETS}
        for t in TARGETS:
            if len(entry) > 1 and rng.random() < 0.2:
                entry.pop(t)
        node_cost[node.name] = entry
    while combinations and math.prod(len(e) for e in node_cost.values()) > combinations:
        widest = max(node_cost, key=lambda name: len(node_cost[name]))
        node_cost[widest].popitem()
    transfers = {
        pair: TransferModel(float(rng.uniform(0, 3)), float(rng.uniform(5, 200)))
        for pair in [("cpu", "opencl:0"), ("opencl:0", "cpu")]
    }
    launch = {t: float(rng.uniform(0, 5)) for t in TARGETS if rng.random() < 0.9}
    cold = {t: float(rng.uniform(0, 3)) for t in TARGETS if rng.random() < 0.7}
    fused: dict[str, str] = {}
    unfused: dict[str, dict[VirtualDevice, float]] = {}
    layout: dict[str, dict[VirtualDevice, float]] = {}
    for node in graph.nodes:
        producers = [p for n in node.inputs if (p := graph.value(n).producer) is not None]
        if producers and rng.random() < 0.3:
            fused[node.name] = producers[int(rng.integers(len(producers)))].name
            unfused[node.name] = {t: float(rng.uniform(0, 4)) for t in node_cost[node.name]}
        if rng.random() < 0.3:
            layout[node.name] = {t: float(rng.uniform(0, 4)) for t in node_cost[node.name]}
    # a lone partition may run quicker or slower per node (onnxruntime's pool threads)
    alone = {t: float(rng.uniform(-1.0, 1.0)) for t in TARGETS if rng.random() < 0.5}
    return Costs(graph, TARGETS, node_cost, launch, transfers, fused, unfused, layout, cold, alone)


def by_segments(costs: Costs) -> ilp.IlpResult:
    """:func:`ilp.solve_ilp` made to go by segments however small the graph."""
    return ilp.solve_ilp(costs, time_limit_s=60, by_segments=True)


def whole(costs: Costs) -> ilp.IlpResult:
    """:func:`ilp.solve_ilp` made to solve the graph whole."""
    return ilp.solve_ilp(costs, time_limit_s=60, by_segments=False)


# -- series points ---------------------------------------------------------------------------
def _brute_force_points(graph: Graph) -> list[int]:
    """Series points straight from the definition in :mod:`autopart.search.coarsen`."""
    nodes = graph.nodes
    index = {node.name: i for i, node in enumerate(nodes)}
    edges = {
        (index[p.name], index[n.name])
        for n in nodes
        for name in n.present_inputs
        if (p := graph.value(name).producer) is not None
    }
    below = {i: {i} for i in range(len(nodes))}  # each node and its ancestors
    for i in range(len(nodes)):
        for p, n in sorted(edges):
            if n == i:
                below[i] |= below[p]
    readers = {name: {index[c.name] for c in v.consumers} for name, v in graph.values.items()}
    points = []
    for k in range(len(nodes) - 1):
        output = any(name in graph.outputs for name in nodes[k].outputs)
        before = all(u in below[k] for u in range(k))
        after = all(k in below[w] for w in range(k + 1, len(nodes)))
        made_at = {
            name: -1 if value.producer is None else index[value.producer.name]
            for name, value in graph.values.items()
        }
        reached_over = any(
            made_at[name] < k < max(readers[name])
            for name, value in graph.values.items()
            if not value.is_const and 0 < len(readers[name]) < SHARED_READERS
        )
        if not output and before and after and not reached_over:
            points.append(k)
    return points


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), blocks=st.integers(1, 12), reach=st.booleans())
def test_series_points_are_those_of_the_definition(seed: int, blocks: int, reach: bool) -> None:
    rng = np.random.default_rng(seed)
    graph = block_graph(rng, blocks, reach)
    if len(graph.nodes) > 1 and rng.random() < 0.3:  # a dead end, a late source or input
        graph.values["late"] = Value("late", (4,), F32)
        middle = graph.nodes[(len(graph.nodes) - 1) // 2].outputs[0]
        kind = int(rng.integers(3))
        inputs = {0: [middle], 1: [], 2: ["late", middle]}[kind]
        graph.values["extra"] = Value("extra", (4,), F32)
        graph.nodes.append(Node("extra", "Sum", inputs, ["extra"]))
        last = graph.nodes[-2]
        if kind:
            last.inputs.append("extra")
        graph.inputs = ["x", "late"] if kind == 2 else ["x"]
        graph.rebuild()
    points = series_points(graph)
    assert points == _brute_force_points(graph)
    parts = segments(graph, points)
    assert [p for part in parts for p in part.positions] == list(range(len(graph.nodes)))
    assert [part.exit for part in parts[:-1]] == points


# -- the search by segments is exact ---------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), blocks=st.integers(2, 6), tried=st.sampled_from([0, 16]))
def test_search_by_segments_finds_the_brute_force_optimum(
    seed: int, blocks: int, tried: int
) -> None:
    """Sub-problems solved by the ILP (``tried`` 0) or, when small, tried one by one."""
    rng = np.random.default_rng(seed)
    graph = block_graph(rng, blocks)
    costs = random_costs(rng, graph, combinations=500)
    _, truth = exhaustive(costs)
    kept, ilp_series.ENUMERATED = ilp_series.ENUMERATED, tried
    try:
        result = by_segments(costs)
    finally:
        ilp_series.ENUMERATED = kept
    assert result.segments == len(series_points(graph)) + 1 or not series_points(graph)
    assert math.isclose(result.objective_s, truth.sequential_s, rel_tol=1e-6)
    assert math.isclose(
        evaluate(result.assignment, costs).sequential_s, result.objective_s, rel_tol=1e-9
    )
    assert result.bound_s <= truth.sequential_s * (1 + 1e-9)
    assert result.optimal and result.gap <= 1e-6


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), blocks=st.integers(2, 6))
def test_values_reaching_over_series_points_keep_the_bound_proven(seed: int, blocks: int) -> None:
    """An attention mask read by every block: the segments relax, the gap says by how much."""
    rng = np.random.default_rng(seed)
    graph = block_graph(rng, blocks, reach=True)
    costs = random_costs(rng, graph, combinations=500)
    _, truth = exhaustive(costs)
    result = by_segments(costs)
    assert result.bound_s <= truth.sequential_s * (1 + 1e-9) <= result.objective_s * (1 + 2e-9)
    assert math.isclose(
        evaluate(result.assignment, costs).sequential_s, result.objective_s, rel_tol=1e-9
    )
    assert result.gap == pytest.approx((result.objective_s - result.bound_s) / result.objective_s)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_search_by_segments_agrees_with_the_whole_ilp_on_larger_graphs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    graph = block_graph(rng, 14)
    costs = random_costs(rng, graph, combinations=None)
    split, joined = by_segments(costs), whole(costs)
    assert split.segments > 1 and joined.segments == 0
    assert split.optimal and joined.optimal
    assert math.isclose(split.objective_s, joined.objective_s, rel_tol=1e-6)


def test_repeated_blocks_are_one_kind_each() -> None:
    graph = load_model(transformer_stack(8 * BLOCK_NODES))
    costs = synthetic_costs(graph, ["cpu@numpy", "cpu@onnxruntime"])
    parts = segments(graph)
    assert len(parts) == 2 * 8  # two residual Adds per block, the last one ends the graph
    kinds = {segment_key(costs, part) for part in parts}
    assert len(kinds) <= 5  # first block's two, then the attention and MLP halves, the end


def test_a_plan_on_one_target_is_priced_whole_beside_the_segments() -> None:
    """Segments price every partition cold; a one-target plan is cheaper than that says."""
    graph = load_model(op_chain(12))
    costs = synthetic_costs(graph, ["cpu@numpy", "cpu@onnxruntime"])
    costs.cold = {t: 1.0 for t in costs.targets}  # dwarfs everything: one target wins
    result = by_segments(costs)
    assert len(set(result.assignment.values())) == 1
    assert result.optimal and result.bound_s == pytest.approx(result.objective_s)


def test_an_assignment_the_caller_knows_keeps_a_tie_and_is_not_built_again() -> None:
    """Two targets priced alike: the segments' answer only ties the caller's plan on one."""
    graph = load_model(op_chain(12))
    costs = synthetic_costs(graph, ["cpu@numpy", "cpu@onnxruntime"])
    first, second = costs.targets
    for table in (costs.node_cost, costs.unfused):
        for entry in table.values():
            entry[second] = entry[first]
    costs.layout = {name: {} for name in costs.layout}
    costs.launch[second] = costs.launch[first]
    costs.cold[second] = costs.cold.get(first, 0.0)
    costs.alone[second] = costs.alone.get(first, 0.0)
    on_second = {node.name: second for node in graph.nodes}
    price = evaluate(on_second, costs).sequential_s
    assert by_segments(costs).objective_s == pytest.approx(price)  # a tie, or better
    result = ilp.solve_ilp(costs, time_limit_s=60, by_segments=True, known=[(on_second, price)])
    assert result.assignment == on_second and result.objective_s == price
    assert result.plan is None  # priced from what the caller knew, not built again


# -- generated graphs of thousands of nodes --------------------------------------------------
def _fabricated_profile(graph: Graph, targets: list[str]) -> Profile:
    """A profile holding what costs need for ``graph`` on cpu ``targets``, nothing measured."""
    profile = Profile({"fingerprint": "fabricated"})
    for target in targets:
        for key in ("wall", "timed"):
            profile.record(
                RowKind.LAUNCH, target, key, Measurement(2e-5, 2e-5, 2e-5, 2e-5, 2e-5, 9)
            )
        for signature in dict.fromkeys(op_signature(node, graph) for node in graph.nodes):
            seconds = 1e-6 * (1 + len(signature) % 7)
            timing = Measurement(seconds, seconds, seconds, seconds, seconds, 9)
            profile.record(RowKind.OP, target, signature, timing, "Sum")
    return profile


@pytest.mark.parametrize("family", [pytest.param("transformer", marks=pytest.mark.slow), "chain"])
def test_five_thousand_nodes_are_costed_planned_and_searched_exactly(family: str) -> None:
    started = time.perf_counter()
    model = transformer_stack(5000) if family == "transformer" else op_chain(5000)
    graph = load_model(model)
    targets = ["cpu@numpy", "cpu@onnxruntime"]
    profile = _fabricated_profile(graph, targets)
    costed = costs_from_profile(graph, profile, targets)
    assert len(costed.node_cost) == len(graph.nodes)
    jobs, _, _ = plan_jobs(graph, [resolve("cpu@numpy")], profile)
    assert {job.kind for job in jobs} & {RowKind.CALIBRATION, RowKind.CUT}  # windows
    result = ilp.solve_ilp(synthetic_costs(graph, MANY), time_limit_s=60)
    assert result.optimal and result.gap <= 1e-6 and result.segments > 300
    assert time.perf_counter() - started < 60  # minutes before this work was made linear


@pytest.mark.slow
@pytest.mark.parametrize(("family", "nodes"), [("transformer", 12_400), ("chain", 50_000)])
def test_large_graphs_search_to_a_gap_under_one_percent_within_a_minute(
    family: str, nodes: int
) -> None:
    model = transformer_stack(nodes) if family == "transformer" else op_chain(nodes)
    graph = load_model(model)
    targets = ["cpu@numpy", "cpu@onnxruntime"]
    costed = costs_from_profile(graph, _fabricated_profile(graph, targets), targets)
    assert len(costed.node_cost) == len(graph.nodes)
    started = time.perf_counter()
    plan_jobs(graph, [resolve("cpu@numpy")], _fabricated_profile(graph, targets))
    assert time.perf_counter() - started < 60
    result = ilp.solve_ilp(synthetic_costs(graph, MANY), time_limit_s=60)
    assert result.gap <= 0.01 and result.solve_s < 90


def test_plans_too_split_to_compile_and_predicted_slow_do_not_race() -> None:
    """Per-op-best alternates targets on a chain whose ops each prefer another one."""
    graph = load_model(op_chain(600))
    costs = synthetic_costs(graph, ["cpu@numpy", "cpu@onnxruntime"])
    for index, node in enumerate(graph.nodes):
        cheap, dear = (NUMPY, ORT) if index % 2 else (ORT, NUMPY)
        costs.node_cost[node.name] = {cheap: 1e-6, dear: 2e-6}
    costs.launch = {t: 1e-4 for t in costs.targets}
    outcome = search(costs)
    per_op = outcome.candidates["per-op-best"]
    assert len(per_op.plan.partitions) > 256
    left_out = {c.name for c in too_split_to_race(outcome)}
    assert "per-op-best" in left_out and outcome.chosen.name not in left_out


def test_merging_a_reader_into_its_only_producer_would_lose_the_optimum() -> None:
    """Why nothing is merged: one reader of one producer, same targets, one device."""
    values = {name: Value(name, (4,), F32) for name in ("x", "a", "b")}
    nodes = [Node("p", "Relu", ["x"], ["a"]), Node("g", "Relu", ["a"], ["b"])]
    graph = Graph("pair", nodes, values, ["x"], ["b"], {"": 17})
    node_cost = {"p": {NUMPY: 1e-6, ORT: 5e-6}, "g": {NUMPY: 5e-6, ORT: 1e-6}}
    costs = Costs(graph, [NUMPY, ORT], node_cost, launch={NUMPY: 0.5e-6, ORT: 0.5e-6})
    best, truth = exhaustive(costs)
    assert best == {"p": NUMPY, "g": ORT}
    assert truth.sequential_s == pytest.approx(3e-6)
    for target in (NUMPY, ORT):
        assert evaluate({"p": target, "g": target}, costs).sequential_s == pytest.approx(6.5e-6)
    result = by_segments(costs)
    assert result.assignment == best and result.optimal


def test_openvino_compiles_long_chains_without_snippets_and_quickly() -> None:
    """Its snippets take time beyond the square of a chain's length to compile."""
    from autopart.targets.registry import get_codegen
    from autopart.targets.resolve import resolve as resolve_target

    resolved = resolve_target("cpu@openvino")
    if not resolved.codegen.available():
        pytest.skip("openvino is not installed")
    codegen = get_codegen("openvino")
    chain = load_model(op_chain(1000))
    started = time.perf_counter()
    compiled = codegen.compile(chain, chain.nodes, chain.inputs, chain.outputs, resolved.placement)
    assert compiled.config.get("SNIPPETS_MODE") == "DISABLE"
    assert time.perf_counter() - started < 5  # 8-11 s with snippets on this machine
    x = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    expected = Executor(chain).run({"x": x}).outputs[chain.outputs[0]]
    env: dict[str, object] = {"x": x}
    compiled.run(env)
    assert np.allclose(np.asarray(env[chain.outputs[0]]), expected, atol=1e-5)
    stack = load_model(transformer_stack(BLOCK_NODES))
    kept = codegen.compile(stack, stack.nodes, stack.inputs, stack.outputs, resolved.placement)
    assert "SNIPPETS_MODE" not in kept.config  # short chains: attention runs quicker with them


@pytest.mark.parametrize("family", ["chain", pytest.param("transformer", marks=pytest.mark.slow)])
def test_openvino_compiles_large_subgraphs_in_pieces_that_compute_the_same(family: str) -> None:
    """OpenVINO's compile grows faster than the graph: large subgraphs go in pieces."""
    from autopart.targets.openvino.pieces import PIECE_NODES, PiecewiseSubgraph
    from autopart.targets.resolve import resolve as resolve_target

    resolved = resolve_target("cpu@openvino")
    if not resolved.codegen.available():
        pytest.skip("openvino is not installed")
    model = op_chain(4500) if family == "chain" else transformer_stack(4500)
    graph = load_model(model)
    compiled = resolved.codegen.compile(
        graph, graph.nodes, graph.inputs, graph.outputs, resolved.placement
    )
    assert isinstance(compiled, PiecewiseSubgraph) and len(compiled.pieces) == 3
    assert sum(len(piece.produced) for piece in compiled.pieces) < 10  # cut where little passes
    x = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    expected = Executor(graph).run({"x": x}).outputs[graph.outputs[0]]
    env: dict[str, object] = {"x": x}
    compiled.run(env)
    assert set(env) == {"x", graph.outputs[0]}  # what passed between pieces is gone
    assert np.allclose(np.asarray(env[graph.outputs[0]]), expected, rtol=1e-4, atol=1e-4)
    assert 2 * PIECE_NODES < len(graph.nodes) <= 3 * PIECE_NODES


def test_job_planning_and_the_ilp_report_progress() -> None:
    from autopart.profile.kinds import JOB_KINDS

    graph = load_model(op_chain(600))
    heard: list[str] = []
    plan_jobs(
        graph, [resolve("cpu@numpy")], _fabricated_profile(graph, ["cpu@numpy"]),
        progress=lambda done, total, label: heard.append(label),
    )  # fmt: skip
    assert [label.split(" ")[1] for label in heard] == [kind.kind.value for kind in JOB_KINDS]
    costs = synthetic_costs(graph, ["cpu@numpy", "cpu@onnxruntime"])
    heard.clear()
    ilp.solve_ilp(costs, progress=lambda done, total, label: heard.append(label))
    assert heard and all(label.startswith("ILP by segments: kind ") for label in heard)
    heard.clear()
    ilp.solve_ilp(costs, by_segments=False, progress=lambda d, t, label: heard.append(label))
    assert heard[0].startswith("ILP solve 1: ")


@needs_opencl
def test_opencl_fuses_a_long_chain_into_kernels_of_bounded_length() -> None:
    """Grouping stays linear in the chain, and no kernel's source grows without end."""
    from autopart.targets.opencl.codegen import plan_groups
    from autopart.targets.opencl.elementwise import MAX_CHAIN
    from autopart.targets.resolve import resolve as resolve_target

    graph = load_model(op_chain(3 * MAX_CHAIN))
    groups = plan_groups(graph, graph.nodes, graph.outputs)
    assert [len(group.nodes) for group in groups] == [MAX_CHAIN] * 3
    resolved = resolve_target("opencl:0@opencl")
    if not resolved.codegen.available():
        pytest.skip("no OpenCL device")
    compiled = resolved.codegen.compile(
        graph, graph.nodes, graph.inputs, graph.outputs, resolved.placement
    )
    x = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    env: dict[str, object] = {"x": resolved.placement.device.from_host(x, None)}
    compiled.run(env)
    found = resolved.placement.device.to_host(env[graph.outputs[0]])
    expected = Executor(graph).run({"x": x}).outputs[graph.outputs[0]]
    assert np.allclose(found, expected, rtol=1e-4, atol=1e-5)


class _OpenClReduced(ErrorModel):
    """A budget in which the OpenCL target of the random cases stands for a reduced one."""

    def weight(self, node: str, target: VirtualDevice) -> float:
        return self.weights.get((node, "bf16"), 0.0) if target == OPENCL else 0.0


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    blocks=st.integers(2, 5),
    quantile=st.floats(0.0, 1.0),
)
@example(seed=11810, blocks=3, quantile=0.0)  # segments and the whole ILP tie: still optimal
def test_search_by_segments_is_exact_under_a_tolerance(
    seed: int, blocks: int, quantile: float
) -> None:
    """The budget spans every segment: the answer fits it and is the best plan that does."""
    rng = np.random.default_rng(seed)
    graph = block_graph(rng, blocks)
    costs = random_costs(rng, graph, combinations=500)
    names = [node.name for node in graph.nodes]
    weights = {(name, "bf16"): float(rng.uniform(0, 1e-4)) for name in names}
    choices = [
        dict(zip(names, c, strict=True)) for c in itertools.product(*map(costs.supported, names))
    ]
    errors = [_OpenClReduced(weights, 1.0).predicted_error(a) for a in choices]
    budget = _OpenClReduced(weights, float(np.quantile(errors, quantile)))
    best = min(evaluate(a, costs).sequential_s for a in choices if budget.fits(a))
    result = ilp.solve_ilp(costs, time_limit_s=60, by_segments=True, accuracy=budget)
    assert budget.fits(result.assignment)
    assert result.optimal
    assert math.isclose(result.objective_s, best, rel_tol=1e-6)
    assert result.bound_s <= best * (1 + 1e-9)


def test_plans_the_search_simulated_already_are_not_built_again_by_the_ilp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The baselines' simulations reach the ILP: it builds none of those plans again.

    On 50,000 nodes a plan takes seconds to build; the ILP by segments offered the per-node
    quickest assignment and every single target, which the baselines had just priced.
    The answer is the same either way.
    """
    graph = load_model(op_chain(1200))
    costs = synthetic_costs(graph, MANY)
    built: list[int] = []
    real_plan_for = ilp.plan_for

    def counting(assignment, costs, *args, **kwargs):  # type: ignore[no-untyped-def]
        built.append(len(set(assignment.values())))
        return real_plan_for(assignment, costs, *args, **kwargs)

    monkeypatch.setattr(ilp, "plan_for", counting)
    alone = ilp.solve_ilp(costs, time_limit_s=60)
    rebuilt = len(built)
    built.clear()
    outcome = search(costs)
    baselines = [c for c in outcome.candidates.values() if c.kind.value != "ilp"]
    assert rebuilt >= 2 and len(built) <= rebuilt - 2  # the single targets, at least
    assert {c.kind.value for c in baselines} >= {"single", "per-op-best"}
    ilp_result = outcome.ilp
    assert ilp_result is not None
    assert ilp_result.objective_s == pytest.approx(alone.objective_s, rel=1e-12)
    assert ilp_result.bound_s == pytest.approx(alone.bound_s, rel=1e-12)


@pytest.mark.parametrize("source", ["", "elsewhere.onnx"])
def test_the_ilp_hands_its_plan_to_the_search_as_a_fresh_build_would_make_it(source: str) -> None:
    """The ILP candidate's plan, where the solver built it, equals building it again."""
    from dataclasses import replace as replaced

    from autopart.search.options import SearchOptions
    from autopart.search.simulator import plan_for

    handed = 0
    for seed, by_parts in itertools.product(range(12), (False, True)):
        rng = np.random.default_rng(seed)
        costs = random_costs(rng, block_graph(rng, 6), combinations=None)
        kept, ilp.SERIES_MIN_NODES = ilp.SERIES_MIN_NODES, 0 if by_parts else 10**9
        try:
            outcome = search(costs, replaced(SearchOptions(), source=source))
        finally:
            ilp.SERIES_MIN_NODES = kept
        assert outcome.ilp is not None
        chosen = outcome.candidates["ilp"]
        fallback = VirtualDevice.parse(chosen.plan.fallback)
        assert chosen.plan == plan_for(chosen.assignment, costs, source, fallback)
        handed += outcome.ilp.plan is not None
    assert handed >= 6  # mixed answers: the plan the solver built was handed over


@settings(max_examples=10, deadline=None)
@given(nodes=st.integers(2, 60), seed=st.integers(0, 500))
def test_the_search_builds_each_distinct_assignment_once(nodes: int, seed: int) -> None:
    """Baselines often repeat one another (a single target, HEFT and ONNX Runtime's rule on
    a model one target wins): each distinct assignment's plan is built once, and a repeat
    gets a plan of its own, equal to the first."""
    from autopart.search import planner
    from autopart.testing.scale_models import op_chain, synthetic_costs

    costs = synthetic_costs(load_model(op_chain(nodes, seed)), ["cpu@numpy", "cpu@onnxruntime"])
    calls: list[int] = []
    real = planner.plan_for

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(planner, "plan_for", counted)
        outcome = planner.search(costs)
    distinct: list[dict[str, VirtualDevice]] = []
    for candidate in outcome.candidates.values():
        if candidate.assignment not in distinct:
            distinct.append(candidate.assignment)
    assert len(calls) <= len(distinct)
    by_assignment: dict[str, object] = {}
    for candidate in outcome.candidates.values():
        key = repr(sorted(candidate.assignment.items()))
        first = by_assignment.setdefault(key, candidate.plan)
        if first is not candidate.plan:  # a repeat: its own object, the same plan
            assert first == candidate.plan and first.notes is not candidate.plan.notes


def test_the_search_builds_and_prices_each_distinct_assignment_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Baselines repeat one another (a one-target chain: single, the EP rule, the ILP)."""
    from autopart.search import planner

    graph = load_model(op_chain(40))
    costs = synthetic_costs(graph, ["cpu@numpy", "cpu@onnxruntime"])
    built: list[int] = []
    simulated: list[int] = []
    real_plan_for, real_simulate = planner.plan_for, planner.simulate
    monkeypatch.setattr(
        planner, "plan_for", lambda *a, **k: built.append(1) or real_plan_for(*a, **k)
    )
    monkeypatch.setattr(
        planner, "simulate", lambda *a, **k: simulated.append(1) or real_simulate(*a, **k)
    )
    outcome = search(costs)
    distinct = {
        tuple(str(c.assignment[n.name]) for n in graph.nodes) for c in outcome.candidates.values()
    }
    assert len(distinct) < len(outcome.candidates)  # the test needs repeats
    assert len(built) <= len(distinct) and len(simulated) == len(distinct)
    for one in outcome.candidates.values():
        for other in outcome.candidates.values():
            if (
                one is not other
                and one.assignment == other.assignment
                and one.stand_in is other.stand_in
            ):
                assert one.simulation.sequential_s == other.simulation.sequential_s
                assert one.plan is not other.plan  # each its own notes and record
