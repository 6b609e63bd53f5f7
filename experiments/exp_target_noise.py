"""Experiment: how far each single target's whole-model latency swings within a minute here.

For one model (default squeezenet), the plan of every node on each single target runs in
windows of ``--window`` seconds, the targets taking turns, for ``--rounds`` rounds. Each
window's median is one point. Per target it reports the spread of those window medians
(p10, median, p90 and p90/p10) and the median change from one round to the next. A
prediction made from a profile taken seconds or minutes earlier cannot be closer to a
measurement than these swings allow: they are the floor under
``bench_profile_accuracy.py``'s whole-model errors.

Writes ``experiments/results/target_noise.csv`` (every window), ``target_noise_summary.csv``
and ``target_noise.png`` (each target's window medians over time, over its own median).

    python experiments/exp_target_noise.py [--model squeezenet] [--rounds 30] [--window 0.5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pandas as pd
from _common import console, new_figure, save_figure, show, target_colour, write_csv

from autopart import api
from autopart.ir.feeds import random_inputs
from autopart.runtime.plan_executor import PlanExecutor
from autopart.targets.resolve import available_targets


def window_medians(model: str, rounds: int, window_s: float) -> pd.DataFrame:
    """One row per (round, target): when the window started and its median latency."""
    graph = api.load(model)
    feeds = random_inputs(graph, 0)
    executors = {}
    for target in (str(t) for t in available_targets()):
        plan, planned = api.make_plan(graph, [f"idx:0-{len(graph.nodes) - 1}={target}"])
        executors[target] = PlanExecutor(plan, planned)
        executors[target].run(feeds, warmup=3)
    started = time.perf_counter()
    rows = []
    for round_index in range(rounds):
        for target, executor in executors.items():
            begin = time.perf_counter()
            latencies: list[float] = []
            while time.perf_counter() - begin < window_s:
                latencies.extend(executor.run(feeds).latencies)
            rows.append({
                "round": round_index, "target": target,
                "start_s": round(begin - started, 3), "runs": len(latencies),
                "median_ms": round(statistics.median(latencies[1:] or latencies) * 1e3, 4),
            })  # fmt: skip
    for executor in executors.values():
        executor.close()
    return pd.DataFrame(rows)


def summary(windows: pd.DataFrame) -> pd.DataFrame:
    """Per target: the spread of its window medians and the median round-to-round change."""
    rows = []
    for target, group in windows.groupby("target", sort=False):
        medians = group.sort_values("round")["median_ms"].to_numpy()
        p10, median, p90 = np.percentile(medians, [10, 50, 90])
        steps = np.abs(np.diff(medians) / medians[:-1])
        rows.append({
            "target": target, "windows": len(medians), "p10_ms": p10, "median_ms": median,
            "p90_ms": p90, "p90_over_p10": p90 / p10,
            "round_to_round": float(np.median(steps)) if len(steps) else float("nan"),
        })  # fmt: skip
    return pd.DataFrame(rows)


def plot(windows: pd.DataFrame, model: str) -> None:
    """Each target's window medians over time, relative to its own median."""
    figure = new_figure(10, 5)
    axes = figure.add_subplot()
    for target, group in windows.groupby("target", sort=False):
        relative = group["median_ms"] / group["median_ms"].median()
        axes.plot(group["start_s"], relative, label=target, color=target_colour(target))
    axes.axhline(1.0, color="0.7", linewidth=0.8)
    axes.set_xlabel("seconds into the run")
    axes.set_ylabel("window median / the target's median")
    axes.set_title(f"{model}: whole-model latency in windows, each target over its own median")
    axes.legend(fontsize=8)
    save_figure(figure, "target_noise.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="squeezenet")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--window", type=float, default=0.5, help="seconds per window")
    args = parser.parse_args()
    windows = window_medians(args.model, args.rounds, args.window)
    windows.insert(0, "model", args.model)
    write_csv(windows, "target_noise.csv")
    table = summary(windows)
    write_csv(table, "target_noise_summary.csv")
    plot(windows, args.model)
    show(f"{args.model}: window medians per target ({args.window} s windows)", table)
    console.print(
        "results: experiments/results/target_noise.csv, target_noise_summary.csv, target_noise.png"
    )


if __name__ == "__main__":
    main()
