"""What a one-partition plan adds to its library alone, per run: the executor's overhead.

A peer (a library as installed: onnxruntime alone, openvino alone) stands for the
single-target plan that compiles the whole model as that library does
(:func:`autopart.tuning.peers.peer_equivalents`). The plan runs through autopart's plan
executor, which feeds and collects the partition's tensors; the peer calls the library
directly. For each model and each such peer, the plan, the peer and a second copy of the
plan are timed in one interleaved measurement: ``overhead_us`` is the plan's median minus
the peer's, ``ratio`` the plan's median over the peer's, with its 95% interval over the
paired rounds, and ``noise_floor`` how far the plan's second copy is from the first. The
tune times a plan as its peer from ``VerifySettings.timed_as_peer_s`` on.

    python experiments/exp_plan_overhead.py [--rounds 20] [MODEL ...]

Writes ``experiments/results/plan_overhead.csv`` and prints the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from autopart.ir.feeds import random_inputs
from autopart.ir.target import VirtualDevice
from autopart.loader import load_model
from autopart.targets.registry import declared_peers
from autopart.tuning.choice import ratio_interval
from autopart.tuning.peers import PeerInputs, peers
from autopart.tuning.single_plans import SinglePlans
from autopart.tuning.verify import measure_plans

sys.path.insert(0, str(Path(__file__).parent))
from _common import show, write_csv

FIXTURES = Path(__file__).parents[1] / "tests" / "fixtures"
DEFAULT_MODELS = [
    str(FIXTURES / "bert_tiny.onnx"), str(FIXTURES / "mobilenetv3_small.onnx"),
    "squeezenet", str(FIXTURES / "efficientnet_b0.onnx"), "resnet50", "vgg19",
]  # fmt: skip


def model_rows(model: str, rounds: int) -> list[dict[str, object]]:
    """One row per peer that stands for a plan: the plan's time over the peer's."""
    graph = load_model(model)
    feeds = random_inputs(graph, 0)
    rows: list[dict[str, object]] = []
    for peer in declared_peers(available=True):
        if not peer.stands_for_plan or peer.variant or peer.tool:
            continue
        precision = peer.precision()
        target = VirtualDevice(device="cpu", codegen=peer.codegen, precision=precision)
        fallback = "cpu@onnxruntime"  # a whole-device target that runs every node
        plan = SinglePlans(graph, [str(target), fallback], model).plan_of(target)
        runners, _ = peers(model, PeerInputs.of(graph), only=peer.name)
        if plan is None or peer.name not in runners or len(plan.partitions) != 1:
            continue
        plans = {"plan": plan, "plan again": plan}
        measured = measure_plans(graph, plans, feeds, rounds=rounds, peers=runners)
        mine, alone, again = measured["plan"], measured[peer.name], measured["plan again"]
        interval = ratio_interval(mine, alone)
        floor = ratio_interval(again, mine)
        rows.append({
            "model": Path(model).stem, "peer": peer.name, "target": str(target),
            "plan_ms": mine.median_s * 1e3, "peer_ms": alone.median_s * 1e3,
            "overhead_us": (mine.median_s - alone.median_s) * 1e6,
            "ratio": interval.ratio, "ratio_low": interval.low, "ratio_high": interval.high,
            "noise_floor": abs(floor.ratio - 1),
        })  # fmt: skip
    return rows


def main() -> None:
    """Time each model's one-partition plans against their peers; write and show the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", default="plan_overhead", help="the CSV's name, without .csv")
    args = parser.parse_args()
    rows = [row for model in args.models for row in model_rows(model, args.rounds)]
    frame = pd.DataFrame(rows)
    write_csv(frame, f"{args.out}.csv")
    show("a one-partition plan over its library alone", frame)


if __name__ == "__main__":
    main()
