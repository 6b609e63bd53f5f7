"""Racing in heats: only so many plans compiled at once, every plan still measured fairly."""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping

import numpy as np
import pytest

from autopart import api
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.plan.schema import Plan
from autopart.runtime import plan_executor
from autopart.runtime.executor import Executor
from autopart.tuning import verify
from autopart.tuning.heats import Heats
from autopart.tuning.plan_rows import failure_notes
from autopart.tuning.verify import BUDGET_SPENT, Measured, measure_plans
from tests.test_profile import tiny_cnn

RULES = {
    "numpy": [],
    "ort": ["re:.*=cpu@onnxruntime"],
    "ort first conv": ["name:conv1=cpu@onnxruntime"],
    "ort relu": ["Relu=cpu@onnxruntime"],
}


def _plans() -> tuple[dict[str, Plan], Graph]:
    plans = {}
    graph = None
    for name, rules in RULES.items():
        plans[name], graph = api.make_plan(tiny_cnn(), rules, fallback="cpu@numpy")
    assert graph is not None
    return plans, graph


class _Counting:
    """Wraps PlanExecutor to count the plans compiled at once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.live = 0
        self.most = 0
        real = plan_executor.PlanExecutor
        counter = self

        class Counted(real):  # type: ignore[misc, valid-type]
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, **kwargs)
                counter.live += 1
                counter.most = max(counter.most, counter.live)

            def close(self) -> None:
                counter.live -= 1
                super().close()

        monkeypatch.setattr(verify, "PlanExecutor", Counted)


def test_heats_hold_at_most_so_many_plans_and_measure_every_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counting = _Counting(monkeypatch)
    plans, graph = _plans()
    feeds = random_inputs(graph, 0)

    def peer(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return Executor(graph).run(feeds).outputs

    measured = measure_plans(
        graph, plans, feeds, rounds=3, min_timed_s=0.0, heats=Heats(held=2),
        peers={"reference alone": peer},
    )  # fmt: skip
    assert counting.most == 2 and counting.live == 0
    assert set(measured) == {*plans, "reference alone"}
    for result in measured.values():
        assert len(result.round_medians) >= 3 and result.max_error < 1e-3
    entered = {name: min(result.round_indices) for name, result in measured.items()}
    assert entered["numpy"] < entered["ort relu"]  # the last plan entered in a later heat
    every_round = set(measured["reference alone"].round_indices)  # the peer ran in all
    assert all(set(r.round_indices) <= every_round for r in measured.values())


def test_a_peer_leaving_the_rounds_is_freed_then() -> None:
    """The rounds own the peers handed to them: one eliminated is not held beside the plans
    still racing (vgg19's bench held five peers, 2 GiB, to its last heat)."""
    plans, graph = _plans()
    feeds = random_inputs(graph, 0)
    outputs = Executor(graph).run(feeds).outputs
    peers = {name: _Peer(outputs) for name in ("slow", "quick")}
    slow = weakref.ref(peers["slow"])
    alive_after: list[bool] = []

    def eliminate(so_far: Mapping[str, Measured]) -> list[str]:
        alive_after.append(slow() is not None)
        return ["slow"]

    measured = measure_plans(
        graph, plans, feeds, rounds=5, min_timed_s=0.0, heats=Heats(held=2),
        peers=peers, eliminate=eliminate,
    )  # fmt: skip
    assert peers == {}  # handed over
    assert alive_after[0] and not any(alive_after[1:]) and len(alive_after) > 1
    assert set(measured) == {*plans, "slow", "quick"}  # what it measured stays
    assert len(measured["slow"].round_medians) < len(measured["quick"].round_medians)


class _Peer:
    """A peer runner that answers with fixed outputs (a class, to be weakly referenced)."""

    def __init__(self, outputs: Mapping[str, np.ndarray]) -> None:
        self.outputs = dict(outputs)

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.outputs


def test_without_heats_every_plan_is_compiled_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    counting = _Counting(monkeypatch)
    plans, graph = _plans()
    measured = measure_plans(graph, plans, random_inputs(graph, 0), rounds=2, min_timed_s=0.0)
    assert counting.most == len(plans) and set(measured) == set(plans)
    assert {min(result.round_indices) for result in measured.values()} == {2}


def test_plans_waiting_when_the_budget_is_spent_are_left_out_with_a_reason() -> None:
    plans, graph = _plans()
    failures: dict[str, str] = {}
    measured = measure_plans(
        graph, plans, random_inputs(graph, 0), rounds=2, min_timed_s=0.0,
        heats=Heats(held=2, admitting=lambda seconds: False), failures=failures,
    )  # fmt: skip
    assert set(measured) == {"numpy", "ort"}
    assert set(failures) == {"ort first conv", "ort relu"}
    assert all("budget" in why for why in failures.values())
    (note,) = failure_notes(failures)
    assert note.startswith("not raced, the wall budget") and "ort first conv, ort relu" in note


def test_a_heat_starts_only_when_the_budget_left_covers_what_the_last_heat_took() -> None:
    plans, graph = _plans()
    asked: list[float] = []
    failures: dict[str, str] = {}

    def covers_no_heat(seconds: float) -> bool:
        asked.append(seconds)
        return seconds == 0.0

    started = time.perf_counter()
    measured = measure_plans(
        graph, plans, random_inputs(graph, 0), rounds=2, min_timed_s=0.0,
        heats=Heats(held=2, admitting=covers_no_heat), failures=failures,
    )  # fmt: skip
    took = time.perf_counter() - started
    assert set(measured) == {"numpy", "ort"} and set(failures) == {"ort first conv", "ort relu"}
    (heat_s,) = [seconds for seconds in asked if seconds > 0.0]
    assert heat_s < took


def test_a_heat_holds_at_least_two_plans() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        Heats(held=1)


def test_a_late_plan_is_held_to_the_tolerance_chosen_before_it_entered() -> None:
    plans, graph = _plans()

    def tolerance(errors: Mapping[str, float]) -> float:
        return 0.5

    measured: dict[str, Measured] = measure_plans(
        graph, plans, random_inputs(graph, 0), rounds=2, min_timed_s=0.0,
        heats=Heats(held=2), tolerance=tolerance,
    )  # fmt: skip
    assert {result.tolerance for result in measured.values()} == {0.5}


def test_a_compile_past_its_deadline_fails_its_plan_and_the_others_race() -> None:
    """A plan whose library compiles past the race's deadline is stopped and left out,
    with the reason, while the others are measured (a budgeted tune once compiled OpenVINO
    on a 50,000-node chain for minutes past its budget)."""
    pytest.importorskip("openvino")
    from autopart.targets.openvino.library import clear_compiled
    from autopart.tuning.choice import BudgetedRace
    from autopart.tuning.clock import Clock
    from autopart.tuning.settings import VERIFY

    clear_compiled()  # a compile kept from an earlier test would be imported, not compiled
    plans, graph = _plans()
    plans = {"numpy": plans["numpy"]}
    plans["ov"], _ = api.make_plan(tiny_cnn(), ["re:.*=cpu@openvino"], fallback="cpu@numpy")
    race = BudgetedRace({}, Clock(0.0), frozenset({"numpy"}))  # the budget is spent
    assert race.compile_within(plans["numpy"]) is None  # the screen saw numpy compile whole
    assert race.compile_within(plans["ov"]) == 0.0
    failures: dict[str, str] = {}
    measured = measure_plans(
        graph, plans, random_inputs(graph, seed=0), rounds=2, failures=failures,
        compile_within=race.compile_within,
    )  # fmt: skip
    assert set(measured) == {"numpy"}
    assert failures["ov"] == BUDGET_SPENT  # not compiled at all: no library stopped at 0 s
    clear_compiled()
    failures.clear()
    measured = measure_plans(
        graph, plans, random_inputs(graph, seed=0), rounds=2, failures=failures,
        compile_within=lambda plan: None if race.compile_within(plan) is None else 1e-3,
    )  # fmt: skip
    assert set(measured) == {"numpy"}
    assert "did not finish compiling within" in failures["ov"]  # stopped where its library is
    roomy = BudgetedRace({}, Clock(100.0), frozenset({"numpy"}))
    assert 0.0 < (roomy.compile_within(plans["ov"]) or 0.0) <= 100.0 - VERIFY.finish_s
    assert BudgetedRace({}, Clock(100.0)).compile_within(plans["ov"]) is None  # no screen
    assert BudgetedRace({}, Clock(None), frozenset()).compile_within(plans["ov"]) is None


def test_once_the_budget_is_spent_only_plans_measured_whole_enter() -> None:
    """Those the screen timed whole and those a racing peer stands for still race; any
    other, never measured whole, would be compiled and timed past the budget on a
    prediction (a video transformer's 245-partition pick took 60 s and 15 GiB to compile
    after the budget ran out), so it waits, with the reason."""
    from autopart.tuning.choice import BudgetedRace, Runner
    from autopart.tuning.clock import Clock

    plans, graph = _plans()
    peer = {"ort alone": Runner(1, "ort", peer=True)}
    for clock in (Clock(None), Clock(3600.0)):
        failures: dict[str, str] = {}
        assert set(BudgetedRace(peer, clock).entering(plans, {"numpy"}, failures)) == set(plans)
        assert not failures
    failures = {}
    spent = BudgetedRace(peer, Clock(0.0)).entering(plans, {"numpy"}, failures)
    assert list(spent) == [name for name in plans if name in {"numpy", "ort"}]
    assert set(failures) == set(plans) - {"numpy", "ort"}
    measured = measure_plans(
        graph, spent, random_inputs(graph, 0), rounds=2, min_timed_s=0.0, failures=failures
    )
    assert set(measured) == {"numpy", "ort"}
    (note,) = failure_notes(failures)
    assert note.startswith("not raced, the wall budget") and "ort first conv, ort relu" in note
    failures = {}  # no screen, no peer (pins or forbids): the first plan still races
    assert list(BudgetedRace({}, Clock(0.0)).entering(plans, (), failures)) == [next(iter(plans))]
    assert set(failures) == set(plans) - {next(iter(plans))}
