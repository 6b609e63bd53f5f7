"""Measuring what hosts on the driver's machine lose when they all stream at once.

The hosts whose address is the driver's (every host of ``--cluster local:N``) share its
cores with the driver and Ray (:mod:`autopart.costmodel.sharing`). For each of two
calibration stages, one quick and one about ten times longer, the same stage is compiled
on every such host with the executor plans run with (:class:`ClusterPlanExecutor`), and
streamed through each host alone, then through all of them at once as replicas (inputs
in turn), in three rounds. A host's **efficiency** at that stage's time is the rate of
all of them over the sum of their rates alone, in the median round;
:func:`~autopart.costmodel.sharing.fit_sharing` fits the two points.

A calibration stage is a chain of ``MatMul`` and ``Tanh`` on a 64x256 input with one
256x256 weight, on the whole host's oracle codegen (:attr:`Role.ORACLE`, else the
reference). Its time depends on the host's CPU, and the fit is of the times measured,
whatever they are.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from autopart.cluster.session import Host
from autopart.costmodel.network import NetworkModel, save_network
from autopart.costmodel.sharing import Sharing, fit_sharing
from autopart.ir.graph import Graph
from autopart.ir.onnx_import import load_graph
from autopart.plan.build import build_plan_for
from autopart.runtime.hosts import ClusterPlanExecutor, stream_through
from autopart.targets.codegen import Role
from autopart.targets.registry import codegen_for, reference_codegen
from autopart.targets.resolve import reference_target

LAYERS = (8, 80)  # the calibration stages' MatMul-Tanh pairs: one quick, one ten times longer
STREAM_S = 0.4  # each stream runs about this long (at least MIN_INPUTS inputs)
MIN_INPUTS = 24
ROUNDS = 3  # of alone then together: the median round's efficiency (one round is +-5%)


def shared_hosts(hosts: Sequence[Host]) -> list[Host]:
    """The hosts on the driver's machine (``hosts[0]``'s address), where two or more."""
    if not hosts:
        return []
    shared = [host for host in hosts if host.address == hosts[0].address]
    return shared if len(shared) >= 2 else []


def calibration_graph(layers: int) -> Graph:
    """A chain of ``layers`` MatMul-Tanh pairs on a 64x256 input, sharing one weight."""
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((256, 256)) / 16).astype(np.float32)
    nodes, last = [], "x"
    for index in range(layers):
        nodes.append(helper.make_node("MatMul", [last, "w"], [f"m{index}"]))
        nodes.append(helper.make_node("Tanh", [f"m{index}"], [f"t{index}"]))
        last = f"t{index}"
    proto = helper.make_model(
        helper.make_graph(
            nodes,
            f"sharing-{layers}",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])],
            [helper.make_tensor_value_info(last, TensorProto.FLOAT, [64, 256])],
            [numpy_helper.from_array(weight, "w")],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    onnx.checker.check_model(proto)
    return load_graph(proto, simplify_graph=False)


def _executor(graph: Graph, host: Host, hosts: Sequence[Host]) -> ClusterPlanExecutor:
    """``graph`` compiled whole on ``host``: the oracle codegen on the whole host."""
    codegen = codegen_for(Role.ORACLE) or reference_codegen()
    target = replace(reference_target(), codegen=codegen.name)
    placed = target if host.name == hosts[0].name else replace(target, host=host.name)
    plan = build_plan_for(graph, {node.name: placed for node in graph.nodes}, target, graph.name)
    return ClusterPlanExecutor(plan, graph, hosts)


def _efficiency(graph: Graph, shared: Sequence[Host], hosts: Sequence[Host]) -> tuple[float, float]:
    """(seconds an input on a host alone, efficiency of all at once) for ``graph``."""
    feeds = {"x": np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)}
    executors: list[ClusterPlanExecutor] = []
    try:
        for host in shared:
            executors.append(_executor(graph, host, hosts))
        seconds = statistics.median(
            executor.run(feeds, repeat=5, warmup=2).median_s for executor in executors
        )
        count = max(MIN_INPUTS, int(STREAM_S / max(seconds, 1e-6)))
        alone_s, efficiencies = [], []
        for _ in range(ROUNDS):
            alone = [stream_through([e], [feeds] * count, 2).rate for e in executors]
            together = stream_through(executors, [feeds] * (count * len(executors)),
                                      len(executors) + 1).rate  # fmt: skip
            alone_s.append(1.0 / statistics.median(alone))
            efficiencies.append(together / sum(alone))
    finally:
        for executor in executors:
            executor.close()
    return statistics.median(alone_s), statistics.median(efficiencies)


def measure_sharing(hosts: Sequence[Host]) -> Sharing | None:
    """What the hosts on the driver's machine lose while all stream; None where under two.

    :class:`~autopart.cluster.session.HostLostError` names a host lost meanwhile.
    """
    shared = shared_hosts(hosts)
    if not shared:
        return None
    points = [_efficiency(calibration_graph(layers), shared, hosts) for layers in LAYERS]
    return fit_sharing([host.name for host in shared], points)


def with_sharing(
    network: NetworkModel, hosts: Sequence[Host], path: Path, remeasure: bool = False
) -> NetworkModel:
    """``network`` with its hosts' sharing: as saved, else measured now and saved to ``path``.

    Unchanged where fewer than two hosts share the driver's machine.
    """
    if (network.sharing is not None and not remeasure) or not shared_hosts(hosts):
        return network
    measured = replace(network, sharing=measure_sharing(hosts))
    save_network(measured, path)
    return measured
