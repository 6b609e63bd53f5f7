"""Op lowering: the registry of OpenCL op implementations, groups, and the compile builder.

An op implementation is a support predicate and a lowering function. The codegen groups
nodes first (a matrix product with its fused epilogue, a chain of elementwise ops, or one
node alone); the lowering function of the group's first node turns the group into steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autopart.ir.graph import Graph, Node
from autopart.targets.opencl import programs
from autopart.targets.opencl.device import OpenCLDevice, cla
from autopart.targets.opencl.subgraph import Step

F32 = np.dtype(np.float32)

SupportFn = Callable[[Node, Graph], bool]
LowerFn = Callable[["Builder", "Group"], list[Step]]


@dataclass
class Group:
    """Nodes lowered together; ``nodes[0]`` picks the lowering.

    ``kind`` is ``"gemm"`` (a matrix product whose epilogue absorbed per-channel scale and
    shift, a same-shape residual and a Relu), ``"elementwise"`` (a fused chain) or
    ``"single"``. ``scale``/``shift`` are per-output-channel constants folded into the
    weights and bias of a gemm group.
    """

    kind: str
    nodes: list[Node]
    residual: str | None = None
    relu: bool = False
    scale: np.ndarray | None = None
    shift: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def head(self) -> Node:
        """The node whose lowering builds the group."""
        return self.nodes[0]

    @property
    def output(self) -> str:
        """The value the group produces (the last fused node's output)."""
        return self.nodes[-1].outputs[0]


@dataclass(frozen=True)
class OpImpl:
    """How the OpenCL codegen supports and lowers one op type."""

    supports: SupportFn
    lower: LowerFn
    kind: str = "single"


OPS: dict[str, OpImpl] = {}


def register(
    *op_types: str, supports: SupportFn, kind: str = "single"
) -> Callable[[LowerFn], LowerFn]:
    """Register the decorated lowering for ``op_types`` with its support predicate."""

    def decorate(lower: LowerFn) -> LowerFn:
        for op_type in op_types:
            OPS[op_type] = OpImpl(supports, lower, kind)
        return lower

    return decorate


# -- predicates over values -------------------------------------------------------------------
def shape(graph: Graph, name: str) -> tuple[int, ...]:
    """The static shape of ``name`` (callers checked it is known)."""
    found = graph.value(name).shape
    assert found is not None
    return tuple(int(d) for d in found)


def is_f32(graph: Graph, name: str) -> bool:
    """Whether ``name`` is a non-empty float32 tensor of known static shape."""
    if not name or name not in graph.values:
        return False
    value = graph.value(name)
    return (
        value.dtype == F32
        and value.shape is not None
        and all(isinstance(d, int | np.integer) and d >= 1 for d in value.shape)
    )


def const(graph: Graph, name: str) -> np.ndarray | None:
    """The data of constant ``name``, or None when absent or not constant."""
    if not name or name not in graph.values:
        return None
    return graph.value(name).const


def single_f32_output(node: Node, graph: Graph) -> bool:
    """Exactly one present output, float32 with a known shape."""
    present = [name for name in node.outputs if name]
    return len(present) == 1 and node.outputs[0] == present[0] and is_f32(graph, present[0])


def int_const(graph: Graph, name: str) -> list[int] | None:
    """A constant integer tensor's values as a list, or None."""
    data = const(graph, name)
    if data is None or not np.issubdtype(data.dtype, np.integer):
        return None
    return [int(v) for v in data.ravel()]


# -- the compile-time builder -------------------------------------------------------------------
class Builder:
    """What lowering functions use: programs, kernels, uploads, shapes and constants."""

    def __init__(self, device: OpenCLDevice, graph: Graph, unit: int | None) -> None:
        self.device = device
        self.graph = graph
        self.queue = device.queue(unit)
        self.constants: dict[str, Any] = {}  # graph constants read by steps, resident

    def kernel(self, source: str, name: str, node: Node, defines: str = "") -> Any:
        """A fresh kernel ``name`` from ``kernels/<source>.cl``, built for ``node``."""
        program = programs.program(self.device, source, node.op_type, node.name, defines)
        return programs.kernel(program, name)

    def kernel_from_source(self, source: str, name: str, node: Node) -> Any:
        """A fresh kernel ``name`` from generated ``source`` (common.cl prepended)."""
        full = programs.load_source("common") + "\n" + source
        return programs.kernel(programs.build(self.device, full, node.op_type, node.name), name)

    def upload(self, data: np.ndarray) -> Any:
        """A resident device copy of host data (float32 unless integer)."""
        dtype = data.dtype if data.dtype != np.float64 else F32
        array = np.require(data, dtype, requirements="C")  # keeps rank 0, unlike ascontiguous
        return cla.to_device(self.queue, array)

    def use_constant(self, name: str) -> str:
        """Make graph constant ``name`` resident so that steps can read it by name."""
        if name not in self.constants:
            data = const(self.graph, name)
            assert data is not None
            self.constants[name] = self.upload(np.asarray(data, dtype=F32))
        return name

    def shape(self, name: str) -> tuple[int, ...]:
        """The static shape of ``name``."""
        return shape(self.graph, name)
