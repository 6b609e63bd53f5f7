"""The final choice follows the measurements: intervals on ratios of medians, racing, simplicity."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autopart.tuning.choice import (
    Runner,
    behind,
    best_peer,
    contested,
    decide,
    explain,
    paired_ratio,
    peers_behind,
    ratio_interval,
    within_tolerance,
)
from autopart.tuning.kept_measure import measured_outside_race
from autopart.tuning.verify import Measured


def _rounds(medians: list[float], indices: list[int] | None = None) -> Measured:
    indices = list(range(len(medians))) if indices is None else indices
    return Measured(latencies=list(medians), round_medians=list(medians), round_indices=indices)


def _noisy(centre: float, count: int, spread: float, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(centre * (1 + spread * x)) for x in rng.standard_normal(count)]


def _around(prefix: str, centres: list[float], seed: int) -> dict[str, Measured]:
    """Runners ``<prefix>0``, ``<prefix>1``... of 6 rounds each, 2% around their centres."""
    return {
        f"{prefix}{i}": _rounds(_noisy(centre, 6, 0.02, seed + i))
        for i, centre in enumerate(centres)
    }


def test_a_clear_difference_gives_an_interval_that_excludes_one() -> None:
    quick, slow = _rounds(_noisy(8.0, 20, 0.01, 1)), _rounds(_noisy(10.0, 20, 0.01, 2))
    interval = ratio_interval(quick, slow)
    assert interval.high < 1.0 and interval.excludes_one
    assert 0.75 < interval.ratio < 0.85 and interval.rounds == 20


def test_the_same_runner_timed_twice_gives_an_interval_that_holds_one() -> None:
    first, second = _rounds(_noisy(10.0, 20, 0.05, 3)), _rounds(_noisy(10.0, 20, 0.05, 4))
    assert not ratio_interval(first, second).excludes_one


def test_pairing_by_round_takes_the_drift_of_the_machine_out() -> None:
    drift = [1.0 + 0.5 * math.sin(i) for i in range(20)]  # the machine's speed, round by round
    quick = _rounds([8.0 * d for d in drift])
    slow = _rounds([8.4 * d for d in drift])
    assert ratio_interval(quick, slow).high < 1.0  # 5% apart, but every round agrees


def test_rounds_pair_by_their_index_not_their_position() -> None:
    leader = _rounds([1.0] * 5 + [2.0] * 5)  # raced on in rounds 5-9, where it was slow
    other = _rounds([1.0] * 5 + [2.0] * 5, list(range(5)) + list(range(10, 15)))
    interval = ratio_interval(leader, other)
    assert interval.rounds == 5 and interval.ratio == 1.0


def test_a_runner_timed_only_in_a_slow_spell_is_compared_over_that_spell() -> None:
    """The bench's ratios: a plan raced only in rounds 10-14, where the machine ran at half
    speed, is as quick as the peer timed in every round, not twice as slow."""
    speed = [1.0] * 10 + [2.0] * 5
    peer = _rounds([10.0 * s for s in speed])
    plan = _rounds([10.0 * s for s in speed[10:]], list(range(10, 15)))
    assert plan.median_s / peer.median_s == 2.0
    assert paired_ratio(plan, peer) == 1.0 == ratio_interval(plan, peer).ratio
    apart = _rounds([20.0] * 6, list(range(20, 26)))  # no round shared: over its own rounds
    assert paired_ratio(apart, peer) == ratio_interval(apart, peer).ratio == 2.0
    few = _rounds([20.0] * 2, [30, 31])  # nothing paired, too few to compare apart
    assert paired_ratio(few, peer) == few.median_s / peer.median_s


def test_too_few_paired_rounds_give_no_interval() -> None:
    interval = ratio_interval(_rounds([1.0, 1.1, 0.9]), _rounds([2.0, 2.1, 1.9]))
    assert interval.low == 0.0 and math.isinf(interval.high) and not interval.excludes_one
    assert "no interval" in str(interval)


def test_runners_of_different_heats_compare_over_their_rounds_unpaired() -> None:
    """No round shared, enough each: unpaired, not a tie for want of pairs."""
    quick = _rounds(_noisy(9.0, 8, 0.01, 5), list(range(8)))
    slow = _rounds(_noisy(18.0, 6, 0.01, 6), list(range(20, 26)))
    interval = ratio_interval(quick, slow)
    assert interval.unpaired == (8, 6) and interval.high < 1.0 and interval.excludes_one
    assert "unpaired" in str(interval)
    runners = {"quick": Runner(1, "quick"), "slow": Runner(1, "slow")}
    decision = decide({"quick": quick, "slow": slow}, runners)
    assert decision is not None and decision.chosen == "quick" and decision.tied == ["quick"]
    same = _rounds(_noisy(18.0, 6, 0.05, 7), list(range(30, 36)))
    assert not ratio_interval(slow, same).excludes_one  # within the noise, apart


def test_a_prediction_never_overrules_the_measurement() -> None:
    """The recogniser's case: the plan predicted 45% quicker measured clearly slower."""
    measured = {"single:ort": _rounds(_noisy(13.56, 15, 0.02, 5)),
                "single:ov": _rounds(_noisy(8.57, 15, 0.02, 6))}  # fmt: skip
    runners = {name: Runner(1, name) for name in measured}
    decision = decide(measured, runners)
    assert decision is not None and decision.chosen == "single:ov"
    assert decision.interval is not None and decision.interval.high < 1.0
    assert "measurably quicker" in explain(decision, measured)


