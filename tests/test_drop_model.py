"""The error model in a task metric's units, and samples that fix a model's symbolic shapes.

- :mod:`autopart.tuning.drop_model`: each precision's sensitivities are scaled so that every
  node reduced predicts the drop measured on the calibration samples; the search is held
  to ``--max-drop`` in those units, and the report shows the predicted drop beside the
  measured one.
- :func:`autopart.ir.input_shapes.shapes_from_samples`: ``--inputs`` fix the inputs the user
  gave no shape.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import autopart
from autopart.costmodel.accuracy import ErrorModel
from autopart.ir.input_shapes import shapes_from_samples
from autopart.ir.target import VirtualDevice
from autopart.plan.schema import Plan
from autopart.profile.sensitivity import reduces
from autopart.targets import quant_ranges
from autopart.tuning.accuracy import AccuracyPolicy, search_error_model
from autopart.tuning.drop_model import in_metric_units, measured_drops, unseen_drop_note
from autopart.tuning.metrics import AGREEMENT, COSINE, Metric
from autopart.tuning.plan_rows import predicted_drop
from tests.conftest import make_model
from tests.test_errors import assert_one_line_error, invoke
from tests.test_task_metrics import needs_bf16

weights = st.floats(1e-6, 10.0)


def _relative(nodes: int, precisions: tuple[str, ...], data: st.DataObject) -> ErrorModel:
    values = {(f"n{i}", p): data.draw(weights) for i in range(nodes) for p in precisions}
    return ErrorModel(values, 1.0, 1.0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.data())
def test_every_node_reduced_predicts_the_drop_measured_and_keeps_the_nodes_shares(
    nodes: int, data: st.DataObject
) -> None:
    precisions = ("bf16", "int8")
    relative = _relative(nodes, precisions, data)
    found = {
        p: ErrorModel(
            {}, 1.0, math.sqrt(sum(v for (_, q), v in relative.weights.items() if q == p))
        )
        for p in precisions
    }
    drops = {p: data.draw(st.floats(0.0, 0.5)) for p in precisions}
    model = in_metric_units(relative, found, drops, 0.01, Metric(AGREEMENT))
    assert model is not None and model.metric == AGREEMENT and model.tolerance == 0.01
    for p in precisions:
        every = {f"n{i}": VirtualDevice.parse(f"cpu@openvino:{p}") for i in range(nodes)}
        assert model.predicted_error(every) == pytest.approx(drops[p], rel=1e-9, abs=1e-12)
        if drops[p] > 0:
            ratio = model.weights[("n0", p)] / relative.weights[("n0", p)]
            for i in range(nodes):
                scaled = model.weights[(f"n{i}", p)]
                assert scaled == pytest.approx(relative.weights[(f"n{i}", p)] * ratio)
    assert model.all_reduced == max(drops.values())


def test_an_overflow_keeps_the_relative_model() -> None:
    relative = ErrorModel({("a", "bf16"): 1.0}, 1.0, 1.0)
    infinite = {"bf16": ErrorModel({}, 1.0, math.inf)}
    assert in_metric_units(relative, infinite, {"bf16": 0.1}, 0.01, Metric(AGREEMENT)) is None
    finite = {"bf16": ErrorModel({}, 1.0, 1.0)}
    assert in_metric_units(relative, finite, {"bf16": math.inf}, 0.01, Metric(AGREEMENT)) is None


def _classifier(classes: int = 10, features: int = 32) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(features, classes)).astype(np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["scores"], axis=-1),
        ],
        "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", classes])],
        [w],
    )
    return make_model(graph)


def _samples(count: int, batch: int = 16, features: int = 32) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [{"x": rng.normal(size=(batch, features)).astype(np.float32)} for _ in range(count)]


def test_no_answer_changed_is_taken_as_one_answer_in_those_judged() -> None:
    graph = autopart.load(_classifier(), {"batch": 16})
    samples = _samples(3)
    drops = measured_drops(graph, samples, ["bf16"], Metric(AGREEMENT))
    assert drops["bf16"] >= 1 / 48  # 3 samples of 16 answers: at most that few unseen
    if drops["bf16"] == pytest.approx(1 / 48):  # none changed: the floor is recorded
        assert drops.unseen_floor == pytest.approx(1 / 48)
    cosine = measured_drops(graph, samples[:1], ["bf16"], Metric(COSINE))
    assert cosine["bf16"] < 1e-3 and cosine.unseen_floor == 0.0


def test_samples_too_few_to_show_a_drop_within_the_bound_say_so_in_one_note() -> None:
    graph = autopart.load(_classifier(), {"batch": 1})
    one = _samples(1, batch=1)  # one answer: a change cannot be seen under 100%
    drops = measured_drops(graph, one, ["bf16", "int8"], Metric(AGREEMENT))
    assert dict(drops) == {"bf16": 1.0, "int8": 1.0} and drops.unseen_floor == 1.0
    relative = ErrorModel({("n", "bf16"): 1.0, ("n", "int8"): 1.0}, 1.0, 1.0)
    found = {p: ErrorModel({}, 1.0, 1.0) for p in ("bf16", "int8")}
    task = in_metric_units(relative, found, drops, 0.01, Metric(AGREEMENT))
    assert task is not None and task.unseen_floor == 1.0
    (note,) = unseen_drop_note(task)
    assert "1 calibration answers" in note and "100.0%" in note and "at least 100 answers" in note
    assert unseen_drop_note(dataclasses.replace(task, unseen_floor=0.005)) == []  # seen: none
    assert unseen_drop_note(dataclasses.replace(task, metric=None)) == []  # relative: none
    assert unseen_drop_note(None) == []


@needs_bf16
def test_under_a_task_metric_the_search_keeps_to_the_budget_in_the_metrics_units() -> None:
    graph = autopart.load(_classifier(), {"batch": 16})
    quant_ranges.attach(graph, quant_ranges.CalibrationSamples(tuple(_samples(4)), False))
    targets = ["cpu@openvino", "cpu@openvino:bf16"]
    task = search_error_model(graph, targets, AccuracyPolicy(), 0, metric=Metric(AGREEMENT))
    assert task is not None and task.metric == AGREEMENT
    assert task.tolerance == 0.01  # agreement's default budget, not a relative error
    drops = measured_drops(graph, _samples(4), ["bf16"], Metric(AGREEMENT))
    every = {
        node.name: VirtualDevice.parse("cpu@openvino:bf16")
        for node in graph.nodes
        if reduces(graph, node.name, "bf16")
    }
    assert task.predicted_error(every) == pytest.approx(drops["bf16"])
    given = search_error_model(
        graph, targets, AccuracyPolicy(max_drop=0.2), 0, metric=Metric(AGREEMENT)
    )
    assert given is not None and given.tolerance == 0.2
    relative = search_error_model(graph, targets, AccuracyPolicy(), 0)
    assert relative is not None and relative.metric is None
    max_rel = search_error_model(graph, targets, AccuracyPolicy(max_drop=5e-3), 0)
    assert max_rel is not None and max_rel.tolerance == 5e-3 and max_rel.metric is None


def test_samples_fix_the_shapes_the_user_left_symbolic() -> None:
    declared = {"x": ["batch", 3, None], "mask": ["batch", "seq"], "fixed": [2, 2]}
    seen = {"x": (5, 4, 3, 7), "mask": (4, 9), "fixed": (2, 2)}
    assert shapes_from_samples(declared, {}, seen) == {"x": (4, 3, 7), "mask": (4, 9)}
    assert shapes_from_samples(declared, {"batch": 1}, seen) == {}  # the user's dims win
    assert shapes_from_samples(declared, {"x": [1, 3, 2]}, seen) == {"mask": (4, 9)}
    assert shapes_from_samples(declared, {}, {"x": (3,)}) == {}  # another rank: checked later


def _saved(tmp_path: Path, batch: int = 5) -> tuple[Path, Path]:
    model = tmp_path / "clf.onnx"
    onnx.save(_classifier(), model)
    np.savez(tmp_path / "x.npz", x=np.stack([s["x"] for s in _samples(8, batch=batch)]))
    return model, tmp_path / "x.npz"


def test_run_takes_a_symbolic_batch_from_the_inputs(tmp_path: Path) -> None:
    model, inputs = _saved(tmp_path)
    code, output = invoke("run", str(model), "--inputs", str(inputs))
    assert code == 0, output  # without the samples' shape, batch is 1 and they are refused
    np.savez(tmp_path / "bad.npz", x=np.zeros((2, 3, 7), np.float32))
    code, output = invoke("run", str(model), "--inputs", str(tmp_path / "bad.npz"))
    assert_one_line_error(code, output, "bad.npz")


@pytest.mark.slow
@needs_bf16
def test_tune_reports_the_predicted_drop_beside_the_measured_one(tmp_path: Path) -> None:
    model, inputs = _saved(tmp_path)
    code, output = invoke(
        "tune", str(model), "--inputs", str(inputs), "--metric", "agreement",
        "--targets", "cpu@openvino,cpu@openvino:bf16", "--rounds", "2", "--no-peers",
        "--search-dir", str(tmp_path / "s"), "--profiles", str(tmp_path / "p"), "--thorough",
    )  # fmt: skip  # thorough: the screen keeps the bf16 target, which needs the error model
    assert code == 0, output
    folder = next((tmp_path / "s").iterdir())
    plan = Plan.load(folder / "plan.json")
    assert plan.model.input_shapes == {"x": [5, 32]}  # the samples' batch, not 1
    assert plan.predicted is not None and plan.predicted.error_metric == AGREEMENT
    rows = {row["name"]: row for row in json.loads((folder / "report.json").read_text())["plans"]}
    assert rows["single:cpu@openvino"]["predicted_drop"] == 0.0
    assert rows["single:cpu@openvino:bf16"]["predicted_drop"] > 0
    code, shown = invoke("show", str(folder / "plan.json"))
    assert code == 0 and "agreement:" in shown
    assert ("predicted" in shown) == (plan.predicted.error is not None), shown


@pytest.mark.slow
@needs_bf16
def test_a_tune_on_too_few_answers_says_the_search_could_not_see_a_drop(tmp_path: Path) -> None:
    model, inputs = _saved(tmp_path, batch=1)  # 8 samples of one answer: 4 calibrate
    graph = autopart.load(_classifier(), {"batch": 1})
    samples = [{"x": s["x"]} for s in _samples(8, batch=1)]
    assert measured_drops(graph, samples, ["bf16"], Metric(AGREEMENT)).unseen_floor > 0
    code, output = invoke(
        "tune", str(model), "--inputs", str(inputs), "--metric", "agreement",
        "--targets", "cpu@openvino,cpu@openvino:bf16", "--rounds", "2", "--no-peers",
        "--search-dir", str(tmp_path / "s"), "--profiles", str(tmp_path / "p"), "--thorough",
    )  # fmt: skip
    assert code == 0, output
    flat = " ".join(output.split())
    assert "4 calibration answers cannot show a drop under one of them (25.0%)" in flat, flat


def test_a_score_that_rises_predicts_no_drop_not_a_squared_one() -> None:
    graph = autopart.load(_classifier(), {"batch": 16})
    calls: list[int] = []

    def rising(reference: object, outputs: object) -> float:  # the reduced run scores higher
        calls.append(1)
        return 2.0 if len(calls) % 2 else 1.0  # first the outputs judged, then the reference

    drops = measured_drops(graph, _samples(2), ["bf16"], Metric("custom", score=rising))
    assert drops == {"bf16": 0.0}


def test_a_predicted_share_of_answers_is_never_shown_past_all_of_them() -> None:
    int8, bf16 = VirtualDevice.parse("cpu@openvino:int8"), VirtualDevice.parse("cpu@openvino:bf16")
    weights = {("a", "int8"): 1.0, ("b", "bf16"): 0.64}  # squared shares: sqrt(1.64), 1.28
    assignment = {"a": int8, "b": bf16}
    answers = ErrorModel(weights, tolerance=0.01, metric="agreement")
    assert answers.predicted_error(assignment) == pytest.approx(math.sqrt(1.64))
    assert predicted_drop(answers, assignment) == 1.0
    assert predicted_drop(answers, {"a": int8}) == pytest.approx(1.0)
    assert predicted_drop(ErrorModel(weights, 0.01, metric="topk"), assignment) == 1.0
    relative = ErrorModel(weights, tolerance=0.01)  # max-rel: no such bound
    assert predicted_drop(relative, assignment) == pytest.approx(math.sqrt(1.64))
