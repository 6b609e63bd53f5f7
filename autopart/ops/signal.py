"""Reference kernels for signal processing: DFT and the Hann, Hamming and Blackman windows."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from onnx import helper

from autopart.ops.registry import register


def _as_complex(x: np.ndarray) -> np.ndarray:
    """The signal without its trailing (real) or (real, imaginary) dim."""
    if x.shape[-1] == 1:
        return x[..., 0]
    return x[..., 0] + 1j * x[..., 1]


def _as_pairs(z: np.ndarray) -> np.ndarray:
    return np.stack([np.real(z), np.imag(z)], axis=-1)


def _dft(
    x: np.ndarray, dft_length: np.ndarray | None, axis: int, inverse: int, onesided: int
) -> np.ndarray:
    axis = axis % x.ndim
    if dft_length is not None:
        length = int(np.asarray(dft_length).item())
    else:
        length = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    signal = _as_complex(x)
    if inverse and onesided:
        return np.fft.irfft(signal, n=length, axis=axis)[..., None].astype(x.dtype)
    if inverse:
        return _as_pairs(np.fft.ifft(signal, n=length, axis=axis)).astype(x.dtype)
    spectrum = np.fft.fft(signal, n=length, axis=axis)
    if onesided:
        spectrum = np.take(spectrum, np.arange(length // 2 + 1), axis=axis)
    return _as_pairs(spectrum).astype(x.dtype)


_DFT_FLAGS = {"inverse": (0, 1), "onesided": (0, 1)}


@register("DFT", since=17, accepts=_DFT_FLAGS)
def dft_17(
    input: np.ndarray,
    dft_length: np.ndarray | None = None,
    axis: int = 1,
    inverse: int = 0,
    onesided: int = 0,
) -> np.ndarray:
    """ONNX DFT-17: ``axis`` is an attribute; the last dim holds real (and imaginary) parts."""
    return _dft(input, dft_length, axis, inverse, onesided)


@register("DFT", since=20, accepts=_DFT_FLAGS)
def dft(
    input: np.ndarray,
    dft_length: np.ndarray | None = None,
    axis: np.ndarray | None = None,
    inverse: int = 0,
    onesided: int = 0,
) -> np.ndarray:
    """ONNX DFT-20: ``axis`` is an input (default -2)."""
    along = -2 if axis is None else int(np.asarray(axis).item())
    return _dft(input, dft_length, along, inverse, onesided)


def _window(op_type: str, shape: Callable[[np.ndarray, float], np.ndarray]) -> None:
    def kernel(size: np.ndarray, output_datatype: int = 1, periodic: int = 1) -> np.ndarray:
        count = int(np.asarray(size).item())
        period = count if periodic else count - 1
        points = np.arange(count, dtype=np.float64)
        dtype = helper.tensor_dtype_to_np_dtype(output_datatype)
        return shape(points, float(period)).astype(dtype)

    kernel.__name__ = op_type.lower()
    kernel.__doc__ = f"ONNX {op_type} of ``size`` points, periodic or symmetric."
    register(op_type, since=17)(kernel)


_window("HannWindow", lambda n, period: np.sin(n * np.pi / period) ** 2)
_window(
    "HammingWindow",
    lambda n, period: 25 / 46 - (1 - 25 / 46) * np.cos(2 * np.pi * n / period),
)
_window(
    "BlackmanWindow",
    lambda n, period: (
        0.42 - 0.5 * np.cos(2 * np.pi * n / period) + 0.08 * np.cos(4 * np.pi * n / period)
    ),
)


@register("STFT", since=17, accepts={"onesided": (0, 1)})
def stft(
    signal: np.ndarray,
    frame_step: np.ndarray,
    window: np.ndarray | None = None,
    frame_length: np.ndarray | None = None,
    onesided: int = 1,
) -> np.ndarray:
    """ONNX STFT: the DFT of each windowed frame; (batch, frames, bins, 2)."""
    step = int(np.asarray(frame_step).item())
    if frame_length is not None:
        length = int(np.asarray(frame_length).item())
    else:
        length = signal.shape[1] if window is None else window.shape[0]
    weights = np.ones(length) if window is None else window.astype(np.float64)
    samples = _as_complex(signal)
    count = 1 + (samples.shape[1] - length) // step
    frames = np.stack([samples[:, f * step : f * step + length] for f in range(count)], axis=1)
    spectrum = np.fft.fft(frames * weights, n=length, axis=-1)
    if onesided:
        spectrum = spectrum[..., : length // 2 + 1]
    return _as_pairs(spectrum).astype(signal.dtype)


@register("MelWeightMatrix", since=17)
def mel_weight_matrix(
    num_mel_bins: np.ndarray,
    dft_length: np.ndarray,
    sample_rate: np.ndarray,
    lower_edge_hertz: np.ndarray,
    upper_edge_hertz: np.ndarray,
    output_datatype: int = 1,
) -> np.ndarray:
    """ONNX MelWeightMatrix: triangular filters from spectrogram bins to mel bins."""
    bins, length = int(np.asarray(num_mel_bins).item()), int(np.asarray(dft_length).item())
    rate = np.asarray(sample_rate).item()

    def to_mel(hertz: np.ndarray) -> np.ndarray:
        return 2595 * np.log1p(np.asarray(hertz, dtype=np.float64) / 700) / np.log(10)

    low, high = to_mel(lower_edge_hertz), to_mel(upper_edge_hertz)
    mels = np.arange(bins + 2) * ((high - low) / (bins + 2)) + low
    hertz = 700 * np.expm1(mels / 2595 * np.log(10))
    edges = (((length + 1) * hertz) // rate).astype(int)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        left, centre, right = edges[i], edges[i + 1], edges[i + 2]
        if centre == left:
            out[centre, i] = 1
        else:
            rising = np.arange(left, centre + 1)
            out[rising, i] = (rising - left) / (centre - left)
        if right > centre:
            falling = np.arange(centre, right)
            out[falling, i] = (right - falling) / (right - centre)
    return out.astype(helper.tensor_dtype_to_np_dtype(output_datatype))
