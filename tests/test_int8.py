"""int8 on OpenVINO: calibration, QDQ compiles, exclusion, caches, sensitivities, tune."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

import autopart
from autopart.costmodel import costs_from_profile
from autopart.errors import InputError
from autopart.io import save_tensors
from autopart.ir.graph import Graph
from autopart.ir.onnx_export import to_onnx
from autopart.ir.target import VirtualDevice
from autopart.plan.build import build_plan_for
from autopart.profile import Profile
from autopart.profile.sensitivity import measure_error_model
from autopart.runtime import random_inputs
from autopart.runtime.plan_executor import PlanExecutor
from autopart.search.candidates import CandidateKind
from autopart.settings import COMMON
from autopart.targets import qdq, quant_ranges
from autopart.targets.openvino import agreement, agreement_store, library, quantize
from autopart.targets.openvino import codegen as ovgen
from autopart.tuning.options import TuneOptions
from autopart.tuning.workflow import tune_model
from tests.test_errors import invoke

INT8 = ovgen.OpenVinoCodegen.available() and "int8" in ovgen.OpenVinoCodegen.precisions()
BF16 = ovgen.OpenVinoCodegen.available() and "bf16" in ovgen.OpenVinoCodegen.precisions()
needs_int8 = pytest.mark.skipif(
    not INT8, reason="this CPU has no int8 units (AVX2, VNNI or AMX) OpenVINO lists as INT8"
)
F32 = VirtualDevice.parse("cpu@openvino")
AT_INT8 = VirtualDevice.parse("cpu@openvino:int8")
AT_BF16 = VirtualDevice.parse("cpu@openvino:bf16")


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test calibrates and quantises into a cache folder of its own."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("AUTOPART_CACHE", str(folder))
    quant_ranges.forget_memo()
    library.clear_compiled()
    return folder


def forget_every_answer() -> None:
    """Forget the int8 agreement answers, in this process and on disk: probe afresh."""
    agreement.forget_answers()
    agreement_store.store_path(agreement.INT8_AGREEMENT).unlink(missing_ok=True)


def onnxruntime_outputs(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The f32 outputs of onnxruntime on the whole model."""
    session = ort.InferenceSession(
        to_onnx(graph).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return dict(zip(graph.outputs, session.run(graph.outputs, feeds), strict=True))


def relative_error(got: dict[str, Any], want: dict[str, np.ndarray]) -> float:
    """The largest error over the largest magnitude, over outputs."""
    return max(
        float(np.abs(np.asarray(got[n]) - want[n]).max() / np.abs(want[n]).max()) for n in want
    )


def run_mixed(graph: Graph, assignment: dict[str, VirtualDevice], feeds: dict[str, Any]) -> Any:
    """Run ``assignment`` as a plan; the outputs and its one partition's runtime ops."""
    plan = build_plan_for(graph, assignment, F32, "mixed")
    with PlanExecutor(plan, graph) as executor:
        outputs = executor.run(feeds).outputs
        steps = list(executor.steps.values())
        ops = [op for step in steps for op in quantize.runtime_ops(step.compiled.model)]  # type: ignore[union-attr]
    return plan, outputs, ops


def quantised_with_twice_the_weights(real: Callable[..., bytes]) -> Callable[..., bytes]:
    """``real`` (``qdq.quantised_once``) on a copy of the model whose weights are doubled:
    an int8 kernel that errs."""
    import onnx
    from onnx import numpy_helper

    def twice_the_weights(model: onnx.ModelProto, ranges: Any, nodes: Any) -> bytes:
        wrong = onnx.ModelProto()
        wrong.CopyFrom(model)
        for tensor in wrong.graph.initializer:
            doubled = numpy_helper.to_array(tensor) * 2
            tensor.CopyFrom(numpy_helper.from_array(doubled, tensor.name))
        return real(wrong, ranges, nodes)

    return twice_the_weights


@needs_int8
def test_an_int8_model_is_close_to_onnxruntime_and_its_convolutions_run_in_u8() -> None:
    graph = autopart.load("squeezenet")
    quantised = {n.name for n in graph.nodes if quantize.runs_in_int8(n, graph)}
    assert quantised == {n.name for n in graph.nodes if n.op_type in ("Conv", "MaxPool")}
    assignment = {n.name: AT_INT8 if n.name in quantised else F32 for n in graph.nodes}
    feeds = random_inputs(graph, 0)
    plan, outputs, ops = run_mixed(graph, assignment, feeds)
    assert [p.target for p in plan.partitions] == ["cpu@openvino"]  # one partition, mixed
    error = relative_error(outputs, onnxruntime_outputs(graph, feeds))
    assert COMMON.check_tolerance < error < 0.1  # int8: measurably off, and not wildly
    for name in quantised:
        assert quantize.in_int8(ops, graph.node(name)), name


@needs_int8
def test_a_configuration_whose_int8_kernel_errs_is_not_offered_at_int8(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    graph = autopart.load("squeezenet")
    conv = next(n for n in graph.nodes if n.op_type == "Conv")
    twice_the_weights = quantised_with_twice_the_weights(qdq.quantised_once)
    forget_every_answer()
    try:
        assert quantize.agrees_in_int8(conv, graph) and quantize.runs_in_int8(conv, graph)
        forget_every_answer()
        monkeypatch.setattr(qdq, "quantised_once", twice_the_weights)  # an int8 kernel that errs
        assert not quantize.agrees_in_int8(conv, graph)
        assert not quantize.runs_in_int8(conv, graph)
        assert not ovgen.OpenVinoCodegen().supports_at(conv, graph, qdq.PRECISION)
    finally:
        forget_every_answer()


@pytest.mark.parametrize(
    ("pads", "dilations", "only_padding"),
    [
        ([2, 0, 0, 0], [1, 1], True),  # 2 rows above a 2-high kernel: row 0 reads only them
        ([0, 0, 2, 0], [1, 1], True),  # and below
        ([0, 0, 0, 2], [1, 1], True),  # a column
        ([1, 1, 1, 1], [1, 1], False),
        ([2, 2, 2, 2], [2, 2], False),  # a dilated kernel spans 3
        ([3, 0, 0, 0], [2, 1], True),
    ],
)
def test_a_conv_whose_padding_fills_an_output_row_is_not_offered_at_int8(
    pads: list[int], dilations: list[int], only_padding: bool
) -> None:
    from autopart.ir.onnx_import import load_graph
    from autopart.testing.cases import single_node_case

    rng = np.random.default_rng(0)
    attrs = {"group": 4, "kernel_shape": [2, 2], "pads": pads, "dilations": dilations}
    x = rng.uniform(-1, 1, (1, 4, 7, 10)).astype(np.float32)
    w = rng.uniform(-0.5, 0.5, (8, 1, 2, 2)).astype(np.float32)
    graph = load_graph(single_node_case("Conv", attrs, {"x": x}, {"w": w}).model)
    conv = graph.nodes[0]
    assert quantize.reads_only_padding(conv, graph) is only_padding
    if only_padding:
        assert not quantize.runs_in_int8(conv, graph)
    elif INT8:
        assert quantize.runs_in_int8(conv, graph)


@needs_int8
def test_a_node_of_more_weights_than_a_batch_is_probed_alone_and_judged_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autopart.ir.onnx_import import load_graph
    from autopart.testing.cases import single_node_case

    rng = np.random.default_rng(0)
    columns = agreement.BATCH_BYTES // (4 * 512) + 1  # one node's weights pass a batch's
    w = rng.uniform(-0.5, 0.5, (512, columns)).astype(np.float32)
    x = rng.uniform(-1, 1, (2, 512)).astype(np.float32)
    graph = load_graph(single_node_case("MatMul", {}, {"x": x}, {"w": w}).model)
    matmul = graph.nodes[0]
    twice_the_weights = quantised_with_twice_the_weights(qdq.quantised_once)
    forget_every_answer()
    try:
        assert agreement.agrees_in_int8(matmul, graph)
        forget_every_answer()
        monkeypatch.setattr(qdq, "quantised_once", twice_the_weights)
        assert not agreement.agrees_in_int8(matmul, graph)
    finally:
        forget_every_answer()


def test_a_weight_is_hashed_once_while_it_lives(monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    weight = np.arange(6.0, dtype=np.float32)
    same, other = weight.copy(), weight + 1
    hashed: list[int] = []
    real = hashlib.sha256

    def counting(data: bytes) -> Any:
        hashed.append(len(data))
        return real(data)

    monkeypatch.setattr(agreement.hashlib, "sha256", counting)
    first = agreement._digest(weight)
    assert agreement._digest(weight) == first and len(hashed) == 1  # memoised
    assert agreement._digest(same) == first and agreement._digest(other) != first
    assert len(hashed) == 3


@needs_int8
def test_the_nodes_left_out_compute_at_their_own_precision() -> None:
    graph = autopart.load("squeezenet")
    convs = [n.name for n in graph.nodes if n.op_type == "Conv"]
    int8, rest = set(convs[::2]), set(convs[1::2])
    other = AT_BF16 if BF16 else F32
    assignment = {
        n.name: AT_INT8 if n.name in int8 else other if n.name in rest else F32 for n in graph.nodes
    }
    _, _, ops = run_mixed(graph, assignment, random_inputs(graph, 0))
    for name in int8:
        assert quantize.in_int8(ops, graph.node(name)), name
    for name in rest:
        found = quantize.computes_in(ops, graph.node(name))
        assert found and not found & quantize.INT8_RUNTIME, (name, found)
        if BF16:
            assert "bf16" in found, (name, found)


def test_ops_the_plugin_runs_in_float_are_not_offered_at_int8() -> None:
    graph = autopart.load("squeezenet")
    codegen = ovgen.OpenVinoCodegen()
    relu = next(n for n in graph.nodes if n.op_type == "Relu")
    conv = next(n for n in graph.nodes if n.op_type == "Conv")
    assert codegen.supports(relu, graph) and not codegen.supports_at(relu, graph, "int8")
    assert codegen.supports_at(conv, graph, "int8") == INT8
    assert codegen.supports_at(relu, graph, None) and codegen.supports_at(relu, graph, "bf16")


@needs_int8
def test_ranges_are_measured_once_and_a_damaged_cache_is_measured_again() -> None:
    graph = autopart.load("squeezenet")
    assignment = {n.name: AT_INT8 if n.op_type == "Conv" else F32 for n in graph.nodes}
    feeds = random_inputs(graph, 0)
    before, quantised = quant_ranges.calibrations, qdq.quantisations
    _, first, _ = run_mixed(graph, assignment, feeds)
    assert quant_ranges.calibrations == before + 1 and qdq.quantisations == quantised + 1
    path = quant_ranges.ranges_path(graph, quant_ranges.calibration_of(graph))
    stamp = path.stat().st_mtime_ns
    # a rerun (nothing memoised, nothing compiled) reads both caches
    quant_ranges.forget_memo()
    library.clear_compiled()
    _, again, _ = run_mixed(graph, assignment, feeds)
    assert quant_ranges.calibrations == before + 1 and qdq.quantisations == quantised + 1
    assert path.stat().st_mtime_ns == stamp
    np.testing.assert_array_equal(first[graph.outputs[0]], again[graph.outputs[0]])
    # a range changed behind the digest's back is not trusted: measured again and rewritten
    text = path.read_text()
    name = next(iter(quant_ranges.tensor_ranges(graph)))
    path.write_text(text.replace(f'"{name}": [', f'"{name}": [-1e6, 1e6, ', 1))
    quant_ranges.forget_memo()
    ranges = quant_ranges.tensor_ranges(graph)
    assert quant_ranges.calibrations == before + 2
    assert ranges[name][0] > -1e6 and path.read_text() == text
    # so is a file cut short
    path.write_bytes(text.encode()[: len(text) // 2])
    quant_ranges.forget_memo()
    assert quant_ranges.tensor_ranges(graph) == ranges
    assert quant_ranges.calibrations == before + 3


def test_a_quantised_model_is_cached_and_a_damaged_cache_is_quantised_again(
    own_cache: Path,
) -> None:
    graph = autopart.load("squeezenet")
    model = to_onnx(graph)
    nodes = [n.name for n in graph.nodes if n.op_type == "Conv"]
    ranges = quant_ranges.tensor_ranges(graph)
    before = qdq.quantisations
    first = qdq.quantise(model, ranges, nodes)
    assert qdq.quantise(model, ranges, nodes) == first and qdq.quantisations == before + 1
    (path,) = own_cache.rglob("qdq-*.onnx")
    data = path.read_bytes()
    assert data.startswith(b"autopart-qdq2 ") and data.endswith(first)
    for damaged in (data[:-1] + bytes([data[-1] ^ 1]), data[: len(data) // 2], b"x" + data[1:]):
        path.write_bytes(damaged)  # a flipped bit, a file cut short, a foreign header
        assert qdq.quantise(model, ranges, nodes) == first
        assert path.read_bytes() == data  # quantised again and rewritten whole
    assert qdq.quantisations == before + 4


def test_calibration_samples_from_a_sample_axis_and_from_a_folder(tmp_path: Path) -> None:
    graph = autopart.load("squeezenet")
    (name,) = graph.inputs
    samples = [random_inputs(graph, seed)[name] for seed in range(3)]
    stacked = tmp_path / "stacked.npz"
    save_tensors(stacked, {name: np.stack(samples)})
    loaded = quant_ranges.load_samples(stacked, graph)
    assert len(loaded) == 3
    for got, want in zip(loaded, samples, strict=True):
        np.testing.assert_array_equal(got[name], want)
    folder = tmp_path / "folder"
    folder.mkdir()
    save_tensors(folder / "a.npz", {name: samples[0]})  # one sample, the input's shape
    save_tensors(folder / "b.npz", {name: np.stack(samples[1:])})
    from_folder = quant_ranges.load_samples(folder, graph)
    assert [float(s[name].sum()) for s in from_folder] == [float(s.sum()) for s in samples]
    along_batch = tmp_path / "along_batch.npz"  # N images stacked where the model takes 1
    save_tensors(along_batch, {name: np.concatenate(samples)})
    by_batch = quant_ranges.load_samples(along_batch, graph)
    assert [s[name].shape for s in by_batch] == [samples[0].shape] * 3
    assert all((got[name] == want).all() for got, want in zip(by_batch, samples, strict=True))
    save_tensors(tmp_path / "bad.npz", {name: samples[0][..., :5]})
    with pytest.raises(InputError, match="neither one sample"):
        quant_ranges.load_samples(tmp_path / "bad.npz", graph)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match=r"no \.npz"):
        quant_ranges.load_samples(empty, graph)
    # other samples, other ranges, another cache file
    given = quant_ranges.CalibrationSamples(tuple(loaded), stand_in=False)
    assert given.digest != quant_ranges.random_calibration(graph).digest
    ranges = quant_ranges.tensor_ranges(graph, given)
    assert quant_ranges.ranges_path(graph, given).exists()
    low, high = ranges[name]
    assert low == pytest.approx(float(np.min(samples))) and high == pytest.approx(
        float(np.max(samples))
    )


@pytest.mark.parametrize("model", ["squeezenet", pytest.param("resnet50", marks=pytest.mark.slow)])
@needs_int8
def test_emulated_int8_agrees_with_openvinos_int8_on_zoo_models(model: str) -> None:
    graph = autopart.load(model)
    feeds = random_inputs(graph, 0)
    budget = measure_error_model(graph, feeds, "int8", None)
    assignment = {n.name: AT_INT8 if quantize.runs_in_int8(n, graph) else F32 for n in graph.nodes}
    _, outputs, _ = run_mixed(graph, assignment, feeds)
    real = relative_error(outputs, onnxruntime_outputs(graph, feeds))
    assert budget.all_reduced / 2 < real < budget.all_reduced * 2, (budget.all_reduced, real)
    # the weights add up to every quantisable node in int8, and only those carry any
    assert budget.predicted_error(assignment) == pytest.approx(budget.all_reduced, rel=1e-6)
    assert {node for node, _ in budget.weights} <= {n for n, t in assignment.items() if t.reduced}


@pytest.mark.slow
@needs_int8
def test_tune_under_a_loose_tolerance_can_choose_int8_and_stays_within_it(tmp_path: Path) -> None:
    graph = autopart.load("squeezenet")
    (name,) = graph.inputs
    samples = tmp_path / "samples.npz"
    save_tensors(samples, {name: np.stack([random_inputs(graph, 50 + i)[name] for i in range(4)])})
    # loose on every CPU: OpenVINO's int8 kernels differ by instruction set, so the bound is
    # a multiple of int8's own error here (emulated, as the budget predicts it), never below 5%
    emulated = measure_error_model(graph, random_inputs(graph, 53), "int8", None).all_reduced
    loose = max(0.05, 3 * emulated)
    options = TuneOptions.build(
        targets=["cpu@openvino", "cpu@openvino:int8"],
        precision="f32,bf16,int8",
        tolerance=loose,
        dataset=samples,
        validation_split=0.25,
        profiles_dir=tmp_path / "p",
        search_dir=tmp_path / "s",
        rounds=3,
        peers=False,
    )
    report = tune_model("squeezenet", options)
    assert "int8: calibrated on 3 samples given" in report.notes
    candidates = report.outcome.candidates
    reduced = [  # a plan running any node at int8, by its name or its assignment
        r for r in report.rows
        if r.measured_s is not None and (":int8" in r.name or (
            r.name in candidates
            and any(t.precision == "int8" for t in candidates[r.name].assignment.values())
        ))
    ]  # fmt: skip
    assert reduced and all(r.max_error is not None and r.max_error > 0 for r in reduced), (
        report.notes
    )
    ilp = next(c for c in report.outcome.candidates.values() if c.kind is CandidateKind.ILP)
    assert ilp.fits_accuracy
    chosen = [n for n, t in ilp.assignment.items() if t.precision == "int8"]
    if not chosen:  # only where int8 was never measured quicker (its Q/DQ edges included)
        (profile,) = (tmp_path / "p").glob("*.csv")
        costs = costs_from_profile(graph, Profile.load(profile), options.targets)
        convs = [n.name for n in graph.nodes if n.op_type == "Conv"]
        assert all(costs.cost(n, AT_INT8) >= costs.cost(n, F32) for n in convs)
    measured = report.plan.measured
    assert measured is not None and measured.max_error is not None
    assert measured.tolerance == loose and measured.max_error <= loose


def test_devices_lists_int8_where_it_is_offered() -> None:
    code, output = invoke("devices")
    assert code == 0, output
    openvino = next((line for line in output.splitlines() if "openvino" in line), "")
    assert ("int8" in openvino) == INT8, output


@needs_int8
def test_a_partition_mixing_int8_and_f32_is_measured_whole_at_its_own_precisions(
    tmp_path: Path,
) -> None:
    from types import SimpleNamespace

    from autopart.costmodel.costs import PartitionKey
    from autopart.costmodel.measurements import RowKind
    from autopart.costmodel.partitions import measured_partitions, partition_key
    from autopart.profile import Profiler, new_profile
    from autopart.targets.devices import discover
    from autopart.tuning.partitions import partition_specs
    from tests.test_profile import FAST

    graph = autopart.load("squeezenet")
    int8 = {n.name for n in graph.nodes if quantize.runs_in_int8(n, graph)}
    assignment = {n.name: AT_INT8 if n.name in int8 else F32 for n in graph.nodes}
    plan = build_plan_for(graph, assignment, F32, "mixed")
    graph.erase_virtual_devices()
    (spec,) = partition_specs([SimpleNamespace(plan=plan)])  # type: ignore[list-item]
    names = tuple(n.name for n in graph.nodes)
    expected = tuple("int8" if name in int8 else "f32" for name in spec.names)
    assert spec == PartitionKey(names, F32, True, expected)
    nodes = list(graph.nodes)
    uniform = partition_key(graph, nodes, True)
    mixed = partition_key(graph, nodes, True, spec.precisions)
    assert mixed != uniform and mixed.endswith(":alone")  # not the model as shipped
    profile = new_profile(discover())
    profiler = Profiler(profile, discover(), tmp_path / "profile.csv", settings=FAST)
    report = profiler.profile_partitions(graph, [spec, PartitionKey(names, F32, True)])
    assert report.new == 2
    assert all(not n.virtual_device.is_complete for n in graph.nodes)  # put back as they were
    found = measured_partitions(profile, graph, [spec])
    assert set(found) == {spec}
    assert profile.has(RowKind.PARTITION, str(F32), mixed)
    assert profile.has(RowKind.PARTITION, str(F32), uniform)


def _conv_zoo(path: Path) -> Graph:
    """Weighted nodes of several configurations, each on its own input (seeded weights)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    specs = [  # (op, input shape, weight shape, attributes)
        ("Conv", [1, 8, 8, 8], [8, 8, 3, 3], {"pads": [1, 1, 1, 1]}),
        ("Conv", [1, 4, 7, 7], [4, 4, 1, 1], {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("Conv", [1, 4, 4, 4], [4, 1, 1, 2], {"strides": [2, 1], "group": 4}),
        ("Conv", [1, 8, 8, 8], [8, 8, 3, 3], {"pads": [1, 1, 1, 1]}),  # other weights
        ("MatMul", [1, 16], [16, 8], {}),
    ]
    nodes, inputs, outputs, weights = [], [], [], []
    for index, (op, shape, weight, attributes) in enumerate(specs):
        inputs.append(helper.make_tensor_value_info(f"x{index}", TensorProto.FLOAT, shape))
        outputs.append(helper.make_tensor_value_info(f"y{index}", TensorProto.FLOAT, None))
        values = rng.standard_normal(weight).astype(np.float32)
        weights.append(numpy_helper.from_array(values, f"w{index}"))
        nodes.append(
            helper.make_node(
                op, [f"x{index}", f"w{index}"], [f"y{index}"], f"n{index}", **attributes
            )
        )
    graph = helper.make_graph(nodes, "zoo", inputs, outputs, weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return autopart.load(str(path))


@needs_int8
def test_configurations_probed_side_by_side_agree_as_they_do_alone(tmp_path: Path) -> None:
    """The batched int8 probe is exact: each node judged as if compiled alone."""
    from autopart.targets.probe_model import probe_model

    graph = _conv_zoo(tmp_path / "zoo.onnx")
    models = [probe_model(node, graph, static=True) for node in graph.nodes]
    alone = [agreement._agree([model], "int8")[0] for model in models]
    assert agreement._agree(models, "int8") == alone
    assert any(alone)


def counting_compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The int8 probe models OpenVINO compiles from now on, one entry (its size) each."""
    compiled: list[int] = []
    real = agreement._compiled

    def counting(model: bytes) -> Any:
        compiled.append(len(model))
        return real(model)

    monkeypatch.setattr(agreement, "_compiled", counting)
    return compiled


@needs_int8
def test_a_graphs_configurations_are_probed_in_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = _conv_zoo(tmp_path / "zoo.onnx")
    compiled = counting_compiles(monkeypatch)
    forget_every_answer()
    try:
        convs = [node for node in graph.nodes if node.op_type == "Conv"]
        first = agreement.agrees_in_int8(convs[0], graph)
        assert len(compiled) == 1  # the int8 model: every conv at once
        answers = [agreement.agrees_in_int8(node, graph) for node in convs]
        assert answers[0] == first and len(compiled) == 1  # the others were known already
        agreement.agrees_in_int8(graph.node("n4"), graph)  # the MatMul: its own batch
        assert len(compiled) == 2
    finally:
        forget_every_answer()


def test_the_quantiser_takes_the_shapes_inferred_and_never_copies_the_model_to_disk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """onnxruntime's quantiser infers shapes again on a deep copy saved and loaded back
    unless the model says they were: a whole model more in memory (vgg19: 0.55 GiB)."""
    from onnxruntime.quantization import base_quantizer

    def copied_to_disk(model: Any) -> Any:
        raise AssertionError("the quantiser copied the model to disk to infer its shapes")

    monkeypatch.setattr(base_quantizer, "save_and_reload_model_with_shape_infer", copied_to_disk)
    graph = autopart.load("squeezenet")
    convolutions = [node.name for node in graph.nodes if node.op_type == "Conv"]
    model = to_onnx(graph)
    given = model.SerializeToString()
    rewritten = qdq.quantise(model, quant_ranges.tensor_ranges(graph), convolutions)
    import onnx

    made = onnx.ModelProto.FromString(rewritten)
    assert sum(node.op_type == "DequantizeLinear" for node in made.graph.node) > len(convolutions)
    assert model.SerializeToString() == given  # the caller's model as it was


def test_a_cached_quantisation_is_found_without_making_the_export(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cache is keyed by the export's digest: a hit makes no export (vgg19's: 0.55 GiB,
    and as much again serialised); a changed weight misses."""
    graph = autopart.load("squeezenet")
    nodes, convolutions = list(graph.nodes), [n.name for n in graph.nodes if n.op_type == "Conv"]
    inputs, outputs = list(graph.inputs), list(graph.outputs)
    made = []
    real = quantize.to_onnx
    monkeypatch.setattr(quantize, "to_onnx", lambda *args: made.append(1) or real(*args))
    first = quantize.quantised_bytes(graph, nodes, inputs, outputs, convolutions)
    assert first == quantize.quantised_bytes(graph, nodes, inputs, outputs, convolutions)
    assert len(made) == 1 and qdq.quantisations >= 1
    want = qdq.quantise(
        to_onnx(graph, nodes, inputs, outputs), quant_ranges.tensor_ranges(graph), convolutions
    )
    assert first == want  # the same model as quantised from the export itself
    weight = next(n for n in graph.nodes if n.op_type == "Conv").inputs[1]
    changed = graph.value(weight).const.copy()
    changed.flat[0] += 1.0
    graph.value(weight).const = changed
    quantize.quantised_bytes(graph, nodes, inputs, outputs, convolutions)
    assert len(made) == 2
