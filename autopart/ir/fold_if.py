"""Folding an ``If`` whose condition is a constant: its taken branch replaces it.

Exporters guard code with conditions that are constant once the input shapes are static
(TorchScript's ``Shape -> Gather -> Equal -> If``) or once an input is frozen (a sample
rate). After constant folding makes such a condition a constant, :func:`inline_constant_ifs`
puts the nodes of the branch taken in the If's place, so that every codegen sees plain ops:

- every name local to the branch (its nodes' outputs, its initializers) gets a fresh name
  prefixed by the If's, so it cannot clash with the graph's; names the branch reads from
  the enclosing graph stay as they are, and subgraphs nested in the branch read the new
  names (:func:`~autopart.ops.subgraph.rename_outer`);
- a branch output that one branch node makes takes the If output's name; any other (an
  outer value, an initializer, a value yielded twice) reaches it through an ``Identity``,
  which :func:`~autopart.ir.passes.remove_passthrough` then removes;
- the new nodes keep the If's virtual device and forbids.

An If nested in the branch is folded in a later round, once its own condition is known.

Each new node records the If it was inlined from (``meta["folded_from"]``), so that import
can tell which folding left a value without a static shape (:func:`folded_ifs_behind`) and
keep that If a node instead: inside an If, a branch's values may be dynamic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Set

import onnx
from onnx import numpy_helper

from autopart.ir.graph import Graph, Node, Value
from autopart.ops.subgraph import attribute_value, node_outer_names, rename_outer

FOLDED_FROM = "folded_from"


def inline_constant_ifs(graph: Graph, keep: Set[str] = frozenset()) -> bool:
    """Replace every If whose condition is a constant by its taken branch; whether any was.

    Ifs named in ``keep`` stay nodes.
    """
    node_names = {node.name for node in graph.nodes}
    nodes: list[Node] = []
    changed = False
    for node in graph.nodes:
        branch = _taken_branch(graph, node) if node.name not in keep else None
        if branch is None:
            nodes.append(node)
            continue
        node_names.discard(node.name)
        nodes.extend(_inline(graph, node, branch, node_names))
        changed = True
    if changed:
        graph.nodes = nodes
        graph.rebuild()
    return changed


def folded_ifs_behind(graph: Graph, names: Iterable[str]) -> set[str]:
    """The Ifs whose folding made the nodes that produce values ``names``, by If name."""
    producers = (graph.value(name).producer for name in names)
    return {node.meta[FOLDED_FROM] for node in producers if node and FOLDED_FROM in node.meta}


def _taken_branch(graph: Graph, node: Node) -> onnx.GraphProto | None:
    """The branch an If takes when its condition is a constant, else None."""
    if node.op_type != "If" or node.domain not in ("", "ai.onnx") or not node.inputs:
        return None
    cond = graph.value(node.inputs[0]).const if node.inputs[0] else None
    if cond is None or cond.size != 1:
        return None
    key = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
    branch = node.attrs.get(key)
    if not isinstance(branch, onnx.GraphProto):
        return None
    if branch.input or branch.sparse_initializer or len(branch.output) != len(node.outputs):
        return None  # not a well-formed branch: leave the If to its kernel, which refuses it
    return branch


def _fresh(prefix: str, name: str, taken: set[str]) -> str:
    """``prefix/name``, suffixed until it is in none of ``taken``; then taken too."""
    fresh, index = f"{prefix}/{name}", 1
    while fresh in taken:
        fresh, index = f"{prefix}/{name}_{index}", index + 1
    taken.add(fresh)
    return fresh


def _inline(graph: Graph, node: Node, branch: onnx.GraphProto, node_names: set[str]) -> list[Node]:
    """The nodes that stand for ``node`` (an If) running ``branch``; new values join ``graph``."""
    made = {out for proto in branch.node for out in proto.output if out}
    yielded = Counter(output.name for output in branch.output)
    taken = set(graph.values)
    rename: dict[str, str] = {}
    for output, target in zip(branch.output, node.outputs, strict=True):
        if target and output.name in made and yielded[output.name] == 1:
            rename[output.name] = target
    for name in [*(t.name for t in branch.initializer), *made]:
        if name not in rename:
            rename[name] = _fresh(node.name, name, taken)
    for tensor in branch.initializer:
        data = numpy_helper.to_array(tensor)
        fresh = rename[tensor.name]
        graph.values[fresh] = Value(fresh, tuple(data.shape), data.dtype, data)
    nodes = []
    for index, proto in enumerate(branch.node):
        label = _fresh(node.name, proto.name or f"{proto.op_type}_{index}", node_names)
        nodes.append(_branch_node(node, proto, label, rename))
    for output, target in zip(branch.output, node.outputs, strict=True):
        if target and rename.get(output.name) != target:
            label = _fresh(node.name, f"Identity_{target}", node_names)
            source = rename.get(output.name, output.name)
            device, forbidden = node.virtual_device, node.forbidden
            identity = Node(label, "Identity", [source], [target], {}, "", device)
            identity.forbidden = forbidden
            nodes.append(identity)
    for new in nodes:
        new.meta[FOLDED_FROM] = node.name
        for name in new.outputs:
            if name:
                graph.values.setdefault(name, Value(name))
    return nodes


def _branch_node(if_node: Node, proto: onnx.NodeProto, name: str, rename: dict[str, str]) -> Node:
    """``proto`` (a node of the branch) as a graph node, reading and making renamed values."""
    attrs = {}
    for attribute in proto.attribute:
        value = attribute_value(attribute)
        if isinstance(value, onnx.GraphProto):
            value = rename_outer(value, rename)
        elif isinstance(value, list) and value and isinstance(value[0], onnx.GraphProto):
            value = [rename_outer(item, rename) for item in value]
        attrs[attribute.name] = value
    return Node(
        name,
        proto.op_type,
        [rename.get(n, n) for n in proto.input],
        [rename.get(n, n) for n in proto.output],
        attrs,
        proto.domain,
        if_node.virtual_device,
        forbidden=if_node.forbidden,
        captures=node_outer_names(attrs),
    )