def test_two_rounds_say_too_few_to_tell_never_within_the_noise() -> None:
    """A plan 11x slower, timed in 2 rounds beside the kept one: no interval, so they are
    not told apart, and the sentence says so rather than calling 11x noise."""
    measured = {"single:a": _rounds(_noisy(30.0, 2, 0.05, 3)),
                "split": _rounds(_noisy(340.0, 2, 0.05, 4))}  # fmt: skip
    runners = {"single:a": Runner(1, "single:a"), "split": Runner(12501, "split")}
    decision = decide(measured, runners)
    assert decision is not None and decision.chosen == "single:a"
    sentence = explain(decision, measured)
    assert "too few rounds to tell them apart" in sentence and "noise" not in sentence


def test_a_plan_whose_peer_alone_ran_beside_it_is_not_called_the_only_correct_runner() -> None:
    """The 50,000-node chain's race: its plan and the peer standing for it, nothing else."""
    measured = {"ilp": _rounds(_noisy(36.3, 6, 0.02, 11)),
                "onnxruntime alone": _rounds(_noisy(37.3, 6, 0.02, 12))}  # fmt: skip
    runners = {"ilp": Runner(1, "ilp"), "onnxruntime alone": Runner(1, "ilp", peer=True)}
    decision = decide(measured, runners)
    assert decision is not None and decision.rival is None
    sentence = explain(decision, measured)
    assert "only correct runner" not in sentence and "onnxruntime alone: its plan" in sentence
    measured["onnxruntime alone"].max_error = 1.0  # beyond its tolerance: not a correct runner
    decision = decide(measured, runners)
    assert decision is not None and explain(decision, measured).endswith("the only correct runner")


def test_within_the_noise_the_simpler_plan_is_kept_and_the_interval_reported() -> None:
    measured = {"ilp": _rounds(_noisy(10.0, 15, 0.05, 7)),
                "single:a": _rounds(_noisy(10.1, 15, 0.05, 8))}  # fmt: skip
    runners = {"ilp": Runner(9, "ilp"), "single:a": Runner(1, "single:a")}
    decision = decide(measured, runners)
    assert decision is not None and decision.chosen == "single:a"
    assert decision.tied == sorted(measured, key=lambda n: measured[n].median_s)
    assert "within the noise" in explain(decision, measured)
    assert contested(measured, runners) == decision.tied  # they stand for two plans: race


def test_a_split_plan_clearly_quicker_is_kept() -> None:
    measured = {"ilp": _rounds(_noisy(8.0, 15, 0.01, 9)),
                "single:a": _rounds(_noisy(10.0, 15, 0.01, 10))}  # fmt: skip
    runners = {"ilp": Runner(9, "ilp"), "single:a": Runner(1, "single:a")}
    decision = decide(measured, runners)
    assert decision is not None and decision.chosen == "ilp" and decision.tied == ["ilp"]
    assert contested(measured, runners) == []


def test_a_peer_stands_for_its_plan_and_its_tie_with_it_is_no_race() -> None:
    measured = {"openvino alone": _rounds(_noisy(1.19, 15, 0.03, 11)),
                "single:cpu@openvino": _rounds(_noisy(1.2, 15, 0.03, 12)),
                "ilp": _rounds(_noisy(1.6, 15, 0.01, 13))}  # fmt: skip
    runners = {"openvino alone": Runner(1, "single:cpu@openvino", peer=True),
               "single:cpu@openvino": Runner(1, "single:cpu@openvino"),
               "ilp": Runner(3, "ilp")}  # fmt: skip
    decision = decide(measured, runners)
    assert decision is not None and decision.chosen == "single:cpu@openvino"
    assert decision.rival == "ilp"  # the peer is the same plan, not a rival
    assert contested(measured, runners) == []


