"""RoiAlign's reference kernel against onnx's own reference, on random regions and batches.

Each region reads its batch entry's feature map in the map's own dtype and weighs the
samples in float64; these cases check every mode, coordinate convention and sampling
ratio, regions reaching past the map, and regions of several batch entries.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.ops.roi import roi_align
from tests.conftest import by_the_spec


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**16),
    regions=st.integers(1, 6),
    mode=st.sampled_from(["avg", "max"]),
    convention=st.sampled_from(["half_pixel", "output_half_pixel"]),
    ratio=st.sampled_from([0, 1, 2]),
    scale=st.sampled_from([1.0, 0.25]),
)
def test_the_regions_are_the_specifications(
    seed: int, regions: int, mode: str, convention: str, ratio: int, scale: float
) -> None:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    corner = rng.uniform(-4, 40, (regions, 2))
    rois = np.concatenate([corner, corner + rng.uniform(0, 20, (regions, 2))], 1).astype(np.float32)
    batches = rng.integers(0, 2, regions).astype(np.int64)
    attributes = {
        "mode": mode, "coordinate_transformation_mode": convention, "output_height": 3,
        "output_width": 2, "sampling_ratio": ratio, "spatial_scale": scale,
    }  # fmt: skip
    ours = roi_align(X, rois, batches, **attributes)  # type: ignore[arg-type]
    theirs = by_the_spec("RoiAlign", {"x": X, "r": rois, "b": batches}, 16, **attributes)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
