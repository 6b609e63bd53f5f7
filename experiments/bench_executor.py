"""Benchmark: executor overhead per node, and real concurrency of two units.

1. Overhead: a chain of N tiny ops (Relu and Neg on a 4-element tensor) run through the
   plan executor, (a) as one cpu@numpy partition and (b) with every node its own partition
   alternating between two lanes, so every node pays a step dispatch. The per-node time is
   an upper bound on the executor's overhead (the kernels themselves take about 1 us).
2. Concurrency: two independent branches (chains of 512x512 MatMuls) on units cpu/0 and
   cpu/1 (onnxruntime, one thread each), run concurrently and one after the other by the
   same executor, alternating run by run. With OpenCL sub-devices present the same is
   measured on opencl:0/0 and opencl:0/1.

Writes experiments/results/executor.csv and prints a table.

    python experiments/bench_executor.py [--repeat 15] [--nodes 2000]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
from onnx import TensorProto, helper, numpy_helper

import autopart.api
from autopart.runtime import random_inputs
from autopart.runtime.plan_executor import PlanExecutor
from autopart.targets.resolve import available_targets

RESULTS = Path(__file__).parent / "results"


def _model(
    nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], shape: list[int], outputs: list[str]
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "bench",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        initializer=inits,
    )
    opsets = [helper.make_opsetid("", 17)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets)
    return onnx.shape_inference.infer_shapes(model)


def chain_model(length: int) -> onnx.ModelProto:
    nodes, previous = [], "x"
    for index in range(length):
        nodes.append(
            helper.make_node(
                "Relu" if index % 2 else "Neg", [previous], [f"v{index}"], name=f"n{index}"
            )
        )
        previous = f"v{index}"
    return _model(nodes, [], [4], [previous])


def branches_model(depth: int, size: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits, outputs = [], [], []
    for branch in ("a", "b"):
        previous = "x"
        for index in range(depth):
            weight = f"w_{branch}{index}"
            inits.append(
                numpy_helper.from_array(
                    (rng.standard_normal((size, size)) / np.sqrt(size)).astype(np.float32), weight
                )
            )
            out = f"{branch}{index}"
            nodes.append(
                helper.make_node("MatMul", [previous, weight], [out], name=f"{branch}_mm{index}")
            )
            previous = out
        outputs.append(previous)
    return _model(nodes, inits, [size, size], outputs)


def time_plan(executor: PlanExecutor, feeds: dict, repeat: int, concurrent: bool) -> float:
    return executor.run(feeds, repeat=repeat, warmup=1, concurrent=concurrent).median


def overhead_rows(length: int, repeat: int) -> list[dict]:
    graph = autopart.load(chain_model(length))
    feeds = random_inputs(graph)
    rows = []
    layouts = {
        "one cpu@numpy partition": [],
        "one partition per node, two lanes": ["re:^n\\d*[02468]$=cpu/0@onnxruntime"],
    }
    for label, rules in layouts.items():
        plan, _ = autopart.api.make_plan(graph, rules)
        with PlanExecutor(plan, graph) as executor:
            median = time_plan(executor, feeds, repeat, concurrent=True)
        rows.append(
            {
                "benchmark": "overhead",
                "case": label,
                "nodes": length,
                "steps": len(plan.order),
                "median_ms": round(median * 1e3, 3),
                "per_node_us": round(median / length * 1e6, 2),
            }
        )
    return rows


def concurrency_rows(repeat: int) -> list[dict]:
    targets = {str(t) for t in available_targets()}
    pairs = [("cpu/0@onnxruntime", "cpu/1@onnxruntime", 6, 512)]
    if {"opencl:0/0@opencl", "opencl:0/1@opencl"} <= targets:
        pairs.append(("opencl:0/0@opencl", "opencl:0/1@opencl", 6, 384))
    rows = []
    for first, second, depth, size in pairs:
        graph = autopart.load(branches_model(depth, size))
        plan, _ = autopart.api.make_plan(graph, ["re:^a_=" + first, "re:^b_=" + second])
        feeds = random_inputs(graph)
        with PlanExecutor(plan, graph) as executor:
            both, one_by_one = [], []
            for _ in range(repeat):
                both.append(time_plan(executor, feeds, 1, concurrent=True))
                one_by_one.append(time_plan(executor, feeds, 1, concurrent=False))
        concurrent_ms, sequential_ms = (
            statistics.median(both) * 1e3,
            statistics.median(one_by_one) * 1e3,
        )
        rows.append(
            {
                "benchmark": "concurrency",
                "case": f"{first} + {second}",
                "nodes": 2 * depth,
                "steps": len(plan.order),
                "concurrent_ms": round(concurrent_ms, 2),
                "sequential_ms": round(sequential_ms, 2),
                "speedup": round(sequential_ms / concurrent_ms, 2),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--nodes", type=int, default=2000)
    args = parser.parse_args()
    table = pd.DataFrame(overhead_rows(args.nodes, args.repeat) + concurrency_rows(args.repeat))
    RESULTS.mkdir(exist_ok=True)
    table.to_csv(RESULTS / "executor.csv", index=False)
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
