"""The kill suite's procedure: real autopart processes SIGKILLed, then run again.

Shared by ``tests/test_kill.py`` and ``experiments/fault_kill.py``; the processes are
:mod:`tests.kill_child`'s. After each kill, what the profile file holds is read
(:func:`held`): it must be whole (:func:`file_problems`). A rerun in this process (the API,
for its report) must then reuse every finished job, take only the passes each job cut short
lacks and measure the rest (:func:`expected_rerun`, worked out from the rows alone), leave
every finished row as it was (:func:`kept_problems`), and end with the rows a clean run
has. Kills follow one another in a chain (each run resuming the last), then one rerun.
Each check that fails adds a line to its :class:`Case`'s problems.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
from click.testing import CliRunner
from numpy.random import Generator

from autopart import api
from autopart.cli import main as cli
from autopart.costmodel.measurements import RowKind
from autopart.errors import AutopartError
from autopart.plan.schema import Plan
from autopart.profile import Profile, ProfileReport, TimingSettings, machine_profile_path
from autopart.targets.devices import discover
from tests.kill_child import Clean, kill_after, kill_in_write, run_clean
from tests.test_profile import tiny_cnn

TARGETS = ["cpu@numpy", "cpu/0@onnxruntime"]
PASSES = TimingSettings().passes
ONE_PASS = ("fused", "alone")  # row kinds measured in one pass with the whole budget
TUNE_FLAGS = ("--rounds", "2", "--no-peers")


# -- what a profile file holds, and what a rerun must do with it ---------------------------
Key = tuple[str, str, str]


def full_passes(kind: str) -> int:
    """The passes a row of ``kind`` has once complete."""
    return 0 if kind == "unsupported" else 1 if kind in ONE_PASS else PASSES


def is_measuring(label: str) -> bool:
    """Whether a profiling progress label is a measuring step (not planning, not the end)."""
    return label != "done" and not label.startswith(("planning ", "the numpy reference"))


def is_screening(stage: str, label: str) -> bool:
    """Whether a tune's progress step is its screen's op pass measuring a job's first pass
    (:func:`autopart.tuning.screen._price`: jobs with no row yet, one pass of ``PASSES``).
    The profile stage then resumes each such job with the passes it lacks."""
    return stage == "screen" and is_measuring(label) and label.endswith(f" (1/{PASSES})")


@dataclass
class Held:
    """What a profile file held: each row by (kind, target, key), NaN as None."""

    exists: bool = False
    rows: dict[Key, dict[str, Any]] = field(default_factory=dict)
    dropped: int = 0
    unreadable: str = ""

    def complete(self) -> set[Key]:
        """The rows with all their passes."""
        return {k for k, row in self.rows.items() if row["passes"] >= full_passes(k[0])}

    def partial(self) -> set[Key]:
        """The rows cut short: some of their passes in."""
        return set(self.rows) - self.complete()

    def describe(self) -> str:
        """``absent``, or how many complete and partial rows."""
        if not self.exists:
            return "absent"
        return f"{len(self.complete())} complete, {len(self.partial())} partial"


def held(path: Path) -> Held:
    """What the profile at ``path`` holds (an unreadable file says why).

    Speed stamps are left out: every measuring run adds its own, and none is a job that a
    rerun takes again or reuses.
    """
    if not path.exists():
        return Held()
    try:
        profile = Profile.load(path)
    except AutopartError as error:
        return Held(True, unreadable=str(error))
    records = profile.table.to_dict("records")
    rows = {
        (r["kind"], r["target"], r["key"]): {c: None if v != v else v for c, v in r.items()}
        for r in records
        if r["kind"] != RowKind.SPEED.value
    }
    return Held(True, rows, profile.dropped.count)


def job_of(key: Key) -> Key:
    """The job that records row ``key``: its rows are recorded together, pass by pass."""
    kind, target, name = key
    if kind == "launch":
        return ("launch", target, "")
    if kind in ("calibration", "cut", "cold"):
        return ("window", target, name)
    return ("op", target, name) if kind == "enqueue" else key


def jobs_of(clean: Held) -> dict[Key, list[Key]]:
    """The rows of each profiling job, from a clean profile (partitions are the tune's)."""
    jobs: dict[Key, list[Key]] = defaultdict(list)
    for key in clean.rows:
        if key[0] != "partition":
            jobs[job_of(key)].append(key)
    return jobs


def file_problems(clean: Held, now: Held) -> list[str]:
    """A profile file read after a kill must be whole: unreadable, dropped rows, a job's
    rows recorded apart, or a row whose samples disagree with its passes are problems."""
    if now.unreadable:
        return [f"unreadable after the kill: {now.unreadable}"]
    found = [f"{now.dropped} rows dropped on reading"] if now.dropped else []
    for job, keys in jobs_of(clean).items():
        passes = {now.rows[k]["passes"] if k in now.rows else None for k in keys}
        if len(passes) > 1:
            found.append(f"the rows of job {job} were saved apart: passes {passes}")
    for key, row in now.rows.items():
        samples = json.loads(row["partial"])["samples"] if row["partial"] else None
        if key in now.partial() and (samples is None or len(samples) != row["passes"]):
            found.append(f"row {key} has {row['passes']} passes but samples of {samples}")
        if key in now.complete() and samples is not None:
            found.append(f"complete row {key} keeps its samples")
    return found


def kept_problems(before: Held, after: Held) -> list[str]:
    """Every complete row of ``before`` must be in ``after`` as it was (never measured
    again), every partial one with at least its passes. The one exception is a tune's
    screen and race, which replace the row of each one-partition plan they timed whole with
    their own timing (``autopart.tuning.partitions.record_screened`` and ``record_raced``;
    a plan the race leaves out keeps the screen's): such a row must still be there."""
    found = []
    for key in before.complete():
        row = after.rows.get(key)
        retimed = row is not None and str(row["op_type"]).endswith(RETIMED)
        if row != before.rows[key] and not retimed:
            found.append(f"complete row {key} was measured again or lost")
    for key in before.partial():
        row = after.rows.get(key)
        if row is None or row["passes"] < before.rows[key]["passes"]:
            found.append(f"partial row {key} lost passes")
    return found


RETIMED = (" raced", " screened")  # op_type suffixes of rows a tune timed whole itself


@dataclass
class Expected:
    """What a rerun must report: jobs reused and resumed, jobs measured, steps taken."""

    reused: int = 0
    resumed: int = 0
    new: int = 0
    steps: int = 0


def expected_rerun(clean: Held, killed: Held) -> Expected:
    """What a rerun of the profile must do, given what the killed run's file holds.

    A job all of whose rows are complete is reused; one whose rows hold k of n passes takes
    the n - k it lacks (resumed, and new: measured in full this run); the rest take all.
    """
    expected = Expected()
    for keys in jobs_of(clean).values():
        full = full_passes(keys[0][0])
        rows = [killed.rows.get(key) for key in keys]
        if all(row is not None and row["passes"] >= full for row in rows):
            expected.reused += 1
            continue
        expected.new += 1
        if all(row is not None and row["partial"] for row in rows):
            expected.resumed += 1
            expected.steps += full - min(row["passes"] for row in rows if row is not None)
        else:
            expected.steps += full
    return expected


# -- the cases -----------------------------------------------------------------------------
@dataclass
class Case:
    """One kill and what came of it; ``outcome`` is ``reuse``, an ``error:`` line, or FAIL.

    ``moment_s`` is when the kill came after the child was ready (drawn over ``span_s``),
    ``write`` which write of the file it came inside (for kills placed there). ``file`` is what the profile held
    after the kill, ``stray`` the temporary files the kill left beside it, ``plan`` what
    became of a saved plan. ``reused``, ``resumed`` and ``new`` are the rerun's report
    (on the last case of a chain: a chain is kills one after another, then one rerun), and
    ``screened`` the jobs a tune's rerun took the first pass of in its screen.
    """

    what: str
    chain: int
    step: int
    moment_s: float | None = None
    span_s: float | None = None
    write: int | None = None
    killed: bool = False
    file: str = "absent"
    stray: int = 0
    plan: str = ""
    reused: int | None = None
    resumed: int | None = None
    new: int | None = None
    screened: int = 0
    expected: str = ""
    outcome: str = ""
    problems: list[str] = field(default_factory=list)


@dataclass
class World:
    """A tiny model, a clean profile of it and a clean tune (real processes, timed)."""

    root: Path
    model: Path
    clean: Held
    profile_run: Clean
    tuned_profiles: Path
    search: Path
    tune_run: Clean

    def profile_args(self, folder: Path) -> list[str]:
        """``autopart profile`` of the model into ``folder``."""
        return profile_args(self.model, folder)

    def tune_args(self, profiles: Path, search: Path) -> list[str]:
        """``autopart tune`` of the model, quick: two rounds, no peers."""
        return tune_args(self.model, profiles, search)

    def span_s(self, run: Clean, now: Held) -> float:
        """How long ``run`` (a clean run) takes from ready when the profile holds ``now``:
        less the share of its profiling (first to last write) that ``now`` holds done."""
        total = expected_rerun(self.clean, Held()).steps
        left = expected_rerun(self.clean, now).steps
        profiling = run.last_write_s - run.first_write_s
        return run.duration_s - profiling * (1 - left / total)

    def tune_api(self, profiles: Path, search: Path, steps: list[str], screened: list[str]) -> Any:
        """The same tune through the API (for its report); profiling steps go to ``steps``,
        the screen's first passes of jobs with no row yet to ``screened``."""

        def progress(stage: str, done: int, total: int, label: str) -> None:
            if stage == "profile" and is_measuring(label):
                steps.append(label)
            elif is_screening(stage, label):
                screened.append(label)

        return api.tune(
            str(self.model), targets=TARGETS, profiles_dir=profiles, search_dir=search,
            rounds=2, peers=False, progress=progress,
        )  # fmt: skip


def profile_args(model: Path, folder: Path) -> list[str]:
    """``autopart profile`` of ``model`` into ``folder``."""
    return ["profile", str(model), "--targets", ",".join(TARGETS), "--profiles", str(folder)]


def tune_args(model: Path, profiles: Path, search: Path) -> list[str]:
    """``autopart tune`` of ``model``, quick: two rounds, no peers."""
    return [
        "tune", str(model), "--targets", ",".join(TARGETS), "--profiles", str(profiles),
        "--search-dir", str(search), *TUNE_FLAGS,
    ]  # fmt: skip


def profile_path(folder: Path) -> Path:
    """This machine's profile file in ``folder``."""
    return machine_profile_path(folder, discover())


def make_world(root: Path) -> World:
    """Save the tiny model; profile it and tune it cleanly (real processes), timing both."""
    model = root / "tiny.onnx"
    onnx.save(tiny_cnn(), str(model))
    clean = root / "clean"
    profile_run = run_clean(profile_args(model, clean), profile_path(clean))
    profiles, search = root / "tuned-profiles", root / "search"
    tune_run = run_clean(tune_args(model, profiles, search), profile_path(profiles))
    world = World(root, model, held(profile_path(clean)), profile_run, profiles, search, tune_run)
    assert world.clean.exists and not world.clean.partial()
    assert not file_problems(world.clean, world.clean)
    return world


def _plan_state(path: Path, before: bytes | None) -> tuple[str, list[str]]:
    """What a kill did to the saved plan at ``path``: left it, or saved a whole new one."""
    if not path.exists():
        return "absent", [] if before is None else ["the saved plan was removed"]
    if path.read_bytes() == before:
        return "unchanged", []
    try:
        Plan.load(path)
    except AutopartError as error:
        return "damaged", [f"the plan file is neither the old plan nor a whole new one: {error}"]
    return "new", []


def _rerun_problems(
    clean: Held,
    killed: Held,
    final: Held,
    report: ProfileReport | None,
    steps: int,
    case: Case,
    screened: int = 0,
) -> list[str]:
    """Check a rerun's report and file against what the killed run left; fill ``case``.

    ``screened`` jobs (a tune's) had their first pass taken by the screen: the profile
    stage resumed them, and ``steps`` counts the passes of both stages.
    """
    if report is None:
        return ["the rerun did not profile"]
    expected = expected_rerun(clean, killed)
    expected.resumed += screened
    case.screened = screened
    case.reused, case.resumed, case.new = report.reused, report.resumed, report.new
    case.expected = f"{expected.reused}/{expected.resumed}/{expected.new}"
    found = []
    got = (report.reused, report.resumed, report.new, report.missing, steps)
    want = (expected.reused, expected.resumed, expected.new, 0, expected.steps)
    if got != want:
        found.append(f"rerun reused/resumed/new/missing/steps {got}, expected {want}")
    found += kept_problems(killed, final)
    rows = {key for key in final.rows if key[0] != "partition"}  # partitions: the tune's
    if final.dropped or rows & final.partial() or rows != set(clean.rows):
        found.append(f"the rerun's profile differs from a clean one's: {final.describe()}")
    return found


def partition_problems(killed: Held, final: Held, report: ProfileReport | None) -> list[str]:
    """Check the candidate partitions a tune's rerun timed whole against what it left.

    Which partitions a tune times depends on its search, so a partial row of a partition
    it no longer needs may stay partial. Each partial row it completed must have been
    resumed (taking only the passes it lacked), and each row it added measured anew.
    """
    partitions = {key for key in final.rows if key[0] == "partition"}
    resumed = len(partitions & killed.partial() & final.complete())
    # rows the screen or the race wrote (their own whole timings) are not the measure stage's
    timed = {k for k in partitions if str(final.rows[k]["op_type"]).endswith(RETIMED)}
    added = len(partitions - set(killed.rows) - timed)
    got = (0, 0) if report is None else (report.resumed, report.new)
    if got != (resumed, resumed + added) or (report is not None and report.missing):
        return [f"partitions resumed/new {got}, expected {(resumed, resumed + added)}"]
    return []


def _strays(folder: Path) -> list[Path]:
    """Temporary files of interrupted writes in ``folder`` and below."""
    return sorted(folder.rglob(".*.tmp"))


def _conclude(cases: list[Case], rerun: Callable[[], list[str]]) -> list[Case]:
    """Run ``rerun`` (which checks and returns problems); set every case's outcome."""
    try:
        cases[-1].problems += rerun()
        error = ""
    except AutopartError as failure:  # a clean refusal: one line on the command line
        error = "error: " + " ".join(str(failure).split())
    except Exception as failure:  # a traceback on the command line
        cases[-1].problems.append(f"the rerun raised {type(failure).__name__}: {failure}")
        error = ""
    for case in cases:
        case.outcome = "FAIL" if case.problems else error or "reuse"
    return cases


def profile_chain(world: World, folder: Path, kills: int, chain: int, rng: Generator) -> list[Case]:
    """Kill ``autopart profile`` ``kills`` times in turn, then rerun it once.

    Each kill comes at a moment drawn uniformly over the run's expected span (
    :meth:`World.span_s`: what the profile holds so far shortens it).
    """
    path = profile_path(folder)
    cases: list[Case] = []
    previous = Held()
    for step in range(kills):
        span = world.span_s(world.profile_run, previous)
        ended = kill_after(world.profile_args(folder), float(rng.uniform(0.0, span)))
        now = held(path)
        case = Case("profile", chain, step, round(ended.after_s, 3), round(span, 3))
        case.killed, case.file, case.stray = ended.killed, now.describe(), len(_strays(folder))
        case.problems += ended.problems() + file_problems(world.clean, now)
        case.problems += kept_problems(previous, now)
        cases.append(case)
        previous = now

    def rerun() -> list[str]:
        steps: list[str] = []
        report, _, _ = api.profile(
            str(world.model), TARGETS, folder, progress=lambda d, t, s: steps.append(s)
        )
        final = held(path)
        count = sum(map(is_measuring, steps))
        found = _rerun_problems(world.clean, previous, final, report, count, cases[-1])
        return found + [f"the rerun left {p.name}" for p in _strays(folder)]

    return _conclude(cases, rerun)


def _tune_rerun(world: World, profiles: Path, search: Path, killed: Held, case: Case) -> list[str]:
    """Rerun the tune through the API after a kill left ``killed``; its problems."""
    steps: list[str] = []
    screened: list[str] = []
    report = world.tune_api(profiles, search, steps, screened)
    final = held(profile_path(profiles))
    Plan.load(report.plan_path)  # a whole plan, or a one-line error
    found = partition_problems(killed, final, report.partitions_measured)
    count = len(steps) + len(screened)
    return found + _rerun_problems(
        world.clean, killed, final, report.profiled, count, case, len(screened)
    )


def tune_chain(world: World, folder: Path, kills: int, chain: int, rng: Generator) -> list[Case]:
    """Kill ``autopart tune`` (a saved plan in place) ``kills`` times, then rerun it once.

    Moments are drawn as in :func:`profile_chain`.
    """
    profiles, search = folder / "profiles", folder / "search"
    shutil.copytree(world.search, search)
    (plan,) = search.glob("*/plan.json")
    path = profile_path(profiles)
    cases: list[Case] = []
    previous = Held()
    for step in range(kills):
        before = plan.read_bytes() if plan.exists() else None
        span = world.span_s(world.tune_run, previous)
        ended = kill_after(world.tune_args(profiles, search), float(rng.uniform(0.0, span)))
        now = held(path)
        case = Case("tune", chain, step, round(ended.after_s, 3), round(span, 3))
        case.killed, case.file, case.stray = ended.killed, now.describe(), len(_strays(folder))
        case.plan, problems = _plan_state(plan, before)
        case.problems += ended.problems() + problems + file_problems(world.clean, now)
        case.problems += kept_problems(previous, now)
        cases.append(case)
        previous = now

    def rerun() -> list[str]:
        return _tune_rerun(world, profiles, search, previous, cases[-1])

    return _conclude(cases, rerun)


def profile_write_kill(world: World, folder: Path, nth: int) -> Case:
    """Kill ``autopart profile`` inside its ``nth`` checkpoint write, then rerun it."""
    path = profile_path(folder)
    marker = folder.parent / f"{folder.name}.marker"
    inside = kill_in_write(world.profile_args(folder), path, nth, marker)
    now = held(path)
    case = Case(
        "profile write", 0, 0, round(inside.ended.after_s, 3), None, nth, inside.ended.killed
    )
    case.file, case.stray = now.describe(), len(_strays(folder))
    case.problems += inside.ended.problems() + file_problems(world.clean, now)
    if not inside.ended.killed:
        case.problems.append(f"the run ended before its write {nth}")
    elif (path.read_bytes() if path.exists() else None) != inside.before:
        case.problems.append("the profile is not what it was before the write")
    elif inside.temporary is None or not inside.temporary.exists():
        case.problems.append("the half-written temporary file is gone: the kill missed")

    def rerun() -> list[str]:
        steps: list[str] = []
        report, _, _ = api.profile(
            str(world.model), TARGETS, folder, progress=lambda d, t, s: steps.append(s)
        )
        count = sum(map(is_measuring, steps))
        found = _rerun_problems(world.clean, now, held(path), report, count, case)
        return found + [f"the rerun left {p.name}" for p in _strays(folder)]

    return _conclude([case], rerun)[0]


def plan_write_kill(world: World, folder: Path) -> Case:
    """Kill ``autopart tune`` inside the write of its plan (a saved plan in place), check
    that the old plan stands and runs, then rerun the tune."""
    profiles, search = folder / "profiles", folder / "search"
    shutil.copytree(world.tuned_profiles, profiles)
    shutil.copytree(world.search, search)
    (plan,) = search.glob("*/plan.json")
    path = profile_path(profiles)
    start = held(path)
    inside = kill_in_write(world.tune_args(profiles, search), plan, 1, folder / "marker")
    now = held(path)
    case = Case("plan write", 0, 0, round(inside.ended.after_s, 3), None, 1, inside.ended.killed)
    case.file, case.stray = now.describe(), len(_strays(folder))
    case.plan, problems = _plan_state(plan, inside.before)
    case.problems += inside.ended.problems() + problems + file_problems(world.clean, now)
    case.problems += kept_problems(start, now)
    if not inside.ended.killed or case.plan != "unchanged":
        case.problems.append(f"the kill missed the plan write, or the plan is {case.plan}")
    elif inside.temporary is None or not inside.temporary.exists():
        case.problems.append("the half-written temporary file is gone: the kill missed")
    else:
        ran = CliRunner().invoke(cli, ["run", str(plan), "--repeat", "1"])
        if ran.exit_code != 0:
            case.problems.append(f"autopart run of the old plan failed: {ran.output[-300:]!r}")

    def rerun() -> list[str]:
        return _tune_rerun(world, profiles, search, now, case)

    return _conclude([case], rerun)[0]


def tune_write_kill(world: World, folder: Path, nth: int) -> Case:
    """Kill ``autopart tune`` (no profile yet) inside its ``nth`` write of the profile,
    then rerun it: early writes are the screen's op pass (:func:`is_screening`)."""
    profiles, search = folder / "profiles", folder / "search"
    shutil.copytree(world.search, search)
    path = profile_path(profiles)
    inside = kill_in_write(world.tune_args(profiles, search), path, nth, folder / "marker")
    now = held(path)
    case = Case("tune write", 0, 0, round(inside.ended.after_s, 3), None, nth, inside.ended.killed)
    case.file, case.stray = now.describe(), len(_strays(folder))
    case.problems += inside.ended.problems() + file_problems(world.clean, now)
    if not inside.ended.killed:
        case.problems.append(f"the run ended before its write {nth}")
    return _conclude([case], lambda: _tune_rerun(world, profiles, search, now, case))[0]


def failures(cases: Sequence[Case]) -> str:
    """The cases that did not end in correct reuse, one line each (empty: none)."""
    return "\n".join(
        f"{c.what} chain {c.chain} step {c.step} at {c.moment_s} s: {c.outcome} {c.problems}"
        for c in cases
        if c.outcome != "reuse"
    )
