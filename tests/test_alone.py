"""Lone partitions: profiled both ways where the library's defaults differ, priced alone."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from autopart import api
from autopart.costmodel.alone import FLOOR, alone_saving
from autopart.costmodel.calibration import model_tag, window_bounds
from autopart.costmodel.from_profile import costs_from_profile
from autopart.costmodel.measurements import Measurement
from autopart.ir.onnx_import import load_graph
from autopart.ir.target import VirtualDevice
from autopart.plan.build import build_plan_for
from autopart.profile import Profile
from autopart.profile.profiler import plan_jobs
from autopart.runtime import random_inputs
from autopart.runtime.plan_executor import PlanExecutor
from autopart.search.simulator import simulate
from autopart.targets.codegen import HOST
from autopart.targets.devices import discover
from autopart.targets.registry import get_codegen
from autopart.targets.resolve import resolve
from tests.test_errors import invoke
from tests.test_profile import FAST

WHOLE = "cpu@onnxruntime"


def _row(seconds: float) -> Measurement:
    return Measurement(seconds, seconds, seconds, seconds, seconds, 5, "wall")


def test_only_onnxruntime_on_a_whole_device_compiles_a_lone_partition_differently() -> None:
    machine = discover()
    differs = {
        target: resolve(target, machine).codegen.alone_differs(resolve(target, machine).placement)
        for target in (WHOLE, "cpu/0@onnxruntime", "cpu@numpy", "cpu@openvino")
    }
    assert differs == {
        WHOLE: True, "cpu/0@onnxruntime": False, "cpu@numpy": False, "cpu@openvino": False,
    }  # fmt: skip
    assert not get_codegen("numpy").alone_differs(HOST)


def test_a_targets_alone_saving_is_the_median_per_node_of_its_own_model_first() -> None:
    graph = api.load("squeezenet")
    profile = Profile({"fingerprint": "test"})
    assert alone_saving(profile, graph, WHOLE) == 0.0
    # windows of 10 nodes saving 0.5, 0.2 and 0.1 ms: 50, 20 and 10 us per node
    for index, alone in enumerate([0.5e-3, 0.8e-3, 0.9e-3]):
        key = f"other@0123456789ab[{index}:{index + 10}]"
        profile.record("alone", WHOLE, key, _row(alone), shared_s=1e-3)
    assert alone_saving(profile, graph, WHOLE) == pytest.approx(20e-6)  # other models
    own = f"{model_tag(graph)}[7:15]"
    profile.record("alone", WHOLE, own, _row(1.2e-3), shared_s=1e-3)
    assert alone_saving(profile, graph, WHOLE) == pytest.approx(-25e-6)  # alone was slower
    assert alone_saving(profile, graph, "cpu/0@onnxruntime") == 0.0


@pytest.fixture(scope="module")
def whole_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """squeezenet profiled on onnxruntime's whole device, once for this module."""
    store = tmp_path_factory.mktemp("profiles")
    api.profile("squeezenet", [WHOLE], store, settings=FAST)
    return next(store.glob("*.csv"))


def test_profiling_times_every_calibration_window_alone_and_shared(whole_profile: Path) -> None:
    profile = Profile.load(whole_profile)
    graph = api.load("squeezenet")
    alone, windows = profile.rows("alone", WHOLE), profile.rows("calibration", WHOLE)
    assert len(alone) == 3 and sorted(alone["key"]) == sorted(windows["key"])
    assert (alone["median_s"] > 0).all() and (alone["shared_s"] > 0).all()
    assert alone["shared_s"].map(math.isfinite).all()
    # a profile saved before alone rows existed measures them, and nothing else
    older = Profile(profile.meta, profile.table[profile.table["kind"] != "alone"])
    jobs = plan_jobs(graph, [resolve(WHOLE, discover())], older)[0]
    assert sorted(job.kind for job in jobs) == ["alone"] * 3
    assert plan_jobs(graph, [resolve(WHOLE, discover())], profile)[0] == []


def test_only_a_plans_only_partition_is_priced_alone(whole_profile: Path) -> None:
    profile = Profile.load(whole_profile)
    graph = api.load("squeezenet")
    own = profile.rows("alone", WHOLE)["key"]
    for key in own:  # every window saves 10 us per node
        start, end = window_bounds(str(key))
        profile.record("alone", WHOLE, key, _row(1e-3), shared_s=1e-3 + (end - start) * 10e-6)
    costs = costs_from_profile(graph, profile, [WHOLE])
    (target,) = costs.targets
    assert costs.alone[target] == pytest.approx(10e-6)
    names = [node.name for node in graph.nodes]
    shared = costs.partition_cost(names, target)
    saved = shared - len(names) * 10e-6
    assert costs.partition_cost(names, target, alone=True) == pytest.approx(saved)
    huge = replace(costs, alone={target: 1.0})  # a second per node: the floor holds
    assert huge.partition_cost(names, target, alone=True) == pytest.approx(FLOOR * shared)
    whole = build_plan_for(graph, dict.fromkeys(names, target), target, "squeezenet")
    assert len(whole.partitions) == 1
    assert simulate(whole, costs).makespan_s == pytest.approx(saved)
    # a plan of two partitions: neither is alone
    other = VirtualDevice.parse("cpu/0@onnxruntime")
    both = replace(
        costs,
        targets=[target, other],
        node_cost={n: {**c, other: c[target]} for n, c in costs.node_cost.items()},
    )
    half = len(names) // 2
    assignment = {n: (target if i < half else other) for i, n in enumerate(names)}
    split = build_plan_for(graph, assignment, target, "squeezenet")
    first = next(p for p in split.partitions if p.target == str(target))
    assert len(split.partitions) >= 2
    priced = simulate(split, both).step_cost[first.id]
    assert priced == pytest.approx(both.partition_cost(first.nodes, target, split=True))


def test_cli_profile_shows_what_a_lone_partition_saves_per_node(whole_profile: Path) -> None:
    profile = Profile.load(whole_profile)
    saving = alone_saving(profile, api.load("squeezenet"), WHOLE)
    args = ["profile", "squeezenet", "--targets", WHOLE, "--profiles", str(whole_profile.parent)]
    code, output = invoke(*args)
    assert code == 0, output
    text = " ".join(output.split())
    assert "0 new measurements" in text and "alone saves" in text
    assert f"{saving * 1e6:.1f} µs" in text


def test_a_one_partition_plan_runs_its_library_bare_and_matches_onnxruntime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = Path(__file__).parent / "fixtures" / "transformer_encoder.onnx"
    graph = load_graph(model)
    target = VirtualDevice.parse(WHOLE)
    plan = build_plan_for(graph, {node.name: target for node in graph}, target, str(model))
    assert len(plan.partitions) == 1 and not plan.copies
    feeds = random_inputs(graph, seed=4)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    expected = dict(zip(graph.outputs, session.run(graph.outputs, feeds), strict=True))

    def no_scheduling(*_: object) -> None:
        raise AssertionError("a one-partition plan went through the scheduler")

    with PlanExecutor(plan, graph) as executor:
        monkeypatch.setattr(executor, "_run_sequential", no_scheduling)
        monkeypatch.setattr(executor, "_run_concurrent", no_scheduling)
        result = executor.run(feeds, repeat=3, warmup=2)
    assert len(result.latencies) == 3 and all(seconds > 0 for seconds in result.latencies)
    assert [step.step for step in result.steps] == [plan.partitions[0].id]
    assert sorted(result.outputs) == sorted(graph.outputs)
    for name, value in expected.items():
        np.testing.assert_allclose(result.outputs[name], value, rtol=1e-5, atol=1e-6)
