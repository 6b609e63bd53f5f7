"""The graph IR: values, nodes with a first-class virtual device, and the graph.

A :class:`Graph` owns its values and nodes. Nodes are kept in topological order; after
a pass edits nodes it calls :meth:`Graph.rebuild`, which recomputes producers, consumers
and the order, and refuses cycles. Analysis results go in ``meta`` dicts.
"""

from __future__ import annotations

import copy
import heapq
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from autopart.errors import ModelError
from autopart.ir.target import UNPLANNED, VirtualDevice
from autopart.ops.subgraph import node_outer_names, rename_outer


@dataclass(eq=False)
class Value:
    """A tensor: its name, static shape and dtype, producer and consumers.

    ``producer`` is ``None`` for graph inputs and constants. ``const`` holds the data of a
    constant (an initializer or a folded value) and is ``None`` otherwise.
    """

    name: str
    shape: tuple[int, ...] | None = None
    dtype: np.dtype | None = None
    const: np.ndarray | None = None
    producer: Node | None = field(default=None, repr=False)
    consumers: list[Node] = field(default_factory=list, repr=False)

    @property
    def is_const(self) -> bool:
        """Whether the value is a compile-time constant."""
        return self.const is not None

    @property
    def nbytes(self) -> int:
        """Size of the tensor in bytes (0 when the shape, a dim or the dtype is unknown)."""
        if self.shape is None or self.dtype is None:
            return 0
        if not all(isinstance(dim, int | np.integer) for dim in self.shape):
            return 0
        return math.prod(int(dim) for dim in self.shape) * self.dtype.itemsize  # no overflow


@dataclass(eq=False)
class Node:
    """One operator application.

    ``inputs`` and ``outputs`` are value names; ``""`` marks an absent optional input.
    ``attrs`` are Python values spelled as in the ONNX spec (tensors as numpy arrays).
    ``virtual_device`` is where the node runs. It is unset until planning; a user's pin may
    set part of it (e.g. only the device) before the search, which then fills it in
    (:func:`autopart.ir.placement.place`). ``forbidden`` holds the target patterns the node
    must not run on (a part left out matches anything), written from the user's forbids.
    Passes that rewrite a node carry both over to the node's replacement.

    A control-flow node (If, Loop, Scan) keeps its subgraphs as ``onnx.GraphProto``
    attributes. ``captures`` names the outer values they read: they count as inputs of
    the node for dependencies, partitions, copies and export (:attr:`present_inputs`), and
    kernels receive them after the node's own inputs. Rename them only with
    :meth:`rename_input`, which renames them inside the subgraphs too.
    """

    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    virtual_device: VirtualDevice = UNPLANNED
    meta: dict[str, Any] = field(default_factory=dict)
    forbidden: frozenset[VirtualDevice] = frozenset()
    captures: list[str] = field(default_factory=list)

    @property
    def present_inputs(self) -> list[str]:
        """Names of the inputs that are actually connected, then the captured outer values."""
        return [name for name in self.inputs if name] + self.captures

    def rename_input(self, old: str, new: str) -> None:
        """Read value ``new`` wherever this node (or one of its subgraphs) reads ``old``."""
        self.inputs = [new if name == old else name for name in self.inputs]
        if old not in self.captures:
            return
        for key, value in list(self.attrs.items()):
            if isinstance(value, onnx.GraphProto):
                self.attrs[key] = rename_outer(value, {old: new})
        self.captures = node_outer_names(self.attrs)


