"""Benchmark: how the exact ILP scales, on densenet121 and synthetic layered graphs.

Costs are synthetic and FLOP-derived (nothing runs): a node takes ``flops / speed + overhead``
on a target, times a seeded log-normal factor per (node, target) standing in for how well
each codegen suits each op; launches and cpu <-> opencl:0 copies have fixed prices. Targets
are the ones found here (every codegen and unit), which codegen may run which node is asked
of the real codegens; without them the seven usual targets are assumed.

Layered graphs look like CNN stacks: each layer has one to four parallel branches of
MatMul (batch 64, 128 channels, own weights) fed by the previous layer, a branch sometimes
adds a residual from two layers back, and branches merge with Sum. A second family draws
each node's one to three inputs at random from the previous three layers (width 20) - far
more tangled than a network, so the launch count needs many more cuts.

    python experiments/bench_ilp_scaling.py [--time-limit 60] [--sizes 100 1000 3000 10000]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

import autopart.api
from autopart.costmodel.costs import Costs, TransferModel
from autopart.ir.analysis import node_flops
from autopart.ir.graph import Graph, Node, Value
from autopart.ir.target import VirtualDevice
from autopart.search.ilp import solve_ilp
from autopart.search.simulator import evaluate, plan_for, simulate

RESULTS = Path(__file__).parent / "results"
FALLBACK_TARGETS = [
    "cpu@numpy",
    "cpu@onnxruntime",
    "cpu/0@onnxruntime",
    "cpu/1@onnxruntime",
    "opencl:0@opencl",
    "opencl:0/0@opencl",
    "opencl:0/1@opencl",
]
# (FLOP/s, per-node overhead s, launch s) by codegen, for a whole device; a unit runs at half
SPEED = {
    "numpy": (2e9, 1e-6, 1e-6),
    "onnxruntime": (16e9, 4e-6, 2e-5),
    "opencl": (60e9, 2e-5, 5e-5),
}
COPY = TransferModel(2e-5, 4e9)
F32 = np.dtype(np.float32)
BATCH, CHANNELS = 64, 128
Supports = Callable[[Node, Graph, VirtualDevice], bool]


def targets_here() -> tuple[list[VirtualDevice], Supports | None]:
    """The targets found on this machine and a support check, else the usual seven."""
    try:
        from autopart.targets.resolve import available_targets, resolve

        targets = available_targets()
        codegens = {t: resolve(t).codegen for t in targets}
        return targets, lambda node, graph, t: codegens[t].supports(node, graph)
    except Exception:  # no OpenCL here: cost the usual targets, all supporting every op
        return [VirtualDevice.parse(t) for t in FALLBACK_TARGETS], None


def flop_costs(graph: Graph, targets: list[VirtualDevice], supports: Supports | None) -> Costs:
    """Synthetic FLOP-derived costs of ``graph`` on ``targets`` (seeded, reproducible)."""
    rng = np.random.default_rng(0)
    node_cost: dict[str, dict[VirtualDevice, float]] = {}
    for node in graph.nodes:
        flops = node_flops(graph, node)
        entry = {}
        for target in targets:
            if supports is not None and not supports(node, graph, target):
                continue
            speed, overhead, _ = SPEED.get(str(target.codegen), SPEED["numpy"])
            if target.unit is not None:
                speed /= 2
            entry[target] = (flops / speed + overhead) * float(rng.lognormal(0.0, 0.5))
        node_cost[node.name] = entry
    launch = {t: SPEED.get(str(t.codegen), SPEED["numpy"])[2] for t in targets}
    devices = {str(t.device) for t in targets} - {"cpu"}
    transfers = {pair: COPY for d in devices for pair in (("cpu", d), (d, "cpu"))}
    return Costs(graph, targets, node_cost, launch, transfers)


def network_graph(count: int, seed: int = 0) -> Graph:
    """A CNN-like layered DAG of ``count`` nodes: branches, residuals and merges."""
    rng = np.random.default_rng(seed)
    values = {"x": Value("x", (BATCH, CHANNELS), F32)}
    nodes: list[Node] = []
    weight = np.broadcast_to(np.float32(0.01), (CHANNELS, CHANNELS))

    def add(op: str, inputs: list[str]) -> str:
        name = f"v{len(nodes)}"
        values[name] = Value(name, (BATCH, CHANNELS), F32)
        if op == "MatMul":
            values[f"w{len(nodes)}"] = Value(f"w{len(nodes)}", weight.shape, F32, weight)
            inputs = [*inputs, f"w{len(nodes)}"]
        nodes.append(Node(f"n{len(nodes)}", op, inputs, [name]))
        return name

    layers = [["x"]]
    while len(nodes) < count:
        previous = layers[-1]
        if len(previous) > 1 and (rng.random() < 0.35 or len(nodes) + len(previous) > count):
            layers.append([add("Sum", list(previous))])
            continue
        width = int(rng.integers(1, 5)) if len(previous) == 1 else len(previous)
        layer = []
        for branch in range(min(width, count - len(nodes))):
            out = add("MatMul", [previous[branch % len(previous)]])
            if len(layers) > 3 and rng.random() < 0.15:
                out = add("Add", [out, str(rng.choice(layers[-3]))]) if len(nodes) < count else out
            layer.append(out)
        layers.append(layer)
    return _finish("network", nodes, values)


def tangled_graph(count: int, width: int = 20, seed: int = 0) -> Graph:
    """A layered DAG whose nodes read one to three random values of the last three layers."""
    rng = np.random.default_rng(seed)
    values = {"x": Value("x", (BATCH, CHANNELS), F32)}
    nodes: list[Node] = []
    layers = [["x"]]
    while len(nodes) < count:
        layer = []
        for _ in range(min(width, count - len(nodes))):
            pool = [v for previous in layers[-3:] for v in previous]
            picks = rng.choice(pool, size=min(int(rng.integers(1, 4)), len(pool)), replace=False)
            name = f"v{len(nodes)}"
            values[name] = Value(name, (BATCH, CHANNELS), F32)
            op = "Relu" if len(picks) == 1 else "Sum"
            nodes.append(Node(f"n{len(nodes)}", op, [str(p) for p in picks], [name]))
            layer.append(name)
        layers.append(layer)
    return _finish("tangled", nodes, values)


def _finish(name: str, nodes: list[Node], values: dict[str, Value]) -> Graph:
    used = {i for node in nodes for i in node.inputs}
    outputs = [out for node in nodes for out in node.outputs if out not in used]
    return Graph(name, nodes, values, ["x"], outputs, {"": 17})


def bench(label: str, graph: Graph, time_limit: float) -> dict:
    targets, supports = targets_here()
    costs = flop_costs(graph, targets, supports)
    result = solve_ilp(costs, time_limit_s=time_limit)
    plan = plan_for(result.assignment, costs)
    sim = simulate(plan, costs)
    fastest = {n.name: min(costs.supported(n), key=lambda t: costs.cost(n, t)) for n in graph}
    return {
        "graph": label,
        "nodes": len(graph.nodes),
        "targets": len(targets),
        "variables": result.variables,
        "constraints": result.constraints,
        "solves": result.iterations,
        "cuts": result.cuts,
        "solve_s": round(result.solve_s, 2),
        "objective_ms": round(result.objective_s * 1e3, 4),
        "bound_ms": round(result.bound_s * 1e3, 4),
        "gap": f"{result.gap:.2e}",
        "optimal": result.optimal,
        "partitions": len(plan.partitions),
        "copies": len(plan.copies),
        "makespan_ms": round(sim.makespan_s * 1e3, 4),
        "per_node_fastest_ms": round(evaluate(fastest, costs).sequential_s * 1e3, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--sizes", type=int, nargs="*", default=[100, 1000, 3000, 10000])
    parser.add_argument("--tangled", type=int, nargs="*", default=[100, 1000])
    args = parser.parse_args()
    console = Console(width=160)
    cases: list[tuple[str, Callable[[], Graph]]] = [
        ("densenet121", lambda: autopart.api.load("densenet121"))
    ]
    cases += [(f"layered-{n}", lambda n=n: network_graph(n)) for n in args.sizes]
    cases += [(f"tangled-{n}", lambda n=n: tangled_graph(n)) for n in args.tangled]
    rows = []
    for label, make in cases:
        rows.append(bench(label, make(), args.time_limit))
        console.print(rows[-1])
    frame = pd.DataFrame(rows)
    RESULTS.mkdir(exist_ok=True)
    frame.to_csv(RESULTS / "ilp_scaling.csv", index=False)
    shown = ["graph", "nodes", "targets", "variables", "solves", "cuts", "solve_s"]
    shown += ["objective_ms", "bound_ms", "gap", "optimal", "partitions", "copies"]
    table = Table(*shown, title="exact ILP: solve time and gap (synthetic FLOP costs)")
    for row in frame[shown].itertuples(index=False):
        table.add_row(*(str(v) for v in row))
    console.print(table)
    console.print(f"all columns in {RESULTS / 'ilp_scaling.csv'}")


if __name__ == "__main__":
    main()