def test_of_two_plans_as_simple_and_tied_the_one_whose_runner_is_quicker_is_kept() -> None:
    """hf_gpt_neox: a peer 1.28x quicker by median, tied by its interval, lost to a plan
    because a peer gave way to any plan as simple; it now keeps the plan it stands for."""
    slow, quick = "single:cpu@openvino", "single:cpu@onnxruntime"
    runners = {"onnxruntime alone": Runner(1, quick, peer=True),
               "openvino alone f32": Runner(1, slow, peer=True),
               slow: Runner(1, slow), quick: Runner(1, quick)}  # fmt: skip
    measured = {"onnxruntime alone": _rounds(_noisy(0.150, 5, 0.3, 31)),
                "openvino alone f32": _rounds(_noisy(0.19, 5, 0.3, 32)),
                slow: _rounds(_noisy(0.193, 5, 0.3, 33)),
                quick: _rounds(_noisy(0.21, 5, 0.3, 34))}  # fmt: skip
    decision = decide(measured, runners)
    assert decision is not None and slow in decision.tied and quick in decision.tied
    assert runners[decision.chosen].stands_for == quick


def test_within_the_noise_the_plan_a_peer_stands_for_is_kept_over_a_departure() -> None:
    """silero_vad (0.1 ms): the same library pinned to one core led by noise alone."""
    peer_plan, pinned = "single:cpu@onnxruntime", "single:cpu/1@onnxruntime"
    runners = {"onnxruntime alone": Runner(1, peer_plan, peer=True),
               peer_plan: Runner(1, peer_plan), pinned: Runner(1, pinned)}  # fmt: skip
    times = _noisy(0.100, 20, 0.1, 19)
    later = [1.02 * t for t in times[10:] + times[:10]]  # 2% slower, in another order
    tied = {"onnxruntime alone": _rounds(later), peer_plan: _rounds(later),
            pinned: _rounds(times)}  # fmt: skip
    decision = decide(tied, runners)
    assert decision is not None and decision.leader == pinned
    assert decision.chosen == peer_plan and pinned in decision.tied
    clear = {**tied, pinned: _rounds(_noisy(0.07, 20, 0.01, 22))}
    decision = decide(clear, runners)
    assert decision is not None and decision.chosen == pinned  # measurably quicker: kept


def test_a_peer_with_no_plan_of_its_own_is_never_kept() -> None:
    measured = {"openvino alone": _rounds(_noisy(1.0, 15, 0.01, 14)),
                "single:cpu@onnxruntime": _rounds(_noisy(2.0, 15, 0.01, 15))}  # fmt: skip
    runners = {"openvino alone": Runner(1, None, peer=True),
               "single:cpu@onnxruntime": Runner(1, "single:cpu@onnxruntime")}  # fmt: skip
    decision = decide(measured, runners)
    assert decision is not None and decision.chosen == "single:cpu@onnxruntime"
    sentence = explain(decision, measured)
    assert "measurably slower" in sentence and "tied with it" not in sentence
    assert "openvino alone leads, and no plan on these targets stands for it" in sentence


def test_wrong_outputs_are_never_kept() -> None:
    wrong = _rounds([1.0] * 10)
    wrong.max_error = 1.0
    measured = {"fast but wrong": wrong, "right": _rounds([2.0] * 10)}
    runners = {name: Runner(1, name) for name in measured}
    decision = decide(measured, runners)
    assert decision is not None and decision.chosen == "right"
    assert decide({"fast but wrong": wrong}, runners) is None


# Up to four plans, a to d, of 6-12 rounds each, and each plan's partitions.
PLAN_ROUNDS = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]),
    st.lists(st.floats(0.5, 2.0), min_size=6, max_size=12),
    min_size=1,
)
PLAN_PARTITIONS = st.lists(st.integers(1, 5), min_size=4, max_size=4)


