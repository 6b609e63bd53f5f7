"""The optuna search's space: one categorical parameter per group of nodes.

Each group ranges over its nodes' supported targets. A group is a maximal chain (each node's
only consumer node is the next, whose only producer node is it) whose nodes share their
supported set and on which every seed agrees; nodes with a single choice are fixed. Moving a
whole chain at once avoids the two copies a lone move inside a chain adds, halves the
parameters of a transformer encoder, and splitting chains wherever a seed does keeps every
seed expressible. ``chains=False`` gives every node its own parameter.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autopart.costmodel.costs import Costs
from autopart.ir.target import VirtualDevice

Assignment = dict[str, VirtualDevice]
Codes = tuple[int, ...]


@dataclass(frozen=True)
class SearchSpace:
    """Nodes and targets by index, the parameter groups and their choices.

    ``groups[g]`` lists node indices that share parameter ``g`` (named after its first
    node); ``choices[g]`` the target indices it ranges over. ``fixed`` maps node index to
    target index for nodes with one supported target.
    """

    nodes: list[str]
    targets: list[VirtualDevice]
    groups: list[list[int]]
    choices: list[list[int]]
    fixed: dict[int, int]

    def name(self, group: int) -> str:
        """The optuna parameter name of ``group``."""
        return self.nodes[self.groups[group][0]]

    def labels(self, group: int) -> list[str]:
        """The categorical choices of ``group``, as target strings."""
        return [str(self.targets[t]) for t in self.choices[group]]

    def decode(self, params: Mapping[str, str]) -> Codes:
        """Target index of every node, from one value per group."""
        codes = [0] * len(self.nodes)
        index = {str(target): i for i, target in enumerate(self.targets)}
        for node, target in self.fixed.items():
            codes[node] = target
        for group, members in enumerate(self.groups):
            for node in members:
                codes[node] = index[params[self.name(group)]]
        return tuple(codes)

    def encode(self, codes: Codes) -> dict[str, str]:
        """The parameters nearest ``codes``: each group takes its most common target."""
        params = {}
        for group, members in enumerate(self.groups):
            votes = Counter(codes[node] for node in members)
            best = max(self.choices[group], key=lambda t: (votes[t], -t))
            params[self.name(group)] = str(self.targets[best])
        return params

    def assignment(self, codes: Sequence[int]) -> Assignment:
        """The assignment that ``codes`` spell."""
        return {node: self.targets[code] for node, code in zip(self.nodes, codes, strict=True)}

    def supported(self) -> list[list[int]]:
        """Every node's supported target indices."""
        sets = [[target] for target in (self.fixed.get(i, -1) for i in range(len(self.nodes)))]
        for group, members in enumerate(self.groups):
            for node in members:
                sets[node] = list(self.choices[group])
        return sets

    def to_attrs(self) -> dict[str, Any]:
        """The JSON form kept in the study's user attributes."""
        return {
            "nodes": self.nodes,
            "targets": [str(t) for t in self.targets],
            "supported": self.supported(),
            "groups": self.groups,
            "choices": self.choices,
        }


def build_space(costs: Costs, seeds: Sequence[Codes] = (), chains: bool = True) -> SearchSpace:
    """Group ``costs.graph``'s chains into parameters (see the module docstring).

    ``seeds`` are target-index tuples a group must not split; ``chains=False`` gives every
    node with a choice its own parameter.
    """
    graph = costs.graph
    targets = list(costs.targets)
    position = {target: i for i, target in enumerate(targets)}
    nodes = [node.name for node in graph.nodes]
    index = {name: i for i, name in enumerate(nodes)}
    supported = [tuple(position[t] for t in costs.supported(node)) for node in graph.nodes]
    preds: list[set[int]] = [set() for _ in nodes]
    succs: list[set[int]] = [set() for _ in nodes]
    for i, node in enumerate(graph.nodes):
        for value in node.present_inputs:
            producer = graph.value(value).producer
            if producer is not None:
                preds[i].add(index[producer.name])
                succs[index[producer.name]].add(i)
    fixed = {i: choice[0] for i, choice in enumerate(supported) if len(choice) == 1}
    group_of: dict[int, int] = {}
    groups: list[list[int]] = []
    for i in range(len(nodes)):
        if i in fixed:
            continue
        pred = next(iter(preds[i])) if len(preds[i]) == 1 else None
        joins = (
            chains
            and pred is not None
            and pred in group_of
            and succs[pred] == {i}
            and supported[pred] == supported[i]
            and all(seed[pred] == seed[i] for seed in seeds)
        )
        if joins and pred is not None:
            group_of[i] = group_of[pred]
            groups[group_of[i]].append(i)
        else:
            group_of[i] = len(groups)
            groups.append([i])
    choices = [list(supported[members[0]]) for members in groups]
    return SearchSpace(nodes, targets, groups, choices, fixed)
