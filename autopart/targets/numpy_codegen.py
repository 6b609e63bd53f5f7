"""The ``numpy`` codegen: the reference kernels, run on the host, one call per node."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autopart.ir.graph import Graph, Node
from autopart.ops import bind, has_kernel
from autopart.targets.codegen import (
    HOST,
    Codegen,
    CompiledSubgraph,
    Environment,
    Placement,
    register_codegen,
)

# Ops whose optional outputs the reference kernels do not produce.
_SINGLE_OUTPUT_ONLY = frozenset({"MaxPool"})


class NumpyStep:
    """One node bound to its kernel, attributes and constants, and the values it frees after.

    ``args`` holds, per input slot, the constant array bound at compile time or ``None``
    where the value is read from the environment (or is absent: its name is ``""``).
    """

    __slots__ = ("args", "free", "inputs", "kernel", "name", "outputs")

    def __init__(
        self, name: str, kernel: Any, inputs: list[str], args: list[Any], outputs: list[str]
    ) -> None:
        self.name = name
        self.kernel = kernel
        self.inputs = inputs
        self.args = args
        self.outputs = outputs
        self.free: list[str] = []


class NumpySubgraph(CompiledSubgraph):
    """Nodes run in order; intermediates are dropped right after their last use."""

    def __init__(
        self, steps: list[NumpyStep], inputs: Sequence[str], outputs: Sequence[str]
    ) -> None:
        self.steps = steps
        self.inputs = list(inputs)
        self.outputs = list(outputs)

    def run(self, env: Environment) -> None:
        """Run every step, reading and writing ``env``."""
        for step in self.steps:
            args = [
                bound if bound is not None or not name else env[name]
                for name, bound in zip(step.inputs, step.args, strict=True)
            ]
            results = step.kernel(*args)
            for name, result in zip(step.outputs, results, strict=False):
                if name:
                    env[name] = result
            for name in step.free:
                env.pop(name, None)


@register_codegen
class NumpyCodegen(Codegen):
    """Reference codegen on the host: every op that has a numpy kernel for its opset."""

    name = "numpy"
    device_kind = "cpu"

    def supports(self, node: Node, graph: Graph) -> bool:
        """Supported when a reference kernel exists for the node's op at the graph's opset."""
        if node.op_type in _SINGLE_OUTPUT_ONLY and len([o for o in node.outputs if o]) > 1:
            return False
        return has_kernel(node.op_type, node.domain, graph.opset_of(node))

    def compile(
        self,
        graph: Graph,
        nodes: Sequence[Node],
        inputs: Sequence[str],
        outputs: Sequence[str],
        placement: Placement = HOST,
    ) -> NumpySubgraph:
        """Bind each node's kernel and attributes; precompute where buffers can be freed."""
        self.check_supported(graph, nodes)
        steps = []
        for node in nodes:
            opset = graph.opset_of(node)
            kernel = bind(node.op_type, node.domain, opset, node.attrs, len(node.outputs))
            bound = [graph.value(name).const if name else None for name in node.inputs]
            steps.append(NumpyStep(node.name, kernel, list(node.inputs), bound, list(node.outputs)))
        keep = set(outputs) | set(inputs)
        last: dict[str, int] = {}
        for index, step in enumerate(steps):
            for name in step.inputs:
                if name and not graph.value(name).is_const:
                    last[name] = index
            for name in step.outputs:
                if name:
                    last.setdefault(name, index)
        for name, index in last.items():
            if name not in keep:
                steps[index].free.append(name)
        return NumpySubgraph(steps, inputs, outputs)
