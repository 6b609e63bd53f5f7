"""Element types against the ONNX schemas at import, and numpy's errors while running.

A node fed a type its schema forbids is one ``error:`` line at import (the check agrees
with onnx's own full check, and onnxruntime refuses every model it refuses); legal models,
control flow, empty optional inputs and heterogeneous variadics still import and match
onnxruntime. An error numpy raises inside a kernel is one line naming the node.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from autopart.errors import ExecutionError, ModelError
from autopart.ir import Graph, Node, Value, load_graph
from autopart.ir.type_check import check_declared_types, check_types
from autopart.runtime import Executor
from autopart.targets.numpy.codegen import NumpyStep, NumpySubgraph
from tests.conftest import make_model, run_onnxruntime
from tests.test_control_flow import control_flow_model
from tests.test_errors import assert_one_line_error, invoke

ort = pytest.importorskip("onnxruntime")

F, D, I32, I64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64
info = helper.make_tensor_value_info

# The model the fuzz test found: complex128 ``x`` into Relu, then Sigmoid.
FUZZ_CASE = (
    b'\x08\x0e:q\n\x19\n\x01x\x12\x08relu:out\x1a\x04relu"\x04Relu\n$\n\x08relu:out\x12\x01y'
    b'\x1a\x0crelu:sigmoid"\x07Sigmoid\x12\x04tinyZ\x13\n\x01x\x12\x0e\n\x0c\x08\x0f\x12\x08'
    b"\n\x02\x08\x02\n\x02\x08\x03b\x13\n\x01y\x12\x0e\n\x0c\x08\x01\x12\x08\n\x02\x08\x02"
    b"\n\x02\x08\x03B\x04\n\x00\x10\x11"
)


def _model(
    op: str,
    inputs: list[tuple[str, int]],
    output: int,
    opset: int = 17,
    out_shape: tuple[int, ...] = (2, 3),
    **attrs: object,
) -> onnx.ModelProto:
    """One ``op`` node named ``node`` over [2, 3] inputs ``(name, elem_type)``, output ``y``."""
    node = helper.make_node(op, [name for name, _ in inputs], ["y"], name="node", **attrs)
    graph = helper.make_graph(
        [node],
        "typed",
        [info(name, elem, [2, 3]) for name, elem in inputs],
        [info("y", output, list(out_shape))],
    )
    return make_model(graph, opset)


def _save(model: onnx.ModelProto, tmp_path: Path) -> str:
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    return str(path)


def _onnxruntime_refuses(model: onnx.ModelProto) -> bool:
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # onnxruntime's error types are not importable stably
        return True
    return False


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        tensor = value.type.tensor_type
        dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        shape = [d.dim_value for d in tensor.shape.dim]
        feeds[value.name] = (rng.standard_normal(shape) * 5).astype(dtype)
    return feeds


def _matches_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    graph = load_graph(model, {name: array.shape for name, array in feeds.items()})
    got = Executor(graph).run(feeds).outputs
    want = run_onnxruntime(model, feeds)
    names = [output.name for output in model.graph.output]
    for name, expected in zip(names, want, strict=True):
        assert got[name].dtype == expected.dtype, name
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_fuzzed_undefined_output_type_is_one_error_line(tmp_path: Path) -> None:
    path = tmp_path / "fuzz.onnx"
    path.write_bytes(FUZZ_CASE.replace(b"\x0c\x08\x01\x12", b"\x0c\x08\x1d\x12"))  # y: 29
    assert_one_line_error(
        *invoke("info", str(path)), "value 'y' has element type 29, which ONNX does not define"
    )


def test_the_fuzzed_complex_relu_is_one_error_line(tmp_path: Path) -> None:
    path = tmp_path / "fuzz.onnx"
    path.write_bytes(FUZZ_CASE)
    for command in (["run", "--repeat", "1"], ["info"]):
        assert_one_line_error(
            *invoke(*command, str(path)),
            "node 'relu' (Relu): input 'x' is complex128, but Relu-14 takes float, ",
            "bfloat16",
        )


@pytest.mark.parametrize(
    ("op", "elem", "opset", "label"),
    [
        ("Add", TensorProto.COMPLEX64, 17, "Add-14"),
        ("Mul", TensorProto.COMPLEX128, 17, "Mul-14"),
        ("Div", TensorProto.COMPLEX64, 13, "Div-13"),
        ("Add", TensorProto.STRING, 17, "Add-14"),
        ("Sub", TensorProto.STRING, 21, "Sub-14"),
        ("Add", TensorProto.BOOL, 17, "Add-14"),
        ("Relu", I32, 13, "Relu-13"),
        ("Relu", I64, 6, "Relu-6"),
    ],
)
def test_forbidden_input_types_are_refused_in_one_line(
    tmp_path: Path, op: str, elem: int, opset: int, label: str
) -> None:
    arity = 1 if op == "Relu" else 2
    model = _model(op, [("a", elem), ("b", elem)][:arity], elem, opset)
    name = TensorProto.DataType.Name(elem).lower()
    assert_one_line_error(
        *invoke("run", _save(model, tmp_path), "--repeat", "1"),
        f"node 'node' ({op}): input 'a' is {name}, but {label} takes ",
    )
    assert _onnxruntime_refuses(model)


def test_relu_takes_ints_from_opset_14() -> None:
    model = _model("Relu", [("a", I32)], I32, 14)
    _matches_onnxruntime(model, _feeds(model))


def test_legal_int32_add_imports_runs_and_matches_onnxruntime() -> None:
    model = _model("Add", [("a", I32), ("b", I32)], I32)
    _matches_onnxruntime(model, _feeds(model))


def test_a_declared_output_of_another_type_is_refused() -> None:
    model = _model("Relu", [("a", F)], I64)
    with pytest.raises(ModelError, match=r"output 'y' is int64, but Relu-14 needs one type T"):
        load_graph(model)
    assert _onnxruntime_refuses(model)


def test_variadic_sum_of_one_type_runs_and_of_mixed_types_is_refused() -> None:
    same = _model("Sum", [("a", D), ("b", D), ("c", D)], D)
    _matches_onnxruntime(same, _feeds(same))
    mixed = _model("Sum", [("a", F), ("b", D), ("c", F)], F)
    with pytest.raises(ModelError, match=r"input 'b' is double, but Sum-13 needs one type T .*'a'"):
        load_graph(mixed)
    assert _onnxruntime_refuses(mixed)


def test_variadic_concat_of_one_type_runs_and_of_mixed_types_is_refused() -> None:
    same = _model("Concat", [("a", I64), ("b", I64)], I64, out_shape=(4, 3), axis=0)
    _matches_onnxruntime(same, _feeds(same))
    mixed = _model("Concat", [("a", F), ("b", D)], F, out_shape=(4, 3), axis=0)
    with pytest.raises(ModelError, match=r"node 'node' \(Concat\): input 'b' is double"):
        load_graph(mixed)
    assert _onnxruntime_refuses(mixed)


@pytest.mark.parametrize("trip_count", [0, 3])
def test_control_flow_imports_and_matches_onnxruntime(trip_count: int) -> None:
    model = control_flow_model(trip_count)
    _matches_onnxruntime(model, _feeds(model))


def test_a_loop_carrying_values_of_different_types_imports() -> None:
    """Loop's carried values are a heterogeneous variadic: float and int64 side by side."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Add", ["f_in", "f_in"], ["f_out"]),
            helper.make_node("Add", ["n_in", "i"], ["n_out"]),
        ],
        "body",
        [info("i", I64, []), info("c_in", TensorProto.BOOL, []), info("f_in", F, [2, 3])],
        [info("c_out", TensorProto.BOOL, []), info("f_out", F, [2, 3]), info("n_out", I64, [])],
    )
    body.input.append(info("n_in", I64, []))
    loop = helper.make_node("Loop", ["trip", "", "x", "n0"], ["fx", "n"], body=body)
    graph = helper.make_graph(
        [loop],
        "loop",
        [info("x", F, [2, 3])],
        [info("fx", F, [2, 3]), info("n", I64, [])],
        initializer=[
            numpy_helper.from_array(np.array(4, np.int64), "trip"),
            numpy_helper.from_array(np.array(10, np.int64), "n0"),
        ],
    )
    model = make_model(graph, 17)
    _matches_onnxruntime(model, _feeds(model))


