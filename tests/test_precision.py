"""Precision as a level of the target: spelling, constraints, the budget, tune and bench."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from unittest import mock

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import autopart
from autopart.costmodel.accuracy import ErrorModel
from autopart.costmodel.costs import Costs
from autopart.errors import AutopartError, TargetError
from autopart.ir.target import PRECISIONS, VirtualDevice
from autopart.plan.build import build_plan_for
from autopart.plan.schema import Plan
from autopart.profile.sensitivity import measure_error_model, round_to
from autopart.report.html import render_html
from autopart.runtime import random_inputs
from autopart.runtime.plan_executor import PlanExecutor
from autopart.search.candidates import CandidateKind
from autopart.search.constraints import matches
from autopart.search.ilp import solve_ilp
from autopart.search.options import PeerMultiple, parse_precisions, parse_tolerance
from autopart.search.simulator import evaluate
from autopart.settings import COMMON
from autopart.targets.openvino import codegen as ovgen
from autopart.tuning.accuracy import (
    AccuracyPolicy,
    follow_peer,
    search_error_model,
)
from autopart.tuning.judge import random_judge
from autopart.tuning.metrics import MAX_REL, Metric
from autopart.tuning.options import BenchOptions, TuneOptions
from autopart.tuning.oracle import check_outputs
from autopart.tuning.plan_rows import plan_precisions
from autopart.tuning.settings import ACCURACY
from autopart.tuning.verify import measure_plans
from autopart.tuning.workflow import tune_model
from tests.test_errors import assert_one_line_error, invoke
from tests.test_profile import FAST, tiny_cnn, tiny_path  # noqa: F401 - fixture
from tests.test_search_exact import OPENCL, cases

HAVE_OPENVINO = ovgen.OpenVinoCodegen.available()
BF16 = HAVE_OPENVINO and "bf16" in ovgen.OpenVinoCodegen.precisions()
needs_bf16 = pytest.mark.skipif(not BF16, reason="this CPU has no bf16 units OpenVINO uses")

names = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)


@given(
    device=names,
    index=st.none() | st.integers(0, 9),
    unit=st.none() | st.integers(0, 64),
    codegen=st.none() | names,
    precision=st.sampled_from([None, *PRECISIONS]),
)
def test_a_target_reads_back_as_written_and_f32_is_no_precision(
    device: str, index: int | None, unit: int | None, codegen: str | None, precision: str | None
) -> None:
    name = device if index is None else f"{device}:{index}"
    target = VirtualDevice(name, unit, codegen, precision if codegen else None)
    assert VirtualDevice.parse(str(target)) == target
    assert target.precision != "f32"
    assert target.computes_in == (precision if codegen and precision else "f32")


def test_precision_spelling_and_its_errors() -> None:
    assert VirtualDevice.parse("cpu/0@openvino:int8") == VirtualDevice("cpu", 0, "openvino", "int8")
    assert VirtualDevice.parse("cpu@openvino:f32") == VirtualDevice.parse("cpu@openvino")
    assert str(VirtualDevice.parse("cpu@openvino:bf16")) == "cpu@openvino:bf16"
    with pytest.raises(TargetError, match="unknown precision 'fp8'"):
        VirtualDevice.parse("cpu@openvino:fp8")
    with pytest.raises(TargetError, match="malformed target"):
        VirtualDevice.parse("cpu:bf16")  # a precision only follows a codegen


def test_patterns_match_every_precision_unless_they_name_one() -> None:
    bf16, f32 = VirtualDevice.parse("cpu@openvino:bf16"), VirtualDevice.parse("cpu@openvino")
    assert matches(VirtualDevice("cpu", None, "openvino"), bf16)  # a forbid of the codegen
    assert matches(VirtualDevice("cpu"), bf16)
    assert matches(bf16, bf16) and not matches(bf16, f32)
    # a node pinned to the full f32 target does not narrow to its bf16 twin
    assert f32.narrow(bf16) is None and bf16.narrow(VirtualDevice("cpu")) == bf16


def test_precision_lists_and_the_budget() -> None:
    assert parse_precisions(None) is None and parse_precisions("auto") is None
    assert parse_precisions("f32") == ("f32",)
    assert parse_precisions("bf16") == ("f32", "bf16")  # f32 is always allowed
    assert parse_precisions(["int8", "f32"]) == ("f32", "int8")
    with pytest.raises(AutopartError, match="unknown precision 'fp16'"):
        parse_precisions("f32,fp16")
    assert AccuracyPolicy(("f32",)).tolerance_rule() == COMMON.check_tolerance
    assert AccuracyPolicy(None, 0.05).tolerance_rule() == 0.05
    assert AccuracyPolicy().tolerance_rule() is follow_peer
    assert AccuracyPolicy(("f32",)).allows("f32") and not AccuracyPolicy(("f32",)).allows("bf16")
    with pytest.raises(AutopartError, match="--tolerance"):
        TuneOptions.build(tolerance=-1.0)
    with pytest.raises(AutopartError, match="--tolerance"):
        TuneOptions.build(tolerance=float("nan"))


def test_the_default_budget_is_openvino_as_installed_plus_the_allowance() -> None:
    allowance = 1 + ACCURACY.peer_allowance
    assert follow_peer({"openvino alone": 0.02, "x": 0.5}) == pytest.approx(0.02 * allowance)
    assert follow_peer({"openvino alone": 1e-7}) == COMMON.check_tolerance  # f32 CPUs
    assert follow_peer({"onnxruntime alone": 0.0}) == COMMON.check_tolerance  # no OpenVINO


def test_a_tolerance_may_be_a_multiple_of_openvino_as_installeds_error() -> None:
    assert parse_tolerance("0.5x") == PeerMultiple(0.5) and str(PeerMultiple(0.5)) == "0.5x"
    assert parse_tolerance(" 2X ") == PeerMultiple(2.0)
    assert parse_tolerance("1e-3") == 1e-3 and parse_tolerance(None) is None
    for bad in ("0x", "-1x", "nanx", "infx", "x", "half", "1e-3y", "-0.1"):
        with pytest.raises(AutopartError, match="--tolerance"):
            parse_tolerance(bad)
    half = AccuracyPolicy(None, "0.5x")
    rule = half.tolerance_rule()
    assert callable(rule) and rule({"openvino alone": 0.02}) == pytest.approx(0.01)
    assert rule({"openvino alone": 1e-4}) == COMMON.check_tolerance  # never below f32's
    assert "0.5x openvino alone's error" in half.describe()
    assert AccuracyPolicy(("f32",), "0.5x").tolerance_rule() == COMMON.check_tolerance
    assert TuneOptions.build(tolerance="0.5x").accuracy_policy.peer_factor == 0.5
    assert AccuracyPolicy().peer_factor == pytest.approx(1 + ACCURACY.peer_allowance)
    assert BenchOptions.build(tolerance="2e-2").accuracy_policy.tolerance == 0.02


def test_a_multiple_of_the_peers_error_scales_the_searchs_bound() -> None:
    graph = autopart.load("squeezenet")
    bf16 = ["cpu@openvino", "cpu@openvino:bf16"]
    half = search_error_model(graph, bf16, AccuracyPolicy(None, "0.5x"), 0)
    given = search_error_model(graph, bf16, AccuracyPolicy(None, 0.004), 0)
    assert half is not None and given is not None
    assert half.all_reduced == pytest.approx(given.all_reduced)
    assert half.all_reduced > 2 * COMMON.check_tolerance  # so half of it is above the floor
    assert half.tolerance == pytest.approx(0.5 * half.all_reduced) and given.tolerance == 0.004


def test_bad_precision_options_are_one_line_errors(tiny_path: Path) -> None:  # noqa: F811
    code, output = invoke("tune", str(tiny_path), "--precision", "fp8")
    assert_one_line_error(code, output, "fp8")
    code, output = invoke("bench", str(tiny_path), "--tolerance", "0")
    assert_one_line_error(code, output, "--tolerance")
    code, output = invoke("tune", str(tiny_path), "--tolerance", "halfx")
    assert_one_line_error(code, output, "--tolerance")
    code, output = invoke("run", str(tiny_path), "--assign", "*=cpu@numpy:bf16")
    assert_one_line_error(code, output, "numpy cannot compute in bf16")


@needs_bf16
def test_errors_are_the_largest_over_the_evaluation_samples_and_held_to_the_tolerance() -> None:
    graph = autopart.load("squeezenet")
    bf16 = VirtualDevice.parse("cpu@openvino:bf16")
    plan = build_plan_for(graph, {n.name: bf16 for n in graph.nodes}, bf16, "bf16")
    judge = random_judge(graph, Metric(MAX_REL), 0)
    feeds, samples = random_inputs(graph, 0), judge.samples
    measured = measure_plans(graph, {"bf16": plan}, feeds, rounds=1, judge=judge,
                             tolerance=lambda errors: errors["bf16"] / 2)  # fmt: skip
    result = measured["bf16"]
    with PlanExecutor(plan, graph) as executor:
        errors = [
            max(check_outputs(graph, feed, executor.run(feed).outputs).values())
            for feed in [feeds, *samples]
        ]
    assert result.max_error == pytest.approx(max(errors))
    assert len(set(np.round(errors, 6))) > 1  # the samples differ: the max is over them all
    assert result.tolerance == pytest.approx(result.max_error / 2) and not result.correct


@pytest.mark.slow
@needs_bf16
def test_tune_uses_bf16_within_the_budget_and_f32_when_asked(tmp_path: Path) -> None:
    targets = ["cpu@openvino", "cpu@openvino:bf16"]
    common = {"profiles_dir": tmp_path / "p", "search_dir": tmp_path / "s", "rounds": 3}
    report = tune_model("squeezenet", TuneOptions(targets=targets, **common))  # type: ignore[arg-type]
    measured = report.plan.measured
    assert measured is not None and measured.tolerance is not None
    as_installed = report.peers["openvino alone"]
    assert measured.tolerance == pytest.approx(
        follow_peer({"openvino alone": as_installed.max_error})
    )
    assert measured.max_error is not None and measured.max_error <= measured.tolerance
    reduced = [r for r in report.rows if ":bf16" in r.name and r.measured_s is not None]
    assert reduced and all(r.max_error is not None for r in reduced)  # bf16 plans were run
    chosen = next(r for r in report.rows if r.name == report.chosen)
    if not any(":bf16" in p.target for p in report.plan.partitions):  # bf16 halves its time,
        assert chosen.measured_s is not None  # but a loaded machine may say otherwise:
        assert chosen.measured_s <= min(r.measured_s or math.inf for r in reduced)  # measured
    with pytest.raises(AutopartError, match="computes in bf16, which --precision f32"):
        tune_model("squeezenet", TuneOptions.build(targets=targets, precision="f32", **common))
    exact = tune_model(
        "squeezenet",
        TuneOptions.build(targets=targets[:1], precision="f32", **common),
    )
    assert all(":" not in p.target.split("@")[-1] for p in exact.plan.partitions)
    assert exact.plan.measured is not None
    assert exact.plan.measured.tolerance == COMMON.check_tolerance
    assert exact.plan.measured.max_error is not None and exact.plan.measured.max_error < 1e-3
    assert all(":bf16" not in row.name for row in exact.rows)
    saved = Plan.load(exact.plan_path)
    assert saved.measured is not None and saved.measured.tolerance == COMMON.check_tolerance


class _OnOpenCL(ErrorModel):
    """A budget in which the OpenCL target of the random cases stands for a reduced one."""

    def weight(self, node: str, target: VirtualDevice) -> float:
        return self.weights.get((node, "bf16"), 0.0) if target == OPENCL else 0.0


@settings(max_examples=15, deadline=None)
@given(cases(), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1))
def test_the_ilp_is_exact_under_a_tolerance(costs: Costs, quantile: float, seed: int) -> None:
    _check_exact_under_a_budget(costs, quantile, seed)


@settings(max_examples=15, deadline=None)
@given(cases(), st.floats(0.0, 0.3), st.integers(0, 2**32 - 1))  # budgets that bind
def test_the_ilp_checks_every_answer_against_the_budget_not_only_its_row(
    costs: Costs, quantile: float, seed: int
) -> None:
    # HiGHS may accept a row a hair over its bound; the solve loop must still never
    # answer outside the budget. Without the row at all, the loop's own check is all left.
    from autopart.search.ilp_formulation import Formulation

    with mock.patch.object(Formulation, "_accuracy_row", lambda *_: None):
        _check_exact_under_a_budget(costs, quantile, seed)


def _check_exact_under_a_budget(costs: Costs, quantile: float, seed: int) -> None:
    """The ILP's answer fits a budget set at a quantile of all errors, and is the best that does."""
    rng = np.random.default_rng(seed)
    names = [node.name for node in costs.graph.nodes]
    weights = {(name, "bf16"): float(rng.uniform(0, 1e-4)) for name in names}
    choices = [
        dict(zip(names, c, strict=True)) for c in itertools.product(*map(costs.supported, names))
    ]
    unbounded = _OnOpenCL(weights, 1.0)
    errors = [unbounded.predicted_error(a) for a in choices]
    budget = _OnOpenCL(weights, float(np.quantile(errors, quantile)))
    fitting = [a for a in choices if budget.fits(a)]
    best = min(evaluate(a, costs).sequential_s for a in fitting)
    result = solve_ilp(costs, time_limit_s=30, accuracy=budget)
    assert result.optimal
    assert budget.fits(result.assignment)
    assert math.isclose(result.objective_s, best, rel_tol=1e-6)


