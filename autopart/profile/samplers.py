"""Samplers: functions that run a compiled subgraph once and return how long that took.

The profiler's jobs (:mod:`autopart.profile.kinds`) hand these to
:func:`autopart.profile.timing.collect`. Subgraphs are compiled through the codegens' own
``compile``, the code the plan executor runs, with their inputs placed on the target's
device first.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autopart.costmodel.cold import COLD_ENTRY
from autopart.costmodel.cuts import cut_index
from autopart.ir.graph import Graph, Node
from autopart.ir.target import VirtualDevice
from autopart.limits import available_memory_bytes
from autopart.plan.partition import boundary
from autopart.profile.probe import launch_probe_graph
from autopart.profile.timing import TimingSettings, collect
from autopart.settings import COMMON, tuned
from autopart.targets.codegen import CompiledSubgraph
from autopart.targets.resolve import ResolvedTarget

PROFILED_RUNS = 50  # the launch probe's runs under the codegen's profiler


def compiled_with_inputs(
    resolved: ResolvedTarget,
    graph: Graph,
    nodes: list[Node],
    values: Mapping[str, Any],
    alone: bool = False,
) -> tuple[CompiledSubgraph, dict[str, Any]]:
    """``nodes`` compiled for ``resolved``, and an environment holding their inputs there.

    With ``alone``, compiled as a plan's only partition (:func:`compile_nodes`), the
    environment also holds the graph's inputs that no node reads, as a plan's run does: a
    model compiled as shipped reads one whose uses import folded (a graph network's
    ``graph_slots``, of which only the static length counts).
    """
    device, unit = resolved.placement.device, resolved.placement.unit
    names = list(boundary(graph, nodes)[0])
    if alone:
        names += [n for n in graph.inputs if not graph.value(n).consumers and n not in names]
    env: dict[str, Any] = {name: device.from_host(values[name], unit) for name in names}
    device.synchronize(unit)
    return compile_nodes(resolved, graph, nodes, alone), env


@contextmanager
def placed_at(
    nodes: Sequence[Node], target: VirtualDevice, precisions: Sequence[str]
) -> Iterator[None]:
    """Within the block, each of ``nodes`` sits on ``target`` at its own of ``precisions``.

    A codegen that mixes precisions reads them from the nodes' virtual devices, as when a
    plan runs; the nodes' devices are restored after. Nothing changes when ``precisions``
    is empty (every node at ``target``'s own precision).
    """
    if not precisions:
        yield
        return
    kept = [node.virtual_device for node in nodes]
    try:
        for node, precision in zip(nodes, precisions, strict=True):
            node.virtual_device = target.at_precision(precision)
        yield
    finally:
        for node, device in zip(nodes, kept, strict=True):
            node.virtual_device = device


@dataclass(frozen=True)
class CompiledCacheSettings:
    """How much the profiler keeps compiled from one pass of a partition to the next."""

    held_weights: int = tuned(
        512 << 20,
        "most bytes of weights read by the partitions held compiled between passes: with no "
        "bound but free memory, vgg19's thorough bench (548 MiB of weights) held one whole "
        "compile per target and peaked at 11.8 GiB in that stage",
    )


COMPILED_CACHE = CompiledCacheSettings()


class CompiledCache(dict[tuple[str, str], Any]):
    """What the profiler keeps compiled between passes, by (target, key), and its weights.

    Entries go in by :meth:`keep`, which holds one only while the weights of all held stay
    within :attr:`CompiledCacheSettings.held_weights`. ``weights`` holds the bytes of
    weights each entry's partition reads; an entry taken out with :meth:`pop` or
    :meth:`clear` leaves it too.
    """

    def __init__(self) -> None:
        super().__init__()
        self.weights: dict[tuple[str, str], int] = {}

    def keep(self, key: tuple[str, str], value: Any, weights: int) -> bool:
        """Hold ``value`` under ``key`` if its ``weights`` fit beside those held; whether it did.

        One that does not fit is compiled again at each pass, and what is held stays: the
        passes visit the partitions in turn, so evicting an older entry would only have it
        compiled again in its place.
        """
        if sum(self.weights.values()) + weights > COMPILED_CACHE.held_weights:
            return False
        self[key] = value
        self.weights[key] = weights
        return True

    def pop(self, key: tuple[str, str], default: Any = None) -> Any:
        """Take ``key`` out, with its weights; ``default`` when it is not held."""
        self.weights.pop(key, None)
        return super().pop(key, default)

    def clear(self) -> None:
        """Take every entry out."""
        self.weights.clear()
        super().clear()


def make_room(compiled: dict[tuple[str, str], Any], graph: Graph, nodes: Sequence[Node]) -> None:
    """Empty ``compiled`` when ``nodes`` compiled would not fit in memory beside it.

    The profiler keeps each subgraph compiled from its first pass to its last, so a model
    of large weights held one whole copy per target measured (vgg19's measure stage passed
    20 GB). When less than :attr:`~autopart.settings.CommonSettings.compile_headroom`
    times the weights ``nodes`` read is free, everything in ``compiled`` is dropped, to
    be compiled again at its next pass.
    """
    weights = graph.parameter_bytes(nodes)
    if compiled and available_memory_bytes() < COMMON.compile_headroom * weights:
        compiled.clear()
        gc.collect()


def compile_nodes(
    resolved: ResolvedTarget, graph: Graph, nodes: list[Node], alone: bool = False
) -> CompiledSubgraph:
    """``nodes`` compiled for ``resolved`` as one subgraph, its inputs and outputs its edges.

    With ``alone``, compiled as a plan's only partition
    (:attr:`autopart.targets.codegen.Placement.alone`).
    """
    placement = replace(resolved.placement, alone=alone)
    return resolved.codegen.compile(graph, nodes, *boundary(graph, nodes), placement)


def wall_sampler(
    resolved: ResolvedTarget, compiled: CompiledSubgraph, env: dict[str, Any]
) -> Callable[[], float]:
    """A function returning the wall time of one run of ``compiled``, synchronised after."""
    device, unit = resolved.placement.device, resolved.placement.unit

    def sample() -> float:
        start = time.perf_counter()
        compiled.run(env)
        device.synchronize(unit)
        return time.perf_counter() - start

    return sample


def enqueue_sampler(
    resolved: ResolvedTarget, compiled: CompiledSubgraph, env: dict[str, Any]
) -> Callable[[], float]:
    """A function timing how long the host takes to enqueue ``compiled`` (its ``run``).

    The device is idle when it starts and is waited for after, outside the timing.
    """
    device, unit = resolved.placement.device, resolved.placement.unit

    def sample() -> float:
        start = time.perf_counter()
        compiled.run(env)
        elapsed = time.perf_counter() - start
        device.synchronize(unit)
        return elapsed

    return sample


def pair_sampler(
    resolved: ResolvedTarget,
    graph: Graph,
    pair: list[Node],
    values: Mapping[str, Any],
    producer_times: list[float],
) -> Callable[[], float]:
    """A function timing ``pair`` (producer, consumer) as one subgraph, its producer just before.

    Each call runs the producer alone and appends what ``run_timed`` said of it to
    ``producer_times``, then returns what it says of the pair. Timed in turn, the two see
    the same spells of the host, so that the little a fused consumer adds is not lost in
    the drift between two jobs measured seconds apart (Conv+Relu on onnxruntime: the pair
    minus a Conv timed in another job came out at -6 to +77 times the Relu alone).
    """
    together, env = compiled_with_inputs(resolved, graph, pair, values)
    alone = compile_nodes(resolved, graph, [pair[0]])

    def sample() -> float:
        producer_times.append(alone.run_timed(env))
        return together.run_timed(env)

    return sample


def cut_samplers(
    resolved: ResolvedTarget,
    graph: Graph,
    nodes: list[Node],
    values: Mapping[str, Any],
    whole_walls: list[float],
    whole_timed: list[float],
) -> tuple[Callable[[], float], Callable[[], float]]:
    """Functions timing ``nodes`` cut in two (:func:`cut_index`), and whole entered cold.

    Each call of the first returns the wall time of the two halves in a row on
    ``resolved``. The whole, run just before (the two alternate, so drift hits both),
    appends its wall time to ``whole_walls`` and what ``run_timed`` said of it (the
    calibration sample) to ``whole_timed``. The second keeps the host busy elsewhere for
    ``COLD_ENTRY.gap_s``, as while another partition of a plan runs, and returns the wall
    time of the whole run then. Raises ``ValueError`` where ``nodes`` cannot be cut.
    """
    index = cut_index(graph, nodes)
    if index is None:
        raise ValueError(f"a window of {len(nodes)} ops that cannot be cut")
    whole, env = compiled_with_inputs(resolved, graph, nodes, values)
    device, unit = resolved.placement.device, resolved.placement.unit
    halves = [compile_nodes(resolved, graph, part) for part in (nodes[:index], nodes[index:])]

    def sample() -> float:
        start = time.perf_counter()
        whole_timed.append(whole.run_timed(env))
        device.synchronize(unit)
        whole_walls.append(time.perf_counter() - start)
        start = time.perf_counter()
        for part in halves:
            part.run(env)
            device.synchronize(unit)
        return time.perf_counter() - start

    run_whole = wall_sampler(resolved, whole, env)

    def cold() -> float:
        busy(COLD_ENTRY.gap_s)
        return run_whole()

    return sample, cold


def launch_samples(
    resolved: ResolvedTarget, settings: TimingSettings
) -> tuple[list[float], list[float], list[float]]:
    """Wall times of entering a trivial partition, and what ``run_timed`` says of it.

    Layout-converting codegens also give what their own profiler says the probe's one
    kernel took (empty for the rest): a kernel that does nearly nothing, so that is the
    profiler's overhead on every kernel it times.
    """
    probe = launch_probe_graph()
    values = {"x": np.ones((1, 1), np.float32)}
    compiled, env = compiled_with_inputs(resolved, probe, probe.nodes, values)
    walls = collect(wall_sampler(resolved, compiled, env), settings)
    timed = collect(lambda: compiled.run_timed(env), settings)
    if not resolved.codegen.converts_layouts:
        return walls, timed, []
    # the profiler counts whole microseconds: many runs, so that the median is not one tick
    profiled = [kernels for _, kernels in compiled.layout_samples(env, PROFILED_RUNS)]
    return walls, timed, profiled


def busy(seconds: float) -> None:
    """Keep the calling thread busy for ``seconds`` (a sleep would let its core idle too)."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass
