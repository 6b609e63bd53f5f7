"""Benchmark: how far the profile can be trusted, and what profiling costs.

1. Time to profile resnet50 cold (empty profile store) on every target found, then again
   warm (everything reused).
2. For resnet50, squeezenet and inception_v1, on every single target: the whole-model
   latency predicted from the profile (op costs + launch + copies, through the simulator)
   against the measured median of the plan executor. Target: within 15%.
3. Copies host<->device at sizes on and off the profiled grid, 4 KiB to 64 MiB: the
   fitted transfer model against a fresh measurement. Target: within 20%.

Writes experiments/results/profile_accuracy.csv, transfer_accuracy.csv and
profile_time.csv, and prints tables.

    python experiments/bench_profile_accuracy.py [--models resnet50 squeezenet inception_v1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from autopart import api
from autopart.profile import Profile, costs_from_profile, transfer_fits
from autopart.profile.timing import TimingSettings, measure
from autopart.profile.transfer import copy_sampler
from autopart.runtime.feeds import random_inputs
from autopart.runtime.plan_executor import PlanExecutor
from autopart.search.simulator import plan_for, simulate
from autopart.targets.devices import discover
from autopart.targets.resolve import available_targets

RESULTS = Path(__file__).parent / "results"
console = Console()


def profile_time(store: Path) -> list[dict]:
    """Cold then warm profile of resnet50 on every target, in a fresh store."""
    rows = []
    for state in ("cold", "warm"):
        start = time.perf_counter()
        report, _, _ = api.profile("resnet50", None, store)
        rows.append({
            "model": "resnet50", "state": state, "seconds": round(time.perf_counter() - start, 2),
            "new": report.new, "reused": report.reused, "targets": len(report.targets),
        })  # fmt: skip
    return rows


def model_accuracy(model: str, store: Path, rounds: int) -> list[dict]:
    """Predicted against measured whole-model latency on every single target."""
    api.profile(model, None, store)
    graph = api.load(model)
    profile = Profile.load(next(store.glob("*.csv")))
    costs = costs_from_profile(graph, profile, [str(t) for t in available_targets()])
    feeds = random_inputs(graph, 0)
    executors, predicted = {}, {}
    for target in costs.targets:
        assignment = {node.name: target for node in graph.nodes}
        if any(target not in costs.node_cost[n.name] for n in graph.nodes):
            continue  # not a single-target plan
        plan = plan_for(assignment, costs, model, target)
        predicted[str(target)] = simulate(plan, costs).makespan_s
        executors[str(target)] = PlanExecutor(plan, graph)
    # Each plan runs in its own block: interleaving targets lets one target's lingering
    # worker threads (PoCL sub-devices) slow the next, which is not what a single-target
    # prediction is about.
    times: dict[str, list[float]] = {
        name: executor.run(feeds, repeat=rounds, warmup=3).latencies
        for name, executor in executors.items()
    }
    rows = []
    for name, executor in executors.items():
        measured = statistics.median(times[name])
        rows.append({
            "model": model, "target": name, "predicted_ms": round(predicted[name] * 1e3, 3),
            "measured_ms": round(measured * 1e3, 3),
            "error": round(predicted[name] / measured - 1, 4),
        })  # fmt: skip
        executor.close()
    return rows


def transfer_accuracy(store: Path) -> list[dict]:
    """Fresh copies at sizes on and off the profiled grid against the fitted model."""
    profile = Profile.load(next(store.glob("*.csv")))
    machine = discover()
    sizes = [4096, 6000, 65536, 100_000, 700_000, 3_000_000, 10_000_000, 24_000_000,
             48_000_000, 64 << 20]  # fmt: skip
    rows = []
    for (src, dst), fit in sorted(transfer_fits(profile).items()):
        for nbytes in sizes:
            sample = copy_sampler(machine.device(src), machine.device(dst), nbytes)
            measured = measure(sample, TimingSettings(), "wall").median_s
            predicted = fit.model.cost(nbytes)
            rows.append({
                "pair": f"{src}->{dst}", "nbytes": nbytes,
                "predicted_ms": round(predicted * 1e3, 4), "measured_ms": round(measured * 1e3, 4),
                "error": round(predicted / measured - 1, 4),
            })  # fmt: skip
    return rows


def show(title: str, frame: pd.DataFrame) -> None:
    table = Table(*frame.columns, title=title)
    for row in frame.itertuples(index=False):
        table.add_row(
            *(
                f"{v:+.1%}" if c == "error" else str(v)
                for c, v in zip(frame.columns, row, strict=True)
            )
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["resnet50", "squeezenet", "inception_v1"])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as directory:
        store = Path(directory)
        timing = pd.DataFrame(profile_time(store))
        timing.to_csv(RESULTS / "profile_time.csv", index=False)
        show("profiling resnet50 on every target", timing)
        accuracy = pd.DataFrame(
            [row for model in args.models for row in model_accuracy(model, store, args.rounds)]
        )
        accuracy.to_csv(RESULTS / "profile_accuracy.csv", index=False)
        show("whole-model latency: predicted from the profile vs measured", accuracy)
        transfers = pd.DataFrame(transfer_accuracy(store))
        transfers.to_csv(RESULTS / "transfer_accuracy.csv", index=False)
        show("copies: fitted model vs fresh measurement", transfers)
    console.print(
        f"max |error|: whole model {accuracy['error'].abs().max():.1%}, "
        f"copies {transfers['error'].abs().max():.1%}"
    )


if __name__ == "__main__":
    main()
