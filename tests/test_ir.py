"""Graph IR, virtual devices and simplifying passes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from autopart.errors import ModelError, TargetError
from autopart.ir import Graph, Node, Value, VirtualDevice, load_graph
from autopart.ir.passes import fold_batchnorm_into_conv, remove_passthrough
from autopart.runtime import Executor, random_inputs


@given(
    device=st.sampled_from(["cpu", "opencl:0", "opencl:12", "cuda:1", None]),
    unit=st.one_of(st.none(), st.integers(0, 64)),
    codegen=st.sampled_from(["numpy", "opencl", "onnxruntime", "my-codegen", None]),
    precision=st.sampled_from([None, "bf16", "int8"]),
    host=st.sampled_from([None, "host1", "node-2.lan", "h_3", "opencl"]),
)
def test_virtual_device_text_round_trips(
    device: str | None,
    unit: int | None,
    codegen: str | None,
    precision: str | None,
    host: str | None,
) -> None:
    target = VirtualDevice(device, unit, codegen, precision if codegen else None, host)
    if target.device is not None or (target.is_set and host is None):
        assert VirtualDevice.parse(str(target)) == target


def test_a_target_without_a_host_is_on_the_local_machine() -> None:
    v = VirtualDevice.parse
    assert v("local:cpu@numpy") == v("cpu@numpy") and str(v("local:cpu@numpy")) == "cpu@numpy"
    assert v("opencl:0/1@opencl").host is None  # a device index, not a host
    remote = v("host1:opencl:0/1@opencl:int8")
    assert (remote.host, remote.device, remote.unit) == ("host1", "opencl:0", 1)
    assert remote != v("opencl:0/1@opencl:int8") and remote.memory_space == "host1:opencl:0"
    assert remote.at_precision(None).host == "host1"
    assert v("cpu@openvino").narrow(v("host1:cpu")) == v("host1:cpu@openvino")
    assert v("host2:cpu").narrow(v("host1:cpu")) is None
    with pytest.raises(TargetError, match="malformed host"):
        VirtualDevice("cpu", host="1st")


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "cpu@",
        "@",
        "cpu/x@numpy",
        "cpu@numpy@onnx",
        "0cpu",
        "host1:",
        ":cpu",
        "1h:cpu",
        "cpu:bf16",
        "host1:int8",
    ],
)
def test_malformed_targets_are_refused(spec: str) -> None:
    with pytest.raises(TargetError, match="malformed target"):
        VirtualDevice.parse(spec)


def _chain_graph() -> Graph:
    values = {name: Value(name, (2,), np.dtype(np.float32)) for name in "abcd"}
    nodes = [
        Node("third", "Relu", ["c"], ["d"]),
        Node("first", "Relu", ["a"], ["b"]),
        Node("second", "Relu", ["b"], ["c"]),
    ]
    return Graph("chain", nodes, values, ["a"], ["d"], {"": 17})


def test_rebuild_orders_topologically_and_links_values() -> None:
    graph = _chain_graph()
    assert [n.name for n in graph.nodes] == ["first", "second", "third"]
    assert graph.value("b").producer is graph.node("first")
    assert graph.value("b").consumers == [graph.node("second")]
    assert graph.last_uses() == {"a": 0, "b": 1, "c": 2}


def test_cycles_are_refused() -> None:
    graph = _chain_graph()
    graph.node("first").inputs = ["d"]
    with pytest.raises(ModelError, match="cycle"):
        graph.rebuild()


def test_erase_virtual_devices_copies() -> None:
    graph = _chain_graph()
    graph.node("second").virtual_device = VirtualDevice.parse("opencl:0/1@opencl")
    graph.node("second").forbidden = frozenset({VirtualDevice.parse("cpu")})
    copied = graph.copy()
    assert copied.assignment() == graph.assignment()
    assert copied.node("second").forbidden == graph.node("second").forbidden
    assert [n.name for n in copied.nodes] == [n.name for n in graph.nodes]
    erased = graph.erase_virtual_devices()
    assert not any(n.virtual_device.is_set or n.forbidden for n in erased.nodes)
    assert str(graph.node("second").virtual_device) == "opencl:0/1@opencl"


def test_virtual_devices_narrow_part_by_part() -> None:
    v = VirtualDevice.parse
    assert v("opencl:0").narrow(v("@opencl")) == v("opencl:0@opencl")
    assert v("opencl:0/1@opencl").narrow(v("opencl:0")) == v("opencl:0/1@opencl")
    assert v("cpu@numpy").narrow(VirtualDevice()) == v("cpu@numpy")
    assert v("cpu@numpy").narrow(v("cpu@onnxruntime")) is None
    assert v("cpu/0@numpy").narrow(v("cpu/1")) is None
    assert v("cpu@numpy").is_complete and not v("cpu/1").is_complete


def _conv_bn_model(extra_use: bool) -> tuple[Graph, Graph]:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
        numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "scale"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "shift"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "mean"),
        numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "var"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["y"], name="bn"
        ),
        helper.make_node("Identity", ["y"], ["z"], name="id"),
    ]
    outputs = [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 5, 5])]
    if extra_use:
        nodes.append(helper.make_node("Relu", ["c"], ["r"], name="relu"))
        outputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 4, 5, 5]))
    graph = helper.make_graph(
        nodes,
        "convbn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5])],
        outputs,
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    return load_graph(model, simplify_graph=False), load_graph(model)


def _outputs(graph: Graph) -> dict[str, np.ndarray]:
    return Executor(graph).run(random_inputs(graph, seed=5)).outputs


def test_batchnorm_folds_into_conv_exactly() -> None:
    raw, simplified = _conv_bn_model(extra_use=False)
    assert [n.op_type for n in simplified.nodes] == ["Conv"]
    assert simplified.outputs == ["z"]
    np.testing.assert_allclose(_outputs(simplified)["z"], _outputs(raw)["z"], rtol=1e-5, atol=1e-5)


def test_batchnorm_does_not_fold_when_conv_output_is_shared() -> None:
    raw, simplified = _conv_bn_model(extra_use=True)
    assert sorted(n.op_type for n in simplified.nodes) == ["BatchNormalization", "Conv", "Relu"]
    for name, expected in _outputs(raw).items():
        np.testing.assert_allclose(_outputs(simplified)[name], expected, rtol=1e-5, atol=1e-5)


def test_passes_carry_the_virtual_device() -> None:
    raw, _ = _conv_bn_model(extra_use=False)
    target = VirtualDevice.parse("opencl:0/1@opencl")
    forbids = frozenset({VirtualDevice.parse("cpu")})
    raw.node("conv").virtual_device = target
    raw.node("conv").forbidden = forbids
    assert fold_batchnorm_into_conv(raw)
    assert remove_passthrough(raw)
    (conv,) = raw.nodes
    assert conv.virtual_device == target and conv.outputs == ["z"]
    assert conv.forbidden == forbids


UNARY = ["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Identity", "Dropout", "Softsign"]
BINARY = ["Add", "Mul", "Sub", "Max", "Min"]


@st.composite
def random_dag_models(draw: st.DrawFn) -> tuple:
    """Random DAGs of elementwise ops mixing inputs, constants, Identity and Dropout."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    inits = [numpy_helper.from_array(rng.standard_normal((2, 3)).astype(np.float32), "k0")]
    available = ["x", "k0"]
    nodes = []
    for index in range(draw(st.integers(1, 12))):
        out = f"v{index}"
        if draw(st.booleans()):
            op = draw(st.sampled_from(UNARY))
            nodes.append(helper.make_node(op, [draw(st.sampled_from(available))], [out], name=out))
        else:
            op = draw(st.sampled_from(BINARY))
            a, b = draw(st.sampled_from(available)), draw(st.sampled_from(available))
            nodes.append(helper.make_node(op, [a, b], [out], name=out))
        available.append(out)
    outputs = sorted({available[-1], draw(st.sampled_from(available[2:]))})
    graph = helper.make_graph(
        nodes,
        "dag",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, 3]) for o in outputs],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), outputs


