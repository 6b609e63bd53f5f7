"""Experiment: which correction of op sums predicts whole models best on this machine.

For every model and single target that ``autopart bench`` measured (its CSV, default
``experiments/results/bench_zoo.csv``), it predicts the whole-model latency from the saved
profile four ways and compares each with the bench's measured median:

- ``plain``: the op costs (fusion pairs included) plus the launch, through the simulator;
- ``factor``: the same, scaled by the subgraph calibration factor (median window ratio,
  applied only when the windows agree), i.e. ``costs_from_profile(calibration="on")``;
- ``gross``: the factor only where the agreeing windows put the op sum off by more than
  half, the default (``costs_from_profile(calibration="gross")``);
- ``additive``: the plain prediction plus a per-node term, the median over the model's own
  calibration windows of (measured - predicted) / nodes.

Writes ``experiments/results/calibration_variants.csv`` and prints the median |error| and
the share within 15% per variant. Run it right after the bench, on the same profile.

    python experiments/exp_calibration_variants.py [--bench experiments/results/bench_zoo.csv]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import pandas as pd
from _common import console, show, write_csv

from autopart import api
from autopart.costmodel import costs_from_profile
from autopart.costmodel.calibration import model_tag, op_sum, window_bounds
from autopart.costmodel.costs import Costs
from autopart.costmodel.op_costs import op_costs
from autopart.ir.graph import Graph
from autopart.profile import Profile, default_profiles_dir
from autopart.profile.saved import machine_profile_path
from autopart.search.candidates import CandidateKind, candidate_name
from autopart.search.simulator import plan_for, simulate
from autopart.targets.devices import discover

RESULTS = Path(__file__).parent / "results"


def additive_term(profile: Profile, graph: Graph, target: str) -> float:
    """Median over the model's own windows of (measured - predicted) per node, in seconds."""
    timed = profile.measurement("launch", target, "timed")
    if timed is None:
        return 0.0
    costs = op_costs(profile, graph, target, timed.median_s)
    rows = profile.rows("calibration", target)
    rows = rows[rows["key"].str.startswith(model_tag(graph) + "[")]
    terms = []
    for row in rows.itertuples(index=False):
        start, end = window_bounds(str(row.key))
        predicted = op_sum(profile, graph, graph.nodes[start:end], target, costs)
        if predicted is not None:
            terms.append((float(row.median_s) - predicted) / (end - start))
    return statistics.median(terms) if terms else 0.0


def predict(costs: Costs, graph: Graph, model: str, target: object) -> float | None:
    """Simulated latency of ``graph`` wholly on ``target``, or None if it cannot run there."""
    if any(target not in costs.node_cost[node.name] for node in graph.nodes):
        return None
    assignment = {node.name: target for node in graph.nodes}
    return simulate(plan_for(assignment, costs, model, target), costs).makespan_s  # type: ignore[arg-type]


def main() -> None:
    """Compare the three variants on every (model, single target) of the bench CSV."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default=str(RESULTS / "bench_zoo.csv"))
    parser.add_argument("--profiles", default=None, help="profile store (default: saved)")
    args = parser.parse_args()
    bench = pd.read_csv(args.bench)
    profile = Profile.load(
        machine_profile_path(args.profiles or default_profiles_dir(), discover())
    )
    rows = []
    for model in bench["model"].unique():
        graph = api.load(model)
        plain = costs_from_profile(graph, profile, calibration="off")
        factor = costs_from_profile(graph, profile, calibration="on")
        gross = costs_from_profile(graph, profile)
        for target in plain.targets:
            single_name = candidate_name(CandidateKind.SINGLE, target)
            measured_rows = bench[(bench["model"] == model) & (bench["plan"] == single_name)]
            predicted = predict(plain, graph, model, target)
            if measured_rows.empty or predicted is None:
                continue
            measured = float(measured_rows["median_ms"].iloc[0]) / 1e3
            scaled = predict(factor, graph, model, target) or predicted
            grossly = predict(gross, graph, model, target) or predicted
            added = predicted + len(graph.nodes) * additive_term(profile, graph, str(target))
            rows.append({
                "model": Path(model).stem, "target": str(target),
                "measured_ms": round(measured * 1e3, 3),
                "plain_error": round(predicted / measured - 1, 4),
                "factor_error": round(scaled / measured - 1, 4),
                "gross_error": round(grossly / measured - 1, 4),
                "additive_error": round(added / measured - 1, 4),
            })  # fmt: skip
    frame = pd.DataFrame(rows)
    path = write_csv(frame, "calibration_variants.csv")
    show("whole-model prediction error per variant", frame)
    for variant in ("plain", "factor", "gross", "additive"):
        errors = frame[f"{variant}_error"].abs()
        console.print(
            f"{variant:9s} median |error| {errors.median():.1%}, within 15%: "
            f"{(errors <= 0.15).mean():.0%} of {len(errors)}"
        )
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
