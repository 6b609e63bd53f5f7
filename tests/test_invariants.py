"""Invariants that hold on every model, whoever made it.

- A model shipped quantised is judged by its own quantisation: its own runtimes (the f32
  peers) are never outside its tolerance, and neither is the plan kept.
- A non-finite error never sets a tolerance; when no plan is within the tolerance, the
  most accurate one is kept, and a note says so.
- An OpenCL device whose compiler fails is left out, and ``autopart devices`` says why.
- No corpus model is special-cased by name anywhere in the package.
"""

from __future__ import annotations

import functools
import math
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from autopart.ir.graph import Graph
from autopart.ir.onnx_import import load_graph
from autopart.targets.opencl.device import discover_opencl_devices, unusable_opencl_devices
from autopart.targets.openvino import library
from autopart.tuning import beyond_tolerance
from autopart.tuning.accuracy import (
    AccuracyPolicy,
    follow_peer,
    made_for_runtimes,
    own_runtimes,
)
from autopart.tuning.verify import Measured
from autopart.zoo import zoo_names
from tests.conftest import make_model
from tests.test_errors import assert_one_line_error, invoke

ROOT = Path(__file__).parent.parent
ERRORS = {"openvino alone": 2.0e-3, "onnxruntime alone": 3.8e-3, "openvino alone f32": 2.9e-3}