@settings(max_examples=60, deadline=None)
@given(medians=PLAN_ROUNDS, partitions=PLAN_PARTITIONS)
def test_the_kept_plan_is_never_clearly_slower_than_the_quickest(
    medians: dict[str, list[float]], partitions: list[int]
) -> None:
    """Property: whatever the timings, the kept runner ties with the quickest one."""
    measured = {name: _rounds(values) for name, values in medians.items()}
    runners = {name: Runner(partitions["abcd".index(name)], name) for name in measured}
    decision = decide(measured, runners)
    assert decision is not None
    quickest = min(measured, key=lambda n: measured[n].median_s)
    assert ratio_interval(measured[decision.chosen], measured[quickest]).low <= 1.0
    simplest_tied = min(runners[n].partitions for n in decision.tied)
    assert runners[decision.chosen].partitions == simplest_tied


def test_a_peer_whose_plan_measured_over_the_tolerance_keeps_no_plan() -> None:
    plan = "single:cpu@openvino:bf16"
    measured = {"openvino alone": _rounds(_noisy(1.0, 15, 0.01, 16)),
                plan: _rounds(_noisy(1.0, 15, 0.01, 17)),
                "single:cpu@openvino": _rounds(_noisy(1.6, 15, 0.01, 18))}  # fmt: skip
    measured["openvino alone"].max_error = 5.0e-3  # the library's rounding: within
    measured[plan].max_error = 6.4e-3  # the plan's own rounding: over the tolerance
    for result in measured.values():
        result.tolerance = 5.5e-3
    runners = {"openvino alone": Runner(1, plan, peer=True),
               plan: Runner(1, plan),
               "single:cpu@openvino": Runner(1, "single:cpu@openvino")}  # fmt: skip
    assert decide(measured, runners).chosen == "openvino alone"  # type: ignore[union-attr]
    kept = within_tolerance(runners, measured)
    assert kept["openvino alone"].stands_for is None and kept[plan] == runners[plan]
    decision = decide(measured, kept)
    assert decision is not None and decision.chosen == "single:cpu@openvino"
    # Not timed in the race but measured over the tolerance in the screen: the same.
    untimed = {name: result for name, result in measured.items() if name != plan}
    kept = within_tolerance(runners, untimed, wrong_elsewhere={plan})
    assert kept["openvino alone"].stands_for is None
    assert within_tolerance(runners, untimed)["openvino alone"].stands_for == plan
    # Timed in the race within it: the race's measurement decides.
    measured[plan].max_error = 5.0e-3
    kept = within_tolerance(runners, measured, wrong_elsewhere={plan})
    assert kept["openvino alone"].stands_for == plan


def test_the_best_peer_is_the_quickest_within_its_tolerance() -> None:
    quick, slow = _rounds([1.0] * 6), _rounds([2.0] * 6)
    assert best_peer({"a": quick, "b": slow}) == "a"
    quick.max_error, quick.tolerance = 2e-2, 1e-3  # bf16 under --precision f32: no bar
    assert best_peer({"a": quick, "b": slow}) == "b"
    slow.max_error, slow.tolerance = 2e-2, 1e-3
    assert best_peer({"a": quick, "b": slow}) is None and best_peer({}) is None


def test_a_peer_that_quantises_the_model_first_is_never_the_bar() -> None:
    """The bar is a library as set up without a tool: an int8 quantiser quicker and
    within the tolerance (a tabular model's onnxruntime + qdq int8, 26.0 us against
    onnxruntime alone's 27.3) is compared by its own column, not as the best peer."""
    quick, slow = _rounds([1.0] * 6), _rounds([2.0] * 6)
    assert best_peer({"onnxruntime + qdq int8": quick, "onnxruntime alone": slow}) == (
        "onnxruntime alone"
    )
    assert best_peer({"openvino + nncf int8": quick}) is None


def test_the_noise_spread_is_the_widest_reach_of_the_tuned_plans_two_timings() -> None:
    from autopart.tuning.bench import AGAIN, TUNED, noise_spread

    steady = _noisy(1.0, 30, 0.01, seed=1)
    quiet = {TUNED: _rounds(steady), AGAIN: _rounds([x * 1.001 for x in steady])}
    assert noise_spread(quiet) < 0.01
    # one plan timed twice, the second timing 20% apart in every other round
    jumpy = [x * (1.2 if i % 2 else 1.0) for i, x in enumerate(steady)]
    spread = noise_spread({TUNED: _rounds(steady), AGAIN: _rounds(jumpy)})
    interval = ratio_interval(_rounds(jumpy), _rounds(steady))
    assert spread == max(interval.high - 1, 1 - interval.low, abs(interval.ratio - 1))
    assert 0.05 < spread <= 0.25
    assert math.isnan(noise_spread({TUNED: _rounds(steady)}))  # no second timing
    assert math.isnan(noise_spread({TUNED: _rounds([1.0]), AGAIN: _rounds([1.1])}))


