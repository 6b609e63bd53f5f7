"""Brute force: every assignment's plan simulated, the test oracle of the ILP on small graphs."""

from __future__ import annotations

import itertools
import math

from autopart.costmodel.costs import Costs
from autopart.errors import AutopartError
from autopart.ir.target import VirtualDevice
from autopart.search.simulator import Simulation, evaluate


class ExhaustiveError(AutopartError):
    """The search space is too large to enumerate, or some node has no target."""


def exhaustive(costs: Costs, limit: int = 200_000) -> tuple[dict[str, VirtualDevice], Simulation]:
    """The assignment of least simulated sequential latency, by trying every one.

    Only targets in ``costs.supported(node)`` are tried; ties go to the first assignment
    in the order of ``costs.targets``. Raises :class:`ExhaustiveError` when there are more
    than ``limit`` assignments or a node has no target.
    """
    nodes = costs.graph.nodes
    choices = [costs.supported(node) for node in nodes]
    for node, options in zip(nodes, choices, strict=True):
        if not options:
            raise ExhaustiveError(f"no target can run {node.op_type} node {node.name!r}")
    count = math.prod(len(options) for options in choices)
    if count > limit:
        raise ExhaustiveError(
            f"{count} assignments of {len(nodes)} nodes exceed the exhaustive limit of {limit}"
        )
    names = [node.name for node in nodes]
    best: tuple[dict[str, VirtualDevice], Simulation] | None = None
    for combination in itertools.product(*choices):
        assignment = dict(zip(names, combination, strict=True))
        simulation = evaluate(assignment, costs)
        if best is None or simulation.sequential_s < best[1].sequential_s:
            best = (assignment, simulation)
    assert best is not None
    return best
