"""Benchmark: our onnxruntime codegen against onnxruntime alone, head to head.

`autopart bench` times onnxruntime alone among a dozen plans whose lanes (PoCL's threads,
OpenBLAS's) can slow whatever runs next. This isolates the two: for each model, onnxruntime
alone (the bench's peer), our whole-device ``cpu@onnxruntime`` session called directly, and
the same compiled subgraph through its ``run`` (feeds and outputs by name), in rounds whose
order rotates, nothing else running.

Writes experiments/results/ort_peer.csv and prints medians and ratios to the peer.

    python experiments/bench_ort_peer.py [--models resnet50 squeezenet ...] [--rounds 40]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from autopart import api
from autopart.ir.feeds import random_inputs
from autopart.targets.devices import discover
from autopart.targets.onnxruntime.peer import onnxruntime_alone
from autopart.targets.resolve import resolve

RESULTS = Path(__file__).parent / "results"
Runner = Callable[[Mapping[str, np.ndarray]], Any]


def runners(model: str) -> dict[str, Runner]:
    """The peer, our session called directly, and our compiled subgraph's ``run``."""
    graph = api.load(model)
    resolved = resolve("cpu@onnxruntime", discover())
    compiled = resolved.codegen.compile(
        graph, graph.nodes, list(graph.inputs), list(graph.outputs), resolved.placement
    )
    session = compiled.session  # type: ignore[attr-defined]
    names = [output.name for output in session.get_outputs()]
    inputs = {i.name for i in session.get_inputs()}

    def ours_session(feeds: Mapping[str, np.ndarray]) -> Any:
        return session.run(names, {k: v for k, v in feeds.items() if k in inputs})

    def ours_compiled(feeds: Mapping[str, np.ndarray]) -> Any:
        env = dict(feeds)
        compiled.run(env)
        return env

    return {
        "onnxruntime alone": onnxruntime_alone(model),
        "cpu@onnxruntime session": ours_session,
        "cpu@onnxruntime compiled run": ours_compiled,
    }


def main() -> None:
    """Time every model's three runners in rotating rounds; write the CSV and a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["resnet50", "squeezenet", "inception_v1"])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    rows = []
    for model in args.models:
        feeds = random_inputs(api.load(model), 0)
        runs = list(runners(model).items())
        times: dict[str, list[float]] = {name: [] for name, _ in runs}
        for index in range(args.rounds + 3):
            shift = index % len(runs)
            for name, run in runs[shift:] + runs[:shift]:
                start = time.perf_counter()
                run(feeds)
                if index >= 3:
                    times[name].append(time.perf_counter() - start)
        peer = statistics.median(times["onnxruntime alone"])
        for name, samples in times.items():
            median = statistics.median(samples)
            rows.append({
                "model": model, "runner": name, "median_ms": round(median * 1e3, 3),
                "vs_onnxruntime_alone": round(median / peer, 3), "runs": len(samples),
            })  # fmt: skip
    frame = pd.DataFrame(rows)
    RESULTS.mkdir(exist_ok=True)
    frame.to_csv(RESULTS / "ort_peer.csv", index=False)
    table = Table(*frame.columns, title="our onnxruntime session against onnxruntime alone")
    for row in frame.itertuples(index=False):
        table.add_row(*(str(value) for value in row))
    Console().print(table)


if __name__ == "__main__":
    main()
