"""Reference kernels for the optimiser update ops of ``ai.onnx.preview.training``.

Each takes a learning rate ``R``, a step count ``T``, then per optimised tensor its value,
gradient and state(s) (all values first, then all gradients, ...), and returns the updated
values followed by the updated states.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autopart.ops.registry import register

_DOMAIN = "ai.onnx.preview.training"
Update = Callable[..., tuple[np.ndarray, ...]]


def _per_tensor(inputs: tuple[np.ndarray, ...], groups: int, update: Update) -> tuple:
    rate, step = inputs[0], inputs[1]
    rest = inputs[2:]
    count = len(rest) // groups
    results = [
        update(rate, step, *(rest[g * count + i] for g in range(groups))) for i in range(count)
    ]
    return tuple(result[k] for k in range(groups - 1) for result in results)


@register("Adagrad", domain=_DOMAIN)
def adagrad(
    *inputs: np.ndarray,
    decay_factor: float = 0.0,
    epsilon: float = 1e-6,
    norm_coefficient: float = 0.0,
) -> tuple[np.ndarray, ...]:
    """Adagrad: accumulate squared gradients and scale the step by their root."""

    def update(r, t, x, g, h):  # type: ignore[no-untyped-def]
        rate = r / (1 + t * decay_factor)
        grad = norm_coefficient * x + g
        h_new = h + grad * grad
        return (x - rate * grad / (np.sqrt(h_new) + epsilon)).astype(x.dtype), h_new.astype(h.dtype)

    return _per_tensor(inputs, 3, update)


@register("Momentum", domain=_DOMAIN, accepts={"mode": ("standard", "nesterov")})
def momentum(
    *inputs: np.ndarray, alpha: float, beta: float, mode: str, norm_coefficient: float
) -> tuple[np.ndarray, ...]:
    """Momentum (standard or Nesterov): a velocity of decayed past gradients."""

    def update(r, t, x, g, v):  # type: ignore[no-untyped-def]
        grad = norm_coefficient * x + g
        v_new = alpha * v + (beta if t > 0 else 1) * grad
        step = grad + alpha * v_new if mode == "nesterov" else v_new
        return (x - r * step).astype(x.dtype), v_new.astype(v.dtype)

    return _per_tensor(inputs, 3, update)


@register("Adam", domain=_DOMAIN)
def adam(
    *inputs: np.ndarray,
    alpha: float = 0.9,
    beta: float = 0.999,
    epsilon: float = 1e-6,
    norm_coefficient: float = 0.0,
    norm_coefficient_post: float = 0.0,
) -> tuple[np.ndarray, ...]:
    """Adam: bias-corrected first and second moment estimates of the gradient."""

    def update(r, t, x, g, v, h):  # type: ignore[no-untyped-def]
        grad = norm_coefficient * x + g
        v_new = alpha * v + (1 - alpha) * grad
        h_new = beta * h + (1 - beta) * grad * grad
        rate = r * np.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else r
        x_new = (1 - norm_coefficient_post) * (x - rate * (v_new / (np.sqrt(h_new) + epsilon)))
        return x_new.astype(x.dtype), v_new.astype(v.dtype), h_new.astype(h.dtype)

    return _per_tensor(inputs, 4, update)
