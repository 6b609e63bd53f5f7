"""Experiment: do two onnxruntime partitions pinned to different CPU units really overlap?

Two independent heavy subgraphs are compiled with the onnxruntime codegen, one on unit
cpu/0 and one on cpu/1 (one intra-op thread each, the calling thread pinned to its core).
Each workload is timed three ways, as medians (and minima) of ``--repeat`` rounds after
warm-up; the three modes alternate round by round so that machine noise hits them alike:

- ``serial_units_ms``: A on cpu/0, then B on cpu/1, from one thread;
- ``concurrent_units_ms``: A and B at once from two (persistent) threads;
- ``whole_device_ms``: A then B, each compiled without a unit (intra-op threads on every
  core), i.e. what onnxruntime does on its own.

Workloads: ``matmul_chain`` (two copies of a chain of eight 256x1024 @ 1024x1024 MatMul+Tanh)
and ``resnet50_halves`` (the first and second halves of resnet50, the second fed with the
reference value of its boundary input, so the two are independent work).
Writes ``experiments/results/ort_units.csv`` and prints a table.

    python experiments/bench_ort_units.py [--repeat 25]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pandas as pd
from _common import median_ms
from onnx import helper, numpy_helper

import autopart
from autopart.ir.graph import Graph, Node
from autopart.plan.partition import boundary
from autopart.runtime import random_inputs
from autopart.targets.codegen import Placement
from autopart.targets.devices import HostDevice
from autopart.targets.onnxruntime.codegen import OnnxRuntimeCodegen, OnnxRuntimeSubgraph
from autopart.targets.registry import get_codegen

RESULTS = Path(__file__).parent / "results"


def matmul_chains(depth: int = 8, rows: int = 256, width: int = 1024) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    for chain in "ab":
        previous = f"x_{chain}"
        for i in range(depth):
            weight = f"w_{chain}{i}"
            inits.append(
                numpy_helper.from_array(
                    (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
                    weight,
                )
            )
            nodes.append(helper.make_node("MatMul", [previous, weight], [f"m_{chain}{i}"]))
            nodes.append(helper.make_node("Tanh", [f"m_{chain}{i}"], [f"t_{chain}{i}"]))
            previous = f"t_{chain}{i}"
    typed = [
        helper.make_tensor_value_info(f"{kind}_{c}", onnx.TensorProto.FLOAT, [rows, width])
        for kind, c in [("x", "a"), ("x", "b")]
    ]
    outputs = [
        helper.make_tensor_value_info(f"t_{c}{depth - 1}", onnx.TensorProto.FLOAT, [rows, width])
        for c in "ab"
    ]
    graph = helper.make_graph(nodes, "chains", typed, outputs, initializer=inits)
    opsets = [helper.make_opsetid("", 17)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = helper.find_min_ir_version_for(opsets)
    return model


Job = tuple[Graph, list[Node]]


def workloads() -> dict[str, tuple[Job, Job, dict[str, np.ndarray]]]:
    """Each workload: two node sets and an environment holding every value they read."""
    chains = autopart.load(matmul_chains())
    a = [n for n in chains.nodes if n.outputs[0].startswith(("m_a", "t_a"))]
    b = [n for n in chains.nodes if n not in a]
    resnet = autopart.load("resnet50")
    half = len(resnet.nodes) // 2
    first, second = resnet.nodes[:half], resnet.nodes[half:]
    feeds = random_inputs(resnet, seed=3)
    # The reference value of every intermediate, so the second half can run on its own.
    every = [name for node in resnet.nodes for name in node.outputs if name]
    constants = [name for name, v in resnet.values.items() if v.is_const]
    reference: dict[str, Any] = {**resnet.constants, **feeds}
    get_codegen("numpy").compile(resnet, resnet.nodes, [*resnet.inputs, *constants], every).run(
        reference
    )
    return {
        "matmul_chain": ((chains, a), (chains, b), random_inputs(chains, seed=1)),
        "resnet50_halves": ((resnet, first), (resnet, second), reference),
    }


def compile_job(job: Job, unit: int | None) -> OnnxRuntimeSubgraph:
    graph, nodes = job
    inputs, outputs = boundary(graph, nodes)
    placement = Placement(HostDevice(), unit)
    return OnnxRuntimeCodegen().compile(graph, nodes, inputs, outputs, placement)


class Pair:
    """Two persistent threads that each run one compiled subgraph when released together."""

    def __init__(self, jobs: Sequence[tuple[OnnxRuntimeSubgraph, dict[str, Any]]]) -> None:
        self.jobs = jobs
        self.start = threading.Barrier(len(jobs) + 1)
        self.done = threading.Barrier(len(jobs) + 1)
        self.stop = False
        self.threads = [
            threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(len(jobs))
        ]
        for thread in self.threads:
            thread.start()

    def _loop(self, index: int) -> None:
        compiled, env = self.jobs[index]
        while True:
            self.start.wait()
            if self.stop:
                return
            compiled.run(dict(env))
            self.done.wait()

    def __call__(self) -> None:
        self.start.wait()
        self.done.wait()

    def close(self) -> None:
        self.stop = True
        self.start.wait()


def bench(name: str, a: Job, b: Job, env: dict[str, Any], repeat: int) -> dict[str, object]:
    unit_a, unit_b = compile_job(a, 0), compile_job(b, 1)
    whole_a, whole_b = compile_job(a, None), compile_job(b, None)
    env_a = {k: env[k] for k in unit_a.feeds}
    env_b = {k: env[k] for k in unit_b.feeds}

    def serial() -> None:
        unit_a.run(dict(env_a))
        unit_b.run(dict(env_b))

    def whole() -> None:
        whole_a.run(dict(env_a))
        whole_b.run(dict(env_b))

    pair = Pair([(unit_a, env_a), (unit_b, env_b)])
    single_a = median_ms(lambda: unit_a.run(dict(env_a)), repeat)
    single_b = median_ms(lambda: unit_b.run(dict(env_b)), repeat)
    # Interleave the three modes round by round so machine noise hits them alike.
    rounds: dict[str, list[float]] = {"serial": [], "concurrent": [], "whole": []}
    for step in (serial, pair, whole):
        step()
    for _ in range(repeat):
        for key, step in (("serial", serial), ("concurrent", pair), ("whole", whole)):
            start = time.perf_counter()
            step()
            rounds[key].append((time.perf_counter() - start) * 1e3)
    pair.close()
    serial_ms, concurrent_ms, whole_ms = (statistics.median(rounds[k]) for k in rounds)
    return {
        "workload": name,
        "a_on_cpu0_ms": round(single_a, 2),
        "b_on_cpu1_ms": round(single_b, 2),
        "serial_units_ms": round(serial_ms, 2),
        "concurrent_units_ms": round(concurrent_ms, 2),
        "whole_device_ms": round(whole_ms, 2),
        "overlap_speedup": round(serial_ms / concurrent_ms, 3),
        "vs_whole_device": round(whole_ms / concurrent_ms, 3),
        "serial_units_min_ms": round(min(rounds["serial"]), 2),
        "concurrent_units_min_ms": round(min(rounds["concurrent"]), 2),
        "whole_device_min_ms": round(min(rounds["whole"]), 2),
        "repeat": repeat,
        "cores": len(os.sched_getaffinity(0)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=25)
    args = parser.parse_args()
    if len(HostDevice().units) < 2:
        raise SystemExit("needs at least two usable cores")
    rows = [bench(name, a, b, env, args.repeat) for name, (a, b, env) in workloads().items()]
    table = pd.DataFrame(rows)
    RESULTS.mkdir(exist_ok=True)
    table.to_csv(RESULTS / "ort_units.csv", index=False)
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
