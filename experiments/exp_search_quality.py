"""Experiment: how good is each search method's plan, measured on the real targets?

For each zoo model, the costs come from this machine's profile; the planner's search gives
the plans of the exact ILP (least sequential latency), the optuna tuner (simulated makespan,
seeded with the ILP answer and the baselines, a short ``--budget``), HEFT, the greedy
per-op best, ONNX Runtime's execution-provider rule, and every single target. Each distinct
plan is then run in interleaved rounds with :func:`measure_plans` (outputs checked against
the numpy reference) and compared with the best single target *as measured*.

Writes experiments/results/search_quality.csv and search_quality.png.

    python experiments/exp_search_quality.py [--models squeezenet resnet50] [--budget 10]
        [--rounds 10]
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
from _common import (
    console,
    measure,
    model_costs,
    new_figure,
    plain_log,
    save_figure,
    show,
    target_colour,
    write_csv,
    zoo_arguments,
)

from autopart.search.candidates import CandidateKind
from autopart.search.options import Method, Objective, SearchOptions
from autopart.search.planner import search

MODELS = ["squeezenet", "resnet50", "inception_v1", "densenet121", "shufflenet"]
METHODS = {  # candidate name in the planner -> name in this experiment
    "ilp": "ilp",
    "tuned": "optuna",
    "heft": "heft",
    "per-op-best": "greedy",
    "ort-ep-rule": "ort-ep-rule",
}
COLOURS = {
    "ilp": "tab:blue",
    "optuna": "tab:orange",
    "heft": "tab:green",
    "greedy": "tab:red",
    "ort-ep-rule": "tab:purple",
}


def method_name(candidate: str) -> str:
    """The experiment's name of a planner candidate (a single target's stays as it is)."""
    return METHODS.get(candidate, candidate)


def run_model(
    model: str, budget: float, rounds: int, profiles: str | None, seed: int
) -> list[dict]:
    """Search ``model``, measure every distinct candidate plan, one row per candidate."""
    graph, costs = model_costs(model, profiles)
    start = time.perf_counter()
    options = SearchOptions(
        objective=Objective.MAKESPAN, method=Method.OPTUNA, budget_s=budget, seed=seed
    )
    outcome = search(costs, options)
    searched = time.perf_counter() - start
    candidates = {method_name(name): c for name, c in outcome.candidates.items() if c.fits_memory}
    measured = measure(graph, {name: c.plan for name, c in candidates.items()}, rounds)
    singles = [
        m.median_s
        for n, m in measured.items()
        if candidates[n].kind is CandidateKind.SINGLE and m.correct
    ]
    best_single = min(singles) if singles else float("nan")
    trials = outcome.optuna.trials if outcome.optuna is not None else 0
    console.print(
        f"{model}: search {searched:.1f} s (ILP gap {outcome.ilp.gap:.1e}, {trials} trials)"
        if outcome.ilp is not None
        else f"{model}: search {searched:.1f} s"
    )
    rows = []
    for name, candidate in candidates.items():
        result = measured.get(name)
        rows.append({
            "model": model,
            "method": name,
            "kind": candidate.kind.value,
            "target": "" if candidate.target is None else str(candidate.target),
            "predicted_ms": candidate.simulation.makespan_s * 1e3,
            "predicted_seq_ms": candidate.simulation.sequential_s * 1e3,
            "measured_ms": result.median_s * 1e3 if result else np.nan,
            "ratio_to_best_single": result.median_s / best_single if result else np.nan,
            "correct": bool(result.correct) if result else False,
            "max_error": result.max_error if result else np.nan,
            "partitions": len(candidate.plan.partitions),
            "copies": len(candidate.plan.copies),
        })  # fmt: skip
    return rows


def plot(frame: pd.DataFrame) -> None:
    """Grouped bars: measured latency relative to the best single target, per model."""
    models = list(dict.fromkeys(frame["model"]))
    single_rows = frame[frame["kind"] == CandidateKind.SINGLE.value]
    target_of = dict(zip(single_rows["method"], single_rows["target"], strict=True))
    singles = list(dict.fromkeys(single_rows["method"]))
    methods = [*COLOURS, *singles]
    figure = new_figure(max(10.0, 2.4 * len(models)), 5.0)
    axes = figure.add_subplot()
    width = 0.8 / len(methods)
    for k, method in enumerate(methods):
        ratios = [
            frame.loc[(frame.model == m) & (frame.method == method), "ratio_to_best_single"]
            for m in models
        ]
        heights = [float(r.iloc[0]) if len(r) else np.nan for r in ratios]
        axes.bar(
            np.arange(len(models)) + (k - (len(methods) - 1) / 2) * width,
            heights,
            width,
            label=method,
            color=COLOURS.get(method) or target_colour(target_of[method]),
            edgecolor="black" if method in COLOURS else "none",
            linewidth=0.5,
        )
    axes.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    axes.set_xticks(np.arange(len(models)), models)
    axes.set_ylabel("measured latency / best single target")
    axes.set_yscale("log")
    axes.set_ylim(bottom=0.8)
    plain_log(axes, "y")
    axes.set_title("Search methods vs single targets (measured, median of interleaved rounds)")
    axes.legend(ncols=2, fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    console.print(f"plot: {save_figure(figure, 'search_quality.png')}")


def main() -> None:
    """Search and measure every model, then write the CSV, the tables and the plot."""
    parser = zoo_arguments(__doc__.splitlines()[0], MODELS, rounds=10)
    parser.add_argument("--budget", type=float, default=10.0, help="search seconds (ILP, optuna)")
    args = parser.parse_args()
    start = time.perf_counter()
    rows = [
        row
        for model in args.models
        for row in run_model(model, args.budget, args.rounds, args.profiles, args.seed)
    ]
    frame = pd.DataFrame(rows)
    path = write_csv(frame, "search_quality.csv")
    shown = ["model", "method", "predicted_ms", "measured_ms", "ratio_to_best_single"]
    show("search methods, predicted vs measured", frame[[*shown, "correct", "partitions"]])
    summary = frame[frame["kind"] != CandidateKind.SINGLE.value].pivot(
        index="model", columns="method", values="ratio_to_best_single"
    )
    show("measured latency / best single target", summary.reset_index())
    console.print(f"{path} written in {time.perf_counter() - start:.0f} s")
    plot(frame)


if __name__ == "__main__":
    main()
