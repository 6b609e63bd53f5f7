"""Checking a plan against its model and, optionally, the machine that will run it."""

from __future__ import annotations

from autopart.errors import AutopartError
from autopart.ir.graph import Graph, Node
from autopart.ir.hashing import graph_hash
from autopart.ir.target import HOST_DEVICE, VirtualDevice
from autopart.plan.partition import Partition, PartitionCycleError, boundary, check_acyclic
from autopart.plan.schema import Plan, PlanError
from autopart.targets.codegen import Codegen
from autopart.targets.devices import Machine
from autopart.targets.resolve import belongs, resolve
from autopart.targets.shipped import runs_as_shipped


def validate_plan(plan: Plan, graph: Graph, machine: Machine | None = None) -> None:
    """Raise :class:`PlanError` unless ``plan`` is a consistent plan for ``graph``.

    Checks the model hash; that every node is assigned exactly once and sits in exactly one
    partition of its target; that partitions form no cycle; that every partition input is
    resident on the partition's device or copied there; that the order respects every
    dependency; and that no buffer is shared across devices. With ``machine``, every target
    must exist there and its codegen must support each of its nodes, or else run the model
    as shipped (a plan's only partition holding all of it:
    :func:`autopart.targets.shipped.runs_as_shipped`).
    """
    if plan.model.hash != graph_hash(graph):
        raise PlanError(
            f"plan is for model {plan.model.name!r} (hash {plan.model.hash[:12]}), "
            f"not this one ({graph.name!r}, hash {graph_hash(graph)[:12]})"
        )
    _check_assignment(plan, graph)
    partitions = _check_partitions(plan, graph)
    try:
        check_acyclic(graph, partitions)
    except PartitionCycleError as error:
        raise PlanError(f"plan refused: {error}") from None
    home = _check_copies(plan, graph)
    _check_order(plan)
    _check_storage(plan, home, graph)
    if machine is not None:
        _check_machine(plan, graph, machine)


def _check_assignment(plan: Plan, graph: Graph) -> None:
    names = {node.name for node in graph.nodes}
    missing = sorted(names - set(plan.assignment))
    extra = sorted(set(plan.assignment) - names)
    if missing or extra:
        raise PlanError(
            f"plan assignment does not match the model: missing {missing[:5]}, unknown {extra[:5]}"
        )


def _check_partitions(plan: Plan, graph: Graph) -> list[Partition]:
    seen: dict[str, str] = {}
    partitions = []
    for index, spec in enumerate(plan.partitions):
        target = _parse(spec.target)
        partition = Partition(index, target)
        for name in spec.nodes:
            if name in seen:
                raise PlanError(f"node {name!r} is in both {seen[name]} and {spec.id}")
            seen[name] = spec.id
            assigned = plan.assignment.get(name)
            if assigned is None or not belongs(_parse(assigned), target):
                raise PlanError(
                    f"node {name!r} is assigned {plan.assignment.get(name)} but sits in {spec.id} "
                    f"on {spec.target}"
                )
            try:
                partition.nodes.append(graph.node(name))
            except KeyError:
                raise PlanError(f"partition {spec.id} names unknown node {name!r}") from None
        partitions.append(partition)
    unplaced = sorted({n.name for n in graph.nodes} - set(seen))
    if unplaced:
        raise PlanError(f"nodes in no partition: {unplaced[:5]}")
    return partitions


def _parse(spec: str) -> VirtualDevice:
    try:
        target = VirtualDevice.parse(spec)
    except AutopartError as error:
        raise PlanError(f"plan refused: {error}") from None
    if target.device is None or target.codegen is None:
        raise PlanError(f"plan refused: target {spec!r} must name a device and a codegen")
    return target


