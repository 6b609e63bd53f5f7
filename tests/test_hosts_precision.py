"""Precision across hosts: the targets a tune may use, their op sums scaled to whole timings."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.cli import main
from autopart.cli.common import print_table
from autopart.cli.hosts import candidates_table
from autopart.costmodel.calibration import CALIBRATION
from autopart.costmodel.costs import Costs
from autopart.ir.target import VirtualDevice
from autopart.loader import load_model
from autopart.search.hosts import HostStagePlan
from autopart.tuning.accuracy import AccuracyPolicy
from autopart.tuning.host_profiles import HostProfile
from autopart.tuning.hosts_tune import EXACT, Candidate, HostTuneReport, _host_costs
from autopart.tuning.profile_model import profile_model
from autopart.tuning.whole_scale import op_sum_factor
from tests.test_hosts import _two_cores, chosen_rows
from tests.test_profile import tiny_cnn

EXACT_TARGET = VirtualDevice.parse("cpu@numpy")
REDUCED_TARGET = VirtualDevice.parse("cpu@openvino:int8")  # offered on every x86 CPU


@settings(max_examples=80, deadline=None)
@given(
    costs=st.lists(st.floats(1e-6, 1e-2), min_size=1, max_size=12),
    launch=st.floats(0.0, 1e-3),
    ratio=st.floats(0.05, 20.0),
)
def test_op_costs_scaled_to_a_whole_timing_sum_to_it_within_the_factor_range(
    costs: list[float], launch: float, ratio: float
) -> None:
    graph = load_model(tiny_cnn())
    names = [node.name for node in graph.nodes][: len(costs)]
    node_cost = {n.name: {EXACT_TARGET: 0.0} for n in graph.nodes}
    for name, cost in zip(names, costs, strict=False):
        node_cost[name][EXACT_TARGET] = cost
    priced = Costs(graph, [EXACT_TARGET], node_cost, launch={EXACT_TARGET: launch})
    summed = sum(entry[EXACT_TARGET] for entry in node_cost.values())
    whole_s = launch + summed * ratio
    factor = op_sum_factor(priced, EXACT_TARGET, whole_s)
    low, high = CALIBRATION.factor_range
    if abs((launch + summed) / whole_s - 1) <= CALIBRATION.gross_error:
        assert factor is None  # close enough: the op sum stands
    elif low <= ratio <= high:
        assert factor == pytest.approx(ratio)
        assert launch + summed * factor == pytest.approx(whole_s)
    else:
        assert factor in (pytest.approx(low), pytest.approx(high))


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    folder = tmp_path_factory.mktemp("profiles")
    graph = load_model(tiny_cnn())
    _, profile, path = profile_model(graph, [str(EXACT_TARGET), str(REDUCED_TARGET)], folder)
    return graph, path, profile.fingerprint


def test_a_host_offers_the_precisions_the_policy_allows_scaled_to_its_whole_timings(
    profiled: tuple,
) -> None:
    graph, path, fingerprint = profiled
    host = HostProfile("host0", fingerprint, path, 0, 0, 0, 0.0)
    every = _host_costs(graph, host, None, AccuracyPolicy())
    assert set(every.targets) == {EXACT_TARGET, REDUCED_TARGET}
    exact = _host_costs(graph, host, None, EXACT)
    assert set(exact.targets) == {EXACT_TARGET}
    summed = sum(exact.node_cost[n.name][EXACT_TARGET] for n in graph.nodes)
    whole_s = exact.launch_cost(EXACT_TARGET) + 3 * summed  # the library fuses nothing here
    timed = dataclasses.replace(host, whole_s={str(EXACT_TARGET): whole_s})
    scaled = _host_costs(graph, timed, None, EXACT)
    for node in graph.nodes:
        assert scaled.node_cost[node.name][EXACT_TARGET] == pytest.approx(
            3 * exact.node_cost[node.name][EXACT_TARGET]
        )


def test_a_hosts_costs_price_copies_between_its_targets_as_a_local_tune_does(
    profiled: tuple,
) -> None:
    """Each target's op costs are its own profile's, and the copies, launches and edge
    costs between targets are those a local tune's costs hold: a stage may mix them."""
    from autopart.costmodel import costs_from_profile
    from autopart.profile import Profile
    from autopart.search.host_mix import stage_costs
    from autopart.search.simulator import plan_for, simulate

    graph, path, fingerprint = profiled
    every = _host_costs(graph, HostProfile("host0", fingerprint, path, 0, 0, 0, 0.0), None,
                        AccuracyPolicy())  # fmt: skip
    profile = Profile.load(path)
    local = costs_from_profile(graph, profile, list(every.targets))
    assert every.transfers == local.transfers and every.launch == local.launch
    assert every.unfused == local.unfused and every.layout == local.layout
    for target in every.targets:
        own = costs_from_profile(graph, profile, [target])
        for node in graph.nodes:
            assert every.node_cost[node.name].get(target) == own.node_cost[node.name].get(target)
    halves = {node.name: every.supported(node)[-1] for node in graph.nodes}  # int8 where it runs
    assert len(set(halves.values())) == 2
    sub = stage_costs(graph, every, 0, len(graph.nodes))
    assert simulate(plan_for(halves, sub), sub).sequential_s == pytest.approx(
        simulate(plan_for(halves, local), local).sequential_s
    )


@pytest.mark.slow  # two tunes on a local:2 cluster: about 40 s each
def test_a_tune_across_hosts_holds_every_plan_to_the_local_tolerance(tmp_path: Path) -> None:
    _two_cores()
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), model)
    common = ["tune", str(model), "--cluster", "local:2", "--budget", "20",
              "--targets", f"{EXACT_TARGET},{REDUCED_TARGET}",
              "--profiles", str(tmp_path / "profiles")]  # fmt: skip
    result = CliRunner().invoke(main, [*common, "-o", str(tmp_path / "any.json")])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())  # rich wraps long lines
    assert "accuracy: every precision offered" in flat and "every candidate held to" in flat
    held = float(flat.split("every candidate held to ")[1].split(",")[0])
    [chosen] = chosen_rows(result.output)
    assert float(chosen.split("│")[-2]) <= held
    exact = CliRunner().invoke(
        main, [*common, "--precision", "f32", "-o", str(tmp_path / "f32.json")]
    )
    assert exact.exit_code == 0, exact.output
    assert "accuracy: f32, tolerance" in " ".join(exact.output.split())  # --precision arrived
    rows = [line for line in exact.output.splitlines() if line.startswith("│ ")]
    assert rows and not any(str(REDUCED_TARGET) in line for line in rows)


def test_the_chosen_candidate_keeps_its_marker_and_figures_on_one_line_when_stages_wrap(
    capsys: pytest.CaptureFixture[str],
) -> None:
    long = tuple((f"host{i % 2}", "cpu@openvino:int8", i, i + 1) for i in range(30))
    stages = HostStagePlan("pipeline", long, latency_s=2e-4, rate_per_s=5e3)
    candidates = [Candidate(name, stages, [], latency_s=3e-4, rate_per_s=4e3, error=7e-2)
                  for name in ("quickest mixed", "pipeline")]  # fmt: skip
    report = HostTuneReport([], Path("n.json"), candidates, candidates[1], Path("p.json"), [])
    print_table(candidates_table(report, "local:2"))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 8  # the stages did wrap
    chosen = chosen_rows("\n".join(lines))
    assert len(chosen) == 1 and chosen[0].startswith("│ pipeline *  ")  # padded to the column
    assert chosen[0].split("│")[-2].strip() == "7.0e-02"
