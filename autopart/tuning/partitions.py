"""The measure stage of a tune: the candidate plans' partitions, compiled and timed whole.

Op sums miss what a library does to a whole subgraph (:mod:`autopart.costmodel.partitions`).
So before the candidates race, the partitions of those predicted within
``VERIFY.measure_within`` of the quickest (a prediction may order what is measured, never
overrule it), and of at most ``VERIFY.measure_max_partitions`` partitions, are timed whole
and saved in the profile; every candidate is then priced again with them. A rerun reuses
them, and a profile taken on another machine brings its own. After the race, what it
measured of each one-partition plan replaces that partition's row
(:func:`record_raced`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from autopart.costmodel.costs import Costs, PartitionKey, node_precisions
from autopart.costmodel.measurements import RowKind
from autopart.costmodel.partitions import measured_partitions, partition_key
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.plan.schema import Plan
from autopart.profile import Profile, Profiler, ProfileReport
from autopart.profile.speed import stamp
from autopart.progress import Progress
from autopart.search.candidates import Candidate
from autopart.search.planner import SearchOutcome, reprice
from autopart.targets.devices import discover
from autopart.tuning.peers import peer_equivalents
from autopart.tuning.profile_model import note_profile_kept
from autopart.tuning.settings import VERIFY
from autopart.tuning.verify import Measured


def worth_measuring(outcome: SearchOutcome) -> list[Candidate]:
    """The fitting candidates whose partitions the measure stage times, quickest first.

    Those of at most ``VERIFY.measure_max_partitions`` partitions predicted within
    ``VERIFY.measure_within`` of the quickest of them, and always the plans the peers stand
    for (:func:`autopart.tuning.peers.peer_equivalents`) and every one-partition plan: a
    prediction may order what is measured, but a plan too split to measure must not keep
    the others from it by an op sum far too low. A one-partition plan is one compile (at
    most one per target, and each races anyway), and its whole-model fusions are what op
    sums miss most: a voice-activity model's ``single:cpu/1@openvino`` was predicted at 3x what it
    measured, beyond ``VERIFY.measure_within``, then won the race with that prediction.
    """
    eligible = [
        c
        for c in outcome.candidates.values()
        if c.fits_memory and len(c.plan.partitions) <= VERIFY.measure_max_partitions
    ]
    if not eligible:
        return []
    quickest = min(c.value(outcome.objective) for c in eligible)
    peers = set(peer_equivalents(outcome.candidates).values())
    chosen = [
        c
        for c in eligible
        if c.value(outcome.objective) <= quickest * VERIFY.measure_within
        or c.name in peers
        or len(c.plan.partitions) == 1
    ]
    return sorted(chosen, key=lambda c: c.value(outcome.objective))


def too_split_to_race(outcome: SearchOutcome) -> list[Candidate]:
    """Candidates left out of the race: too many partitions to compile, and predicted slow.

    Those of more than ``VERIFY.race_max_partitions`` partitions predicted beyond
    ``VERIFY.measure_within`` of the quickest fitting candidate; never the search's pick.
    """
    fitting = [c for c in outcome.candidates.values() if c.fits_memory]
    if not fitting:
        return []
    quickest = min(c.value(outcome.objective) for c in fitting)
    return [
        c
        for c in fitting
        if len(c.plan.partitions) > VERIFY.race_max_partitions
        and c.value(outcome.objective) > quickest * VERIFY.measure_within
        and c.name != outcome.chosen.name
    ]


def far_behind(
    outcome: SearchOutcome, costs: Costs, quickest: float, keep: Collection[str] = ()
) -> list[Candidate]:
    """Candidates left out of the race: measured whole, beyond reach of ``quickest``.

    Those priced wholly from partitions timed whole (every partition in ``costs.measured``)
    at more than ``VERIFY.race_within`` times ``quickest`` seconds (the quickest candidate
    that could be kept); never the search's pick, nor a candidate named in ``keep`` (one a
    peer stands for).
    """
    return [
        c
        for c in outcome.candidates.values()
        if c.fits_memory
        and c.name != outcome.chosen.name
        and c.name not in keep
        and c.value(outcome.objective) > quickest * VERIFY.race_within
        and all(key in costs.measured for key in plan_partition_keys(c.plan))
    ]


def partition_specs(candidates: list[Candidate]) -> Iterator[PartitionKey]:
    """Each partition of ``candidates``, in plan order, keyed as :attr:`Costs.measured` is.

    A partition whose nodes mix precisions carries each node's precision, so that it is
    compiled and keyed as its plan runs it.
    """
    for candidate in candidates:
        yield from plan_partition_keys(candidate.plan)


def plan_partition_keys(plan: Plan) -> Iterator[PartitionKey]:
    """Each partition of ``plan``, in order, keyed as :func:`partition_specs` keys them."""
    alone = len(plan.partitions) == 1
    for spec in plan.partitions:
        target = VirtualDevice.parse(spec.target)
        own = {name: VirtualDevice.parse(plan.assignment[name]) for name in spec.nodes}
        mixed = node_precisions(spec.nodes, target, own)
        yield PartitionKey(tuple(spec.nodes), target, alone, mixed)


def record_screened(
    graph: Graph,
    profile: Profile,
    path: Path | None,
    plans: Mapping[str, Plan],
    measured: Mapping[str, Measured],
) -> int:
    """Record each one-partition plan the screen timed whole as its partition's row; the count.

    As :func:`record_raced` records the race's: the screen ran the plan's only partition
    bare, in settled rounds, so the search prices that plan (and any plan of that very
    partition) by what it measured instead of its op sum. Saved to ``path`` when given.
    """
    return _record_whole(graph, profile, path, plans, measured, "screened", only_saved=False)


def measure_partitions(
    graph: Graph,
    profile: Profile,
    path: Path | None,
    outcome: SearchOutcome,
    progress: Progress | None = None,
    budget_s: float | None = None,
) -> ProfileReport:
    """Time whole what :func:`worth_measuring` names and ``profile`` lacks; save to ``path``.

    Stops once ``budget_s`` seconds are spent (None: no bound). An interrupt propagates
    once the partitions timed are saved, noting the rows kept.
    """
    specs = list(dict.fromkeys(partition_specs(worth_measuring(outcome))))
    profiler = Profiler(profile, discover(), path)
    try:
        return profiler.profile_partitions(graph, specs, budget_s, progress=progress)
    except KeyboardInterrupt as interrupt:
        note_profile_kept(interrupt, profile, path)
        raise


def price_measured(graph: Graph, profile: Profile, costs: Costs, outcome: SearchOutcome) -> int:
    """Price every candidate again with the partitions ``profile`` measured whole.

    Updates ``costs.measured``, each candidate's simulation and the outcome's pick; returns
    how many partitions had a measurement.
    """
    specs = list(dict.fromkeys(partition_specs(worth_measuring(outcome))))
    found = measured_partitions(profile, graph, specs)
    costs.measured.update(found)
    reprice(outcome, costs)
    return len(found)


def record_raced(
    graph: Graph,
    profile: Profile,
    path: Path | None,
    candidates: Mapping[str, Candidate],
    measured: Mapping[str, Measured],
) -> int:
    """Replace the row of each one-partition plan's partition by the race's timing; the count.

    A one-partition plan runs its partition bare, compiled alone as the measure stage
    compiles it, so the race times the very row the measure stage took: later, and in
    interleaved rounds that settle after other runners, as ``bench`` times. Its timed runs
    replace the row, complete (as many passes as the profile's profiler asks for), so that a
    row taken while the machine was busy, or in a steadier state than a user's loop
    sees, does not mislead the next tune of the same subgraph. Saved to ``path`` when
    given (merged under its lock, as every profile save is).
    """
    plans = {name: candidate.plan for name, candidate in candidates.items()}
    return _record_whole(graph, profile, path, plans, measured, "raced", only_saved=True)


def _record_whole(
    graph: Graph,
    profile: Profile,
    path: Path | None,
    plans: Mapping[str, Plan],
    measured: Mapping[str, Measured],
    how: str,
    only_saved: bool,
) -> int:
    """Record each one-partition plan's timing in ``measured`` as its partition's row.

    Complete (as many passes as the profile's profiler asks for) when timed in as many
    rounds (a one-run timing is one pass: measured, not complete; it never replaces a row
    of more passes), labelled ``N ops <how>``;
    with ``only_saved``, only where the profile has that row already; never where it marks
    the partition unsupported. Stamps the speed and saves to ``path`` when anything was
    recorded. Returns how many rows were.
    """
    passes = profile.passes_asked()
    recorded = 0
    for name, result in measured.items():
        plan = plans.get(name)
        if plan is None or len(plan.partitions) != 1 or not result.latencies:
            continue
        (spec,) = plan_partition_keys(plan)
        nodes = [graph.node(node) for node in spec.names]
        key, target = partition_key(graph, nodes, spec.alone, spec.precisions), str(spec.target)
        if (only_saved and not profile.has(RowKind.PARTITION, target, key)) or profile.has(
            RowKind.UNSUPPORTED, target, key
        ):
            continue
        row = replace(result.summary(), passes=min(passes, len(result.samples)))
        held = profile.measurement(RowKind.PARTITION, target, key)
        if held is not None and held.passes > row.passes:
            continue  # a timing of fewer passes never replaces one of more
        profile.record(RowKind.PARTITION, target, key, row, f"{len(nodes)} ops {how}")
        recorded += 1
    if recorded:
        stamp(profile)  # the speed these timings were taken at
    if recorded and path is not None:
        profile.save(path)
    return recorded
