"""`autopart tune MODEL`: profile what is missing, search, verify by running, save, report.

The saved results of one model and target set live in ``search/<model>-<targets hash>/``:
``plan.json`` (the chosen plan, with its prediction and measurement), ``study.db`` (the
optuna study, resumable), ``report.json`` and ``report.csv`` (every candidate plan's
predicted and measured latency). With ``--profile FILE`` of another machine, nothing runs:
the plan is made for that machine and left unverified.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
from scipy.stats import mannwhitneyu

from autopart import api
from autopart.costmodel import costs_from_profile, profile_targets
from autopart.costmodel.costs import Costs
from autopart.io import atomic_write_bytes
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.ir.hashing import graph_hash
from autopart.plan.schema import IlpSummary, Plan
from autopart.profile import Profile, ProfileReport
from autopart.search.constraints import Constraints
from autopart.search.planner import Candidate, Method, Objective, SearchOutcome, annotate, search
from autopart.search.tuner import TuneProgress
from autopart.targets.devices import discover
from autopart.targets.resolve import available_targets
from autopart.tuning.verify import Measured, measure_plans

Progress = Callable[[str, int, int, str], None]  # stage, done, total, label
NOISE_MARGIN = 0.02  # a measured win smaller than this is noise, not a reason to switch
SIGNIFICANCE = 0.05  # and a larger one must also pass a one-sided Mann-Whitney U test
DRIFT_LIMIT = 0.2  # a single target predicted this far off its measurement gets a note
DRIFT_FLOOR_S = 20e-6  # ... unless it is off by less than this: one launch's swing


def clearly_faster(fast: Measured, slow: Measured) -> bool:
    """Whether ``fast`` beat ``slow`` by more than the noise, in median and in its runs.

    The medians must differ by more than :data:`NOISE_MARGIN`; when both plans have three
    rounds or more, a one-sided Mann-Whitney U test on their round medians (runs back to
    back within a round are not independent samples) must also pass at :data:`SIGNIFICANCE`.
    """
    if fast.median_s * (1 + NOISE_MARGIN) >= slow.median_s:
        return False
    if min(len(fast.samples), len(slow.samples)) < 3:
        return True
    test = mannwhitneyu(fast.samples, slow.samples, alternative="less")
    return bool(test.pvalue < SIGNIFICANCE)


@dataclass
class PlanRow:
    """One candidate plan as the report shows it."""

    name: str
    predicted_s: float
    measured_s: float | None
    speedup: float | None
    partitions: int
    copies: int
    memory_bytes: dict[str, int]
    max_error: float | None
    off_target_nodes: int = 0

    @property
    def label(self) -> str:
        """The name as tables show it (:func:`plan_label`)."""
        return plan_label(self.name, self.off_target_nodes)


def plan_label(name: str, off_target_nodes: int) -> str:
    """``name``, followed by how many nodes a ``single:T`` plan runs off ``T`` where any do."""
    if not off_target_nodes:
        return name
    return f"{name} (+{off_target_nodes} node{'s' * (off_target_nodes > 1)} on the fallback)"


@dataclass
class Prepared:
    """A model with its costs and search outcome, before anything is run."""

    graph: Graph
    profile: Profile
    profiled: ProfileReport | None
    costs: Costs
    targets: list[str]
    directory: Path
    planned_only: bool
    outcome: SearchOutcome


@dataclass
class TuneReport:
    """What ``tune`` did and where it saved it."""

    model: str
    directory: Path
    plan_path: Path
    plan: Plan
    chosen: str
    search_pick: str
    outcome: SearchOutcome
    rows: list[PlanRow]
    profiled: ProfileReport | None
    planned_only: bool
    notes: list[str] = field(default_factory=list)


def targets_key(targets: Sequence[str]) -> str:
    """A short stable hash naming a target set."""
    return hashlib.sha256(",".join(sorted(targets)).encode()).hexdigest()[:8]


def tune_model(
    model: api.ModelLike,
    targets: Sequence[str] | None = None,
    objective: Objective = "latency",
    method: Method = "auto",
    budget_s: float | None = None,
    constraints: Constraints | None = None,
    profile_file: str | Path | None = None,
    profiles_dir: str | Path | None = None,
    output: str | Path | None = None,
    search_dir: str | Path = "search",
    rounds: int = 10,
    seed: int = 0,
    storage: str | None = None,
    input_shapes: dict[str, list[int]] | None = None,
    progress: Progress | None = None,
) -> TuneReport:
    """Take ``model`` to a verified, saved plan (see the module docstring)."""
    prepared = prepare(
        model, targets, objective, method, budget_s, constraints, profile_file, profiles_dir,
        search_dir, seed, storage, input_shapes, progress,
    )  # fmt: skip
    graph, profile, costs = prepared.graph, prepared.profile, prepared.costs
    directory, outcome, planned_only = prepared.directory, prepared.outcome, prepared.planned_only
    chosen_targets, profiled = prepared.targets, prepared.profiled
    candidates, twins = _runnable(outcome)
    measured: dict[str, Measured] = {}
    notes: list[str] = []
    if planned_only:
        notes.append(
            f"planned for machine {profile.fingerprint} from {profile_file}; nothing was run"
        )
    else:
        feeds = random_inputs(graph, seed)

        def contested(so_far: Mapping[str, Measured]) -> list[str]:
            every = {n: so_far[t] for n, t in twins.items() if t in so_far}
            return sorted({twins[n] for n in _contested(outcome, candidates, every)})

        measured = measure_plans(
            graph,
            {name: c.plan for name, c in candidates.items() if twins[name] == name},
            feeds,
            rounds,
            progress=None if progress is None else lambda d, t, s: progress("verify", d, t, s),
            race=contested,
        )
        measured.update({n: measured[t] for n, t in twins.items() if t in measured})
        notes.extend(_race_note(measured, twins))
        wrong = sorted(name for name, m in measured.items() if not m.correct)
        if wrong:
            notes.append(f"outputs differ from the reference for: {', '.join(wrong)}")
    pick = outcome.chosen.name
    final = _final_choice(outcome, candidates, measured, notes)
    chosen = candidates[final]
    plan = chosen.plan
    annotate(
        plan,
        chosen.simulation,
        costs,
        objective,
        profile=profile.fingerprint,
        method=outcome.method,
        candidate=final,
        ilp=None if outcome.ilp is None else _ilp_summary(outcome),
    )
    if final in measured:
        plan.measured = measured[final].run_record()
    plan.notes.extend(notes)
    rows = _rows(candidates, measured, objective)
    notes.extend(_drift_note(rows, model if isinstance(model, str | Path) else graph.name))
    plan_path = directory / "plan.json"
    plan.save(plan_path)
    if output is not None:
        plan.save(output)
    _save_report(directory, rows, final, pick, chosen_targets, profile.fingerprint, notes)
    return TuneReport(
        graph.name, directory, Path(output) if output else plan_path, plan, final, pick,
        outcome, rows, profiled, planned_only, notes,
    )  # fmt: skip


def prepare(
    model: api.ModelLike,
    targets: Sequence[str] | None = None,
    objective: Objective = "latency",
    method: Method = "auto",
    budget_s: float | None = None,
    constraints: Constraints | None = None,
    profile_file: str | Path | None = None,
    profiles_dir: str | Path | None = None,
    search_dir: str | Path = "search",
    seed: int = 0,
    storage: str | None = None,
    input_shapes: dict[str, list[int]] | None = None,
    progress: Progress | None = None,
) -> Prepared:
    """Load ``model``, profile what is missing (unless ``profile_file``), and search."""
    graph = api.load(model, input_shapes)
    machine = discover()
    profiled: ProfileReport | None = None
    if profile_file is not None:
        profile = Profile.load(profile_file)
        planned_only = profile.fingerprint != machine.fingerprint()
        chosen_targets = list(targets) if targets else [str(t) for t in profile_targets(profile)]
    else:
        planned_only = False
        chosen_targets = list(targets) if targets else [str(t) for t in available_targets(machine)]
        profiled, profile, _ = api.profile(
            graph,
            chosen_targets,
            profiles_dir,
            progress=None if progress is None else lambda d, t, s: progress("profile", d, t, s),
        )
    costs = costs_from_profile(graph, profile, chosen_targets)
    name = Path(str(graph.meta.get("source", graph.name))).name.removesuffix(".onnx")
    directory = Path(search_dir) / f"{name}-{targets_key(chosen_targets)}"
    directory.mkdir(parents=True, exist_ok=True)

    def tuner_progress(update: TuneProgress) -> None:
        if progress is not None:
            progress("search", update.new_trials, 0, f"trial {update.trial}: {update.best_s:.6f}s")

    outcome = search(
        costs,
        constraints,
        objective,
        method,
        budget_s,
        seed,
        storage or f"sqlite:///{directory / 'study.db'}",
        f"{objective}-{graph_hash(graph)[:12]}-{profile.fingerprint}",
        str(graph.meta.get("source", graph.name)),
        tuner_progress,
    )
    return Prepared(
        graph, profile, profiled, costs, chosen_targets, directory, planned_only, outcome
    )


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


def _final_choice(
    outcome: SearchOutcome,
    candidates: dict[str, Candidate],
    measured: dict[str, Measured],
    notes: list[str],
) -> str:
    """The search's pick, unless running showed another correct plan clearly faster.

    Then, among the correct plans that choice is not :func:`clearly_faster` than, the one
    with the fewest partitions: a split plan that is not measurably faster only adds
    copies, launches and interference between lanes. Among as simple plans the predicted
    quickest wins: measurements that cannot tell plans apart do not overrule the costs
    (on this 2-core VM a whole-device target can measure as slow as a one-core unit for
    the few seconds that tune times it, while another process holds a core).
    """
    pick = outcome.chosen.name
    correct = {name: m for name, m in measured.items() if m.correct}
    if not correct:
        return pick
    best = min(correct, key=lambda name: correct[name].median_s)
    chosen = pick
    if pick not in correct:
        notes.append(f"the search's pick {pick} failed its check; chose {best} as measured")
        chosen = best
    elif clearly_faster(correct[best], correct[pick]):
        notes.append(
            f"measured, {best} ({correct[best].median_s * 1e3:.2f} ms) beat the search's "
            f"pick {pick} ({correct[pick].median_s * 1e3:.2f} ms); the cost model misjudged it"
        )
        chosen = best

    def partitions(name: str) -> int:
        return len(candidates[name].plan.partitions) if name in candidates else 1

    close = [
        name
        for name in correct
        if name in candidates and not clearly_faster(correct[chosen], correct[name])
    ]

    def predicted(name: str) -> float:
        return candidates[name].value(outcome.objective) if name in candidates else math.inf

    simplest = min(close, key=lambda name: (partitions(name), predicted(name)))
    if simplest == chosen:
        return chosen
    faster = correct[simplest].median_s < correct[chosen].median_s
    why = (
        "kept the simpler plan"
        if partitions(simplest) < partitions(chosen)
        else f"kept the one predicted quicker ({predicted(simplest) * 1e3:.2f} against "
        f"{predicted(chosen) * 1e3:.2f} ms)"
    )
    notes.append(
        f"{simplest} ({partitions(simplest)} partition(s), "
        f"{correct[simplest].median_s * 1e3:.2f} ms) measured "
        f"{'faster than' if faster else 'not clearly slower than'} "
        f"{chosen} ({partitions(chosen)} partition(s), "
        f"{correct[chosen].median_s * 1e3:.2f} ms); {why}"
    )
    return simplest


def _contested(
    outcome: SearchOutcome, candidates: dict[str, Candidate], measured: Mapping[str, Measured]
) -> list[str]:
    """The choice and the plan that leads it, when that lead is not yet settled.

    Empty when no correct plan measured faster than :func:`_final_choice`'s by more than
    :data:`NOISE_MARGIN`, or when the fastest such plan already passes
    :func:`clearly_faster` (more rounds are then not what is missing). Otherwise more
    rounds of the two decide.
    """
    final = _final_choice(outcome, candidates, dict(measured), [])
    correct = {name: m for name, m in measured.items() if m.correct}
    if final not in correct:
        return []
    leaders = [
        name
        for name, m in correct.items()
        if m.median_s * (1 + NOISE_MARGIN) < correct[final].median_s
    ]
    if not leaders:
        return []
    leader = min(leaders, key=lambda name: correct[name].median_s)
    if clearly_faster(correct[leader], correct[final]):
        return []
    return [final, leader]


def _race_note(measured: Mapping[str, Measured], twins: Mapping[str, str]) -> list[str]:
    """A note naming the plans that raced on, if any did (they have the most rounds)."""
    rounds = {name: len(m.round_medians) for name, m in measured.items() if twins[name] == name}
    if not rounds or len(set(rounds.values())) < 2:
        return []
    most, least = max(rounds.values()), min(rounds.values())
    raced = sorted(name for name, count in rounds.items() if count == most)
    return [
        f"{' and '.join(raced)} raced on for {most - least} more rounds: their lead was unclear"
    ]


def _drift_note(rows: Sequence[PlanRow], model: str | Path) -> list[str]:
    """A note naming the single targets whose prediction is over :data:`DRIFT_LIMIT` off.

    A profile taken in a slow or quick spell of a shared machine predicts every plan on
    that target off by as much; the note says how to measure it again. It cannot tell such
    drift from a bias of the cost model on that target, so it says both. Gaps under
    :data:`DRIFT_FLOOR_S` are not noted: a model of a few microseconds swings by that much
    from one launch to the next, whatever the profile.
    """
    off: list[tuple[str, float, float, float]] = []  # target, predicted, measured, error
    for row in rows:
        measured = row.measured_s
        if row.name.startswith("single:") and measured:
            error = row.predicted_s / measured - 1
            if abs(error) > DRIFT_LIMIT and abs(row.predicted_s - measured) >= DRIFT_FLOOR_S:
                target = row.name.removeprefix("single:")
                off.append((target, row.predicted_s, measured, error))
    if not off:
        return []
    listing = "; ".join(
        f"{t} {p * 1e3:.2f} ms predicted, {m * 1e3:.2f} measured ({e:+.0%})" for t, p, m, e in off
    )
    targets = ",".join(t for t, *_ in off)
    return [
        f"the profile is more than {DRIFT_LIMIT:.0%} off the measurement on {listing}. "
        "Either the machine was in a slow or quick spell when it was profiled "
        f"(`autopart profile {model} --targets {targets} --refresh` measures again) "
        "or the cost model misses something on that target"
    ]


def _ilp_summary(outcome: SearchOutcome) -> IlpSummary:
    assert outcome.ilp is not None
    ilp = outcome.ilp
    return IlpSummary(ilp.objective_s, ilp.bound_s, ilp.gap, ilp.optimal, ilp.solve_s)


def _rows(
    candidates: dict[str, Candidate], measured: dict[str, Measured], objective: Objective
) -> list[PlanRow]:
    singles = [name for name in candidates if name.startswith("single:")]
    measured_singles = [measured[n].median_s for n in singles if n in measured]
    predicted_singles = [candidates[n].simulation.makespan_s for n in singles]
    rows = []
    for name, candidate in candidates.items():
        predicted = candidate.simulation.makespan_s
        result = measured.get(name)
        if result is not None and measured_singles:
            speedup = min(measured_singles) / result.median_s
        elif result is None and predicted_singles:
            speedup = min(predicted_singles) / predicted if predicted else None
        else:
            speedup = None
        rows.append(
            PlanRow(
                name,
                predicted,
                None if result is None else result.median_s,
                speedup,
                len(candidate.plan.partitions),
                len(candidate.plan.copies),
                {
                    device: s.weights_bytes + s.activation_peak_bytes
                    for device, s in candidate.plan.storage.items()
                },
                None if result is None else result.max_error,
                candidate.off_target_nodes,
            )
        )
    key = (lambda r: r.measured_s) if measured else (lambda r: r.predicted_s)
    return sorted(rows, key=lambda r: (key(r) is None, key(r) or 0.0))


def _save_report(
    directory: Path,
    rows: list[PlanRow],
    chosen: str,
    pick: str,
    targets: list[str],
    fingerprint: str,
    notes: list[str],
) -> None:
    document = {
        "chosen": chosen,
        "search_pick": pick,
        "targets": targets,
        "profile": fingerprint,
        "notes": notes,
        "plans": [asdict(row) for row in rows],
    }
    atomic_write_bytes(directory / "report.json", (json.dumps(document, indent=1) + "\n").encode())
    table = pd.DataFrame([asdict(row) for row in rows])
    table["memory_bytes"] = table["memory_bytes"].map(
        lambda m: ";".join(f"{k}={v}" for k, v in m.items())
    )
    atomic_write_bytes(directory / "report.csv", table.to_csv(index=False).encode())
