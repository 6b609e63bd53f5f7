"""The compile forecast: two prefixes' compile times bound the whole, and the screen acts on it.

The power law is checked as a property; the forecasts against real codegens (onnxruntime,
and OpenVINO stopped at its deadline); the screen's use end to end, where a codegen
forecast far past the budget is left out without spending the budget on it.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autopart.ir.target import VirtualDevice
from autopart.loader import load_model
from autopart.plan.build import build_plan_for
from autopart.targets.registry import declared_peers
from autopart.testing.scale_models import op_chain
from autopart.tuning import compile_forecast, screen, whole_timing
from autopart.tuning.clock import Clock
from autopart.tuning.compile_forecast import CompileForecast, forecast_peer, forecast_plan
from autopart.tuning.options import TuneOptions
from autopart.tuning.settings import SCREEN

ORT = "cpu@onnxruntime"


def small_prefixes(monkeypatch: pytest.MonkeyPatch, nodes: int, **more: float) -> None:
    """Forecast from prefixes of ``nodes`` and twice that, with ``more`` settings."""
    changed = dataclasses.replace(SCREEN, forecast_nodes=nodes, **more)
    monkeypatch.setattr(compile_forecast, "SCREEN", changed)


@given(st.floats(1e-4, 10.0), st.floats(1e-4, 10.0), st.integers(10, 1000), st.integers(4, 500))
def test_the_power_law_lies_between_linear_and_the_largest_exponent(
    first: float, second: float, small: int, times: int
) -> None:
    nodes = small * times
    whole = compile_forecast._power_law((small, 2 * small), (first, second), nodes)
    scale = nodes / (2 * small)
    assert second * scale * (1 - 1e-9) <= whole
    assert whole <= second * scale**SCREEN.forecast_max_exponent * (1 + 1e-9)


def test_a_doubling_compile_time_forecasts_linear_and_a_quadrupling_one_quadratic() -> None:
    assert compile_forecast._power_law((100, 200), (1.0, 2.0), 800) == pytest.approx(8.0)
    assert compile_forecast._power_law((100, 200), (1.0, 4.0), 800) == pytest.approx(64.0)
    assert compile_forecast._power_law((100, 200), (1.0, 1.0), 800) == pytest.approx(4.0)


def test_a_plan_on_onnxruntime_is_forecast_from_its_two_prefixes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    graph = load_model(op_chain(400))
    target = VirtualDevice.parse(ORT)
    plan = build_plan_for(graph, {n.name: target for n in graph.nodes}, target, "chain")
    small_prefixes(monkeypatch, 40)
    forecast = forecast_plan(graph, plan, "onnxruntime", 60.0)
    assert forecast is not None and forecast.sizes == (40, 80)
    assert forecast.nodes == len(graph.nodes)
    assert all(0.0 < s < 60.0 for s in forecast.seconds)
    assert forecast.seconds[1] * len(graph.nodes) / 80 <= forecast.forecast_s * (1 + 1e-9)
    assert forecast.spent_s >= sum(forecast.seconds)
    assert not forecast.beyond(60.0)
    assert "80 nodes in" in forecast.reason()
    assert forecast_plan(graph, plan, "openvino", 60.0) is None  # no partition on it
    small_prefixes(monkeypatch, 101)  # the model is under 4 prefixes
    assert forecast_plan(graph, plan, "onnxruntime", 60.0) is None


def test_a_peer_is_forecast_building_its_prefixes_as_a_model_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    graph = load_model(op_chain(400))
    small_prefixes(monkeypatch, 40)
    (peer,) = [p for p in declared_peers(available=True) if p.codegen == "onnxruntime"][:1]
    forecast = forecast_peer(graph, peer, 60.0)
    assert forecast is not None and forecast.codegen == "onnxruntime"
    assert all(math.isfinite(s) for s in (*forecast.seconds, forecast.forecast_s))
    tools = [p for p in declared_peers(available=True) if p.tool]
    assert all(forecast_peer(graph, tool, 60.0) is None for tool in tools)


def test_a_prefix_stopped_at_the_deadline_forecasts_the_whole_past_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("openvino")
    graph = load_model(op_chain(400))
    target = VirtualDevice.parse("cpu@openvino")
    plan = build_plan_for(graph, {n.name: target for n in graph.nodes}, target, "chain")
    small_prefixes(monkeypatch, 40)
    forecast = forecast_plan(graph, plan, "openvino", 0.0)
    assert forecast is not None and math.isinf(forecast.forecast_s)
    assert math.isinf(forecast.seconds[0]) and forecast.beyond(1e9)
    assert "over the deadline" in forecast.reason() and "past the deadline" in forecast.reason()


def test_a_forecast_past_the_margin_and_only_then_is_beyond() -> None:
    forecast = CompileForecast("x", 1000, (10, 20), (0.1, 0.2), 100.0, 0.3)
    assert forecast.beyond(100.0 / SCREEN.forecast_margin * 0.99)
    assert not forecast.beyond(100.0 / SCREEN.forecast_margin * 1.01)


def test_the_screen_leaves_out_a_codegen_forecast_far_past_its_budget_without_spending_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every forecast beyond (a margin of 0): onnxruntime's whole compile is never tried,
    its plan is not timed whole, and the note gives the forecast's reason."""
    graph = load_model(op_chain(400))
    small_prefixes(monkeypatch, 40, forecast_margin=0.0)
    monkeypatch.setattr(whole_timing, "SCREEN", dataclasses.replace(SCREEN, deadline_nodes=1))
    compiled: list[int] = []
    real = whole_timing._time_job
    monkeypatch.setattr(
        whole_timing, "_time_job", lambda *a, **k: compiled.append(1) or real(*a, **k)
    )
    built = TuneOptions.build(
        targets=[ORT], profiles_dir=tmp_path / "p", search_dir=tmp_path / "s", rounds=2,
        time_budget_s=30.0, peers=False,
    )  # fmt: skip
    started = time.perf_counter()
    screening = screen.screen_targets("chain", graph, built.targets, built, Clock(30.0))
    assert time.perf_counter() - started < 30.0
    assert screening.too_slow == {"onnxruntime": 30.0}
    assert compiled == [] and "single:cpu@onnxruntime" not in screening.whole
    (note,) = [n for n in screening.notes if "it compiled 40 nodes in" in n]
    assert "onnxruntime is forecast to compile the whole model far past 30 s" in note
    assert "(the budget)" in note


def test_a_codegen_forecast_within_its_deadline_is_not_forecast_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its first job failed for another reason: the next job of that codegen compiles at
    once, without paying for the prefixes again."""
    graph = load_model(op_chain(40))
    calls: list[str] = []

    def forecast(_graph: object, _plan: object, codegen: str, _deadline: float) -> CompileForecast:
        calls.append(codegen)
        return CompileForecast(codegen, 40, (10, 20), (0.01, 0.02), 0.04, 0.03)

    monkeypatch.setattr(whole_timing, "forecast_plan", forecast)
    ort = VirtualDevice.parse(ORT)
    plan = build_plan_for(graph, {n.name: ort for n in graph.nodes}, ort, "chain")
    job = whole_timing.WholeJob("single:cpu@onnxruntime", "onnxruntime", plan=plan)
    found = whole_timing.WholeTimings()
    assert not whole_timing._forecast_beyond(graph, job, 30.0, found)
    assert not whole_timing._forecast_beyond(graph, job, 30.0, found)
    assert calls == ["onnxruntime"] and found.abandoned_s == pytest.approx(0.03)
