"""Models as they ship: symbolic dims, ``--input-shape`` by input or by dim name, folded
``If`` nodes, frozen inputs, and the peers of a tune fed what import froze."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import autopart
from autopart.errors import ModelError
from autopart.ir.feeds import random_inputs
from autopart.ir.input_shapes import declared_dims
from autopart.ir.observe import dynamic_values
from autopart.runtime.executor import Executor
from autopart.targets.onnxruntime.peer import onnxruntime_alone
from autopart.targets.openvino.library import HAVE_OPENVINO
from autopart.targets.openvino.peer import openvino_alone
from autopart.targets.peer import PeerInputs
from tests.conftest import make_model, max_relative_error, run_onnxruntime
from tests.test_errors import assert_one_line_error, invoke
from tests.test_profile import FAST

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))


def angle_classifier() -> onnx.ModelProto:
    """PaddleOCR's classifier head in small: x[-1, 3, ?, ?] (paddle2onnx's dims) -> Conv."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", FLOAT, [-1, 3, "?", "?"])
    y = helper.make_tensor_value_info("y", FLOAT, [-1, 4, "?", "?"])
    conv = helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])
    relu = helper.make_node("Relu", ["c"], ["y"])
    return make_model(helper.make_graph([conv, relu], "cls", [x], [y], [weight]), 13)


def named_dims_model() -> onnx.ModelProto:
    """x[batch, 3, h, w] and bias[batch, 1, 1, 1]: Conv(x) + bias."""
    model = angle_classifier()
    graph = model.graph
    del graph.input[:], graph.output[:]
    graph.input.extend(
        [
            helper.make_tensor_value_info("x", FLOAT, ["batch", 3, "h", "w"]),
            helper.make_tensor_value_info("bias", FLOAT, ["batch", 1, 1, 1]),
        ]
    )
    graph.output.append(helper.make_tensor_value_info("z", FLOAT, ["batch", 4, "h", "w"]))
    graph.node.append(helper.make_node("Add", ["y", "bias"], ["z"]))
    return model


