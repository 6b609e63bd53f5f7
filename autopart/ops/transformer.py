"""Reference kernels for transformer ops: RMSNormalization, RotaryEmbedding, LinearAttention."""

from __future__ import annotations

import numpy as np

from autopart.errors import UnsupportedOpError
from autopart.ops.registry import register


@register("RMSNormalization", since=23, accepts={"stash_type": (1,)})
def rms_normalization(
    X: np.ndarray, scale: np.ndarray, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1
) -> np.ndarray:
    """ONNX RMSNormalization over the dims from ``axis`` on, then scaled.

    16-bit inputs are computed in float32 (``stash_type`` 1).
    """
    axes = tuple(range(axis % X.ndim, X.ndim))
    wide = X.astype(np.float32) if X.dtype.itemsize < 4 else X
    mean_square = np.mean(np.square(wide), axis=axes, keepdims=True)
    normed = wide * np.reciprocal(np.sqrt(mean_square + epsilon))
    return (normed * scale.astype(wide.dtype, copy=False)).astype(X.dtype)


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


def _heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(batch, heads, time, head size) from (batch, time, heads * head size), in float32."""
    batch, time, hidden = x.shape
    return x.reshape(batch, time, heads, hidden // heads).transpose(0, 2, 1, 3).astype(np.float32)


def _per_step(x: np.ndarray | None, heads: int, head_size: int) -> np.ndarray | None:
    """Decay or beta as (batch, heads, time, 1 or head size)."""
    if x is None:
        return None
    batch, time, last = x.shape
    if last == heads * head_size and last != heads:
        return _heads(x, heads)
    return x.reshape(batch, time, last, 1).transpose(0, 2, 1, 3).astype(np.float32)


@register(
    "LinearAttention",
    since=27,
    accepts={"update_rule": ("linear", "gated", "delta", "gated_delta")},
)
def linear_attention(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    past_state: np.ndarray | None = None,
    decay: np.ndarray | None = None,
    beta: np.ndarray | None = None,
    chunk_size: int = 64,
    kv_num_heads: int = 1,
    q_num_heads: int = 1,
    scale: float = 0.0,
    update_rule: str = "gated_delta",
) -> tuple[np.ndarray, np.ndarray]:
    """ONNX LinearAttention: a recurrent key-value state, optionally gated and delta-corrected.

    Per step: the state decays by ``exp(decay)`` (gated rules), the value is corrected by
    what the state already recalls for the key, times ``beta`` (delta rules), the outer
    product key x value is added, and each query reads the state, scaled.
    """
    gated, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
    if gated != (decay is not None) or delta != (beta is not None):
        raise UnsupportedOpError(f"LinearAttention {update_rule!r}: decay/beta inputs mismatch")
    q, k, v = _heads(query, q_num_heads), _heads(key, kv_num_heads), _heads(value, kv_num_heads)
    batch, _, time, key_size = q.shape
    decay4, beta4 = _per_step(decay, kv_num_heads, key_size), _per_step(beta, kv_num_heads, 1)
    if past_state is None:
        state = np.zeros((batch, kv_num_heads, key_size, v.shape[3]), np.float32)
    else:
        state = past_state.astype(np.float32)
    factor = float(scale) if scale else 1.0 / np.sqrt(key_size)
    groups = q_num_heads // kv_num_heads
    out = np.zeros((batch, q_num_heads, time, v.shape[3]), np.float32)
    for t in range(time):
        k_t, v_t = k[:, :, t], v[:, :, t]
        if decay4 is not None:
            state = state * np.exp(decay4[:, :, t])[..., None]
        if beta4 is not None:
            v_t = beta4[:, :, t] * (v_t - np.einsum("bhdm,bhd->bhm", state, k_t))
        state = state + k_t[..., :, None] * v_t[..., None, :]
        readable = np.repeat(state, groups, axis=1) if groups > 1 else state
        out[:, :, t] = factor * np.einsum("bhd,bhdm->bhm", q[:, :, t], readable)
    output = out.transpose(0, 2, 1, 3).reshape(batch, time, -1).astype(query.dtype)
    state_type = query.dtype if past_state is None else past_state.dtype
    return output, state.astype(state_type)
