"""A mixed-integer linear program under construction, and its solve by HiGHS.

The exact search (:mod:`autopart.search.ilp`) adds variables and sparse rows here one at a
time, then hands the whole model to ``scipy.optimize.milp``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, OptimizeResult, milp
from scipy.sparse import csr_array

from autopart.ir.target import VirtualDevice

Expr = list[tuple[int, float]]  # (column, coefficient) pairs of a linear expression
Columns = dict[tuple[int, VirtualDevice], int]  # (node position, target) -> column


@dataclass
class MilpModel:
    """A MILP under construction: variables with cost and bounds, and sparse rows."""

    cost: list[float] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    integer: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    cols: list[int] = field(default_factory=list)
    vals: list[float] = field(default_factory=list)
    row_lower: list[float] = field(default_factory=list)
    row_upper: list[float] = field(default_factory=list)

    def var(
        self, cost: float = 0.0, lower: float = 0.0, upper: float = 1.0, integer: int = 0
    ) -> int:
        """A new variable; returns its column."""
        self.cost.append(cost)
        self.lower.append(lower)
        self.upper.append(upper)
        self.integer.append(integer)
        return len(self.cost) - 1

    def row(self, expr: Expr, lower: float = -math.inf, upper: float = math.inf) -> None:
        """A new row ``lower <= expr <= upper``."""
        index = len(self.row_lower)
        for col, val in expr:
            self.rows.append(index)
            self.cols.append(col)
            self.vals.append(val)
        self.row_lower.append(lower)
        self.row_upper.append(upper)


def solve_milp(model: MilpModel, time_limit_s: float, rel_gap: float) -> OptimizeResult:
    """Run HiGHS on ``model`` for at most ``time_limit_s`` s, to a relative gap ``rel_gap``."""
    shape = (len(model.row_lower), len(model.cost))
    matrix = csr_array((model.vals, (model.rows, model.cols)), shape=shape)
    return milp(
        np.array(model.cost),
        integrality=np.array(model.integer),
        bounds=Bounds(np.array(model.lower), np.array(model.upper)),
        constraints=LinearConstraint(matrix, model.row_lower, model.row_upper)
        if shape[0]
        else None,
        options={"time_limit": max(time_limit_s, 0.01), "mip_rel_gap": rel_gap},
    )


def negate(expr: Expr) -> Expr:
    """``expr`` with every coefficient negated."""
    return [(col, -coef) for col, coef in expr]
