"""One zoo model spread over cpu@numpy, opencl:0@opencl and cpu@onnxruntime, with copies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import autopart
import autopart.api
from autopart.runtime import random_inputs
from autopart.targets.resolve import available_targets

TARGETS = {str(t) for t in available_targets()}
pytestmark = pytest.mark.skipif(
    not {"opencl:0@opencl", "cpu@onnxruntime"} <= TARGETS,
    reason="needs an OpenCL device and onnxruntime (pip install pyopencl pocl-binary-distribution onnxruntime)",
)

RULES = [
    "Conv=opencl:0@opencl",
    "Conv#1-4=cpu@onnxruntime",
    "Concat=cpu@onnxruntime",
    "MaxPool#2=opencl:0/1@opencl",
]


def _check(plan, graph, feeds: dict, reference: dict) -> None:  # type: ignore[no-untyped-def]
    for concurrent in (True, False):
        result = autopart.api.run_plan(plan, graph, feeds, repeat=1, concurrent=concurrent)
        for name, expected in reference.items():
            np.testing.assert_allclose(result.outputs[name], expected, rtol=1e-3, atol=1e-6)


def test_spread_plan_runs_matches_and_round_trips(tmp_path: Path) -> None:
    plan, graph = autopart.api.make_plan("squeezenet", RULES, "cpu@numpy")
    used = {p.target for p in plan.partitions}
    assert {"cpu@numpy", "opencl:0@opencl", "cpu@onnxruntime", "opencl:0/1@opencl"} <= used
    assert {(c.src, c.dst) for c in plan.copies} >= {("cpu", "opencl:0"), ("opencl:0", "cpu")}
    feeds = random_inputs(graph, seed=9)
    reference = autopart.run(graph, feeds).outputs
    _check(plan, graph, feeds, reference)
    path = tmp_path / "plan.json"
    plan.save(path)
    loaded, loaded_graph = autopart.api.load_plan(path)
    assert loaded.to_dict() == plan.to_dict()
    _check(loaded, loaded_graph, feeds, reference)


def test_opencl_units_run_side_by_side() -> None:
    if "opencl:0/1@opencl" not in TARGETS:
        pytest.skip("no OpenCL sub-devices")
    plan, graph = autopart.api.make_plan(
        "inception_v1", ["Conv=opencl:0/0@opencl", "Conv#10-40=opencl:0/1@opencl"]
    )
    lanes = {p.target for p in plan.partitions}
    assert {"opencl:0/0@opencl", "opencl:0/1@opencl"} <= lanes
    feeds = random_inputs(graph, seed=1)
    result = autopart.api.run_plan(plan, graph, feeds)
    errors = autopart.api.check_outputs(graph, feeds, result.outputs)
    assert max(errors.values()) <= 1e-3
