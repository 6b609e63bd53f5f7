"""Experiment: how search time grows with graph size, and what each method's answer is worth.

Synthetic CNN-like layered graphs (``network_graph`` of bench_ilp_scaling.py) of 100 to
10,000 nodes, with its seeded FLOP-derived costs on the targets found here (nothing runs).
Methods:

- ``ilp``: the exact ILP under ``--time-limit``; its proven gap is reported;
- ``optuna``: the tuner (simulated makespan, TPE), seeded with HEFT and the greedy answer
  only (not the ILP), for at most ``--trials`` trials or ``--tune-budget`` seconds;
  trials per second are reported;
- ``heft`` and ``greedy`` (per-op best, transfers ignored).

``objective_ms`` is every answer's simulated sequential latency, the ILP's objective, so
the methods compare on one yardstick; ``gap`` is ``(objective - ILP lower bound) /
objective``, i.e. at most how far the answer is from the optimum (for the ILP, its own gap).
``makespan_ms`` is the concurrent schedule the tuner optimises.

Writes experiments/results/search_time.csv and search_time.png.

    python experiments/exp_search_time.py [--sizes 100 300 1000 3000 10000] [--time-limit 60]
        [--trials 200] [--tune-budget 20]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import pandas as pd
from _common import console, new_figure, save_figure, show, write_csv
from bench_ilp_scaling import flop_costs, network_graph, targets_here

from autopart.costmodel.costs import Costs
from autopart.ir.target import VirtualDevice
from autopart.search.baselines import heft, per_op_best
from autopart.search.ilp import solve_ilp
from autopart.search.optuna_search import optuna_search
from autopart.search.simulator import evaluate

SIZES = [100, 300, 1000, 3000, 10000]
MARKERS = {"ilp": "o", "optuna": "s", "heft": "^", "greedy": "v"}
Assignment = dict[str, VirtualDevice]


def timed(make: Callable[[], Assignment]) -> tuple[Assignment, float]:
    """``make()`` and the wall seconds it took."""
    start = time.perf_counter()
    assignment = make()
    return assignment, time.perf_counter() - start


def run_size(
    size: int, time_limit: float, trials: int, tune_budget: float, seed: int
) -> list[dict]:
    """Every method on the ``size``-node layered graph; one row per method."""
    graph = network_graph(size, seed)
    targets, supports = targets_here()
    costs: Costs = flop_costs(graph, targets, supports)
    start = time.perf_counter()
    ilp = solve_ilp(costs, time_limit_s=time_limit)
    answers: dict[str, tuple[Assignment, float]] = {
        "ilp": (ilp.assignment, time.perf_counter() - start)
    }
    answers["heft"] = timed(lambda: heft(costs))
    answers["greedy"] = timed(lambda: per_op_best(costs))
    seeds = {"heft": answers["heft"][0], "greedy": answers["greedy"][0]}
    start = time.perf_counter()
    tuned = optuna_search(
        costs, "makespan", seeds, budget_s=tune_budget, n_trials=trials, seed=seed
    )
    answers["optuna"] = (tuned.assignment, time.perf_counter() - start)
    bound = ilp.bound_s
    rows = []
    for method, (assignment, seconds) in answers.items():
        simulation = evaluate(assignment, costs)
        objective = simulation.sequential_s
        rows.append({
            "nodes": len(graph.nodes), "method": method, "seconds": seconds,
            "objective_ms": objective * 1e3, "makespan_ms": simulation.makespan_s * 1e3,
            "gap": ilp.gap if method == "ilp" else max(objective - bound, 0.0) / objective,
            "optimal": ilp.optimal if method == "ilp" else None,
            "trials": tuned.new_trials if method == "optuna" else None,
            "trials_per_s": tuned.new_trials / seconds if method == "optuna" else None,
        })  # fmt: skip
    console.print(
        f"{size} nodes: ILP {answers['ilp'][1]:.1f} s gap {ilp.gap:.2e}; "
        f"optuna {tuned.new_trials} trials in {answers['optuna'][1]:.1f} s"
    )
    return rows


def plot(frame: pd.DataFrame, time_limit: float) -> None:
    """Search time against nodes (log-log), one line per method; the ILP's limit dashed."""
    figure = new_figure(11.0, 4.8)
    left, right = figure.subplots(1, 2)
    for method, group in frame.groupby("method", sort=False):
        left.plot(group["nodes"], group["seconds"], marker=MARKERS.get(str(method), "o"),
                  label=str(method))  # fmt: skip
        right.plot(group["nodes"], group["gap"] * 100, marker=MARKERS.get(str(method), "o"),
                   label=str(method))  # fmt: skip
    left.axhline(time_limit, color="grey", linestyle="--", linewidth=0.8, label="ILP time limit")
    left.set(xscale="log", yscale="log", xlabel="graph nodes", ylabel="search time, s",
             title="Search time vs graph size")  # fmt: skip
    right.set(xscale="log", xlabel="graph nodes", ylim=(-2, None),
              ylabel="gap to the ILP's lower bound, % of sequential latency",
              title="Answer quality (0 = proven optimal)")  # fmt: skip
    for axes in (left, right):
        axes.grid(True, which="both", linewidth=0.3, alpha=0.5)
        axes.legend(fontsize="small")
    console.print(f"plot: {save_figure(figure, 'search_time.png')}")


def main() -> None:
    """Time every method at every size, then write the CSV, the table and the plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=SIZES)
    parser.add_argument("--time-limit", type=float, default=60.0, help="ILP seconds")
    parser.add_argument("--trials", type=int, default=200, help="optuna trials at most")
    parser.add_argument("--tune-budget", type=float, default=20.0, help="optuna seconds at most")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    rows = [
        row
        for size in args.sizes
        for row in run_size(size, args.time_limit, args.trials, args.tune_budget, args.seed)
    ]
    frame = pd.DataFrame(rows).astype({"trials": "Int64"})
    path = write_csv(frame, "search_time.csv")
    show("search time and answer quality (synthetic layered graphs)", frame, digits=4)
    console.print(f"{path} written in {time.perf_counter() - start:.0f} s")
    plot(frame, args.time_limit)


if __name__ == "__main__":
    main()
