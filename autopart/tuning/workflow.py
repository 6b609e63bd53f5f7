"""`autopart tune MODEL`: profile what is missing, search, verify by running, save, report.

The saved results of one model and target set live in ``search/<model>-<targets hash>/``:
``plan.json`` (the chosen plan, with its prediction and measurement), ``study.db`` (the
optuna study, resumable), ``report.json`` and ``report.csv`` (every candidate plan's
predicted and measured latency). With a profile of another machine, nothing runs: the plan
is made for that machine and left unverified.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

from autopart.costmodel import costs_from_profile
from autopart.costmodel.accuracy import ErrorModel
from autopart.costmodel.costs import Costs
from autopart.host_memory import release_freed_memory
from autopart.io import check_writable
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.ir.hashing import graph_hash
from autopart.limits import memory_limit
from autopart.loader import ModelLike
from autopart.plan.schema import IlpSummary, Plan
from autopart.profile import Profile, ProfileReport
from autopart.profile.core_sharing import process_probe, shared_note
from autopart.profile.sensitivity import SENSITIVITY_BUDGET_S
from autopart.profile.speed import Rescaling, at_speed, measure_speed
from autopart.progress import StageProgress
from autopart.search.candidates import Candidate
from autopart.search.options import SearchOptions
from autopart.search.optuna_search import SearchProgress
from autopart.search.optuna_study import check_storage
from autopart.search.planner import SearchOutcome, annotate, search
from autopart.tuning import choice
from autopart.tuning.accuracy import (
    accuracy_notes,
    calibration_notes,
    plan_over_tolerance,
    search_error_model,
)
from autopart.tuning.clock import Clock
from autopart.tuning.drop_model import unseen_drop_note
from autopart.tuning.entrants import entrants
from autopart.tuning.finite import check_seeded_reference, stand_in_notes
from autopart.tuning.heats import Heats
from autopart.tuning.judge import Judge
from autopart.tuning.kept_measure import measured_as_peers, measured_outside_race
from autopart.tuning.locate import Located, locate
from autopart.tuning.options import TuneOptions
from autopart.tuning.partitions import (
    measure_partitions,
    price_measured,
    record_raced,
)
from autopart.tuning.peers import PeerInputs, peer_lingers, peers
from autopart.tuning.plan_rows import (
    REPORT_CSV,
    REPORT_JSON,
    drift_note,
    failure_notes,
    plan_rows,
    predicted_drop,
    race_note,
    save_report,
)
from autopart.tuning.profiling import profile_stage
from autopart.tuning.screen import Screening
from autopart.tuning.screen_verdict import screen_verdict
from autopart.tuning.settings import ACCURACY, VERIFY
from autopart.tuning.tune_report import TuneReport
from autopart.tuning.verify import Measured, measure_plans
from autopart.tuning.whole_scale import note as whole_scale_note
from autopart.tuning.whole_scale import scale_to_whole

SEARCH_FLOOR_S = 1.0  # the search's least budget, the clock spent or not: an ILP's moment


@dataclass
class Prepared:
    """A model with its costs and search outcome, before anything is run.

    ``measured`` reports the measure stage (candidate partitions timed whole), when it ran;
    ``accuracy`` is the error model the search kept to (None: no reduced target) and
    ``search_options`` the options it ran with (to search again under a tighter bound).
    ``profile_path`` is where the profile is saved, when this machine was profiled here.
    ``op_sums`` is each candidate's prediction from its op rows alone, before partitions
    measured whole priced it (what :func:`drift_note` holds against the measurements).
    ``pricing`` is ``profile`` scaled to the machine's speed now (:mod:`autopart.profile.speed`),
    which prices everything; ``rescaling`` says what that scaled. ``screening`` is what the
    screen measured before the full profile (None: no screen ran), and ``targets`` are
    those it kept; ``clock`` is the command's wall-time budget, with what it cut short;
    ``judge`` judges the plans' outputs (:mod:`autopart.tuning.judge`).
    """

    graph: Graph
    profile: Profile
    profiled: ProfileReport | None
    costs: Costs
    targets: list[str]
    directory: Path
    planned_only: bool
    outcome: SearchOutcome
    measured: ProfileReport | None = None
    accuracy: ErrorModel | None = None
    search_options: SearchOptions = field(default_factory=SearchOptions)
    profile_path: Path | None = None
    op_sums: dict[str, float] = field(default_factory=dict)
    pricing: Profile | None = None
    rescaling: Rescaling = field(default_factory=Rescaling)
    screening: Screening | None = None
    clock: Clock = field(default_factory=lambda: Clock(None))
    judge: Judge | None = None


def tune_model(
    model: ModelLike,
    options: TuneOptions | None = None,
    *,
    progress: StageProgress | None = None,
    located: Located | None = None,
) -> TuneReport:
    """Take ``model`` to a verified, saved plan (see the module docstring).

    ``progress`` is called at every step of every stage; ``located`` as :func:`prepare`'s
    (a graph shared). Raises an :class:`~autopart.errors.AutopartError` subclass for bad
    options, constraints that cannot hold, or a profile that lacks what the model needs.
    Every file the tune writes, and the study storage, are checked before anything is
    measured. An interrupt (KeyboardInterrupt) propagates with a note of what each stage
    kept; the plan files are written only once every plan has run all its rounds: an
    interrupted tune leaves the saved plan as it was.
    """
    options = options or TuneOptions()
    clock = Clock(options.wall_budget_s, options.started or time.perf_counter())
    options.check_outputs()
    if options.search.storage is not None:
        check_storage(options.search.storage)
    located = located or locate(model, options, progress)
    plan_path = located.directory / "plan.json"
    for name, what in (("plan.json", "plan file"), (REPORT_JSON, "report"), (REPORT_CSV, "report")):
        check_writable(located.directory / name, what)
    written: list[Path] = []
    try:
        with memory_limit(options.memory_limit):
            return _tune(model, options, located, progress, written, clock)
    except KeyboardInterrupt as interrupt:
        interrupt.add_note(_plans_kept(plan_path, options.output, written))
        raise


def _plans_kept(plan_path: Path, output: str | Path | None, written: list[Path]) -> str:
    """What an interrupted tune did to the plan files: left them, or wrote ``written``."""
    if written:
        return "the new plan was saved to " + " and ".join(str(path) for path in written)
    paths = [plan_path, *([Path(output)] if output is not None else [])]
    existing = [str(path) for path in paths if path.exists()]
    if not existing:
        return "no plan was saved"
    verb = "was" if len(existing) == 1 else "were"
    return f"the saved plan {' and '.join(existing)} {verb} left as it was"


def _tighten(
    model: ModelLike,
    prepared: Prepared,
    options: TuneOptions,
    progress: StageProgress | None,
    verified: tuple[dict[str, Measured], dict[str, Measured], list[str]],
    verify_s: float,
) -> tuple[Prepared, tuple[dict[str, Measured], dict[str, Measured], list[str]]]:
    """Search and verify again while a plan of the ILP's precisions measures over the tolerance.

    Those plans are the ILP's own and its precisions on one library (``ilp-on:<target>``,
    :mod:`~autopart.search.one_library`): the first measured over its tolerance sets the
    bound. At most :attr:`~autopart.tuning.settings.AccuracySettings.tighten_rounds` times,
    each with the bound of :func:`~autopart.tuning.accuracy.tighter_error_model`; each round
    is a note. A round starts only while the budget left covers another race as long as
    the last (``verify_s`` seconds) and what follows it.
    """
    rounds: list[str] = []
    for round_index in range(ACCURACY.tighten_rounds):
        measured = verified[0]
        over = plan_over_tolerance(prepared.accuracy, prepared.outcome.candidates, measured)
        if over is None:
            break
        name, tighter = over
        if not prepared.clock.covers(verify_s + VERIFY.finish_s):
            prepared.clock.cut.append(f"the accuracy rounds ({name} is over its tolerance)")
            break
        rounds.append(
            f"accuracy round {round_index + 1}: {name} measured "
            f"{measured[name].max_error:.3g} over {measured[name].tolerance:.3g}; solved "
            f"again with the predicted error bound {prepared.accuracy.tolerance:.3g} -> "
            f"{tighter.tolerance:.3g}"
        )
        prepared = _search_again(prepared, tighter)
        candidates, twins = _runnable(prepared.outcome)
        started = time.perf_counter()
        verified = _verify(model, prepared, candidates, twins, options, progress)
        verify_s = time.perf_counter() - started
    verified[2][:0] = rounds
    return prepared, verified


def _tune(
    model: ModelLike,
    options: TuneOptions,
    located: Located,
    progress: StageProgress | None,
    written: list[Path],
    clock: Clock,
) -> TuneReport:
    """:func:`tune_model` once its outputs are checked; appends each plan file it writes."""
    prepared = prepare(model, options, progress=progress, located=located, clock=clock)
    graph, profile, outcome = prepared.graph, prepared.profile, prepared.outcome
    candidates, twins = _runnable(outcome)
    measured: dict[str, Measured] = {}
    peer_results: dict[str, Measured] = {}
    notes: list[str] = []
    if prepared.planned_only:
        notes.append(
            f"planned for machine {profile.fingerprint} from {options.profile_file}; "
            "nothing was run"
        )
    elif (verdict := screen_verdict(prepared, candidates, twins, options)) is not None:
        prepared = dataclasses.replace(prepared, judge=verdict.judge)
        measured, peer_results, notes = verdict.measured, verdict.peer_results, verdict.notes
    else:
        started = time.perf_counter()
        measured, peer_results, notes = _verify(
            model, prepared, candidates, twins, options, progress
        )
        prepared, (measured, peer_results, notes) = _tighten(
            model, prepared, options, progress, (measured, peer_results, notes),
            time.perf_counter() - started,
        )  # fmt: skip
        outcome = prepared.outcome
        candidates, twins = _runnable(outcome)
        if prepared.profiled is not None:
            record_raced(graph, profile, prepared.profile_path, candidates, measured)
    if prepared.screening is not None:
        notes[:0] = prepared.screening.notes
    notes.extend(outcome.notes)
    notes.extend([*calibration_notes(graph, prepared.targets), *stand_in_notes(graph)])
    notes.extend(unseen_drop_note(prepared.accuracy))
    notes.extend(prepared.rescaling.note())
    notes.extend(prepared.clock.note())
    pick = outcome.chosen.name
    wrong = prepared.screening.wrong_plans(candidates) if prepared.screening else set()
    final, decision = choice.final_choice(
        pick, candidates, twins, measured, peer_results, notes, wrong
    )
    if not prepared.planned_only:
        screened = prepared.screening.whole if prepared.screening is not None else {}
        whole = {twins.get(name, name): result for name, result in screened.items()}
        notes.extend(measured_outside_race(final, decision, measured, peer_results, whole))
    chosen = candidates[final]
    plan = chosen.plan
    _record(plan, chosen, prepared, options, final, measured)
    plan.notes.extend(notes)
    notes[:0] = profile.dropped.notes()  # rows of its file that failed their check
    rows = plan_rows(candidates, measured, prepared.accuracy)
    named = model if isinstance(model, str | Path) else graph.name
    notes.extend(drift_note(rows, named, prepared.op_sums))
    plan_path = prepared.directory / "plan.json"
    for path in [plan_path, *([Path(options.output)] if options.output is not None else [])]:
        plan.save(path)
        written.append(path)
    report = TuneReport(
        graph.name, prepared.directory, Path(options.output) if options.output else plan_path,
        plan, final, pick, outcome, rows, prepared.profiled, prepared.planned_only, notes,
        peer_results, decision, prepared.measured, prepared.screening, prepared.judge, measured,
    )  # fmt: skip
    save_report(
        prepared.directory, rows, final, pick, prepared.targets, profile.fingerprint, notes,
        {name: result.median_s for name, result in peer_results.items()},
        (report.best_peer, report.vs_best_peer),
    )  # fmt: skip
    return report


def _verify(
    model: ModelLike,
    prepared: Prepared,
    candidates: dict[str, Candidate],
    twins: dict[str, str],
    options: TuneOptions,
    progress: StageProgress | None,
) -> tuple[dict[str, Measured], dict[str, Measured], list[str]]:
    """Run the distinct candidate plans and the peers side by side.

    Returns the plans' measurements, the peers' and the notes.
    """
    graph, judge = prepared.graph, prepared.judge or Judge(prepared.graph)
    feeds = random_inputs(graph, options.search.seed)
    release_freed_memory()  # the search's and the partition timings' buffers
    if progress is not None and options.peers:
        progress("peers", 0, 0, "compiling the libraries alone")
    screened = prepared.screening if options.peers else None  # peers it timed are skippable
    entry = entrants(
        prepared.outcome, prepared.costs, candidates, screened, options.thorough, judge.real
    )
    peer_runs, notes = (
        peers(model, PeerInputs.of(graph), skip=entry.skipped_peers) if options.peers else ({}, [])
    )
    release_freed_memory()  # what compiling the peers left behind
    failures: dict[str, str] = {}
    runners, peer_names = choice.runners_of(candidates, twins, peer_runs), list(peer_runs)
    screening = prepared.screening
    race = choice.BudgetedRace(
        runners, prepared.clock, None if screening is None else frozenset(screening.compiled)
    )
    notes.extend(entry.notes)
    whole = set() if screening is None else {twins.get(n, n) for n in screening.whole}
    measured = measure_plans(
        graph,
        race.entering(entry.plans(candidates, twins, peer_names), whole, failures),
        feeds,
        options.rounds,
        progress=None if progress is None else lambda d, t, s: progress("verify", d, t, s),
        race=race.contested,
        eliminate=race.behind,
        peers=peer_runs,
        peer_linger_s=peer_lingers(),
        failures=failures,
        judge=judge,
        tolerance=options.accuracy_policy.tolerance_rule(graph, judge.metric),
        probe=process_probe(),
        heats=None if options.thorough else Heats(VERIFY.race_held, race.admitting),
        compile_within=race.compile_within,
    )
    notes.extend(shared_note(measured))
    peer_results = {name: measured.pop(name) for name in peer_names if name in measured}
    notes.extend(measured_as_peers(measured, peer_results, entry.timed_as(peer_names, twins)))
    measured.update({n: measured[t] for n, t in twins.items() if t in measured})
    notes.extend(race_note(measured, twins))
    notes.extend(failure_notes(failures))
    notes.extend(accuracy_notes({**measured, **peer_results}, options.accuracy_policy, judge))
    return measured, peer_results, notes


def _record(
    plan: Plan,
    chosen: Candidate,
    prepared: Prepared,
    options: TuneOptions,
    final: str,
    measured: dict[str, Measured],
) -> None:
    """Write the chosen plan's prediction and, if it ran, its measurement into ``plan``."""
    costs, objective = prepared.costs, options.search.objective
    outcome, profile, model = prepared.outcome, prepared.profile, prepared.accuracy
    annotate(
        plan,
        chosen.simulation,
        costs,
        objective,
        profile=profile.fingerprint,
        method=outcome.method,
        candidate=final,
        ilp=None if outcome.ilp is None else _ilp_summary(outcome),
        error=None if model is None else predicted_drop(model, chosen.assignment),
        error_metric=None if model is None else model.metric,
    )
    if final in measured:
        plan.measured = measured[final].run_record(prepared.judge)


