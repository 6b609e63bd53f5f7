"""Partition fuzzing: random convex cuts of real and generated graphs, every f32 codegen.

Every whole-subgraph codegen must compile and run any convex cut it claims every node of,
with the boundary cases of :mod:`autopart.testing.partition_fuzz` (an input passed straight
to an output, an output also read inside, a constant as an output), and agree with
onnxruntime running the whole model. Generated graphs add scalars, zero-size tensors and
int64, bool and float64 values. The minimal cases the fuzzer found are kept below as
regression tests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.ir.onnx_import import load_graph
from autopart.targets.resolve import available_targets, resolve
from autopart.testing.partition_fuzz import (
    FAILURES,
    Cut,
    check_cut,
    is_convex,
    oracle_values,
    random_cut,
    random_order,
    shrink,
    with_extras,
)
from tests.conftest import FIXTURES, make_model
from tests.test_errors import assert_one_line_error, invoke

FUZZ = settings(
    max_examples=12, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)  # fmt: skip


BUILT_IN = frozenset({"numpy", "onnxruntime", "openvino", "opencl"})


def f32_whole_targets() -> list[str]:
    """The built-in codegens' whole-device f32 targets offered here (the reference first).

    Plugins other tests register in this process (an example BLAS codegen) are left out.
    """
    found = [
        str(t)
        for t in available_targets()
        if t.unit is None and t.precision is None and t.codegen in BUILT_IN
    ]
    return sorted(found, key=lambda t: t != "cpu@numpy")


def _failures(graph: Graph, cuts: list[Cut]) -> list[str]:
    values = oracle_values(graph, random_inputs(graph, seed=0))
    found = []
    for target in f32_whole_targets():
        resolved = resolve(target)
        for cut in cuts:
            verdict = check_cut(graph, cut, resolved, values)
            if verdict.status in FAILURES:
                small = shrink(graph, cut, resolved, values, budget=40)
                found.append(f"{target} {small.status}: {small.detail} ({small.cut})")
    return found


@pytest.mark.parametrize("fixture", ["vit_tiny", "bert_tiny", "yolo_head"])
def test_random_cuts_of_exported_models_agree_with_onnxruntime(fixture: str) -> None:
    graph = load_graph(str(FIXTURES / f"{fixture}.onnx"))
    rng = np.random.default_rng(7)
    cuts = [random_cut(graph, rng, max_nodes=16) for _ in range(6)]
    assert _failures(graph, cuts) == []


def _mixed_dtype_model(data: st.DataObject) -> onnx.ModelProto:
    """A small graph of scalars, empty tensors, int64, bool and float64 values."""
    rows = data.draw(st.sampled_from([0, 1, 3]), label="rows")  # 0: zero-size tensors
    nodes = [
        helper.make_node("Cast", ["x"], ["x64"], to=TensorProto.DOUBLE),
        helper.make_node("ReduceSum", ["x64"], ["total"], keepdims=0),  # a scalar
        helper.make_node("Mul", ["x64", "total"], ["scaled"]),
        helper.make_node("Greater", ["scaled", "zero"], ["positive"]),  # bool
        helper.make_node("Cast", ["positive"], ["count"], to=TensorProto.INT64),
        helper.make_node("Add", ["count", "ids"], ["shifted"]),  # int64
        helper.make_node("Where", ["positive", "scaled", "x64"], ["picked"]),
        helper.make_node("Identity", ["ids"], ["ids_out"]),  # an input straight out
    ]
    graph = helper.make_graph(
        nodes,
        "mixed",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 4]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [rows, 4]),
        ],
        [
            helper.make_tensor_value_info(name, kind, shape)
            for name, kind, shape in (
                ("picked", TensorProto.DOUBLE, [rows, 4]),
                ("shifted", TensorProto.INT64, [rows, 4]),
                ("total", TensorProto.DOUBLE, []),
                ("ids_out", TensorProto.INT64, [rows, 4]),
            )
        ],
        [numpy_helper.from_array(np.array(0.0), "zero")],
    )
    return make_model(graph)


@FUZZ
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_cuts_of_scalars_empty_tensors_and_integer_bool_and_double_values(
    tmp_path: Path, data: st.DataObject, seed: int
) -> None:
    path = tmp_path / "mixed.onnx"
    onnx.save(_mixed_dtype_model(data), str(path))
    graph = load_graph(str(path), simplify_graph=False)
    rng = np.random.default_rng(seed)
    assert _failures(graph, [random_cut(graph, rng, max_nodes=5) for _ in range(3)]) == []


@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**16), size=st.integers(1, 12))
def test_random_cuts_are_convex_and_their_boundary_is_complete(seed: int, size: int) -> None:
    graph = load_graph(str(FIXTURES / "yolo_head.onnx"))
    rng = np.random.default_rng(seed)
    cut = random_cut(graph, rng, max_nodes=size)
    nodes = [graph.node(name) for name in cut.nodes]
    assert 1 <= len(nodes) <= size and is_convex(graph, nodes)
    produced = {o for node in nodes for o in node.outputs if o}
    for node in nodes:
        for name in node.present_inputs:
            assert name in produced or name in cut.inputs or graph.value(name).is_const
    order = [node.name for node in random_order(graph, rng)]
    assert sorted(order) == sorted(node.name for node in graph.nodes)


def test_a_cut_whose_outputs_are_its_input_and_a_constant_runs_on_every_codegen() -> None:
    graph = load_graph(str(FIXTURES / "vit_tiny.onnx"))
    node = next(n for n in graph.nodes if any(graph.value(i).is_const for i in n.present_inputs))
    base = with_extras(graph, [node], None)
    constant = next(i for i in node.present_inputs if graph.value(i).is_const)
    outputs = (*base.outputs, *base.inputs[:1], constant)
    cut = Cut(base.nodes, base.inputs, outputs, ("input", "constant"))
    values = oracle_values(graph, random_inputs(graph, seed=0))
    for target in f32_whole_targets():
        verdict = check_cut(graph, cut, resolve(target), values)
        assert verdict.status in {"ok", "unclaimed"}, verdict


def test_a_model_output_that_openvino_merges_with_another_name_is_found_by_its_own(
    tmp_path: Path,
) -> None:
    """OpenVINO folds an Identity: its output port carries both names, in either order."""
    nodes = [
        helper.make_node("Relu", ["x"], ["/m/Relu_output_0"]),
        helper.make_node("Identity", ["/m/Relu_output_0"], ["output"]),
        helper.make_node("Identity", ["x"], ["passed"]),
    ]
    declared = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("output", "passed")
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])], declared
    )
    path = tmp_path / "aliased.onnx"
    onnx.save(make_model(graph), str(path))
    for target in f32_whole_targets():
        code, output = invoke("run", str(path), "--assign", f"re:.*={target}", "--check")
        assert code == 0 and "(ok)" in output, (target, output)


@pytest.mark.slow
def test_a_reference_that_computes_nan_on_the_inputs_stops_the_tune_in_one_line(
    tmp_path: Path,
) -> None:
    """Random scalars fed to a log: every error would be meaningless, so nothing is timed."""
    nodes = [
        helper.make_node("Log", ["rate"], ["log_rate"]),
        helper.make_node("Mul", ["x", "log_rate"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8]),
            helper.make_tensor_value_info("rate", TensorProto.FLOAT, [1, 8]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
    )
    path = tmp_path / "log.onnx"
    onnx.save(make_model(graph), str(path))
    common = ["--search-dir", str(tmp_path / "s"), "--profiles", str(tmp_path / "p")]
    code, output = invoke("tune", str(path), "--targets", "cpu@onnxruntime", *common)
    assert_one_line_error(code, output, "NaN", "y", "--inputs", "--freeze", "rate")
    assert not (tmp_path / "p").exists() or not any((tmp_path / "p").iterdir())
    code, output = invoke(
        "bench", str(path), "--targets", "cpu@onnxruntime", "--rounds", "1", *common
    )
    assert_one_line_error(code, output, "NaN", "y")
    code, output = invoke("tune", str(path), "--freeze", "rate=2.5,2.5,2.5,2.5,2.5,2.5,2.5,2.5", "--targets", "cpu@onnxruntime",
                          "--rounds", "1", *common)  # fmt: skip
    assert code == 0, output
