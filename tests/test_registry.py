"""The registry answers what other code once asked by name: roles, peers, libraries, devices.

Plugins here are small real codegens registered for one test (the registry is restored
after it); their peers really run, their devices really hold tensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import onnx
import pytest

from autopart.errors import TargetError
from autopart.ir.graph import Graph, Node, Value
from autopart.ir.target import VirtualDevice
from autopart.profile.saved import library_versions
from autopart.runtime.executor import Executor
from autopart.targets import registry
from autopart.targets.boundary import exported_boundary
from autopart.targets.codegen import Role
from autopart.targets.device_contract import Device, Unit
from autopart.targets.devices import discover
from autopart.targets.numpy.codegen import NumpyCodegen
from autopart.targets.peer import Peer, PeerInputs, PeerModel, Runner, peer_model
from autopart.targets.probe_model import node_signature, probe_model
from autopart.targets.registry import codegen_for, declared_peers, reference_codegen
from autopart.tuning.bench import peer_columns
from autopart.tuning.peers import peer_precision, peers


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry as loaded, restored after the test (plugins registered in it vanish)."""
    registry.load_codegens()
    monkeypatch.setattr(registry, "_CODEGENS", dict(registry._CODEGENS))


def test_the_builtin_roles_are_played_by_their_codegens() -> None:
    assert reference_codegen().name == "numpy"
    oracle, provider = codegen_for(Role.ORACLE), codegen_for(Role.HOST_PROVIDER)
    assert oracle is not None and oracle.name == "onnxruntime"
    assert provider is not None and provider.name == "onnxruntime"


def test_a_plugin_claiming_a_role_does_not_take_it_from_a_builtin(scratch_registry: None) -> None:
    class Imposter(NumpyCodegen):
        name = "imposter"
        roles = frozenset({Role.REFERENCE, Role.ORACLE})

    registry.register_codegen(Imposter)
    assert reference_codegen().name == "numpy"
    oracle = codegen_for(Role.ORACLE)
    assert oracle is not None and oracle.name == "onnxruntime"


def test_without_a_reference_the_error_says_so(scratch_registry: None) -> None:
    registry._CODEGENS.pop("numpy")
    with pytest.raises(TargetError, match="no registered codegen is the reference"):
        reference_codegen()


def test_bench_columns_keep_their_names_from_the_peer_names() -> None:
    assert peer_columns() == {
        "onnxruntime alone": "vs_onnxruntime",
        "onnxruntime + qdq int8": "vs_onnxruntime_qdq_int8",
        "openvino alone": "vs_openvino",
        "openvino alone f32": "vs_openvino_f32",
        "openvino + nncf int8": "vs_openvino_nncf_int8",
    }
    assert sum(peer.sets_tolerance for peer in declared_peers()) == 1


def test_a_variant_peer_that_compiles_as_its_library_as_installed_is_run_once() -> None:
    """``openvino alone f32`` is run where OpenVINO's default precision is not f32, and is
    not where the two compile under the same effective properties; its column stays."""
    pytest.importorskip("openvino")
    from autopart.targets.openvino import library

    hint = {"INFERENCE_PRECISION_HINT": "f32"}
    same = library.effective_config(hint) == library.effective_config({})
    available = {peer.name for peer in declared_peers(available=True)}
    assert ("openvino alone f32" in available) is not same
    assert "openvino alone" in available and "openvino alone f32" in peer_columns()


def _reference_runner(model: PeerModel, inputs: PeerInputs | None) -> Runner:
    """A peer that runs the model on the reference kernels (a library that exists here)."""
    from autopart.ir.onnx_import import load_graph

    graph = load_graph(peer_model(model))
    fixed = inputs or PeerInputs()

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return Executor(graph).run(fixed.feeds(graph.inputs, feeds)).outputs

    return run


class WithPeer(NumpyCodegen):
    """The reference under another name, offering one peer with a two-word variant."""

    name = "withpeer"
    library = "hypothesis"  # installed, and no other codegen's library
    roles: ClassVar[frozenset[Role]] = frozenset()

    @classmethod
    def peers(cls) -> tuple[Peer, ...]:
        return (Peer("withpeer", _reference_runner, variant="fast f32"),)


def test_a_plugin_peer_is_named_gets_its_column_and_runs(
    scratch_registry: None, tiny_model: onnx.ModelProto
) -> None:
    registry.register_codegen(WithPeer)
    assert peer_columns()["withpeer alone fast f32"] == "vs_withpeer_fast_f32"
    assert peer_precision("withpeer alone fast f32") is None
    runners, notes = peers(tiny_model)
    assert not any("withpeer" in note for note in notes)
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(runners["withpeer alone fast f32"]({"x": x})["y"], np.abs(x))
    assert library_versions()["hypothesis"] == WithPeer.library_version()


