"""Which attributes, and which of their values, the OpenCL lowerings implement, per op.

The support predicates of the lowerings check shapes and dtypes; this table checks the
attributes, as the numpy reference registry does for its kernels: a node carrying an
attribute its lowering never reads, or a value it does not implement, is refused with a
one-line reason naming the attribute and the value, never computed with other semantics.
An entry maps an attribute to the values implemented, or to ``None`` when its lowering
implements every value the ONNX schema allows (or ignores it with no effect on the result,
as ``ratio`` of an inference Dropout).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

Accepted = Mapping[str, Collection[Any] | None]

# Attributes of no effect on a result (legacy optimiser hints).
INERT = frozenset({"consumed_inputs"})
AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")
BINARY = {"broadcast": (0, 1)}  # legacy (opset < 7) flags; ``axis`` broadcasting is refused
WINDOW = {"kernel_shape": None, "strides": None, "pads": None, "auto_pad": AUTO_PADS}
REDUCE = {"axes": None, "keepdims": (0, 1), "noop_with_empty_axes": (0, 1)}

NO_ATTRIBUTES = (
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Cos", "Cosh", "Erf",
    "Exp", "Floor", "HardSwish", "Identity", "Log", "MatMul", "Mish", "Neg", "Reciprocal",
    "Relu", "Round", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Tan",
    "Tanh", "Expand", "GlobalAveragePool", "GlobalMaxPool", "Max", "Min", "Mean", "Sum",
    "PRelu",
)  # fmt: skip

ATTRIBUTES: dict[str, Accepted] = {
    **{op: {} for op in NO_ATTRIBUTES},
    **{op: BINARY for op in ("Add", "Sub", "Mul", "Div", "Pow")},
    **{op: {"alpha": None} for op in ("LeakyRelu", "Elu", "Celu", "ThresholdedRelu")},
    "Selu": {"alpha": None, "gamma": None},
    "HardSigmoid": {"alpha": None, "beta": None},
    "Gelu": {"approximate": ("none", "tanh")},
    "Clip": {"min": None, "max": None},
    "BatchNormalization": {
        "epsilon": None,
        "momentum": None,  # only updates running statistics in training
        "spatial": (1,),
        "training_mode": (0,),
        "is_test": (1,),
    },
    "Conv": {**WINDOW, "dilations": None, "group": None},
    "MaxPool": {**WINDOW, "dilations": None, "ceil_mode": (0, 1), "storage_order": (0, 1)},
    "AveragePool": {**WINDOW, "dilations": None, "ceil_mode": (0, 1), "count_include_pad": (0, 1)},
    "LRN": {"size": None, "alpha": None, "beta": None, "bias": None},
    "Softmax": {"axis": None},
    "LayerNormalization": {"axis": None, "epsilon": None, "stash_type": (1,)},
    **dict.fromkeys(("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"), REDUCE),
    "Concat": {"axis": None},
    "Split": {"axis": None, "split": None, "num_outputs": None},
    "Transpose": {"perm": None},
    "Gemm": {"alpha": None, "beta": None, "transA": (0, 1), "transB": (0, 1), "broadcast": (0, 1)},
    "Reshape": {"shape": None, "allowzero": (0, 1)},
    "Slice": {"starts": None, "ends": None, "axes": None},  # attributes before opset 10
    "Gather": {"axis": None},
    # the taps come from the numpy reference's own Resize, which refuses what it lacks
    "Resize": {
        attribute: None
        for attribute in (
            "antialias",
            "axes",
            "coordinate_transformation_mode",
            "cubic_coeff_a",
            "exclude_outside",
            "extrapolation_value",
            "keep_aspect_ratio_policy",
            "mode",
            "nearest_mode",
        )
    },
    "ConvTranspose": {
        **WINDOW,
        "dilations": None,
        "group": None,
        "output_padding": None,
        "output_shape": None,
    },
    "Flatten": {"axis": None},
    "Squeeze": {"axes": None},
    "Unsqueeze": {"axes": None},
    "Dropout": {"ratio": None, "seed": None, "is_test": (1,)},
}


def _shown(value: Any) -> str:
    text = value.decode() if isinstance(value, bytes) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _hashable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    return tuple(value) if isinstance(value, list) else value


def attribute_refusal(op_type: str, attrs: Mapping[str, Any]) -> str | None:
    """Why the OpenCL lowering of ``op_type`` cannot honour ``attrs`` (one line), or None.

    An op absent from :data:`ATTRIBUTES` implements no attribute. Training modes are
    judged by :func:`autopart.targets.training.training_refusal`, not here.
    """
    accepted = ATTRIBUTES.get(op_type, {})
    for name, value in attrs.items():
        if name in INERT:
            continue
        if name not in accepted:
            return f"attribute {name}={_shown(value)} is not implemented"
        allowed = accepted[name]
        if allowed is not None and _hashable(value) not in allowed:
            return f"attribute {name}={_shown(value)} is not implemented"
    return None