class Graph:
    """A dataflow graph with named inputs, outputs and constants, in topological order."""

    def __init__(
        self,
        name: str,
        nodes: Iterable[Node],
        values: dict[str, Value],
        inputs: list[str],
        outputs: list[str],
        opsets: dict[str, int],
        meta: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.nodes: list[Node] = list(nodes)
        self.values = values
        self.inputs = inputs
        self.outputs = outputs
        self.opsets = opsets
        self.meta: dict[str, Any] = meta or {}
        self.rebuild()

    # -- structure -------------------------------------------------------------------------
    def rebuild(self) -> None:
        """Recompute producers, consumers and a stable topological order; refuse cycles."""
        self._link()
        self.nodes = self._topological_order()
        self._by_name = {node.name: node for node in self.nodes}

    def _link(self) -> None:
        """Recompute every value's producer and consumers from the nodes."""
        for value in self.values.values():
            value.producer = None
            value.consumers = []
        for node in self.nodes:
            for name in node.outputs:
                if name:
                    self.value(name).producer = node
            for name in node.present_inputs:
                self.value(name).consumers.append(node)

    def _topological_order(self) -> list[Node]:
        position = {id(node): i for i, node in enumerate(self.nodes)}
        waiting = {
            id(node): sum(1 for n in set(node.present_inputs) if self.values[n].producer)
            for node in self.nodes
        }
        ready = [position[id(node)] for node in self.nodes if waiting[id(node)] == 0]
        heapq.heapify(ready)  # the ready node first in the old order goes next
        order: list[Node] = []
        while ready:
            node = self.nodes[heapq.heappop(ready)]
            order.append(node)
            for name in node.outputs:
                if not name:
                    continue
                for consumer in {id(c): c for c in self.values[name].consumers}.values():
                    waiting[id(consumer)] -= 1
                    if waiting[id(consumer)] == 0:
                        heapq.heappush(ready, position[id(consumer)])
        if len(order) != len(self.nodes):
            stuck = [n.name for n in self.nodes if waiting[id(n)] > 0][:5]
            raise ModelError(f"graph {self.name!r} has a cycle through nodes {stuck}")
        return order

    def value(self, name: str) -> Value:
        """The value called ``name``; raise :class:`ModelError` if it does not exist."""
        try:
            return self.values[name]
        except KeyError:
            raise ModelError(f"graph {self.name!r} refers to undefined value {name!r}") from None

    def node(self, name: str) -> Node:
        """The node called ``name`` (as of the last :meth:`rebuild`); ``KeyError`` if none."""
        return self._by_name[name]

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def constants(self) -> dict[str, np.ndarray]:
        """Every constant value's data, by name."""
        return {name: v.const for name, v in self.values.items() if v.const is not None}

    def opset_of(self, node: Node) -> int:
        """The opset version in force for ``node``'s domain."""
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        return self.opsets.get(domain, self.opsets.get("", 1))

    def last_uses(self) -> dict[str, int]:
        """For every non-output value, the index in ``nodes`` of its last consumer."""
        last: dict[str, int] = {}
        for index, node in enumerate(self.nodes):
            for name in node.present_inputs:
                last[name] = index
        for name in self.outputs:
            last.pop(name, None)
        return last

    def copy(self) -> Graph:
        """A structural copy that shares constant arrays (they are never mutated).

        The copy keeps this graph's node order, which :meth:`rebuild` made topological.
        """
        values = {name: Value(v.name, v.shape, v.dtype, v.const) for name, v in self.values.items()}
        nodes = [
            Node(
                n.name,
                n.op_type,
                list(n.inputs),
                list(n.outputs),
                dict(n.attrs),
                n.domain,
                n.virtual_device,
                copy.deepcopy(n.meta) if n.meta else {},
                n.forbidden,
                list(n.captures),
            )
            for n in self.nodes
        ]
        copied = Graph.__new__(Graph)
        copied.name = self.name
        copied.nodes = nodes
        copied.values = values
        copied.inputs = list(self.inputs)
        copied.outputs = list(self.outputs)
        copied.opsets = dict(self.opsets)
        copied.meta = copy.deepcopy(self.meta)
        copied._link()
        copied._by_name = {node.name: node for node in nodes}
        return copied

    # -- virtual devices -------------------------------------------------------------------
    def erase_virtual_devices(self) -> Graph:
        """A copy as before planning: every node's virtual device unset, no forbids."""
        erased = self.copy()
        for node in erased.nodes:
            node.virtual_device = UNPLANNED
            node.forbidden = frozenset()
        return erased

    def assignment(self) -> dict[str, VirtualDevice]:
        """Every node's virtual device, by node name."""
        return {node.name: node.virtual_device for node in self.nodes}

    # -- statistics ------------------------------------------------------------------------
    def parameter_bytes(self, nodes: Iterable[Node] | None = None) -> int:
        """Total bytes of the constants that nodes consume (weights, biases, tables).

        With ``nodes``, only the constants those nodes read, each counted once.
        """
        if nodes is None:
            read = [v for v in self.values.values() if v.consumers]
        else:
            names = {name for node in nodes for name in node.present_inputs}
            read = [self.value(name) for name in names]
        return sum(v.const.nbytes for v in read if v.const is not None)

    def __repr__(self) -> str:
        nodes = len(self.nodes)
        return f"Graph({self.name!r}, {nodes} nodes, inputs={self.inputs}, outputs={self.outputs})"
