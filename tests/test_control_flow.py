"""If, Loop and Scan whose subgraphs read outer-scope values: import, passes, runs, plans.

The model's answers come from onnxruntime (the oracle). The same model runs through
``autopart.run`` (cpu@numpy), the ``autopart run`` command, and a plan that puts the
control-flow nodes on onnxruntime and the rest on numpy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import autopart
from autopart.api import make_plan, run_plan
from autopart.cli import main
from autopart.ir import load_graph
from autopart.ir.onnx_export import to_onnx
from autopart.runtime import Executor

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT


def _info(name: str, dtype: int, shape: list[int] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def control_flow_model(trip_count: int = 3) -> onnx.ModelProto:
    """x -> If (reads a, w) -> Loop (reads a, w; scan output) -> Scan (reads g, reversed)."""
    then_g = helper.make_graph(
        [helper.make_node("Add", ["a", "w"], ["t"])], "then", [], [_info("t", F, [2, 3])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Mul", ["a", "w"], ["e"])], "else", [], [_info("e", F, [2, 3])]
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Add", ["v_in", "a"], ["v_out"]),
            helper.make_node("Mul", ["v_out", "w"], ["s_out"]),
        ],
        "loop_body",
        [
            _info("i", TensorProto.INT64, []),
            _info("c_in", TensorProto.BOOL, []),
            _info("v_in", F, [2, 3]),
        ],
        [
            _info("c_out", TensorProto.BOOL, []),
            _info("v_out", F, [2, 3]),
            _info("s_out", F, [2, 3]),
        ],
    )
    scan_body = helper.make_graph(
        [
            helper.make_node("Mul", ["row", "g"], ["rg"]),
            helper.make_node("Add", ["h_in", "rg"], ["h_out"]),
            helper.make_node("Tanh", ["h_out"], ["o"]),
        ],
        "scan_body",
        [_info("h_in", F, [3]), _info("row", F, [3])],
        [_info("h_out", F, [3]), _info("o", F, [3])],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["y_if"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trip", "", "y_if"], ["y_loop", "scans"], body=body),
        helper.make_node("ReduceMean", ["a"], ["g"], axes=[0], keepdims=0),
        helper.make_node(
            "Scan",
            ["h0", "y_loop"],
            ["h_last", "outs"],
            body=scan_body,
            num_scan_inputs=1,
            scan_input_directions=[1],
            scan_output_directions=[1],
        ),
    ]
    constants = {
        "zero": np.array(0.0, np.float32),
        "w": np.array([0.5, -1.0, 2.0], np.float32),
        "trip": np.array(trip_count, np.int64),
        "h0": np.zeros(3, np.float32),
    }
    graph = helper.make_graph(
        nodes,
        "control_flow",
        [_info("x", F, [2, 3])],
        [
            _info("y_loop", F, [2, 3]),
            _info("scans", F, ["n", 2, 3]),  # the loop's length: fixed by the trip count
            _info("h_last", F, [3]),
            _info("outs", F, [2, 3]),
        ],
        initializer=[numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _oracle(model: onnx.ModelProto, x: np.ndarray) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {"x": x}), strict=True))


@pytest.fixture(params=[1.0, -1.0], ids=["then", "else"])
def feeds(request: pytest.FixtureRequest) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": (request.param * np.abs(rng.standard_normal((2, 3)))).astype(np.float32)}


def _check(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for name, expected in want.items():
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)


def test_import_keeps_subgraphs_and_their_outer_reads() -> None:
    graph = load_graph(control_flow_model())
    nodes = {node.op_type: node for node in graph.nodes}
    assert set(nodes["If"].captures) == {"a", "w"}
    assert set(nodes["Loop"].captures) == {"a", "w"}
    assert nodes["Scan"].captures == ["g"]
    # outer values read only inside subgraphs are kept and ordered before their readers
    order = [node.op_type for node in graph.nodes]
    assert order.index("Relu") < order.index("If") and order.index("ReduceMean") < order.index(
        "Scan"
    )
    # the Loop's scan output has a static shape: constant trip count, condition passed through
    assert graph.value("scans").shape == (3, 2, 3)


def test_api_run_matches_onnxruntime(feeds: dict[str, np.ndarray]) -> None:
    model = control_flow_model()
    _check(autopart.run(model, feeds).outputs, _oracle(model, feeds["x"]))


def test_zero_trip_loop_matches_onnxruntime(feeds: dict[str, np.ndarray]) -> None:
    model = control_flow_model(trip_count=0)
    graph = load_graph(model)
    assert graph.value("scans").shape == (0, 2, 3)
    _check(Executor(graph).run(feeds).outputs, _oracle(model, feeds["x"]))


def test_cli_run_and_plan_with_control_flow_on_onnxruntime(
    tmp_path: Path, feeds: dict[str, np.ndarray]
) -> None:
    model = control_flow_model()
    path = tmp_path / "cf.onnx"
    onnx.save(model, path)
    np.savez(tmp_path / "in.npz", **feeds)
    want = _oracle(model, feeds["x"])
    runner = CliRunner()
    for extra in ([], ["--assign", "If=cpu@onnxruntime", "--assign", "Loop=cpu@onnxruntime",
                       "--assign", "Scan=cpu@onnxruntime", "--save-plan", str(tmp_path / "p.json")]):  # fmt: skip
        out = tmp_path / "out.npz"
        result = runner.invoke(
            main,
            ["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--out", str(out), *extra],
        )
        assert result.exit_code == 0, result.output
        with np.load(out) as saved:
            _check({name: saved[name] for name in saved.files}, want)
    text = (tmp_path / "p.json").read_text()
    assert '"cpu@onnxruntime"' in text and '"cpu@numpy"' in text
    out = tmp_path / "again.npz"  # the saved plan runs again, checked against numpy
    args = ["run", str(tmp_path / "p.json"), "--inputs", str(tmp_path / "in.npz"), "--check"]
    result = runner.invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    with np.load(out) as saved:
        _check({name: saved[name] for name in saved.files}, want)


def test_plan_puts_control_flow_on_onnxruntime_whole(feeds: dict[str, np.ndarray]) -> None:
    model = control_flow_model()
    plan, graph = make_plan(
        model, ["If=cpu@onnxruntime", "Loop=cpu@onnxruntime", "Scan=cpu@onnxruntime"]
    )
    onnxruntime_parts = [p for p in plan.partitions if p.target == "cpu@onnxruntime"]
    placed = {name for p in onnxruntime_parts for name in p.nodes}
    assert {n.name for n in graph.nodes if n.op_type in ("If", "Loop", "Scan")} == placed
    assert any(p.target == "cpu@numpy" for p in plan.partitions)
    # the outer values the subgraphs read reach their partitions as inputs
    reads = {name for p in onnxruntime_parts for name in p.inputs}
    assert {"a", "g"} <= reads
    result = run_plan(plan, graph, feeds)
    _check(result.outputs, _oracle(model, feeds["x"]))


def test_opencl_refuses_control_flow_cleanly() -> None:
    from autopart.targets.registry import get_codegen

    graph = load_graph(control_flow_model())
    opencl = get_codegen("opencl")
    for node in graph.nodes:
        if node.op_type in ("If", "Loop", "Scan"):
            assert not opencl.supports(node, graph)


def test_a_loop_of_unknown_length_runs_with_shapes_that_depend_on_data() -> None:
    """The trip count becomes an input: the scan output's length is observed, then free."""
    import onnxruntime as ort

    from autopart.ir.observe import dynamic_region, dynamic_values

    model = control_flow_model()
    model.graph.initializer.pop(2)  # the trip count becomes an input
    model.graph.input.append(_info("trip", TensorProto.INT64, []))
    graph = load_graph(model)
    assert dynamic_values(graph) and any(n.op_type == "Loop" for n in dynamic_region(graph))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for trip in (3, 5):  # another length than the one observed at import
        feeds = {**autopart.ir.feeds.random_inputs(graph, 0), "trip": np.array(trip, np.int64)}
        ours = Executor(graph).run(feeds).outputs
        theirs = dict(
            zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True)
        )
        for name in graph.outputs:
            assert ours[name].shape == theirs[name].shape
            np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-5, atol=1e-6)


