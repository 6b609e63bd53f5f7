"""Reference kernels for bitwise ops, extra activations, normalisations and the loss ops."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import helper
from scipy import special

from autopart.ops.registry import register


@register("BitShift", accepts={"direction": ("LEFT", "RIGHT")})
def bit_shift(X: np.ndarray, Y: np.ndarray, direction: str) -> np.ndarray:
    """ONNX BitShift of unsigned integers."""
    shifted = np.left_shift(X, Y) if direction == "LEFT" else np.right_shift(X, Y)
    return shifted.astype(X.dtype, copy=False)


@register("BitwiseXor")
def bitwise_xor(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """ONNX BitwiseXor."""
    return np.bitwise_xor(A, B)


@register("BitwiseNot")
def bitwise_not(X: np.ndarray) -> np.ndarray:
    """ONNX BitwiseNot."""
    return np.invert(X)


@register("Swish", since=24)
def swish(X: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """ONNX Swish: ``X * sigmoid(alpha * X)``."""
    return (X * special.expit(alpha * X)).astype(X.dtype, copy=False)


@register("Shrink")
def shrink(input: np.ndarray, bias: float = 0.0, lambd: float = 0.5) -> np.ndarray:
    """ONNX Shrink."""
    out = np.where(input < -lambd, input + bias, np.where(input > lambd, input - bias, 0))
    return out.astype(input.dtype, copy=False)


@register("LpNormalization", accepts={"p": (1, 2)})
def lp_normalization(input: np.ndarray, axis: int = -1, p: int = 2) -> np.ndarray:
    """ONNX LpNormalization along ``axis``; an all-zero slice stays zero."""
    if p == 1:
        norm = np.sum(np.abs(input), axis=axis, keepdims=True)
    else:
        norm = np.sqrt(np.sum(np.square(input), axis=axis, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm == 0, 0, input / norm).astype(input.dtype, copy=False)


@register("MeanVarianceNormalization")
def mean_variance_normalization(X: np.ndarray, axes: Sequence[int] = (0, 2, 3)) -> np.ndarray:
    """ONNX MeanVarianceNormalization over ``axes``."""
    axes = tuple(axes)
    mean = np.mean(X, axis=axes, keepdims=True)
    std = np.sqrt(np.mean(np.square(X - mean), axis=axes, keepdims=True))
    return ((X - mean) / (std + 1e-9)).astype(X.dtype, copy=False)


def _group_norm(
    X: np.ndarray, scale: np.ndarray, bias: np.ndarray, epsilon: float, groups: int, per_group: bool
) -> np.ndarray:
    n, c = X.shape[:2]
    grouped = X.reshape(n, groups, -1).astype(np.float32)
    mean = grouped.mean(axis=2, keepdims=True)
    var = grouped.var(axis=2, keepdims=True)
    normed = ((grouped - mean) / np.sqrt(var + epsilon)).reshape(X.shape)
    if per_group:
        scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
    shape = (1, c, *([1] * (X.ndim - 2)))
    return (normed * scale.reshape(shape) + bias.reshape(shape)).astype(X.dtype)


@register("GroupNormalization", since=18, accepts={"stash_type": (1,)})
def group_normalization_18(
    X: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    epsilon: float = 1e-5,
    num_groups: int = 1,
    stash_type: int = 1,
) -> np.ndarray:
    """ONNX GroupNormalization (opset 18): one scale and bias per group."""
    return _group_norm(X, scale, bias, epsilon, num_groups, per_group=True)


@register("GroupNormalization", since=21, accepts={"stash_type": (1,)})
def group_normalization(
    X: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    epsilon: float = 1e-5,
    num_groups: int = 1,
    stash_type: int = 1,
) -> np.ndarray:
    """ONNX GroupNormalization (opset 21): one scale and bias per channel."""
    return _group_norm(X, scale, bias, epsilon, num_groups, per_group=False)


_LOSS_REDUCTIONS = {"reduction": ("none", "sum", "mean")}


@register("NegativeLogLikelihoodLoss", accepts=_LOSS_REDUCTIONS)
def negative_log_likelihood_loss(
    input: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None = None,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> np.ndarray:
    """ONNX NegativeLogLikelihoodLoss; ``mean`` divides by the weights of counted targets."""
    labels = target.astype(np.int64)
    counted = np.ones(labels.shape, bool) if ignore_index is None else labels != ignore_index
    safe = np.where(counted, labels, 0)
    picked = np.take_along_axis(input, safe[:, None], axis=1)[:, 0]
    weights = np.ones(labels.shape, input.dtype) if weight is None else weight[safe]
    weights = np.where(counted, weights, 0).astype(input.dtype)
    loss = -picked * weights
    if reduction == "none":
        return loss.astype(input.dtype)
    if reduction == "sum":
        return np.array(loss.sum(), dtype=input.dtype)
    return np.array(loss.sum() / weights.sum(), dtype=input.dtype)


@register("SoftmaxCrossEntropyLoss", accepts=_LOSS_REDUCTIONS)
def softmax_cross_entropy_loss(
    scores: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray | None = None,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> tuple[np.ndarray, np.ndarray]:
    """ONNX SoftmaxCrossEntropyLoss: the loss and the log-probabilities over axis 1."""
    shifted = scores - np.max(scores, axis=1, keepdims=True)
    log_prob = (shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))).astype(
        scores.dtype
    )
    loss = negative_log_likelihood_loss(log_prob, labels, weights, ignore_index, reduction)
    return loss, log_prob


@register("SwiGLU", since=28)
def swiglu(A: np.ndarray, B: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """ONNX SwiGLU: ``Swish_alpha(A) * B``."""
    return (A * special.expit(alpha * A) * B).astype(A.dtype, copy=False)


@register("BitCast", since=26)
def bit_cast(input: np.ndarray, to: int) -> np.ndarray:
    """ONNX BitCast: the same bits read as another type of the same width."""
    target = np.dtype(helper.tensor_dtype_to_np_dtype(to))
    return np.array(input, order="C").view(target)


@register("Binarizer", domain="ai.onnx.ml")
def binarizer(X: np.ndarray, threshold: float = 0.0) -> np.ndarray:
    """ONNX-ML Binarizer: 1 where ``X > threshold``, else 0."""
    return (threshold < X).astype(X.dtype)


@register("ArrayFeatureExtractor", domain="ai.onnx.ml")
def array_feature_extractor(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """ONNX-ML ArrayFeatureExtractor: the entries ``Y`` of the last dim of ``X``."""
    out = np.take(X, Y.ravel().astype(np.int64), axis=-1)
    return out.reshape(1, -1) if X.ndim == 1 else out


def _range_in_float32(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    first, last, step = (np.float32(v) for v in (start, limit, delta))
    count = max(int(np.ceil((last - first) / step)), 0)
    return (first + np.arange(count, dtype=np.float32) * step).astype(start.dtype)


@register("Range", since=27, accepts={"stash_type": (1,)})
def range_27(
    start: np.ndarray, limit: np.ndarray, delta: np.ndarray, stash_type: int = 1
) -> np.ndarray:
    """ONNX Range-27: 16-bit floats are computed in float32 (``stash_type`` 1)."""
    if start.dtype.itemsize == 2 and start.dtype.kind not in "iu":
        return _range_in_float32(start, limit, delta)
    return np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)


def _first_set(*options: object) -> object:
    return next((o for o in options if o is not None and len(o) > 0), None)  # type: ignore[arg-type]


@register("LabelEncoder", domain="ai.onnx.ml")
def label_encoder(
    X: np.ndarray,
    default_float: float = -0.0,
    default_int64: int = -1,
    default_string: str = "_Unused",
    default_tensor: np.ndarray | None = None,
    keys_floats: list[float] | None = None,
    keys_int64s: list[int] | None = None,
    keys_strings: list[str] | None = None,
    keys_tensor: np.ndarray | None = None,
    values_floats: list[float] | None = None,
    values_int64s: list[int] | None = None,
    values_strings: list[str] | None = None,
    values_tensor: np.ndarray | None = None,
) -> np.ndarray:
    """ONNX-ML LabelEncoder: map each key to its value, others to the default."""
    keys = _first_set(keys_floats, keys_int64s, keys_strings, keys_tensor)
    if values_tensor is not None and values_tensor.size:
        values, dtype = list(values_tensor), values_tensor.dtype
        fill = None if default_tensor is None else default_tensor.ravel()[0]
    elif values_floats:
        values, fill, dtype = values_floats, default_float, np.dtype(np.float32)
    elif values_int64s:
        values, fill, dtype = values_int64s, default_int64, np.dtype(np.int64)
    else:
        values, fill, dtype = values_strings or [], default_string, np.dtype(object)
    table = dict(zip([] if keys is None else list(keys), values, strict=False))
    out = np.array([table.get(k, fill) for k in X.ravel().tolist()], dtype=dtype)
    return out.reshape(X.shape)