def test_a_tool_peer_is_built_first_and_the_runners_keep_the_declared_order(
    monkeypatch: pytest.MonkeyPatch, tiny_model: onnx.ModelProto
) -> None:
    from autopart.tuning import peers as peers_module

    built: list[str] = []

    def building(name: str) -> Any:
        def build(model: Any, inputs: Any) -> Any:
            built.append(name)
            return _reference_runner(model, inputs)

        return build

    declared = (
        Peer("a", building("a alone")),
        Peer("b", building("b + int8"), tool="int8"),
        Peer("c", building("c alone")),
    )
    monkeypatch.setattr(peers_module, "declared_peers", lambda available=False: declared)
    runners, _ = peers(tiny_model)
    assert built == ["b + int8", "a alone", "c alone"]  # its quantising, before any is held
    assert list(runners) == ["a alone", "b + int8", "c alone"]
    assert list(peers(tiny_model, skip={"a alone"})[0]) == ["b + int8", "c alone"]
    assert list(peers(tiny_model, only="c alone")[0]) == ["c alone"]


def test_profiles_record_every_codegen_library_installed() -> None:
    versions = library_versions()
    assert {"python", "autopart", "numpy", "onnx", "scipy"} <= versions.keys()
    for codegen in registry.registered_codegens():
        if codegen.library is not None and codegen.available():
            assert versions[codegen.library] == codegen.library_version()


class RamDevice(Device):
    """A second host memory space with one unit: arrays are copied in and out."""

    kind = "ram"

    def __init__(self, name: str) -> None:
        self.name = name
        self.units = [Unit(0, "the only lane")]

    def to_host(self, tensor: Any) -> np.ndarray:
        return np.array(tensor, copy=True)

    def from_host(self, array: np.ndarray, unit: int | None = None) -> Any:
        return np.array(array, copy=True)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind}


class RamCodegen(NumpyCodegen):
    """The reference kernels on a :class:`RamDevice`, which it finds itself."""

    name = "ram"
    device_kind = "ram"
    roles: ClassVar[frozenset[Role]] = frozenset()

    @classmethod
    def discover_devices(cls) -> list[Device]:
        return [RamDevice("ram:0")]


def test_devices_are_found_by_the_codegens_that_run_on_them(scratch_registry: None) -> None:
    before = discover.__wrapped__()  # type: ignore[attr-defined]
    registry.register_codegen(RamCodegen)
    machine = discover.__wrapped__()  # type: ignore[attr-defined]
    assert list(machine.devices) == [*before.devices, "ram:0"]
    from autopart.targets.resolve import available_targets, resolve

    assert VirtualDevice.parse("ram:0@ram") in available_targets(machine)
    resolved = resolve("ram:0@ram", machine)
    assert resolved.placement.device.kind == "ram"


@pytest.fixture
def tiny_model() -> onnx.ModelProto:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Abs", ["x"], ["y"])], "abs", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _conv_graph(size: int = 8) -> Graph:
    """y = Conv(x, w) on a size x size image, w a constant; z = Relu(y)."""
    w = np.ones((4, 3, 3, 3), np.float32)
    values = {
        "x": Value("x", (1, 3, size, size), np.dtype(np.float32)),
        "w": Value("w", w.shape, np.dtype(np.float32), const=w),
        "y": Value("y", (1, 4, size - 2, size - 2), np.dtype(np.float32)),
        "z": Value("z", (1, 4, size - 2, size - 2), np.dtype(np.float32)),
    }
    nodes = [Node("conv", "Conv", ["x", "w"], ["y"]), Node("relu", "Relu", ["y"], ["z"])]
    return Graph("conv", nodes, values, ["x"], ["z"], {"": 17})


def test_a_probe_model_is_typed_and_static_only_when_asked() -> None:
    graph = _conv_graph()
    conv = graph.nodes[0]
    plain, static = probe_model(conv, graph), probe_model(conv, graph, static=True)
    ort = pytest.importorskip("onnxruntime")
    x, w = np.ones((1, 3, 8, 8), np.float32), graph.constants["w"]
    for model, feeds in ((plain, {"in0": x, "in1": w}), (static, {"in0": x})):
        session = ort.InferenceSession(model.SerializeToString())
        (out,) = session.run(["out0"], feeds)
        np.testing.assert_array_equal(out, np.full((1, 4, 6, 6), 27, np.float32))
    assert [i.name for i in plain.graph.input] == ["in0", "in1"] and not plain.graph.initializer
    assert not plain.graph.input[0].type.tensor_type.HasField("shape")
    assert plain.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert [i.name for i in static.graph.input] == ["in0"]
    assert [t.name for t in static.graph.initializer] == ["in1"]
    dims = [d.dim_value for d in static.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, 8, 8]
    wider = _conv_graph(10)
    assert node_signature(conv, graph) == node_signature(wider.nodes[0], wider)  # no shapes
    assert node_signature(conv, graph) != node_signature(graph.nodes[1], graph)


def test_the_boundary_splits_feeds_results_and_constants_and_names_what_is_missing() -> None:
    graph = _conv_graph()
    split = exported_boundary(graph, graph.nodes, ["x", "w", "unused"], ["z", "w"])
    assert split.feeds == ["x"] and split.results == ["z"]
    assert list(split.passthrough) == ["w"]
    with pytest.raises(TargetError, match="reads x which are neither inputs nor constants"):
        exported_boundary(graph, graph.nodes, [], ["z"])
    with pytest.raises(TargetError, match="output 'x' is produced by none of its nodes"):
        exported_boundary(graph, graph.nodes[1:], ["y"], ["x"])
