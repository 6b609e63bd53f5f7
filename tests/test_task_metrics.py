"""Accuracy that means the task: samples, metrics, budgets, and a plan that keeps the answers."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import onnx
import onnx.version_converter
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import autopart
from autopart.errors import InputError
from autopart.ir.feeds import random_inputs
from autopart.ir.target import VirtualDevice
from autopart.plan.build import build_plan_for
from autopart.plan.schema import Plan
from autopart.runtime.executor import Executor
from autopart.runtime.plan_executor import PlanExecutor
from autopart.targets.openvino import codegen as ovgen
from autopart.targets.peer import PeerInputs, Runner
from autopart.targets.registry import declared_peers
from autopart.tuning.accuracy import AccuracyPolicy
from autopart.tuning.judge import Judge, load_dataset, split_samples
from autopart.tuning.metrics import (
    AGREEMENT,
    COSINE,
    MAX_REL,
    SNR_DB,
    TOPK,
    Metric,
    metric_for,
    parse_metric,
    score_axis,
    score_outputs,
)
from autopart.tuning.options import TuneOptions
from autopart.tuning.peers import peers
from autopart.tuning.verify import measure_plans
from autopart.tuning.whole_timing import stands_for
from autopart.zoo import resolve_model
from tests.conftest import make_model, run_onnxruntime
from tests.test_errors import assert_one_line_error, invoke

BF16 = ovgen.OpenVinoCodegen.available() and "bf16" in ovgen.OpenVinoCodegen.precisions()
needs_bf16 = pytest.mark.skipif(not BF16, reason="this CPU has no bf16 units OpenVINO uses")

arrays = st.builds(
    lambda seed, rows, cols: (
        np.random.default_rng(seed).normal(size=(rows, cols)).astype(np.float32)
    ),
    st.integers(0, 2**16),
    st.integers(1, 4),
    st.integers(2, 9),
)
METRICS = [Metric(MAX_REL), Metric(AGREEMENT), Metric(TOPK, k=2), Metric(COSINE), Metric(SNR_DB)]


@settings(max_examples=40, deadline=None)
@given(arrays, st.sampled_from(METRICS))
def test_outputs_equal_to_the_reference_drop_nothing(scores: np.ndarray, metric: Metric) -> None:
    tallies = [metric.tally({"y": scores}, {"y": scores.copy()}) for _ in range(3)]
    assert metric.drop(tallies) == 0.0


@settings(max_examples=40, deadline=None)
@given(arrays, st.integers(0, 2**16))
def test_agreement_is_the_share_of_argmaxes_changed(scores: np.ndarray, seed: int) -> None:
    noisy = scores + np.random.default_rng(seed).normal(size=scores.shape).astype(np.float32)
    metric = Metric(AGREEMENT)
    drop = metric.drop([metric.tally({"y": scores}, {"y": noisy})])
    changed = np.mean(scores.argmax(axis=-1) != noisy.argmax(axis=-1))
    assert drop == pytest.approx(changed)
    assert 0.0 <= drop <= 1.0
    top2 = Metric(TOPK, k=2)
    assert top2.drop([top2.tally({"y": scores}, {"y": noisy})]) <= drop  # top 2 holds top 1


def test_answers_pool_over_samples_and_follow_the_score_axis() -> None:
    reference = np.zeros((1, 5, 1, 1), np.float32)
    reference[0, 3] = 1.0  # scores along axis 1, as squeezenet's
    moved = np.zeros_like(reference)
    moved[0, 2] = 1.0
    metric = Metric(AGREEMENT)
    tallies = [metric.tally({"y": reference}, {"y": out}) for out in (reference, moved, moved)]
    assert tallies == [(0.0, 1.0), (1.0, 1.0), (1.0, 1.0)]
    assert metric.drop(tallies) == pytest.approx(2 / 3)
    assert score_axis((1, 5, 1, 1)) == 1 and score_axis((1, 1)) is None
    other_shape = metric.tally({"y": reference}, {"y": reference[0]})
    assert other_shape == (1.0, 1.0)  # a detector keeping another count changes every answer


def test_cosine_and_snr_are_their_formulas() -> None:
    rng = np.random.default_rng(0)
    signal = rng.normal(size=(3, 7))
    noise = 0.01 * rng.normal(size=(3, 7))
    cosine, snr = Metric(COSINE), Metric(SNR_DB)
    got = {"y": signal + noise}
    expected_cos = np.dot(signal.ravel(), (signal + noise).ravel()) / (
        np.linalg.norm(signal) * np.linalg.norm(signal + noise)
    )
    assert cosine.drop([cosine.tally({"y": signal}, got)]) == pytest.approx(1 - expected_cos)
    ratio = snr.drop([snr.tally({"y": signal}, got)])
    assert ratio == pytest.approx(np.sum(noise**2) / np.sum(signal**2))
    assert snr.describe(ratio).startswith("SNR ") and snr.describe(1e-3) == "SNR 30.0 dB"


def test_a_score_function_of_the_users_drops_from_its_own_perfect_score() -> None:
    def score(reference: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> float:
        return -float(np.abs(reference["y"] - outputs["y"]).mean())

    metric = parse_metric(score)
    assert metric is not None and metric.label == "custom"
    reference = np.ones((2, 3), np.float32)
    drop = metric.drop([metric.tally({"y": reference}, {"y": reference + 0.5})])
    assert drop == pytest.approx(0.5)


@pytest.mark.parametrize("name", ["agreement", "topk:5", "cosine", "snr-db", "max-rel"])
def test_every_named_metric_parses(name: str) -> None:
    metric = parse_metric(name)
    assert metric is not None and metric.label == name


def _classifier(head: str = "Softmax") -> onnx.ModelProto:
    weights = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["logits"])]
    if head:
        nodes.append(helper.make_node(head, ["logits"], ["scores"], axis=-1))
    out = "scores" if head else "logits"
    graph = helper.make_graph(
        nodes, "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2, 3])],
        [weights],
    )  # fmt: skip
    return make_model(graph)


def test_score_outputs_are_those_of_a_score_head_not_of_a_feature_map() -> None:
    assert score_outputs(autopart.load(_classifier())) == ("scores",)
    assert score_outputs(autopart.load(_classifier(head=""))) == ("logits",)
    assert score_outputs(autopart.load("squeezenet"))  # a Softmax along axis 1 of (1,1000,1,1)
    assert score_outputs(autopart.load("densenet121")) == ()  # a convolution's output


def test_the_default_metric_is_agreement_only_on_real_samples_of_scores() -> None:
    graph = autopart.load(_classifier())
    assert metric_for(graph, None, real_samples=True).name == AGREEMENT
    assert metric_for(graph, None, real_samples=False).name == MAX_REL  # no answers to keep
    assert metric_for(autopart.load("densenet121"), None, real_samples=True).name == MAX_REL
    conv = autopart.load("densenet121")
    assert metric_for(conv, Metric(COSINE), True).name == COSINE


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.floats(0.01, 1.0), st.integers(0, 1000))
def test_a_split_is_disjoint_whole_seeded_and_validates_its_share(
    count: int, share: float, seed: int
) -> None:
    samples = [{"x": np.full(1, i)} for i in range(count)]
    calibration, validation = split_samples(samples, share, seed)
    seen = sorted(int(s["x"][0]) for s in [*calibration, *validation])
    assert seen == list(range(count))
    assert len(validation) == (count if count == 1 else max(1, math.ceil(share * count)))
    again = split_samples(samples, share, seed)
    assert [s["x"][0] for s in again[1]] == [s["x"][0] for s in validation]


def test_a_dataset_is_checked_against_the_models_inputs() -> None:
    graph = autopart.load(_classifier())
    loaded = load_dataset([{"x": np.zeros((2, 4), np.float64)}], graph)
    assert loaded[0]["x"].dtype == np.float32  # cast to the input's dtype
    with pytest.raises(InputError, match="no input 'x'"):
        load_dataset([{"y": np.zeros((2, 4))}], graph)
    with pytest.raises(InputError, match="shape"):
        load_dataset([{"x": np.zeros((3, 4))}], graph)
    with pytest.raises(InputError, match="no sample"):
        load_dataset([], graph)


def test_budgets_follow_the_metric_and_conflicts_are_refused() -> None:
    policy = AccuracyPolicy()
    assert policy.tolerance_rule(None, Metric(AGREEMENT)) == 0.01
    assert AccuracyPolicy(max_drop=0.05).tolerance_rule(None, Metric(AGREEMENT)) == 0.05
    assert AccuracyPolicy(max_drop=2e-3).tolerance_rule(None, Metric(MAX_REL)) == 2e-3
    with pytest.raises(InputError, match="--tolerance bounds max-rel alone"):
        AccuracyPolicy(tolerance=1e-2, metric=Metric(AGREEMENT))
    with pytest.raises(InputError, match="its budget"):
        AccuracyPolicy(metric=parse_metric(lambda r, o: 0.0))
    with pytest.raises(InputError, match="max-drop"):
        TuneOptions.build(max_drop=-1.0)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--metric", "top5"], "unknown metric"),
        (["--validation-split", "0"], "--validation-split"),
        (["--max-drop", "nan"], "--max-drop"),
        (["--metric", "agreement", "--tolerance", "1e-2"], "--tolerance bounds max-rel"),
    ],
)
def test_a_bad_task_option_is_one_error_line(args: list[str], fragment: str) -> None:
    assert_one_line_error(*invoke("tune", "squeezenet", *args), fragment)


@needs_bf16
def test_a_judge_counts_the_answers_a_plan_changes_on_the_validation_samples() -> None:
    graph = autopart.load("squeezenet")
    bf16 = VirtualDevice.parse("cpu@openvino:bf16")
    plan = build_plan_for(graph, {n.name: bf16 for n in graph.nodes}, bf16, "bf16")
    samples = [random_inputs(graph, 40 + i) for i in range(6)]
    metric = metric_for(graph, Metric(TOPK, k=1), True)
    judge = Judge(graph, metric, samples, real=True, given=6)
    measured = measure_plans(graph, {"bf16": plan}, random_inputs(graph, 0), rounds=1,
                             judge=judge, tolerance=0.5)  # fmt: skip
    with PlanExecutor(plan, graph) as executor:
        changed = [
            int(
                np.argmax(Executor(graph).run(s).outputs[out])
                != np.argmax(executor.run(s).outputs[out])
            )
            for s in samples
            for out in graph.outputs
        ]
    assert measured["bf16"].max_error == pytest.approx(np.mean(changed))
    assert measured["bf16"].max_rel_error > 0  # the largest relative error is kept beside it


def _tie_model(path: Path) -> Path:
    """A classifier whose top two classes differ by 0.2%: bf16 rounds them to a tie."""
    rng = np.random.default_rng(0)
    weights = rng.uniform(0.0, 0.5, (64, 8)).astype(np.float32)
    weights[:, 0] = rng.uniform(1.0, 1.2, 64)
    weights[:, 1] = weights[:, 0] * np.float32(1.002)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["logits"]),
         helper.make_node("Softmax", ["logits"], ["scores"], axis=-1)],
        "tie",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(weights, "w")],
    )  # fmt: skip
    onnx.save(make_model(graph), str(path))
    return path


@pytest.mark.slow  # a tune, a show and a bench: a minute; the pieces are tested above
@needs_bf16
def test_the_default_plan_keeps_the_answers_that_openvino_as_installed_changes(
    tmp_path: Path,
) -> None:
    model = _tie_model(tmp_path / "tie.onnx")
    samples = tmp_path / "samples.npz"
    xs = np.random.default_rng(1).uniform(0, 1, (20, 1, 64)).astype(np.float32)
    np.savez(samples, x=xs)
    code, output = invoke(
        "tune", str(model), "--inputs", str(samples), "--rounds", "2",
        "--targets", "cpu@onnxruntime,cpu@openvino,cpu@openvino:bf16",
        "--search-dir", str(tmp_path / "search"), "--profiles", str(tmp_path / "profiles"),
    )  # fmt: skip
    assert code == 0, output
    text = " ".join(output.split())
    assert "agreement on 10 validation samples of 20 given, 10 calibrating int8" in text
    assert "openvino alone changes" in text and "the plan keeps 100.0%" in text
    (folder,) = (tmp_path / "search").iterdir()
    plan = Plan.load(folder / "plan.json")
    assert plan.measured is not None and plan.measured.metric == "agreement"
    assert plan.measured.max_error == 0.0 and plan.measured.tolerance == 0.01
    assert all(":bf16" not in p.target for p in plan.partitions)
    report = json.loads((folder / "report.json").read_text())
    assert report["chosen"]
    code, shown = invoke("show", str(folder / "plan.json"))
    assert code == 0 and "agreement: 0.0% of answers changed (budget 1.0%)" in " ".join(
        shown.split()
    ), shown
    table = autopart.bench(
        [str(model)], dataset=str(samples), rounds=1, search_dir=tmp_path / "search",
        profiles_dir=tmp_path / "profiles",
        targets=["cpu@onnxruntime", "cpu@openvino", "cpu@openvino:bf16"],
    )  # fmt: skip
    assert (table["metric"] == "agreement").all()
    assert table["samples"].str.contains("10 validation samples of 20 given").all()
    installed = table.set_index("plan").loc["openvino alone"]
    assert installed["metric_drop"] > 0.01 and not installed["within_budget"]
    tuned = table.set_index("plan").loc["autopart (tuned)"]
    assert tuned["within_budget"] and tuned["metric_drop"] <= tuned["budget"]
    quantised = table.set_index("plan").loc["onnxruntime + qdq int8"]
    assert quantised["metric"] == "agreement" and quantised["metric_drop"] >= 0
    assert "vs_openvino_nncf_int8" in table and "vs_onnxruntime_qdq_int8" in table


@needs_bf16
def test_run_check_judges_a_plan_on_the_validation_samples_by_the_metric(tmp_path: Path) -> None:
    model = str(_tie_model(tmp_path / "tie.onnx"))
    samples = tmp_path / "samples.npz"
    np.savez(samples, x=np.random.default_rng(1).uniform(0, 1, (8, 1, 64)).astype(np.float32))
    common = ["--inputs", str(samples), "--check", "--repeat", "1", "--metric", "agreement"]
    code, output = invoke("run", model, *common)
    text = " ".join(output.split())
    assert code == 0 and "agreement 0.0% of answers changed (budget 1.0%)" in text, output
    assert "on 4 validation samples of 8 given, 4 calibrating int8" in text
    code, output = invoke("run", model, "--assign", "re:.*=cpu@openvino:bf16", *common)
    assert code == 1 and "MISMATCH" in output, output
    loose = ["--max-drop", "1"]
    code, output = invoke("run", model, "--assign", "re:.*=cpu@openvino:bf16", *common, *loose)
    assert code == 0 and "(ok)" in output, output
    assert_one_line_error(*invoke("run", model, *common[:-1], "top"), "unknown metric")


def _calibrated(graph_name: str) -> tuple[object, PeerInputs, list[dict[str, np.ndarray]]]:
    graph = autopart.load(graph_name)
    inputs = PeerInputs.of(graph)
    return graph, inputs, [random_inputs(graph, 70 + i) for i in range(2)]


def test_the_qdq_peer_is_quantize_static_at_its_defaults_on_the_calibration_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """squeezenet is opset 9, which the quantiser converts to 11 first: the peer converts
    the structure alone, its weights left in their files (vgg19: 3.1 GiB less), and the
    quantiser converts nothing more."""
    from autopart.ir.weights import raw_size

    converted: list[int] = []  # the largest weight each conversion was given
    convert = onnx.version_converter.convert_version

    def recorded(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
        converted.append(max(raw_size(t) for t in model.graph.initializer))
        return convert(model, opset)

    monkeypatch.setattr(onnx.version_converter, "convert_version", recorded)
    _, inputs, probes = _calibrated("squeezenet")
    runner, notes = peers("squeezenet", inputs, only="onnxruntime + qdq int8")
    assert not notes
    assert len(converted) == 1 and converted[0] < 1024  # the small ones stay inline
    monkeypatch.setattr(onnx.version_converter, "convert_version", convert)
    _assert_quantize_static_by_hand(runner["onnxruntime + qdq int8"], inputs, probes, tmp_path)


def test_a_structure_the_converter_rejects_is_left_to_the_quantiser_to_convert_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autopart.ir.weights import raw_size

    converted: list[int] = []  # the largest weight each conversion was given
    convert = onnx.version_converter.convert_version

    def structure_rejected(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
        converted.append(max(raw_size(t) for t in model.graph.initializer))
        if len(converted) == 1:
            raise RuntimeError("no adapter for the structure alone")
        return convert(model, opset)

    monkeypatch.setattr(onnx.version_converter, "convert_version", structure_rejected)
    _, inputs, probes = _calibrated("squeezenet")
    runner, notes = peers("squeezenet", inputs, only="onnxruntime + qdq int8")
    assert not notes
    assert len(converted) == 2 and converted[0] < 1024 < converted[1]  # then whole
    monkeypatch.setattr(onnx.version_converter, "convert_version", convert)
    _assert_quantize_static_by_hand(runner["onnxruntime + qdq int8"], inputs, probes, tmp_path)


def _assert_quantize_static_by_hand(
    runner: Runner, inputs: PeerInputs, probes: list[dict[str, np.ndarray]], folder: Path
) -> None:
    """``runner`` computes what squeezenet quantised by ``quantize_static`` by hand does."""
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    source, quantised = folder / "m.onnx", folder / "q.onnx"
    onnx.save(resolve_model("squeezenet"), str(source))

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.left = iter(inputs.calibration)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.left, None)

    quantize_static(str(source), str(quantised), Reader())
    for feeds in probes:
        (expected,) = run_onnxruntime(quantised, feeds)
        (got,) = runner(feeds).values()
        np.testing.assert_array_equal(got, expected)


@pytest.mark.skipif(importlib.util.find_spec("nncf") is None, reason="NNCF is not installed")
def test_the_nncf_peer_is_nncf_quantize_at_its_defaults_compiled_as_installed() -> None:
    import nncf
    import openvino as ov

    graph, inputs, probes = _calibrated("squeezenet")
    runner, notes = peers("squeezenet", inputs, only="openvino + nncf int8")
    assert not notes
    model = ov.Core().read_model(resolve_model("squeezenet").SerializeToString(), b"")
    (port,) = graph.inputs
    dataset = nncf.Dataset([{port: sample[port]} for sample in inputs.calibration])
    compiled = ov.Core().compile_model(nncf.quantize(model, dataset), "CPU")
    for feeds in probes:
        expected = np.asarray(compiled(feeds)[0])
        (got,) = runner["openvino + nncf int8"](feeds).values()
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_an_int8_peer_stands_for_no_plan_and_says_why_it_is_absent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tools = [peer for peer in declared_peers() if peer.tool]
    assert {peer.name for peer in tools} == {"onnxruntime + qdq int8", "openvino + nncf int8"}
    assert all(not peer.stands_for_plan for peer in tools)
    int8 = VirtualDevice.parse("cpu@openvino:int8")
    assert stands_for("openvino + nncf int8", {int8: {}}) is None  # not autopart's own int8
    assert stands_for("openvino alone f32", {VirtualDevice.parse("cpu@openvino"): {}})
    graph = autopart.load("squeezenet")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "nncf" else real_find_spec(name, *a),
    )
    failures: dict[str, str] = {}
    peers("squeezenet", PeerInputs.of(graph), only="openvino + nncf int8", failures=failures)
    assert "pip install -e '.[int8-peers]'" in failures["openvino + nncf int8"]


def test_bench_shows_each_drop_as_tune_does_in_its_metric() -> None:
    from autopart.cli.bench import drop_cell

    assert drop_cell("agreement", 0.033, False) == "3.3% !"  # over its budget: marked
    assert drop_cell("topk:5", 0.0, True) == "0.0%"
    assert drop_cell("snr-db", 1e-4, True) == "40.0 dB"
    assert drop_cell("custom", 0.2, 1.0) == drop_cell("max-rel", 0.2, True) == "2.0e-01"
    assert drop_cell("cosine", float("nan"), True) == "-"
