"""Experiment: does the cost model predict, and rank, whole plans as they really run?

For each model, many plans: the planner's candidates (ILP, HEFT, greedy per-op best, the
ONNX Runtime rule, every single target) plus ``--plans`` random but sensible plans (the
topological order cut at random into 2 to 8 contiguous chunks, each on a random target;
nodes it cannot run fall back to the host; seeded). Each plan's latency is predicted by the
simulator (makespan of the concurrent list schedule, from the profile's costs) and measured
with :func:`measure_plans` (interleaved rounds, medians, outputs checked).

Reports, per model and overall, the median absolute relative error |predicted/measured - 1|
and Kendall's tau between predicted and measured (does the model rank plans right?), and
both again for the same plans predicted two older ways: with every cold entry whole,
however briefly the target sat idle (``*_whole``), and without cold entries (``*_warm``:
every partition entered as if back to back).

Writes experiments/results/cost_model_accuracy.csv and cost_model_accuracy.png.

    python experiments/exp_cost_model_accuracy.py [--models squeezenet resnet50 inception_v1]
        [--plans 20] [--rounds 10]
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import pandas as pd
from _common import (
    console,
    measure,
    model_costs,
    new_figure,
    plain_log,
    random_assignment,
    save_figure,
    show,
    write_csv,
    zoo_arguments,
)
from scipy.stats import kendalltau

from autopart.search.baselines import default_fallback
from autopart.search.options import Method, Objective, SearchOptions
from autopart.search.planner import search
from autopart.search.simulator import plan_for, simulate

MODELS = ["squeezenet", "resnet50", "inception_v1"]


def run_model(model: str, plans: int, rounds: int, profiles: str | None, seed: int) -> list[dict]:
    """Predict and measure the search candidates and ``plans`` random plans of ``model``."""
    graph, costs = model_costs(model, profiles)
    outcome = search(
        costs, SearchOptions(objective=Objective.LATENCY, method=Method.ILP, budget_s=30.0)
    )
    chosen = {name: c.plan for name, c in outcome.candidates.items()}
    kinds = dict.fromkeys(chosen, "candidate")
    rng = np.random.default_rng(seed)
    fallback = default_fallback(costs)
    seen = {tuple(sorted(plan.assignment.items())) for plan in chosen.values()}
    for i in range(plans):
        for _ in range(20):  # draw again when the plan is one we already have
            plan = plan_for(random_assignment(costs, rng), costs, fallback=fallback)
            if tuple(sorted(plan.assignment.items())) not in seen:
                break
        seen.add(tuple(sorted(plan.assignment.items())))
        chosen[f"random-{i:02d}"] = plan
        kinds[f"random-{i:02d}"] = "random"
    measured = measure(graph, chosen, rounds)
    warm = dataclasses.replace(costs, cold={})
    rows = []
    for name, plan in chosen.items():
        if name not in measured:
            continue
        simulation = simulate(plan, costs)
        whole_s = simulate(plan, costs, cold_ramp_s=0.0).makespan_s
        warm_s = simulate(plan, warm).makespan_s
        result = measured[name]
        rows.append({
            "model": model, "plan": name, "kind": kinds[name],
            "predicted_ms": simulation.makespan_s * 1e3,
            "predicted_seq_ms": simulation.sequential_s * 1e3,
            "measured_ms": result.median_s * 1e3,
            "rel_error": simulation.makespan_s / result.median_s - 1,
            "predicted_whole_ms": whole_s * 1e3,
            "rel_error_whole": whole_s / result.median_s - 1,
            "predicted_warm_ms": warm_s * 1e3, "rel_error_warm": warm_s / result.median_s - 1,
            "partitions": len(plan.partitions), "copies": len(plan.copies),
            "correct": result.correct,
        })  # fmt: skip
    return rows


VARIANTS = ("", "_whole", "_warm")  # idle-scaled cold entries, whole ones, none


def summarise(frame: pd.DataFrame) -> pd.DataFrame:
    """Median |relative error| and Kendall's tau per model and overall, for each variant."""
    groups = [(model, group) for model, group in frame.groupby("model", sort=False)]
    groups.append(("overall", frame))
    rows = []
    for label, group in groups:
        unique = group.drop_duplicates(["model", "measured_ms", "predicted_ms"])
        row: dict[str, Any] = {"model": label, "plans": len(unique)}
        for variant in VARIANTS:
            tau, p_value = kendalltau(unique[f"predicted{variant}_ms"], unique["measured_ms"])
            errors = np.abs(unique[f"rel_error{variant}"])
            row[f"median_abs_rel_error{variant}"] = float(np.median(errors))
            row[f"kendall_tau{variant}"] = float(tau)
            if not variant:
                row["max_abs_rel_error"] = float(np.max(errors))
                row["p_value"] = float(p_value)
        rows.append(row)
    models = rows[:-1]
    mean: dict[str, Any] = {"model": "mean of models", "plans": sum(r["plans"] for r in models)}
    for key in rows[0]:
        if key not in mean:
            mean[key] = float(np.mean([r[key] for r in models]))
    mean["max_abs_rel_error"] = float(np.max([r["max_abs_rel_error"] for r in models]))
    mean["p_value"] = np.nan
    rows.append(mean)
    return pd.DataFrame(rows)


