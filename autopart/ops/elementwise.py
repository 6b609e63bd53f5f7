"""Elementwise reference kernels: arithmetic, comparisons, logic and activations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce

import numpy as np
from onnx import helper, numpy_helper
from scipy import special

from autopart.errors import UnsupportedOpError
from autopart.ops.registry import register


def _unary(op_type: str, fn: np.ufunc | object) -> None:
    def kernel(X: np.ndarray, consumed_inputs: Sequence[int] | None = None) -> np.ndarray:
        return np.asarray(fn(X), dtype=X.dtype)  # type: ignore[operator]

    kernel.__name__ = op_type.lower()
    kernel.__doc__ = f"ONNX {op_type}."
    register(op_type)(kernel)


for _name, _fn in {
    "Abs": np.abs,
    "Neg": np.negative,
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Reciprocal": np.reciprocal,
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Round": np.round,
    "Sign": np.sign,
    "Sin": np.sin,
    "Cos": np.cos,
    "Tan": np.tan,
    "Asin": np.arcsin,
    "Acos": np.arccos,
    "Atan": np.arctan,
    "Sinh": np.sinh,
    "Cosh": np.cosh,
    "Asinh": np.arcsinh,
    "Acosh": np.arccosh,
    "Atanh": np.arctanh,
    "Tanh": np.tanh,
    "Erf": special.erf,
    "Sigmoid": special.expit,
    "Relu": lambda x: np.maximum(x, 0),
    "Softsign": lambda x: x / (1 + np.abs(x)),
    "Softplus": lambda x: np.logaddexp(x, 0),
}.items():
    _unary(_name, _fn)


def _legacy_broadcast(A: np.ndarray, B: np.ndarray, broadcast: int, axis: int | None) -> np.ndarray:
    """Align ``B`` for numpy broadcasting under the opset < 7 ``broadcast``/``axis`` rules.

    Before opset 7, binary ops broadcast only ``B`` onto ``A`` and only with ``broadcast=1``;
    ``axis`` names the dim of ``A`` where ``B``'s shape starts (suffix matching without it).
    Trailing 1-dims turn the ``axis`` alignment into numpy's suffix alignment.
    """
    if broadcast and axis is not None and B.ndim:
        start = axis % A.ndim if A.ndim else 0
        return B.reshape(B.shape + (1,) * max(A.ndim - start - B.ndim, 0))
    return B


def _binary(op_type: str, fn: np.ufunc) -> None:
    def kernel(
        A: np.ndarray,
        B: np.ndarray,
        broadcast: int = 0,
        axis: int | None = None,
        consumed_inputs: Sequence[int] | None = None,
    ) -> np.ndarray:
        return fn(A, _legacy_broadcast(A, B, broadcast, axis))

    kernel.__name__ = op_type.lower()
    kernel.__doc__ = f"ONNX {op_type} with numpy (or, before opset 7, ``axis``) broadcasting."
    register(op_type)(kernel)


for _name, _fn in {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Equal": np.equal,
    "Less": np.less,
    "LessOrEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Xor": np.logical_xor,
    "BitwiseAnd": np.bitwise_and,
    "BitwiseOr": np.bitwise_or,
}.items():
    _binary(_name, _fn)


@register("Div")
def div(
    A: np.ndarray,
    B: np.ndarray,
    broadcast: int = 0,
    axis: int | None = None,
    consumed_inputs: Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX Div: true division for floats, truncating division for integers."""
    B = _legacy_broadcast(A, B, broadcast, axis)
    if np.issubdtype(A.dtype, np.integer):
        return np.trunc(A / B).astype(A.dtype)
    return A / B


@register("Mod")
def mod(A: np.ndarray, B: np.ndarray, fmod: int = 0) -> np.ndarray:
    """ONNX Mod: Python-style modulo, or C fmod when ``fmod`` is 1."""
    return np.fmod(A, B) if fmod else np.mod(A, B)


@register("Pow")
def pow_(X: np.ndarray, Y: np.ndarray, broadcast: int = 0, axis: int | None = None) -> np.ndarray:
    """ONNX Pow; the result has the dtype of the base."""
    return np.power(X, _legacy_broadcast(X, Y, broadcast, axis)).astype(X.dtype, copy=False)


@register("Not")
def not_(X: np.ndarray) -> np.ndarray:
    """ONNX Not."""
    return np.logical_not(X)


def _variadic(op_type: str, fn: np.ufunc) -> None:
    def kernel(*data: np.ndarray, consumed_inputs: Sequence[int] | None = None) -> np.ndarray:
        return reduce(fn, data)

    kernel.__name__ = op_type.lower()
    kernel.__doc__ = f"ONNX {op_type} over any number of broadcast inputs."
    register(op_type)(kernel)


_variadic("Sum", np.add)
_variadic("Max", np.maximum)
_variadic("Min", np.minimum)


@register("Mean")
def mean(*data: np.ndarray, consumed_inputs: Sequence[int] | None = None) -> np.ndarray:
    """ONNX Mean over any number of broadcast inputs."""
    return (reduce(np.add, data) / len(data)).astype(data[0].dtype, copy=False)


