"""The onnxruntime codegen: whole graphs and partitions match numpy; support; units; absence."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import threading
from typing import Any

import numpy as np
import onnx
import pytest
from scipy.special import erf

import autopart
from autopart.errors import TargetError, UnsupportedOpError
from autopart.ir.graph import Graph, Node, Value
from autopart.plan.partition import boundary
from autopart.runtime import Executor, random_inputs
from autopart.targets.codegen import HOST, Placement
from autopart.targets.devices import HostDevice, Unit
from autopart.targets.onnxruntime import codegen as ortgen
from autopart.targets.registry import get_codegen
from tests.conftest import max_relative_error, zoo_params

pytest.importorskip("onnxruntime")

CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
needs_two_cores = pytest.mark.skipif(len(CORES) < 2, reason="needs two usable cores")


def compile_whole(graph: Graph, placement: Placement = HOST) -> ortgen.OnnxRuntimeSubgraph:
    constants = [name for name, value in graph.values.items() if value.is_const]
    return ortgen.OnnxRuntimeCodegen().compile(
        graph, graph.nodes, [*graph.inputs, *constants], graph.outputs, placement
    )


def assert_matches_reference(graph: Graph, placement: Placement = HOST) -> None:
    feeds = random_inputs(graph, seed=3)
    reference = Executor(graph).run(feeds).outputs
    env: dict[str, Any] = dict(feeds)
    compile_whole(graph, placement).run(env)
    for name in graph.outputs:
        assert env[name].shape == reference[name].shape
        assert max_relative_error(reference[name], env[name]) <= 1e-3, name


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
@pytest.mark.parametrize("name", zoo_params())
def test_zoo_model_wholly_on_onnxruntime_matches_numpy(name: str) -> None:
    assert_matches_reference(autopart.load(name))


def test_transformer_wholly_on_onnxruntime_matches_numpy(transformer_path: Any) -> None:
    assert_matches_reference(autopart.load(transformer_path))


def test_partition_in_the_middle_of_resnet50_matches_numpy() -> None:
    graph = autopart.load("resnet50")
    feeds = random_inputs(graph, seed=3)
    constants = [name for name, value in graph.values.items() if value.is_const]
    # Keep every intermediate of the reference run: list them all as outputs.
    every = [name for node in graph.nodes for name in node.outputs if name]
    numpy_all = get_codegen("numpy").compile(graph, graph.nodes, [*graph.inputs, *constants], every)
    reference: dict[str, Any] = {**graph.constants, **feeds}
    numpy_all.run(reference)

    part = graph.nodes[10:41]
    inputs, outputs = boundary(graph, part)
    assert inputs and outputs
    compiled = ortgen.OnnxRuntimeCodegen().compile(graph, part, [*inputs, *constants], outputs)
    assert compiled.feeds == inputs  # constants are embedded, not fed
    model = onnx.load_from_string(compiled.model_bytes)
    assert [i.name for i in model.graph.input] == inputs
    assert sorted(o.name for o in model.graph.output) == sorted(outputs)

    env = {name: reference[name] for name in inputs}
    seconds = compiled.run_timed(env)
    assert seconds > 0
    for name in outputs:
        assert max_relative_error(reference[name], env[name]) <= 1e-3, name
    assert set(env) == set(inputs) | set(outputs)


# -- support predicate ------------------------------------------------------------------------
def test_supports_accepts_what_onnxruntime_implements() -> None:
    codegen = ortgen.OnnxRuntimeCodegen()
    assert codegen.supports(tiny_graph("Erf").nodes[0], tiny_graph("Erf"))
    gelu = tiny_graph("Gelu", domain="com.microsoft", opsets={"": 17, "com.microsoft": 1})
    assert codegen.supports(gelu.nodes[0], gelu)  # a non-default domain, probed OK


def test_supports_refuses_an_op_dtype_onnxruntime_lacks() -> None:
    # Erf on float64 is valid ONNX, but onnxruntime's CPU provider has only a float kernel.
    graph = tiny_graph("Erf", np.float64)
    codegen = ortgen.OnnxRuntimeCodegen()
    assert not codegen.supports(graph.nodes[0], graph)
    assert "NOT_IMPLEMENTED" in (codegen.reason(graph.nodes[0], graph) or "")
    with pytest.raises(UnsupportedOpError, match="Erf"):
        codegen.compile(graph, graph.nodes, ["x"], ["y"])


def test_supports_refuses_a_custom_domain_op() -> None:
    graph = tiny_graph("Frobnicate", domain="com.example", opsets={"": 17, "com.example": 1})
    assert not ortgen.OnnxRuntimeCodegen().supports(graph.nodes[0], graph)


def test_supports_probes_control_flow_with_its_subgraphs_and_outer_reads() -> None:
    """An If whose branches read an outer value is probed whole; a broken one is refused."""
    info = onnx.helper.make_tensor_value_info
    f32, boolean = onnx.TensorProto.FLOAT, onnx.TensorProto.BOOL

    def branch(op: str) -> onnx.GraphProto:
        node = onnx.helper.make_node(op, ["a"], [f"{op}_out"])
        return onnx.helper.make_graph([node], op, [], [info(f"{op}_out", f32, [2, 3])])

    nodes = [
        onnx.helper.make_node("Relu", ["x"], ["a"]),
        onnx.helper.make_node(
            "If", ["c"], ["y"], then_branch=branch("Neg"), else_branch=branch("Abs")
        ),
    ]
    inputs = [info("x", f32, [2, 3]), info("c", boolean, [])]
    model = onnx.helper.make_model(
        onnx.helper.make_graph(nodes, "g", inputs, [info("y", f32, [2, 3])]),
        opset_imports=[onnx.helper.make_opsetid("", 17)],
    )
    graph = autopart.load(model)
    node = next(n for n in graph.nodes if n.op_type == "If")
    assert node.captures == ["a"]
    codegen = ortgen.OnnxRuntimeCodegen()
    assert codegen.supports(node, graph), codegen.reason(node, graph)
    empty = onnx.helper.make_graph([], "body", [], [])
    broken = tiny_graph("If", attrs={"then_branch": empty, "else_branch": empty})
    assert not codegen.supports(broken.nodes[0], broken)
    assert codegen.reason(broken.nodes[0], broken)


def test_probes_are_memoised_per_signature(monkeypatch: Any) -> None:
    ortgen.clear_probe_cache()
    calls = []
    real = ortgen._run_probe

    def counting(node: Node, graph: Graph) -> tuple[bool, str]:
        calls.append(node.op_type)
        return real(node, graph)

    monkeypatch.setattr(ortgen, "_run_probe", counting)
    codegen = ortgen.OnnxRuntimeCodegen()
    graph = autopart.load("squeezenet")
    assert all(codegen.supports(node, graph) for node in graph.nodes)
    first = len(calls)
    assert 0 < first < len(graph.nodes)
    assert all(codegen.supports(node, graph) for node in graph.nodes)
    assert len(calls) == first


# -- units and threads ------------------------------------------------------------------------
class _RecordingSession:
    """Wraps a session; records the calling thread's affinity inside ``run``."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.seen: list[set[int]] = []

    def run(self, *args: Any) -> Any:
        self.seen.append(os.sched_getaffinity(0))
        return self.session.run(*args)