@pytest.mark.parametrize(
    ("op", "inputs", "constants", "attrs", "shape"),
    [
        ("Clip", ["x", "", "hi"], {"hi": np.array(0.5, np.float32)}, {}, [2, 3]),
        ("Clip", ["x", "lo"], {"lo": np.array(-0.5, np.float32)}, {}, [2, 3]),
        ("Pad", ["x", "pads", ""], {"pads": np.array([0, 1, 1, 0], np.int64)}, {}, [3, 4]),
        (
            "Resize",
            ["x", "", "scales"],
            {"scales": np.array([1.0, 2.0], np.float32)},
            {"mode": "nearest"},
            [2, 6],
        ),
    ],
    ids=["clip-no-min", "clip-no-max", "pad-no-value", "resize-no-roi"],
)
def test_empty_optional_inputs_import_and_match_onnxruntime(
    op: str,
    inputs: list[str],
    constants: dict[str, np.ndarray],
    attrs: dict[str, object],
    shape: list[int],
) -> None:
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], **attrs)],
        "optional",
        [info("x", F, [2, 3])],
        [info("y", F, shape)],
        initializer=[numpy_helper.from_array(value, name) for name, value in constants.items()],
    )
    model = make_model(graph, 18)
    _matches_onnxruntime(model, _feeds(model))