def _quantised_model(path: Path) -> Path:
    """A conv and a matmul in QDQ form, as onnxruntime's quantize_static writes them."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    dense = numpy_helper.from_array(rng.standard_normal((8 * 6 * 6, 10)).astype(np.float32), "d")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "d"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [weight, dense, shape],
    )  # fmt: skip
    plain = path.with_suffix(".f32.onnx")
    onnx.save(make_model(graph, opset=13), str(plain))

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [
                {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(8)
            ]

        def get_next(self) -> dict[str, np.ndarray] | None:
            return self.left.pop() if self.left else None

    quantize_static(str(plain), str(path), Reader(), quant_format=QuantFormat.QDQ)
    return path


@pytest.mark.parametrize("installed", ["bf16", "f32"])
def test_a_quantised_models_own_runtimes_floor_its_tolerance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed: str
) -> None:
    monkeypatch.setattr(library, "default_precision", lambda: installed)  # the CPU's
    path = _quantised_model(tmp_path / "q.onnx")
    floor = own_runtimes()
    assert "onnxruntime alone" in floor and "openvino alone f32" in floor
    assert ("openvino alone" in floor) == (installed == "f32")  # as installed in f32: its own
    rule = AccuracyPolicy().tolerance_rule(load_graph(str(path)))
    assert callable(rule) and rule(ERRORS) == pytest.approx(1.1 * 3.8e-3)
    assert follow_peer(ERRORS) == pytest.approx(1.1 * 2.0e-3)  # a float model: the peer's
    exact = AccuracyPolicy(precisions=("f32",)).tolerance_rule(load_graph(str(path)))
    assert callable(exact) and exact(ERRORS) == pytest.approx(1.1 * 3.8e-3)


def test_a_float_models_tolerance_is_never_below_its_own_f32_runtimes_error(
    tmp_path: Path,
) -> None:
    plain = load_graph(str(_quantised_model(tmp_path / "q.onnx").with_suffix(".f32.onnx")))
    detector = {"openvino alone": math.inf, "onnxruntime alone": 1.8e-3}  # boxes moved
    for policy in (AccuracyPolicy(), AccuracyPolicy(precisions=("f32",))):
        rule = policy.tolerance_rule(plain)
        assert callable(rule) and rule(detector) == pytest.approx(1.1 * 1.8e-3)
        assert rule({"onnxruntime alone": 1e-7}) == pytest.approx(1e-3)  # the f32 check's
        assert "never below the f32 runtimes' own error" in policy.describe()
    assert AccuracyPolicy(tolerance=1e-3).tolerance_rule(plain) == 1e-3  # a number is kept


def test_a_runtime_further_off_than_quantisation_noise_sets_no_floor() -> None:
    errors = {**ERRORS, "openvino alone f32": 0.72}  # another model, not a rounding of it
    floor = ("onnxruntime alone", "openvino alone f32")
    assert follow_peer(errors, floor_peers=floor) == pytest.approx(1.1 * 3.8e-3)


@given(
    own=st.floats(0.0, 5.0),
    others=st.dictionaries(
        st.sampled_from(["openvino alone", "openvino alone f32"]), st.floats(0.0, 5.0)
    ),
)
@settings(max_examples=60, deadline=None)
def test_the_runtime_a_quantised_model_was_made_for_never_fails_its_tolerance(
    own: float, others: dict[str, float]
) -> None:
    """However far its rounding of whole quantisation steps takes it from the reference
    (a dynamically quantised decoder's onnxruntime: 1.04 off), while another runtime
    further off than quantisation noise still sets no floor."""
    assert made_for_runtimes() == ("onnxruntime alone",)
    errors = {**others, "onnxruntime alone": own}
    for policy in (AccuracyPolicy(), AccuracyPolicy(precisions=("f32",))):
        rule = policy.tolerance_rule(_quantised_graph())
        assert callable(rule) and rule(errors) >= own
        beyond = {**errors, "openvino alone f32": own + 0.72}
        assert rule(beyond) == pytest.approx(rule({**errors, "openvino alone f32": 0.0}))


@functools.cache
def _quantised_graph() -> Graph:
    with tempfile.TemporaryDirectory() as folder:
        return load_graph(str(_quantised_model(Path(folder) / "q.onnx")))


def test_a_non_finite_error_sets_no_tolerance() -> None:
    infinite = {"openvino alone": math.inf, "onnxruntime alone": math.nan}
    assert follow_peer(infinite, floor_peers=("onnxruntime alone",)) == pytest.approx(1e-3)


def test_when_no_plan_is_within_the_tolerance_the_most_accurate_is_kept_and_said() -> None:
    def measured(error: float, median_s: float) -> Measured:
        result = Measured(latencies=[median_s] * 3, max_error=error, tolerance=1e-3)
        return result

    kept, notes = beyond_tolerance.most_accurate(
        {"a": measured(5e-2, 1e-3), "b": measured(2e-2, 9e-3), "c": measured(math.inf, 1e-4)},
        "a",
    )
    assert kept == "b" and "most accurate" in notes[0] and "b" in notes[0]
    assert beyond_tolerance.most_accurate({}, "pick") == ("pick", [])


def test_every_opencl_device_found_is_either_usable_or_left_out_with_a_reason() -> None:
    usable, left_out = discover_opencl_devices(), unusable_opencl_devices()
    assert all(why.startswith("its compiler fails") for _, why in left_out)
    code, output = invoke("devices")
    assert code == 0, output
    for device in usable:
        assert device.name in output
    for name, _ in left_out:
        assert "left out" in output and name in " ".join(output.split())


def corpus_names() -> set[str]:
    """The distinctive names of the corpus's models, packages and files (not the zoo's)."""
    sys.path.insert(0, str(ROOT / "experiments" / "corpus"))
    from corpus import load_corpus

    zoo = set(zoo_names())
    names = set()
    for model in load_corpus():
        base = re.sub(
            r"__(dynamo|legacy)$", "", re.sub(r"^(w|tv|hf|heldout|onnx)_", "", model.name)
        )
        names |= {base, model.package, Path(model.member).stem if model.member else ""}
    # only identifiers that cannot be plain words or op names: with a digit, _ or -
    return {n for n in names if n and n not in zoo and re.search(r"[0-9_-]", n)}


def test_no_corpus_model_is_named_in_the_package() -> None:
    names = corpus_names()
    assert len(names) > 50
    pattern = re.compile(
        r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, sorted(names))) + r")(?![A-Za-z0-9_])",
        re.IGNORECASE,
    )
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in sorted((ROOT / "autopart").rglob("*.py"))
        for match in pattern.finditer(path.read_text())
    ]
    assert found == []


def rate_model() -> onnx.ModelProto:
    """A scalar sample rate feeds a log and a scalar step count sets a Range's length."""
    nodes = [
        helper.make_node("Sub", ["rate", "thousand"], ["above"]),
        helper.make_node("Log", ["above"], ["log_rate"]),  # NaN for a random rate near 0
        helper.make_node("Mul", ["x", "log_rate"], ["scaled"]),
        helper.make_node("Range", ["zero", "steps", "one"], ["ramp"]),
        helper.make_node("Cast", ["ramp"], ["ramp_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["ramp_f"], ["total"], keepdims=0),
        helper.make_node("Add", ["scaled", "total"], ["y"]),
    ]
    constants = [
        numpy_helper.from_array(np.array(1000.0, np.float32), "thousand"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16]),
        helper.make_tensor_value_info("rate", TensorProto.FLOAT, []),
        helper.make_tensor_value_info("steps", TensorProto.INT64, []),
    ]
    output = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])]
    return make_model(helper.make_graph(nodes, "rates", inputs, output, constants))


@pytest.mark.slow
def test_scalars_that_set_sizes_or_feed_thresholds_are_named_for_freezing(tmp_path: Path) -> None:
    from autopart.ir.feeds import controlling_inputs

    assert controlling_inputs(load_graph(rate_model())) == ["steps"]  # rate only scales
    path = tmp_path / "rates.onnx"
    onnx.save(rate_model(), str(path))
    common = ["--search-dir", str(tmp_path / "s"), "--profiles", str(tmp_path / "p")]
    code, output = invoke("tune", str(path), "--targets", "cpu@onnxruntime", *common)
    assert_one_line_error(code, output, "NaN", "y", "--inputs", "steps=VALUE", "rate=VALUE")
    code, output = invoke(
        "tune", str(path), "--freeze", "rate=16000", "--targets", "cpu@onnxruntime",
        "--rounds", "1", *common,
    )  # fmt: skip
    assert code == 0, output
    assert "--freeze steps=VALUE" in " ".join(output.split()), output


