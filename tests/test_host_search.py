"""The search across hosts against brute force, on small random graphs and costs."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.costmodel.costs import Costs
from autopart.costmodel.network import Link, NetworkModel
from autopart.costmodel.sharing import Sharing
from autopart.ir import Graph, Node, Value, VirtualDevice
from autopart.search.hosts import HostSearchError, search_hosts

F32 = np.dtype(np.float32)
TARGETS = [VirtualDevice.parse("cpu@numpy"), VirtualDevice.parse("cpu@onnxruntime")]


def _graph(seed: int, count: int) -> Graph:
    """A random DAG of Add nodes, each with a weight of its own (32 bytes)."""
    rng = np.random.default_rng(seed)
    values = {"x": Value("x", (8,), F32)}
    nodes = []
    for i in range(count):
        pick = str(rng.choice(["x", *(f"v{j}" for j in range(i))]))
        values[f"w{i}"] = Value(f"w{i}", (8,), F32, np.ones(8, F32))
        values[f"v{i}"] = Value(f"v{i}", (8,), F32)
        nodes.append(Node(f"n{i}", "Add", [pick, f"w{i}"], [f"v{i}"]))
    used = {name for node in nodes for name in node.inputs}
    return Graph("g", nodes, values, ["x"], [f"v{i}" for i in range(count) if f"v{i}" not in used],
                 {"": 17})  # fmt: skip


def _brute(graph: Graph, costs: dict[str, Costs], network: NetworkModel,
           caps: dict[str, int]) -> tuple[float, float]:  # fmt: skip
    """The least latency and the highest pipeline rate over every order and every cut."""
    names = [n.name for n in graph.nodes]
    index = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}

    def crossing(cut: int) -> int:
        return sum(graph.value(v).nbytes for v in {*index, *graph.inputs}
                   if index.get(v, -1) < cut
                   and any(v in n.inputs for n in graph.nodes[cut:]))  # fmt: skip

    def link(a: str, b: str, nbytes: float) -> float:
        return 0.0 if a == b or nbytes <= 0 else network.seconds(a, b, nbytes)

    outputs = sum(graph.value(v).nbytes for v in graph.outputs if v in index)
    best_latency, best_rate = math.inf, 0.0
    hosts = list(costs)
    for k in range(1, len(hosts) + 1):
        for order in itertools.permutations(hosts, k):
            for cuts in itertools.combinations(range(1, len(names)), k - 1):
                bounds = [0, *cuts, len(names)]
                parts, fits = [link("host0", order[0], crossing(0))], True
                for s, (lo, hi) in enumerate(itertools.pairwise(bounds)):
                    host = costs[order[s]]
                    weights = 32 * (hi - lo)
                    if weights > caps.get(order[s], math.inf):
                        fits = False
                    if s:
                        parts.append(link(order[s - 1], order[s], crossing(lo)))
                    parts.append(
                        min(
                            host.launch_cost(t) + sum(host.cost(n, t) for n in names[lo:hi])
                            for t in host.targets
                        )
                    )  # each stage on its quickest target
                back = network.link(order[-1], "host0")
                parts.append(0.0 if back is None or not outputs else back.bytes_seconds(outputs))
                if fits:
                    best_latency = min(best_latency, sum(parts))
                    kept = 1.0
                    if network.sharing is not None and set(network.sharing.hosts) <= set(order):
                        kept = network.sharing.efficiency(max(parts))
                    best_rate = max(best_rate, kept / max(parts))
    return best_latency, best_rate


def _replicas_rate(graph: Graph, costs: dict[str, Costs], network: NetworkModel) -> float:
    """Replicas on every host: each its own whole-graph time with its input and output moves."""
    names = [n.name for n in graph.nodes]
    index = {v for n in graph.nodes for v in n.outputs}
    inputs = sum(graph.value(v).nbytes for v in graph.inputs)
    outputs = sum(graph.value(v).nbytes for v in graph.outputs if v in index)
    sharing, rate = network.sharing, 0.0
    for name, host in costs.items():
        whole = min(host.launch_cost(t) + sum(host.cost(n, t) for n in names) for t in host.targets)
        if name != "host0":
            whole += network.seconds("host0", name, inputs)
            whole += network.link(name, "host0").bytes_seconds(outputs) if outputs else 0.0
        kept = sharing.efficiency(whole) if sharing and name in sharing.hosts else 1.0
        rate += kept / whole
    return rate


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 6), hosts=st.integers(1, 3),
       capped=st.booleans(), shared=st.integers(0, 3))  # fmt: skip
def test_the_search_finds_the_least_latency_and_the_highest_rate_that_brute_force_finds(
    seed: int, count: int, hosts: int, capped: bool, shared: int
) -> None:
    """Also where the first ``shared`` hosts share the driver's machine (two or more): a
    plan keeping them all at work gets through fewer inputs, and replicas on every host
    (none capped) add their rates, each shared one's at its efficiency."""
    rng = np.random.default_rng(seed)
    graph = _graph(seed, count)
    names = [f"host{h}" for h in range(hosts)]
    costs = {
        name: Costs(
            graph,
            TARGETS,
            {n.name: {t: float(rng.uniform(1e-4, 1e-2)) for t in TARGETS} for n in graph.nodes},
            launch={t: float(rng.uniform(0, 1e-3)) for t in TARGETS},
        )
        for name in names
    }
    links = {
        (a, b): Link.simple(float(rng.uniform(1e-5, 2e-3)), float(rng.uniform(1e4, 1e7)))
        for a, b in itertools.permutations(names, 2)
    }
    sharing = None
    if 2 <= shared <= hosts:
        sharing = Sharing(tuple(names[:shared]), float(rng.uniform(0.5, 1)),
                          float(rng.uniform(0, 5e-3)))  # fmt: skip
    network = NetworkModel(links, sharing=sharing)
    caps = {name: 32 * int(rng.integers(1, count + 1)) for name in names} if capped else {}
    expected_latency, expected_rate = _brute(graph, costs, network, caps)
    if math.isinf(expected_latency):
        with pytest.raises(HostSearchError):
            search_hosts(graph, costs, network, caps)
        return
    latency, rate, replicas = search_hosts(graph, costs, network, caps)
    assert latency.latency_s == pytest.approx(expected_latency, rel=1e-9)
    assert rate.rate_per_s == pytest.approx(expected_rate, rel=1e-9)
    for host, target, first, end in latency.stages:  # the stage's own quickest target
        priced = costs[host]
        spent = {t: priced.launch_cost(t) + sum(priced.cost(n.name, t)
                                                for n in graph.nodes[first:end])
                 for t in priced.targets}  # fmt: skip
        assert spent[target] == pytest.approx(min(spent.values()), rel=1e-12)
    covered = [name for plan in latency.assignments(graph) for name in plan]
    assert sorted(covered) == sorted(n.name for n in graph.nodes)
    if replicas is not None:
        assert replicas.kind == "replicas" and len(replicas.assignments(graph)) >= 2
    if not capped and hosts >= 2:
        assert replicas is not None
        assert replicas.rate_per_s == pytest.approx(_replicas_rate(graph, costs, network))


