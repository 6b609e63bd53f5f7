"""What the screen measured, and which targets it keeps: what each could save.

:func:`choose_targets` fills in a :class:`Screening`'s kept and dropped targets from its
whole timings and the op pass's costs (:mod:`autopart.tuning.screen` runs the screen).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from autopart.costmodel.costs import Costs
from autopart.ir.target import VirtualDevice
from autopart.plan.schema import Plan
from autopart.search.baselines import Assignment, more_exact
from autopart.search.candidates import Candidate, candidate_name
from autopart.tuning.settings import SCREEN
from autopart.tuning.single_plans import single_name, whole_device
from autopart.tuning.verify import Measured
from autopart.tuning.whole_timing import stands_for


@dataclass
class Screening:
    """What the screen measured and which targets it keeps for the full profile.

    ``whole`` holds each runner timed whole (``single:<target>`` plans and peers, by name)
    with its error; ``incumbent`` names the quickest within ``tolerance`` (None: none was,
    and every target is kept). ``kept`` are the targets profiled in full, in the order
    asked; ``could_save`` is each target's bound in seconds (:func:`could_save`);
    ``dropped`` the targets left out, of which ``unpriced`` are those the budget left no
    time to price; ``priced`` says the op pass ran (only once there is an incumbent).
    ``elapsed_s`` is the screen's time, ``timing_s`` the part spent timing whole models,
    ``plans`` the single-target plans it timed, by name. ``too_slow``: each codegen that
    did not compile the whole model within its deadline, with the deadline (s); its targets
    are dropped and its peers not raced; ``compiled``: the codegens that compiled a whole
    model (and ran it) here, the reference's among them (its run computed the reference's
    outputs). ``notes`` say what the screen did, one line each.
    ``tools`` says it timed the peers that run a tool first (int8 quantisers): only on the
    user's samples, for int8 on random inputs says nothing of the task.
    """

    targets: list[str]
    kept: list[str]
    whole: dict[str, Measured] = field(default_factory=dict)
    incumbent: str | None = None
    tolerance: float = math.inf
    could_save: dict[str, float] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    timing_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    plans: dict[str, Plan] = field(default_factory=dict)
    unpriced: list[str] = field(default_factory=list)
    priced: bool = False
    too_slow: dict[str, float] = field(default_factory=dict)
    compiled: set[str] = field(default_factory=set)
    tools: bool = False

    def wrong_plans(self, candidates: Mapping[str, Candidate]) -> set[str]:
        """The one-target candidates the screen timed over the tolerance, or whose device did.

        A unit computes what its device computes at the same codegen and precision: the
        error of the device's plan of the same kind is the unit plan's too. Never another
        kind's: a single plan sends what its target cannot run to the fallback, a ``whole:``
        plan does not (a reading-order transformer's bf16 single was 2.08 off, whole 0.073).
        """
        found = set()
        for name, candidate in candidates.items():
            target = candidate.target
            if not candidate.kind.one_target or target is None:
                continue
            device = candidate_name(candidate.kind, dataclasses.replace(target, unit=None))
            if any(t in self.whole and not self.whole[t].correct for t in (name, device)):
                found.add(name)
        return found


def could_save(
    costs: Costs,
    assignment: Mapping[str, VirtualDevice],
    incumbent: Mapping[str, float],
    factor: float,
    target: VirtualDevice,
) -> float:
    """At most what ``target`` could save against the incumbent, in seconds.

    ``incumbent`` is each node's cost in the incumbent (scaled, see :func:`scaled_costs`);
    ``assignment`` is ``target``'s single-target plan and ``factor`` its scale. The sum,
    over the nodes that plan runs on ``target``, of what each costs less there, less one
    launch of a partition on ``target`` (``costs.launch``, 0 where absent): a plan that uses
    ``target`` at all enters it at least once. Never below 0.
    """
    gained = sum(
        max(0.0, incumbent[name] - costs.node_cost[name][target] * factor)
        for name, where in assignment.items()
        if where == target
    )
    return max(0.0, gained - costs.launch.get(target, 0.0))


def scaled_costs(
    costs: Costs, assignment: Mapping[str, VirtualDevice], whole_s: float
) -> tuple[dict[str, float], float]:
    """Each node's cost under ``assignment``, scaled so that they sum to ``whole_s``; the scale.

    The scale is 1 where the costs sum to nothing.
    """
    raw = {name: costs.node_cost[name][where] for name, where in assignment.items()}
    total = sum(raw.values())
    factor = whole_s / total if total > 0 else 1.0
    return {name: seconds * factor for name, seconds in raw.items()}, factor


def choose_targets(
    screening: Screening,
    costs: Costs,
    assignments: Mapping[VirtualDevice, Assignment],
    fallback: VirtualDevice,
    protect: Collection[VirtualDevice] = (),
) -> None:
    """Fill in ``screening``'s ``could_save``, ``kept`` and ``dropped`` against its incumbent.

    ``assignments`` are the single-target plans by target, ``screening.whole`` their
    measurements (``single:<target>``) and the peers'. Kept are: the targets the incumbent's
    plan runs on, ``fallback``, every target that :func:`could_save` at least
    :attr:`~autopart.tuning.settings.ScreenSettings.min_gain` of the incumbent's time (a unit
    whose plan was not timed is scaled as its whole device at the same codegen and
    precision, the library's fusion being the same; any other untimed target as the most
    favourably scaled one), and the targets
    each kept target's own plan runs the rest on; and those in ``protect`` (the plans the
    racing peers stand for: :func:`~autopart.tuning.screen.racing_peers_plans`). A kept
    target in a reduced precision whose device's plan was timed beyond the tolerance keeps
    the same library's more exact precisions too: it can only be used mixed with them,
    which one partition of that library runs with no copy (OpenVINO's f32 beside its
    bf16), whatever the exact precision could save alone. An incumbent that stands for
    no plan here (a peer with no single-target equivalent) keeps every target.
    """
    assert screening.incumbent is not None
    incumbent_target = stands_for(screening.incumbent, assignments)
    if incumbent_target is None:  # a peer with no single-target plan here: keep them all
        return
    whole = screening.whole
    base_s = whole[screening.incumbent].median_s
    incumbent, _ = scaled_costs(costs, assignments[incumbent_target], base_s)
    factors = {
        target: scaled_costs(costs, assignment, whole[name].median_s)[1]
        for target, assignment in assignments.items()
        if (name := single_name(target)) in whole
    }
    optimistic = min(factors.values(), default=1.0)
    protected = {fallback, *assignments[incumbent_target].values(), *protect}
    for target, assignment in assignments.items():
        factor = factors.get(target, factors.get(whole_device(target), optimistic))
        screening.could_save[str(target)] = could_save(costs, assignment, incumbent, factor, target)
    chosen = {
        t for t in costs.targets
        if t in protected or screening.could_save.get(str(t), math.inf) >= SCREEN.min_gain * base_s
    }  # fmt: skip
    for target in list(chosen):  # and what a kept target's own plan runs the rest on
        chosen.update(assignments.get(target, {}).values())
        if beyond_tolerance(whole, target):  # usable only mixed with a more exact one
            chosen.update(more_exact(target, costs.targets))
    screening.kept = [str(t) for t in costs.targets if t in chosen]
    screening.dropped = [t for t in screening.targets if t not in screening.kept]


def device_timing(whole: Mapping[str, Measured], target: VirtualDevice) -> Measured | None:
    """``target``'s whole device's single plan as timed whole (None: not timed)."""
    return whole.get(single_name(whole_device(target) or target))


def beyond_tolerance(whole: Mapping[str, Measured], target: VirtualDevice) -> Measured | None:
    """``target``'s whole device's single plan where it was timed beyond the tolerance."""
    timed = device_timing(whole, target)
    return timed if timed is not None and not timed.correct else None
