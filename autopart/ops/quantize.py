"""Reference kernels for the quantisation family: (De)QuantizeLinear and integer products."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import helper, numpy_helper

from autopart.errors import UnsupportedOpError
from autopart.ops.nn import conv
from autopart.ops.registry import register


def _along(param: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray:
    """A scale or zero point broadcastable onto ``shape``: scalar, per-axis or per-block."""
    if param.ndim == 0 or param.size == 1:
        return param.reshape(())
    axis = axis % len(shape)
    if not block_size:
        dims = [1] * len(shape)
        dims[axis] = param.size
        return param.reshape(dims)
    repeated = np.repeat(param, block_size, axis=axis)
    return np.take(repeated, np.arange(shape[axis]), axis=axis)


def _integer_range(dtype: np.dtype) -> tuple[int, int] | None:
    name = np.dtype(dtype).name
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return int(info.min), int(info.max)
    bits = {"int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1), "uint2": (0, 3)}
    return bits.get(name)


@register("QuantizeLinear", accepts={"saturate": (0, 1)})
def quantize_linear(
    x: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray | None = None,
    axis: int = 1,
    saturate: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
    precision: int = 0,
) -> np.ndarray:
    """ONNX QuantizeLinear: ``saturate(round(x / scale) + zero_point)``, ties to even."""
    if y_zero_point is not None:
        target = y_zero_point.dtype
    else:
        target = np.dtype(helper.tensor_dtype_to_np_dtype(output_dtype or 2))
    scale = _along(y_scale, x.shape, axis, block_size)
    if precision:
        wide = np.dtype(helper.tensor_dtype_to_np_dtype(precision))
        scaled = x.astype(wide) / scale.astype(wide)
    else:
        scaled = x / scale
    bounds = _integer_range(target)
    if bounds is not None:
        rounded = np.rint(scaled).astype(np.int32)
        if y_zero_point is not None:
            rounded += _along(y_zero_point, x.shape, axis, block_size).astype(np.int32)
        return np.clip(rounded, *bounds).astype(target)
    if target.name.startswith("float8"):
        if saturate:
            return numpy_helper.saturate_cast(scaled, target)
        return scaled.astype(target)
    if target.name.startswith("float4"):
        if y_zero_point is not None:
            scaled = scaled + _along(y_zero_point, x.shape, axis, block_size).astype(np.float32)
        return scaled.astype(target)
    raise UnsupportedOpError(f"QuantizeLinear to {target.name} is not implemented")


register("QuantizeLinear", since=23, accepts={"saturate": (0, 1)})(quantize_linear)


@register("DequantizeLinear")
def dequantize_linear(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray | None = None,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
) -> np.ndarray:
    """ONNX DequantizeLinear: ``(x - zero_point) * scale`` in the scale's type."""
    values = x.astype(np.float32)
    if x_zero_point is not None and _integer_range(x.dtype) is not None:
        values = values - _along(x_zero_point, x.shape, axis, block_size).astype(np.float32)
    result = values * _along(x_scale, x.shape, axis, block_size)
    target = helper.tensor_dtype_to_np_dtype(output_dtype) if output_dtype else x_scale.dtype
    return result.astype(target)


register("DequantizeLinear", since=23)(dequantize_linear)


