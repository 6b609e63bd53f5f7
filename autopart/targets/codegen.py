"""The codegen contract and registry (bring-your-own-codegen).

A codegen turns a connected set of IR nodes into something executable on one kind of
device. It states what it supports with :meth:`Codegen.supports`; nodes it does not
support fall back to an explicit fallback target chosen by the caller.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

from autopart.errors import TargetError, UnsupportedOpError
from autopart.ir.graph import Graph, Node

Environment = dict[str, np.ndarray]


class CompiledSubgraph(ABC):
    """An executable subgraph: reads its inputs from an environment, writes its outputs.

    ``run`` must not keep references to the environment between calls, and must write every
    name in ``outputs``.
    """

    inputs: Sequence[str]
    outputs: Sequence[str]

    @abstractmethod
    def run(self, env: Environment) -> None:
        """Compute ``outputs`` from ``inputs`` held in ``env`` and store them there."""


class Codegen(ABC):
    """What every codegen provides: a name, its device kind, support predicates, a compiler.

    ``supports`` must be cheap and side-effect free: it is asked about every node of a
    graph while planning. ``compile`` receives nodes in topological order, all of which
    ``supports`` accepted, and the boundary values they read and must produce.
    """

    name: ClassVar[str]
    device_kind: ClassVar[str]

    @abstractmethod
    def supports(self, node: Node, graph: Graph) -> bool:
        """Whether this codegen can run ``node`` with its attributes, shapes and dtypes."""

    @abstractmethod
    def compile(
        self, graph: Graph, nodes: Sequence[Node], inputs: Sequence[str], outputs: Sequence[str]
    ) -> CompiledSubgraph:
        """Compile ``nodes`` of ``graph`` into one executable subgraph."""

    def check_supported(self, graph: Graph, nodes: Sequence[Node] | None = None) -> None:
        """Raise :class:`UnsupportedOpError` naming every unsupported op and its nodes."""
        rejected: dict[str, list[str]] = {}
        for node in graph.nodes if nodes is None else nodes:
            if not self.supports(node, graph):
                rejected.setdefault(node.op_type, []).append(node.name)
        if rejected:
            parts = [
                f"{op} (node{'s' if len(names) > 1 else ''} {', '.join(names[:4])}"
                f"{f' and {len(names) - 4} more' if len(names) > 4 else ''})"
                for op, names in sorted(rejected.items())
            ]
            raise UnsupportedOpError(f"codegen {self.name} does not support: {'; '.join(parts)}")


_CODEGENS: dict[str, Callable[[], Codegen]] = {}


def register_codegen(factory: Callable[[], Codegen]) -> Callable[[], Codegen]:
    """Register a codegen class (or zero-argument factory) under its ``name``."""
    name = getattr(factory, "name", None)
    if not isinstance(name, str):
        raise TypeError("a registered codegen needs a class attribute `name`")
    _CODEGENS[name] = factory
    return factory


def get_codegen(name: str) -> Codegen:
    """Instantiate the codegen called ``name``; the error lists the available ones."""
    try:
        return _CODEGENS[name]()
    except KeyError:
        available = ", ".join(sorted(_CODEGENS))
        raise TargetError(f"unknown codegen {name!r}; available: {available}") from None


def codegen_names() -> list[str]:
    """Names of every registered codegen."""
    return sorted(_CODEGENS)
