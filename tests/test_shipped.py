"""A plan whose one partition is the whole model compiles the model as shipped, as its peer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autopart import api
from autopart.costmodel.partitions import partition_key
from autopart.errors import TargetError
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.plan.build import build_plan_for
from autopart.runtime import random_inputs
from autopart.runtime.plan_executor import PlanExecutor
from autopart.targets.onnxruntime.codegen import OnnxRuntimeSubgraph
from autopart.targets.openvino.codegen import OpenVinoCodegen
from autopart.targets.peer import PeerInputs
from autopart.targets.registry import declared_peers
from autopart.targets.resolve import available_targets
from autopart.tuning.peers import peers
from tests.conftest import make_model

TARGETS = {str(target) for target in available_targets()}
ON_OPENVINO = [t for t in ("cpu@openvino", "cpu@openvino:bf16") if t in TARGETS]
PEER_OF: dict[str, str] = {}  # each whole-CPU target -> the peer run here that stands for it
for _peer in declared_peers(available=True):
    if _peer.stands_for_plan:
        _precision = _peer.precision()
        PEER_OF.setdefault(
            f"cpu@{_peer.codegen}" + (f":{_precision}" if _precision else ""), _peer.name
        )


def conv_bn(path: Path) -> Path:
    """x -> Conv -> BatchNormalization -> Relu -> Mul(scale): import folds the BN (and
    ``--freeze scale`` makes scale a constant); the file keeps both."""
    rng = np.random.default_rng(0)
    tensors = {
        "w": rng.standard_normal((8, 3, 3, 3)),
        "gamma": rng.uniform(0.5, 1.5, 8),
        "beta": rng.standard_normal(8),
        "mean": rng.standard_normal(8),
        "var": rng.uniform(0.5, 1.5, 8),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["b"]),
        helper.make_node("Relu", ["b"], ["r"]),
        helper.make_node("Mul", ["r", "scale"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_bn",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16]),
            helper.make_tensor_value_info("scale", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8, 16, 16])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in tensors.items()],
    )
    onnx.save(make_model(graph), str(path))
    return path


def whole_plan(graph: Graph, target: str, source: str) -> PlanExecutor:
    chosen = VirtualDevice.parse(target)
    plan = build_plan_for(graph, {node.name: chosen for node in graph}, chosen, source)
    return PlanExecutor(plan, graph)


@pytest.mark.parametrize("target", ["cpu@onnxruntime", *ON_OPENVINO])
def test_a_single_target_plan_is_its_peer_bit_for_bit(tmp_path: Path, target: str) -> None:
    path = str(conv_bn(tmp_path / "conv_bn.onnx"))
    scale = np.array([2.0], np.float32)
    graph = api.load(path, input_shapes={"batch": 2}, freeze={"scale": scale})
    assert "BatchNormalization" not in {node.op_type for node in graph}  # import folded it
    feeds = random_inputs(graph, seed=3)
    runners, _ = peers(path, PeerInputs.of(graph))
    expected = runners[PEER_OF[target]](feeds)
    with whole_plan(graph, target, path) as executor:
        step = next(iter(executor.steps.values()))
        assert step.compiled is not None
        assert step.compiled.model_bytes == onnx.load(path).SerializeToString()  # as shipped
        outputs = executor.run(feeds).outputs
    np.testing.assert_array_equal(outputs["y"], expected["y"])


def test_a_whole_model_as_shipped_with_a_frozen_input_runs_the_sessions_own_call(
    tmp_path: Path,
) -> None:
    """The frozen input is fed from the compiled partition with every run, so the plan's
    one partition needs no environment: its bare call gives what ``run(env)`` gives (it
    was refused, and silero_vad's plan timed 1.14x its shipped session, 1.0x with it)."""
    path = str(conv_bn(tmp_path / "conv_bn.onnx"))
    graph = api.load(path, input_shapes={"batch": 2}, freeze={"scale": np.array([2.0], "f4")})
    feeds = random_inputs(graph, seed=4)
    with whole_plan(graph, "cpu@onnxruntime", path) as executor:
        compiled = next(iter(executor.steps.values())).compiled
        assert isinstance(compiled, OnnxRuntimeSubgraph)
        assert "scale" not in graph.inputs and "scale" in compiled.feeds  # fed from the plan
        bare = compiled.whole_runner()
        assert bare is not None
        env = dict(feeds)
        compiled.run(env)
        got = bare({name: np.ascontiguousarray(array) for name, array in feeds.items()})
        planned = executor.run(feeds).outputs["y"]
    np.testing.assert_array_equal(got["y"], env["y"])
    np.testing.assert_array_equal(planned, env["y"])
    np.testing.assert_allclose(env["y"], api.run(graph, feeds).outputs["y"], rtol=1e-4, atol=1e-5)


def test_a_partition_of_part_of_the_model_compiles_its_export(tmp_path: Path) -> None:
    path = str(conv_bn(tmp_path / "conv_bn.onnx"))
    graph = api.load(path, freeze={"scale": np.array([2.0], np.float32)})
    ort, numpy = VirtualDevice.parse("cpu@onnxruntime"), VirtualDevice.parse("cpu@numpy")
    assignment = {node.name: ort if node.op_type == "Conv" else numpy for node in graph}
    with PlanExecutor(build_plan_for(graph, assignment, numpy, path), graph) as executor:
        steps = executor.steps.values()
        sessions = [s.compiled for s in steps if isinstance(s.compiled, OnnxRuntimeSubgraph)]
        assert len(executor.steps) >= 2 and sessions
        assert all(c.model_bytes != onnx.load(path).SerializeToString() for c in sessions)
        got = executor.run(random_inputs(graph, seed=1)).outputs["y"]
    reference = api.run(graph, random_inputs(graph, seed=1)).outputs["y"]
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not ON_OPENVINO, reason="needs OpenVINO (pip install openvino)")
def test_a_model_the_library_rejects_as_shipped_falls_back_to_the_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(conv_bn(tmp_path / "conv_bn.onnx"))
    graph = api.load(path, freeze={"scale": np.array([2.0], np.float32)})

    def rejected(*_: object, **__: object) -> None:
        raise TargetError("openvino rejected the subgraph: If needs a constant condition")

    monkeypatch.setattr(OpenVinoCodegen, "_compile_shipped", rejected)
    feeds = random_inputs(graph, seed=2)
    with whole_plan(graph, "cpu@openvino", path) as executor:
        step = next(iter(executor.steps.values()))
        assert step.compiled is not None
        assert step.compiled.model_bytes != onnx.load(path).SerializeToString()
        got = executor.run(feeds).outputs["y"]
    np.testing.assert_allclose(got, api.run(graph, feeds).outputs["y"], rtol=1e-4, atol=1e-5)


