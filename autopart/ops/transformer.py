"""Reference kernels for transformer ops: RMSNormalization and RotaryEmbedding (opset 23)."""

from __future__ import annotations

import numpy as np

from autopart.ops.registry import register


@register("RMSNormalization", since=23, accepts={"stash_type": (1,)})
def rms_normalization(
    X: np.ndarray, scale: np.ndarray, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1
) -> np.ndarray:
    """ONNX RMSNormalization over the dims from ``axis`` on, then scaled."""
    axes = tuple(range(axis % X.ndim, X.ndim))
    mean_square = np.mean(np.square(X), axis=axes, keepdims=True)
    return (X * np.reciprocal(np.sqrt(mean_square + epsilon)) * scale).astype(X.dtype)


def _heads_first(X: np.ndarray, num_heads: int) -> np.ndarray:
    """(batch, sequence, heads, head size) from 4-D (B, N, S, H) or 3-D (B, S, N*H)."""
    if X.ndim == 4:
        return np.transpose(X, (0, 2, 1, 3))
    batch, sequence, hidden = X.shape
    return X.reshape(batch, sequence, num_heads, hidden // num_heads)


@register("RotaryEmbedding", since=23, accepts={"interleaved": (0, 1)})
def rotary_embedding(
    X: np.ndarray,
    cos_cache: np.ndarray,
    sin_cache: np.ndarray,
    position_ids: np.ndarray | None = None,
    interleaved: int = 0,
    num_heads: int = 0,
    rotary_embedding_dim: int = 0,
) -> np.ndarray:
    """ONNX RotaryEmbedding: rotate the first ``rotary_embedding_dim`` of each head.

    Pairs are adjacent elements when ``interleaved``, else the two halves of the rotated part.
    """
    if X.ndim == 3 and not num_heads:
        from autopart.errors import UnsupportedOpError

        raise UnsupportedOpError("RotaryEmbedding of a 3-D input needs num_heads")
    heads = _heads_first(X, num_heads)
    rotated_dim = rotary_embedding_dim or heads.shape[3]
    rotate, keep = heads[..., :rotated_dim], heads[..., rotated_dim:]
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    cos, sin = cos_cache[:, :, None, :], sin_cache[:, :, None, :]
    if interleaved:
        first, second = rotate[..., 0::2], rotate[..., 1::2]
    else:
        first, second = np.split(rotate, 2, axis=-1)
    real = cos * first - sin * second
    imaginary = sin * first + cos * second
    if interleaved:
        rotate = np.stack([real, imaginary], axis=-1).reshape(rotate.shape)
    else:
        rotate = np.concatenate([real, imaginary], axis=-1)
    out = np.concatenate([rotate, keep], axis=-1).astype(X.dtype)
    return out.reshape(X.shape) if X.ndim == 3 else np.transpose(out, (0, 2, 1, 3))