def _branch(name: str, nodes: list[onnx.NodeProto], outputs: list[str], **inits: np.ndarray):
    return helper.make_graph(
        nodes,
        name,
        [],
        [helper.make_tensor_value_info(o, FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )


def shape_if_model(nested: bool = False) -> onnx.ModelProto:
    """TorchScript's guard: If(Equal(Gather(Shape(x), 0), 1)), branches of other shapes.

    The then branch scales x by an initializer and yields another initializer as its second
    output; the else branch sums over the batch. With ``nested``, the then branch
    holds another If on ``Shape(x)[1] > 2`` whose branches read the outer branch's values.
    """
    x = helper.make_tensor_value_info("x", FLOAT, ["batch", "n"])
    outs = [helper.make_tensor_value_info(o, FLOAT, ["rows", "n"]) for o in ("y", "z")]
    guard = [
        helper.make_node("Shape", ["x"], ["shape"]),
        _const("zero", np.array(0, np.int64)),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        _const("one", np.array(1, np.int64)),
        helper.make_node("Equal", ["batch", "one"], ["cond"]),
    ]
    then_nodes = [helper.make_node("Mul", ["x", "scale"], ["scaled"])]
    then_out = "scaled"
    if nested:
        then_nodes += [
            helper.make_node("Shape", ["x"], ["inner_shape"]),
            _const("idx", np.array(1, np.int64)),
            helper.make_node("Gather", ["inner_shape", "idx"], ["width"], axis=0),
            _const("two", np.array(2, np.int64)),
            helper.make_node("Greater", ["width", "two"], ["wide"]),
            helper.make_node(
                "If",
                ["wide"],
                ["picked"],
                then_branch=_branch("wide", [helper.make_node("Tanh", ["scaled"], ["t"])], ["t"]),
                else_branch=_branch(
                    "narrow", [helper.make_node("Sigmoid", ["scaled"], ["s"])], ["s"]
                ),
            ),
        ]
        then_out = "picked"
    then = _branch(
        "one", then_nodes, [then_out, "offset"], scale=np.float32([2.0]), offset=np.float32([[0.5]])
    )
    otherwise = _branch(
        "many",
        [
            helper.make_node("ReduceSum", ["x"], ["summed"], keepdims=1, axes=[0]),
            helper.make_node("Neg", ["summed"], ["negated"]),
        ],
        ["summed", "negated"],
    )
    node = helper.make_node("If", ["cond"], ["y", "z"], then_branch=then, else_branch=otherwise)
    return make_model(helper.make_graph([*guard, node], "guarded", [x], outs), 11)


def sample_rate_model() -> onnx.ModelProto:
    """silero-vad's dispatch: If(Equal(sr, 16000)) on a scalar int64 input ``sr``."""
    inputs = [
        helper.make_tensor_value_info("x", FLOAT, [1, "n"]),
        helper.make_tensor_value_info("sr", INT64, []),
    ]
    outs = [helper.make_tensor_value_info("y", FLOAT, [1, "m"])]
    then = _branch("16k", [helper.make_node("Mul", ["x", "x"], ["sq"])], ["sq"])
    slow = [helper.make_node("ReduceMean", ["x"], ["mean"], keepdims=1, axes=[1])]
    nodes = [
        _const("rate", np.array(16000, np.int64)),
        helper.make_node("Equal", ["sr", "rate"], ["is16k"]),
        helper.make_node(
            "If", ["is16k"], ["y"], then_branch=then, else_branch=_branch("8k", slow, ["mean"])
        ),
    ]
    return make_model(helper.make_graph(nodes, "vad", inputs, outs), 11)


def _nonzero_count(x: str, out: str) -> list[onnx.NodeProto]:
    """``out`` = how many entries of ``x`` are not zero, through NonZero (a dynamic shape)."""
    return [
        helper.make_node("NonZero", [x], [f"{out}_at"]),
        helper.make_node("Cast", [f"{out}_at"], [f"{out}_ones"], to=FLOAT),
        helper.make_node("ReduceSum", [f"{out}_ones"], [out], keepdims=0),
    ]


def dynamic_branch_model(kind: str) -> onnx.ModelProto:
    """``y = If(Size(x) == 4)``, a scalar either way; values inside the then branch are dynamic.

    The condition folds once x's shape is known; the else branch is ReduceMax(x). The then
    branch, by ``kind``: ``nonzero`` counts x's non-zeros through NonZero; ``data_if`` sums
    an inner If on ``ReduceSum(x) > 0`` that yields x or x[:2]; ``guarded`` negates an inner
    If on ``Size(x) > 2`` (constant too) whose then branch is the NonZero count.
    """
    x = helper.make_tensor_value_info("x", FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", FLOAT, [])
    guard = [
        helper.make_node("Size", ["x"], ["size"]),
        _const("four", np.array(4, np.int64)),
        helper.make_node("Equal", ["size", "four"], ["cond"]),
    ]
    if kind == "nonzero":
        then_nodes = _nonzero_count("x", "t")
    elif kind == "data_if":
        whole = _branch("whole", [helper.make_node("Identity", ["x"], ["all"])], ["all"])
        bounds = [_const(k, np.array([v], np.int64)) for k, v in (("lo", 0), ("hi", 2))]
        head = [*bounds, helper.make_node("Slice", ["x", "lo", "hi"], ["head"])]
        then_nodes = [
            helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
            _const("zero", np.array(0, np.float32)),
            helper.make_node("Greater", ["total", "zero"], ["positive"]),
            helper.make_node(
                "If",
                ["positive"],
                ["picked"],
                then_branch=whole,
                else_branch=_branch("head", head, ["head"]),
            ),
            helper.make_node("ReduceSum", ["picked"], ["t"], keepdims=0),
        ]
    else:
        count = _branch("count", _nonzero_count("x", "c"), ["c"])
        first = _branch("first", [helper.make_node("ReduceMin", ["x"], ["m"], keepdims=0)], ["m"])
        then_nodes = [
            helper.make_node("Size", ["x"], ["inner_size"]),
            _const("two", np.array(2, np.int64)),
            helper.make_node("Greater", ["inner_size", "two"], ["long"]),
            helper.make_node("If", ["long"], ["inner"], then_branch=count, else_branch=first),
            helper.make_node("Neg", ["inner"], ["t"]),
        ]
    most = _branch("most", [helper.make_node("ReduceMax", ["x"], ["most"], keepdims=0)], ["most"])
    node = helper.make_node(
        "If", ["cond"], ["y"], then_branch=_branch("four", then_nodes, ["t"]), else_branch=most
    )
    return make_model(helper.make_graph([*guard, node], "dynamic", [x], [y]))


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def _check_against_onnxruntime(
    model: onnx.ModelProto, graph: autopart.Graph, extra: dict[str, np.ndarray] | None = None
) -> None:
    feeds = random_inputs(graph, 0)
    ours = Executor(graph).run(feeds).outputs
    theirs = run_onnxruntime(model, {**feeds, **(extra or {})})
    for name, expected in zip(graph.outputs, theirs, strict=True):
        assert ours[name].shape == expected.shape, name
        assert max_relative_error(expected, ours[name]) < 1e-5, name


# -- symbolic dims and --input-shape -----------------------------------------------------------


def test_declared_dims_tell_symbolic_dims_from_sizes_and_keep_zero() -> None:
    info = helper.make_tensor_value_info("x", FLOAT, [0, "batch", -1, None, "?", 7])
    assert declared_dims(info) == [0, "batch", None, None, None, 7]
    assert declared_dims(helper.make_tensor_value_info("s", FLOAT, None)) is None


def test_an_angle_classifier_with_minus_one_and_unnamed_dims_loads() -> None:
    model = angle_classifier()
    assert autopart.load(model).value("x").shape == (1, 3, 1, 1)
    graph = autopart.load(model, {"x": [1, 3, 48, 192]})
    assert graph.value("x").shape == (1, 3, 48, 192)
    assert graph.value("y").shape == (1, 4, 48, 192)
    _check_against_onnxruntime(model, graph)
    assert autopart.load(model, {"x": [2, 3, 8, 0]}).value("y").shape == (2, 4, 8, 0)


def test_a_named_dim_is_fixed_in_every_input_that_has_it() -> None:
    model = named_dims_model()
    graph = autopart.load(model, {"batch": 2, "h": 48})
    assert graph.value("x").shape == (2, 3, 48, 1) and graph.value("bias").shape == (2, 1, 1, 1)
    graph = autopart.load(model, {"h": [48], "w": 192})
    assert graph.value("x").shape == (1, 3, 48, 192)
    _check_against_onnxruntime(model, graph)
    # a full shape fixes the dims it names in the other inputs too
    graph = autopart.load(model, {"x": [3, 3, 4, 5]})
    assert graph.value("bias").shape == (3, 1, 1, 1)


def test_an_input_name_wins_over_a_dim_name() -> None:
    x = helper.make_tensor_value_info("n", FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", FLOAT, ["n"])
    model = make_model(helper.make_graph([helper.make_node("Neg", ["n"], ["y"])], "g", [x], [y]))
    assert autopart.load(model, {"n": [5]}).value("n").shape == (5,)


@pytest.mark.parametrize(
    ("shapes", "fragments"),
    [
        (
            {"height": 4},
            ["'height'", "inputs: ['x', 'bias']", "dimension names: ['batch', 'h', 'w']"],
        ),
        ({"x": [1, 3, 4]}, ["input 'x' has rank 4", "[1, 3, 4]"]),
        ({"x": [1, 2, 4, 4]}, ["input 'x' has fixed shape", "[1, 2, 4, 4]"]),
        ({"batch": 2, "x": [3, 3, 4, 4]}, ["dimension 'batch' is 2", "input 'x'"]),
        ({"h": [4, 5]}, ["dimension 'h' takes one size"]),
        ({"x": [1, -3, 4, 4]}, ["must be a list of dims >= 0"]),
    ],
)
def test_wrong_input_shapes_are_one_model_error(
    shapes: dict[str, object], fragments: list[str]
) -> None:
    with pytest.raises(ModelError) as caught:
        autopart.load(named_dims_model(), shapes)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


# -- If folding --------------------------------------------------------------------------------


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("shape", [(1, 3), (1, 2), (4, 3)])
def test_an_if_on_a_shape_folds_to_its_taken_branch(nested: bool, shape: tuple[int, int]) -> None:
    model = shape_if_model(nested)
    graph = autopart.load(model, {"x": list(shape)})
    assert not [node for node in graph.nodes if node.op_type == "If"]
    assert all(None not in (graph.value(name).shape or (None,)) for name in graph.outputs)
    _check_against_onnxruntime(model, graph)


@settings(max_examples=12, deadline=None)
@given(batch=st.integers(1, 3), width=st.integers(1, 4), nested=st.booleans())
def test_folded_ifs_match_onnxruntime_for_any_shape(batch: int, width: int, nested: bool) -> None:
    model = shape_if_model(nested)
    graph = autopart.load(model, {"batch": batch, "n": width})
    assert all(node.op_type != "If" for node in graph.nodes)
    _check_against_onnxruntime(model, graph)


def test_an_if_folds_for_every_codegen_a_plan_uses() -> None:
    model = shape_if_model(nested=True)
    plan, graph = autopart.api.make_plan(model, ["re:.*=cpu@onnxruntime"], input_shapes={"n": 3})
    feeds = random_inputs(graph, 0)
    result = autopart.api.run_plan(plan, graph, feeds)
    expected = run_onnxruntime(model, feeds)
    for name, array in zip(graph.outputs, expected, strict=True):
        assert max_relative_error(array, result.outputs[name]) < 1e-5


@pytest.mark.parametrize("kind", ["nonzero", "data_if", "guarded"])
def test_an_if_whose_taken_branch_has_dynamic_shapes_stays_a_node(kind: str) -> None:
    """Folded, the branch's dynamic values would need static shapes: the If is kept instead."""
    model = dynamic_branch_model(kind)
    graph = autopart.load(model, {"n": 4})
    assert [node.op_type for node in graph.nodes].count("If") == 1
    outer_folded = graph.value("y").producer.op_type == "Neg"  # type: ignore[union-attr]
    assert outer_folded == (kind == "guarded")  # only the inner If's branch is dynamic
    _check_against_onnxruntime(model, graph)
    other = autopart.load(model, {"n": 3})
    assert [node.op_type for node in other.nodes] == ["ReduceMax"]  # the other branch folds


def test_a_kept_if_with_outputs_of_data_dependent_size_runs_with_them_dynamic() -> None:
    """Its taken branch holds a NonZero: its output's size is observed, then free."""
    x = helper.make_tensor_value_info("x", FLOAT, [4])
    z = helper.make_tensor_value_info("z", INT64, [])
    nonzero = [helper.make_node("NonZero", ["x"], ["at"])]
    shape = [
        helper.make_node("Shape", ["x"], ["shape"]),
        _const("axis", np.array([0], np.int64)),
        helper.make_node("Unsqueeze", ["shape", "axis"], ["row"]),
    ]
    branches = {
        f"{key}_branch": helper.make_graph(
            nodes, key, [], [helper.make_tensor_value_info(out, INT64, None)]
        )
        for key, nodes, out in (("then", nonzero, "at"), ("else", shape, "row"))
    }
    nodes = [
        helper.make_node("Size", ["x"], ["size"]),
        _const("four", np.array(4, np.int64)),
        helper.make_node("Equal", ["size", "four"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], **branches),
        helper.make_node("ReduceSum", ["y"], ["z"], keepdims=0),
    ]
    model = make_model(helper.make_graph(nodes, "nonzero", [x], [z]))
    graph = autopart.load(model)
    assert "y" in dynamic_values(graph)
    _check_against_onnxruntime(model, graph)


# -- freezing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [16000, 8000])
def test_a_frozen_input_folds_the_if_it_decides(rate: int) -> None:
    model = sample_rate_model()
    graph = autopart.load(model, {"n": 6}, freeze={"sr": rate})
    assert graph.inputs == ["x"] and graph.meta["frozen"]["sr"].dtype == np.int64
    assert all(node.op_type != "If" for node in graph.nodes)
    _check_against_onnxruntime(model, graph, {"sr": np.array(rate, np.int64)})


@pytest.mark.parametrize("rate", [16000, 8000])
def test_an_if_on_an_unfrozen_input_is_kept_and_decided_at_run_time(rate: int) -> None:
    """Unfrozen, the If stays a node: its branch is chosen by the value fed each run."""
    model = sample_rate_model()
    graph = autopart.load(model, {"n": 6})
    assert any(node.op_type == "If" for node in graph.nodes) and "sr" in graph.inputs
    feeds = {**random_inputs(graph, 0), "sr": np.array(rate, np.int64)}
    ours = Executor(graph).run(feeds).outputs
    theirs = run_onnxruntime(model, feeds)
    for name, expected in zip(graph.outputs, theirs, strict=True):
        assert ours[name].shape == expected.shape
        assert max_relative_error(expected, ours[name]) < 1e-5


@pytest.mark.parametrize(
    ("freeze", "fragment"),
    [
        ({"rate": 16000}, "cannot freeze 'rate': it is not an input; inputs: ['x', 'sr']"),
        ({"sr": 1.5}, "it is not int64 exactly"),
        ({"sr": [1, 2]}, "of shape [] to a value of shape [2]"),
        ({"sr": "fast"}, "not numbers"),
    ],
)
def test_a_bad_freeze_is_one_model_error(freeze: dict[str, object], fragment: str) -> None:
    with pytest.raises(ModelError) as caught:
        autopart.load(sample_rate_model(), freeze=freeze)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_a_frozen_value_takes_the_inputs_rank_and_fixes_its_dims() -> None:
    x = helper.make_tensor_value_info("x", FLOAT, ["batch", 2])
    k = helper.make_tensor_value_info("k", FLOAT, ["batch", 2])
    y = helper.make_tensor_value_info("y", FLOAT, ["batch", 2])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["y"])], "g", [x, k], [y])
    loaded = autopart.load(make_model(graph), freeze={"k": [[1, 2], [3, 4], [5, 6]]})
    assert loaded.inputs == ["x"] and loaded.value("x").shape == (3, 2)
    one = helper.make_tensor_value_info("k", FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["y"])], "g", [x, one], [y])
    assert autopart.load(make_model(graph), freeze={"k": 2}).value("k").const.shape == (1,)


