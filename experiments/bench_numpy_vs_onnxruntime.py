"""Benchmark: every zoo model on cpu@numpy against onnxruntime's CPU provider, side by side.

Both run in this process on the same inputs, alternating run by run so that machine noise
hits them alike. Writes ``experiments/results/numpy_vs_onnxruntime.csv`` and prints a table.
Target (issue 2): resnet50 on numpy no slower than 2.5x onnxruntime.

    python experiments/bench_numpy_vs_onnxruntime.py [--repeat 15] [MODEL ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import onnxruntime as ort
import pandas as pd

import autopart
from autopart.runtime import Executor, random_inputs

RESULTS = Path(__file__).parent / "results"


def bench_model(name: str, repeat: int) -> dict[str, object]:
    model = autopart.load_zoo_model(name)
    graph = autopart.load(model)
    feeds = random_inputs(graph)
    executor = Executor(graph)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    executor.run(feeds, warmup=2)
    session.run(None, feeds)
    numpy_times, ort_times = [], []
    for _ in range(repeat):
        numpy_times.append(executor.run(feeds).latencies[0])
        start = time.perf_counter()
        session.run(None, feeds)
        ort_times.append(time.perf_counter() - start)
    numpy_ms, ort_ms = statistics.median(numpy_times) * 1e3, statistics.median(ort_times) * 1e3
    return {
        "model": name,
        "nodes": len(graph.nodes),
        "numpy_ms": round(numpy_ms, 3),
        "onnxruntime_ms": round(ort_ms, 3),
        "ratio": round(numpy_ms / ort_ms, 3),
        "repeat": repeat,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=autopart.zoo_names())
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    table = pd.DataFrame([bench_model(name, args.repeat) for name in args.models])
    RESULTS.mkdir(exist_ok=True)
    table.to_csv(RESULTS / "numpy_vs_onnxruntime.csv", index=False)
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