def test_a_model_too_big_for_every_host_is_one_error() -> None:
    graph = _graph(0, 4)
    costs = {"host0": Costs(graph, TARGETS[:1], {n.name: {TARGETS[0]: 1e-3} for n in graph.nodes})}
    with pytest.raises(HostSearchError, match="fits their memory"):
        search_hosts(graph, costs, NetworkModel(), {"host0": 64})


def test_a_graph_of_20000_nodes_is_cut_at_few_points_and_covered_whole() -> None:
    count = 20_000
    values = {"x": Value("x", (8,), F32)}
    nodes = []
    for i in range(count):
        values[f"w{i}"] = Value(f"w{i}", (8,), F32, np.ones(8, F32))
        values[f"v{i}"] = Value(f"v{i}", (8,), F32)
        nodes.append(Node(f"n{i}", "Add", ["x" if i == 0 else f"v{i - 1}", f"w{i}"], [f"v{i}"]))
    graph = Graph("chain", nodes, values, ["x"], [f"v{count - 1}"], {"": 17})
    costs = {h: Costs(graph, TARGETS[:1], {n.name: {TARGETS[0]: 1e-5} for n in graph.nodes})
             for h in ("host0", "host1")}  # fmt: skip
    network = NetworkModel({("host0", "host1"): Link.simple(1e-4, 1e9)})
    caps = {"host0": 32 * 12_000, "host1": 32 * 12_000}  # neither holds it all
    latency, rate, replicas = search_hosts(graph, costs, network, caps)
    assert replicas is None and len(latency.stages) == 2 and len(rate.stages) == 2
    (assignment,) = latency.assignments(graph)
    assert len(assignment) == count
    assert all(32 * (end - first) <= 32 * 12_000 for _, _, first, end in latency.stages)


def test_each_stage_pays_a_call_where_a_host_is_timed_to_itself() -> None:
    graph = _graph(1, 4)
    costs = {h: Costs(graph, TARGETS[:1], {n.name: {TARGETS[0]: 1e-3} for n in graph.nodes})
             for h in ("host0", "host1")}  # fmt: skip
    call = 5e-4
    links = {(a, b): Link.simple(call, 1e9) for a in costs for b in costs}
    latency, _, replicas = search_hosts(graph, costs, NetworkModel(links))
    assert latency.stages == (("host0", TARGETS[0], 0, 4),)  # one stage: one call
    inputs, outputs = 32, 32 * len(graph.outputs)  # 8 floats each
    one = call + inputs / 1e9 + 4e-3 + outputs / 1e9  # the outputs come back without a call
    assert latency.latency_s == pytest.approx(one)
    assert replicas is not None and replicas.rate_per_s == pytest.approx(2 / one)