def test_ml_domain_nodes_are_checked_and_custom_domains_left_alone() -> None:
    node = helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", name="binarize")
    graph = helper.make_graph(
        [node], "ml", [info("x", TensorProto.STRING, [2])], [info("y", TensorProto.STRING, [2])]
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    )
    with pytest.raises(ModelError, match=r"\(Binarizer\): input 'x' is string, but ai.onnx.ml::"):
        load_graph(model)
    values = {name: Value(name, (2,), np.dtype(np.complex128)) for name in ("x", "y")}
    custom = Node("custom", "Relu", ["x"], ["y"], domain="com.example")
    check_types(Graph("custom", [custom], values, ["x"], ["y"], {"": 17, "com.example": 1}))


TYPES = sorted(t for t in TensorProto.DataType.values() if t)
# op: arity (for Concat the output has twice the rows).
OPS = {
    "Relu": 1,
    "Sigmoid": 1,
    "Abs": 1,
    "Neg": 1,
    "Sqrt": 1,
    "Not": 1,
    "Sign": 1,
    "Add": 2,
    "Mul": 2,
    "Div": 2,
    "Max": 2,
    "And": 2,
    "Pow": 2,
    "BitwiseAnd": 2,
    "Sum": 3,
    "Concat": 2,
}


@settings(max_examples=300, deadline=None)
@given(
    op=st.sampled_from(sorted(OPS)),
    opset=st.sampled_from([7, 11, 13, 14, 17, 18, 21]),
    first=st.sampled_from(TYPES),
    others=st.lists(st.sampled_from(TYPES), min_size=3, max_size=3),
    mixed=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_the_check_agrees_with_onnx_full_check(
    op: str, opset: int, first: int, others: list[int], mixed: list[bool]
) -> None:
    """Import refuses, naming the node, exactly the models onnx's full check refuses."""
    types = [other if swap else first for other, swap in zip(others, mixed, strict=False)]
    inputs = [(f"i{k}", elem) for k, elem in enumerate([first, *types[1:]][: OPS[op]])]
    output = others[0] if mixed[3] else first
    model = _model(op, inputs, output, opset, (4, 3) if op == "Concat" else (2, 3), axis=0)
    if op != "Concat":
        del model.graph.node[0].attribute[:]
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError:
        event("the op does not exist at this opset")
        return  # not a question of types
    try:
        onnx.checker.check_model(model, full_check=True)
        legal = True
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
        legal = False
    event("legal" if legal else "refused")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if legal:
            load_graph(model)
        else:
            with pytest.raises(ModelError, match=rf"^node 'node' \({op}\): (in|out)put '"):
                load_graph(model)


def _with_code(where: str, code: int) -> onnx.ModelProto:
    """``y = Cast(Relu(x) + w)`` with element-type ``code`` stated at ``where``."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["inner"])],
        "then",
        [],
        [info("inner", code if where == "subgraph" else F, [2])],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["h"]),
        helper.make_node("Add", ["h", "w"], ["s"]),
        helper.make_node("Cast", ["s"], ["y"], to=code if where == "cast" else F),
        helper.make_node("If", ["c"], ["z"], then_branch=body, else_branch=body),
    ]
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    w.data_type = code if where == "tensor" else F
    graph = helper.make_graph(
        nodes,
        "codes",
        [info("x", code if where == "input" else F, [2]), info("c", TensorProto.BOOL, [])],
        [info("y", code if where == "output" else F, [2]), info("z", F, [2])],
        initializer=[w],
        value_info=[info("h", code if where == "value_info" else F, [2])],
    )
    return make_model(graph, 17)


@pytest.mark.parametrize("code", [29, 1000, -1])
@pytest.mark.parametrize(
    ("where", "fragment"),
    [
        ("input", "value 'x' has element type {}, which ONNX does not define"),
        ("output", "value 'y' has element type {}, which ONNX does not define"),
        ("value_info", "value 'h' has element type {}, which ONNX does not define"),
        ("tensor", "tensor 'w' has element type {}, which ONNX does not define"),
        ("subgraph", "value 'inner' has element type {}, which ONNX does not define"),
        ("cast", "a Cast node: attribute to={} is not an ONNX element type"),
    ],
)
def test_undefined_element_type_codes_are_one_error_line(
    tmp_path: Path, where: str, fragment: str, code: int
) -> None:
    path = _save(_with_code(where, code), tmp_path)
    for command in (["info"], ["run", "--repeat", "1"]):
        assert_one_line_error(*invoke(*command, path), fragment.format(code))


def test_defined_element_type_codes_pass_and_a_default_zero_means_unset() -> None:
    check_declared_types(_with_code("cast", TensorProto.FLOAT16))
    quantize = helper.make_node("QuantizeLinear", ["x", "scale"], ["y"], output_dtype=0)
    graph = helper.make_graph(
        [quantize],
        "quantize",
        [info("x", F, [2, 3])],
        [info("y", TensorProto.UINT8, [2, 3])],
        initializer=[numpy_helper.from_array(np.array(0.1, np.float32), "scale")],
    )
    model = make_model(graph, 21)
    _matches_onnxruntime(model, _feeds(model))
    cast = helper.make_node("Cast", ["x"], ["y"], to=0)  # Cast's ``to`` has no default
    graph = helper.make_graph([cast], "cast", [info("x", F, [2])], [info("y", F, [2])])
    with pytest.raises(ModelError, match="attribute to=0 is not an ONNX element type"):
        check_declared_types(make_model(graph, 17))


def test_numpy_errors_while_running_are_one_line(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "i"], ["y"], name="gather")],
        "gather",
        [info("i", I64, [2])],
        [info("y", F, [2])],
        initializer=[numpy_helper.from_array(np.zeros(3, np.float32), "table")],
    )
    model = make_model(graph, 17)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, i=np.array([1, 7], np.int64))
    assert_one_line_error(
        *invoke("run", _save(model, tmp_path), "--repeat", "1", "--inputs", str(inputs)),
        "node 'gather' (Gather) failed on numpy: index 7 is out of bounds",
    )
    with pytest.raises(ExecutionError) as raised:
        Executor(load_graph(model)).run({"i": np.array([7, 0], np.int64)})
    assert isinstance(raised.value.__cause__, IndexError)  # kept for whoever debugs it


def test_numpy_errors_while_folding_constants_are_one_line(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "i"], ["g"], name="gather"),
            helper.make_node("Add", ["g", "x"], ["y"]),
        ],
        "folded",
        [info("x", F, [2])],
        [info("y", F, [2])],
        initializer=[
            numpy_helper.from_array(np.zeros(3, np.float32), "table"),
            numpy_helper.from_array(np.array([5, 0], np.int64), "i"),
        ],
    )
    assert_one_line_error(
        *invoke("info", _save(make_model(graph, 17), tmp_path)),
        "node 'gather' (Gather) fails on the model's constants: index 5 is out of bounds",
    )


def test_other_errors_of_a_kernel_are_bugs_and_pass_through() -> None:
    def broken(x: np.ndarray) -> tuple[np.ndarray, ...]:
        return (x.no_such_method(),)  # type: ignore[attr-defined]

    node = Node("broken", "Relu", ["x"], ["y"])
    subgraph = NumpySubgraph([NumpyStep(node, broken, ["x"], [None], ["y"])], ["x"], ["y"])
    with pytest.raises(AttributeError):
        subgraph.run({"x": np.zeros(2, np.float32)})
