"""A worked example of a user-written codegen: matrix products through SciPy's BLAS.

It claims float32 MatMul and Gemm on the host and runs each partition as a list of
``scipy.linalg.blas.sgemm`` calls. Register it by importing this module (the decorator
does it) or through the ``autopart.codegens`` entry-point group of your own package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy.linalg import blas

from autopart.ir.graph import Graph, Node
from autopart.targets.codegen import HOST, Codegen, CompiledSubgraph, Environment, Placement
from autopart.targets.registry import register_codegen


class BlasSubgraph(CompiledSubgraph):
    """Runs its matrix products in order; each reads and writes host numpy arrays."""

    def __init__(
        self,
        calls: list[Callable[[Environment], None]],
        inputs: Sequence[str],
        outputs: Sequence[str],
    ):
        self.calls = calls
        self.inputs = list(inputs)
        self.outputs = list(outputs)

    def run(self, env: Environment) -> None:
        """Run every matrix product, reading and writing ``env``."""
        for call in self.calls:
            call(env)


@register_codegen
class BlasCodegen(Codegen):
    """float32 MatMul (2-D, or batched on the left) and Gemm through ``sgemm``."""

    name = "blas"
    device_kind = "cpu"

    def supports(self, node: Node, graph: Graph) -> bool:
        """2-D Gemm and MatMul whose right operand is 2-D, all float32."""
        if node.op_type not in ("MatMul", "Gemm"):
            return False
        values = [graph.value(name) for name in node.present_inputs]
        if any(v.dtype != np.float32 or v.shape is None for v in values):
            return False
        if node.op_type == "Gemm":
            return len(values[0].shape or ()) == 2
        return len(values[1].shape or ()) == 2 and len(values[0].shape or ()) >= 2

    def compile(
        self,
        graph: Graph,
        nodes: Sequence[Node],
        inputs: Sequence[str],
        outputs: Sequence[str],
        placement: Placement = HOST,
    ) -> BlasSubgraph:
        """One closure per node; constant operands are bound now."""
        self.check_supported(graph, nodes)
        return BlasSubgraph([self._lower(graph, node) for node in nodes], inputs, outputs)

    @staticmethod
    def _lower(graph: Graph, node: Node) -> Callable[[Environment], None]:
        def operand(name: str) -> Callable[[Environment], np.ndarray]:
            const = graph.value(name).const
            return (lambda env: const) if const is not None else (lambda env: env[name])

        a, b = operand(node.inputs[0]), operand(node.inputs[1])
        out = node.outputs[0]
        if node.op_type == "MatMul":

            def matmul(env: Environment) -> None:
                left = a(env)
                flat = left.reshape(-1, left.shape[-1])
                env[out] = blas.sgemm(1.0, flat, b(env)).reshape(*left.shape[:-1], -1)

            return matmul
        attrs = node.attrs
        c = operand(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
        alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
        trans_a, trans_b = bool(attrs.get("transA", 0)), bool(attrs.get("transB", 0))

        def gemm(env: Environment) -> None:
            product = blas.sgemm(alpha, a(env), b(env), trans_a=trans_a, trans_b=trans_b)
            env[out] = product + beta * c(env) if c is not None else product

        return gemm
