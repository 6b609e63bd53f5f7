"""The boundary of a subgraph exported as one model: what it is fed, computes and passes on.

A codegen that hands a whole subgraph to its library (onnxruntime, OpenVINO) exports the
chosen nodes as a standalone model whose inputs and outputs are the boundary values
(:func:`~autopart.ir.onnx_export.to_onnx`). :func:`exported_boundary` checks the boundary
the caller gave and splits it the way every such codegen needs, once for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autopart.errors import TargetError
from autopart.ir.graph import Graph, Node


@dataclass(frozen=True)
class Boundary:
    """A subgraph's boundary as its exported model sees it.

    ``feeds`` are the inputs the nodes read that are not graph constants (constants are
    embedded), in the order given; ``results`` the outputs the nodes compute, in the order
    asked; ``passthrough`` the outputs no node computes that are graph constants, by name
    (outputs that are inputs are already where the subgraph runs).
    """

    feeds: list[str]
    results: list[str]
    passthrough: dict[str, np.ndarray]


def exported_boundary(
    graph: Graph, nodes: Sequence[Node], inputs: Sequence[str], outputs: Sequence[str]
) -> Boundary:
    """Check and split the boundary of ``nodes`` with ``inputs`` and ``outputs``.

    Inputs the nodes do not read are ignored. Raises :class:`TargetError` when a value the
    nodes read is neither an input nor a constant, or an output is neither computed by a
    node, nor an input, nor a constant.
    """
    produced = {name for node in nodes for name in node.outputs if name}
    read = {name for node in nodes for name in node.present_inputs} - produced
    given = set(inputs)
    constants = {name for name in read | set(outputs) if graph.value(name).is_const}
    unfed = sorted(read - given - constants)
    if unfed:
        raise TargetError(
            f"subgraph reads {', '.join(unfed[:4])} which are neither inputs nor constants"
        )
    for name in outputs:
        if name not in produced and name not in given and name not in constants:
            raise TargetError(f"subgraph output {name!r} is produced by none of its nodes")
    passthrough = {}
    for name in outputs:
        constant = None if name in produced else graph.value(name).const
        if constant is not None:
            passthrough[name] = constant
    return Boundary(
        feeds=[name for name in dict.fromkeys(inputs) if name in read and name not in constants],
        results=[name for name in dict.fromkeys(outputs) if name in produced],
        passthrough=passthrough,
    )
