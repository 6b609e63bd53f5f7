"""Resolving target specs (``device[/unit]@codegen[:precision]``) against the machine's devices."""

from __future__ import annotations

import functools
from collections.abc import Collection
from dataclasses import dataclass

from autopart.errors import TargetError
from autopart.ir.graph import Graph, Node
from autopart.ir.target import HOST_DEVICE, PRECISIONS, VirtualDevice
from autopart.targets.codegen import Codegen, Placement
from autopart.targets.devices import Machine, discover
from autopart.targets.registry import codegen_names, get_codegen, reference_codegen


@dataclass(frozen=True)
class ResolvedTarget:
    """A fully specified target bound to a real device, unit and codegen instance."""

    target: VirtualDevice
    placement: Placement
    codegen: Codegen

    def __str__(self) -> str:
        return str(self.target)

    def supports(self, node: Node, graph: Graph) -> bool:
        """Whether this target runs ``node`` at its precision (:meth:`Codegen.supports_at`)."""
        return self.codegen.supports_at(node, graph, self.target.precision)


def available_targets(
    machine: Machine | None = None, precisions: Collection[str] | None = None
) -> list[VirtualDevice]:
    """Every target that can run here, whole devices first, each precision after f32.

    A target is a (device, unit, codegen, precision) that the codegen offers on this
    machine (:meth:`~autopart.targets.codegen.Codegen.precisions`); ``precisions`` keeps
    only those named (None: every one offered).
    """
    machine = machine or discover()
    targets = []
    for device in machine.devices.values():
        for name in codegen_names():
            codegen = get_codegen(name)
            if codegen.device_kind != device.kind or not codegen.available():
                continue
            offered = [
                p for p in codegen.precisions() if precisions is None or p in set(precisions)
            ]
            units = [None, *(u.index for u in device.units)] if codegen.uses_units else [None]
            for precision in offered:
                targets.extend(VirtualDevice(device.name, u, name, precision) for u in units)
    return targets


def resolve(target: VirtualDevice | str, machine: Machine | None = None) -> ResolvedTarget:
    """Bind ``target`` to this machine; errors name what is absent and list what exists."""
    machine = machine or discover()
    spec = VirtualDevice.parse(target) if isinstance(target, str) else target
    if spec.device is None or spec.codegen is None:
        raise TargetError(f"target {spec} must name a device and a codegen, e.g. cpu@numpy")
    if spec.host is not None:
        raise TargetError(
            f"target {spec} is on host {spec.host}, not this machine: run it with --cluster"
        )
    device = machine.device(spec.device)
    device.unit(spec.unit)
    if spec.codegen not in codegen_names():
        raise TargetError(
            f"unknown codegen {spec.codegen!r} in target {spec}; "
            f"codegens: {', '.join(codegen_names())}"
        )
    codegen = get_codegen(spec.codegen)
    usable = ", ".join(str(t) for t in available_targets(machine) if t.unit is None)
    if codegen.device_kind != device.kind:
        raise TargetError(
            f"codegen {codegen.name} runs on {codegen.device_kind} devices, not on {device.name}; "
            f"targets: {usable}"
        )
    if not codegen.available():
        raise TargetError(f"codegen {codegen.name} is not installed here; targets: {usable}")
    if spec.unit is not None and not codegen.uses_units:
        raise TargetError(
            f"codegen {codegen.name} cannot be pinned to a unit; use {device.name}@{codegen.name}"
        )
    if spec.computes_in not in codegen.precisions():
        raise TargetError(
            f"codegen {codegen.name} cannot compute in {spec.computes_in} on this machine "
            f"(target {spec}); it offers {', '.join(codegen.precisions())}"
        )
    return ResolvedTarget(spec, Placement(device, spec.unit, precision=spec.precision), codegen)


def reference_target() -> VirtualDevice:
    """The reference codegen on the whole host, in f32: the default fallback target."""
    return VirtualDevice(HOST_DEVICE, None, reference_codegen().name)


def machine_precisions(machine: Machine | None = None) -> list[str]:
    """Every precision some target of this machine computes in, f32 first."""
    found = {target.computes_in for target in available_targets(machine)}
    return [precision for precision in PRECISIONS if precision in found]


def codegen_precisions() -> dict[str, tuple[str, ...]]:
    """The precisions each installed codegen offers here, by codegen name."""
    offered = {}
    for name in codegen_names():
        codegen = get_codegen(name)
        if codegen.available():
            offered[name] = codegen.precisions()
    return offered


@functools.cache
def compile_target(target: VirtualDevice) -> VirtualDevice:
    """The target a partition holding ``target``'s nodes is compiled for.

    ``target`` itself, or, when its codegen mixes precisions in one subgraph
    (:attr:`~autopart.targets.codegen.Codegen.mixes_precisions`), ``target`` at f32: its
    nodes of every precision may share one partition. An unknown codegen mixes nothing.
    """
    if target.precision is None or target.codegen not in codegen_names():
        return target
    mixes = get_codegen(target.codegen).mixes_precisions
    return target.at_precision(None) if mixes else target


def belongs(node_target: VirtualDevice, partition_target: VirtualDevice) -> bool:
    """Whether a node on ``node_target`` may sit in a partition on ``partition_target``.

    Equal targets; or a partition at f32 on a codegen that mixes precisions, holding a node
    of that target at any precision.
    """
    if node_target == partition_target:
        return True
    return partition_target.precision is None and compile_target(node_target) == partition_target


def device_rows(machine: Machine) -> list[dict[str, str]]:
    """Each device of ``machine`` as ``autopart devices`` lists it, as text.

    Keys: ``device``, ``kind``, ``units`` (``cpu/0, cpu/1`` or ``-``), ``codegens`` (each
    with the precisions it offers there: ``openvino (f32+bf16+int8)``) and
    ``description``.
    """
    targets = available_targets(machine)
    rows = []
    for device in machine.devices.values():
        here = [t for t in targets if t.device == device.name]
        codegens = [
            f"{name} ({'+'.join(dict.fromkeys(t.computes_in for t in here if t.codegen == name))})"
            for name in dict.fromkeys(str(t.codegen) for t in here)
        ]
        facts = device.describe()
        rows.append(
            {
                "device": device.name,
                "kind": device.kind,
                "units": ", ".join(f"{device.name}/{u.index}" for u in device.units) or "-",
                "codegens": ", ".join(codegens),
                "description": str(facts.get("device") or facts.get("processor") or ""),
            }
        )
    return rows