def test_passes_keep_subgraph_reads_when_renaming_and_dropping() -> None:
    """Identity removal renames an outer value a subgraph reads; dead code keeps its producer."""
    model = control_flow_model()
    graph = model.graph
    # the If and the Loop read "a" through an Identity: removing it renames their reads
    graph.node.insert(1, helper.make_node("Identity", ["a"], ["a_alias"]))
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                for inner in attribute.g.node:
                    inner.input[:] = ["a_alias" if n == "a" else n for n in inner.input]
    imported = load_graph(model)
    assert "a_alias" not in imported.values
    for node in imported.nodes:
        exported = to_onnx(imported, [node], outputs=[o for o in node.outputs if o])
        onnx.checker.check_model(exported)  # every subgraph read is an input or constant
    x = np.abs(np.random.default_rng(1).standard_normal((2, 3))).astype(np.float32)
    _check(Executor(imported).run({"x": x}).outputs, _oracle(model, x))


@settings(max_examples=12, deadline=None)
@given(
    aliases=st.integers(1, 3),
    reads=st.lists(st.integers(0, 3), min_size=3, max_size=3),
    exposed=st.booleans(),
)
def test_passes_preserve_subgraph_reads(aliases: int, reads: list[int], exposed: bool) -> None:
    """Any chain of Identity aliases of ``a``, read by any subgraph, maybe a graph output.

    Simplification removes every alias and renames what the subgraphs read (into the graph
    output's name when an alias is one); the result still runs like onnxruntime does.
    """
    model = control_flow_model()
    names = ["a", *[f"a{i}" for i in range(1, aliases + 1)]]
    for index in range(aliases):
        identity = helper.make_node("Identity", [names[index]], [names[index + 1]])
        model.graph.node.insert(1 + index, identity)
    graphs = [a.g for node in model.graph.node for a in node.attribute if a.type == a.GRAPH]
    for graph, choice in zip(graphs, reads + reads, strict=False):
        alias = names[min(choice, aliases)]
        for inner in graph.node:
            inner.input[:] = [alias if n == "a" else n for n in inner.input]
    if exposed:
        model.graph.output.append(_info(names[-1], F, [2, 3]))
    imported = load_graph(model)
    assert not set(names[1:-1]) & set(imported.values)
    for node in imported.nodes:
        assert set(node.captures) <= set(imported.values)
        onnx.checker.check_model(to_onnx(imported, [node], outputs=[o for o in node.outputs if o]))
    x = np.abs(np.random.default_rng(aliases).standard_normal((2, 3))).astype(np.float32)
    _check(Executor(imported).run({"x": x}).outputs, _oracle(model, x))
