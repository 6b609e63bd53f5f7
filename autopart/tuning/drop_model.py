"""The error model in a task metric's units: the sensitivities scaled to its measured drop.

A node's sensitivity is a relative output error (:mod:`autopart.profile.sensitivity`): a
task metric on a handful of samples is too coarse to measure node by node (one node in
bf16 changes no answer of 30). What the samples can measure is the drop with every node
reduced, precision by precision. Each precision's weights are scaled so that every node
reduced predicts that drop, which keeps the nodes' shares of the error and puts the sum in
the metric's units: the ILP then keeps a plan's predicted drop within ``--max-drop``
itself, and the report shows the predicted drop beside the measured one.

Where no answer changed on the calibration samples, the drop is below what they can show:
it is taken as one answer in those judged (``agreement`` and ``topk``), the smallest drop
the samples could have seen, so that few samples keep the search careful rather than
blind. A metric whose drop is exactly 0 (cosine of identical outputs) predicts 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from autopart.costmodel.accuracy import ErrorModel
from autopart.ir.graph import Graph
from autopart.profile.sensitivity import every_node_reduced
from autopart.tuning.metrics import AGREEMENT, TOPK, Metric, Tally
from autopart.tuning.settings import ACCURACY


class Drops(dict[str, float]):
    """Each precision's drop with every node reduced; ``unseen_floor`` where none was seen.

    ``unseen_floor`` is the drop taken for the precisions under which no answer changed:
    one answer of those judged (0 where every precision's drop was seen).
    """

    unseen_floor: float = 0.0


def measured_drops(
    graph: Graph,
    samples: Sequence[Mapping[str, np.ndarray]],
    precisions: Sequence[str],
    metric: Metric,
) -> Drops:
    """Each precision's drop in ``metric`` with every node reduced, on ``samples``.

    Emulated on the reference, within ``ACCURACY.drop_scale_s`` seconds (at least one
    sample). A drop below 0 (a score that rose) is 0; a drop of 0 in answers is raised to
    one answer in those judged (see the module), recorded as the ``unseen_floor``.
    """
    tallies: dict[str, list[Tally]] = {p: [] for p in precisions}
    for exact, reduced in every_node_reduced(graph, samples, precisions, ACCURACY.drop_scale_s):
        for precision, outputs in reduced.items():
            tallies[precision].append(metric.tally(exact, outputs))
    drops = Drops()
    for precision, found in tallies.items():
        drop = max(metric.drop(found), 0.0)  # a score of the user's may rise by chance
        if drop == 0 and metric.name in (AGREEMENT, TOPK):
            answers = sum(t[1] for t in found)
            drop = 1.0 / answers if answers > 0 else 0.0
            drops.unseen_floor = drop
        drops[precision] = drop
    return drops


def unseen_drop_note(model: ErrorModel | None) -> list[str]:
    """A note where the samples are too few to show a drop within the budget, else none.

    When no answer changed under a precision but one answer of those judged is over the
    budget, the search holds that precision back as if it changed that answer.
    """
    if model is None or model.metric is None or model.unseen_floor <= model.tolerance:
        return []
    answers = round(1.0 / model.unseen_floor)
    return [
        f"accuracy: no answer changed with every node in a reduced precision, but "
        f"{answers} calibration answers cannot show a drop under one of them "
        f"({model.unseen_floor:.1%}), over the bound of {model.tolerance:.1%}: the search "
        f"held those precisions back as if each changed it; samples of at least "
        f"{math.ceil(1.0 / model.tolerance)} answers let it use them"
    ]


def in_metric_units(
    model: ErrorModel, found: Mapping[str, ErrorModel], drops: Mapping[str, float], budget: float,
    metric: Metric,
) -> ErrorModel | None:  # fmt: skip
    """``model``'s weights scaled, precision by precision, to ``drops``; held to ``budget``.

    The model keeps the :attr:`Drops.unseen_floor` of ``drops``, where they are measured.
    ``found`` holds each precision's own error model (its ``all_reduced`` relative error).
    None where a precision's relative error or drop is not finite: no scale carries an
    overflow into the metric's units, and the caller keeps the relative model.
    """
    scales = {}
    for precision, part in found.items():
        drop = drops.get(precision, 0.0)
        if not (math.isfinite(part.all_reduced) and math.isfinite(drop)):
            return None
        relative = part.all_reduced
        scales[precision] = (drop / relative) ** 2 if relative > 0 else 0.0
    weights = {(node, p): value * scales[p] for (node, p), value in model.weights.items()}
    if not all(math.isfinite(value) for value in weights.values()):
        return None
    worst = max(drops.values(), default=0.0)
    floor = drops.unseen_floor if isinstance(drops, Drops) else 0.0
    return ErrorModel(weights, budget, worst, model.method, metric.label, floor)
