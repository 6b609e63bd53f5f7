"""Benchmark: every zoo model wholly on every single whole-device target, side by side.

For each model, one plan per target (every node on that target; nodes it lacks fall back
to cpu@numpy, and the count is recorded) plus onnxruntime alone as the speed peer. All run
in one process on the same inputs, alternating run by run. Outputs are checked against
the numpy reference. Writes experiments/results/single_targets.csv and prints a table.

Targets (issue 3): resnet50 on PoCL OpenCL no slower than 3x onnxruntime. onnxruntime
(the peer and the codegen) runs with thread spinning off, so that no run inherits busy
cores from the one before it.

    python experiments/bench_single_targets.py [--repeat 10] [MODEL ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import pandas as pd

import autopart
import autopart.api
from autopart.runtime import random_inputs
from autopart.runtime.plan_executor import PlanExecutor
from autopart.targets.onnxruntime.peer import onnxruntime_alone
from autopart.targets.resolve import available_targets

RESULTS = Path(__file__).parent / "results"


def bench_model(name: str, repeat: int) -> list[dict]:
    model = autopart.load_zoo_model(name)
    graph = autopart.load(model)
    graph.meta["source"] = name
    feeds = random_inputs(graph)
    # Spinning off: the peer's spinning threads would hold both cores after each of its
    # runs and slow down whatever runs next; alone, resnet50 takes the same time either way.
    run_peer = onnxruntime_alone(name)
    targets = [str(t) for t in available_targets() if t.unit is None]
    executors = {}
    for target in targets:
        plan, _ = autopart.api.make_plan(graph, [f"idx:0-{len(graph.nodes) - 1}={target}"])
        fallen = sum(1 for node, where in plan.assignment.items() if where != target)
        executors[target] = (PlanExecutor(plan, graph), fallen)
    times: dict[str, list[float]] = {target: [] for target in targets}
    times["onnxruntime (peer)"] = []
    errors = {}
    for target, (executor, _) in executors.items():
        result = executor.run(feeds, warmup=1)
        errors[target] = max(autopart.api.check_outputs(graph, feeds, result.outputs).values())
    run_peer(feeds)
    for _ in range(repeat):
        for target, (executor, _) in executors.items():
            times[target].append(executor.run(feeds).latencies[0])
        start = time.perf_counter()
        run_peer(feeds)
        times["onnxruntime (peer)"].append(time.perf_counter() - start)
    peer = statistics.median(times["onnxruntime (peer)"])
    rows = []
    for target, samples in times.items():
        median = statistics.median(samples)
        executor_fallen = executors.get(target, (None, 0))[1]
        rows.append({
            "model": name, "target": target, "median_ms": round(median * 1e3, 2),
            "vs_onnxruntime": round(median / peer, 2), "fallback_nodes": executor_fallen,
            "max_rel_error": f"{errors.get(target, 0.0):.1e}", "repeat": repeat,
        })  # fmt: skip
    for executor, _ in executors.values():
        executor.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=autopart.zoo_names())
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    rows = [row for name in args.models for row in bench_model(name, args.repeat)]
    table = pd.DataFrame(rows)
    RESULTS.mkdir(exist_ok=True)
    table.to_csv(RESULTS / "single_targets.csv", index=False)
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