@settings(max_examples=60, deadline=None)
@given(random_dag_models())
def test_simplification_preserves_results(case: tuple) -> None:
    model, outputs = case
    raw, simplified = load_graph(model, simplify_graph=False), load_graph(model)
    assert simplified.outputs == outputs
    for node in simplified.nodes:
        if node.op_type in (
            "Identity",
            "Dropout",
        ):  # kept only to give a value a second output name
            source = simplified.value(node.inputs[0])
            assert node.outputs[0] in outputs
            assert source.producer is None or source.name in outputs
    assert len(simplified.nodes) <= len(raw.nodes)
    expected = _outputs(raw)
    for name, got in _outputs(simplified).items():
        np.testing.assert_allclose(got, expected[name], rtol=1e-6)


def test_a_target_sent_to_another_process_hashes_as_that_process_hashes_it() -> None:
    """A target's hash is kept on it; one pickled elsewhere must not bring its old hash.

    Ray sends targets between processes whose string hashes differ (``PYTHONHASHSEED``);
    a dict keyed by targets, unpickled here, must find targets made here.
    """
    import os
    import pickle
    import subprocess
    import sys

    other = "8" if os.environ.get("PYTHONHASHSEED") == "7" else "7"
    made_elsewhere = subprocess.run(
        [sys.executable, "-c",
         "import pickle, sys\n"
         "from autopart.ir.target import VirtualDevice\n"
         "keyed = {VirtualDevice.parse('host1:cpu/0@openvino:bf16'): 1}\n"
         "sys.stdout.write(pickle.dumps(keyed).hex())"],
        env={**os.environ, "PYTHONHASHSEED": other}, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    keyed = pickle.loads(bytes.fromhex(made_elsewhere))
    here = VirtualDevice.parse("host1:cpu/0@openvino:bf16")
    assert keyed[here] == 1
    assert hash(next(iter(keyed))) == hash(here)
