"""Experiment: can running a model's parallel branches on separate cores beat onnxruntime?

Issue 6 reaches for plans below 0.9x onnxruntime alone on models with parallel branches, by
running branches on separate units. This experiment measures how far that goes on this
machine and why. For each model it finds the branches of every join (a node whose inputs
have ancestors of their own, :func:`branches`) and builds branch-parallel plans: every
join's branches dealt to the one-core units ``cpu/0`` and ``cpu/1`` by longest-first
(:func:`branch_plan`), the rest (the trunk) on the two-thread ``cpu@onnxruntime`` or on
``cpu/0``. It runs them side by side, in interleaved rounds, with:
- onnxruntime alone (one session, intra-op threads over both cores) and onnxruntime's own
  branch parallelism (``ORT_PARALLEL``: two inter-op threads, one intra-op thread each);
- the single targets ``cpu@onnxruntime`` and ``cpu/0@onnxruntime``;
- the optuna search's pick for simulated makespan (seeded with the ILP answer and the
  baselines).

It also reports the structural ceiling from the profiled one-core costs: the share of the
work inside branches, and ``balanced``, the trunk plus each join's larger unit load, over
the whole work. Branch parallelism on two one-core units cannot beat ``balanced`` times the
one-core time (``ideal_units``), while intra-op threading already divides the one-core
time by its own measured speedup (``cpu/0`` over ``cpu@onnxruntime``). ``ideal_mixed`` is
the best of both with nothing lost to entries, copies or idle lanes: the trunk on both
cores at that speedup, the branches on the units, perfectly dealt.

Writes experiments/results/branch_parallel.csv, branch_parallel_structure.csv and
branch_parallel.png.

    python experiments/exp_branch_parallel.py [--models inception_v1 inception_v2
        densenet121 squeezenet] [--rounds 15] [--budget 20]
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
from _common import (
    console,
    measure,
    model_costs,
    new_figure,
    save_figure,
    show,
    write_csv,
    zoo_arguments,
)

from autopart.costmodel.costs import Costs
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.plan.schema import Plan
from autopart.search.candidates import CandidateKind, candidate_name
from autopart.search.options import Method, Objective, SearchOptions
from autopart.search.planner import search
from autopart.search.simulator import plan_for, simulate
from autopart.targets.onnxruntime.peer import ALONE, onnxruntime_alone

MODELS = ["inception_v1", "inception_v2", "densenet121", "squeezenet"]
WHOLE = VirtualDevice.parse("cpu@onnxruntime")
UNITS = (VirtualDevice.parse("cpu/0@onnxruntime"), VirtualDevice.parse("cpu/1@onnxruntime"))
PEER = ALONE.name
PEER_PARALLEL = "onnxruntime ORT_PARALLEL"


def ancestors(graph: Graph) -> dict[str, frozenset[str]]:
    """Each node's ancestors (itself included), by node name."""
    seen: dict[str, frozenset[str]] = {}
    for node in graph.nodes:  # topological order
        above = {node.name}
        for name in node.present_inputs:
            producer = graph.value(name).producer
            if producer is not None:
                above |= seen[producer.name]
        seen[node.name] = frozenset(above)
    return seen


def branches(graph: Graph) -> list[list[frozenset[str]]]:
    """The parallel branches of every join with two or more, in topological order.

    A join is a node with several produced inputs. The branch of one input is the set of
    that input's ancestors that are not ancestors of any other input of the join: an
    inception module's four towers, the projection and the residual of a ResNet block. A
    DenseNet layer's Concat has one (the new features): its other input is an ancestor of
    them.
    """
    above = ancestors(graph)
    found = []
    for node in graph.nodes:
        producers = {
            graph.value(name).producer.name  # type: ignore[union-attr]
            for name in node.present_inputs
            if graph.value(name).producer is not None
        }
        if len(producers) < 2:
            continue
        sets = [above[name] for name in sorted(producers)]
        own = [s - frozenset().union(*(o for o in sets if o is not s)) for s in sets]
        own = [s for s in own if s]
        if len(own) >= 2:
            found.append(own)
    return found


def one_core_seconds(costs: Costs, names: Iterable[str]) -> float:
    """What the nodes ``names`` cost in all on one core (``cpu/0@onnxruntime``)."""
    return sum(costs.cost(name, UNITS[0]) for name in names)


def deal(costs: Costs, groups: list[frozenset[str]]) -> tuple[list[float], list[int]]:
    """``groups`` dealt longest first to the two units: their loads, and each group's unit.

    Sizes are one-core costs; each group goes to the unit with the smaller load so far.
    """
    loads = [0.0, 0.0]
    units = [0] * len(groups)
    sizes = [one_core_seconds(costs, group) for group in groups]
    for index in sorted(range(len(groups)), key=lambda i: -sizes[i]):
        units[index] = int(np.argmin(loads))
        loads[units[index]] += sizes[index]
    return loads, units


def branch_plan(costs: Costs, trunk: VirtualDevice) -> dict[str, VirtualDevice]:
    """Each join's branches on ``cpu/0`` and ``cpu/1`` (:func:`deal`); the rest on ``trunk``."""
    assignment = {node.name: trunk for node in costs.graph.nodes}
    for groups in branches(costs.graph):
        for group, unit in zip(groups, deal(costs, groups)[1], strict=True):
            assignment.update(dict.fromkeys(group, UNITS[unit]))
    return assignment


