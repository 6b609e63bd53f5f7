"""The libraries autopart runs keep their warnings off the user's stderr.

A value whose size depends on the data, declared with a fixed shape (as torch's legacy
exporter declares a detector's masks), makes onnxruntime warn at every run of a session
at its default log level: maskrcnn's tune printed a hundred such lines.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from autopart.tuning.peers import PeerInputs, peers


def _nonzero_declared_fixed() -> onnx.ModelProto:
    """NonZero of ``x``, its output declared (1, 1) whatever the data: a wrong declaration."""
    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["y"])],
        "declared_fixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [1, 1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_peer_on_a_wrongly_declared_shape_writes_nothing_to_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    model = _nonzero_declared_fixed()
    found, _ = peers(model, only="onnxruntime alone")
    capfd.readouterr()
    outputs = found["onnxruntime alone"]({"x": np.array([1, 0, 2, 3, 0, 4], np.float32)})
    assert outputs["y"].shape == (1, 4)
    assert capfd.readouterr().err == ""


def test_quantising_a_wrongly_declared_model_writes_nothing_to_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    model = _nonzero_declared_fixed()
    samples = [{"x": np.array([1, 0, 2, 3, 0, i], np.float32)} for i in range(3)]
    capfd.readouterr()
    found, notes = peers(model, PeerInputs(calibration=samples), only="onnxruntime + qdq int8")
    assert not notes, notes
    outputs = found["onnxruntime + qdq int8"]({"x": np.array([1, 0, 2, 3, 0, 4], np.float32)})
    assert outputs["y"].shape == (1, 4)
    assert capfd.readouterr().err == ""
