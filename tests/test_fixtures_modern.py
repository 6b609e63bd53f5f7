"""The PyTorch-exported modern fixtures run, and tune, on every codegen and match onnxruntime.

The fixtures (``scripts/export_fixtures.py``: torch 2.13's default dynamo exporter, opset
20) are MobileNetV3-small, EfficientNet-B0, a ViT, a BERT encoder, a GPT decoder, a UNet
and a YOLO-style head. Each codegen runs every node it supports; the rest falls back to
``cpu@numpy``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import autopart
from autopart import api
from autopart.plan.schema import Plan
from autopart.runtime import random_inputs
from autopart.settings import COMMON
from autopart.targets.resolve import available_targets
from tests.conftest import FIXTURES, max_relative_error, run_onnxruntime
from tests.test_errors import invoke
from tests.test_profile import FAST

pytest.importorskip("onnxruntime")

# each fixture and op types it must keep exercising
MODELS = {
    "mobilenetv3_small": {"Conv", "HardSwish", "HardSigmoid", "ReduceMean", "Gemm"},
    "efficientnet_b0": {"Conv", "Sigmoid", "Mul", "ReduceMean", "Gemm"},
    "vit_tiny": {"Conv", "Gelu", "LayerNormalization", "MatMul", "Softmax", "Slice", "Concat"},
    "bert_tiny": {"Gather", "Gelu", "LayerNormalization", "Softmax", "Cast", "Sub", "Tanh"},
    "gpt_tiny": {"Gather", "Gelu", "LayerNormalization", "MatMul", "Softmax"},
    "unet_small": {"Conv", "ConvTranspose", "Resize", "MaxPool", "Concat"},
    "yolo_head": {"Conv", "Resize", "Concat", "Split", "Sigmoid", "Transpose"},
}
AVAILABLE = {str(t) for t in available_targets()}
CODEGENS = [
    pytest.param(
        target,
        marks=pytest.mark.skipif(target not in AVAILABLE, reason=f"{target} is not available"),
    )
    for target in ("cpu@numpy", "cpu@onnxruntime", "cpu@openvino", "opencl:0@opencl")
]
# what the OpenCL codegen leaves to the fallback: integer index math on the host (it
# computes in float32; integer tensors only as constant operands)
OPENCL_FALLBACK = {"bert_tiny": {"Gather", "Unsqueeze", "Cast"}, "gpt_tiny": {"Gather"}}


def _path(name: str) -> Path:
    return FIXTURES / f"{name}.onnx"


def _assert_matches_onnxruntime(name: str, outputs: dict[str, np.ndarray], seed: int) -> None:
    graph = autopart.load(_path(name))
    expected = run_onnxruntime(_path(name), random_inputs(graph, seed))
    assert list(outputs) == graph.outputs
    for output, reference in zip(graph.outputs, expected, strict=True):
        assert outputs[output].shape == reference.shape, output
        assert max_relative_error(reference, outputs[output]) <= COMMON.check_tolerance, output


@pytest.mark.parametrize("name", MODELS)
def test_fixture_is_small_static_and_exercises_its_ops(name: str) -> None:
    path = _path(name)
    assert path.stat().st_size < 3 * 1024 * 1024
    model = onnx.load(str(path))
    assert model.opset_import[0].version == 20
    assert {node.op_type for node in model.graph.node} >= MODELS[name]
    for value in (*model.graph.input, *model.graph.output):
        assert all(dim.HasField("dim_value") for dim in value.type.tensor_type.shape.dim)


@pytest.mark.parametrize("name", MODELS)
def test_api_run_matches_onnxruntime(name: str) -> None:
    graph = autopart.load(_path(name))
    result = autopart.run(graph, random_inputs(graph, seed=1), warmup=0)
    _assert_matches_onnxruntime(name, result.outputs, seed=1)


@pytest.mark.parametrize("target", CODEGENS)
@pytest.mark.parametrize("name", MODELS)
def test_cli_run_on_each_codegen_matches_onnxruntime(
    tmp_path: Path, name: str, target: str
) -> None:
    out = tmp_path / "out.npz"
    saved = tmp_path / "plan.json"
    code, output = invoke(
        "run", str(_path(name)), "--assign", f"re:.*={target}", "--fallback", "cpu@numpy",
        "--repeat", "1", "--warmup", "0", "--out", str(out), "--save-plan", str(saved),
    )  # fmt: skip
    assert code == 0, output
    with np.load(out) as arrays:
        _assert_matches_onnxruntime(name, dict(arrays), seed=0)
    plan = Plan.load(saved)
    graph = autopart.load(_path(name))
    off = [n for n in graph.nodes if str(plan.assignment[n.name]) != target]
    allowed = OPENCL_FALLBACK.get(name, set()) if target == "opencl:0@opencl" else set()
    if target == "cpu@openvino":  # only what OpenVINO computes otherwise, each named why
        from autopart.targets.openvino.probe import known_mismatch

        allowed = {n.op_type for n in off if known_mismatch(n, graph)}
    assert {n.op_type for n in off} <= allowed


def _tune(tmp_path: Path, name: str, target: str) -> None:
    """Tune ``name`` on ``target`` (fallback cpu@numpy) and check the chosen plan's outputs."""
    targets = [target, "cpu@numpy"]
    profiles = tmp_path / "profiles"
    api.profile(str(_path(name)), targets, profiles, settings=FAST)
    out = tmp_path / "plan.json"
    code, output = invoke(
        "tune", str(_path(name)), "--targets", target, "--fallback", "cpu@numpy",
        "--profiles", str(profiles), "--search-dir", str(tmp_path / "search"),
        "--rounds", "1", "-o", str(out),
    )  # fmt: skip
    assert code == 0, output
    plan = Plan.load(out)
    assert {str(t) for t in plan.assignment.values()} <= set(targets)
    assert plan.measured is not None and plan.measured.max_error is not None
    assert plan.measured.max_error <= COMMON.check_tolerance
    loaded, graph = api.load_plan(out)
    result = api.run_plan(loaded, graph, random_inputs(graph, seed=2), warmup=0)
    _assert_matches_onnxruntime(name, result.outputs, seed=2)


@pytest.mark.slow  # 25-35 s a tune: every fixture on every codegen is the slow tier's
@pytest.mark.parametrize("target", CODEGENS)
@pytest.mark.parametrize("name", MODELS)
def test_tune_on_each_codegen_matches_onnxruntime(tmp_path: Path, name: str, target: str) -> None:
    _tune(tmp_path, name, target)