def test_sensitivities_add_up_to_the_error_of_every_node_reduced() -> None:
    graph = autopart.load("squeezenet")
    feeds = random_inputs(graph, 0)
    budget = measure_error_model(graph, feeds, "bf16", None)
    every = {node.name: VirtualDevice.parse("cpu@openvino:bf16") for node in graph.nodes}
    assert budget.all_reduced > COMMON.check_tolerance  # bf16 is measurably off
    assert budget.predicted_error(every) == pytest.approx(budget.all_reduced, rel=1e-6)
    none = {node.name: VirtualDevice.parse("cpu@openvino") for node in graph.nodes}
    assert budget.predicted_error(none) == 0.0
    # the emulation agrees with OpenVINO's bf16 on the same inputs within a factor of two
    plan = build_plan_for(graph, every, every[graph.nodes[0].name], "bf16")
    if BF16:
        with PlanExecutor(plan, graph) as executor:
            real = max(check_outputs(graph, feeds, executor.run(feeds).outputs).values())
        assert budget.all_reduced / 2 < real < budget.all_reduced * 2
    # rounding through bf16 keeps 8 significant bits
    x = np.float32([1.0, 1.00390625, 3.14159265])
    assert list(round_to("bf16", x)) == [1.0, 1.0, 3.140625]