def test_the_whole_models_profile_row_is_keyed_apart_from_its_export(tmp_path: Path) -> None:
    path = str(conv_bn(tmp_path / "conv_bn.onnx"))
    from_file = api.load(path, freeze={"scale": np.array([2.0], np.float32)})
    in_memory = api.load(onnx.load(path), freeze={"scale": np.array([2.0], np.float32)})
    whole = partition_key(from_file, from_file.nodes, alone=True)
    assert whole.endswith(":shipped")
    assert whole.split(":")[0] == partition_key(in_memory, in_memory.nodes, True).split(":")[0]
    assert partition_key(in_memory, in_memory.nodes, alone=True).endswith(":alone")
    assert partition_key(from_file, from_file.nodes[:2], alone=True).endswith(":alone")


@pytest.mark.parametrize("target", ["cpu@onnxruntime", "cpu@openvino"])
def test_a_whole_partition_timed_alone_is_fed_the_inputs_only_the_file_reads(
    tmp_path: Path, target: str
) -> None:
    """Import folds ``Shape(slots)``: no node of the graph reads ``slots``, the file does."""
    from autopart.profile.samplers import compiled_with_inputs
    from autopart.targets.devices import discover
    from autopart.targets.resolve import resolve

    nodes = [
        helper.make_node("Shape", ["slots"], ["count"]),
        helper.make_node("Cast", ["count"], ["scale"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "scale"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "slots",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("slots", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )  # fmt: skip
    path = tmp_path / "slots.onnx"
    onnx.save(make_model(graph), str(path))
    imported = api.load(str(path))
    assert "slots" in imported.inputs and not imported.value("slots").consumers
    resolved = resolve(target, discover())
    values = random_inputs(imported, 0)
    compiled, env = compiled_with_inputs(resolved, imported, imported.nodes, values, alone=True)
    compiled.run(env)
    np.testing.assert_allclose(env["y"], values["x"], rtol=1e-6)
