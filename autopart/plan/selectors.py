"""Node selectors, as used by ``--assign``, pins and forbids.

A selector picks nodes of a graph by one of:

- ``Conv``: every node of that op type;
- ``Conv#1`` / ``Conv#3-10``: the n-th (1-based) occurrence, or a range, of an op type in
  topological order;
- ``name:res2a_branch1``: the node with that exact name;
- ``re:^res2.*``: nodes whose name matches the regular expression;
- ``idx:5-20``: nodes at those topological positions (0-based, inclusive).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autopart.errors import AutopartError
from autopart.ir.graph import Graph, Node

_OCCURRENCE = re.compile(r"^(?P<op>[A-Za-z_][\w.]*)#(?P<first>\d+)(?:-(?P<last>\d+))?$")
_RANGE = re.compile(r"^(?P<first>\d+)(?:-(?P<last>\d+))?$")


class SelectorError(AutopartError):
    """A selector is malformed or matches no node."""


@dataclass(frozen=True)
class Selector:
    """A parsed node selector; :meth:`select` returns matching nodes in topological order."""

    text: str

    def select(self, graph: Graph) -> list[Node]:
        """The nodes of ``graph`` this selector picks; raises if it picks none."""
        nodes = self._match(graph)
        if not nodes:
            ops = ", ".join(sorted({n.op_type for n in graph.nodes}))
            raise SelectorError(f"selector {self.text!r} matches no node; op types here: {ops}")
        return nodes

    def _match(self, graph: Graph) -> list[Node]:
        text = self.text
        if text.startswith("name:"):
            return [n for n in graph.nodes if n.name == text[5:]]
        if text.startswith("re:"):
            try:
                pattern = re.compile(text[3:])
            except re.error as error:
                raise SelectorError(f"bad regular expression in {text!r}: {error}") from None
            return [n for n in graph.nodes if pattern.search(n.name)]
        if text.startswith("idx:"):
            first, last = _bounds(text, text[4:])
            return graph.nodes[first : last + 1]
        occurrence = _OCCURRENCE.match(text)
        if occurrence:
            same = [n for n in graph.nodes if n.op_type == occurrence["op"]]
            first, last = _bounds(text, text.split("#", 1)[1])
            if first < 1:
                raise SelectorError(f"occurrences count from 1 in {text!r}")
            return same[first - 1 : last]
        if re.fullmatch(r"[A-Za-z_][\w.]*", text):
            return [n for n in graph.nodes if n.op_type == text]
        raise SelectorError(
            f"malformed selector {text!r}: use OP, OP#N, OP#A-B, name:NODE, re:REGEX or idx:A-B"
        )


def _bounds(text: str, spec: str) -> tuple[int, int]:
    match = _RANGE.match(spec)
    if not match:
        raise SelectorError(f"malformed range in selector {text!r}")
    first = int(match["first"])
    last = int(match["last"]) if match["last"] else first
    if last < first:
        raise SelectorError(f"empty range in selector {text!r}")
    return first, last