@pytest.mark.skipif(not CORES, reason="no CPU affinity control on this platform")
def test_unit_pins_the_calling_thread_and_restores_its_mask() -> None:
    graph = autopart.load("squeezenet")
    compiled = compile_whole(graph, Placement(HostDevice(), unit=0))
    assert compiled.intra_op_num_threads == 1
    assert compiled.cores == (CORES[0],)
    recorder = _RecordingSession(compiled.session)
    compiled.session = recorder
    feeds = random_inputs(graph, seed=3)
    expected = Executor(graph).run(feeds).outputs

    def check() -> None:
        before = os.sched_getaffinity(0)
        env: dict[str, Any] = dict(feeds)
        compiled.run(env)
        assert os.sched_getaffinity(0) == before
        for name in graph.outputs:
            assert max_relative_error(expected[name], env[name]) <= 1e-3

    check()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            check()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert not errors, errors
    assert recorder.seen == [{CORES[0]}, {CORES[0]}]


@needs_two_cores
def test_multi_core_unit_gets_a_pinned_thread_pool() -> None:
    class TwoCoreHost(HostDevice):
        def __init__(self) -> None:
            super().__init__()
            self.units = [Unit(0, "two cores", tuple(CORES[:2]))]

    graph = autopart.load("squeezenet")
    compiled = compile_whole(graph, Placement(TwoCoreHost(), unit=0))
    assert compiled.intra_op_num_threads == 2
    options = compiled.session.get_session_options()
    ids = ",".join(str(core + 1) for core in CORES[:2])
    assert options.get_session_config_entry("session.intra_op_thread_affinities") == ids
    before = os.sched_getaffinity(0)
    env: dict[str, Any] = dict(random_inputs(graph, seed=3))
    compiled.run(env)
    assert os.sched_getaffinity(0) == before


