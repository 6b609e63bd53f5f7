"""Experiment: how much int8 can buy at no more error than OpenVINO as installed.

Issue 30's goal is a tuned plan at most 0.9x OpenVINO as installed at no more error. The
route it suggests is int8 where the sensitivities allow. This experiment asks how much
room there is, outside the search: for each model it builds plans on
``cpu@openvino`` whose nodes are each in f32, bf16 or int8, all in one partition,
from the nodes' measured sensitivities (:func:`autopart.tuning.accuracy.search_error_model`,
the default budget's tolerance):

- ``every node bf16``: what OpenVINO as installed computes;
- ``greedy int8``: every node bf16, then int8 on the weighted ops, least sensitive first,
  while the predicted error stays within the tolerance;
- ``f32 frees room``: the 10 nodes most sensitive in bf16 kept in f32, then as above;
- ``every conv int8``: every node int8 can run in int8, the rest bf16;
- ``measured ladder``: every node bf16, then int8 on the longest prefix of the weighted ops
  (least sensitive first) whose *measured* error stays within the tolerance verification
  holds plans to (OpenVINO as installed's error on the same inputs, plus 10%): a bisection
  on the prefix's length, each step compiled and run once on the evaluation inputs, as
  NNCF's accuracy control measures rather than predicts. It assumes the error grows with
  the prefix; ``ladder_compiles`` counts the steps.

Each plan's error is measured against onnxruntime f32 on seeded random inputs, and each is
timed against OpenVINO as installed in interleaved rounds (the bench's
:func:`autopart.tuning.verify.measure_plans`). int8 is calibrated on the 8 seeded random
samples a tune uses without ``--inputs``.

Writes ``experiments/results/int8_room.csv``. Run it on a quiet machine.

    python experiments/exp_int8_room.py [--models squeezenet resnet50 inception_v1] [--rounds 12]
"""

from __future__ import annotations

import argparse

import pandas as pd
from _common import show, write_csv

from autopart import api
from autopart.costmodel.accuracy import ErrorModel
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.plan.build import build_plan_for
from autopart.runtime.executor import Executor
from autopart.runtime.plan_executor import PlanExecutor
from autopart.targets.devices import discover
from autopart.targets.peer import PeerInputs, Runner
from autopart.targets.resolve import resolve
from autopart.tuning.accuracy import AccuracyPolicy, search_error_model
from autopart.tuning.judge import evaluation_samples, random_judge
from autopart.tuning.metrics import MAX_REL, Metric
from autopart.tuning.oracle import check_outputs
from autopart.tuning.peers import peer_lingers, peers
from autopart.tuning.verify import measure_plans
from autopart.zoo import resolve_model

INT8, BF16, F32 = (
    VirtualDevice.parse(s) for s in ("cpu@openvino:int8", "cpu@openvino:bf16", "cpu@openvino")
)
PEER = "openvino alone"
KEPT_F32 = 10  # nodes most sensitive in bf16 kept in f32 by the "f32 frees room" plan

Assignment = dict[str, VirtualDevice]


def _add_int8(start: Assignment, order: list[str], budget: ErrorModel) -> Assignment:
    """``start`` with int8 on the nodes of ``order`` one by one while it fits ``budget``."""
    assignment = dict(start)
    for name in order:
        if assignment[name] == F32:
            continue
        previous, assignment[name] = assignment[name], INT8
        if not budget.fits(assignment):
            assignment[name] = previous
    return assignment


def int8_order(graph: Graph, budget: ErrorModel) -> list[str]:
    """The nodes int8 can run, least sensitive first (the weight int8 adds over bf16)."""
    int8 = resolve(INT8, discover())
    weighted = [node.name for node in graph if int8.supports(node, graph)]

    def extra(name: str) -> float:
        return budget.weights.get((name, "int8"), 1.0) - budget.weights.get((name, "bf16"), 0.0)

    return sorted(weighted, key=extra)


