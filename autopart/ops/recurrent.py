"""Reference kernels for the recurrent ops RNN, GRU and LSTM (every direction and layout)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import special

from autopart.errors import UnsupportedOpError
from autopart.ops.registry import register

Activation = Callable[[np.ndarray], np.ndarray]
_ACTIVATIONS: dict[str, Activation] = {
    "Sigmoid": special.expit,
    "Tanh": np.tanh,
    "Relu": lambda x: np.maximum(x, 0),
}
_DIRECTIONS = {"direction": ("forward", "reverse", "bidirectional")}


def _check_activations(count: int) -> Callable[[Mapping[str, Any]], str | None]:
    def check(attrs: Mapping[str, Any]) -> str | None:
        names = attrs.get("activations", [])
        unknown = [name for name in names if name not in _ACTIVATIONS]
        if unknown or attrs.get("activation_alpha") or attrs.get("activation_beta"):
            return f"activations {list(names)} with their parameters are not implemented"
        if names and len(names) not in (count, 2 * count):
            return f"{len(names)} activations (expected {count} per direction)"
        return None

    return check


class Cell:
    """Shared plumbing of one direction: inputs, weights, clipping and activations."""

    def __init__(self, W: np.ndarray, R: np.ndarray, B: np.ndarray | None, clip: float | None):
        gates = W.shape[0]
        self.W, self.R = W, R
        bias = np.zeros(2 * gates, W.dtype) if B is None else B
        self.Wb, self.Rb = bias[:gates], bias[gates:]
        self.clip = clip

    def pre(self, x: np.ndarray, h: np.ndarray) -> np.ndarray:
        """Gate pre-activations ``x W^T + h R^T + Wb + Rb`` (clipped if asked)."""
        value = x @ self.W.T + h @ self.R.T + self.Wb + self.Rb
        return value if self.clip is None else np.clip(value, -self.clip, self.clip)


def _initial(state: np.ndarray | None, d: int, batch: int, hidden: int, layout: int, dtype: Any):
    if state is None:
        return np.zeros((batch, hidden), dtype)
    return state[:, d] if layout else state[d]


def _activations(names: Sequence[str], d: int, defaults: Sequence[str]) -> list[Activation]:
    per = len(defaults)
    chosen = list(names[d * per : (d + 1) * per]) if names else list(defaults)
    return [_ACTIVATIONS[name] for name in chosen]


@register("RNN", accepts=_DIRECTIONS, check=_check_activations(1))
def rnn(
    X: np.ndarray,
    W: np.ndarray,
    R: np.ndarray,
    B: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    activation_alpha: Sequence[float] = (),
    activation_beta: Sequence[float] = (),
    activations: Sequence[str] = (),
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int = 0,
    layout: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """ONNX RNN: ``H = f(x W^T + H R^T + Wb + Rb)``; returns Y and Y_h."""
    batch = X.shape[0] if layout else X.shape[1]
    hidden = R.shape[-1]
    cells = [Cell(W[d], R[d], None if B is None else B[d], clip) for d in range(W.shape[0])]
    state = {d: _initial(initial_h, d, batch, hidden, layout, X.dtype) for d in range(W.shape[0])}

    def step(d: int, x: np.ndarray) -> list[np.ndarray]:
        (f,) = _activations(activations, d, ["Tanh"])
        state[d] = f(cells[d].pre(x, state[d]))
        return [state[d]]

    Y, (Y_h,) = _run_sequence(X, layout, direction, sequence_lens, step)
    return Y, Y_h


def _run_sequence(
    X: np.ndarray,
    layout: int,
    direction: str,
    sequence_lens: np.ndarray | None,
    step: Callable[[int, np.ndarray], list[np.ndarray]],
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Run ``step`` over the time steps of ``X`` in each direction; ``Y`` and the final states.

    ``step(d, x_t)`` keeps direction ``d``'s state itself and returns its new states, the
    hidden state first. ``Y`` stacks the hidden states (``[seq, directions, batch, hidden]``,
    batch first with ``layout``); the final states stack each state's last value per
    direction.
    """
    last: dict[int, list[np.ndarray]] = {}

    def stepped(d: int, x: np.ndarray) -> list[np.ndarray]:
        last[d] = step(d, x)
        return last[d]

    xs = np.swapaxes(X, 0, 1) if layout else X
    if sequence_lens is not None and np.any(sequence_lens != xs.shape[0]):
        raise UnsupportedOpError("recurrent ops with per-batch sequence_lens are not supported")
    count = 2 if direction == "bidirectional" else 1
    outputs = []
    for d in range(count):
        reverse = direction == "reverse" or d == 1
        order = range(xs.shape[0] - 1, -1, -1) if reverse else range(xs.shape[0])
        ys = [np.empty(0)] * xs.shape[0]
        for t in order:
            ys[t] = stepped(d, xs[t])[0]
        outputs.append(np.stack(ys))
    Y = np.stack(outputs, axis=1)
    finals = [np.stack([last[d][i] for d in range(count)]) for i in range(len(last[0]))]
    if layout:
        Y = np.transpose(Y, (2, 0, 1, 3))
        finals = [np.swapaxes(f, 0, 1) for f in finals]
    return Y.astype(X.dtype), [f.astype(X.dtype) for f in finals]


