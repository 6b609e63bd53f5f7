"""Per-graph memos of derived facts (signatures, fusion pairs), dropped when the graph changes.

Profiling and costing ask the same questions of every node many times over (once per
target, per window, per job kind); on graphs of tens of thousands of nodes recomputing
them made planning quadratic in practice. A memo lives on its graph object (not on its
copies) and holds only while ``graph.nodes`` is the same list object:
:meth:`~autopart.ir.graph.Graph.rebuild`, which every pass calls after editing nodes, makes
a new one, and so drops every memo.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from autopart.ir.graph import Graph, Node

T = TypeVar("T")
_ATTRIBUTE = "_autopart_memo"


def graph_memo(graph: Graph) -> dict[Hashable, Any]:
    """The memo table of ``graph`` as its nodes are now (a fresh one after a rebuild)."""
    entry: tuple[list[Node], dict[Hashable, Any]] | None = getattr(graph, _ATTRIBUTE, None)
    if entry is None or entry[0] is not graph.nodes:
        entry = (graph.nodes, {})
        setattr(graph, _ATTRIBUTE, entry)
    return entry[1]


def memoised(graph: Graph, key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, computed once per ``key`` for ``graph`` as its nodes are now."""
    table = graph_memo(graph)
    if key not in table:
        table[key] = compute()
    result: T = table[key]
    return result


def owns(graph: Graph, node: Node) -> bool:
    """Whether ``node`` is the node of that name in ``graph`` (not a copy or a stranger)."""
    try:
        return graph.node(node.name) is node
    except KeyError:
        return False
