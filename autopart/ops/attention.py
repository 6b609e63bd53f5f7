"""Reference kernel for ONNX Attention (opsets 23, 24 and 25).

Scaled dot-product attention over 4-D (batch, heads, sequence, head size) or 3-D
(batch, sequence, hidden) inputs, with grouped key/value heads, a boolean or additive mask,
causal and sliding-window masking, a key/value cache (``past_*`` in, ``present_*`` out),
per-batch key lengths (``nonpad_kv_seqlen``, opset 24), soft-capping, and the optional
``qk_matmul_output``. Rows with every key masked give zeros, as the specification says.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import helper

from autopart.errors import UnsupportedOpError
from autopart.ops.registry import register

_WITH_BIAS, _AFTER_SOFTMAX = 2, 3


@dataclass(frozen=True)
class Masking:
    """Which keys each query may see: causal, a sliding window, and where the cache ends."""

    is_causal: bool
    left_window: int
    right_window: int
    past_length: int
    nonpad_kv_seqlen: np.ndarray | None


def _split_heads(x: np.ndarray, heads: int | None) -> np.ndarray:
    if x.ndim == 4:
        return x
    if not heads:
        raise UnsupportedOpError("Attention on 3-D inputs needs q_num_heads and kv_num_heads")
    batch, sequence, hidden = x.shape
    return x.reshape(batch, sequence, heads, hidden // heads).transpose(0, 2, 1, 3)


def _mask_as_bias(mask: np.ndarray, kv_length: int, dtype: np.dtype) -> np.ndarray:
    """The user mask as an additive bias, padded to the key length (padding masks out)."""
    pad = kv_length - mask.shape[-1]
    if pad > 0:
        fill = False if mask.dtype == np.bool_ else -np.inf
        mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)], constant_values=fill)
    if mask.dtype == np.bool_:
        return np.where(mask, dtype.type(0), dtype.type(-np.inf))
    return mask.astype(dtype, copy=False)


def _offsets(masking: Masking, q_length: int) -> np.ndarray:
    """Absolute position of query 0 per batch (a scalar array unless keys are per batch)."""
    if masking.past_length == 0 and masking.nonpad_kv_seqlen is not None:
        return masking.nonpad_kv_seqlen.reshape(-1, 1, 1, 1).astype(np.int64) - q_length
    return np.array(masking.past_length)


def _allowed(masking: Masking, q_length: int, kv_length: int) -> np.ndarray | None:
    """Which (query, key) pairs the causal and window rules allow, or None for all."""
    if not (masking.is_causal or masking.left_window >= 0 or masking.right_window >= 0):
        return None
    query = np.arange(q_length).reshape(q_length, 1) + _offsets(masking, q_length)
    key = np.arange(kv_length).reshape(1, kv_length)
    allowed = np.ones(np.broadcast_shapes(query.shape, key.shape), bool)
    if masking.is_causal:
        allowed &= key <= query
    if masking.left_window >= 0:
        allowed &= query - key <= masking.left_window
    if masking.right_window >= 0:
        allowed &= key - query <= masking.right_window
    return allowed


def _bias(
    mask: np.ndarray | None, masking: Masking, q_length: int, kv_length: int, dtype: np.dtype
) -> np.ndarray:
    bias = np.zeros((q_length, kv_length), dtype=dtype)
    if mask is not None:
        bias = bias + _mask_as_bias(mask, kv_length, dtype)
    allowed = _allowed(masking, q_length, kv_length)
    if allowed is not None:
        bias = bias + np.where(allowed, dtype.type(0), dtype.type(-np.inf))
    if masking.nonpad_kv_seqlen is not None:
        lengths = masking.nonpad_kv_seqlen.reshape(-1, 1, 1, 1)
        present = np.arange(kv_length).reshape(1, 1, 1, kv_length) < lengths
        bias = bias + np.where(present, 0, -np.inf).astype(dtype)
    return bias


def _softmax(x: np.ndarray) -> np.ndarray:
    peak = np.max(x, axis=-1, keepdims=True)
    peak = np.where(np.isneginf(peak), np.zeros((), x.dtype), peak)
    exp = np.exp(x - peak)
    total = np.sum(exp, axis=-1, keepdims=True)
    return exp / np.where(total == 0, np.ones((), x.dtype), total)


def _check(attrs: dict) -> str | None:
    mode = attrs.get("qk_matmul_output_mode", 0)
    if mode not in (0, 1, 2, 3):
        return f"attribute qk_matmul_output_mode={mode!r} is not implemented"
    return None


def attention(
    Q: np.ndarray,
    K: np.ndarray,
    V: np.ndarray,
    attn_mask: np.ndarray | None = None,
    past_key: np.ndarray | None = None,
    past_value: np.ndarray | None = None,
    nonpad_kv_seqlen: np.ndarray | None = None,
    is_causal: int = 0,
    kv_num_heads: int | None = None,
    q_num_heads: int | None = None,
    qk_matmul_output_mode: int = 0,
    scale: float | None = None,
    softcap: float = 0.0,
    softmax_precision: int | None = None,
    left_window_size: int = -1,
    right_window_size: int = -1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """ONNX Attention: Y, present_key, present_value and qk_matmul_output."""
    if (past_key is None) != (past_value is None):
        raise UnsupportedOpError("Attention needs past_key and past_value together")
    rank = Q.ndim
    q = _split_heads(Q, q_num_heads)
    present_key = _split_heads(K, kv_num_heads)
    present_value = _split_heads(V, kv_num_heads)
    if past_key is not None:
        present_key = np.concatenate([past_key, present_key], axis=2)
        present_value = np.concatenate([past_value, present_value], axis=2)
    masking = Masking(
        bool(is_causal),
        left_window_size,
        right_window_size,
        0 if past_key is None else past_key.shape[2],
        nonpad_kv_seqlen,
    )
    bias = _bias(attn_mask, masking, q.shape[2], present_key.shape[2], Q.dtype)
    groups = q.shape[1] // present_key.shape[1]
    keys = np.repeat(present_key, groups, axis=1) if groups > 1 else present_key
    values = np.repeat(present_value, groups, axis=1) if groups > 1 else present_value
    root = Q.dtype.type(np.sqrt(1 / np.sqrt(q.shape[3]) if scale is None else scale))
    scores = np.matmul(q * root, np.swapaxes(keys, 2, 3) * root).astype(Q.dtype, copy=False)
    if softcap > 0:
        scores = np.tanh(scores / softcap) * softcap
    biased = scores + bias
    qk_output = biased.copy() if qk_matmul_output_mode == _WITH_BIAS else scores
    if softmax_precision is not None:
        biased = biased.astype(helper.tensor_dtype_to_np_dtype(softmax_precision))
    weights = _softmax(biased)
    weights = np.where(np.isneginf(np.max(bias, axis=-1, keepdims=True)), 0, weights)
    if qk_matmul_output_mode == _AFTER_SOFTMAX:
        qk_output = weights
    out = np.matmul(weights.astype(Q.dtype), values).astype(Q.dtype, copy=False)
    if rank == 3:
        out = out.transpose(0, 2, 1, 3).reshape(out.shape[0], out.shape[2], -1)
    return out, present_key, present_value, qk_output.astype(Q.dtype)


for _version in (23, 24, 25):
    register("Attention", since=_version, check=_check)(attention)
