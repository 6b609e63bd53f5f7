"""Spells in which the cores share one core's speed: the probe, and the rounds it drops."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from autopart.profile.core_sharing import CoreSharing, shared_note
from autopart.targets.cpu_units import allowed_cores, pinned_to
from autopart.tuning.settings import VERIFY
from autopart.tuning.verify import Measured, measure_plans
from tests.test_profile import tiny_cnn


class _ScriptedSpell:
    """A machine whose spells follow a script, one entry per probe (then quiet).

    While a spell is on, the "two-core" runner of the test is slow; the probe, asked after
    each timed round, reports the spell the round ran in and moves to the next entry.
    """

    def __init__(self, script: list[bool]) -> None:
        self.script, self.probes = list(script), 0

    @property
    def on(self) -> bool:
        return self.probes < len(self.script) and self.script[self.probes]

    def shared(self) -> bool:
        was_on = self.on
        self.probes += 1
        return was_on


def _race(spell: _ScriptedSpell, rounds: int, *, racing: bool = False) -> dict[str, Measured]:
    from autopart import api
    from autopart.ir.feeds import random_inputs
    from autopart.runtime.executor import Executor

    _, graph = api.make_plan(tiny_cnn(), fallback="cpu@numpy")
    feeds = random_inputs(graph, 0)
    outputs = Executor(graph).run(feeds).outputs

    def two_cores(_feeds: object) -> dict[str, object]:
        time.sleep(0.004 if spell.on else 0.001)
        return outputs

    def one_core(_feeds: object) -> dict[str, object]:
        time.sleep(0.002)
        return outputs

    return measure_plans(
        graph, {}, feeds, rounds=rounds, min_timed_s=0.0,
        peers={"two": two_cores, "one": one_core}, probe=spell,  # type: ignore[arg-type]
        race=(lambda so_far: []) if racing else None,
        eliminate=(lambda so_far: []) if racing else None,
    )  # fmt: skip


def test_rounds_timed_while_the_cores_shared_one_are_dropped_and_run_again() -> None:
    spell = _ScriptedSpell([False, True, True, False])
    measured = _race(spell, rounds=4)
    for result in measured.values():
        assert len(result.round_medians) == 4  # the two dropped rounds were run again
        assert result.shared_rounds == 2
        assert result.round_indices == [2, 5, 6, 7]  # after 2 warm-up rounds; 3, 4 dropped
    # what the spell did to the two-core runner is gone: it leads, as it does when quiet
    assert max(measured["two"].round_medians) < 0.0019 < min(measured["one"].round_medians)


def test_a_spell_that_outlasts_the_planned_rounds_is_kept_and_counted() -> None:
    spell = _ScriptedSpell([True] * 100)
    measured = _race(spell, rounds=3)
    for result in measured.values():
        assert result.shared_rounds == 3  # as many dropped as were planned, no more
        assert len(result.round_medians) == 3
    assert spell.probes == 3  # no probe once the cap is reached
    note = shared_note(measured)
    assert len(note) == 1 and note[0].startswith("3 timed rounds were run again")
    assert shared_note({"a": Measured()}) == []


def test_a_race_whose_first_rounds_all_shared_one_core_still_times_every_runner() -> None:
    """A race stops on its rounds kept, never on rounds run: dropped rounds count for none."""
    spell = _ScriptedSpell([True] * 8)
    measured = _race(spell, rounds=6, racing=True)
    assert set(measured) == {"two", "one"}
    for result in measured.values():
        assert len(result.round_medians) >= VERIFY.min_paired_rounds
        assert result.shared_rounds >= 1


@pytest.fixture
def busy_last_core() -> Iterator[int]:
    """Another process spinning on the last core this process may use, for the test."""
    cores = allowed_cores()
    if len(cores) < 2:
        pytest.skip(f"this machine lets the process use {len(cores)} core(s); the probe needs 2")
    code = f"import os\nos.sched_setaffinity(0, {{{cores[-1]}}})\nwhile True:\n    pass\n"
    hog = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.3)
        yield cores[-1]
    finally:
        hog.kill()
        hog.wait()


def test_a_core_busy_with_another_process_reads_as_shared(
    request: pytest.FixtureRequest,
) -> None:
    probe = CoreSharing.open()
    if probe is None:
        pytest.skip("no oracle codegen to run the probe")
    quiet = [probe.shared() for _ in range(7)]
    if sum(quiet) >= 2:  # the premise fails: this machine's cores interfere unprovoked
        pytest.skip(f"the probe reads shared with no other process on {sum(quiet)} of 7 tries")
    request.getfixturevalue("busy_last_core")
    readings = [probe.shared() for _ in range(7)]
    assert sum(readings) >= 4, readings  # the copy on the busy core takes ~2x as long


def test_there_is_no_probe_on_one_core() -> None:
    cores = allowed_cores()
    if not cores:
        pytest.skip("the OS does not say which cores this process may use")
    with pinned_to(cores[:1]):
        assert CoreSharing.open() is None
    assert os.sched_getaffinity(0) == set(cores)


def test_the_screens_whole_timings_run_again_a_round_timed_in_a_spell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The screen times one runner at a time, so a spell slows that runner alone: its rounds
    in a spell are run again, as the race's are."""
    from autopart import api
    from autopart.ir.feeds import random_inputs
    from autopart.runtime.executor import Executor
    from autopart.tuning import whole_timing
    from autopart.tuning.judge import Judge

    plan, graph = api.make_plan(tiny_cnn(), fallback="cpu@numpy")
    feeds = random_inputs(graph, 0)
    reference = Executor(graph).run(feeds).outputs
    spell = _ScriptedSpell([False, True, False])
    monkeypatch.setattr(whole_timing, "process_probe", lambda: spell)
    job = whole_timing.WholeJob("single:cpu@numpy", "numpy", plan=plan)
    timed, held = whole_timing._time_job(
        graph, graph, job, (feeds, reference), Judge(graph), ({}, []), False
    )
    assert timed["single:cpu@numpy"].shared_rounds == 1 and held == {}
