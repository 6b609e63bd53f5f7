"""Experiment: what does charging for copies buy? The ILP with and without transfer costs.

For each model, the exact ILP (least sequential latency) is solved twice on this machine's
profiled costs: once as autopart does (``aware``: every copy priced by the fitted transfer
model) and once with transfers free (``unaware``: a copy of the costs whose transfer models
all cost zero, as in systems that measure backends but not the crossings between them, e.g.
TVM's Collage). Launch and node costs stay the same. Both plans are then costed with the
TRUE costs (simulated makespan and sequential latency) and measured on the real targets
with :func:`measure_plans` (interleaved rounds, outputs checked).

Writes experiments/results/transfer_aware.csv and transfer_aware.png.

    python experiments/exp_transfer_aware.py [--models squeezenet resnet50 inception_v1
        densenet121] [--rounds 15] [--time-limit 60]
"""

from __future__ import annotations

import dataclasses
import math
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
    write_csv,
    zoo_arguments,
)

from autopart.costmodel.costs import HOST_DEVICE, Costs, TransferModel
from autopart.ir.target import VirtualDevice
from autopart.search.baselines import default_fallback
from autopart.search.candidates import CandidateKind, candidate_name
from autopart.search.ilp import solve_ilp
from autopart.search.simulator import plan_for, simulate

MODELS = ["squeezenet", "resnet50", "inception_v1", "densenet121"]
FREE = TransferModel(0.0, math.inf)


def without_transfers(costs: Costs) -> Costs:
    """A copy of ``costs`` in which every copy between devices costs nothing."""
    devices = costs.devices()
    pairs = {(src, dst) for src in devices for dst in devices if src != dst}
    pairs |= set(costs.transfers)
    return dataclasses.replace(costs, transfers=dict.fromkeys(pairs, FREE))


def run_model(model: str, rounds: int, time_limit: float, profiles: str | None) -> list[dict]:
    """Solve ``model`` with and without transfer costs; cost both truly; measure both."""
    graph, costs = model_costs(model, profiles)
    fallback = default_fallback(costs)
    searches = {"aware": costs, "unaware": without_transfers(costs)}
    plans, results = {}, {}
    for name, searched in searches.items():
        results[name] = solve_ilp(searched, time_limit_s=time_limit)
        plans[name] = plan_for(results[name].assignment, costs, fallback=fallback)
    single = {  # the best single target by the true costs, for scale
        target: plan_for({n.name: target for n in graph.nodes}, costs, fallback=fallback)
        for target in costs.targets
        if all(target in costs.node_cost[n.name] for n in graph.nodes)
    }
    best = min(single, key=lambda t: simulate(single[t], costs).makespan_s)
    best_name = candidate_name(CandidateKind.SINGLE, best)
    plans[best_name] = single[best]
    measured = measure(graph, plans, rounds)
    rows = []
    for name, plan in plans.items():
        truth = simulate(plan, costs)
        result = measured.get(name)
        ilp = results.get(name)
        rows.append({
            "model": model, "search": name,
            "single_target": str(best) if name == best_name else "",
            "predicted_true_ms": truth.makespan_s * 1e3,
            "predicted_true_seq_ms": truth.sequential_s * 1e3,
            "predicted_by_search_ms": ilp.objective_s * 1e3 if ilp else truth.sequential_s * 1e3,
            "measured_ms": result.median_s * 1e3 if result else np.nan,
            "partitions": len(plan.partitions), "copies": len(plan.copies),
            "off_host_nodes": sum(len(p.nodes) for p in plan.partitions
                                  if VirtualDevice.parse(p.target).device != HOST_DEVICE),
            "copy_mb": sum(c.nbytes for c in plan.copies) / 1e6,
            "copy_ms_true": sum(costs.transfer(c.src, c.dst, c.nbytes) for c in plan.copies) * 1e3,
            "ilp_gap": ilp.gap if ilp else np.nan,
            "correct": bool(result.correct) if result else False,
        })  # fmt: skip
    return rows


def plot(frame: pd.DataFrame) -> None:
    """Bars per model: predicted (true costs) and measured latency of each search."""
    models = list(dict.fromkeys(frame["model"]))
    figure = new_figure(max(9.0, 2.6 * len(models)), 5.0)
    axes = figure.add_subplot()
    searches = ["aware", "unaware", "best single"]
    colours = {"aware": "tab:blue", "unaware": "tab:red", "best single": "tab:grey"}
    frame = frame.assign(
        group=frame["search"].where(frame["single_target"].fillna("") == "", "best single")
    )
    width = 0.8 / (2 * len(searches))
    for k, search in enumerate(searches):
        for j, (column, hatch) in enumerate((("predicted_true_ms", "//"), ("measured_ms", ""))):
            values = [
                frame.loc[(frame.model == m) & (frame.group == search), column] for m in models
            ]
            heights = [float(v.iloc[0]) if len(v) else np.nan for v in values]
            offset = (2 * k + j - (2 * len(searches) - 1) / 2) * width
            bars = axes.bar(
                np.arange(len(models)) + offset, heights, width, color=colours[search],
                alpha=0.55 if j == 0 else 1.0, hatch=hatch, edgecolor="black", linewidth=0.4,
                label=f"{search}: {'predicted (true costs)' if j == 0 else 'measured'}",
            )  # fmt: skip
            if j == 1:
                axes.bar_label(bars, fmt="%.0f", fontsize="x-small", padding=1)
    singles = frame[frame.group == "best single"].set_index("model")["single_target"]
    labels = [f"{m}\n(best single: {singles.get(m, '?')})" for m in models]
    axes.set_xticks(np.arange(len(models)), labels)
    axes.set_yscale("log")
    plain_log(axes, "y")
    axes.set_ylabel("latency, ms")
    axes.set_title("ILP plans with and without transfer costs, costed truly and measured")
    axes.legend(fontsize="small", ncols=3, loc="upper left")
    axes.set_ylim(top=axes.get_ylim()[1] * 3)
    console.print(f"plot: {save_figure(figure, 'transfer_aware.png')}")


def main() -> None:
    """Compare both searches on every model, then write the CSV, the table and the plot."""
    parser = zoo_arguments(__doc__.splitlines()[0], MODELS, rounds=15, seed=False)
    parser.add_argument("--time-limit", type=float, default=60.0, help="ILP seconds")
    args = parser.parse_args()
    start = time.perf_counter()
    rows = [
        row
        for model in args.models
        for row in run_model(model, args.rounds, args.time_limit, args.profiles)
    ]
    frame = pd.DataFrame(rows)
    path = write_csv(frame, "transfer_aware.csv")
    shown = ["model", "search", "predicted_by_search_ms", "predicted_true_ms", "measured_ms"]
    show(
        "transfer-aware vs transfer-unaware ILP",
        frame[[*shown, "partitions", "copies", "off_host_nodes", "copy_mb", "copy_ms_true"]],
    )
    console.print(f"{path} written in {time.perf_counter() - start:.0f} s")
    plot(frame)


if __name__ == "__main__":
    main()
