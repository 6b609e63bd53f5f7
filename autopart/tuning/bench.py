"""`autopart bench MODEL...`: every way of running a model, timed side by side in one run.

The peers (each codegen's library alone at its defaults: see
:mod:`autopart.tuning.peers`), every single target, the baselines and the tuned plan run in
interleaved rounds on the same inputs; the result is a CSV and a table of ratios.

The tuned plan is the one `autopart tune` saved for the model and target set when there is
one (and it still matches the model); else a tune at its defaults runs first and saves it,
so the row is the plan a user's tune keeps, raced and within its tolerance, never the
search's unverified pick (vgg19's was 2.6e-2 off against a tolerance of 1.36e-2).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from autopart.errors import AutopartError
from autopart.io import atomic_write_bytes
from autopart.ir.feeds import random_inputs
from autopart.ir.target import VirtualDevice
from autopart.limits import memory_limit
from autopart.plan.schema import Plan
from autopart.plan.validate import validate_plan
from autopart.profile.core_sharing import process_probe
from autopart.progress import StageProgress
from autopart.search.candidates import Candidate, CandidateKind, candidate_name
from autopart.targets.registry import declared_peers
from autopart.tuning.choice import best_peer, paired_ratio, peers_behind, ratio_interval
from autopart.tuning.heats import Heats
from autopart.tuning.judge import Judge
from autopart.tuning.locate import Located, locate
from autopart.tuning.options import BenchOptions, TuneOptions
from autopart.tuning.peers import PeerInputs, peer_lingers, peer_names, peers
from autopart.tuning.settings import VERIFY
from autopart.tuning.verify import Measured, measure_plans
from autopart.tuning.workflow import Prepared, prepare, tune_model

TUNED = "autopart (tuned)"
AGAIN = "autopart (tuned, timed again)"  # the same plan compiled twice: the noise floor
BASELINES = (CandidateKind.ORT_EP_RULE, CandidateKind.HEFT, CandidateKind.PER_OP_BEST)


def bench_models(
    models: Sequence[str],
    options: BenchOptions | None = None,
    *,
    progress: StageProgress | None = None,
) -> pd.DataFrame:
    """One row per (model, plan): measured median, ratios to each peer and best single.

    Columns: ``model``, ``plan`` (its name), ``kind`` (a :class:`CandidateKind` value,
    ``peer`` for a peer, ``chosen`` for the tuned plan, ``chosen-again`` for the tuned plan
    compiled and timed a second time), ``target`` (a single target's, else empty),
    ``median_ms``, ``predicted_ms``, one ratio column per peer the registered codegens
    declare (:func:`peer_columns`: ``vs_onnxruntime``, ``vs_openvino`` as installed,
    ``vs_openvino_f32``; NaN where the peer did not run), ``vs_best_peer`` (each peer a
    library as installed, :mod:`autopart.tuning.peers`; the best is the quickest peer whose
    drop is within the budget, never an int8 tool peer:
    :func:`~autopart.tuning.choice.best_peer`) with ``vs_best_peer_low`` and
    ``vs_best_peer_high``, the bounds of its interval over paired rounds
    (:func:`autopart.tuning.choice.ratio_interval`),
    ``noise_floor`` (the model's: how far apart the tuned plan's two timings are,
    ``|again / tuned - 1|``; this and every ``vs_`` ratio but ``vs_best_single`` are taken
    over the rounds both runners ran, :func:`autopart.tuning.choice.paired_ratio`, never
    over medians of different rounds) and ``noise_spread`` (how far apart they may fall: the larger
    distance from 1 of the 95% interval of ``again / tuned`` over the paired rounds),
    ``vs_best_single``, ``partitions``, ``codegens`` (the distinct codegens of the plan's
    partitions, sorted and joined by ``+``, e.g. ``onnxruntime+opencl``; empty for the
    peers), ``copies``, ``metric`` (the task metric judging every row,
    :mod:`autopart.tuning.metrics`), ``metric_drop`` (its drop against the f32 reference),
    ``budget`` (the drop every row was held to, :mod:`autopart.tuning.accuracy`),
    ``within_budget``, ``samples`` (what they were measured on: validation samples or
    seeded random inputs, :mod:`autopart.tuning.judge`), ``max_rel_error`` (the largest
    relative error there), ``runs``, ``shared_rounds`` (timed
    rounds dropped and run again because the cores shared one core's speed,
    :mod:`autopart.profile.core_sharing`), ``same_plan_as`` (the
    plan whose run it shares, if equal), ``off_target_nodes`` and ``error``: why a plan or
    peer that could not run has no timings (its figures are then NaN).
    """
    options = options or BenchOptions()
    rows: list[dict[str, object]] = []
    with memory_limit(options.memory_limit):
        for model in models:
            rows.extend(_bench_model(model, options, progress))
    return pd.DataFrame(rows)


def _bench_model(
    model: str, options: BenchOptions, progress: StageProgress | None
) -> list[dict[str, object]]:
    """The rows of one model (see :func:`bench_models`)."""
    tune_options = _tune_options(options)
    located = locate(model, tune_options, progress)
    tuned = _tuned_plan(model, options, located, progress)  # before the bench holds its own
    if options.baselines:
        prepared = prepare(model, tune_options, progress=progress, located=located)
        graph, judge = prepared.graph, prepared.judge or Judge(prepared.graph)
        candidates, plans, predicted = _contenders(prepared, tuned)
    else:
        graph, judge = located.graph, located.judge
        candidates, plans, predicted = {}, *_tuned_alone(model, tuned)
    twins = _twins(plans)
    twins[AGAIN] = AGAIN  # compiled and timed on its own: the run's noise floor
    plans[AGAIN] = plans[TUNED]
    failures: dict[str, str] = {}
    peer_runners, _ = peers(model, PeerInputs.of(graph), failures=failures)
    peers_run = list(peer_runners)  # handed to the rounds, which free each peer it retires
    measured = measure_plans(
        graph,
        _first_what_the_bench_is_for(plans, twins),
        random_inputs(graph, 0),
        options.rounds,
        progress=None if progress is None else lambda d, t, s: progress("bench", d, t, s),
        peers=peer_runners,
        peer_linger_s=peer_lingers(),
        failures=failures,
        judge=judge,
        tolerance=options.accuracy_policy.tolerance_rule(graph, judge.metric),
        probe=process_probe(),
        heats=Heats(VERIFY.race_held),  # the tuned plan and its second copy first
        eliminate=functools.partial(peers_behind, peers=peers_run, rounds=options.rounds),
    )
    measured.update({n: measured[t] for n, t in twins.items() if t in measured})
    measured = {n: measured[n] for n in [*plans, *peers_run] if n in measured}
    failures.update({n: failures[t] for n, t in twins.items() if t in failures})
    if not any(name in measured for name in plans):
        why = next(iter(failures.values()), "no plan ran")
        raise AutopartError(f"no plan of {model} could run: {why}")
    timed_peers = [name for name in peers_run if name in measured]
    best = best_peer({name: measured[name] for name in timed_peers})
    best_single = _best_single(measured, candidates)
    floor = _noise_floor(measured)
    spread = noise_spread(measured)
    columns = peer_columns()
    plan_columns = functools.partial(_plan_columns, model, plans, candidates, judge)
    rows: list[dict[str, object]] = []
    for name, result in measured.items():
        versus = None if best is None else ratio_interval(result, measured[best])
        rows.append(
            {
                **plan_columns(name),
                "median_ms": result.median_s * 1e3,
                "predicted_ms": predicted[name] * 1e3 if name in predicted else np.nan,
                **{
                    column: paired_ratio(result, measured[peer]) if peer in timed_peers else np.nan
                    for peer, column in columns.items()
                },
                "vs_best_peer": np.nan if best is None else paired_ratio(result, measured[best]),
                "vs_best_peer_low": np.nan if versus is None else versus.low,
                "vs_best_peer_high": np.nan if versus is None else versus.high,
                "noise_floor": floor,
                "noise_spread": spread,
                "vs_best_single": result.median_s / best_single,
                **_outcome_columns(result),
                "same_plan_as": "" if twins.get(name, name) == name else twins[name],
                "error": "",
            }
        )
    rows.extend({**plan_columns(name), "runs": 0, "error": why} for name, why in failures.items())
    return rows


def _first_what_the_bench_is_for(
    plans: Mapping[str, Plan], twins: Mapping[str, str]
) -> dict[str, Plan]:
    """The plans to compile, one per twin group, the tuned plan and its second copy first.

    :func:`measure_plans` compiles in this order, in heats of ``VERIFY.race_held`` plans
    beside the peers, and refuses a plan once memory runs short: the tuned plan and the
    second timing that gives the run its noise floor race in the first heat, and on a large
    model the plans dropped are single targets, never those two.
    """
    distinct = {name: plan for name, plan in plans.items() if twins[name] == name}
    first = [twins[TUNED], AGAIN]
    return {name: distinct[name] for name in first if name in distinct} | distinct


def _plan_columns(
    model: str,
    plans: Mapping[str, Plan],
    candidates: Mapping[str, Candidate],
    judge: Judge,
    name: str,
) -> dict[str, object]:
    """The columns of plan ``name``'s row that say what it is, and what judged it."""
    plan, candidate = plans.get(name), candidates.get(name)
    target = None if candidate is None else candidate.target
    return {
        "model": model,
        "plan": name,
        "kind": _kind(name, candidate),
        "target": "" if target is None else str(target),
        "partitions": len(plan.partitions) if plan else 1,
        "codegens": plan_codegens(plan) if plan else "",
        "copies": len(plan.copies) if plan else 0,
        "off_target_nodes": 0 if candidate is None else candidate.off_target_nodes,
        "metric": judge.metric.label,
        "samples": judge.describe(),
    }


def _outcome_columns(result: Measured) -> dict[str, object]:
    """The error and round columns of one measured plan's row."""
    return {
        "metric_drop": result.max_error,
        "budget": result.tolerance,
        "within_budget": result.correct,
        "max_rel_error": result.max_rel_error,
        "runs": len(result.latencies),
        "shared_rounds": result.shared_rounds,
    }


def _contenders(
    prepared: Prepared, tuned: Plan | None
) -> tuple[dict[str, Candidate], dict[str, Plan], dict[str, float]]:
    """The single targets, baselines and tuned plan to time; their predicted seconds.

    The tuned plan is ``tuned`` (:func:`_tuned_plan`), else the search's pick.
    """
    outcome = prepared.outcome
    candidates = {
        name: c for name, c in outcome.candidates.items() if c.kind.one_target and c.fits_memory
    }
    for kind in BASELINES:
        name = candidate_name(kind)
        if name in outcome.candidates:
            candidates[name] = outcome.candidates[name]
    plans: dict[str, Plan] = {name: c.plan for name, c in candidates.items()}
    plans[TUNED] = tuned or outcome.chosen.plan
    predicted = {name: c.simulation.makespan_s for name, c in outcome.candidates.items()}
    saved = plans[TUNED].predicted
    saved_s = None if saved is None else saved.makespan_s
    predicted[TUNED] = outcome.chosen.simulation.makespan_s if saved_s is None else saved_s
    predicted[AGAIN] = predicted[TUNED]
    return candidates, plans, predicted


def _tuned_alone(model: str, tuned: Plan | None) -> tuple[dict[str, Plan], dict[str, float]]:
    """The tuned plan alone to time (a bench without baselines), and its saved prediction.

    Raises :class:`~autopart.errors.AutopartError` when there is no saved plan to time:
    without baselines nothing is searched here to stand in for it.
    """
    if tuned is None:
        raise AutopartError(f"{model}: the saved plan does not read back as one for the "
                            "model; bench it with its baselines, or tune it again")  # fmt: skip
    saved = tuned.predicted
    predicted = {} if saved is None else {TUNED: saved.makespan_s, AGAIN: saved.makespan_s}
    return {TUNED: tuned}, predicted


def _noise_floor(measured: Mapping[str, Measured]) -> float:
    """How far apart the tuned plan's two timings are: |second / first - 1| (NaN if absent).

    The ratio over the rounds both ran (:func:`paired_ratio`), as every ``vs_`` column.
    """
    if TUNED not in measured or AGAIN not in measured:
        return float("nan")
    return abs(paired_ratio(measured[AGAIN], measured[TUNED]) - 1.0)


def noise_spread(measured: Mapping[str, Measured]) -> float:
    """How far apart the tuned plan's two timings may fall in this run (NaN if absent).

    The 95% interval of the ratio of their medians over the paired rounds, as the larger
    of its two distances from 1: one gap between two timings is one draw of the run's
    noise, and a sub-millisecond plan's gap was 0.2% in one run and 26% in the next.
    """
    if TUNED not in measured or AGAIN not in measured:
        return float("nan")
    again = ratio_interval(measured[AGAIN], measured[TUNED])
    if not np.isfinite(again.high):  # too few paired rounds for an interval
        return float("nan")
    return max(again.high - 1.0, 1.0 - again.low, abs(again.ratio - 1.0))


def _best_single(measured: Mapping[str, Measured], candidates: Mapping[str, Candidate]) -> float:
    """The quickest measured single-target plan's median (NaN when none ran)."""
    singles = [
        m.median_s for n, m in measured.items() if n in candidates and candidates[n].kind.one_target
    ]
    return min(singles) if singles else float("nan")


def peer_columns() -> dict[str, str]:
    """The ratio column of every peer the registered codegens declare, by peer name.

    ``vs_<codegen>[_<variant>]`` (:attr:`~autopart.targets.peer.Peer.column`), in registry
    order: a codegen's peers have their columns wherever the codegen is registered, run or
    not, so that tables of different machines line up.
    """
    return {peer.name: peer.column for peer in declared_peers()}


def _tuned_plan(
    model: str, options: BenchOptions, located: Located, progress: StageProgress | None
) -> Plan | None:
    """The plan `tune` saved for ``model`` if it still matches; else tuned at the defaults now.

    The tune shares ``located``'s graph, and runs before the bench profiles and searches
    for itself, so nothing of the bench's is held while it runs. None only when the plan
    the tune saved does not read back as one for the graph.
    """
    path = located.directory / "plan.json"
    saved = _saved_plan(path, located.graph)
    if saved is None:
        tune_model(model, TuneOptions(**options.shared()), progress=progress, located=located)
        saved = _saved_plan(path, located.graph)
    return saved


def _tune_options(options: BenchOptions) -> TuneOptions:
    """The options of the tune whose preparation (load, profile, search) a benchmark shares.

    Thorough and unbounded: a benchmark times every single target, so every target is
    profiled, and the search runs to its own bounds.
    """
    return TuneOptions(thorough=True, **options.shared())


def plan_codegens(plan: Plan) -> str:
    """The distinct codegens of ``plan``'s partitions, sorted and joined by ``+``."""
    names = {VirtualDevice.parse(p.target).codegen or "" for p in plan.partitions}
    return "+".join(sorted(names))


def _kind(name: str, candidate: Candidate | None) -> str:
    """The ``kind`` column of a row: the candidate's kind, ``peer`` or ``chosen``."""
    if candidate is not None:
        return candidate.kind.value
    if name == AGAIN:
        return "chosen-again"
    return "peer" if name in peer_names() else "chosen"


def _twins(plans: Mapping[str, Plan]) -> dict[str, str]:
    """Each plan's twin to run: the first plan with the same partitions (itself if none).

    The same partitions means the same nodes, targets and node precisions: a partition of
    a codegen that mixes precisions (int8 and bf16 on ``cpu@openvino``) has the f32
    target, as the plan of every node at f32 does. The tuned plan is often one of the
    single-target plans; timing it twice would only report the noise between two runs of
    one plan as a difference.
    """
    seen: dict[tuple[tuple[str, tuple[str, ...]], ...], str] = {}
    twins = {}
    for name, plan in plans.items():
        key = tuple(
            sorted(
                (str(p.target), tuple(f"{n}@{plan.assignment[n]}" for n in p.nodes))
                for p in plan.partitions
            )
        )
        twins[name] = seen.setdefault(key, name)
    return twins


def _saved_plan(path: Path, graph: object) -> Plan | None:
    if not path.exists():
        return None
    try:
        plan = Plan.load(path)
        validate_plan(plan, graph)  # type: ignore[arg-type]
    except AutopartError:
        return None
    return plan


def write_csv(table: pd.DataFrame, path: str | Path) -> None:
    """Write the benchmark table atomically."""
    atomic_write_bytes(path, table.to_csv(index=False, float_format="%.4g").encode())
