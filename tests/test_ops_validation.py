"""Opsets, attribute validation and new kernels of the numpy codegen, against onnx's reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from autopart.errors import AutopartError, ModelError, UnsupportedOpError
from autopart.ir import load_graph
from autopart.ops import refusal
from autopart.runtime import Executor


def _model(
    node: onnx.NodeProto, inputs: dict[str, np.ndarray], opset: int, typed: bool = False
) -> onnx.ModelProto:
    infos = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in inputs.items()
    ]
    outputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, next(iter(inputs.values())).shape)
        if typed
        else onnx.ValueInfoProto(name=name)
        for name in node.output
    ]
    graph = helper.make_graph([node], "case", infos, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if typed:
        return model
    return onnx.shape_inference.infer_shapes(model)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    graph = load_graph(model, {name: array.shape for name, array in feeds.items()})
    outputs = Executor(graph).run(feeds).outputs
    return [outputs[name] for name in graph.outputs]


def _check_against_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    want = ReferenceEvaluator(model).run(None, feeds)
    got = _run(model, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_every_opset_onnx_defines_is_accepted() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    newest = onnx.defs.onnx_opset_version()
    node = helper.make_node("Relu", ["x"], ["y"])
    (y,) = _run(_model(node, {"x": x - 2}, newest), {"x": x - 2})
    np.testing.assert_array_equal(y, np.maximum(x - 2, 0))
    with pytest.raises(ModelError, match=f"opset {newest + 1} is not supported"):
        load_graph(_model(node, {"x": x}, newest + 1, typed=True))


def test_unimplemented_attribute_value_names_node_attribute_and_value() -> None:
    x = np.ones((1, 2, 2, 2), np.float32)
    params = {name: np.ones(2, np.float32) for name in ("s", "b", "m", "v")}
    node = helper.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn", training_mode=1
    )
    feeds = {"x": x, **params}
    with pytest.raises(UnsupportedOpError) as error:
        _run(_model(node, feeds, 15, typed=True), feeds)
    message = str(error.value)
    assert "\n" not in message
    assert "bn" in message and "training_mode=1" in message


def test_unknown_attribute_is_refused_not_ignored() -> None:
    assert refusal("Relu", "", 17, {}, 1) is None
    assert refusal("Relu", "", 17, {"frobnicate": 3}, 1) == (
        "attribute frobnicate=3 is not implemented"
    )


def test_unimplemented_value_of_a_valid_attribute_is_refused() -> None:
    x = np.ones((2, 3), np.float32)
    node = helper.make_node("Cast", ["x"], ["y"], name="c", to=TensorProto.FLOAT, round_mode="down")
    with pytest.raises(UnsupportedOpError, match="round_mode='down'"):
        _run(_model(node, {"x": x}, 25), {"x": x})


def test_dropout_in_training_is_refused() -> None:
    x = np.ones((2, 3), np.float32)
    ratio = np.array(0.5, np.float32)
    training = np.array(True)
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y"])
    feeds = {"x": x, "r": ratio, "t": training}
    with pytest.raises(AutopartError, match="training mode"):
        _run(_model(node, feeds, 13), feeds)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_mode_inverts_depth_to_space(mode: str) -> None:
    x = np.random.default_rng(0).standard_normal((1, 8, 3, 2)).astype(np.float32)
    d2s = helper.make_node("DepthToSpace", ["x"], ["s"], blocksize=2, mode=mode)
    s2d = helper.make_node("SpaceToDepth", ["s"], ["y"], blocksize=2, mode=mode)
    info = helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)
    graph = helper.make_graph([d2s, s2d], "g", [info], [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 28)])
    (y,) = _run(onnx.shape_inference.infer_shapes(model), {"x": x})
    np.testing.assert_array_equal(y, x)


def test_empty_set_reductions_follow_onnx() -> None:
    data = np.zeros((2, 0, 4), np.float32)
    for op, fill in (("ReduceMax", -np.inf), ("ReduceMin", np.inf)):
        node = helper.make_node(op, ["x"], ["y"], axes=[1], keepdims=1)
        (y,) = _run(_model(node, {"x": data}, 13), {"x": data})
        np.testing.assert_array_equal(y, np.full((2, 1, 4), fill, np.float32))


@settings(max_examples=40, deadline=None)
@given(
    mode=st.sampled_from(["nearest", "linear", "cubic"]),
    transform=st.sampled_from(
        ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]
    ),
    nearest_mode=st.sampled_from(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]),
    out_size=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    by_sizes=st.booleans(),
    antialias=st.booleans(),
)
def test_resize_matches_onnx_reference(
    mode: str,
    transform: str,
    nearest_mode: str,
    out_size: tuple[int, int],
    by_sizes: bool,
    antialias: bool,
) -> None:
    x = np.random.default_rng(1).standard_normal((1, 2, 4, 5)).astype(np.float32)
    attrs = {"mode": mode, "coordinate_transformation_mode": transform}
    attrs |= {"nearest_mode": nearest_mode} if mode == "nearest" else {"antialias": int(antialias)}
    if by_sizes:
        extra = {"sizes": np.array([1, 2, *out_size], np.int64)}
        node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
    else:
        scales = [out_size[0] / 4, out_size[1] / 5]
        extra = {"scales": np.array([1, 1, *scales], np.float32)}
        node = helper.make_node("Resize", ["x", "", "scales"], ["y"], **attrs)
    feeds = {"x": x, **extra}
    _check_against_reference(_model(node, feeds, 19), feeds)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_matches_onnx_reference(reduction: str) -> None:
    rng = np.random.default_rng(2)
    data = rng.standard_normal((3, 4)).astype(np.float32)
    indices = rng.integers(-4, 4, (3, 2)).astype(np.int64)
    if reduction == "none":
        indices = np.array([[0, 1], [2, 3], [-1, 0]], np.int64)
    updates = rng.standard_normal((3, 2)).astype(np.float32)
    node = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1, reduction=reduction)
    feeds = {"d": data, "i": indices, "u": updates}
    _check_against_reference(_model(node, feeds, 18), feeds)


@pytest.mark.parametrize("largest", [0, 1])
def test_top_k_matches_onnx_reference(largest: int) -> None:
    x = np.random.default_rng(3).integers(0, 5, (3, 7)).astype(np.float32)
    k = np.array([3], np.int64)
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest)
    feeds = {"x": x, "k": k}
    _check_against_reference(_model(node, feeds, 11), feeds)


def _chain(nodes: list[onnx.NodeProto], x: np.ndarray, constants: dict, opset: int):
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)],
        initializer=[onnx.numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(model)


def test_training_dropout_inside_a_graph_is_not_removed_silently() -> None:
    x = np.ones((2, 3), np.float32)
    nodes = [
        helper.make_node("Dropout", ["x", "ratio", "train"], ["d"]),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    constants = {"ratio": np.array(0.5, np.float32), "train": np.array(True)}
    with pytest.raises(AutopartError, match="training"):
        _run(_chain(nodes, x, constants, 13), {"x": x})


def test_training_batchnorm_after_conv_is_not_folded() -> None:
    x = np.ones((1, 2, 3, 3), np.float32)
    params = {n: np.ones(2, np.float32) for n in ("s", "b", "m", "v")}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"], training_mode=1),
    ]
    constants = {"w": np.ones((2, 2, 1, 1), np.float32), **params}
    with pytest.raises(UnsupportedOpError, match="training_mode=1"):
        _run(_chain(nodes, x, constants, 15), {"x": x})


def _unet_like(opset: int) -> onnx.ModelProto:
    """Conv, MaxPool, ConvTranspose with output_padding, bilinear and nearest Resize, Concat."""
    rng = np.random.default_rng(5)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    constants = {
        "w1": weight(4, 3, 3, 3),
        "w2": weight(8, 4, 3, 3),
        "wt": weight(8, 4, 3, 3),
        "scales": np.array([1, 1, 2, 2], np.float32),
        "w3": weight(2, 8, 1, 1),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node(
            "ConvTranspose",
            ["c2", "wt"],
            ["up1"],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
            output_padding=[1, 1],
        ),
        helper.make_node(
            "Resize",
            ["p1", "", "scales"],
            ["up2"],
            mode="linear",
            coordinate_transformation_mode="pytorch_half_pixel",
        ),
        helper.make_node(
            "Resize",
            ["c2", "", "scales"],
            ["up3"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        helper.make_node("Concat", ["up1", "up2"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "w3"], ["y"]),
        helper.make_node("ReduceMean", ["up3"], ["m"], keepdims=1),
    ]
    graph = helper.make_graph(
        nodes,
        "unet_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("m", TensorProto.FLOAT, None),
        ],
        initializer=[onnx.numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("opset", [13, 20])
def test_unet_like_model_matches_onnxruntime(opset: int) -> None:
    from conftest import run_onnxruntime

    model = _unet_like(opset)
    x = np.random.default_rng(6).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = run_onnxruntime(model, {"x": x})
    got = _run(model, {"x": x})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("is_test", "refused"), [(None, True), (0, True), (1, False)])
def test_legacy_batchnorm_runs_only_in_test_mode(is_test: int | None, refused: bool) -> None:
    x = np.random.default_rng(7).standard_normal((1, 2, 3, 3)).astype(np.float32)
    params = {n: np.full(2, 0.5, np.float32) for n in ("s", "b", "m", "v")}
    attrs = {} if is_test is None else {"is_test": is_test}
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("BatchNormalization", ["r", "s", "b", "m", "v"], ["y"], **attrs),
    ]
    model = _chain(nodes, x, params, 6)
    if refused:
        with pytest.raises(UnsupportedOpError, match="is_test"):
            _run(model, {"x": x})
    else:
        (y,) = _run(model, {"x": x})
        want = (np.maximum(x, 0) - 0.5) / np.sqrt(0.5 + 1e-5) * 0.5 + 0.5
        np.testing.assert_allclose(y, want, rtol=1e-5)


def test_float16_layer_normalization_stashes_in_float32_like_onnxruntime() -> None:
    from conftest import make_model, run_onnxruntime

    rng = np.random.default_rng(8)
    feeds = {
        "x": (rng.standard_normal((4, 16)) * 3 + 1).astype(np.float16),
        "s": rng.standard_normal(16).astype(np.float16),
        "b": rng.standard_normal(16).astype(np.float16),
    }
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)
    infos = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT16, a.shape) for n, a in feeds.items()
    ]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4, 16])
    model = make_model(helper.make_graph([node], "ln", infos, [out]), opset=17)
    (want,) = run_onnxruntime(model, feeds)
    (got,) = _run(model, feeds)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=2e-3, rtol=0)
