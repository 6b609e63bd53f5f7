"""int8 calibration ranges: measured in one linear pass, as onnxruntime's MinMax calibrator does."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator

from autopart.ir.feeds import random_inputs
from autopart.ir.onnx_export import to_onnx
from autopart.loader import load_model
from autopart.targets.quant_ranges import measure_ranges
from autopart.testing.scale_models import op_chain
from tests.test_profile import tiny_cnn


def calibrator_ranges(graph: object, samples: list[dict[str, np.ndarray]]) -> dict:
    """onnxruntime's own MinMax calibrator on the same export and samples (the oracle)."""
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "model.onnx"
        onnx.save(to_onnx(graph), source)
        calibrator = create_calibrator(
            source, None, augmented_model_path=str(Path(folder) / "augmented.onnx"),
            calibrate_method=CalibrationMethod.MinMax, providers=["CPUExecutionProvider"],
        )  # fmt: skip
        feeds = iter(samples)

        class Reader:
            def get_next(self) -> dict[str, np.ndarray] | None:
                return next(feeds, None)

        calibrator.collect_data(Reader())
        found = calibrator.compute_data()
    return {
        name: (float(np.min(data.range_value[0])), float(np.max(data.range_value[1])))
        for name, data in found.items()
    }


def test_the_ranges_are_onnxruntime_calibrators() -> None:
    graph = load_model(tiny_cnn())
    samples = [dict(random_inputs(graph, seed)) for seed in range(3)]
    mine, theirs = measure_ranges(graph, samples), calibrator_ranges(graph, samples)
    assert mine.keys() == theirs.keys()
    for name, (low, high) in theirs.items():
        np.testing.assert_allclose(mine[name], (low, high), rtol=1e-5, atol=1e-6)


def test_a_long_chain_is_calibrated_in_one_linear_pass() -> None:
    """3,000 nodes: the calibrator's own augmenting is quadratic (minutes at 12,400)."""
    graph = load_model(op_chain(3000))
    ranges = measure_ranges(graph, [dict(random_inputs(graph, 0))])
    floats = [n.outputs[0] for n in graph.nodes]
    assert set(floats) <= set(ranges) and all(low <= high for low, high in ranges.values())
