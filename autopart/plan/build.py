"""Building a plan from a placed graph: partitions, copy nodes, schedule and storage.

The graph's nodes carry their targets (:func:`autopart.ir.placement.place`);
:func:`build_plan` reads them, and :func:`place_plan` writes a loaded plan's targets back
onto a graph's nodes.
"""

from __future__ import annotations

from collections.abc import Mapping

from autopart.errors import AutopartError
from autopart.ir.graph import Graph
from autopart.ir.hashing import graph_hash
from autopart.ir.observe import describe_region, dynamic_region
from autopart.ir.placement import place
from autopart.ir.target import HOST_DEVICE, VirtualDevice
from autopart.plan.memory import Lifetime, peak_bytes, plan_buffers
from autopart.plan.partition import Partition, partition_graph
from autopart.plan.schema import (
    BufferSpec,
    CopySpec,
    DeviceStorage,
    ModelRef,
    PartitionSpec,
    Plan,
    PlanError,
)


def model_ref(graph: Graph, source: str) -> ModelRef:
    """The reference a plan keeps to its model: name, how to load it, and its hash.

    How to load it includes the input shapes and the values of inputs frozen at import.
    """
    shapes = {name: list(graph.value(name).shape or ()) for name in graph.inputs}
    frozen = {name: array.tolist() for name, array in graph.meta.get("frozen", {}).items()}
    return ModelRef(graph.name, source, graph_hash(graph), shapes, frozen)


def build_plan(
    graph: Graph,
    fallback: VirtualDevice,
    source: str,
    notes: list[str] | None = None,
) -> Plan:
    """Partition ``graph`` by its nodes' virtual devices and add copy nodes.

    Every node's virtual device must name a target (a device and a codegen). Graph inputs
    live on the host and graph outputs are copied back to it. One copy is made per (value,
    destination device) and shared by every consumer there.
    """
    partitions = partition_graph(graph)
    home: dict[str, str] = {name: HOST_DEVICE for name in graph.inputs}
    producer_step: dict[str, str] = {}
    for partition in partitions:
        for name in partition.outputs:
            home[name] = partition.target.memory_space
            producer_step[name] = f"p{partition.index}"

    copies: dict[tuple[str, str], CopySpec] = {}
    order: list[str] = []

    def copy_to(value: str, device: str) -> str | None:
        """The step that makes ``value`` available on ``device`` (None: a graph input)."""
        if home[value] == device:
            return producer_step.get(value)
        key = (value, device)
        if key not in copies:
            after = [producer_step[value]] if value in producer_step else []
            spec = CopySpec(
                f"c{len(copies)}", value, home[value], device, graph.value(value).nbytes, after
            )
            copies[key] = spec
            order.append(spec.id)
        return copies[key].id

    specs = []
    for partition in partitions:
        device = partition.target.memory_space
        after = {step for name in partition.inputs if (step := copy_to(name, device))}
        spec = PartitionSpec(
            f"p{partition.index}",
            str(partition.target),
            [node.name for node in partition.nodes],
            list(partition.inputs),
            list(partition.outputs),
            sorted(after, key=_step_key),
        )
        specs.append(spec)
        order.append(spec.id)
        for name in partition.outputs:
            if name in graph.outputs:
                copy_to(name, HOST_DEVICE)
    storage = _storage(graph, partitions, specs, list(copies.values()), order, home)
    return Plan(
        model=model_ref(graph, source),
        fallback=str(fallback),
        assignment={node.name: str(node.virtual_device) for node in graph.nodes},
        partitions=specs,
        copies=list(copies.values()),
        order=order,
        storage=storage,
        notes=[*(notes or []), *_dynamic_note(graph)],
    )


def _dynamic_note(graph: Graph) -> list[str]:
    """The note naming the region whose shapes depend on data, if the graph has one."""
    region = dynamic_region(graph)
    if not region:
        return []
    first = ", ".join(node.name for node in region[:3]) + (" ..." if len(region) > 3 else "")
    return [f"dynamic region: {describe_region(graph)}: {first}"]