@register("Where")
def where(condition: np.ndarray, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """ONNX Where."""
    return np.where(condition, X, Y)


@register("IsNaN")
def isnan(X: np.ndarray) -> np.ndarray:
    """ONNX IsNaN."""
    return np.isnan(X)


@register("IsInf")
def isinf(X: np.ndarray, detect_negative: int = 1, detect_positive: int = 1) -> np.ndarray:
    """ONNX IsInf."""
    return (np.isposinf(X) & bool(detect_positive)) | (np.isneginf(X) & bool(detect_negative))


@register("LeakyRelu")
def leaky_relu(X: np.ndarray, alpha: float = 0.01) -> np.ndarray:
    """ONNX LeakyRelu."""
    return np.where(X >= 0, X, X * alpha).astype(X.dtype, copy=False)


@register("PRelu", since=1)
def prelu_legacy(
    X: np.ndarray, slope: np.ndarray, consumed_inputs: Sequence[int] | None = None
) -> np.ndarray:
    """ONNX PRelu before opset 7: a 1-D slope holds one value per channel (axis 1)."""
    if slope.ndim == 1 and slope.size > 1 and X.ndim >= 2 and slope.size == X.shape[1]:
        slope = slope.reshape(1, -1, *([1] * (X.ndim - 2)))
    return prelu(X, slope)


@register("PRelu", since=7)
def prelu(X: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """ONNX PRelu with a slope broadcast onto ``X`` numpy-style."""
    return np.where(X >= 0, X, X * slope).astype(X.dtype, copy=False)


@register("Elu")
def elu(X: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """ONNX Elu."""
    return np.where(X > 0, X, alpha * np.expm1(np.minimum(X, 0))).astype(X.dtype, copy=False)


@register("Celu")
def celu(X: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """ONNX Celu."""
    negative = alpha * np.expm1(np.minimum(X, 0) / alpha)
    return np.where(X > 0, X, negative).astype(X.dtype, copy=False)


@register("Selu")
def selu(
    X: np.ndarray,
    alpha: float = 1.67326319217681884765625,
    gamma: float = 1.05070102214813232421875,
) -> np.ndarray:
    """ONNX Selu."""
    negative = alpha * np.expm1(np.minimum(X, 0))
    return (gamma * np.where(X > 0, X, negative)).astype(X.dtype, copy=False)


@register("ThresholdedRelu")
def thresholded_relu(X: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """ONNX ThresholdedRelu."""
    return np.where(alpha < X, X, 0).astype(X.dtype, copy=False)


@register("HardSigmoid")
def hard_sigmoid(X: np.ndarray, alpha: float = 0.2, beta: float = 0.5) -> np.ndarray:
    """ONNX HardSigmoid."""
    return np.clip(X * alpha + beta, 0, 1).astype(X.dtype, copy=False)


@register("HardSwish")
def hard_swish(X: np.ndarray) -> np.ndarray:
    """ONNX HardSwish."""
    return (X * np.clip(X / 6 + 0.5, 0, 1)).astype(X.dtype, copy=False)


@register("Mish")
def mish(X: np.ndarray) -> np.ndarray:
    """ONNX Mish."""
    return (X * np.tanh(np.logaddexp(X, 0))).astype(X.dtype, copy=False)


@register("Gelu", since=20)
def gelu(X: np.ndarray, approximate: str = "none") -> np.ndarray:
    """ONNX Gelu, exact (erf) or with the tanh approximation."""
    if approximate == "tanh":
        inner = np.sqrt(2 / np.pi) * (X + 0.044715 * X**3)
        return (0.5 * X * (1 + np.tanh(inner))).astype(X.dtype, copy=False)
    return (0.5 * X * (1 + special.erf(X / np.sqrt(2)))).astype(X.dtype, copy=False)


@register("Clip")
def clip(
    input: np.ndarray, min: np.ndarray | float | None = None, max: np.ndarray | float | None = None
) -> np.ndarray:
    """ONNX Clip; bounds come from attributes (opset < 11) or inputs (opset >= 11)."""
    low = -np.inf if min is None else min
    high = np.inf if max is None else max
    return np.minimum(np.maximum(input, low), high).astype(input.dtype, copy=False)


_FLOAT8_E8M0 = 24  # TensorProto.FLOAT8E8M0: its "up" rounding is not implemented


def _cast_check(attrs: Mapping[str, object]) -> str | None:
    if attrs.get("to") == _FLOAT8_E8M0:
        return "casting to float8e8m0 is not implemented"
    return None


def _cast_to(input: np.ndarray, dtype: np.dtype, saturate: int) -> np.ndarray:
    """``input`` as ``dtype``; float8 targets saturate to their finite range if asked."""
    dtype = np.dtype(dtype)
    if dtype.name == "float8_e8m0fnu":
        raise UnsupportedOpError("casting to float8e8m0 is not implemented")
    if dtype.name.startswith("float8") and saturate:
        wide = input.astype(np.float32) if input.dtype != np.float64 else input
        return numpy_helper.saturate_cast(wide, dtype)
    return input.astype(dtype)


@register("Cast", accepts={"round_mode": ("up",)}, check=_cast_check)
def cast(input: np.ndarray, to: int, saturate: int = 1, round_mode: str = "up") -> np.ndarray:
    """ONNX Cast to the ONNX element type ``to``; float8 targets saturate unless told not to."""
    return _cast_to(input, helper.tensor_dtype_to_np_dtype(to), saturate)


@register("CastLike", accepts={"round_mode": ("up",)})
def cast_like(
    input: np.ndarray, target_type: np.ndarray, saturate: int = 1, round_mode: str = "up"
) -> np.ndarray:
    """ONNX CastLike."""
    return _cast_to(input, target_type.dtype, saturate)


# Opset 24 adds ``round_mode`` (only "up" is implemented), 25 and 28 only element types.
register("Cast", since=24, accepts={"round_mode": ("up",)}, check=_cast_check)(cast)
register("CastLike", since=24, accepts={"round_mode": ("up",)})(cast_like)
