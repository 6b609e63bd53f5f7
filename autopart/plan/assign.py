"""Assignments written by hand: ``SELECTOR=TARGET`` rules with an explicit fallback target."""

from __future__ import annotations

from collections.abc import Sequence

from autopart.errors import AutopartError
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.plan.build import build_plan_for
from autopart.plan.schema import Plan
from autopart.plan.selectors import Selector
from autopart.targets.devices import Machine
from autopart.targets.resolve import resolve


def parse_rule(rule: str) -> tuple[Selector, VirtualDevice]:
    """Split ``SELECTOR=TARGET`` (the target is everything after the last ``=``)."""
    selector, sep, target = rule.rpartition("=")
    if not sep or not selector or not target:
        raise AutopartError(
            f"malformed assignment {rule!r}: expected SELECTOR=TARGET, e.g. Conv=cpu@numpy"
        )
    return Selector(selector.strip()), VirtualDevice.parse(target.strip())


def assign_by_rules(
    graph: Graph,
    rules: Sequence[str],
    fallback: VirtualDevice | str,
    machine: Machine | None = None,
) -> tuple[dict[str, VirtualDevice], list[str]]:
    """Every node's target from ``rules`` (later rules win), else ``fallback``.

    A node whose assigned codegen does not support it falls back too; the returned notes
    say which. Every target must exist on ``machine``, but those on another host
    (``host1:cpu@openvino``), which that host checks when it compiles its part.
    """
    fallback_target = resolve(fallback, machine)
    chosen: dict[str, VirtualDevice] = {}
    for rule in rules:
        selector, target = parse_rule(rule)
        if target.host is None:
            resolve(target, machine)
        for node in selector.select(graph):
            chosen[node.name] = target
    notes: list[str] = []
    assignment: dict[str, VirtualDevice] = {}
    unsupported: dict[str, list[str]] = {}
    for node in graph.nodes:
        target = chosen.get(node.name)
        remote = target is not None and target.host is not None
        if target is not None and not remote and not resolve(target, machine).supports(node, graph):
            unsupported.setdefault(f"{node.op_type} on {target}", []).append(node.name)
            target = None
        assignment[node.name] = target or fallback_target.target
    for what, names in unsupported.items():
        notes.append(f"{len(names)} node(s) fell back to {fallback_target}: {what} is unsupported")
    fallback_target.codegen.check_supported(
        graph, [n for n in graph.nodes if assignment[n.name] == fallback_target.target]
    )
    return assignment, notes


def plan_from_rules(
    graph: Graph,
    rules: Sequence[str],
    fallback: VirtualDevice | str,
    source: str,
    machine: Machine | None = None,
) -> Plan:
    """Build a runnable plan from ``SELECTOR=TARGET`` rules and a fallback target."""
    assignment, notes = assign_by_rules(graph, rules, fallback, machine)
    fallback_target = VirtualDevice.parse(fallback) if isinstance(fallback, str) else fallback
    return build_plan_for(graph, assignment, fallback_target, source, notes)