def test_the_noise_floor_compares_the_tuned_plans_two_timings_over_their_shared_rounds() -> None:
    """The cold vgg19 bench: the quicker copy stays in the heats and the other leaves after
    a few rounds in a slow spell; their medians were 28% apart, their shared rounds not."""
    from autopart.tuning.bench import AGAIN, TUNED, _noise_floor

    speed = [2.0] * 6 + [1.0] * 30
    again = _rounds([10.0 * s for s in speed])
    tuned = _rounds([10.0 * s for s in speed[:6]])
    assert tuned.median_s / again.median_s == 2.0
    assert _noise_floor({TUNED: tuned, AGAIN: again}) == 0.0


def test_runners_measurably_behind_the_kept_one_or_wrong_leave_the_race() -> None:
    runners = {name: Runner(1, name) for name in ("quick", "close", "slow", "wrong")}
    measured = {
        "quick": _rounds(_noisy(8.0, 6, 0.01, 1)),
        "close": _rounds(_noisy(8.05, 6, 0.03, 2)),
        "slow": _rounds(_noisy(12.0, 6, 0.01, 3)),
        "wrong": _rounds(_noisy(4.0, 6, 0.01, 4)),
    }
    measured["wrong"].tolerance, measured["wrong"].max_error = 1.0, 2.0  # quickest, but wrong
    assert sorted(behind(measured, runners)) == ["slow", "wrong"]


def test_peers_measurably_behind_the_best_peer_leave_once_done_with_their_rounds() -> None:
    """The bench holds every peer for its rounds; then one that cannot be the bar leaves."""
    measured = {
        "best": _rounds(_noisy(8.0, 6, 0.01, 1)),
        "close": _rounds(_noisy(8.05, 6, 0.03, 2)),
        "slow": _rounds(_noisy(12.0, 6, 0.01, 3)),
        "wrong": _rounds(_noisy(4.0, 6, 0.01, 4)),
        "plan": _rounds(_noisy(20.0, 6, 0.01, 5)),
    }
    measured["wrong"].tolerance, measured["wrong"].max_error = 1.0, 2.0  # quicker, no bar
    peers = ["best", "close", "slow", "wrong"]
    assert peers_behind(measured, peers, rounds=6) == ["slow"]  # never a plan
    assert peers_behind(measured, peers, rounds=7) == []  # not done with its rounds
    assert peers_behind(measured, ["slow"], rounds=6) == []  # the best peer stays
    assert peers_behind({}, peers, rounds=6) == []


@settings(max_examples=40, deadline=None)
@given(
    centres=st.lists(st.floats(1.0, 20.0), min_size=2, max_size=5),
    seed=st.integers(0, 1000),
)
def test_the_best_peer_never_leaves_the_rounds(centres: list[float], seed: int) -> None:
    measured = _around("p", centres, seed)
    names = list(measured)
    assert best_peer(measured) not in peers_behind(measured, names, rounds=6)


@settings(max_examples=40, deadline=None)
@given(
    centres=st.lists(st.floats(1.0, 20.0), min_size=1, max_size=5),
    seed=st.integers(0, 1000),
)
def test_the_runner_kept_never_leaves_the_race(centres: list[float], seed: int) -> None:
    measured = _around("r", centres, seed)
    runners = {name: Runner(1, name) for name in measured}
    decision = decide(measured, runners)
    assert decision is not None and decision.chosen not in behind(measured, runners)


def test_when_the_own_f32_runtimes_fail_the_check_the_note_says_it_cannot_judge() -> None:
    from autopart.tuning.accuracy import own_runtimes
    from autopart.tuning.beyond_tolerance import cannot_judge

    names = own_runtimes()
    assert names  # onnxruntime alone and openvino alone f32, where installed

    def result(error: float) -> Measured:
        measured = _rounds([1.0] * 5)
        measured.max_error, measured.tolerance = error, 1e-2
        return measured

    (note,) = cannot_judge({name: result(1.0) for name in names})
    assert note.startswith("the check cannot judge") and f"{names[0]} is 1 off" in note
    assert cannot_judge({names[0]: result(1e-3), **{n: result(1.0) for n in names[1:]}}) == []
    assert cannot_judge({}) == []


