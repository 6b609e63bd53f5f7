"""``autopart run --check``: a plan's outputs against an independent oracle, on the samples given.

One sample (random, or an ``.npz`` of one) is checked as always: the largest relative error
against the oracle (:func:`~autopart.tuning.oracle.oracle_outputs`), within the f32 check
tolerance. Several samples (``--inputs`` with a leading sample axis, or a folder) are split
as a tune splits them (:mod:`autopart.tuning.judge`): int8 is calibrated on the calibration
samples and the plan is judged on the validation samples by a task metric, by default the
one the plan was tuned under and its budget (``plan.measured``), else ``--metric`` and
``--max-drop``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from autopart.cli.common import console
from autopart.ir.graph import Graph
from autopart.plan.schema import Plan
from autopart.runtime.plan_executor import PlanExecutor
from autopart.settings import COMMON
from autopart.tuning.accuracy import check_max_drop
from autopart.tuning.judge import Judge
from autopart.tuning.metrics import MAX_REL, Metric, metric_for, parse_metric
from autopart.tuning.oracle import oracle_outputs


def checking_metric(
    plan: Plan, graph: Graph, asked: str | None, max_drop: float | None
) -> tuple[Metric, float]:
    """The metric and budget to check ``plan`` with: those asked, else those it was tuned under.

    A plan tuned under a task metric keeps it and its budget; else max-rel within the f32
    check tolerance. Raises :class:`~autopart.errors.InputError` for an unknown metric or a
    bad budget.
    """
    measured = plan.measured
    recorded = None if measured is None else measured.metric
    metric = parse_metric(asked if asked is not None else recorded)
    metric = metric_for(graph, metric or Metric(MAX_REL), real_samples=True)
    if max_drop is not None:
        return metric, check_max_drop(max_drop)
    tuned_under = asked is None and recorded is not None and measured is not None
    if tuned_under and measured.tolerance is not None:
        return metric, measured.tolerance
    return metric, metric.default_budget or COMMON.check_tolerance


def check_samples(
    plan: Plan,
    graph: Graph,
    judge: Judge,
    budget: float,
    first: Mapping[str, np.ndarray] | None = None,
) -> bool:
    """Print the plan's drop against the oracle over ``judge``'s samples; whether it is within.

    ``first`` holds the plan's outputs on the first sample, when it has run already.
    """
    tallies, relative, oracle = [], 0.0, ""
    with PlanExecutor(plan, graph) as executor:
        for index, sample in enumerate(judge.samples):
            outputs = first if index == 0 and first is not None else executor.run(sample).outputs
            oracle, expected = oracle_outputs(graph, sample, plan)
            tally, error = judge.tally(expected, outputs)
            tallies.append(tally)
            relative = max(relative, error)
    drop = judge.drop(tallies)
    within = drop <= budget  # a NaN drop (there should be none) is not within
    verdict = "ok" if within else "MISMATCH"
    console.print(
        f"check against {oracle}: {judge.metric.label} {judge.metric.describe(drop)} "
        f"(budget {judge.metric.short(budget)}) on {_count(judge.samples, judge)}; largest "
        f"relative error {relative:.2e} ({verdict})"
    )
    return within


def _count(samples: Sequence[object], judge: Judge) -> str:
    """The samples checked, as a tune describes them."""
    return judge.describe() if judge.real else f"{len(samples)} sample(s)"
