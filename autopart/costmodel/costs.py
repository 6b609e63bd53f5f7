"""The numbers a search works from: per-node cost on each target, launches and transfers.

:class:`Costs` is the only thing the cost model, the ILP, the tuner and the baselines read.
It is built from a measured profile (:func:`autopart.costmodel.from_profile.costs_from_profile`)
or by hand in tests and synthetic experiments. All times are seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from autopart.costmodel.alone import FLOOR as ALONE_FLOOR
from autopart.ir.graph import Graph, Node
from autopart.ir.target import HOST_DEVICE, VirtualDevice


@dataclass(frozen=True)
class TransferModel:
    """Copy time between two devices: ``latency_s + nbytes / bandwidth_bps``.

    ``regimes`` optionally refines this for larger copies, which leave the caches or start
    paying page faults: ``(from_bytes, latency_s, bandwidth_bps)`` triples in increasing
    ``from_bytes``; a copy uses the last regime whose ``from_bytes`` it reaches.
    """

    latency_s: float
    bandwidth_bps: float
    regimes: tuple[tuple[int, float, float], ...] = ()

    def cost(self, nbytes: int) -> float:
        """Predicted seconds to copy ``nbytes``."""
        latency, bandwidth = self.latency_s, self.bandwidth_bps
        for start, regime_latency, regime_bandwidth in self.regimes:
            if nbytes < start:
                break
            latency, bandwidth = regime_latency, regime_bandwidth
        return latency + nbytes / bandwidth


class PartitionKey(NamedTuple):
    """A partition as :attr:`Costs.measured` keys it.

    Its node names in order, its target, whether it is its plan's only partition, and,
    where its nodes mix precisions, each node's own precision in node order
    (:func:`node_precisions`; empty when every node computes at the target's).
    """

    names: tuple[str, ...]
    target: VirtualDevice
    alone: bool
    precisions: tuple[str, ...] = ()


def node_precisions(
    nodes: Sequence[str], target: VirtualDevice, node_targets: Mapping[str, VirtualDevice]
) -> tuple[str, ...]:
    """Each of ``nodes``' precision (``f32`` spelled out) where one differs from ``target``'s.

    Empty when every node computes at ``target``'s precision, so that a partition of one
    precision keys as it always has.
    """
    own = [node_targets.get(name, target) for name in nodes]
    if all(device == target for device in own):
        return ()
    return tuple(device.computes_in for device in own)


@dataclass
class Costs:
    """Costs of running ``graph`` on ``targets``.

    ``node_cost[node][target]`` is the time of ``node`` on ``target``; a target missing from
    a node's entry cannot run it. ``launch[target]`` is the fixed cost of entering one
    partition on it; ``cold[target]`` what entering costs beyond that when the target's lane
    sat idle while other partitions ran, paid by every partition of a plan on more than
    one target. ``transfers[(src, dst)]`` prices copies between devices; a pair
    without a model falls back to going through the host (src->cpu, then cpu->dst).
    Graph inputs start on the host and graph outputs must end on it.

    Edge costs (:meth:`partition_cost`): a node that a codegen fuses into its producer
    ``fused_producer[node]`` costs ``unfused[node][target]`` more when that producer is in
    another partition; a node whose codegen converts data layouts at a partition's edges
    pays ``layout[node][target]``, half where one of its inputs comes from outside its
    partition and half where one of its outputs leaves it. A plan's only partition saves
    ``alone[target]`` seconds per node over the same partition among others (0 where
    absent), never below :data:`~autopart.costmodel.alone.FLOOR` of its cost: its library
    may then run at its own defaults (:mod:`autopart.costmodel.alone`).

    ``measured`` holds partitions timed whole (:mod:`autopart.costmodel.partitions`), by
    (node names in order, target, alone): where a partition was measured, its measurement
    is its cost, and the op sum above is not consulted.
    """

    graph: Graph
    targets: list[VirtualDevice]
    node_cost: dict[str, dict[VirtualDevice, float]]
    launch: dict[VirtualDevice, float] = field(default_factory=dict)
    transfers: dict[tuple[str, str], TransferModel] = field(default_factory=dict)
    fused_producer: dict[str, str] = field(default_factory=dict)
    unfused: dict[str, dict[VirtualDevice, float]] = field(default_factory=dict)
    layout: dict[str, dict[VirtualDevice, float]] = field(default_factory=dict)
    cold: dict[VirtualDevice, float] = field(default_factory=dict)
    alone: dict[VirtualDevice, float] = field(default_factory=dict)
    measured: dict[PartitionKey, float] = field(default_factory=dict)

    def supported(self, node: Node | str) -> list[VirtualDevice]:
        """Targets that can run ``node``, in the order of :attr:`targets`."""
        name = node if isinstance(node, str) else node.name
        entry = self.node_cost.get(name, {})
        return [target for target in self.targets if target in entry]

    def cost(self, node: Node | str, target: VirtualDevice) -> float:
        """Seconds ``node`` takes on ``target`` (KeyError when the target cannot run it)."""
        name = node if isinstance(node, str) else node.name
        return self.node_cost[name][target]

    def launch_cost(self, target: VirtualDevice) -> float:
        """The fixed cost of one partition on ``target`` (0 when unmeasured)."""
        return self.launch.get(target, 0.0)

    def cold_cost(self, target: VirtualDevice) -> float:
        """The cold entry on ``target``: paid in plans on several targets (0 if unknown)."""
        return self.cold.get(target, 0.0)

    def split_entry_cost(self, target: VirtualDevice) -> float:
        """What starting a partition on ``target`` costs in a plan on several targets."""
        return self.launch_cost(target) + self.cold_cost(target)

    def is_measured(
        self,
        nodes: Sequence[str],
        target: VirtualDevice,
        alone: bool = False,
        node_targets: Mapping[str, VirtualDevice] | None = None,
    ) -> bool:
        """Whether the partition of ``nodes`` on ``target`` was timed whole (:attr:`measured`)."""
        mixed = node_precisions(nodes, target, node_targets) if node_targets else ()
        return PartitionKey(tuple(nodes), target, alone, mixed) in self.measured

    def partition_cost(
        self,
        nodes: Sequence[str],
        target: VirtualDevice,
        split: bool = False,
        alone: bool = False,
        node_targets: Mapping[str, VirtualDevice] | None = None,
    ) -> float:
        """Seconds of one partition of ``nodes`` on ``target``.

        That is its launch, its nodes' costs and the edge costs its boundary makes them
        pay (see the class docstring), plus its target's cold entry where ``split`` (the
        plan runs partitions on other targets too); less the target's alone saving per node
        where ``alone`` (the partition is its plan's only one).

        ``node_targets`` gives nodes of a partition that mixes precisions their own targets
        (each is priced at its precision; the one-node timings of a reduced node include the
        conversions at its edges). Raises KeyError when a target cannot run one of the
        nodes. A partition in :attr:`measured`, at these precisions, costs its measurement
        (plus its cold entry where ``split``).
        """
        mixed = node_precisions(nodes, target, node_targets) if node_targets else ()
        timed = self.measured.get(PartitionKey(tuple(nodes), target, alone, mixed))
        if timed is not None:
            return timed + (self.cold_cost(target) if split else 0.0)
        inside = set(nodes)
        total = self.split_entry_cost(target) if split else self.launch_cost(target)
        for name in nodes:
            own = node_targets.get(name, target) if node_targets else target
            total += self.cost(name, own)
            producer = self.fused_producer.get(name)
            if producer is not None and producer not in inside:
                total += self.unfused.get(name, {}).get(own, 0.0)
            layout = self.layout.get(name, {}).get(own, 0.0)
            if layout > 0.0:
                total += layout * self._edges_crossed(self.graph.node(name), inside) / 2
        if not alone:
            return total
        return max(total - len(inside) * self.alone.get(target, 0.0), total * ALONE_FLOOR)

    def _edges_crossed(self, node: Node, inside: set[str]) -> int:
        """1 for an input from outside ``inside``, plus 1 for an output read outside it."""
        values = [self.graph.value(name) for name in node.present_inputs]
        entering = any(
            not value.is_const and (value.producer is None or value.producer.name not in inside)
            for value in values
        )
        leaving = any(
            name in self.graph.outputs
            or any(c.name not in inside for c in self.graph.value(name).consumers)
            for name in node.outputs
            if name
        )
        return int(entering) + int(leaving)

    def transfer(self, src: str, dst: str, nbytes: int) -> float:
        """Seconds to copy ``nbytes`` from device ``src`` to device ``dst`` (0 when equal)."""
        if src == dst:
            return 0.0
        model = self.transfers.get((src, dst))
        if model is not None:
            return model.cost(nbytes)
        if HOST_DEVICE not in (src, dst):
            return self.transfer(src, HOST_DEVICE, nbytes) + self.transfer(HOST_DEVICE, dst, nbytes)
        return 0.0

    def devices(self) -> list[str]:
        """Every device named by a target, host first."""
        names = {str(target.device) for target in self.targets} | {HOST_DEVICE}
        return sorted(names, key=lambda name: (name != HOST_DEVICE, name))
