"""Accuracy across hosts: the task's samples and metric, int8 stages calibrated, options kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from autopart.cli import main
from autopart.ir.feeds import random_inputs
from autopart.loader import load_model
from autopart.runtime.executor import Executor
from autopart.runtime.stage_calibration import calibrates, stage_calibration
from autopart.targets import quant_ranges
from autopart.tuning.options import TuneOptions
from tests.test_errors import assert_one_line_error, invoke
from tests.test_hosts import _two_cores
from tests.test_profile import tiny_cnn
from tests.test_task_metrics import _tie_model, needs_bf16


def test_a_stages_calibration_is_what_its_inputs_hold_on_the_models_own_samples() -> None:
    graph = load_model(tiny_cnn())
    quant_ranges.attach(graph, None)
    random = stage_calibration(graph, ["x", "r1", "y"])
    own = quant_ranges.calibration_of(graph)
    assert random.stand_in and len(random.samples) == len(own.samples)
    executor = Executor(graph)
    for sample, stage in zip(own.samples, random.samples, strict=True):
        np.testing.assert_array_equal(stage["x"], sample["x"])  # a model input passes through
        np.testing.assert_allclose(stage["y"], executor.run(sample).outputs["y"], rtol=1e-6)
        assert stage["r1"].min() >= 0.0 and stage["r1"].shape == (1, 4, 8, 8)  # a Relu's output
    again = stage_calibration(graph, ["r1"])
    assert all(a["r1"] is b["r1"] for a, b in zip(again.samples, random.samples, strict=True))
    given = [random_inputs(graph, 50 + index) for index in range(3)]
    quant_ranges.attach(graph, quant_ranges.CalibrationSamples(tuple(given), False))
    real = stage_calibration(graph, ["y"])
    assert not real.stand_in and len(real.samples) == 3
    for sample, stage in zip(given, real.samples, strict=True):
        np.testing.assert_allclose(stage["y"], executor.run(sample).outputs["y"], rtol=1e-6)


def test_only_a_stage_with_an_int8_target_calibrates() -> None:
    assert calibrates(["cpu@numpy", "host1:cpu@openvino:int8"])
    assert not calibrates(["cpu@numpy", "host1:cpu@openvino:bf16", "cpu@onnxruntime"])


def test_samples_across_hosts_are_refused_where_the_reference_computes_nan() -> None:
    from onnx import TensorProto, helper

    from autopart.errors import InputError
    from autopart.tuning.hosts_tune import judged_samples
    from autopart.tuning.judge import random_judge
    from autopart.tuning.metrics import MAX_REL, Metric
    from tests.conftest import make_model

    graph = load_model(make_model(helper.make_graph(
        [helper.make_node("Sqrt", ["x"], ["y"])], "root",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])],
    )))  # fmt: skip
    judge = random_judge(graph, Metric(MAX_REL), 0)
    with pytest.raises(InputError, match=r"computes NaN .* on the inputs timed"):
        judged_samples(judge, random_inputs(graph, 0))
    judge.real = True  # the user's samples alone are judged: the reference's check names them
    with pytest.raises(InputError, match="validation sample 0"):
        judged_samples(judge, random_inputs(graph, 0))


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--pin", "Conv=cpu@numpy"], "--pin"),
        (["--forbid", "Relu=cpu@numpy"], "--forbid"),
        (["--fallback", "cpu@numpy"], "--fallback"),
        (["--thorough", "--no-peers"], "--no-peers, --thorough"),
        (["--search", "optuna"], "--search"),
        (["--memory-limit", "2GB"], "--memory-limit"),
    ],
)
def test_a_tune_across_hosts_refuses_an_option_it_would_not_use(
    tmp_path: Path, args: list[str], named: str
) -> None:
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), model)
    code, output = invoke("tune", str(model), "--cluster", "local:2", *args)
    assert_one_line_error(code, output, f"{named}: not used by a tune across hosts")


def test_the_tune_command_hands_its_accuracy_options_to_a_tune_across_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[TuneOptions] = []

    def caught(model: str, options: TuneOptions) -> None:
        seen.append(options)

    monkeypatch.setattr("autopart.cli.tune.tune_on_cluster", caught)
    samples = tmp_path / "samples.npz"
    np.savez(samples, x=np.zeros((4, 1, 4, 8, 8), np.float32))
    result = CliRunner().invoke(main, [
        "tune", "tiny.onnx", "--cluster", "local:2", "--precision", "f32,bf16",
        "--inputs", str(samples), "--metric", "cosine", "--max-drop", "0.002",
        "--validation-split", "0.25", "--memory", "*=1MB", "--seed", "3",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    (options,) = seen
    assert options.cluster == "local:2" and options.host_memory == {"*": 1_000_000}
    assert options.search.precision == ("f32", "bf16") and options.search.seed == 3
    assert options.dataset == str(samples) and options.validation_split == 0.25
    assert options.metric == "cosine" and options.max_drop == 0.002
    assert not (options.search.constraints and options.search.constraints.memory)


@pytest.mark.slow  # a local:2 cluster and a tune on it: about 40 s
@needs_bf16
def test_a_tune_across_hosts_judges_every_candidate_by_the_metric_on_the_users_samples(
    tmp_path: Path,
) -> None:
    _two_cores()
    model = _tie_model(tmp_path / "tie.onnx")
    samples = tmp_path / "samples.npz"
    np.savez(samples, x=np.random.default_rng(1).uniform(0, 1, (20, 1, 64)).astype(np.float32))
    import autopart  # the API, not the table: its cells wrap with the terminal's width

    report = autopart.tune(
        str(model),
        cluster="local:2",
        time_budget_s=20,
        dataset=str(samples),
        profiles_dir=tmp_path / "profiles",
        output=tmp_path / "plan.json",
        targets=["cpu@openvino:bf16", "cpu@openvino"],
    )
    notes = " ".join(report.notes)
    assert "agreement held to 1.0% of answers changed" in notes
    assert "agreement on 10 validation samples of 20 given" in notes
    assert report.chosen.kept and report.chosen.tolerance == 0.01
    assert all(c.error is not None and c.tolerance == 0.01 for c in report.candidates)
    whole_bf16 = [c for c in report.candidates if c.predicted.stages[0][3] == 2
                  and c.predicted.stages[0][1].computes_in == "bf16"]  # fmt: skip
    assert all(c.error > 0.01 and not c.kept for c in whole_bf16)  # bf16 ties the top two
    assert all(c.kept == (c.error <= 0.01) for c in report.candidates)


@pytest.mark.slow  # a local:2 cluster: about 20 s
def test_an_int8_stage_on_another_host_calibrates_as_the_same_plan_does_here() -> None:
    _two_cores()
    from autopart import api
    from autopart.cluster.session import cluster
    from autopart.runtime.hosts import ClusterPlanExecutor
    from autopart.runtime.plan_executor import PlanExecutor

    split = ["idx:2-2=host1:cpu@openvino:int8"]  # conv2, reading a Relu's output
    plan, graph = api.make_plan(tiny_cnn(), split, "cpu@numpy")
    here, _ = api.make_plan(tiny_cnn(), ["idx:2-2=cpu@openvino:int8"], "cpu@numpy")
    feeds = [random_inputs(graph, 90 + seed) for seed in range(3)]
    local = PlanExecutor(here, graph)
    expected: list[dict[str, Any]] = [local.run(sample).outputs for sample in feeds]
    local.close()
    with cluster("local:2") as hosts:
        executor = ClusterPlanExecutor(plan, graph, hosts)
        try:
            got = [executor.run(sample).outputs for sample in feeds]
        finally:
            executor.close()
    for outputs, reference in zip(got, expected, strict=True):
        np.testing.assert_allclose(outputs["y"], reference["y"], rtol=1e-3, atol=1e-3)