def plot(frame: pd.DataFrame, summary: pd.DataFrame) -> None:
    """Predicted against measured latency, log-log, with y = x; one colour per model."""
    figure = new_figure(7.5, 6.5)
    axes = figure.add_subplot()
    stats = summary.set_index("model")
    for (model, group), colour in zip(
        frame.groupby("model", sort=False), ["tab:blue", "tab:orange", "tab:green", "tab:red",
                                             "tab:purple", "tab:brown"] * 4, strict=False
    ):  # fmt: skip
        label = (
            f"{model} (tau {stats.loc[model, 'kendall_tau']:.2f}, "
            f"median |err| {stats.loc[model, 'median_abs_rel_error']:.0%})"
        )
        for kind, marker in (("candidate", "o"), ("random", "x")):
            part = group[group.kind == kind]
            axes.scatter(
                part["measured_ms"], part["predicted_ms"], c=colour, marker=marker, s=28,
                label=label if kind == "candidate" else None, alpha=0.85,
            )  # fmt: skip
    low = 0.8 * min(frame["measured_ms"].min(), frame["predicted_ms"].min())
    high = 1.25 * max(frame["measured_ms"].max(), frame["predicted_ms"].max())
    axes.plot([low, high], [low, high], color="black", linewidth=0.8, label="predicted = measured")
    axes.set_xscale("log")
    axes.set_yscale("log")
    plain_log(axes, "x", "y")
    axes.set_xlim(low, high)
    axes.set_ylim(low, high)
    axes.set_xlabel("measured latency, ms (median)")
    axes.set_ylabel("predicted latency, ms (simulated makespan)")
    axes.set_title("Cost model: predicted vs measured (o search candidates, x random plans)")
    axes.legend(fontsize="small", loc="upper left")
    axes.grid(True, which="both", linewidth=0.3, alpha=0.5)
    console.print(f"plot: {save_figure(figure, 'cost_model_accuracy.png')}")


def main() -> None:
    """Predict and measure every model's plans, then write the CSVs, tables and plot."""
    parser = zoo_arguments(__doc__.splitlines()[0], MODELS, rounds=10)
    parser.add_argument("--plans", type=int, default=20, help="random plans per model")
    args = parser.parse_args()
    start = time.perf_counter()
    rows = [
        row
        for model in args.models
        for row in run_model(model, args.plans, args.rounds, args.profiles, args.seed)
    ]
    frame = pd.DataFrame(rows)
    path = write_csv(frame, "cost_model_accuracy.csv")
    summary = summarise(frame)
    write_csv(summary, "cost_model_accuracy_summary.csv")
    shown = ["model", "plan", "predicted_ms", "measured_ms", "rel_error", "partitions"]
    show("every plan: predicted vs measured", frame[[*shown, "copies", "correct"]])
    show("cost model accuracy", summary)
    console.print(f"{path} written in {time.perf_counter() - start:.0f} s")
    plot(frame, summary)


if __name__ == "__main__":
    main()
