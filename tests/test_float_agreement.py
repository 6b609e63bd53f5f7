"""OpenVINO's float convolutions are offered only in configurations its kernel computes right.

OpenVINO 2026.4's f32 convolution of one channel into one, 1x1, with two or more columns
of padding at the end, writes into the padding (the conformance suite found it). The
probe (:func:`~autopart.targets.openvino.agreement.agrees_in_float`) must refuse exactly
the configurations that err, against onnxruntime as the oracle, probe each configuration
once whatever its weights, and keep its answers on disk for the next process.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from autopart.ir.graph import Graph
from autopart.ir.onnx_import import load_graph
from autopart.ir.target import VirtualDevice
from autopart.targets.openvino import agreement, agreement_store, library
from autopart.targets.openvino import codegen as ovgen
from autopart.targets.resolve import resolve
from tests.test_agreement_store import own_cache  # noqa: F401  (each test: its own cache, no answers)

pytestmark = pytest.mark.skipif(
    not ovgen.OpenVinoCodegen.available(), reason="openvino is not installed"
)
ort = pytest.importorskip("onnxruntime")
WRONG_PADS = [0, 0, 0, 2]  # two columns of padding at the end of a 1x1, one-channel kernel


def conv_model(
    channels: int, out: int, size: int, kernel: int, pads: list[int], stride: int, seed: int = 0
) -> onnx.ModelProto:
    """One convolution with seeded weights, on a ``channels`` x ``size`` x ``size`` input."""
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((out, channels, kernel, kernel)).astype(np.float32)
    node = helper.make_node(
        "Conv", ["x", "w"], ["y"], "conv", kernel_shape=[kernel, kernel], pads=pads,
        strides=[stride, stride],
    )  # fmt: skip
    shape = [1, channels, size, size]
    graph = helper.make_graph(
        [node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def openvino_errs(model: onnx.ModelProto) -> bool:
    """Whether OpenVINO's f32 output differs from onnxruntime's beyond 1e-4 of its magnitude."""
    feeds = {"x": np.random.default_rng(1).uniform(-2, 2, _shape(model)).astype(np.float32)}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    compiled = library.core().compile_model(
        library.read_onnx(model.SerializeToString()), library.DEVICE,
        library.target_config(None, "f32"),
    )  # fmt: skip
    got = np.asarray(compiled.create_infer_request().infer(feeds)[0])
    scale = float(np.abs(want).max(initial=0.0)) or 1.0
    return got.shape != want.shape or float(np.abs(got - want).max()) > 1e-4 * scale


def _shape(model: onnx.ModelProto) -> list[int]:
    """The model's one input shape."""
    return [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


def offered(model: onnx.ModelProto, target: str = "cpu@openvino") -> bool:
    """Whether ``target`` offers the model's one node."""
    graph = load_graph(model, simplify_graph=False)
    return resolve(VirtualDevice.parse(target)).supports(graph.nodes[0], graph)


def test_the_wrong_configuration_is_not_offered_in_f32_and_its_neighbours_are() -> None:
    wrong = conv_model(1, 1, 4, 1, WRONG_PADS, 1)
    assert openvino_errs(wrong), "OpenVINO computes it right now: pick another wrong case"
    assert not offered(wrong)
    assert not offered(wrong, "cpu/0@openvino")  # a unit runs the same kernel
    assert offered(conv_model(1, 1, 4, 3, [1, 1, 1, 1], 1))
    assert offered(conv_model(2, 1, 4, 3, WRONG_PADS, 1))


def test_a_convolution_reading_only_padding_somewhere_is_never_offered_in_float() -> None:
    """OpenVINO's f32 kernel left such columns unset (1e28) where its probe had agreed."""
    assert not offered(conv_model(1, 1, 4, 2, [0, 2, 0, 0], 1))
    assert not offered(conv_model(2, 2, 4, 1, [0, 0, 0, 1], 1))


@settings(max_examples=20, deadline=None)
@given(
    channels=st.integers(1, 3),
    out=st.integers(1, 3),
    size=st.integers(3, 6),
    kernel=st.integers(1, 3),
    pads=st.lists(st.integers(0, 2), min_size=4, max_size=4),
    stride=st.integers(1, 2),
)
def test_the_probe_offers_exactly_the_configurations_openvino_computes_right(
    channels: int, out: int, size: int, kernel: int, pads: list[int], stride: int
) -> None:
    """The oracle: onnxruntime on the same node, inputs and weights other than the probe's.

    A configuration reading only padding somewhere is refused by rule, right or not.
    """
    model = conv_model(channels, out, size, kernel, pads, stride, seed=3)
    if max(pads) >= kernel:
        assert not offered(model)
    else:
        assert offered(model) == (not openvino_errs(model))


def _two_of_one_configuration(path: Path) -> Graph:
    """Two 1x1 one-channel convolutions, end-padded by two, with other weights, side by side."""
    nodes, inputs, outputs, weights = [], [], [], []
    for index in range(2):
        nodes.append(helper.make_node(
            "Conv", [f"x{index}", f"w{index}"], [f"y{index}"], f"c{index}", kernel_shape=[1, 1],
            pads=WRONG_PADS,
        ))  # fmt: skip
        inputs.append(helper.make_tensor_value_info(f"x{index}", TensorProto.FLOAT, [1, 1, 4, 4]))
        outputs.append(helper.make_tensor_value_info(f"y{index}", TensorProto.FLOAT, None))
        weight = np.full((1, 1, 1, 1), 0.5 + index, np.float32)
        weights.append(numpy_helper.from_array(weight, f"w{index}"))
    model = helper.make_model(
        helper.make_graph(nodes, "two", inputs, outputs, weights),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    onnx.save(model, str(path))
    return load_graph(model, simplify_graph=False)


def test_one_probe_per_configuration_whatever_its_weights_kept_for_the_next_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = _two_of_one_configuration(tmp_path / "two.onnx")
    probed: list[int] = []
    real = agreement._agree

    def counting(models: list[onnx.ModelProto], precision: str) -> list[bool]:
        probed.append(len(models))
        return real(models, precision)

    monkeypatch.setattr(agreement, "_agree", counting)
    answers = [agreement.agrees_in_float(node, graph, None) for node in graph.nodes]
    assert answers == [False, False] and probed == [1]
    assert agreement_store.store_path(agreement.FLOAT_AGREEMENT["f32"]).is_file()
    assert agreement_store.store_path(agreement.FLOAT_AGREEMENT["f32"]) != (
        agreement_store.store_path(agreement.INT8_AGREEMENT)
    )
    agreement.forget_answers()  # a new process: the answers are read back, nothing probed
    assert [agreement.agrees_in_float(node, graph, "f32") for node in graph.nodes] == answers
    assert probed == [1]


def test_ops_other_than_float32_convolutions_are_not_probed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(models: list[onnx.ModelProto], precision: str) -> list[bool]:
        raise AssertionError("probed")

    monkeypatch.setattr(agreement, "_agree", refuse)
    relu = helper.make_node("Relu", ["x"], ["y"])
    half = helper.make_node("Conv", ["h", "w"], ["z"], kernel_shape=[1, 1], pads=WRONG_PADS)
    weight = numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float16), "w")
    graph = helper.make_graph(
        [relu, half], "others",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("h", TensorProto.FLOAT16, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT16, None)],
        [weight],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    loaded = load_graph(model, simplify_graph=False)
    assert all(agreement.agrees_in_float(node, loaded, None) for node in loaded.nodes)