def test_without_unit_uses_every_core_unpinned() -> None:
    graph = tiny_graph("Relu")
    compiled = compile_whole(graph)
    assert compiled.cores == ()
    assert compiled.intra_op_num_threads == max(len(CORES), 1)


def test_a_partition_sharing_its_plan_turns_spinning_off() -> None:
    options = compile_whole(tiny_graph("Relu")).session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_a_plan_s_only_partition_gets_onnxruntime_s_default_options() -> None:
    graph = tiny_graph("Relu")
    compiled = compile_whole(graph, Placement(HostDevice(), alone=True))
    options = compiled.session.get_session_options()
    with pytest.raises(Exception, match="allow_spinning"):
        options.get_session_config_entry("session.intra_op.allow_spinning")
    assert options.intra_op_num_threads == 0  # onnxruntime chooses, as when used alone
    env: dict[str, Any] = dict(random_inputs(graph, seed=1))
    compiled.run(env)
    assert np.allclose(env[graph.outputs[0]], np.maximum(env[graph.inputs[0]], 0))


def test_an_only_partition_keeps_to_the_cores_this_process_may_use() -> None:
    from autopart.targets.cpu_units import allowed_cores, pinned_to

    if len(allowed_cores()) < 2 or (os.cpu_count() or 0) < 2:
        pytest.skip("needs two cores to keep to one")
    with pinned_to(allowed_cores()[:1]):  # as a host of a local:2 cluster is kept
        compiled = compile_whole(tiny_graph("Relu"), Placement(HostDevice(), alone=True))
    # onnxruntime's default counts the machine's cores: its extra thread would share ours
    assert compiled.session.get_session_options().intra_op_num_threads == 1


def test_onnxruntime_alone_and_the_plan_it_stands_for_share_one_session_while_held(
    tmp_path: Any,
) -> None:
    """The whole-device plan's only partition is onnxruntime alone's session of the model as
    shipped: while one holds it, the other gets that same session (the race holds both);
    freed, nothing else keeps it alive."""
    import gc
    import weakref

    from autopart.targets.onnxruntime import peer
    from autopart.targets.peer import peer_model_bytes
    from autopart.testing.scale_models import op_chain

    path = tmp_path / "chain.onnx"
    onnx.save(op_chain(30), path)
    graph = autopart.load(str(path))
    compiled = compile_whole(graph, Placement(HostDevice(), alone=True))
    assert peer.default_session(peer_model_bytes(str(path))) is compiled.session
    runner = peer.onnxruntime_alone(str(path))
    env: dict[str, Any] = dict(random_inputs(graph, seed=2))
    compiled.run(env)
    ran = runner(random_inputs(graph, seed=2))
    np.testing.assert_array_equal(ran[graph.outputs[0]], env[graph.outputs[0]])
    split = compile_whole(graph, Placement(HostDevice()))  # not alone: its own options
    assert split.session is not compiled.session
    gone = weakref.ref(compiled.session)
    del compiled, runner
    gc.collect()
    assert gone() is None


def test_plan_executor_compiles_a_lone_partition_at_defaults_and_split_ones_not() -> None:
    from autopart.ir.target import VirtualDevice
    from autopart.plan.build import build_plan_for
    from autopart.runtime.plan_executor import PlanExecutor

    graph = autopart.load("squeezenet")
    numpy_, ort = VirtualDevice.parse("cpu@numpy"), VirtualDevice.parse("cpu@onnxruntime")
    names = [node.name for node in graph.nodes]
    whole = build_plan_for(graph, dict.fromkeys(names, ort), numpy_, "whole")
    first_on_numpy = {name: numpy_ if i == 0 else ort for i, name in enumerate(names)}
    split = build_plan_for(graph, first_on_numpy, numpy_, "split")
    spinning = "session.intra_op.allow_spinning"

    def entries(plan: Any) -> list[str | None]:
        found = []
        with PlanExecutor(plan, graph) as executor:
            for step in executor.steps.values():
                if isinstance(step.compiled, ortgen.OnnxRuntimeSubgraph):
                    options = step.compiled.session.get_session_options()
                    try:
                        found.append(options.get_session_config_entry(spinning))
                    except Exception:
                        found.append(None)
        return found

    assert entries(whole) == [None]
    assert entries(split) == ["0"]


