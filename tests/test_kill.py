"""SIGKILL at random moments and inside the write of a file (issue 31, item 7).

Real processes (the command line in a fresh interpreter, :mod:`tests.kill_child`) are
SIGKILLed at seeded random moments over a clean run's duration, in chains (kill, kill,
kill, then one rerun, so that resumes compound), and inside the write of the profile's
checkpoint and of tune's plan. After every kill the profile file is whole or absent (no
row dropped: writes are atomic) and a saved plan is the old one byte for byte or a whole
new one; the rerun reuses exactly the jobs the file held finished, takes only the passes
each job cut short lacks, measures the rest, and ends with the rows of a clean run
(:mod:`tests.kill_harness`). ``experiments/fault_kill.py`` runs the same cases at larger N.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autopart.io import leftovers, locked, remove_leftovers
from tests.kill_harness import (
    Case,
    World,
    failures,
    jobs_of,
    make_world,
    plan_write_kill,
    profile_chain,
    profile_write_kill,
    tune_chain,
    tune_write_kill,
)

SEED = 31


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return make_world(tmp_path_factory.mktemp("kill"))


def _profile_kills(world: World, tmp_path: Path, chains: list[int]) -> list[Case]:
    """Kill chains of ``chains`` kills each (then one rerun each), at seeded moments."""
    rng = np.random.default_rng(SEED + len(chains))
    cases = []
    for chain, kills in enumerate(chains):
        cases += profile_chain(world, tmp_path / f"chain-{chain}", kills, chain, rng)
    return cases


def _assert_kills_found_the_states(cases: list[Case]) -> None:
    """Most kills came while the run was under way, some with rows cut short, and some
    reruns reused finished jobs and resumed or measured others."""
    assert sum(case.killed for case in cases) >= 0.6 * len(cases), cases
    assert any(not case.file.endswith(" 0 partial") for case in cases if case.file != "absent")
    assert any(case.reused and case.new for case in cases), cases


@pytest.mark.slow  # 25 s; the default run keeps the kills inside a file's write
def test_a_profile_killed_at_random_moments_is_reused_exactly(world: World, tmp_path: Path) -> None:
    cases = _profile_kills(world, tmp_path, [1, 1, 1, 2, 3, 1, 3])
    assert not failures(cases), failures(cases)
    _assert_kills_found_the_states(cases)


@pytest.mark.slow
def test_a_profile_killed_at_many_random_moments_is_reused_exactly(
    world: World, tmp_path: Path
) -> None:
    cases = _profile_kills(world, tmp_path, [1, 2, 3] * 8)
    assert not failures(cases), failures(cases)
    _assert_kills_found_the_states(cases)


@pytest.mark.slow
@pytest.mark.parametrize("nth", [1, 9])
def test_a_profile_killed_inside_its_checkpoint_write_keeps_the_file_before_it(
    world: World, tmp_path: Path, nth: int
) -> None:
    case = profile_write_kill(world, tmp_path / "profiles", nth)
    assert case.outcome == "reuse", failures([case])
    assert case.killed and case.stray == 1  # the half-written temporary file, removed since
    if nth == 1:  # the first checkpoint: no file before it, all measured again
        assert case.file == "absent" and case.reused == 0
        assert case.new == len(jobs_of(world.clean))
    else:  # the first pass's first jobs were in: they took only the passes they lacked
        assert case.file != "absent" and case.resumed and case.new


@pytest.mark.slow
def test_a_tune_killed_inside_its_plan_write_keeps_the_old_plan(
    world: World, tmp_path: Path
) -> None:
    case = plan_write_kill(world, tmp_path)
    assert case.outcome == "reuse", failures([case])
    assert case.killed and case.plan == "unchanged" and case.stray == 1
    assert case.new == 0 and case.reused  # the profile was complete: nothing measured


@pytest.mark.slow
def test_a_tune_killed_inside_its_screen_resumes_the_jobs_the_screen_began(
    world: World, tmp_path: Path
) -> None:
    """The screen's op pass takes one pass of each job with no row; a rerun's screen
    begins those the kill left without one, and its profile stage resumes them."""
    case = tune_write_kill(world, tmp_path, 4)
    assert case.outcome == "reuse", failures([case])
    assert case.killed and case.file.startswith("0 complete")  # inside the op pass
    assert 0 < case.screened < case.resumed  # resumed: those in the file and those begun


@pytest.mark.slow
def test_a_tune_killed_at_random_moments_keeps_its_plan_and_profile(
    world: World, tmp_path: Path
) -> None:
    rng = np.random.default_rng(SEED)
    cases = []
    for chain in range(3):
        cases += tune_chain(world, tmp_path / f"chain-{chain}", 2, chain, rng)
    assert not failures(cases), failures(cases)
    assert sum(case.killed for case in cases) >= 3, cases
    assert {case.plan for case in cases} <= {"unchanged", "new"}


def test_only_the_temporary_files_of_the_profile_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "abc.csv"
    path.write_text("kept")
    names = [".abc.csv.k3_9xq0a.tmp", ".abc.csv.zzzzzzzz.tmp"]
    others = [".abc.csv.lock", ".abc.csv.mine.tmp", ".abd.csv.k3_9xq0a.tmp", "abc.csv.k3_9xq0a.tmp"]
    for name in [*names, *others]:
        (tmp_path / name).write_text("")
    assert leftovers(path) == [tmp_path / name for name in sorted(names)]
    with locked(path):
        assert remove_leftovers(path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["abc.csv", *others])
    link = tmp_path / "link.csv"
    link.symlink_to(path)
    (tmp_path / ".link.csv.k3_9xq0a.tmp").write_text("")
    assert leftovers(link) == []  # its target may be written under another link's lock
