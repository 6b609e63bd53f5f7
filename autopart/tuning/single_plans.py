"""The screen's single-target plans: which target runs which node, the costly answers last.

A single-target plan runs every node its target takes there, the rest at the nearest more
exact precision of the same library, then on the fallback
(:func:`~autopart.search.baselines.single_target`). Which nodes a target takes is asked of
its codegen once per op signature (:func:`support_costs`). Most codegens answer at once;
one whose answer runs probe models
(:meth:`~autopart.targets.codegen.Codegen.support_probes`: OpenVINO's int8, 36 s for a
12,400-node stack and 7.5-10 s for resnet50 from cold) is asked only when due: when the
screen comes to time its plan whole, or when the op pass comes to price it. A budget that
runs out first never pays for the probes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from autopart.costmodel.costs import Costs
from autopart.ir.graph import Graph
from autopart.ir.signature import op_signature
from autopart.ir.target import HOST_DEVICE, VirtualDevice
from autopart.plan.build import build_plan_for
from autopart.plan.schema import Plan
from autopart.search.baselines import Assignment, BaselineError, default_fallback, single_target
from autopart.search.candidates import CandidateKind, candidate_name
from autopart.targets.devices import discover
from autopart.targets.registry import get_codegen
from autopart.targets.resolve import resolve


def support_costs(graph: Graph, targets: Sequence[str]) -> Costs:
    """Which of ``targets`` runs which node of ``graph``, as :class:`Costs` priced at 0.

    Only what a baseline's assignment needs (:func:`single_target`): each node's entry
    holds the targets that run it (:meth:`ResolvedTarget.supports`, asked once per
    signature), none yet with a price.
    """
    machine = discover()
    resolved = [resolve(target, machine) for target in targets]
    runs: dict[tuple[str, VirtualDevice], bool] = {}
    node_cost: dict[str, dict[VirtualDevice, float]] = {}
    for node in graph.nodes:
        signature = op_signature(node, graph)
        entry: dict[VirtualDevice, float] = {}
        for target in resolved:
            key = (signature, target.target)
            if key not in runs:
                runs[key] = target.supports(node, graph)
            if runs[key]:
                entry[target.target] = 0.0
        node_cost[node.name] = entry
    return Costs(graph, [r.target for r in resolved], node_cost)


def support_probes(target: str) -> bool:
    """Whether learning which nodes ``target`` runs runs probe models (see the module)."""
    parsed = VirtualDevice.parse(target)
    return parsed.codegen is not None and get_codegen(parsed.codegen).support_probes(
        parsed.precision
    )


def _may_fall_back(target: str) -> bool:
    """Whether ``target`` is a whole host device, as a fallback must be."""
    parsed = VirtualDevice.parse(target)
    return parsed.device == HOST_DEVICE and parsed.unit is None


def single_name(target: VirtualDevice) -> str:
    """The name of ``target``'s single-target plan."""
    return candidate_name(CandidateKind.SINGLE, target)


def whole_device(target: VirtualDevice) -> VirtualDevice | None:
    """The same codegen and precision on the whole of ``target``'s device (None: it is)."""
    return None if target.unit is None else dataclasses.replace(target, unit=None)


class SinglePlans:
    """Each target's single-target assignment, and the plans the screen times whole.

    ``assignments`` are those known so far, by target; ``plans`` the plans built so far,
    by name (:func:`single_name`), each when first asked for (:meth:`built`: a plan of a
    50,000-node model takes 1.5 s to build, and a budget may never time it): one per whole
    device (a unit's plan is not timed whole) and per distinct assignment (a target
    running nothing of its own repeats another's plan).
    ``deferred`` are the targets whose support is learnt only when due (:meth:`learn`).
    ``fallback`` is the host target that runs the most nodes; a deferred target runs a
    subset of what its library runs at a more exact precision, so never more. Where no
    target but deferred ones could be the fallback, nothing is deferred.
    """

    def __init__(self, graph: Graph, targets: Sequence[str], source: str) -> None:
        self.graph, self.source, self.order = graph, source, list(targets)
        self.deferred = [t for t in targets if support_probes(t)]
        if not any(_may_fall_back(t) for t in targets if t not in self.deferred):
            self.deferred = []  # the fallback is then chosen among them: learnt at once
        self.support = support_costs(graph, [t for t in targets if t not in self.deferred])
        self.fallback = default_fallback(self.support)
        self.assignments: dict[VirtualDevice, Assignment] = {}
        self.plans: dict[str, Plan] = {}
        self._built: set[tuple[str, ...]] = set()
        self._assign(self.support.targets)

    def due_later(self) -> list[VirtualDevice]:
        """The deferred whole devices (or units alone), whose plans :meth:`plan_of` builds."""
        parsed = [VirtualDevice.parse(t) for t in self.deferred]
        return [t for t in parsed if whole_device(t) not in parsed]

    def learn(self) -> None:
        """Learn which nodes the deferred targets run, and their assignments (once)."""
        if not self.deferred:
            return
        more = support_costs(self.graph, self.deferred)
        self.deferred = []
        known = {**{t: None for t in self.support.targets}, **{t: None for t in more.targets}}
        order = [t for t in (VirtualDevice.parse(name) for name in self.order) if t in known]
        node_cost = {
            name: {**entry, **more.node_cost[name]}
            for name, entry in self.support.node_cost.items()
        }
        self.support = Costs(self.graph, order, node_cost)
        self._assign(more.targets)

    def plan_of(self, target: VirtualDevice) -> Plan | None:
        """``target``'s single-target plan, learnt first (None: it repeats another's)."""
        self.learn()
        return self.built(target)

    def built(self, target: VirtualDevice) -> Plan | None:
        """``target``'s plan, built now if due and not yet (None: none is due, see the class).

        Learns nothing: a deferred target not learnt yet has no assignment, so no plan.
        """
        return self.plans.get(single_name(target)) or self._build(target)

    def due_now(self) -> list[VirtualDevice]:
        """The targets known now whose plans are due and not built yet, in the asked order."""
        return [
            target for target in self.assignments
            if single_name(target) not in self.plans and self._due(target)
        ]  # fmt: skip

    def _due(self, target: VirtualDevice) -> bool:
        """Whether ``target`` is due a plan: a whole device, or a unit whose device is not."""
        return target in self.assignments and whole_device(target) not in self.assignments

    def _assign(self, targets: Sequence[VirtualDevice]) -> None:
        """The assignments of ``targets`` (those no baseline can place are left out)."""
        for target in targets:
            try:
                self.assignments[target] = single_target(self.support, target, self.fallback)
            except BaselineError:
                continue

    def _build(self, target: VirtualDevice) -> Plan | None:
        """Build and keep ``target``'s plan where it is due one (see the class)."""
        if not self._due(target):
            return None
        assignment = self.assignments[target]
        key = tuple(str(assignment[node.name]) for node in self.graph.nodes)
        if key in self._built:
            return None
        self._built.add(key)
        plan = build_plan_for(self.graph, assignment, self.fallback, self.source)
        self.plans[single_name(target)] = plan
        return plan
