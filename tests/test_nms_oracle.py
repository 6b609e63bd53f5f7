"""NonMaxSuppression's reference kernel against onnxruntime, on boxes drawn at random.

The kernel searches only a window of neighbours for the boxes a chosen one suppresses;
these cases check that it keeps exactly what onnxruntime keeps: ties in score (lower
index first), corners given in either order, centre-format boxes, empty and degenerate
boxes, thresholds and limits.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

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
)
def test_the_boxes_kept_are_onnxruntimes(
    seed: int, boxes: int, classes: int, span: float, limit: int, iou: float, floor: float,
    center: int,
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
    ours = non_max_suppression(*args, center_point_box=center)
    (theirs,) = SESSIONS[center].run(None, dict(zip("bsmit", args, strict=True)))
    np.testing.assert_array_equal(ours, theirs)