def structure(model: str, costs: Costs) -> dict:
    """The share of one-core work in branches, and the balanced branch-parallel ceiling."""
    work = one_core_seconds(costs, (node.name for node in costs.graph.nodes))
    joins = branches(costs.graph)
    loads = [deal(costs, groups)[0] for groups in joins]
    inside = sum(sum(pair) for pair in loads)
    larger = sum(max(pair) for pair in loads)
    return {
        "model": model,
        "nodes": len(costs.graph.nodes),
        "joins_with_branches": len(joins),
        "one_core_work_ms": work * 1e3,
        "branch_share": inside / work,
        "balanced": (work - inside + larger) / work,
    }


def run_model(model: str, rounds: int, budget: float, profiles: str | None) -> tuple[list, dict]:
    """Measure ``model``'s branch-parallel plans against onnxruntime; one row per plan."""
    graph, costs = model_costs(model, profiles)
    options = SearchOptions(objective=Objective.MAKESPAN, method=Method.OPTUNA, budget_s=budget)
    outcome = search(costs, options)
    whole = candidate_name(CandidateKind.SINGLE, WHOLE)
    one_unit = candidate_name(CandidateKind.SINGLE, UNITS[0])
    plans: dict[str, Plan] = {
        whole: outcome.candidates[whole].plan,
        one_unit: outcome.candidates[one_unit].plan,
        f"branches, trunk {WHOLE}": plan_for(branch_plan(costs, WHOLE), costs),
        f"branches, trunk {UNITS[0]}": plan_for(branch_plan(costs, UNITS[0]), costs),
        "optuna (makespan)": outcome.candidates[candidate_name(CandidateKind.TUNED)].plan,
    }
    peers = {PEER: onnxruntime_alone(model), PEER_PARALLEL: onnxruntime_alone(model, True)}
    measured = measure(graph, plans, rounds, peers=peers)
    alone = measured[PEER].median_s
    rows = []
    for name in [PEER, PEER_PARALLEL, *plans]:
        result = measured.get(name)
        plan = plans.get(name)
        rows.append(
            {
                "model": model,
                "plan": name,
                "partitions": len(plan.partitions) if plan else 1,
                "units": len({str(p.target) for p in plan.partitions}) if plan else 1,
                "predicted_ms": simulate(plan, costs).makespan_s * 1e3 if plan else np.nan,
                "median_ms": result.median_s * 1e3 if result else np.nan,
                "vs_onnxruntime": result.median_s / alone if result else np.nan,
                "max_rel_error": result.max_error if result else np.nan,
            }
        )
    shape = structure(model, costs)
    one_core = measured[one_unit].median_s
    speedup = one_core / measured[whole].median_s
    trunk = 1.0 - shape["branch_share"]
    shape["intra_op_speedup"] = speedup
    shape["ideal_units_vs_onnxruntime"] = shape["balanced"] * one_core / alone
    shape["ideal_mixed_vs_onnxruntime"] = (
        (trunk / speedup + shape["balanced"] - trunk) * one_core / alone
    )
    return rows, shape


def plot(frame: pd.DataFrame, structures: pd.DataFrame) -> None:
    """One group of bars per model: each plan's median over onnxruntime alone's.

    A black tick over each group marks ``ideal_mixed``: the best branch parallelism could do.
    """
    figure = new_figure(12, 4.5)
    axes = figure.add_subplot()
    models = list(dict.fromkeys(frame["model"]))
    names = list(dict.fromkeys(frame["plan"]))
    width = 0.8 / len(names)
    for index, name in enumerate(names):
        part = frame[frame["plan"] == name].set_index("model").reindex(models)
        positions = np.arange(len(models)) + (index - (len(names) - 1) / 2) * width
        axes.bar(positions, part["vs_onnxruntime"], width, label=name)
    ideal = structures.set_index("model").reindex(models)["ideal_mixed_vs_onnxruntime"]
    axes.hlines(ideal, np.arange(len(models)) - 0.4, np.arange(len(models)) + 0.4,
                colors="black", linewidth=2.5, label="ideal branch parallelism")  # fmt: skip
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.axhline(0.9, color="black", linewidth=0.8, linestyle="--")
    axes.set_xticks(np.arange(len(models)), models)
    axes.set_ylabel("median / onnxruntime alone")
    axes.set_title("Branch parallelism on two one-core units (dashed: the 0.9x goal)")
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save_figure(figure, "branch_parallel.png")


def main() -> None:
    """Run the experiment on the chosen models and write its CSVs and plot."""
    parser = zoo_arguments(__doc__.splitlines()[0], MODELS, 15, seed=False)
    parser.add_argument("--budget", type=float, default=20.0, help="optuna seconds per model")
    args = parser.parse_args()
    rows, shapes = [], []
    for model in args.models:
        measured, shape = run_model(model, args.rounds, args.budget, args.profiles)
        rows.extend(measured)
        shapes.append(shape)
    frame, structures = pd.DataFrame(rows), pd.DataFrame(shapes)
    write_csv(frame, "branch_parallel.csv")
    write_csv(structures, "branch_parallel_structure.csv")
    show("Branch-parallel plans against onnxruntime (medians, ms)", frame)
    show("Structure: one-core work in branches, and the balanced ceiling", structures)
    plot(frame, structures)
    console.print("wrote experiments/results/branch_parallel{.csv,_structure.csv,.png}")


if __name__ == "__main__":
    main()
