"""NonMaxSuppression's reference kernel against onnxruntime, on boxes drawn at random.

The kernel has two exact ways (every overlapping pair tested at once, or each chosen box
testing a window of neighbours), chosen by their cost; these cases check that each keeps
exactly what onnxruntime keeps: ties in score (lower index first), corners given in either
order, centre-format boxes, empty and degenerate boxes, thresholds and limits, and pairs
made in chunks of any size.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import onnxruntime as ort
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from autopart.ops import detection
from autopart.ops.detection import non_max_suppression
from tests.conftest import make_model


def _session(center: int) -> ort.InferenceSession:
    node = helper.make_node(
        "NonMaxSuppression", ["b", "s", "m", "i", "t"], ["o"], center_point_box=center
    )
    inputs = [
        helper.make_tensor_value_info("b", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("s", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("m", TensorProto.INT64, None),
        helper.make_tensor_value_info("i", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("t", TensorProto.FLOAT, None),
    ]
    output = [helper.make_tensor_value_info("o", TensorProto.INT64, None)]
    model = make_model(helper.make_graph([node], "nms", inputs, output), opset=13)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


SESSIONS = {center: _session(center) for center in (0, 1)}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**16),
    boxes=st.integers(0, 400),
    classes=st.integers(1, 3),
    span=st.sampled_from([5.0, 50.0, 5000.0]),
    limit=st.integers(0, 500),
    iou=st.sampled_from([0.0, 0.3, 0.5, 0.9]),
    floor=st.sampled_from([0.0, 0.2, 0.6]),
    center=st.sampled_from([0, 1]),
    pairs_per_step=st.sampled_from([0, 10**12]),  # always step by step, or always by pairs
    chunk=st.sampled_from([7, 1 << 20]),
)
def test_the_boxes_kept_are_onnxruntimes(
    seed: int, boxes: int, classes: int, span: float, limit: int, iou: float, floor: float,
    center: int, pairs_per_step: int, chunk: int,
) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    corner = rng.uniform(0, span, (1, boxes, 2))
    size = rng.uniform(0, 30, (1, boxes, 2)) * (rng.random((1, boxes, 1)) > 0.05)  # some empty
    drawn = np.concatenate([corner, corner + size], axis=-1)
    if rng.random() < 0.5:
        drawn = drawn[:, :, [2, 3, 0, 1]]  # corners in the other order
    scores = np.round(rng.random((1, classes, boxes)), 1)  # many ties
    args = (
        drawn.astype(np.float32), scores.astype(np.float32), np.array([limit], np.int64),
        np.array([iou], np.float32), np.array([floor], np.float32),
    )  # fmt: skip
    with (
        mock.patch.object(detection, "PAIRS_PER_STEP", pairs_per_step),
        mock.patch.object(detection, "PAIR_CHUNK", chunk),
    ):
        ours = non_max_suppression(*args, center_point_box=center)
    (theirs,) = SESSIONS[center].run(None, dict(zip("bsmit", args, strict=True)))
    np.testing.assert_array_equal(ours, theirs)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**16),
    boxes=st.integers(0, 300),
    odd=st.sampled_from([np.nan, np.inf, -np.inf, 1e300]),
    iou=st.sampled_from([-0.5, 0.0, 0.5]),
    limit=st.integers(1, 400),
)
def test_both_ways_keep_the_same_boxes_where_corners_are_not_finite(
    seed: int, boxes: int, odd: float, iou: float, limit: int
) -> None:
    """Where onnxruntime is no oracle (NaN, infinite or huge corners, a negative IoU
    threshold), the two ways still agree with each other box for box."""
    rng = np.random.default_rng(seed)
    corner = rng.uniform(0, 60, (1, boxes, 2))
    drawn = np.concatenate([corner, corner + rng.uniform(0, 30, (1, boxes, 2))], axis=-1)
    drawn[rng.random(drawn.shape) < 0.05] = odd
    scores = np.round(rng.random((1, 1, boxes)), 1).astype(np.float32)
    args = (drawn, scores, np.array([limit]), np.array([iou]), None)
    kept = []
    for pairs_per_step in (0, 10**12):
        with (
            mock.patch.object(detection, "PAIRS_PER_STEP", pairs_per_step),
            np.errstate(all="ignore"),  # as the numpy codegen runs its kernels
        ):
            kept.append(non_max_suppression(*args))
    np.testing.assert_array_equal(kept[0], kept[1])
