"""ScatterND's reference kernel against onnx's own reference, duplicates and negatives too.

The kernel writes every update in one array operation; these cases check that it ends
where writing the updates one by one in order ends (onnx's reference does exactly that):
a plain write keeps each position's last update, a reduction combines them in order,
negative indices count from the end, and slices of any depth.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.ops.indexing import scatter_nd
from tests.conftest import by_the_spec


@settings(max_examples=80, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**16),
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    depth=st.integers(1, 4),
    count=st.integers(0, 12),
    reduction=st.sampled_from(["none", "add", "mul", "max", "min"]),
)
def test_the_scatter_is_the_specifications(
    seed: int, shape: list[int], depth: int, count: int, reduction: str
) -> None:
    rng = np.random.default_rng(seed)
    depth = min(depth, len(shape))
    data = rng.standard_normal(shape).astype(np.float32)
    indices = np.stack([rng.integers(-size, size, count) for size in shape[:depth]], -1)
    indices = indices.reshape(count, depth).astype(np.int64)  # duplicates are likely
    updates = rng.standard_normal((count, *shape[depth:])).astype(np.float32)
    ours = scatter_nd(data, indices, updates, reduction)
    feeds = {"d": data, "i": indices, "u": updates}
    theirs = by_the_spec("ScatterND", feeds, 18, reduction=reduction)
    np.testing.assert_array_equal(ours, theirs)
