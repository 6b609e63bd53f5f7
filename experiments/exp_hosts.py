"""Hosts on Ray: the network model against measured transfers, and streams on 1 and 2 hosts.

On a ``local:2`` cluster (two Ray nodes of one core each on this machine):

1. ``autopart network``'s measurement, taken twice: every size's median transfer against
   the link fitted to the first, which predicts the second unseen; the second against the
   first is the noise floor (``hosts_network.csv``).
2. For each model, on the host target given (``--target``, default the machine's bf16
   OpenVINO target where it has one): one input at a time and a stream of ``--stream``
   inputs, for (a) the whole model on one host, (b) a pipeline of two stages, cut where
   the cumulative FLOPs pass half (a hand-made cut, not a search), (c) replicas of the
   whole model on both hosts, taken in turn, and (d) a pipeline cut where the weights
   pass half, so each host holds at most about half of them. The cut tensors' predicted
   transfer time (the network model) is written beside each plan
   (``hosts.csv``, ``hosts.png``).

The stages' outputs are checked against onnxruntime on the whole model each time. The ways
run their streams in interleaved rounds (`--rounds`), and each is reported by its median
rate and its ratio to one host's rate in the same round.
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


def network_rows(network: NetworkModel, again: NetworkModel) -> pd.DataFrame:
    """Each link's fit against its own timings and against a second measurement, ``again``.

    ``error_own`` is the fit against the medians it was fitted to; ``error_again`` its
    prediction of the second measurement's medians, which it never saw; ``noise`` the
    second measurement against the first, the same transfer timed twice.
    """
    rows = []
    for (a, b), link in sorted(network.links.items()):
        second = {nbytes: seconds for nbytes, seconds, _ in again.links[(a, b)].measured}
        for nbytes, seconds, runs in link.measured:
            predicted = link.seconds(nbytes)
            rows.append(
                {
                    "link": f"{a}->{b}",
                    "bytes": nbytes,
                    "runs": runs,
                    "measured_ms": seconds * 1e3,
                    "measured_again_ms": second[nbytes] * 1e3,
                    "predicted_ms": predicted * 1e3,
                    "error_own": predicted / seconds - 1,
                    "error_again": predicted / second[nbytes] - 1,
                    "noise": second[nbytes] / seconds - 1,
                }
            )
    return pd.DataFrame(rows)


def plan_rows(
    model: str,
    target: str,
    hosts: Sequence,
    network: NetworkModel,
    stream: int,
    repeat: int,
    rounds: int,
) -> list[dict[str, object]]:
    """Latency and stream rate of each way of running ``model`` on the hosts.

    Every way is compiled first; then ``rounds`` rounds each run every way's stream in
    turn, so the ways' rates are compared within a round (this machine's speed drifts).
    A row gives each way's median rate and its ratio to one host's rate in the same round;
    "one host, again" (compiled apart, run last in each round) is the noise floor of
    that ratio: the same thing measured twice.
    """
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
        "one host, again": [[on("host0", 0, len(names) - 1)]],  # the noise floor
    }
    cuts = {"pipeline (FLOPs halved)": flops_cut, "pipeline (weights halved)": weights_cut}
    executors = {
        way: [
            ClusterPlanExecutor(*api.make_plan(model, rules, target), hosts) for rules in rule_sets
        ]
        for way, rule_sets in ways.items()
    }
    samples = [feeds[i % 4] for i in range(stream)]
    expected = [oracle_outputs(graph, sample)[1] for sample in feeds]
    worst = dict.fromkeys(ways, 0.0)
    latency, rates, stream_latency = {}, {way: [] for way in ways}, {way: [] for way in ways}
    for way, running in executors.items():
        latency[way] = running[0].run(feeds[0], repeat=repeat, warmup=2)
        worst[way] = max(worst[way], _worst_error(expected, [latency[way].outputs]))
    for _ in range(rounds):
        for way, running in executors.items():
            streamed = stream_through(running, samples, in_flight=2 * len(running) + 1)
            rates[way].append(streamed.rate)
            stream_latency[way].append(statistics.median(streamed.latencies))
            worst[way] = max(worst[way], _worst_error(expected, streamed.outputs))
    rows = []
    for way, running in executors.items():
        cut = cuts.get(way)
        crossing = crossing_bytes(graph, cut) if cut is not None else 0
        parts = [graph.nodes] if cut is None else [graph.nodes[:cut], graph.nodes[cut:]]
        held = [graph.parameter_bytes(part) for part in parts]
        ratios = [r / one for r, one in zip(rates[way], rates["one host"], strict=True)]
        rows.append(
            {
                "model": model,
                "way": way,
                "hosts": len({s.host for e in running for s in e.stages}),
                "latency_ms": latency[way].median_s * 1e3,
                "rate_per_s": statistics.median(rates[way]),
                "rate_min": min(rates[way]),
                "rate_max": max(rates[way]),
                "rate_over_one_host": statistics.median(ratios),
                "rounds": rounds,
                "stream_latency_ms": statistics.median(stream_latency[way]) * 1e3,
                "crossing_bytes": crossing,
                "transfer_predicted_ms": network.seconds("host0", "host1", crossing) * 1e3,
                "largest_share_of_weights": max(held) / max(graph.parameter_bytes(), 1),
                "max_rel_error_vs_onnxruntime": worst[way],
            }
        )
        for executor in running:
            executor.close()
    return rows


def _worst_error(
    expected: Sequence[dict[str, np.ndarray]], outputs: Sequence[dict[str, np.ndarray]]
) -> float:
    """The largest error relative to each output's scale; input i's are ``expected[i % 4]``."""
    worst = 0.0
    for index, got in enumerate(outputs):
        for name, array in expected[index % len(expected)].items():
            scale = max(float(np.abs(array).max()), 1e-12)
            worst = max(worst, float(np.abs(got[name] - array).max()) / scale)
    return worst


def main() -> None:
    """Measure the network and each way of running the models; write the CSVs and the PNG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["squeezenet", "resnet50"])
    parser.add_argument("--target", default=None, help="each host's target (no host part)")
    parser.add_argument("--stream", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--runs", type=int, default=9, help="timed transfers per size")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of streams")
    args = parser.parse_args()
    target = args.target or next(
        (str(t) for t in available_targets(api.devices()) if str(t) == "cpu@openvino:bf16"),
        "cpu@openvino",
    )
    with cluster("local:2") as hosts:
        network = measure_links(hosts, runs=args.runs)
        again = measure_links(hosts, runs=args.runs)
        rows = [
            row
            for model in args.models
            for row in plan_rows(
                model, target, hosts, network, args.stream, args.repeat, args.rounds
            )
        ]
    links = network_rows(network, again)
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
