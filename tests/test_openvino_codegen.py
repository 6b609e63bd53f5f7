"""The OpenVINO codegen: zoo models match numpy, support probes, units, absence.

Its conformance over every op case runs with every other codegen's, in test_conformance.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import autopart
from autopart import api
from autopart.errors import TargetError, UnsupportedOpError
from autopart.ir.graph import Graph, Node, Value
from autopart.plan.partition import boundary
from autopart.runtime import Executor, random_inputs
from autopart.targets.codegen import HOST, Placement
from autopart.targets.devices import HostDevice
from autopart.targets.openvino import codegen as ovgen
from autopart.targets.openvino import library as ov_library
from autopart.targets.openvino import probe as ovprobe
from autopart.targets.registry import get_codegen
from autopart.targets.resolve import available_targets, resolve
from autopart.testing.cases import single_node_case
from autopart.testing.conformance import reference, run_case
from tests.conftest import max_relative_error

pytest.importorskip("openvino")

CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
TOLERANCE = 1e-3  # the project's check tolerance (autopart.settings.COMMON.check_tolerance)


BF16 = "bf16" in ovgen.OpenVinoCodegen.precisions()
needs_bf16 = pytest.mark.skipif(not BF16, reason="this CPU has no bf16 units OpenVINO uses")


def compile_whole(graph: Graph, placement: Placement = HOST) -> ovgen.OpenVinoSubgraph:
    constants = [name for name, value in graph.values.items() if value.is_const]
    return ovgen.OpenVinoCodegen().compile(
        graph, graph.nodes, [*graph.inputs, *constants], graph.outputs, placement
    )


def assert_matches_reference(graph: Graph, placement: Placement = HOST) -> None:
    feeds = random_inputs(graph, seed=3)
    reference = Executor(graph).run(feeds).outputs
    env: dict[str, Any] = dict(feeds)
    compile_whole(graph, placement).run(env)
    for name in graph.outputs:
        assert env[name].shape == reference[name].shape
        assert env[name].dtype == reference[name].dtype
        assert max_relative_error(reference[name], env[name]) <= TOLERANCE, name


def tiny_graph(
    op: str,
    dtype: Any = np.float32,
    domain: str = "",
    attrs: dict[str, Any] | None = None,
    opsets: dict[str, int] | None = None,
) -> Graph:
    """y = op(x) on a 2x3 tensor of ``dtype``."""
    values = {"x": Value("x", (2, 3), np.dtype(dtype)), "y": Value("y", (2, 3), np.dtype(dtype))}
    node = Node("n0", op, ["x"], ["y"], attrs or {}, domain)
    return Graph("tiny", [node], values, ["x"], ["y"], opsets or {"": 17})


# -- correctness ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "inception_v1"])
def test_zoo_model_wholly_on_openvino_matches_numpy(name: str) -> None:
    assert_matches_reference(autopart.load(name))


def test_zoo_model_on_a_unit_matches_numpy() -> None:
    assert_matches_reference(autopart.load("squeezenet"), Placement(HostDevice(), unit=0))


def test_transformer_wholly_on_openvino_matches_numpy(transformer_path: Any) -> None:
    assert_matches_reference(autopart.load(transformer_path))


def test_plan_mixing_onnxruntime_and_openvino_matches_numpy() -> None:
    pytest.importorskip("onnxruntime")
    plan, graph = api.make_plan(
        "squeezenet",
        assign=["Conv=cpu@onnxruntime", "Concat=cpu/0@openvino"],
        fallback="cpu@openvino",
    )
    used = {str(partition.target) for partition in plan.partitions}
    assert {"cpu@onnxruntime", "cpu/0@openvino", "cpu@openvino"} <= used
    feeds = random_inputs(graph, seed=1)
    result = api.run_plan(plan, graph, feeds)
    errors = api.check_outputs(graph, feeds, result.outputs)
    assert max(errors.values()) <= TOLERANCE


def test_int64_values_from_onnxruntime_feed_an_openvino_partition(transformer_path: Any) -> None:
    # onnxruntime returns int64 arrays as numpy's longlong, which OpenVINO would not share
    pytest.importorskip("onnxruntime")
    plan, graph = api.make_plan(
        transformer_path, assign=["name:/Unsqueeze_2=cpu@openvino"], fallback="cpu@onnxruntime"
    )
    assert len({p.target for p in plan.partitions}) == 2
    feeds = random_inputs(graph, seed=1)
    errors = api.check_outputs(graph, feeds, api.run_plan(plan, graph, feeds).outputs)
    assert max(errors.values()) <= TOLERANCE
    longlong = np.ones((1, 1, 16), np.dtype("q"))
    assert longlong.dtype.num != np.dtype(np.int64).num
    assert ov_library.feed(longlong).dtype.num == np.dtype(np.int64).num
    assert np.array_equal(ov_library.feed(longlong), longlong)


def test_partition_in_the_middle_of_resnet50_matches_numpy() -> None:
    graph = autopart.load("resnet50")
    feeds = random_inputs(graph, seed=3)
    constants = [name for name, value in graph.values.items() if value.is_const]
    every = [name for node in graph.nodes for name in node.outputs if name]
    numpy_all = get_codegen("numpy").compile(graph, graph.nodes, [*graph.inputs, *constants], every)
    reference: dict[str, Any] = {**graph.constants, **feeds}
    numpy_all.run(reference)

    part = graph.nodes[10:41]
    inputs, outputs = boundary(graph, part)
    compiled = ovgen.OpenVinoCodegen().compile(graph, part, [*inputs, *constants], outputs)
    assert compiled.feeds == inputs  # constants are embedded, not fed
    env = {name: reference[name] for name in inputs}
    assert compiled.run_timed(env) > 0
    for name in outputs:
        assert max_relative_error(reference[name], env[name]) <= TOLERANCE, name
    assert set(env) == set(inputs) | set(outputs)


def test_compiles_in_f32_not_the_cpu_default_bf16() -> None:
    compiled = compile_whole(tiny_graph("Relu"))
    assert str(compiled.model.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'float32'>"


@needs_bf16
def test_a_bf16_target_compiles_in_bf16_and_is_within_bf16s_error_of_the_reference() -> None:
    graph = autopart.load("squeezenet")
    placement = resolve("cpu@openvino:bf16").placement
    compiled = compile_whole(graph, placement)
    assert str(compiled.model.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'bfloat16'>"
    assert compiled.config["INFERENCE_PRECISION_HINT"] == "bf16"
    feeds = random_inputs(graph, seed=3)
    reference_outputs = Executor(graph).run(feeds).outputs
    env: dict[str, Any] = dict(feeds)
    compiled.run(env)
    (name,) = graph.outputs
    error = max_relative_error(reference_outputs[name], env[name])
    assert TOLERANCE < error < 0.1  # bf16, not f32: measurably off, and not wildly


def test_precisions_follow_the_cpu_flags_and_openvinos_capabilities(monkeypatch: Any) -> None:
    flags = ovgen.cpu_flags()
    if flags is None:
        pytest.skip("the OS does not list CPU flags")
    without = flags - ov_library.BF16_FLAGS - ov_library.INT8_FLAGS
    assert ov_library.offered_precisions(without) == ("f32",)
    capabilities = set(ov_library.core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    expected_bf16 = "BF16" in capabilities and bool(flags & ov_library.BF16_FLAGS)
    assert ("bf16" in ov_library.offered_precisions(flags)) == expected_bf16
    expected_int8 = "INT8" in capabilities and bool(flags & ov_library.INT8_FLAGS)
    assert ("int8" in ov_library.offered_precisions(flags)) == expected_int8
    # each precision needs its own units: VNNI alone offers int8, not bf16
    vnni_only = without | {"avx512_vnni"}
    assert "bf16" not in ov_library.offered_precisions(vnni_only)
    assert ("int8" in ov_library.offered_precisions(vnni_only)) == ("INT8" in capabilities)


def test_a_precision_the_machine_lacks_is_one_clear_error(monkeypatch: Any) -> None:
    monkeypatch.setattr(ovgen.OpenVinoCodegen, "precisions", classmethod(lambda cls: ("f32",)))
    with pytest.raises(TargetError, match="cannot compute in bf16 on this machine"):
        resolve("cpu@openvino:bf16")
    assert "cpu@openvino:bf16" not in {str(t) for t in available_targets()}


# -- support predicate ------------------------------------------------------------------------
def test_supports_accepts_and_refuses_by_probing() -> None:
    codegen = ovgen.OpenVinoCodegen()
    assert codegen.supports(tiny_graph("Erf").nodes[0], tiny_graph("Erf"))
    custom = tiny_graph("Frobnicate", domain="com.example", opsets={"": 17, "com.example": 1})
    assert not codegen.supports(custom.nodes[0], custom)
    assert codegen.reason(custom.nodes[0], custom)
    with pytest.raises(UnsupportedOpError, match="Frobnicate"):
        codegen.compile(custom, custom.nodes, ["x"], ["y"])


def test_supports_refuses_unknown_rank_and_graph_attributes_without_probing(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr(ovprobe, "_run_probe", lambda node, graph: pytest.fail("probed"))
    body = onnx.helper.make_graph([], "body", [], [])
    branchy = tiny_graph("If", attrs={"then_branch": body, "else_branch": body})
    assert not ovgen.OpenVinoCodegen().supports(branchy.nodes[0], branchy)
    unranked = tiny_graph("Relu")
    unranked.values["x"].shape = None
    assert not ovgen.OpenVinoCodegen().supports(unranked.nodes[0], unranked)
    assert "rank" in (ovgen.OpenVinoCodegen().reason(unranked.nodes[0], unranked) or "")


def test_probes_are_memoised_per_signature(monkeypatch: Any) -> None:
    ovprobe.clear_probe_cache()
    calls: list[str] = []
    real = ovprobe._run_probe

    def counting(node: Node, graph: Graph) -> tuple[bool, str]:
        calls.append(node.op_type)
        return real(node, graph)

    monkeypatch.setattr(ovprobe, "_run_probe", counting)
    codegen = ovgen.OpenVinoCodegen()
    graph = autopart.load("squeezenet")
    assert all(codegen.supports(node, graph) for node in graph.nodes)
    first = len(calls)
    assert 0 < first < len(graph.nodes)  # many nodes share a signature
    assert all(codegen.supports(node, graph) for node in graph.nodes)
    assert len(calls) == first


def test_compiled_models_are_cached_per_subgraph_and_target() -> None:
    graph = tiny_graph("Relu")
    whole = [compile_whole(graph) for _ in range(2)]
    unit = compile_whole(graph, Placement(HostDevice(), unit=0))
    assert whole[0].model is whole[1].model
    assert unit.model is not whole[0].model
    assert whole[0]._request is not whole[1]._request  # each subgraph has its own request


def test_the_cache_of_compiled_models_keeps_within_its_bytes(monkeypatch: Any) -> None:
    from autopart.targets.openvino import library

    library.clear_compiled()
    graph = tiny_graph("Relu")
    first = compile_whole(graph)
    monkeypatch.setattr(library, "COMPILED_CACHE_BYTES", len(first.model_bytes) + 1)
    assert compile_whole(graph).model is first.model  # one model fits: reused
    other = compile_whole(graph, Placement(HostDevice(), unit=0))  # another config: evicts
    assert list(library._COMPILED.values()) == [other.model] and other.model is not first.model
    assert compile_whole(graph).model is first.model  # still held: shared, not compiled again
    assert sum(library._COMPILED_BYTES.values()) <= library.COMPILED_CACHE_BYTES
    monkeypatch.setattr(library, "COMPILED_CACHE_BYTES", len(first.model_bytes) - 1)
    del first, other
    alone = compile_whole(graph)  # over the limit: runs, but is not kept, not even alone
    assert not library._COMPILED and not library._COMPILED_BYTES
    held = weakref.ref(alone.model)
    del alone
    assert held() is None  # the cache kept no reference of its own
    library.clear_compiled()


def test_forgetting_compiled_models_empties_the_cache_and_leaves_held_ones_running() -> None:
    from autopart.targets.openvino import library
    from autopart.targets.registry import forget_compiled

    graph = tiny_graph("Relu")
    held = compile_whole(graph)
    assert library._COMPILED
    forget_compiled()
    assert not library._COMPILED and not library._COMPILED_BYTES
    env: dict[str, Any] = dict(random_inputs(graph, 0))
    held.run(env)
    assert np.array_equal(env["y"], np.maximum(env["x"], 0))
    assert compile_whole(graph).model is held.model  # held: shared, not compiled again
    forget_compiled()  # that compile cached it again
    gone = weakref.ref(held.model)
    del held
    assert gone() is None  # forgotten: nothing but its runner held it


# -- units ------------------------------------------------------------------------------------
@pytest.mark.skipif(not CORES, reason="no CPU affinity control on this platform")
def test_unit_has_one_thread_per_core_and_pins_only_during_the_call(monkeypatch: Any) -> None:
    graph = autopart.load("squeezenet")
    compiled = compile_whole(graph, Placement(HostDevice(), unit=0))
    assert compiled.cores == (CORES[0],)
    assert int(compiled.model.get_property("INFERENCE_NUM_THREADS")) == 1
    assert not compiled.model.get_property("ENABLE_CPU_PINNING")
    seen: list[set[int]] = []
    request = compiled._request

    class Recording:
        def infer(self, *args: Any, **kwargs: Any) -> Any:
            seen.append(os.sched_getaffinity(0))
            return request.infer(*args, **kwargs)

    compiled._request = Recording()
    feeds = random_inputs(graph, seed=3)
    expected = Executor(graph).run(feeds).outputs
    errors: list[BaseException] = []

    def check() -> None:
        try:
            before = os.sched_getaffinity(0)
            env: dict[str, Any] = dict(feeds)
            compiled.run(env)
            assert os.sched_getaffinity(0) == before
            for name in graph.outputs:
                assert max_relative_error(expected[name], env[name]) <= TOLERANCE
        except BaseException as error:
            errors.append(error)

    check()
    thread = threading.Thread(target=check)
    thread.start()
    thread.join()
    assert not errors, errors
    assert seen == [{CORES[0]}, {CORES[0]}]


def test_whole_device_sets_only_the_latency_hint_and_f32_without_int8_activations() -> None:
    compiled = compile_whole(tiny_graph("Relu"))
    assert compiled.cores == ()
    assert compiled.config == {
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": "f32",
        "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0",
    }


def test_targets_include_the_device_and_its_units() -> None:
    targets = {str(t) for t in available_targets()}
    assert "cpu@openvino" in targets
    assert {f"cpu/{index}@openvino" for index in range(len(HostDevice().units))} <= targets
    assert ("cpu@openvino:bf16" in targets) == BF16
    assert {str(t) for t in available_targets(precisions=["f32"])} == {
        t for t in targets if ":" not in t.split("@")[-1]
    }


# -- layouts ----------------------------------------------------------------------------------
def conv_graph(channels: int = 16, size: int = 28) -> Graph:
    """One 3x3 Conv over a [1, channels, size, size] input (OpenVINO runs it blocked)."""
    weight = np.random.default_rng(0).standard_normal((channels, channels, 3, 3))
    node = onnx.helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    shape = [1, channels, size, size]
    graph = onnx.helper.make_graph(
        [node],
        "conv",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, shape)],
        [onnx.numpy_helper.from_array(weight.astype(np.float32), "w")],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
    return autopart.load(model)


def test_layout_samples_time_the_reorders_of_a_conv_and_none_of_a_relu() -> None:
    graph = conv_graph()
    compiled = compile_whole(graph)
    env: dict[str, Any] = dict(random_inputs(graph, seed=0))
    samples = compiled.layout_samples(env, 4)
    layouts, kernels = zip(*samples, strict=True)
    assert len(samples) == 4 and all(layout > 0.0 for layout in layouts)
    # a part of each run, beside its kernels' time on the same counters (not against the
    # wall clock: a Zen 5 VM's counters gave 68, 60, 1014 and 812 us in a 50 us run)
    assert all(kernel > 0.0 for kernel in kernels)
    relu = compile_whole(tiny_graph("Relu"))
    relu_samples = relu.layout_samples({"x": np.ones((2, 3), np.float32)}, 3)
    assert [layout for layout, _ in relu_samples] == [0.0, 0.0, 0.0]


# -- contract details -------------------------------------------------------------------------
def test_registered_and_described() -> None:
    codegen = get_codegen("openvino")
    assert isinstance(codegen, ovgen.OpenVinoCodegen)
    assert codegen.device_kind == "cpu" and codegen.uses_units and codegen.available()
    assert codegen.fuses and codegen.converts_layouts


def test_passthrough_outputs_and_reading_undeclared_values() -> None:
    graph = tiny_graph("Relu")
    compiled = ovgen.OpenVinoCodegen().compile(graph, graph.nodes, ["x"], ["y", "x"])
    env: dict[str, Any] = {"x": np.array([[-1, 2, -3], [4, -5, 6]], np.float32)}
    compiled.run(env)
    np.testing.assert_array_equal(env["y"], np.maximum(env["x"], 0))
    with pytest.raises(TargetError, match="neither inputs nor constants"):
        ovgen.OpenVinoCodegen().compile(graph, graph.nodes, [], ["y"])


def test_outputs_are_fresh_arrays_not_the_requests_buffers() -> None:
    graph = tiny_graph("Relu")
    compiled = ovgen.OpenVinoCodegen().compile(graph, graph.nodes, ["x"], ["y"])
    first: dict[str, Any] = {"x": np.ones((2, 3), np.float32)}
    compiled.run(first)
    compiled.run({"x": np.full((2, 3), 5.0, np.float32)})
    np.testing.assert_array_equal(first["y"], np.ones((2, 3), np.float32))


def test_scalar_boundary_input_keeps_its_rank() -> None:
    values = {
        "x": Value("x", (2, 3), np.dtype(np.float32)),
        "s": Value("s", (), np.dtype(np.float32)),
        "y": Value("y", (2, 3), np.dtype(np.float32)),
    }
    graph = Graph(
        "scalar", [Node("n0", "Mul", ["x", "s"], ["y"])], values, ["x", "s"], ["y"], {"": 17}
    )
    compiled = ovgen.OpenVinoCodegen().compile(graph, graph.nodes, ["x", "s"], ["y"])
    env: dict[str, Any] = {"x": np.ones((2, 3), np.float32), "s": np.array(2.5, np.float32)}
    compiled.run(env)
    np.testing.assert_array_equal(env["y"], np.full((2, 3), 2.5, np.float32))


def test_missing_openvino_fails_late_and_clearly(monkeypatch: Any) -> None:
    monkeypatch.setattr(ov_library, "HAVE_OPENVINO", False)
    codegen = ovgen.OpenVinoCodegen()
    graph = tiny_graph("Relu")
    assert not ovgen.OpenVinoCodegen.available()
    assert not codegen.supports(graph.nodes[0], graph)
    assert "cpu@openvino" not in {str(t) for t in available_targets()}
    with pytest.raises(TargetError) as raised:
        codegen.compile(graph, graph.nodes, ["x"], ["y"])
    assert str(raised.value) == "codegen openvino needs the openvino package: pip install openvino"


def test_module_imports_without_openvino() -> None:
    script = (
        "import sys; sys.modules['openvino'] = None\n"
        "from autopart.errors import TargetError\n"
        "from autopart.targets.openvino import codegen as m, library\n"
        "from autopart.targets.registry import codegen_names\n"
        "assert not library.HAVE_OPENVINO and not m.OpenVinoCodegen.available()\n"
        "assert 'openvino' in codegen_names()\n"
        "try:\n"
        "    m.OpenVinoCodegen().compile(None, [], [], [])\n"
        "except TargetError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == ov_library.MISSING_MESSAGE


def test_compiling_and_running_leaves_no_files(tmp_path: Path) -> None:
    work, scratch = tmp_path / "cwd", tmp_path / "tmp"
    work.mkdir()
    scratch.mkdir()
    # onnxruntime writes a telemetry session file into TMPDIR on import, pocl its kernel
    # cache: keep them out, so that only what OpenVINO and this codegen write is seen.
    script = (
        "import sys; sys.modules['onnxruntime'] = None; sys.modules['pyopencl'] = None\n"
        "import autopart\n"
        "from autopart import api\n"
        "from autopart.runtime import random_inputs\n"
        "from autopart.targets.registry import get_codegen\n"
        "plan, graph = api.make_plan('squeezenet', fallback='cpu@openvino')\n"
        "api.run_plan(plan, graph, random_inputs(graph, 0))\n"
        "compiled = get_codegen('openvino').compile(\n"
        "    graph, graph.nodes, [*graph.inputs, *graph.constants], graph.outputs)\n"
        "compiled.layout_samples(dict(random_inputs(graph, 0)), 2)\n"
    )
    shared_tmp = set(os.listdir("/tmp"))
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": os.getcwd()}
    subprocess.run([sys.executable, "-c", script], cwd=work, env=env, timeout=300, check=True)
    assert list(work.iterdir()) == [] and list(scratch.iterdir()) == []
    new = set(os.listdir("/tmp")) - shared_tmp
    # other processes share /tmp: only OpenVINO-looking leftovers count
    assert not [n for n in new if any(t in n.lower() for t in ("openvino", "ov_", ".blob"))]


def test_ops_openvino_computes_differently_are_refused_and_the_rest_match() -> None:
    rng = np.random.default_rng(0)
    row = rng.standard_normal((2, 3)).astype(np.float32)
    column = rng.standard_normal((1, 5, 1, 1)).astype(np.float32)
    image = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    pool = {"kernel_shape": [1, 1], "pads": [0, 0, 0, 0], "ceil_mode": 1}
    refused = [
        single_node_case("Softmax", {"axis": 0}, {"x": row}, opset=11),
        single_node_case("MaxPool", {**pool, "strides": [1, 2]}, {"x": image}),
    ]
    accepted = [
        single_node_case("Softmax", {"axis": 1}, {"x": column}, opset=11),  # trailing 1x1
        single_node_case("Softmax", {"axis": 0}, {"x": row}, opset=13),
        single_node_case("MaxPool", {**pool, "strides": [1, 3]}, {"x": image}),
    ]
    target = resolve("cpu@openvino")
    assert all(run_case(target, case) is None for case in refused)
    for case in accepted:
        got = run_case(target, case)
        assert got is not None, case.label
        for name, expected in reference(case).items():
            np.testing.assert_allclose(got[name], expected, rtol=1e-4, atol=1e-4)


def test_the_compiled_model_cache_keeps_the_most_recently_used(monkeypatch: Any) -> None:
    monkeypatch.setattr(ov_library, "COMPILED_CACHE_SIZE", 1)
    ov_library.clear_compiled()
    relu, erf = compile_whole(tiny_graph("Relu")), compile_whole(tiny_graph("Erf"))
    assert list(ov_library._COMPILED.values()) == [erf.model]
    gone = weakref.ref(relu.model)
    del relu
    assert gone() is None  # evicted: nothing but its runner held it


def test_an_error_openvino_raises_while_running_is_one_execution_error() -> None:
    from autopart.errors import ExecutionError

    compiled = compile_whole(tiny_graph("Relu"))
    env: dict[str, Any] = {"x": np.ones((5, 7, 9), np.float32)}  # not the compiled shape
    with pytest.raises(ExecutionError, match=r"^openvino failed computing y: ") as caught:
        compiled.run(env)
    assert "\n" not in str(caught.value)
