"""Experiment: what a crossing between two libraries on one CPU costs, taken apart.

Issue 22 reached for plans that mix codegens and beat the best single one by 10%; every
mixed plan measured slower. This experiment shows where the time goes. For each model the
host library (``--host``, default ``cpu@openvino``) runs everything but the nodes of one op
type, which go to the guest library (``--guest``, default ``cpu@onnxruntime``): the op
types the cost model prices cheaper on the guest, the largest saving first, one plan each
(``--moves``). Each plan is measured with the single host target in interleaved rounds
(outputs checked against the reference), then taken apart:

- **in plan**: each partition's wall time inside sequential runs of the plan (the plan
  executor's step timings), medians over ``--runs`` runs, summed;
- **alone**: each partition's compiled subgraph run in a tight loop on the same inputs,
  medians, summed.

``(in plan - alone) / switches`` is what entering a partition after another library ran
costs (sleeping pool threads, caches the other library left); ``alone`` against the single
target is what cutting the host's graph costs (layouts converted at the new edges, fusions
and in-place concatenations lost). ``predicted saving`` is the cost model's gain from
moving the nodes with every crossing free. Writes experiments/results/crossing_cost.csv.

    python experiments/exp_crossing_cost.py [--models shufflenet squeezenet] [--moves 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import pandas as pd
from _common import console, measure, model_costs, show, write_csv, zoo_arguments

from autopart.costmodel.costs import Costs
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.plan.build import build_plan_for
from autopart.plan.schema import Plan
from autopart.profile.values import reference_values
from autopart.runtime.plan_executor import PlanExecutor

MODELS = ["shufflenet", "squeezenet", "inception_v1", "densenet121"]


def cheaper_on_guest(costs: Costs, host: VirtualDevice, guest: VirtualDevice) -> list[str]:
    """Op types whose nodes all run on both and cost less on ``guest``, largest saving first."""
    saving: dict[str, float] = {}
    for node in costs.graph.nodes:
        supported = costs.supported(node)
        if host not in supported or guest not in supported:
            saving[node.op_type] = float("-inf")
            continue
        gain = costs.cost(node, host) - costs.cost(node, guest)
        saving[node.op_type] = saving.get(node.op_type, 0.0) + gain
    ranked = sorted((gain, op) for op, gain in saving.items() if gain > 0)
    return [op for _, op in reversed(ranked)]


def moved_plan(costs: Costs, host: VirtualDevice, guest: VirtualDevice, op: str) -> Plan:
    """Every node of type ``op`` on ``guest``, the rest on ``host``."""
    graph = costs.graph
    assignment = {n.name: guest if n.op_type == op else host for n in graph.nodes}
    return build_plan_for(graph, assignment, host, graph.name)


def anatomy(plan: Plan, graph: Graph, runs: int) -> tuple[float, float]:
    """Summed partition medians, in sequential runs of the plan and each alone in a loop."""
    values = reference_values(graph)
    feeds = {name: values[name] for name in graph.inputs}
    inside: dict[str, list[float]] = {}
    with PlanExecutor(plan, graph) as executor:
        executor.run(feeds, repeat=1, warmup=3, concurrent=False)
        for _ in range(runs):
            result = executor.run(feeds, repeat=1, concurrent=False)
            for step in result.steps:
                inside.setdefault(step.step, []).append(step.end - step.start)
        alone: dict[str, float] = {}
        for step_id, step in executor.steps.items():
            if step.compiled is None:
                continue
            env = {name: values[name] for name in step.compiled.inputs if name in values}
            for _ in range(3):
                step.compiled.run(env)
            samples = []
            for _ in range(runs):
                start = time.perf_counter()
                step.compiled.run(env)
                samples.append(time.perf_counter() - start)
            alone[step_id] = statistics.median(samples)
    in_plan = sum(statistics.median(inside[s]) for s in alone if s in inside)
    return in_plan, sum(alone.values())


def model_rows(model: str, args: argparse.Namespace) -> list[dict[str, object]]:
    """The measured and taken-apart rows of ``model``'s moved-op plans."""
    host, guest = VirtualDevice.parse(args.host), VirtualDevice.parse(args.guest)
    graph, costs = model_costs(model, args.profiles)
    single = build_plan_for(graph, {n.name: host for n in graph.nodes}, host, graph.name)
    moves = cheaper_on_guest(costs, host, guest)[: args.moves]
    plans = {"single": single, **{op: moved_plan(costs, host, guest, op) for op in moves}}
    measured = measure(graph, plans, args.rounds)
    base = measured["single"].median_s
    rows: list[dict[str, object]] = []
    for op in moves:
        plan, result = plans[op], measured.get(op)
        mixed = result.median_s if result is not None else float("nan")
        switches = max(len(plan.partitions) - 1, 1)
        in_plan, alone = anatomy(plan, graph, args.runs)
        moved = [n for n in graph.nodes if n.op_type == op]
        saving = sum(costs.cost(n, host) - costs.cost(n, guest) for n in moved)
        rows.append(
            {
                "model": model,
                "moved": f"{op} -> {guest}",
                "nodes_moved": len(moved),
                "partitions": len(plan.partitions),
                "single_ms": base * 1e3,
                "mixed_ms": mixed * 1e3,
                "extra_per_switch_ms": (mixed - base) * 1e3 / switches,
                "in_plan_ms": in_plan * 1e3,
                "alone_ms": alone * 1e3,
                "context_per_switch_ms": (in_plan - alone) * 1e3 / switches,
                "predicted_saving_ms": saving * 1e3,
                "correct": result is not None and result.correct,
            }
        )
    return rows


def main() -> None:
    """Measure and take apart the moved-op plans of every model; write the CSV."""
    parser = zoo_arguments(__doc__.splitlines()[0], MODELS, rounds=10, seed=False)
    parser.add_argument("--host", default="cpu@openvino")
    parser.add_argument("--guest", default="cpu@onnxruntime")
    parser.add_argument("--moves", type=int, default=2, help="op types moved, one plan each")
    parser.add_argument("--runs", type=int, default=30, help="runs per partition median")
    args = parser.parse_args()
    frame = pd.DataFrame([row for model in args.models for row in model_rows(model, args)])
    show(f"crossing {args.host} and {args.guest}, taken apart (ms)", frame)
    console.print(f"wrote {write_csv(frame, 'crossing_cost.csv')}")


if __name__ == "__main__":
    main()