def prepare(
    model: ModelLike,
    options: TuneOptions | None = None,
    *,
    progress: StageProgress | None = None,
    located: Located | None = None,
    clock: Clock | None = None,
) -> Prepared:
    """Load ``model``, profile what is missing (unless ``options.profile_file``), and search.

    ``located`` is :func:`locate`'s answer for ``model`` when the caller has it already;
    ``clock`` the command's wall-time budget (None: ``options.wall_budget_s`` from now).
    """
    options = options or TuneOptions()
    clock = clock or Clock(options.wall_budget_s)
    located = located or locate(model, options, progress)
    graph, directory = located.graph, located.directory
    if not located.planned_only:  # before measuring anything: are errors measurable at all?
        check_seeded_reference(graph, options.search.seed)
    stage = profile_stage(model, located, options, clock, progress)
    profile, profiled, profile_path = stage.profile, stage.report, stage.path
    chosen_targets, screening = stage.targets, stage.screening
    speed = None if located.planned_only else measure_speed()
    costs = costs_from_profile(graph, at_speed(profile, speed)[0], chosen_targets)
    if screening is not None and not located.planned_only:
        scaled = scale_to_whole(costs, profile, screening.plans, screening.whole)
        screening.notes.extend(whole_scale_note(scaled))

    def search_progress(update: SearchProgress) -> None:
        if progress is not None:
            progress("search", update.new_trials, 0, f"trial {update.trial}: {update.best_s:.6f}s")

    asked = options.search
    accuracy = search_error_model(
        graph, chosen_targets, options.accuracy_policy, asked.seed,
        None if progress is None else lambda d, t: progress("accuracy", d, t, "sensitivities"),
        located.judge.metric, _sensitivity_budget(clock.until(stage.reserve_s)),
    )  # fmt: skip
    if accuracy is not None:  # the sensitivities' buffers, where any were measured
        release_freed_memory()
    search_options = dataclasses.replace(
        asked,
        cap_s=_search_cap(clock.until(stage.reserve_s)),
        storage=located.storage,
        study_name=f"{asked.objective}-{graph_hash(graph)[:12]}-{profile.fingerprint}",
        source=str(graph.meta.get("source", graph.name)),
        accuracy=accuracy,
    )
    if progress is not None:
        progress("search", 0, 0, f"{len(graph.nodes)} nodes on {len(chosen_targets)} targets")
    outcome = search(
        costs,
        search_options,
        progress=search_progress,
        steps=None if progress is None else lambda d, t, s: progress("search", d, t, s),
    )
    if progress is not None:
        progress("search", 1, 1, f"{len(outcome.candidates)} candidates")
    measured = None
    if profiled is not None:  # this machine, profiled here: measure what is worth it
        measured = measure_partitions(
            graph, profile, profile_path, outcome,
            None if progress is None else lambda d, t, s: progress("measure", d, t, s),
            clock.until(stage.reserve_s),
        )  # fmt: skip
        if measured.missing:
            clock.cut.append(f"the partitions timed whole ({measured.missing} left)")
    op_sums = {name: c.value(outcome.objective) for name, c in outcome.candidates.items()}
    pricing, rescaling = at_speed(profile, speed)  # with the partitions measured just now
    price_measured(graph, pricing, costs, outcome)
    return Prepared(
        graph, profile, profiled, costs, chosen_targets, directory, located.planned_only,
        outcome, measured, accuracy, search_options, profile_path, op_sums, pricing, rescaling,
        screening, clock, located.judge,
    )  # fmt: skip


