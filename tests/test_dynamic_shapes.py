"""Models whose shapes depend on data run, tune and bench; their plans name the region.

A ``NonZero`` picks the positive scores, a ``TopK`` with a computed k keeps the largest
of them, ``NonMaxSuppression`` keeps boxes: sizes no shape inference can know. Import
observes them on one reference run (:mod:`autopart.ir.observe`); each codegen either runs
such nodes at any size (numpy, onnxruntime, OpenVINO) or leaves them to the fallback.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import autopart
from autopart.ir.observe import dynamic_region, dynamic_values
from autopart.ir.onnx_import import load_graph
from tests.conftest import make_model, run_onnxruntime
from tests.test_errors import invoke
from tests.test_partition_fuzz import f32_whole_targets


def selecting_model() -> onnx.ModelProto:
    """x[1, 64] -> Relu -> NonZero -> Gather -> TopK(k = count / 2 + 1) -> Mul -> ReduceSum."""
    weight = numpy_helper.from_array(np.linspace(-1, 1, 64, dtype=np.float32), "w")
    two = numpy_helper.from_array(np.array([2], np.int64), "two")
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["scaled"]),
        helper.make_node("Relu", ["scaled"], ["positive"]),
        helper.make_node("Reshape", ["positive", "flat_shape"], ["flat"]),
        helper.make_node("NonZero", ["flat"], ["where"]),
        helper.make_node("Reshape", ["where", "flat_shape"], ["at"]),
        helper.make_node("Gather", ["flat", "at"], ["kept"]),
        helper.make_node("Shape", ["kept"], ["count"]),
        helper.make_node("Div", ["count", "two"], ["half"]),
        helper.make_node("Add", ["half", "one"], ["k"]),
        helper.make_node("TopK", ["kept", "k"], ["top", "top_at"]),
        helper.make_node("Mul", ["top", "top"], ["squares"]),
        helper.make_node("ReduceSum", ["squares"], ["total"], keepdims=0),
    ]
    flat_shape = numpy_helper.from_array(np.array([-1], np.int64), "flat_shape")
    graph = helper.make_graph(
        nodes,
        "selecting",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [
            helper.make_tensor_value_info("total", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("top", TensorProto.FLOAT, ["kept"]),
        ],
        [weight, two, one, flat_shape],
    )
    return make_model(graph)


@pytest.fixture()
def model_path(tmp_path: Path) -> Path:
    path = tmp_path / "selecting.onnx"
    onnx.save(selecting_model(), str(path))
    return path


def test_import_observes_the_shapes_and_marks_the_region() -> None:
    graph = autopart.load(selecting_model())
    assert {"where", "at", "kept", "top", "squares"} <= dynamic_values(graph)
    region = {node.op_type for node in dynamic_region(graph)}
    assert {"NonZero", "Gather", "TopK", "Mul"} <= region
    assert "depend on data" in autopart.info(graph).dynamic


@pytest.mark.parametrize("count", [3, 40])
def test_every_target_runs_it_at_sizes_other_than_the_one_observed(
    tmp_path: Path, model_path: Path, count: int
) -> None:
    x = np.zeros((1, 64), np.float32)
    x[0, -count:] = np.arange(1, count + 1)  # count positive products, another size
    inputs = tmp_path / "x.npz"
    np.savez(inputs, x=x)
    (expected, top) = run_onnxruntime(selecting_model(), {"x": x})
    for target in f32_whole_targets():
        out = tmp_path / f"{target.replace('@', '_')}.npz"
        code, output = invoke(
            "run", str(model_path), "--assign", f"re:.*={target}", "--inputs", str(inputs),
            "--out", str(out), "--check",
        )  # fmt: skip
        assert code == 0 and "(ok)" in output, (target, output)
        with np.load(out) as saved:
            assert saved["top"].shape == top.shape
            np.testing.assert_allclose(saved["total"], expected, rtol=1e-5)


@pytest.mark.slow
def test_tune_and_bench_plan_it_and_the_plan_names_the_region(
    tmp_path: Path, model_path: Path
) -> None:
    targets = ",".join(f32_whole_targets())
    common = ["--search-dir", str(tmp_path / "s"), "--profiles", str(tmp_path / "p")]
    common += ["--targets", targets]
    out = tmp_path / "plan.json"
    code, output = invoke("tune", str(model_path), "--rounds", "1", "-o", str(out), *common)
    assert code == 0, output
    notes = json.loads(out.read_text())["notes"]
    assert any(note.startswith("dynamic region:") and "NonZero" in note for note in notes)
    code, output = invoke("run", str(out), "--repeat", "1", "--check")
    assert code == 0 and "(ok)" in output, output
    csv = tmp_path / "bench.csv"
    code, output = invoke("bench", str(model_path), "--rounds", "1", "--csv", str(csv), *common)
    assert code == 0, output


def test_the_shape_of_a_value_with_a_dim_unknown_is_not_folded() -> None:
    """NonZero's output has a known rank and an unknown count: Shape of it stays a node."""
    nodes = [
        helper.make_node("NonZero", ["x"], ["where"]),
        helper.make_node("Shape", ["where"], ["shape"]),
        helper.make_node("Size", ["where"], ["size"]),
        helper.make_node("Unsqueeze", ["size", "axis"], ["sizes"]),
        helper.make_node("Concat", ["shape", "sizes"], ["both"], axis=0),
        helper.make_node("Cast", ["both"], ["y"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes, "shape_of_dynamic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.array([0], np.int64), "axis")],
    )  # fmt: skip
    model = make_model(graph)
    imported = autopart.load(model)
    assert {"Shape", "Size"} <= {node.op_type for node in imported.nodes}
    x = np.where(np.arange(15).reshape(3, 5) % 4 == 0, 1.0, 0.0).astype(np.float32)
    ours = autopart.run(imported, inputs={"x": x}).outputs["y"]
    np.testing.assert_array_equal(ours, run_onnxruntime(model, {"x": x})[0])


@pytest.mark.parametrize("op", ["Shape", "Size"])
def test_shape_and_size_fold_only_shapes_known_in_every_dim_and_not_from_data(op: str) -> None:
    from autopart.ir.passes import fold_constants

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node(op, ["r"], ["y"])]
    declared = [3] if op == "Shape" else []
    graph = helper.make_graph(
        nodes, "fold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, declared)],
    )  # fmt: skip
    for shape, dynamic, folds in (
        ((2, None, 4), [], False),
        ((2, 3, 4), ["r"], False),
        ((2, 3, 4), [], True),
    ):
        imported = load_graph(make_model(graph), simplify_graph=False)
        imported.value("r").shape = shape  # type: ignore[assignment]
        imported.meta["dynamic_values"] = dynamic
        assert fold_constants(imported) == folds


def gather_nd_model() -> onnx.ModelProto:
    """NonZero's indices, transposed, gather the positive values: a count only data tells."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("NonZero", ["r"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        helper.make_node("GatherND", ["r", "idx"], ["picked"]),
        helper.make_node("ReduceSum", ["picked"], ["y"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "gather_nd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )  # fmt: skip
    return make_model(graph)


def test_dims_inference_knew_stay_static_so_a_gather_nd_keeps_its_rank() -> None:
    from autopart.ir.observe import dynamic_dims
    from autopart.ir.onnx_export import value_info

    graph = autopart.load(gather_nd_model())
    assert dynamic_dims(graph, "idx") == [0]  # (count, 2): the 2 is the rank of r
    dims = value_info(graph, "idx").type.tensor_type.shape.dim
    assert not dims[0].HasField("dim_value") and dims[1].dim_value == 2


def test_a_node_a_codegen_claims_but_rejects_compiled_is_marked_and_the_profile_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autopart.errors import TargetError
    from autopart.profile import Profile, machine_profile_path
    from autopart.targets.devices import discover
    from autopart.targets.onnxruntime.codegen import OnnxRuntimeCodegen

    original = OnnxRuntimeCodegen.compile

    def picky(self, graph, nodes, inputs, outputs, placement=None):  # type: ignore[no-untyped-def]
        if any(node.op_type == "GatherND" for node in nodes):
            raise TargetError("onnxruntime rejected the subgraph: GatherND, for this test")
        return original(self, graph, nodes, inputs, outputs, *([placement] if placement else []))

    monkeypatch.setattr(OnnxRuntimeCodegen, "compile", picky)
    path = tmp_path / "gather_nd.onnx"
    onnx.save(gather_nd_model(), str(path))
    code, output = invoke(
        "profile", str(path), "--targets", "cpu@numpy,cpu@onnxruntime", "--profiles", str(tmp_path)
    )
    assert code == 0, output
    rows = Profile.load(machine_profile_path(tmp_path, discover())).table
    rejected = rows[(rows["kind"] == "unsupported") & (rows["target"] == "cpu@onnxruntime")]
    assert len(rejected) >= 1 and rejected["op_type"].str.contains("GatherND").all()
