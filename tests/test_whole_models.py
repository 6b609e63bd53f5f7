"""A peer's library running the whole model: a plan stands for every peer that ran it.

OpenVINO's one-node probe refuses control flow (an ``If`` whose condition depends on the
data), yet OpenVINO compiles a model holding one; its single-target plan then puts the
``If`` on the fallback, and without the ``whole:`` plan no candidate would be what
"openvino alone" runs, so a peer could lead and never be kept.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from autopart import api
from autopart.plan.schema import PlanError
from autopart.plan.validate import validate_plan
from autopart.search.candidates import CandidateKind
from autopart.targets.devices import discover
from autopart.targets.openvino import library as ov_library
from autopart.tuning.options import TuneOptions
from autopart.tuning.peers import peer_equivalents
from autopart.tuning.workflow import tune_model
from tests.test_profile import FAST

pytestmark = pytest.mark.skipif(not ov_library.HAVE_OPENVINO, reason="needs openvino")

TARGETS = ["cpu@openvino", "cpu@onnxruntime"]
WHOLE = "whole:cpu@openvino"


def branching_model(path: Path) -> Path:
    """x -> Conv -> If(sum > 0: y * 2, else: y + 1) -> Relu; the condition is the data's."""
    shape = [1, 4, 8, 8]
    weight = np.random.default_rng(0).standard_normal((4, 4, 3, 3)).astype(np.float32)

    def branch(name: str, op: str, constant: float) -> onnx.GraphProto:
        k = helper.make_tensor(f"{name}_k", TensorProto.FLOAT, [], [constant])
        return helper.make_graph(
            [helper.make_node(op, ["y", f"{name}_k"], [f"{name}_out"])],
            name,
            [],
            [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, shape)],
            [k],
        )

    nodes = [
        helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("ReduceSum", ["y"], ["total"], keepdims=0, name="total"),
        helper.make_node("Greater", ["total", "zero"], ["positive"], name="positive"),
        helper.make_node(
            "If",
            ["positive"],
            ["chosen"],
            name="branch",
            then_branch=branch("then", "Mul", 2.0),
            else_branch=branch("else", "Add", 1.0),
        ),
        helper.make_node("Relu", ["chosen"], ["out"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "branching",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)],
        [
            onnx.numpy_helper.from_array(weight, "w"),
            onnx.numpy_helper.from_array(np.zeros((), np.float32), "zero"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """The branching model tuned in f32 on OpenVINO and onnxruntime (fast profile)."""
    tmp = tmp_path_factory.mktemp("whole")
    model = branching_model(tmp / "branching.onnx")
    api.profile(str(model), TARGETS, tmp / "profiles", settings=FAST)
    options = TuneOptions.build(
        targets=TARGETS, profiles_dir=tmp / "profiles", search_dir=tmp / "search",
        rounds=4, precision=("f32",), thorough=True,  # both targets, whichever is quicker
    )  # fmt: skip
    return model, tune_model(str(model), options)


@pytest.mark.slow
def test_the_probe_refuses_the_branch_and_the_single_plan_falls_back(tuned: tuple) -> None:
    _, report = tuned
    single = report.outcome.candidates["single:cpu@openvino"]
    assert single.off_target_nodes == 1  # the If, on the fallback
    assert str(single.assignment["branch"]) != "cpu@openvino"


def test_the_whole_plan_stands_for_openvino_alone(tuned: tuple) -> None:
    _, report = tuned
    whole = report.outcome.candidates[WHOLE]
    assert whole.kind is CandidateKind.WHOLE and len(whole.plan.partitions) == 1
    assert {str(t) for t in whole.assignment.values()} == {"cpu@openvino"}
    assert peer_equivalents(report.outcome.candidates)["openvino alone f32"] == WHOLE


def test_the_whole_plan_was_timed_whole_and_ran_correct(tuned: tuple) -> None:
    _, report = tuned
    row = next(row for row in report.rows if row.name == WHOLE)
    assert row.measured_s is not None and row.measured_s > 0
    assert row.max_error is not None and row.max_error < 1e-4


def test_a_whole_plan_runs_and_matches_onnxruntime_on_both_branches(tuned: tuple) -> None:
    model, report = tuned
    plan, graph = report.outcome.candidates[WHOLE].plan, api.load(str(model))
    for sign in (1.0, -1.0):
        x = (sign * np.abs(np.random.default_rng(1).standard_normal((1, 4, 8, 8)))).astype(
            np.float32
        )
        outputs = api.run_plan(plan, graph, {"x": x}).outputs
        expected = ort.InferenceSession(str(model)).run(None, {"x": x})[0]
        np.testing.assert_allclose(outputs["out"], expected, rtol=1e-5, atol=1e-5)


def test_the_same_plan_of_a_graph_made_in_memory_is_refused(tuned: tuple) -> None:
    """Without the model as shipped, OpenVINO would compile autopart's export node by node."""
    model, report = tuned
    plan, graph = report.outcome.candidates[WHOLE].plan, api.load(str(model))
    validate_plan(plan, graph, discover())  # the file is there: the library runs it whole
    graph.meta.pop("source")
    with pytest.raises(PlanError, match=r"does not support node.*branch"):
        validate_plan(plan, graph, discover())


def _costs(model: Path) -> tuple[object, object]:
    """The branching model's graph and its costs from the fixture's profile."""
    from autopart.costmodel.from_profile import costs_from_profile
    from autopart.profile import Profile, machine_profile_path

    graph = api.load(str(model))
    profile = Profile.load(machine_profile_path(model.parent / "profiles", discover()))
    return graph, costs_from_profile(graph, profile, TARGETS)


def test_before_it_is_timed_whole_it_is_priced_as_its_single_plan(tuned: tuple) -> None:
    from autopart.search.options import SearchOptions
    from autopart.search.planner import search

    model, _ = tuned
    _, costs = _costs(model)
    costs.measured.clear()  # nothing timed whole: op costs alone
    outcome = search(costs, SearchOptions(precision=("f32",)))
    whole, single = outcome.candidates[WHOLE], outcome.candidates["single:cpu@openvino"]
    assert whole.simulation.sequential_s == pytest.approx(single.simulation.sequential_s)
    steps = [step.step for step in whole.simulation.schedule]
    assert steps == whole.plan.order  # its own steps, not the stand-in's


def test_pins_and_forbids_get_no_whole_plan(tuned: tuple) -> None:
    from autopart.search.constraints import Constraints
    from autopart.search.options import SearchOptions
    from autopart.search.planner import search

    model, _ = tuned
    _, costs = _costs(model)
    for constraints in (
        Constraints(forbids=[("Relu", "cpu@openvino")]),
        Constraints(pins=[("Conv", "cpu@onnxruntime")]),
    ):
        options = SearchOptions(precision=("f32",), constraints=constraints)
        assert not any(name.startswith("whole:") for name in search(costs, options).candidates)


def test_a_graph_made_in_memory_gets_no_whole_plan(tuned: tuple) -> None:
    from autopart.search.baselines import whole_models

    model, _ = tuned
    graph, costs = _costs(model)
    assert [str(b.target) for b in whole_models(costs)] == ["cpu@openvino"]
    graph.meta.pop("source")
    assert whole_models(costs) == []
