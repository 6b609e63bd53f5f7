"""Writing an assignment onto a graph's nodes, reading it back, and erasing it.

Planning is a pass like any other: :func:`place` returns a copy of the graph with every
node's :attr:`~autopart.ir.graph.Node.virtual_device` set, and :func:`erase` returns the
graph as it was before planning. Plans, partitions and the executor read the nodes.
"""

from __future__ import annotations

from collections.abc import Mapping

from autopart.errors import ModelError
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice


def place(graph: Graph, assignment: Mapping[str, VirtualDevice]) -> Graph:
    """A copy of ``graph`` whose every node runs where ``assignment`` says (by node name).

    Raises :class:`ModelError` naming the nodes ``assignment`` leaves out. Forbids stay.
    """
    missing = [node.name for node in graph.nodes if node.name not in assignment]
    if missing:
        raise ModelError(f"the assignment leaves out node(s) {missing[:5]} of {graph.name!r}")
    placed = graph.copy()
    for node in placed.nodes:
        node.virtual_device = assignment[node.name]
    return placed


def erase(graph: Graph) -> Graph:
    """A copy of ``graph`` as before planning: no node has a virtual device or a forbid."""
    return graph.erase_virtual_devices()


def placement(graph: Graph) -> dict[str, VirtualDevice]:
    """Every node's target, by node name; :class:`ModelError` unless each names one.

    A target names at least a device and a codegen (the unit may be left to the device).
    """
    unplaced = [node.name for node in graph.nodes if not node.virtual_device.is_complete]
    if unplaced:
        raise ModelError(
            f"node(s) {unplaced[:5]} of {graph.name!r} have no target (a device and a codegen): "
            "plan the graph first"
        )
    return graph.assignment()
