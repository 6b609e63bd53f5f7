"""Resize in nearest mode against onnx's own reference: each output is one input, selected.

The kernel selects each output's one input (weights of 0 and 1 are not summed), so a NaN
or infinite neighbour that the output does not read cannot spoil it. Resizing each input's
own index says which input each output reads: that is checked against the operator's
specification (``onnx.reference``) for every nearest rounding and coordinate
transformation, upsampling and downsampling; then data with non-finite values must come
out as exactly those inputs. (The reference itself sums weighted neighbours, so a NaN or
an infinity spoils its outputs; it is no oracle for them.) onnxruntime 1.32 is no oracle here: it picks other inputs than the specification
for some scales with ``floor`` rounding or ``align_corners`` (a width of 7 scaled by 0.6).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.ops.resize import resize
from tests.conftest import by_the_spec


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**16),
    height=st.integers(1, 8),
    width=st.integers(1, 8),
    scales=st.tuples(st.sampled_from([0.5, 1.0, 2.0, 3.0]), st.sampled_from([0.6, 1.5, 2.0])),
    rounding=st.sampled_from(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]),
    coordinates=st.sampled_from(["half_pixel", "asymmetric", "align_corners"]),
)
def test_nearest_selects_what_the_specification_selects(
    seed: int, height: int, width: int, scales: tuple[float, float], rounding: str,
    coordinates: str,
) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    index = np.arange(2 * height * width, dtype=np.float32).reshape(1, 2, height, width)
    factors = np.array([1.0, 1.0, *scales], np.float32)
    attributes = {"nearest_mode": rounding, "coordinate_transformation_mode": coordinates}
    read = resize(index, None, factors, mode="nearest", **attributes)
    spec = by_the_spec(
        "Resize", {"x": index, "r": None, "s": factors}, 19, mode="nearest", **attributes
    )
    np.testing.assert_array_equal(read, spec)
    X = rng.standard_normal(index.shape).astype(np.float32)
    X[rng.random(X.shape) < 0.15] = rng.choice([np.inf, -np.inf, np.nan])
    with np.errstate(all="ignore"):  # as the numpy codegen runs its kernels
        ours = resize(X, None, factors, mode="nearest", **attributes)
    np.testing.assert_array_equal(ours, X.ravel()[read.astype(np.int64)])