# -- the command line, plans and peers ---------------------------------------------------------


def test_run_fixes_a_named_dim_and_freezes_an_input(tmp_path: Path) -> None:
    path = _save(shape_if_model(nested=True), tmp_path / "guarded.onnx")
    code, output = invoke("run", str(path), "--input-shape", "batch=1", "--repeat", "1", "--check")
    assert code == 0, output
    assert "(ok)" in output
    vad = _save(sample_rate_model(), tmp_path / "vad.onnx")
    plan_path = tmp_path / "plan.json"
    code, output = invoke(
        "run", str(vad), "--freeze", "sr=8000", "--input-shape", "n=5", "--repeat", "1",
        "--save-plan", str(plan_path),
    )  # fmt: skip
    assert code == 0, output
    model = json.loads(plan_path.read_text())["model"]
    assert model["frozen"] == {"sr": 8000} and model["input_shapes"] == {"x": [1, 5]}
    code, output = invoke("run", str(plan_path), "--repeat", "1", "--check")
    assert code == 0 and "(ok)" in output, output


def test_info_takes_both_kinds_of_input_shape_and_freeze(tmp_path: Path) -> None:
    path = _save(named_dims_model(), tmp_path / "named.onnx")
    code, output = invoke("info", str(path), "--input-shape", "h=48", "--input-shape", "w=192")
    assert code == 0, output
    assert "input x: float32[1, 3, 48, 192]" in output
    vad = _save(sample_rate_model(), tmp_path / "vad.onnx")
    code, output = invoke("info", str(vad), "--freeze", "sr=16000")
    assert code == 0 and "input sr" not in output and "Mul" in output, output