def test_a_lone_partition_runs_bare_and_gives_what_its_environment_run_gives() -> None:
    """A one-partition plan runs the session's own call (whole_runner): same outputs as
    run(env) and onnxruntime's; a unit's partition (pinned cores) keeps the environment."""
    from autopart.ir.target import VirtualDevice
    from autopart.plan.build import build_plan_for
    from autopart.runtime.plan_executor import PlanExecutor

    graph = autopart.load("squeezenet")
    feeds = random_inputs(graph, seed=3)
    compiled = compile_whole(graph, Placement(HostDevice(), alone=True))
    bare = compiled.whole_runner()
    assert bare is not None
    env: dict[str, Any] = dict(feeds)
    compiled.run(env)
    got = bare({name: np.ascontiguousarray(array) for name, array in feeds.items()})
    assert set(got) == set(compiled.outputs)
    for name in compiled.outputs:
        assert np.array_equal(got[name], env[name])
    numpy_, ort = VirtualDevice.parse("cpu@numpy"), VirtualDevice.parse("cpu@onnxruntime")
    plan = build_plan_for(graph, dict.fromkeys([n.name for n in graph.nodes], ort), numpy_, "w")
    with PlanExecutor(plan, graph) as executor:
        result = executor.run(feeds, repeat=3, warmup=1)
    assert len(result.latencies) == 3
    for name in graph.outputs:
        assert np.array_equal(result.outputs[name], env[name])
    pinned = compile_whole(graph, Placement(HostDevice(), unit=0))
    assert pinned.whole_runner() is None


def test_unknown_unit_is_a_target_error() -> None:
    graph = tiny_graph("Relu")
    with pytest.raises(TargetError, match="no unit 999"):
        compile_whole(graph, Placement(HostDevice(), unit=999))


# -- contract details -------------------------------------------------------------------------
def test_registered_and_described() -> None:
    codegen = get_codegen("onnxruntime")
    assert isinstance(codegen, ortgen.OnnxRuntimeCodegen)
    assert codegen.device_kind == "cpu" and codegen.uses_units and codegen.available()


def test_passthrough_outputs_and_reading_undeclared_values() -> None:
    graph = tiny_graph("Relu")
    compiled = ortgen.OnnxRuntimeCodegen().compile(graph, graph.nodes, ["x"], ["y", "x"])
    env: dict[str, Any] = {"x": np.array([[-1, 2, -3], [4, -5, 6]], np.float32)}
    compiled.run(env)
    np.testing.assert_array_equal(env["y"], np.maximum(env["x"], 0))
    with pytest.raises(TargetError, match="neither inputs nor constants"):
        ortgen.OnnxRuntimeCodegen().compile(graph, graph.nodes, [], ["y"])


def test_missing_onnxruntime_fails_late_and_clearly(monkeypatch: Any) -> None:
    monkeypatch.setattr(ortgen, "HAVE_ONNXRUNTIME", False)
    codegen = ortgen.OnnxRuntimeCodegen()
    graph = tiny_graph("Relu")
    assert not ortgen.OnnxRuntimeCodegen.available()
    assert not codegen.supports(graph.nodes[0], graph)
    with pytest.raises(TargetError) as raised:
        codegen.compile(graph, graph.nodes, ["x"], ["y"])
    assert str(raised.value) == (
        "codegen onnxruntime needs the onnxruntime package: pip install onnxruntime"
    )


def test_non_default_domain_subgraph_compiles_and_runs() -> None:
    # to_onnx cannot pick an IR version for com.microsoft; the codegen exports around it.
    graph = tiny_graph("Gelu", domain="com.microsoft", opsets={"": 17, "com.microsoft": 1})
    compiled = ortgen.OnnxRuntimeCodegen().compile(graph, graph.nodes, ["x"], ["y"])
    x = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
    env: dict[str, Any] = {"x": x}
    compiled.run(env)
    np.testing.assert_allclose(env["y"], 0.5 * x * (1 + erf(x / np.sqrt(2))), rtol=1e-5, atol=1e-6)