def build_plan_for(
    graph: Graph,
    assignment: Mapping[str, VirtualDevice],
    fallback: VirtualDevice,
    source: str,
    notes: list[str] | None = None,
) -> Plan:
    """:func:`build_plan` of ``graph`` placed by ``assignment`` (for callers holding a dict).

    ``graph``'s hash is taken (and kept, :func:`~autopart.ir.hashing.graph_hash`) before
    it is placed, so that plans built from one graph hash it once, not once per copy.
    """
    graph_hash(graph)
    return build_plan(place(graph, assignment), fallback, source, notes)


def place_plan(graph: Graph, plan: Plan) -> Graph:
    """A copy of ``graph`` whose nodes carry ``plan``'s targets (what loading a plan does).

    A node that already has a virtual device keeps it only if the plan's target agrees
    (fills in what it leaves unset); otherwise :class:`PlanError` names the node. Nodes the
    plan does not assign raise :class:`PlanError` too.
    """
    placed = graph.copy()
    for node in placed.nodes:
        text = plan.assignment.get(node.name)
        if text is None:
            raise PlanError(f"the plan assigns no target to node {node.name!r}")
        target = _parse(text)
        merged = node.virtual_device.narrow(target)
        if merged != target:
            raise PlanError(
                f"node {node.name!r} is placed on {node.virtual_device} "
                f"but the plan runs it on {target}"
            )
        node.virtual_device = target
    return placed


def _parse(text: str) -> VirtualDevice:
    try:
        return VirtualDevice.parse(text)
    except AutopartError as error:
        raise PlanError(f"plan refused: {error}") from None


def _step_key(step_id: str) -> tuple[str, int]:
    return step_id[0], int(step_id[1:])


def _storage(
    graph: Graph,
    partitions: list[Partition],
    specs: list[PartitionSpec],
    copies: list[CopySpec],
    order: list[str],
    home: dict[str, str],
) -> dict[str, DeviceStorage]:
    """Lifetimes of boundary tensors per device in ``order``, packed into reused buffers."""
    position = {step: index for index, step in enumerate(order)}
    first: dict[tuple[str, str], int] = {(name, HOST_DEVICE): -1 for name in graph.inputs}
    last: dict[tuple[str, str], int] = {}
    for spec in specs:
        device = _target(spec).memory_space
        for name in spec.outputs:
            first[(name, device)] = position[spec.id]
        for name in spec.inputs:
            last[(name, device)] = max(last.get((name, device), -1), position[spec.id])
    for copy in copies:
        first[(copy.value, copy.dst)] = position[copy.id]
        last[(copy.value, copy.src)] = max(last.get((copy.value, copy.src), -1), position[copy.id])
    for name in graph.outputs:
        if name in home:
            last[(name, HOST_DEVICE)] = len(order)
    lifetimes = [
        Lifetime(name, device, graph.value(name).nbytes, start, last.get((name, device), start))
        for (name, device), start in first.items()
    ]
    weights: dict[str, int] = {}
    for partition in partitions:
        device = partition.target.memory_space
        constants = {
            n for node in partition.nodes for n in node.present_inputs if graph.value(n).is_const
        }
        weights[device] = weights.get(device, 0) + sum(graph.value(n).nbytes for n in constants)
    buffers = plan_buffers(lifetimes)
    devices = sorted(set(weights) | set(buffers) | {HOST_DEVICE})
    return {
        device: DeviceStorage(
            weights.get(device, 0),
            peak_bytes(lifetimes, device),
            [BufferSpec(b.id, b.nbytes, b.values) for b in buffers.get(device, [])],
        )
        for device in devices
    }


def _target(spec: PartitionSpec) -> VirtualDevice:
    return _parse(spec.target)