@register("DynamicQuantizeLinear")
def dynamic_quantize_linear(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX DynamicQuantizeLinear to uint8: scale and zero point from the range of ``x``."""
    # in float32 throughout, as onnxruntime computes it: one ulp of the scale moves values
    # across a rounding step, and through a quantised decoder's layers the logits by 7%
    x = np.asarray(x, dtype=np.float32)
    low = np.minimum(np.float32(0), x.min(initial=np.float32(0)))
    high = np.maximum(np.float32(0), x.max(initial=np.float32(0)))
    scale = np.float32((high - low) / np.float32(255))
    zero = np.clip(np.rint(np.float32(0) - low / scale), 0, 255) if scale else np.float32(0)
    quantized = np.clip(np.rint(x / scale) + zero, 0, 255) if scale else np.zeros_like(x)
    return (
        quantized.astype(np.uint8),
        np.array(scale, dtype=np.float32),
        np.array(zero, dtype=np.uint8),
    )


def _centred(values: np.ndarray, zero_point: np.ndarray | None, shape: tuple) -> np.ndarray:
    wide = values.astype(np.int32)
    if zero_point is None:
        return wide
    return wide - np.asarray(zero_point).astype(np.int32).reshape(shape)


@register("MatMulInteger")
def matmul_integer(
    A: np.ndarray,
    B: np.ndarray,
    a_zero_point: np.ndarray | None = None,
    b_zero_point: np.ndarray | None = None,
) -> np.ndarray:
    """ONNX MatMulInteger: int32 product of zero-point-centred operands.

    Multiplied in float64, by BLAS: the centred 8-bit operands' products and every partial
    sum are integers far below 2**53, so exact in any order; the int32 result wraps as
    int32 arithmetic does.
    """
    a_shape = (-1, 1) if a_zero_point is not None and a_zero_point.size > 1 else ()  # per row
    b_shape = (-1,) if b_zero_point is not None and b_zero_point.size > 1 else ()  # per column
    a = _centred(A, a_zero_point, a_shape).astype(np.float64)
    b = _centred(B, b_zero_point, b_shape).astype(np.float64)
    return np.matmul(a, b).astype(np.int64).astype(np.int32)


def _weight_shape(zero_point: np.ndarray | None, rank: int) -> tuple:
    if zero_point is None or zero_point.size <= 1:
        return ()
    return (-1, *([1] * (rank - 1)))


@register("ConvInteger")
def conv_integer(
    x: np.ndarray,
    w: np.ndarray,
    x_zero_point: np.ndarray | None = None,
    w_zero_point: np.ndarray | None = None,
    auto_pad: str = "NOTSET",
    dilations: Sequence[int] | None = None,
    group: int = 1,
    kernel_shape: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX ConvInteger: an int32 convolution of zero-point-centred operands.

    Convolved in float64, by BLAS, exact as :func:`matmul_integer` is.
    """
    data = _centred(x, x_zero_point, ()).astype(np.float64)
    weights = _centred(w, w_zero_point, _weight_shape(w_zero_point, w.ndim)).astype(np.float64)
    out = conv(data, weights, None, auto_pad, dilations, group, kernel_shape, pads, strides)
    return out.astype(np.int64).astype(np.int32)


def _requantize(accumulated: np.ndarray, factor: np.ndarray, zero: np.ndarray) -> np.ndarray:
    bounds = _integer_range(zero.dtype) or (0, 255)
    result = accumulated * factor + zero
    return np.clip(np.rint(result), *bounds).astype(zero.dtype)


@register("QLinearMatMul")
def qlinear_matmul(
    a: np.ndarray,
    a_scale: np.ndarray,
    a_zero_point: np.ndarray,
    b: np.ndarray,
    b_scale: np.ndarray,
    b_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
) -> np.ndarray:
    """ONNX QLinearMatMul: integer product requantised to ``y``'s scale and zero point."""
    product = np.matmul(_centred(a, a_zero_point, ()), _centred(b, b_zero_point, ()))
    return _requantize(product, a_scale * b_scale / y_scale, y_zero_point)


@register("QLinearConv")
def qlinear_conv(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray,
    w: np.ndarray,
    w_scale: np.ndarray,
    w_zero_point: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray,
    B: np.ndarray | None = None,
    auto_pad: str = "NOTSET",
    dilations: Sequence[int] | None = None,
    group: int = 1,
    kernel_shape: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> np.ndarray:
    """ONNX QLinearConv: an integer convolution (plus int32 bias) requantised to ``y``."""
    data = _centred(x, x_zero_point, ()).astype(np.int64)
    weights = _centred(w, w_zero_point, _weight_shape(w_zero_point, w.ndim)).astype(np.int64)
    bias = None if B is None else B.astype(np.int64)
    out = conv(data, weights, bias, auto_pad, dilations, group, kernel_shape, pads, strides)
    spatial = out.ndim - 2
    w_factor = (
        np.asarray(w_scale).reshape(-1, *([1] * spatial)) if np.size(w_scale) > 1 else w_scale
    )
    return _requantize(out.astype(np.int32), x_scale * w_factor / y_scale, y_zero_point)