def _padded_rows_model() -> onnx.ModelProto:
    """Rows of x normalised, the last (a constant 1000 plus noise: padding) then dropped.

    The LayerNormalization's local bf16 error is huge (rounding 1000 swamps the padding
    row's variance) though the rows that reach the output barely move; four MatMuls follow.
    """
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln"], axis=-1),
        helper.make_node("Slice", ["ln", "start", "stop", "axis"], ["kept"]),
    ]
    inits = [
        numpy_helper.from_array(np.ones(16, np.float32), "gamma"),
        numpy_helper.from_array(np.zeros(16, np.float32), "beta"),
        numpy_helper.from_array(np.int64([0]), "start"),
        numpy_helper.from_array(np.int64([7]), "stop"),
        numpy_helper.from_array(np.int64([1]), "axis"),
    ]
    last = "kept"
    for index in range(4):
        weight = rng.standard_normal((16, 16)).astype(np.float32) / 4
        inits.append(numpy_helper.from_array(weight, f"w{index}"))
        nodes.append(helper.make_node("MatMul", [last, f"w{index}"], [f"m{index}"]))
        last = f"m{index}"
    graph = helper.make_graph(
        nodes, "padded_rows",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
        [helper.make_tensor_value_info(last, TensorProto.FLOAT, [1, 7, 16])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_node_of_huge_local_error_does_not_price_the_others_at_nothing() -> None:
    graph = autopart.load(_padded_rows_model())
    x = np.random.default_rng(1).standard_normal((1, 8, 16)).astype(np.float32)
    x[0, 7] = 1000 + 1e-3 * x[0, 7]  # the padding row: constant, but for noise
    feeds = {"x": x}
    bf16 = VirtualDevice.parse("cpu@openvino:bf16")
    f32 = VirtualDevice.parse("cpu@openvino")
    whole = measure_error_model(graph, feeds, "bf16", None)
    grouped = measure_error_model(graph, feeds, "bf16", None, groups=2)
    assert (whole.method, grouped.method) == ("whole", "grouped")
    norm = next(n.name for n in graph.nodes if n.op_type == "LayerNormalization")
    rest = {n.name: f32 if n.name == norm else bf16 for n in graph.nodes}
    emulated = whole.predicted_error(rest)  # measured node by node, whole: the truth here
    assert emulated > 1e-3
    # the group of the normalisation was measured whole, so the MatMuls keep their share
    assert grouped.predicted_error(rest) > emulated / 2
    # a local error alone would give the normalisation every share: its own output is noise
    local = measure_error_model(graph, feeds, "bf16", None, groups=1)
    assert local.predicted_error(rest) < emulated / 10


@pytest.mark.slow
@needs_bf16
def test_a_tolerance_below_bf16s_error_keeps_the_plan_within_it(tmp_path: Path) -> None:
    targets = ["cpu@openvino", "cpu@openvino:bf16"]
    common = {"profiles_dir": tmp_path / "p", "search_dir": tmp_path / "s", "rounds": 3}
    options = TuneOptions.build(targets=targets, tolerance=0.01, **common)
    report = tune_model("squeezenet", options)
    ilp = next(c for c in report.outcome.candidates.values() if c.kind is CandidateKind.ILP)
    accuracy = report.outcome.candidates and ilp.fits_accuracy
    assert accuracy  # the ILP's plan keeps within the bound it was given (or a tighter one)
    row = next(r for r in report.rows if r.name == ilp.name)
    assert row.max_error is not None
    measured = report.plan.measured
    assert measured is not None and measured.max_error is not None
    assert measured.tolerance == 0.01 and measured.max_error <= 0.01
    assert report.plan.predicted is not None and report.plan.predicted.error is not None


@pytest.mark.slow
@needs_bf16
def test_half_openvino_as_installeds_error_holds_the_tuned_plan_to_it(tmp_path: Path) -> None:
    targets = ["cpu@openvino", "cpu@openvino:bf16"]
    common = {"profiles_dir": tmp_path / "p", "search_dir": tmp_path / "s", "rounds": 3}
    report = tune_model(
        "squeezenet", TuneOptions.build(targets=targets, tolerance="0.5x", **common)
    )
    measured, peer = report.plan.measured, report.peers["openvino alone"]
    assert measured is not None and measured.tolerance is not None
    assert measured.tolerance == pytest.approx(follow_peer({"openvino alone": peer.max_error}, 0.5))
    assert measured.max_error is not None and measured.max_error <= measured.tolerance
    assert not peer.correct  # openvino as installed is itself over half its own error


def test_show_marks_each_node_with_its_precision() -> None:
    graph = autopart.load("squeezenet")
    f32, bf16 = VirtualDevice.parse("cpu@onnxruntime"), VirtualDevice.parse("cpu@openvino:bf16")
    half = {node.name: (bf16 if index % 2 else f32) for index, node in enumerate(graph.nodes)}
    plan = build_plan_for(graph, half, f32, "mixed")  # planning needs no bf16 hardware
    page = render_html(plan, graph)
    marked = dict(re.findall(r'data-node="([^"]+)"[^>]*data-precision="([a-z0-9]+)"', page))
    assert marked == {name: target.computes_in for name, target in half.items()}
    assert page.count('stroke-dasharray="4 2"') >= sum(t.reduced for t in half.values())


@needs_bf16
def test_one_partition_mixes_precisions_with_convert_islands() -> None:
    graph = autopart.load("squeezenet")
    f32, bf16 = VirtualDevice.parse("cpu@openvino"), VirtualDevice.parse("cpu@openvino:bf16")
    convs = [node.name for node in graph.nodes if node.op_type == "Conv"]
    half = set(convs[: len(convs) // 2])
    mixed = {node.name: (bf16 if node.name in half else f32) for node in graph.nodes}
    plan = build_plan_for(graph, mixed, f32, "mixed")
    assert len(plan.partitions) == 1 and plan.partitions[0].target == "cpu@openvino"
    uniform = build_plan_for(graph, dict.fromkeys(mixed, bf16), f32, "bf16")
    assert [p.target for p in uniform.partitions] == ["cpu@openvino:bf16"]
    feeds = random_inputs(graph, 0)
    errors = {}
    for name, chosen in {"mixed": plan, "bf16": uniform}.items():
        with PlanExecutor(chosen, graph) as executor:
            errors[name] = max(check_outputs(graph, feeds, executor.run(feeds).outputs).values())
            (step,) = executor.steps.values()
            runtime = step.compiled.model.get_runtime_model()  # type: ignore[union-attr]
            kinds = {
                op.get_rt_info()["runtimePrecision"].astype(str)
                for op in runtime.get_ordered_ops()
                if "runtimePrecision" in op.get_rt_info()
            }
            assert "bf16" in kinds and "f32" in kinds  # OpenVINO keeps some ops f32 itself
    # half the convolutions in bf16: measurably off f32, within bf16's scale
    assert COMMON.check_tolerance < errors["mixed"] < 0.1


def test_a_plans_precisions_come_from_its_nodes_not_its_partitions() -> None:
    graph = autopart.load("squeezenet")
    f32, bf16 = VirtualDevice.parse("cpu@openvino"), VirtualDevice.parse("cpu@openvino:bf16")
    mixed = {node.name: (bf16 if index == 3 else f32) for index, node in enumerate(graph.nodes)}
    plan = build_plan_for(graph, mixed, f32, "mixed")
    assert [p.target for p in plan.partitions] == ["cpu@openvino"]  # one partition, at f32
    assert plan_precisions(plan) == "f32+bf16"
    assert plan_precisions(build_plan_for(graph, dict.fromkeys(mixed, f32), f32, "f32")) == "f32"


def test_bench_times_a_mixed_precision_plan_apart_from_the_f32_plan_of_its_partition() -> None:
    from autopart.tuning.bench import _twins

    graph = autopart.load(tiny_cnn())
    f32, bf16 = VirtualDevice.parse("cpu@openvino"), VirtualDevice.parse("cpu@openvino:bf16")
    first = graph.nodes[0].name
    plans = {
        "f32": build_plan_for(graph, {n.name: f32 for n in graph}, f32, "tiny"),
        "again": build_plan_for(graph, {n.name: f32 for n in graph}, f32, "tiny"),
        "mixed": build_plan_for(
            graph, {n.name: bf16 if n.name == first else f32 for n in graph}, f32, "tiny"
        ),
    }
    assert [p.target for p in plans["mixed"].partitions] == ["cpu@openvino"]  # one partition
    assert _twins(plans) == {"f32": "f32", "again": "f32", "mixed": "mixed"}


@needs_bf16
def test_an_island_holding_a_cast_to_f32_still_compiles() -> None:
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Cast", ["r"], ["c"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Pow", ["c", "two"], ["p"], name="pow"),
        helper.make_node("Add", ["p", "x"], ["y"], name="add"),
    ]
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    body = helper.make_graph(nodes, "cast_in_island", [x], [y], [two])
    model = helper.make_model(body, opset_imports=[helper.make_opsetid("", 17)])
    graph = autopart.load(model)
    f32, bf16 = VirtualDevice.parse("cpu@openvino"), VirtualDevice.parse("cpu@openvino:bf16")
    for reduced in ({"cast", "pow"}, {"relu", "cast", "pow"}, {"cast"}):
        mixed = {n.name: (bf16 if n.name in reduced else f32) for n in graph.nodes}
        plan = build_plan_for(graph, mixed, f32, "mixed")
        feeds = random_inputs(graph, 0)
        with PlanExecutor(plan, graph) as executor:
            errors = check_outputs(graph, feeds, executor.run(feeds).outputs)
        assert max(errors.values()) < 0.02, reduced


_LOCAL = st.one_of(
    st.floats(0.0, 1e308, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 1e-300, 1e160, 1e300, math.inf, math.nan]),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 1e150, allow_nan=False),
            st.lists(st.tuples(st.booleans(), _LOCAL), min_size=1, max_size=5),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_a_groups_error_is_shared_whole_whatever_its_nodes_local_errors(
    groups: list[tuple[float, list[tuple[bool, float]]]],
) -> None:
    """Local errors near the float's range (a quantised model's, 1e160 off) cannot overflow."""
    from autopart.profile.sensitivity import _shared

    cut, errors, local = [], [], {}
    for g, (error, nodes) in enumerate(groups):
        names = [f"g{g}n{i}" for i in range(len(nodes))]
        cut.append(names)
        errors.append(error)
        local.update(
            {name: value for name, (known, value) in zip(names, nodes, strict=True) if known}
        )
    shares = _shared(cut, errors, local)
    for names, error in zip(cut, errors, strict=True):
        assert all(shares[name] >= 0 for name in names)
        assert math.fsum(shares[name] for name in names) == pytest.approx(error * error, rel=1e-9)
