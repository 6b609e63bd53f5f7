"""User constraints on a search: pins, forbids, a fallback target and per-device memory caps.

Pins and forbids are written onto the graph's nodes before the search
(:func:`write_constraints`): a pin sets the node's virtual device, a forbid adds its pattern
to the node's ``forbidden`` set. :func:`restrict` then reads the nodes and returns costs whose
``node_cost`` keeps only the targets they allow, so every search that picks from
``costs.supported`` obeys them by construction; :func:`apply` does both. A node's virtual
device that is one of ``costs.targets`` allows exactly that target; a partial one (e.g. only
a device, ``opencl:0``) allows every target it matches. So a graph planned before (every
node carrying its target) plans again to the same targets. Memory caps cannot be expressed
on nodes; the ILP takes them as ``solve_ilp(costs, memory=constraints.memory)`` and
:func:`apply` only refuses caps that the weights of forced nodes alone exceed.

Target patterns of forbids: a device (``opencl:0``) forbids every target on it; a device and
codegen (``opencl:0@opencl``) that codegen on the device and all its units; a full target
(``cpu/1@onnxruntime``) that target at every precision, and one that names a precision
(``cpu@openvino:bf16``) only that precision: ``--forbid 'Softmax=cpu@openvino:bf16'`` keeps
the softmaxes out of bf16. A part left out matches anything. A pin to a full target
(``cpu@openvino``) is exact, so it also keeps the node in f32.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from autopart.costmodel.costs import Costs
from autopart.errors import AutopartError
from autopart.ir.graph import Graph, Node
from autopart.ir.target import VirtualDevice
from autopart.plan.assign import parse_rule
from autopart.plan.selectors import Selector

_BYTES = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>(?:[KMGT]i?)?B?)\s*$", re.IGNORECASE)
_SCALE = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


class ConstraintError(AutopartError):
    """Constraints are malformed or cannot all hold; the message names the conflict."""


@dataclass
class Constraints:
    """What a search must respect.

    ``pins`` are (selector, target) pairs: the selected nodes run exactly on that target.
    ``forbids`` are (selector, target pattern) pairs: the selected nodes never run on a
    matching target. ``fallback`` is the plan's fallback target (None: the search chooses).
    ``memory`` maps a device to its capacity in bytes.
    """

    pins: list[tuple[str, str]] = field(default_factory=list)
    forbids: list[tuple[str, str]] = field(default_factory=list)
    fallback: str | None = None
    memory: dict[str, int] = field(default_factory=dict)

    @property
    def imposes_anything(self) -> bool:
        """Whether any pin, forbid, fallback or memory cap is set (the CLI always builds one)."""
        return bool(self.pins or self.forbids or self.fallback is not None or self.memory)

    @classmethod
    def from_cli(
        cls,
        pins: Iterable[str] = (),
        forbids: Iterable[str] = (),
        memory: Iterable[str] = (),
        fallback: str | None = None,
    ) -> Constraints:
        """Constraints from CLI strings: ``SELECTOR=TARGET`` pins and forbids, ``DEVICE=SIZE``."""
        return cls(
            pins=[parse_selector_rule(text) for text in pins],
            forbids=[parse_selector_rule(text) for text in forbids],
            fallback=fallback,
            memory=dict(parse_memory(text) for text in memory),
        )


def parse_selector_rule(text: str) -> tuple[str, str]:
    """Split ``SELECTOR=TARGET`` into (selector text, target text); both must be well formed."""
    selector, target = parse_rule(text)
    return selector.text, str(target)


def parse_bytes(text: str) -> int:
    """Bytes in a size such as ``512MB``, ``1.5GiB``, ``64K`` or ``1000``.

    K, M, G and T are powers of 1000; Ki, Mi, Gi and Ti powers of 1024.
    """
    match = _BYTES.match(text)
    if not match:
        raise ConstraintError(f"malformed size {text!r}: expected e.g. 512MB, 2GiB or 1000000")
    unit = match["unit"].upper().removesuffix("B")
    scale = 1024 ** " KMGT".index(unit[0]) if unit.endswith("I") else _SCALE[unit]
    return round(float(match["number"]) * scale)


def parse_memory(text: str) -> tuple[str, int]:
    """Split ``DEVICE=SIZE`` (e.g. ``opencl:0=512MB``) into (device, bytes)."""
    device, sep, size = text.rpartition("=")
    if not sep or not device.strip():
        raise ConstraintError(f"malformed memory cap {text!r}: expected DEVICE=SIZE, e.g. cpu=2GB")
    parsed = _target(device.strip(), f"memory cap {text!r}")
    if parsed.unit is not None or parsed.codegen is not None or parsed.device is None:
        raise ConstraintError(f"memory cap {text!r} must name a device, e.g. opencl:0=512MB")
    return parsed.device, parse_bytes(size)


def matches(pattern: VirtualDevice, target: VirtualDevice) -> bool:
    """Whether ``target`` matches ``pattern`` (the parts ``pattern`` leaves out match anything)."""
    return (
        (pattern.device is None or pattern.device == target.device)
        and (pattern.unit is None or pattern.unit == target.unit)
        and (pattern.codegen is None or pattern.codegen == target.codegen)
        and (pattern.precision is None or pattern.precision == target.precision)
    )


def apply(costs: Costs, constraints: Constraints) -> Costs:
    """Costs whose graph carries ``constraints``, each node keeping only the targets allowed.

    :func:`write_constraints`, then :func:`restrict`; virtual devices already on the nodes
    (a graph planned before) count as pins. Raises :class:`ConstraintError` naming the
    conflict when a pin names an unknown target or one that cannot run a selected node, two
    pins disagree on a node, a pin disagrees with the node's virtual device, a pin and a
    forbid hit the same node and target, a node is left with no target, the fallback or a
    capped device is unknown, or the weights of nodes forced onto a device exceed its memory
    cap. Selectors matching no node raise :class:`autopart.plan.selectors.SelectorError`.
    """
    marked = dataclasses.replace(costs, graph=write_constraints(costs, constraints))
    restricted = restrict(marked)
    if constraints.fallback is not None:
        fallback = _target(constraints.fallback, f"fallback {constraints.fallback!r}")
        if fallback not in costs.targets:
            known = ", ".join(str(t) for t in costs.targets)
            raise ConstraintError(f"fallback {fallback} is not a known target; targets: {known}")
    _check_memory(restricted, constraints.memory)
    return restricted


def keep_precisions(costs: Costs, precisions: Collection[str] | None) -> Costs:
    """``costs`` without the targets that compute in a precision not in ``precisions``.

    None keeps every target. Raises :class:`ConstraintError` when no target is left; a node
    left with none is named by :func:`restrict`.
    """
    if precisions is None or all(t.computes_in in precisions for t in costs.targets):
        return costs
    kept = [t for t in costs.targets if t.computes_in in precisions]
    if not kept:
        known = ", ".join(str(t) for t in costs.targets)
        raise ConstraintError(f"no target computes in {'+'.join(precisions)}; targets: {known}")
    return dataclasses.replace(
        costs,
        targets=kept,
        node_cost={
            name: {t: seconds for t, seconds in entry.items() if t.computes_in in precisions}
            for name, entry in costs.node_cost.items()
        },
    )


def allowed_targets(costs: Costs, node: Node) -> list[VirtualDevice]:
    """The targets of ``costs.supported(node)`` that the node's virtual device and forbids allow.

    A virtual device that is one of ``costs.targets`` allows exactly itself; a partial one
    every target it matches; an unset one every target.
    """
    pin = node.virtual_device
    supported = costs.supported(node)
    if pin in costs.targets:
        supported = [pin] if pin in supported else []
    elif pin.is_set:
        supported = [t for t in supported if matches(pin, t)]
    return [t for t in supported if not any(matches(p, t) for p in node.forbidden)]


def restrict(costs: Costs) -> Costs:
    """A copy of ``costs`` in which each node keeps only :func:`allowed_targets`.

    Raises :class:`ConstraintError` naming a node that is left with no target.
    """
    allowed = {node.name: allowed_targets(costs, node) for node in costs.graph.nodes}
    for node in costs.graph.nodes:
        if not allowed[node.name]:
            raise ConstraintError(
                f"{node.op_type} node {node.name!r} is left with no target "
                f"(supported: {', '.join(map(str, costs.supported(node))) or 'none'})"
            )
    return dataclasses.replace(
        costs,
        node_cost={
            name: {t: entry[t] for t in allowed.get(name, entry)}
            for name, entry in costs.node_cost.items()
        },
    )


def write_constraints(costs: Costs, constraints: Constraints) -> Graph:
    """A copy of ``costs.graph`` carrying ``constraints`` (see :func:`apply` for the errors).

    Each pin becomes its nodes' virtual device; a node already placed keeps its virtual
    device if the pin allows it. Each forbid's pattern joins its nodes' ``forbidden`` set.
    """
    graph = costs.graph.copy()
    pinned = _write_pins(costs, graph, constraints.pins)
    known = ", ".join(str(t) for t in costs.targets)
    for selector_text, pattern_text in constraints.forbids:
        rule = f"{selector_text}={pattern_text}"
        pattern = _target(pattern_text, f"forbid {rule}")
        if not any(matches(pattern, target) for target in costs.targets):
            raise ConstraintError(f"forbid {rule}: {pattern} matches no target; targets: {known}")
        for node in Selector(selector_text).select(graph):
            if node.name in pinned:
                allowed = allowed_targets(costs, node)
                if allowed and all(matches(pattern, t) for t in allowed):
                    raise ConstraintError(
                        f"node {node.name!r} is pinned by {pinned[node.name]} "
                        f"and forbidden there by {rule}"
                    )
            node.forbidden = node.forbidden | {pattern}
    return graph


def _write_pins(costs: Costs, graph: Graph, pins: list[tuple[str, str]]) -> dict[str, str]:
    """Set each pin on its nodes' virtual devices; the rule that pinned each node, by name."""
    known = ", ".join(str(t) for t in costs.targets)
    pinned: dict[str, tuple[VirtualDevice, str]] = {}
    for selector_text, target_text in pins:
        rule = f"{selector_text}={target_text}"
        target = _target(target_text, f"pin {rule}")
        if not any(matches(target, t) for t in costs.targets):
            raise ConstraintError(f"pin {rule}: unknown target {target}; targets here: {known}")
        for node in Selector(selector_text).select(graph):
            earlier = pinned.get(node.name)
            if earlier is not None and earlier[0] != target:
                raise ConstraintError(
                    f"node {node.name!r} has two pins: {earlier[1]} and {rule} disagree"
                )
            placed = node.virtual_device
            if placed.is_set and placed != target and not matches(target, placed):
                raise ConstraintError(f"pin {rule}: node {node.name!r} is placed on {placed}")
            node.virtual_device = placed if placed.is_set else target
            if not allowed_targets(costs, node):
                raise ConstraintError(
                    f"pin {rule}: {target} cannot run {node.op_type} node {node.name!r}"
                )
            pinned[node.name] = (target, rule)
    return {name: rule for name, (_, rule) in pinned.items()}


def forced_weight_bytes(costs: Costs) -> dict[str, int]:
    """Per device, bytes of the constants read by nodes whose every allowed target is there."""
    graph = costs.graph
    forced: dict[str, set[str]] = {}
    for node in graph.nodes:
        devices = {str(t.device) for t in costs.supported(node)}
        if len(devices) == 1:
            constants = {n for n in node.present_inputs if graph.value(n).is_const}
            forced.setdefault(devices.pop(), set()).update(constants)
    return {d: sum(graph.value(n).nbytes for n in names) for d, names in forced.items()}


def _check_memory(costs: Costs, memory: dict[str, int]) -> None:
    devices = costs.devices()
    forced = forced_weight_bytes(costs)
    for device, capacity in memory.items():
        if device not in devices:
            raise ConstraintError(
                f"memory cap on unknown device {device!r}; devices: {', '.join(devices)}"
            )
        if forced.get(device, 0) > capacity:
            raise ConstraintError(
                f"memory cap {device}={capacity} B is below the {forced[device]} B of weights "
                f"of the nodes that can only run there"
            )


def _target(text: str, what: str) -> VirtualDevice:
    try:
        return VirtualDevice.parse(text)
    except AutopartError as error:
        raise ConstraintError(f"{what}: {error}") from None
