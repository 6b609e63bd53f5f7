"""The accuracy side of a plan's price: how much output error each reduced node adds.

A node computing in a reduced precision (bf16) perturbs the model's outputs. Rounding
errors of independent nodes add in quadrature, so a plan's predicted error is the square
root of the sum of its reduced nodes' *weights*, each the square of that node's measured
sensitivity (:mod:`autopart.profile.sensitivity`), scaled so that the plan running every
node reduced predicts exactly the error measured for it. The search keeps the sum within
the tolerance squared: one linear row of the ILP.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from autopart.ir.target import VirtualDevice


@dataclass(frozen=True)
class ErrorModel:
    """Per-node error weights by precision, and the largest error a plan may have.

    ``weights[(node, precision)]`` is the node's share of the squared output error when it
    computes in ``precision``; ``tolerance`` the largest relative output error allowed;
    ``all_reduced`` the error measured with every node reduced (what the weights add up
    to); ``method`` how the sensitivities were measured (``whole`` or ``local``).
    ``metric`` names the task metric whose drop the weights and tolerance are in, when
    they were scaled to it (None: the largest relative output error). ``unseen_floor`` is
    the drop taken for a precision under which no answer of the calibration samples changed
    (one answer of those judged, the least they could show; 0 where every drop was seen).
    """

    weights: Mapping[tuple[str, str], float]
    tolerance: float
    all_reduced: float = 0.0
    method: str = "whole"
    metric: str | None = None
    unseen_floor: float = 0.0

    def weight(self, node: str, target: VirtualDevice) -> float:
        """The squared error ``node`` adds on ``target`` (0 for f32 targets)."""
        if target.precision is None:
            return 0.0
        return self.weights.get((node, target.precision), 0.0)

    def predicted_error(self, assignment: Mapping[str, VirtualDevice]) -> float:
        """The output error predicted for ``assignment``: relative, or ``metric``'s drop."""
        return math.sqrt(sum(self.weight(node, t) for node, t in assignment.items()))

    def fits(self, assignment: Mapping[str, VirtualDevice]) -> bool:
        """Whether ``assignment``'s predicted error is within the tolerance."""
        return self.predicted_error(assignment) <= self.tolerance * (1 + 1e-9)

    def tightened(self, measured: float, allowed: float) -> ErrorModel:
        """The error model to solve again with after a plan measured ``measured`` > ``allowed``.

        The bound shrinks by how far the measurement overshot, and 10% more, so that the
        next plan, if its prediction is off by the same factor, lands within ``allowed``.
        """
        factor = min(1.0, allowed / measured) if measured > 0 else 1.0
        return dataclasses.replace(self, tolerance=self.tolerance * factor * 0.9)
