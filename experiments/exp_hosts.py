"""Hosts on Ray: the network model against measured transfers, and streams on 1 and 2 hosts.

On a ``local:2`` cluster (two Ray nodes of one core each on this machine):

1. ``autopart network``'s measurement: every size's measured median transfer against the
   fitted link's prediction (``hosts_network.csv``).
2. For each model, on the host target given (``--target``, default the machine's bf16
   OpenVINO target where it has one): one input at a time and a stream of ``--stream``
   inputs, for (a) the whole model on one host, (b) a pipeline of two stages, cut where
   the cumulative FLOPs pass half (a hand-made cut, not a search), (c) replicas of the
   whole model on both hosts, taken in turn, and (d) a pipeline cut where the weights
   pass half, so each host holds at most about half of them. The cut tensors' predicted
   transfer time (the network model) is written beside each plan
   (``hosts.csv``, ``hosts.png``).

The stages' outputs are checked against onnxruntime on the whole model each time.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence

import numpy as np
import pandas as pd
from _common import new_figure, save_figure, show, write_csv

from autopart import api
from autopart.cluster.links import measure_links
from autopart.cluster.session import cluster
from autopart.costmodel.network import NetworkModel
from autopart.ir.analysis import node_flops
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.runtime.hosts import ClusterPlanExecutor, stream_through
from autopart.targets.resolve import available_targets
from autopart.tuning.oracle import oracle_outputs


def cut_at_half(graph: Graph, weight_of: str) -> int:
    """The index of the first node past half the graph's FLOPs (or weight bytes)."""
    if weight_of == "flops":
        sizes = [node_flops(graph, node) for node in graph.nodes]
    else:
        sizes = [graph.parameter_bytes([node]) for node in graph.nodes]
    cumulative = np.cumsum(sizes)
    return int(np.searchsorted(cumulative, cumulative[-1] / 2)) + 1


def crossing_bytes(graph: Graph, cut: int) -> int:
    """Bytes of the values made before node ``cut`` and read from it on."""
    before = {name for node in graph.nodes[:cut] for name in node.outputs}
    read = {name for node in graph.nodes[cut:] for name in node.present_inputs}
    return sum(graph.value(name).nbytes for name in before & read)


def network_rows(network: NetworkModel) -> pd.DataFrame:
    """Each link's measured and predicted time at every size."""
    rows = []
    for (a, b), link in sorted(network.links.items()):
        for nbytes, seconds, runs in link.measured:
            rows.append(
                {
                    "link": f"{a}->{b}",
                    "bytes": nbytes,
                    "runs": runs,
                    "measured_ms": seconds * 1e3,
                    "predicted_ms": link.seconds(nbytes) * 1e3,
                    "error": link.seconds(nbytes) / seconds - 1,
                }
            )
    return pd.DataFrame(rows)


def plan_rows(
    model: str, target: str, hosts: Sequence, network: NetworkModel, stream: int, repeat: int
) -> list[dict[str, object]]:
    """Latency and stream rate of each way of running ``model`` on the hosts."""
    graph = api.load(model)
    feeds = [random_inputs(graph, seed) for seed in range(4)]
    names = [node.name for node in graph.nodes]

    def on(host: str, first: int, last: int) -> str:
        return f"idx:{first}-{last}={host}:{target}".replace("host0:", "")

    flops_cut, weights_cut = cut_at_half(graph, "flops"), cut_at_half(graph, "weights")
    ways = {
        "one host": [[on("host0", 0, len(names) - 1)]],
        "pipeline (FLOPs halved)": [
            [on("host0", 0, flops_cut - 1), on("host1", flops_cut, len(names) - 1)]
        ],
        "replicas": [[on("host0", 0, len(names) - 1)], [on("host1", 0, len(names) - 1)]],
        "pipeline (weights halved)": [
            [on("host0", 0, weights_cut - 1), on("host1", weights_cut, len(names) - 1)]
        ],
    }
    cuts = {"pipeline (FLOPs halved)": flops_cut, "pipeline (weights halved)": weights_cut}
    rows = []
    for way, rule_sets in ways.items():
        executors = []
        for rules in rule_sets:
            plan, placed = api.make_plan(model, rules, target.replace("host0:", ""))
            executors.append(ClusterPlanExecutor(plan, placed, hosts))
        latency = executors[0].run(feeds[0], repeat=repeat, warmup=2)
        streamed = stream_through(
            executors, [feeds[i % 4] for i in range(stream)], in_flight=2 * len(executors) + 1
        )
        worst = 0.0
        for sample, outputs in [
            (feeds[0], latency.outputs),
            *zip([feeds[i % 4] for i in range(stream)], streamed.outputs, strict=True),
        ]:
            _, expected = oracle_outputs(graph, sample, plan)
            for name, array in expected.items():
                scale = max(float(np.abs(array).max()), 1e-12)
                worst = max(worst, float(np.abs(outputs[name] - array).max()) / scale)
        cut = cuts.get(way)
        crossing = crossing_bytes(graph, cut) if cut is not None else 0
        parts = [graph.nodes] if cut is None else [graph.nodes[:cut], graph.nodes[cut:]]
        held = [graph.parameter_bytes(part) for part in parts]
        rows.append(
            {
                "model": model,
                "way": way,
                "hosts": len({s.host for e in executors for s in e.stages}),
                "latency_ms": latency.median_s * 1e3,
                "rate_per_s": streamed.rate,
                "stream_latency_ms": statistics.median(streamed.latencies) * 1e3,
                "crossing_bytes": crossing,
                "transfer_predicted_ms": network.seconds("host0", "host1", crossing) * 1e3,
                "largest_share_of_weights": max(held) / max(graph.parameter_bytes(), 1),
                "max_rel_error_vs_onnxruntime": worst,
            }
        )
        for executor in executors:
            executor.close()
    return rows


def main() -> None:
    """Measure the network and each way of running the models; write the CSVs and the PNG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["squeezenet", "resnet50"])
    parser.add_argument("--target", default=None, help="each host's target (no host part)")
    parser.add_argument("--stream", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--runs", type=int, default=9, help="timed transfers per size")
    args = parser.parse_args()
    target = args.target or next(
        (str(t) for t in available_targets(api.devices()) if str(t) == "cpu@openvino:bf16"),
        "cpu@openvino",
    )
    with cluster("local:2") as hosts:
        network = measure_links(hosts, runs=args.runs)
        rows = [
            row
            for model in args.models
            for row in plan_rows(model, target, hosts, network, args.stream, args.repeat)
        ]
    links = network_rows(network)
    show("network: measured against the fitted link", links)
    write_csv(links, "hosts_network.csv")
    frame = pd.DataFrame(rows)
    show(f"on 1 and 2 hosts of one core each ({target})", frame)
    write_csv(frame, "hosts.csv")
    figure = new_figure(12, 4.5)
    left, right = figure.subplots(1, 2)
    for link, part in links.groupby("link"):
        left.loglog(part["bytes"], part["measured_ms"], "o", label=f"{link} measured")
        left.loglog(part["bytes"], part["predicted_ms"], "-", label=f"{link} predicted")
    left.set(xlabel="bytes", ylabel="ms", title="transfers between hosts")
    left.legend(fontsize=7)
    for way, part in frame.groupby("way"):
        right.bar([f"{m}\n{way}" for m in part["model"]], part["rate_per_s"], label=way)
    right.set(ylabel="inputs / s", title="stream rate")
    right.tick_params(axis="x", labelsize=6, rotation=30)
    print(save_figure(figure, "hosts.png"))


if __name__ == "__main__":
    main()
