"""Experiment: how far apart two copies of one configuration time, alone and amid a bench.

``bench`` and ``tune`` decide between runners by the ratio of their medians over paired
interleaved rounds (:func:`autopart.tuning.choice.ratio_interval`). Two copies of the same
configuration should give a ratio of 1; how far they stray is the floor under every such
decision. For each model, OpenVINO as installed is compiled twice (``copy A`` and
``copy B``, each its own compiled model and infer request) and timed by
:func:`autopart.tuning.verify.measure_plans`, the bench's own rounds, in three settings:

- ``pair``: the two copies alone;
- ``crowd``: amid every peer and every single-target plan of the model, as ``bench`` runs
  them, each runner followed by the pause its library needs (``linger_s``);
- ``crowd, no pause``: the same, but no pause after onnxruntime's runs, whose pool threads
  spin on for a while after each run
  (:attr:`~autopart.targets.onnxruntime.settings.OnnxruntimeSettings.spin_linger_s`).

Per setting it reports copy B over copy A (ratio of medians, its 95% interval) and the
spread of the per-round ratios (p10, p90). Run it on a quiet machine: other work on the two
cores widens every figure.

Writes ``experiments/results/same_config_spread.csv``.

    python experiments/exp_same_config_spread.py [--models squeezenet resnet50 ddddocr_ocr]
        [--rounds 15]
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Mapping

import numpy as np
import pandas as pd
from _common import console, show, write_csv
from heldout.suite import load_suite

from autopart import api
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.plan.schema import Plan
from autopart.targets.openvino.peer import AS_INSTALLED
from autopart.targets.peer import PeerInputs, Runner
from autopart.targets.resolve import available_targets
from autopart.tuning.choice import ratio_interval
from autopart.tuning.peers import peer_lingers, peers
from autopart.tuning.verify import Measured, measure_plans

COPY_A, COPY_B = "copy A", "copy B"
SETTINGS = ("pair", "crowd", "crowd, no pause")


def load(name: str) -> tuple[str, Graph]:
    """The model's path (or zoo name) and its graph, with the held-out suite's shapes."""
    held = {m.name: m for m in load_suite().models}
    if name not in held:
        return name, api.load(name)
    model = held[name]
    shapes = {k: tuple(v) for k, v in model.input_shapes.items()}
    path = str(model.path())
    return path, api.load(path, input_shapes=shapes or None, freeze=model.freeze or None)


def single_plans(graph: Graph) -> dict[str, Plan]:
    """Every available target's single-target plan of ``graph``, by ``single:<target>``."""
    plans: dict[str, Plan] = {}
    last = len(graph.nodes) - 1
    for target in (str(t) for t in available_targets()):
        with contextlib.suppress(Exception):  # a target that cannot run the model sits out
            plans[f"single:{target}"] = api.make_plan(graph, [f"idx:0-{last}={target}"])[0]
    return plans


def runners(model: str, graph: Graph, setting: str) -> tuple[dict[str, Runner], dict[str, float]]:
    """The copies, plus the peers in a crowd; and the pause after each runner."""
    inputs = PeerInputs.of(graph)
    chosen = {COPY_A: AS_INSTALLED.build(model, inputs), COPY_B: AS_INSTALLED.build(model, inputs)}
    lingers = peer_lingers()
    if setting != "pair":
        chosen.update(peers(model, inputs)[0])
    if setting == "crowd, no pause":
        lingers = {name: 0.0 for name in lingers}
    return chosen, lingers


def spread(measured: Mapping[str, Measured]) -> dict[str, float]:
    """Copy B over copy A: ratio of medians, its interval, and the per-round ratio spread."""
    a, b = measured[COPY_A], measured[COPY_B]
    interval = ratio_interval(b, a)
    per_round = np.asarray(b.round_medians) / np.asarray(a.round_medians)
    return {
        "ratio": interval.ratio,
        "low": interval.low,
        "high": interval.high,
        "round_p10": float(np.percentile(per_round, 10)),
        "round_p90": float(np.percentile(per_round, 90)),
        "rounds": interval.rounds,
        "copy_a_ms": a.median_s * 1e3,
        "copy_b_ms": b.median_s * 1e3,
    }


def measure_model(name: str, rounds: int) -> list[dict[str, object]]:
    """One row per setting for the model ``name``."""
    model, graph = load(name)
    feeds = random_inputs(graph, 0)
    rows: list[dict[str, object]] = []
    for setting in SETTINGS:
        console.print(f"{name}: {setting}")
        chosen, lingers = runners(model, graph, setting)
        plans = single_plans(graph) if setting != "pair" else {}
        measured = measure_plans(
            graph, plans, feeds, rounds, peers=chosen, peer_linger_s=lingers, min_timed_s=0.0
        )
        rows.append({"model": name, "setting": setting, "runners": len(measured),
                     **spread(measured)})  # fmt: skip
    return rows


def main() -> None:
    """Measure every model named, write the CSV and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["squeezenet", "resnet50", "ddddocr_ocr"])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    table = pd.DataFrame([row for name in args.models for row in measure_model(name, args.rounds)])
    write_csv(table, "same_config_spread.csv")
    show("copy B / copy A of OpenVINO as installed", table)


if __name__ == "__main__":
    main()