def _sensitivity_budget(left_s: float | None) -> float | None:
    """The sensitivities' seconds: their share of what the clock leaves (None: no budget).

    Capped at the budget they have without one
    (:data:`~autopart.profile.sensitivity.SENSITIVITY_BUDGET_S`).
    """
    if left_s is None:
        return None
    return min(left_s * ACCURACY.sensitivity_share, SENSITIVITY_BUDGET_S)


def _search_cap(left_s: float | None) -> float | None:
    """The search's cap: what the clock leaves, but at least :data:`SEARCH_FLOOR_S`."""
    return None if left_s is None else max(left_s, SEARCH_FLOOR_S)


def _search_again(prepared: Prepared, accuracy: ErrorModel) -> Prepared:
    """``prepared`` searched again under ``accuracy``, priced with what was measured."""
    options = dataclasses.replace(prepared.search_options, accuracy=accuracy)
    outcome = search(prepared.costs, options)
    price_measured(prepared.graph, prepared.pricing or prepared.profile, prepared.costs, outcome)
    return dataclasses.replace(prepared, outcome=outcome, accuracy=accuracy, search_options=options)


def _runnable(outcome: SearchOutcome) -> tuple[dict[str, Candidate], dict[str, str]]:
    """Candidates that fit memory, the pick first; and each duplicate's twin that runs.

    Candidates with equal assignments have equal plans: only the first of them is run.
    """
    ordered = [outcome.chosen, *outcome.candidates.values()]
    seen: dict[tuple[str, ...], str] = {}
    candidates: dict[str, Candidate] = {}
    twins: dict[str, str] = {}
    for candidate in ordered:
        if not candidate.fits_memory or candidate.name in candidates:
            continue
        candidates[candidate.name] = candidate
        key = tuple(str(candidate.assignment[n]) for n in sorted(candidate.assignment))
        twins[candidate.name] = seen.setdefault(key, candidate.name)
    return candidates, twins


def _ilp_summary(outcome: SearchOutcome) -> IlpSummary:
    """The ILP figures recorded with the prediction."""
    assert outcome.ilp is not None
    ilp = outcome.ilp
    return IlpSummary(ilp.objective_s, ilp.bound_s, ilp.gap, ilp.optimal, ilp.solve_s)
