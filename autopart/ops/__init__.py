"""The reference operator library: numpy kernels looked up by (domain, op type, opset)."""

from autopart.ops import (
    attention,
    elementwise,
    indexing,
    misc,
    nn,
    quantize,
    reduce,
    resize,
    signal,
    spatial,
    tensor,
    transformer,
)
from autopart.ops.registry import (
    OpKernel,
    as_outputs,
    bind,
    has_kernel,
    lookup,
    refusal,
    register,
    supported_ops,
)

__all__ = [
    "OpKernel",
    "as_outputs",
    "attention",
    "bind",
    "elementwise",
    "has_kernel",
    "indexing",
    "lookup",
    "misc",
    "nn",
    "reduce",
    "refusal",
    "quantize",
    "register",
    "resize",
    "signal",
    "spatial",
    "supported_ops",
    "tensor",
    "transformer",
]