@register(
    "GRU",
    accepts={**_DIRECTIONS, "linear_before_reset": (0, 1)},
    check=_check_activations(2),
)
def gru(
    X: np.ndarray,
    W: np.ndarray,
    R: np.ndarray,
    B: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    activation_alpha: Sequence[float] = (),
    activation_beta: Sequence[float] = (),
    activations: Sequence[str] = (),
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int = 0,
    layout: int = 0,
    linear_before_reset: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """ONNX GRU with gates (z, r, h); returns Y and Y_h."""
    batch = X.shape[0] if layout else X.shape[1]
    hidden = R.shape[-1]
    state = {d: _initial(initial_h, d, batch, hidden, layout, X.dtype) for d in range(W.shape[0])}

    def step(d: int, x: np.ndarray) -> list[np.ndarray]:
        f, g = _activations(activations, d, ["Sigmoid", "Tanh"])
        w, r = np.split(W[d], 3), np.split(R[d], 3)
        bias = np.zeros(6 * hidden, X.dtype) if B is None else B[d]
        wb, rb = np.split(bias[: 3 * hidden], 3), np.split(bias[3 * hidden :], 3)
        h = state[d]
        z = f(_clip(x @ w[0].T + h @ r[0].T + wb[0] + rb[0], clip))
        reset = f(_clip(x @ w[1].T + h @ r[1].T + wb[1] + rb[1], clip))
        if linear_before_reset:
            candidate = x @ w[2].T + reset * (h @ r[2].T + rb[2]) + wb[2]
        else:
            candidate = x @ w[2].T + (reset * h) @ r[2].T + rb[2] + wb[2]
        state[d] = (1 - z) * g(_clip(candidate, clip)) + z * h
        return [state[d]]

    Y, (Y_h,) = _run_sequence(X, layout, direction, sequence_lens, step)
    return Y, Y_h


def _clip(value: np.ndarray, clip: float | None) -> np.ndarray:
    return value if clip is None else np.clip(value, -clip, clip)


@register(
    "LSTM",
    accepts={**_DIRECTIONS, "input_forget": (0,)},
    check=_check_activations(3),
)
def lstm(
    X: np.ndarray,
    W: np.ndarray,
    R: np.ndarray,
    B: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    initial_c: np.ndarray | None = None,
    P: np.ndarray | None = None,
    activation_alpha: Sequence[float] = (),
    activation_beta: Sequence[float] = (),
    activations: Sequence[str] = (),
    clip: float | None = None,
    direction: str = "forward",
    hidden_size: int = 0,
    input_forget: int = 0,
    layout: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX LSTM with gates (i, o, f, c) and optional peepholes; returns Y, Y_h and Y_c."""
    batch = X.shape[0] if layout else X.shape[1]
    hidden = R.shape[-1]
    dirs = range(W.shape[0])
    hs = {d: _initial(initial_h, d, batch, hidden, layout, X.dtype) for d in dirs}
    cs = {d: _initial(initial_c, d, batch, hidden, layout, X.dtype) for d in dirs}
    cells = [Cell(W[d], R[d], None if B is None else B[d], None) for d in dirs]

    def step(d: int, x: np.ndarray) -> list[np.ndarray]:
        f, g, h_act = _activations(activations, d, ["Sigmoid", "Tanh", "Tanh"])
        peep = np.zeros(3 * hidden, X.dtype) if P is None else P[d]
        p_i, p_o, p_f = np.split(peep, 3)
        i_pre, o_pre, f_pre, c_pre = np.split(cells[d].pre(x, hs[d]), 4, axis=-1)
        previous = cs[d]
        i = f(_clip(i_pre + p_i * previous, clip))
        forget = f(_clip(f_pre + p_f * previous, clip))
        cs[d] = forget * previous + i * g(_clip(c_pre, clip))
        o = f(_clip(o_pre + p_o * cs[d], clip))
        hs[d] = o * h_act(cs[d])
        return [hs[d], cs[d]]

    Y, (Y_h, Y_c) = _run_sequence(X, layout, direction, sequence_lens, step)
    return Y, Y_h, Y_c