def test_command_line_mistakes_are_one_line_errors(tmp_path: Path) -> None:
    path = _save(named_dims_model(), tmp_path / "named.onnx")
    assert_one_line_error(
        *invoke("run", str(path), "--input-shape", "height=4"),
        "neither an input nor a dimension name", "['batch', 'h', 'w']",
    )  # fmt: skip
    assert_one_line_error(*invoke("info", str(path), "--input-shape", "x=1,3"), "rank 4")
    assert_one_line_error(
        *invoke("info", str(path), "--freeze", "sr=1"), "cannot freeze 'sr'", "['x', 'bias']"
    )
    assert_one_line_error(*invoke("info", str(path), "--freeze", "sr"), "--freeze")
    assert_one_line_error(*invoke("bench", str(path), "--input-shape", "height=4"), "height")


def pyramid_model() -> onnx.ModelProto:
    """x halved, doubled back and joined to itself: sizes 1 cannot be halved and joined."""
    scales = numpy_helper.from_array(np.float32([1, 1, 2, 2]), "scales")
    nodes = [
        helper.make_node("MaxPool", ["x"], ["half"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Resize", ["half", "", "scales"], ["double"], mode="nearest"),
        helper.make_node("Concat", ["double", "x"], ["both"], axis=1),
        helper.make_node("Relu", ["both"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", FLOAT, [1, 1, "h", "w"])
    y = helper.make_tensor_value_info("y", FLOAT, [1, 2, "h", "w"])
    return make_model(helper.make_graph(nodes, "pyramid", [x], [y], [scales]))


def test_dims_taken_as_1_that_the_model_refuses_are_named_in_one_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"symbolic dims h, w were taken as 1.*--input-shape"):
        autopart.load(pyramid_model())
    graph = autopart.load(pyramid_model(), {"h": 4, "w": 6})
    assert graph.value("y").shape == (1, 2, 4, 6)
    _check_against_onnxruntime(pyramid_model(), graph)
    path = _save(pyramid_model(), tmp_path / "pyramid.onnx")
    assert_one_line_error(*invoke("tune", str(path)), "h, w were taken as 1")


@pytest.mark.slow
def test_bench_takes_input_shapes_and_feeds_the_peers_the_frozen_value(tmp_path: Path) -> None:
    from autopart import api

    vad = _save(sample_rate_model(), tmp_path / "vad.onnx")
    profiles, csv = tmp_path / "profiles", tmp_path / "bench.csv"
    target = "cpu@onnxruntime"
    api.profile(str(vad), [target], profiles, settings=FAST, input_shapes={"n": 4},
                freeze={"sr": 8000})  # fmt: skip
    code, output = invoke(
        "bench", str(vad), "--targets", target, "--profiles", str(profiles), "--rounds", "1",
        "--csv", str(csv), "--search-dir", str(tmp_path / "search"),
        "--input-shape", "n=4", "--freeze", "sr=8000",
    )  # fmt: skip
    assert code == 0, output
    import pandas as pd

    table = pd.read_csv(csv).set_index("plan")
    peer = table.loc["onnxruntime alone"]
    assert peer["runs"] > 0 and peer["max_rel_error"] < 1e-5  # fed sr=8000, as frozen
    assert table.loc[f"single:{target}", "max_rel_error"] < 1e-5


@pytest.mark.parametrize("peer", ["onnxruntime", "openvino"])
def test_a_peer_runs_the_original_model_fed_the_frozen_values(tmp_path: Path, peer: str) -> None:
    if peer == "openvino" and not HAVE_OPENVINO:
        pytest.skip("OpenVINO is not installed")
    vad = _save(sample_rate_model(), tmp_path / "vad.onnx")
    graph = autopart.load(str(vad), {"n": 7}, freeze={"sr": 16000})
    make = onnxruntime_alone if peer == "onnxruntime" else openvino_alone
    runner = make(str(vad), inputs=PeerInputs.of(graph))
    feeds = random_inputs(graph, 1)
    outputs = runner(feeds)
    expected = Executor(graph).run(feeds).outputs
    assert outputs["y"].shape == (1, 7)
    assert max_relative_error(expected["y"], outputs["y"]) < 1e-5


def test_a_negative_size_computed_from_data_is_still_refused() -> None:
    shape = numpy_helper.from_array(np.array([2, -3], np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"])]
    nodes.append(helper.make_node("Add", ["big", "x"], ["y"]))
    x = helper.make_tensor_value_info("x", FLOAT, [1])
    y = helper.make_tensor_value_info("y", FLOAT, [-1, -1])  # declared -1: unknown, not wrong
    model = make_model(helper.make_graph(nodes, "neg", [x], [y], [shape]))
    with pytest.raises(ModelError, match=r"ConstantOfShape node .* negative size: \[2, -3\]"):
        autopart.load(model)


def test_a_declared_symbolic_output_shape_does_not_pin_shape_inference(tmp_path: Path) -> None:
    """ddddocr's CRNN declares its output [1, seqlen]; the real output is [32, 1, 8210]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, "width"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seqlen"])
    shape = numpy_helper.from_array(np.array([-1, 1, 4], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])], "g", [x], [y], [shape]
    )
    path = _save(make_model(graph), tmp_path / "declared.onnx")
    loaded = autopart.load(str(path), input_shapes={"width": [8]})
    assert loaded.value("y").shape == (8, 1, 4)
    code, output = invoke("info", str(path), "--input-shape", "width=8")
    assert code == 0 and "Reshape" in output, output