def test_module_imports_without_onnxruntime() -> None:
    script = (
        "import sys; sys.modules['onnxruntime'] = None\n"
        "from autopart.errors import TargetError\n"
        "from autopart.targets.onnxruntime import codegen as m\n"
        "assert not m.HAVE_ONNXRUNTIME and not m.OnnxRuntimeCodegen.available()\n"
        "try:\n"
        "    m.OnnxRuntimeCodegen().compile(None, [], [], [])\n"
        "except TargetError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == ortgen.MISSING_MESSAGE


def test_scalar_boundary_input_keeps_its_rank() -> None:
    values = {
        "x": Value("x", (2, 3), np.dtype(np.float32)),
        "s": Value("s", (), np.dtype(np.float32)),
        "y": Value("y", (2, 3), np.dtype(np.float32)),
    }
    graph = Graph(
        "scalar", [Node("n0", "Mul", ["x", "s"], ["y"])], values, ["x", "s"], ["y"], {"": 17}
    )
    compiled = ortgen.OnnxRuntimeCodegen().compile(graph, graph.nodes, ["x", "s"], ["y"])
    env: dict[str, Any] = {"x": np.ones((2, 3), np.float32), "s": np.array(2.5, np.float32)}
    compiled.run(env)
    np.testing.assert_array_equal(env["y"], np.full((2, 3), 2.5, np.float32))


# -- layout conversions -----------------------------------------------------------------------
def conv_graph(channels: int = 16, size: int = 28) -> Graph:
    """One 3x3 Conv over a [1, channels, size, size] input (onnxruntime runs it blocked)."""
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


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"), reason="onnxruntime blocks layouts on x86 only"
)
def test_layout_samples_time_the_reorders_of_a_blocked_conv_and_none_of_a_relu() -> None:
    graph = conv_graph()
    compiled = compile_whole(graph)
    env: dict[str, Any] = dict(random_inputs(graph, seed=0))
    samples = compiled.layout_samples(env, 4)
    wall = float(np.median([compiled.run_timed(env) for _ in range(9)]))
    layouts, kernels = zip(*samples, strict=True)
    assert len(samples) == 4 and all(layout > 0.0 for layout in layouts)
    assert all(kernel > 0.0 for kernel in kernels)
    assert float(np.median(layouts)) < wall  # a part of the run, not all of it
    relu = compile_whole(tiny_graph("Relu"))
    relu_samples = relu.layout_samples({"x": np.ones((2, 3), np.float32)}, 3)
    assert [layout for layout, _ in relu_samples] == [0.0, 0.0, 0.0]
    assert all(kernel > 0.0 for _, kernel in relu_samples)


def test_codegens_without_layouts_report_zero_layout_time() -> None:
    graph = tiny_graph("Relu")
    compiled = get_codegen("numpy").compile(graph, graph.nodes, ["x"], ["y"])
    assert compiled.layout_samples({"x": np.ones((2, 3), np.float32)}, 2) == [(0.0, 0.0)] * 2
    assert not get_codegen("numpy").converts_layouts and ortgen.OnnxRuntimeCodegen.converts_layouts


def test_layout_seconds_are_summed_per_run() -> None:
    def kernel(ts: int, dur: int, op: str) -> dict[str, Any]:
        return {"cat": "Node", "name": f"n_{ts}_kernel_time", "ts": ts, "dur": dur,
                "args": {"op_name": op}}  # fmt: skip

    events = [
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},
        kernel(5, 10, "ReorderInput"), kernel(20, 50, "Conv"), kernel(80, 4, "ReorderOutput"),
        {"cat": "Session", "name": "model_run", "ts": 200, "dur": 100},
        kernel(210, 60, "Conv"),
        {"cat": "Node", "name": "n_fence_before", "ts": 220, "dur": 30,
         "args": {"op_name": "ReorderInput"}},
    ]  # fmt: skip
    assert ortgen.layout_seconds_per_run(events, 2) == [
        pytest.approx((14e-6, 50e-6)), pytest.approx((0.0, 60e-6)),
    ]  # fmt: skip
    unmarked = [event for event in events if event["cat"] == "Node"]
    assert ortgen.layout_seconds_per_run(unmarked, 2) == [pytest.approx((7e-6, 55e-6))] * 2