def test_a_plan_kept_through_its_peer_is_recorded_with_the_peers_rounds() -> None:
    """Under a spent budget the race may keep a peer whose plan it never ran (the race
    kept no round of the plan under its own name): the plan saved then carries the rounds
    and judged error of that peer, which runs it, and a note says so."""
    plan, peer = "single:cpu@onnxruntime", "onnxruntime alone"
    peers = {peer: _rounds(_noisy(1.0, 6, 0.01, 3)), "openvino alone": _rounds([1.4] * 6)}
    for result in peers.values():
        result.max_error, result.tolerance = 1e-6, 1e-3
    runners = {peer: Runner(1, plan, peer=True), "openvino alone": Runner(1, None, peer=True)}
    decision = decide(peers, runners)
    assert decision is not None and decision.chosen == peer
    measured: dict[str, Measured] = {}
    notes = measured_outside_race(plan, decision, measured, peers)
    assert measured[plan] is peers[peer] and measured[plan].correct
    assert notes == [f"{plan} is measured as {peer}, which runs this plan: the race kept no "
                     "round of the plan under its own name"]  # fmt: skip
    assert measured_outside_race(plan, decision, measured, peers) == []  # measured: as is
    nothing: dict[str, Measured] = {}
    assert "was not measured" in measured_outside_race(plan, None, nothing, peers)[0]
    assert nothing == {}
    # The screen timed the plan itself whole: its own rounds and error, before the peer's.
    own = _rounds([1.1] * 3)
    own.max_error, own.tolerance = 2e-6, 1e-3
    screened: dict[str, Measured] = {}
    notes = measured_outside_race(plan, decision, screened, peers, {plan: own})
    assert screened[plan].round_medians == own.round_medians and screened[plan].correct
    assert "the screen's whole timing" in notes[0]
    # Its rounds were not the race's: no race round pairs with them.
    assert paired_ratio(screened[plan], peers[peer]) == pytest.approx(1.1 / peers[peer].median_s)


def test_behind_a_peer_that_stands_for_no_plan_the_simpler_of_two_tied_plans_is_kept() -> None:
    """ddddocr_ocr: NNCF's int8 led; a three-library plan 0.1% quicker by median than one
    OpenVINO partition was kept over it, and the next race timed it 1.15x the library."""
    measured = {"openvino + nncf int8": _rounds(_noisy(3.9, 10, 0.01, 41)),
                "ilp": _rounds(_noisy(4.108, 10, 0.03, 42)),
                "single:cpu@openvino:bf16": _rounds(_noisy(4.112, 10, 0.03, 43))}  # fmt: skip
    runners = {"openvino + nncf int8": Runner(1, None, peer=True),
               "ilp": Runner(3, "ilp"),
               "single:cpu@openvino:bf16": Runner(1, "single:cpu@openvino:bf16")}  # fmt: skip
    assert measured["ilp"].median_s < measured["single:cpu@openvino:bf16"].median_s
    decision = decide(measured, runners)
    assert decision is not None and decision.chosen == "single:cpu@openvino:bf16"
    assert "openvino + nncf int8 leads, and no plan" in explain(decision, measured)
    clear = {**measured, "ilp": _rounds(_noisy(3.5, 10, 0.01, 44)),
             "openvino + nncf int8": _rounds(_noisy(2.0, 10, 0.01, 45))}  # fmt: skip
    decision = decide(clear, runners)
    assert decision is not None and decision.chosen == "ilp"  # measurably quicker: kept


@settings(max_examples=60, deadline=None)
@given(medians=PLAN_ROUNDS, partitions=PLAN_PARTITIONS)
def test_behind_a_peer_of_no_plan_the_kept_plan_is_the_simplest_tied_with_the_quickest_plan(
    medians: dict[str, list[float]], partitions: list[int]
) -> None:
    """Property: a peer of no plan quicker than every plan changes nothing among them."""
    plans = {name: _rounds(values) for name, values in medians.items()}
    peer = _rounds([0.1] * 12)
    runners = {name: Runner(partitions["abcd".index(name)], name) for name in plans}
    runners["tool peer"] = Runner(1, None, peer=True)
    decision = decide({**plans, "tool peer": peer}, runners)
    assert decision is not None and decision.chosen in plans
    quickest = min(plans, key=lambda n: plans[n].median_s)
    tied = [n for n in plans if ratio_interval(plans[n], plans[quickest]).low <= 1.0]
    assert decision.chosen in tied
    assert runners[decision.chosen].partitions == min(runners[n].partitions for n in tied)