def test_openvino_at_f32_keeps_activations_float_for_weights_stored_in_int8(tmp_path: Path) -> None:
    """OpenVINO's CPU plugin quantises activations of int8-weight MatMuls unless told not to."""
    rng = np.random.default_rng(0)
    size = 256
    stored = numpy_helper.from_array(rng.integers(-127, 127, (size, size)).astype(np.int8), "w8")
    scale = numpy_helper.from_array(np.full((1, size), 0.01, np.float32), "scale")
    nodes = [
        helper.make_node("Cast", ["w8"], ["wf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["wf", "scale"], ["w"]),
        helper.make_node("MatMul", ["x", "w"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "compressed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, size])], [stored, scale],
    )  # fmt: skip
    path = tmp_path / "compressed.onnx"
    onnx.save(make_model(graph), str(path))
    code, output = invoke("run", str(path), "--assign", "re:.*=cpu@openvino", "--check")
    assert code == 0 and "(ok)" in output, output  # with int8 activations: 4.3e-03


def test_openvino_leaves_a_models_dynamic_quantisation_to_the_reference() -> None:
    from autopart.targets.openvino.probe import known_mismatch

    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
        helper.make_node("MatMulInteger", ["q", "w", "z"], ["y"]),
    ]
    weight = numpy_helper.from_array(np.ones((4, 2), np.uint8), "w")
    graph = helper.make_graph(
        nodes, "dq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [3, 2])], [weight],
    )  # fmt: skip
    imported = load_graph(make_model(graph))
    verdicts = {node.op_type: known_mismatch(node, imported) for node in imported.nodes}
    assert (
        verdicts["DynamicQuantizeLinear"]
        and "dynamic quantisation" in verdicts["DynamicQuantizeLinear"]
    )
    assert verdicts["MatMulInteger"] is None


def _masked_bias_model(path: Path, fill: float) -> Path:
    """``bias + (1 - mask) * fill``: an attention mask added to a constant position bias."""
    rng = np.random.default_rng(0)
    bias = numpy_helper.from_array(rng.uniform(1, 5, (1, 2, 8, 8)).astype(np.float32), "bias")
    one = numpy_helper.from_array(np.ones((), np.float32), "one")
    low = numpy_helper.from_array(np.array(fill, np.float32), "low")
    nodes = [
        helper.make_node("Sub", ["one", "mask"], ["inverted"]),
        helper.make_node("Mul", ["inverted", "low"], ["masked"]),
        helper.make_node("Add", ["bias", "masked"], ["scores"]),
    ]
    graph = helper.make_graph(
        nodes, "masked_bias", [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, 1, 8])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2, 8, 8])], [bias, one, low],
    )  # fmt: skip
    onnx.save(make_model(graph), str(path))
    return path


def test_openvino_never_gets_a_mul_whose_constant_absorbs_the_terms_it_is_added_to(
    tmp_path: Path,
) -> None:
    """OpenVINO alone folds ``bias + (1 - mask) * lowest`` into ``(bias + lowest) - ...``."""
    openvino = pytest.importorskip("openvino")
    import onnxruntime as ort

    from autopart.targets.openvino.probe import ABSORBING_MAGNITUDE, known_mismatch

    path = _masked_bias_model(tmp_path / "mask.onnx", float(np.finfo(np.float32).min))
    mask = np.ones((1, 1, 1, 8), np.float32)
    mask[..., 6:] = 0
    want = ort.InferenceSession(str(path)).run(None, {"mask": mask})[0]
    core = openvino.Core()
    alone = core.compile_model(core.read_model(str(path)), "CPU")({"mask": mask})[0]
    assert not np.allclose(alone[..., :6], want[..., :6])  # the library loses the bias
    imported = load_graph(onnx.load(str(path)))
    verdicts = {node.op_type: known_mismatch(node, imported) for node in imported.nodes}
    assert verdicts["Mul"] and "absorbs" in verdicts["Mul"]
    assert verdicts["Add"] is None and verdicts["Sub"] is None
    code, output = invoke("run", str(path), "--assign", "re:.*=cpu@openvino", "--check")
    assert code == 0 and "(ok)" in output, output
    # a mask of -10000 (BERT's) is spaced finer than the tolerance: OpenVINO keeps it
    modest = load_graph(onnx.load(str(_masked_bias_model(tmp_path / "m.onnx", -1e4))))
    assert ABSORBING_MAGNITUDE > 1e4
    assert all(known_mismatch(node, modest) is None for node in modest.nodes)