def _check_copies(plan: Plan, graph: Graph) -> dict[str, set[str]]:
    """Where each value is resident (its home device plus copy destinations)."""
    home: dict[str, str] = {name: HOST_DEVICE for name in graph.inputs}
    for spec in plan.partitions:
        for name in spec.outputs:
            home[name] = _parse(spec.target).memory_space
    resident = {name: {device} for name, device in home.items()}
    for copy in plan.copies:
        if copy.value not in home:
            raise PlanError(f"copy {copy.id} moves {copy.value!r}, which no partition produces")
        if home[copy.value] != copy.src:
            raise PlanError(
                f"copy {copy.id} reads {copy.value!r} on {copy.src}, "
                f"but it lives on {home[copy.value]}"
            )
        resident[copy.value].add(copy.dst)
    for spec in plan.partitions:
        device = _parse(spec.target).memory_space
        nodes = [graph.node(n) for n in spec.nodes]
        needed = set(boundary(graph, nodes)[0])
        if needed != set(spec.inputs):
            raise PlanError(
                f"partition {spec.id} lists inputs {sorted(spec.inputs)[:4]} "
                f"but reads {sorted(needed)[:4]}"
            )
        for name in spec.inputs:
            if device not in resident.get(name, set()):
                raise PlanError(
                    f"partition {spec.id} on {device} reads {name!r}, which is never copied there"
                )
    for name in graph.outputs:
        if HOST_DEVICE not in resident.get(
            name, {HOST_DEVICE} if graph.value(name).is_const else set()
        ):
            raise PlanError(f"graph output {name!r} is never copied back to the host")
    return resident


def _check_order(plan: Plan) -> None:
    steps = {item.id: item for item in [*plan.partitions, *plan.copies]}
    if sorted(plan.order) != sorted(steps):
        raise PlanError("plan order must list every partition and copy exactly once")
    done: set[str] = set()
    for step_id in plan.order:
        missing = [dep for dep in steps[step_id].after if dep not in done]
        if missing:
            raise PlanError(f"step {step_id} runs before {missing[0]}, which it depends on")
        done.add(step_id)


def _check_storage(plan: Plan, resident: dict[str, set[str]], graph: Graph) -> None:
    owners: dict[int, str] = {}
    devices = {HOST_DEVICE} | {VirtualDevice.parse(p.target).memory_space for p in plan.partitions}
    for device, storage in plan.storage.items():
        if device not in devices:
            raise PlanError(f"plan stores buffers on {device!r}, a device none of its steps uses")
        held: dict[str, int] = {}
        for buffer in storage.buffers:
            for value in buffer.values:
                if value in held:
                    raise PlanError(
                        f"value {value!r} is held by buffers {held[value]} and {buffer.id} "
                        f"on {device}"
                    )
                held[value] = buffer.id
                needed = graph.value(value).nbytes if value in graph.values else 0
                if needed > buffer.nbytes:
                    raise PlanError(
                        f"buffer {buffer.id} on {device} has {buffer.nbytes} bytes, too few "
                        f"for {value!r} ({needed})"
                    )
            if buffer.id in owners:
                raise PlanError(
                    f"buffer {buffer.id} is shared by devices {owners[buffer.id]} and {device}"
                )
            owners[buffer.id] = device
            strangers = [v for v in buffer.values if device not in resident.get(v, set())]
            if strangers:
                raise PlanError(
                    f"buffer {buffer.id} on {device} holds {strangers[0]!r}, "
                    "which never lives there"
                )


def _whole_as_shipped(plan: Plan, graph: Graph, nodes: list[Node], codegen: Codegen) -> bool:
    """Whether ``nodes``, at one target, are the plan's only partition, compiled as shipped."""
    if len(plan.partitions) != 1 or len({plan.assignment[n.name] for n in nodes}) != 1:
        return False
    return runs_as_shipped(graph, nodes, codegen)


def _check_machine(plan: Plan, graph: Graph, machine: Machine) -> None:
    """Every local partition's targets exist on ``machine`` and support its nodes.

    A partition on another host is checked there (:mod:`autopart.runtime.hosts`).
    """
    for spec in plan.partitions:
        if VirtualDevice.parse(spec.target).host is not None:
            continue
        try:
            resolved = resolve(spec.target, machine)
            for assigned in {plan.assignment[n] for n in spec.nodes} - {spec.target}:
                resolve(assigned, machine)  # a mixed partition's precisions must exist here
        except AutopartError as error:
            raise PlanError(f"plan cannot run here: {error}") from None
        own = {t: resolve(t, machine) for t in {plan.assignment[n] for n in spec.nodes}}
        own[spec.target] = resolved
        nodes = [graph.node(n) for n in spec.nodes]
        if _whole_as_shipped(plan, graph, nodes, resolved.codegen):
            continue  # the library runs the model as shipped, whatever its probe refuses
        refused = [n.name for n in nodes if not own[plan.assignment[n.name]].supports(n, graph)]
        if refused:
            raise PlanError(f"plan refused: {spec.target} does not support node(s) {refused[:5]}")
