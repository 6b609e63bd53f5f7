"""A tune's profile stage: the screen, then the full profile of the targets it kept.

Unless ``--thorough`` (or the objective, constraints or a given profile rule it out, see
:func:`~autopart.tuning.screen.screens`), the targets are screened first; the full profile
then measures only the targets the screen kept, within what the tune's
:class:`~autopart.tuning.clock.Clock` leaves after a reserve for the race. After a screen
that priced the targets (it found an incumbent), every node has at least its first pass on
every kept target, so a profile cut short by the budget still prices every node; otherwise
the full profile is not bounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autopart.costmodel.measurements import RowKind
from autopart.host_memory import release_freed_memory
from autopart.ir.graph import Graph, Node
from autopart.ir.signature import op_signature
from autopart.loader import ModelLike
from autopart.profile import Profile, ProfileReport
from autopart.progress import StageProgress
from autopart.search.constraints import apply
from autopart.targets.registry import forget_compiled
from autopart.tuning.clock import Clock, race_reserve
from autopart.tuning.locate import Located
from autopart.tuning.options import TuneOptions
from autopart.tuning.partitions import record_screened
from autopart.tuning.profile_model import profile_model
from autopart.tuning.screen import Screening, screen_targets, screens
from autopart.tuning.single_plans import support_costs

UNSCREENED_RESERVE = 0.25  # of the budget kept for the race when no screen timed anything
PROFILE_SHARE = 0.5  # of what a budget leaves before the race, for the full profile


@dataclass
class Profiled:
    """The profile a tune plans from, and how it was taken.

    ``report`` and ``path`` are the full profile's (None: a given profile, nothing measured
    here); ``targets`` are those searched (the screen's kept ones); ``reserve_s`` is the
    time kept for the race (:func:`~autopart.tuning.clock.race_reserve`).
    """

    profile: Profile
    report: ProfileReport | None
    path: Path | None
    targets: list[str]
    screening: Screening | None
    reserve_s: float


def profile_stage(
    model: ModelLike,
    located: Located,
    options: TuneOptions,
    clock: Clock,
    progress: StageProgress | None = None,
) -> Profiled:
    """Screen (where :func:`screens`), then profile the targets kept, within ``clock``.

    The constraints are checked first, against which targets run which nodes
    (:func:`~autopart.search.constraints.apply`): a pin, forbid, fallback or memory cap
    that cannot hold raises its :class:`~autopart.search.constraints.ConstraintError`
    before the first stage, not after the profile.

    A profile cut short by the budget is noted in ``clock.cut``.
    """
    graph, targets = located.graph, list(located.targets)
    unscreened = UNSCREENED_RESERVE * (clock.budget_s or 0.0)
    if located.given is not None:
        return Profiled(located.given, None, None, targets, None, unscreened)
    constraints = options.search.constraints
    if constraints is not None and constraints.imposes_anything:  # a bad pin fails first
        if progress is not None:  # the first ask probes the libraries (int8 agreement: 9 s)
            progress("targets", 0, 0, f"which nodes each of {len(targets)} targets runs")
        apply(support_costs(graph, targets), constraints)
    screening = None
    if screens(options, targets):
        screening = screen_targets(
            model, graph, targets, options, clock, progress, located.judge.screen()
        )
        targets = screening.kept
        release_freed_memory()  # the whole models' runners
    reserve = unscreened if screening is None else race_reserve(screening.timing_s)
    report, profile, path = profile_model(
        graph,
        targets,
        options.profiles_dir,
        budget_s=None if screening is None or not screening.priced else _share(clock, reserve),
        progress=None if progress is None else lambda d, t, s: progress("profile", d, t, s),
    )
    if report.new:  # the op models' runners and compiled models, where any were built
        forget_compiled()
        release_freed_memory()
    if screening is not None:  # the plans timed whole price as measured
        record_screened(graph, profile, path, screening.plans, screening.whole)
        targets = _covering(graph, profile, targets, screening)
    if report.missing:
        clock.cut.append(
            f"the full profile ({report.missing} of {report.missing + report.new} "
            "measurements left; their ops are priced from the passes taken)"
        )
    return Profiled(profile, report, path, targets, screening, reserve)


def _covering(graph: Graph, profile: Profile, kept: list[str], screening: Screening) -> list[str]:
    """``kept``, and the dropped targets that run a node none of ``kept`` runs, in order.

    A codegen's support probe may claim a node that compiling it then rejects (the profile
    marks it unsupported): a node the screen saw covered may be left with no kept target.
    Each such node brings back the first dropped target whose profile prices it, with a
    note in ``screening.notes``. Raises nothing: a node no target runs is the search's error.
    """
    names = list(kept)
    for node in graph.nodes:
        if any(_prices(profile, graph, node, target) for target in names):
            continue
        found = next(
            (t for t in screening.dropped if t not in names and _prices(profile, graph, node, t)),
            None,
        )
        if found is not None:
            names.append(found)
            screening.notes.append(
                f"screen: {found} kept after all: it runs {node.name} ({node.op_type}), which "
                "the targets kept reject compiled"
            )
    return [t for t in screening.targets if t in names]


def _prices(profile: Profile, graph: Graph, node: Node, target: str) -> bool:
    """Whether ``profile`` has a price for ``node`` on ``target`` (an op row, not unsupported)."""
    signature = op_signature(node, graph)
    return profile.has(RowKind.OP, target, signature) and not profile.has(
        RowKind.UNSUPPORTED, target, signature
    )


def _share(clock: Clock, reserve_s: float) -> float | None:
    """The full profile's share of what ``clock`` leaves after ``reserve_s``.

    :data:`PROFILE_SHARE` of it: the rest goes to timing the candidates' partitions whole
    (the measure stage), which prices the plans the race will run better than more passes
    of ops do.
    """
    left = clock.until(reserve_s)
    return None if left is None else PROFILE_SHARE * left