class _Errors:
    """Measured errors of assignments: each compiled once and run on every sample."""

    def __init__(self, graph: Graph, samples: list[dict]) -> None:
        self.graph, self.samples = graph, samples
        self.references = [Executor(graph).run(sample).outputs for sample in samples]
        self.compiles = 0

    def of_runner(self, run: Runner) -> float:
        """The largest relative output error of ``run`` over the samples."""
        return max(
            max(check_outputs(self.graph, sample, run(sample), reference).values())
            for sample, reference in zip(self.samples, self.references, strict=True)
        )

    def of(self, assignment: Assignment) -> float:
        """The largest error of ``assignment`` compiled as one plan."""
        self.compiles += 1
        plan = build_plan_for(self.graph, assignment, F32, "ladder")
        with PlanExecutor(plan, self.graph) as executor:
            return self.of_runner(lambda sample: executor.run(sample).outputs)


def measured_ladder(
    start: Assignment, order: list[str], tolerance: float, errors: _Errors
) -> Assignment:
    """``start`` with int8 on the longest prefix of ``order`` measured within ``tolerance``."""

    def rung(count: int) -> Assignment:
        return {**start, **{name: INT8 for name in order[:count]}}

    within, beyond = 0, len(order)
    if errors.of(rung(beyond)) <= tolerance:
        return rung(beyond)
    while beyond - within > 1:
        middle = (within + beyond) // 2
        if errors.of(rung(middle)) <= tolerance:
            within = middle
        else:
            beyond = middle
    return rung(within)


def plans_of(graph: Graph, budget: ErrorModel) -> dict[str, Assignment]:
    """The first four assignments of the module docstring."""
    order = int8_order(graph, budget)
    weighted = list(order)
    bf16 = {node.name: BF16 for node in graph}
    sensitive = sorted(bf16, key=lambda n: -budget.weights.get((n, "bf16"), 0.0))[:KEPT_F32]
    freed = {**bf16, **{name: F32 for name in sensitive}}
    return {
        "every node bf16": bf16,
        "greedy int8": _add_int8(bf16, order, budget),
        "f32 frees room": _add_int8(freed, order, budget),
        "every conv int8": {**bf16, **{name: INT8 for name in weighted}},
    }


def model_rows(model: str, rounds: int) -> list[dict]:
    """One row per plan and one for the peer."""
    graph = api.load(model)
    budget = search_error_model(graph, [str(INT8), str(BF16)], AccuracyPolicy(), seed=0)
    assert budget is not None, "this machine offers no reduced precision on OpenVINO"
    assignments = plans_of(graph, budget)
    runners, _ = peers(resolve_model(model), PeerInputs.of(graph))
    feeds = dict(random_inputs(graph, 0))
    errors = _Errors(graph, [feeds, *evaluation_samples(graph, 0)])
    tolerance = errors.of_runner(runners[PEER]) * AccuracyPolicy().peer_factor
    bf16 = assignments["every node bf16"]
    ladder = measured_ladder(bf16, int8_order(graph, budget), tolerance, errors)
    assignments["measured ladder"] = ladder
    plans = {name: build_plan_for(graph, a, F32, model) for name, a in assignments.items()}
    measured = measure_plans(
        graph, plans, feeds, rounds,
        peers={PEER: runners[PEER]}, peer_linger_s=peer_lingers(),
        judge=random_judge(graph, Metric(MAX_REL), 0), tolerance=budget.tolerance,
    )  # fmt: skip
    peer = measured[PEER]
    rows = []
    for name, result in measured.items():
        assignment = assignments.get(name, {})
        rows.append(
            {
                "model": model,
                "plan": name,
                "int8_nodes": sum(t == INT8 for t in assignment.values()),
                "f32_nodes": sum(t == F32 for t in assignment.values()),
                "search_tolerance": budget.tolerance,
                "tolerance": tolerance,
                "ladder_compiles": errors.compiles if name == "measured ladder" else None,
                "predicted_error": budget.predicted_error(assignment) if assignment else None,
                "max_rel_error": result.max_error,
                "median_ms": result.median_s * 1e3,
                "vs_openvino": result.median_s / peer.median_s,
            }
        )
    return rows


def main() -> None:
    """Measure every model's plans, write the CSV and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["squeezenet", "resnet50", "inception_v1"])
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    table = pd.DataFrame([row for model in args.models for row in model_rows(model, args.rounds)])
    write_csv(table, "int8_room.csv")
    show("int8 under the default budget, against OpenVINO as installed", table)


if __name__ == "__main__":
    main()
