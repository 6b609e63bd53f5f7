"""Benchmark: the best sustained f32 GEMM rate (GFLOP/s) of each codegen on this machine.

A one-node ``MatMul`` (an N x N input times a constant N x N weight, as a dense layer) is
compiled through autopart's codegen interface for every whole-device target here
(``cpu@numpy``, ``cpu@onnxruntime``, ``cpu@openvino``, ``opencl:0@opencl`` when present)
and timed with ``run_timed``: wall time of the call on the CPU codegens, the kernels'
device time (profiling events) on OpenCL, whose input is uploaded beforehand. Targets
alternate run by run (interleaved rounds), so machine noise hits them alike; each
(target, size) reports the median of its runs, and the best rate is the best median over
the sizes (the fastest run's rate is kept too: on a shared machine it shows what the
codegen reaches undisturbed). Every output is checked against ``numpy.matmul`` in float64 first.

resnet50's compute bound is its FLOP count divided by the best rate of any codegen
(8.2 GFLOP for one 224x224 image); the table prints it. Writes
``experiments/results/gemm_rate.csv``.

    python experiments/bench_gemm_rate.py [--sizes 512 1024 1536 2048] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pandas as pd

import autopart
from autopart.ir.graph import Graph
from autopart.targets.codegen import CompiledSubgraph
from autopart.targets.resolve import ResolvedTarget, available_targets, resolve

RESULTS = Path(__file__).parent / "results"
RESNET50_GFLOP = 8.2
TOLERANCE = 1e-3


def gemm_graph(size: int, seed: int = 0) -> tuple[Graph, np.ndarray]:
    """``y = x @ w`` with a constant ``w``, both ``size`` x ``size``; and an input ``x``."""
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((size, size), dtype=np.float32)
    node = onnx.helper.make_node("MatMul", ["x", "w"], ["y"])
    shape = [size, size]
    graph = onnx.helper.make_graph(
        [node],
        f"gemm{size}",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, shape)],
        [onnx.numpy_helper.from_array(weight, "w")],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
    return autopart.load(model), rng.standard_normal((size, size), dtype=np.float32)


class Timed:
    """One target's compiled GEMM and its input, resident on the target's device."""

    def __init__(self, resolved: ResolvedTarget, graph: Graph, x: np.ndarray) -> None:
        self.resolved = resolved
        self.graph = graph
        self.compiled: CompiledSubgraph = resolved.codegen.compile(
            graph, graph.nodes, ["x", "w"], ["y"], resolved.placement
        )
        self.device = resolved.placement.device
        self.x = self.device.from_host(x, resolved.placement.unit)

    def env(self) -> dict[str, Any]:
        """A fresh environment holding the input (and the weight for codegens that read it)."""
        return {"x": self.x, "w": self.graph.value("w").const}

    def seconds(self) -> float:
        """One run's seconds, as ``run_timed`` reports them."""
        seconds = self.compiled.run_timed(self.env())
        self.device.synchronize()
        return seconds

    def output(self) -> np.ndarray:
        """The output of one run, on the host."""
        env = self.env()
        self.compiled.run(env)
        self.device.synchronize()
        return self.device.to_host(env["y"])


def bench_size(targets: list[ResolvedTarget], size: int, rounds: int) -> list[dict[str, Any]]:
    """Median seconds and GFLOP/s of every target at ``size``, from interleaved rounds."""
    graph, x = gemm_graph(size)
    expected = x.astype(np.float64) @ graph.value("w").const.astype(np.float64)
    timed = [Timed(resolved, graph, x) for resolved in targets]
    errors = {}
    for one in timed:
        got = one.output()
        errors[str(one.resolved)] = float(np.abs(got - expected).max() / np.abs(expected).max())
        one.seconds()  # warm-up
    samples: dict[str, list[float]] = {str(one.resolved): [] for one in timed}
    for _ in range(rounds):
        for one in timed:
            samples[str(one.resolved)].append(one.seconds())
    flop = 2.0 * size**3
    rows = []
    for target, seconds in samples.items():
        median = statistics.median(seconds)
        rows.append(
            {
                "target": target,
                "size": size,
                "median_ms": round(median * 1e3, 3),
                "min_ms": round(min(seconds) * 1e3, 3),
                "gflops": round(flop / median / 1e9, 1),
                "gflops_fastest_run": round(flop / min(seconds) / 1e9, 1),
                "max_rel_error": errors[target],
                "ok": errors[target] <= TOLERANCE,
                "rounds": rounds,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[512, 1024, 1536, 2048])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--targets", nargs="*", default=None, help="default: every whole-device target here"
    )
    args = parser.parse_args()
    names = args.targets or [str(t) for t in available_targets() if t.unit is None]
    targets = [resolve(name) for name in names]
    rows = []
    for size in args.sizes:
        rows.extend(bench_size(targets, size, args.rounds))
        for row in rows[-len(targets) :]:
            print(row, flush=True)
    table = pd.DataFrame(rows)
    RESULTS.mkdir(exist_ok=True)
    table.to_csv(RESULTS / "gemm_rate.csv", index=False)
    pivot = table.pivot(index="size", columns="target", values="gflops")
    print("\nGFLOP/s (median of each size's runs)")
    print(pivot.to_string())
    fastest = table.pivot(index="size", columns="target", values="gflops_fastest_run")
    print("\nGFLOP/s of the fastest run (what the machine gives when nothing else runs)")
    print(fastest.to_string())
    best = table[table["ok"]].sort_values("gflops").iloc[-1]
    bound_ms = RESNET50_GFLOP / float(best["gflops"]) * 1e3
    print(
        f"\nbest sustained rate: {best['gflops']} GFLOP/s ({best['target']}, {best['size']}^2); "
        f"resnet50 compute bound {RESNET50_GFLOP} GFLOP / rate = {bound_ms:.1f} ms"
    )


if __name__ == "__main__":
    main()
