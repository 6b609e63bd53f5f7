"""Experiment: how many runs a runner needs, after another one ran, to reach its steady time.

The race and ``bench`` time each runner in blocks that follow another runner's block
(:func:`autopart.tuning.verify.block_for`). The first runs after the switch pay for caches,
sleeping pool threads and clocks the other runner left behind. For each model and each of
onnxruntime alone and OpenVINO as installed, every round runs the other library 5 times,
waits the pause the bench waits after it (``linger_s``), then times 16 runs one by one.
Per run index k it reports the median over rounds of run k divided by the steady time (the
median of runs 13-16). The block's settle rule (``settle_runs``, ``settle_s`` in
:class:`autopart.tuning.settings.VerifySettings`) comes from this table.

Writes ``experiments/results/settle.csv``. Run it on a quiet machine.

    python experiments/exp_settle.py [--models shufflenet squeezenet resnet50 ...] [--rounds 12]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _common import show, write_csv

from autopart import api
from autopart.ir.feeds import random_inputs
from autopart.targets.peer import Runner
from autopart.tuning.peers import peer_lingers, peers
from autopart.zoo import resolve_model

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
DEFAULT_MODELS = [
    "squeezenet",
    "shufflenet",
    "resnet50",
    str(FIXTURES / "mobilenetv3_small.onnx"),
    str(FIXTURES / "transformer_encoder.onnx"),
]
RUNS = 16
STEADY = 4  # the last runs of each round, whose median is the steady time
PAIRS = (("openvino alone", "onnxruntime alone"), ("onnxruntime alone", "openvino alone"))


def settle_curve(
    runner: Runner, other: Runner, pause_s: float, feeds: dict, rounds: int
) -> list[float]:
    """Median over ``rounds`` of each run's time after ``other`` ran and a pause, in s."""
    per_run: list[list[float]] = [[] for _ in range(RUNS)]
    for _ in range(rounds):
        for _ in range(5):
            other(feeds)
        time.sleep(pause_s)
        for samples in per_run:
            start = time.perf_counter()
            runner(feeds)
            samples.append(time.perf_counter() - start)
    return [float(np.median(samples)) for samples in per_run]


def model_rows(model: str, rounds: int) -> list[dict]:
    """One row per (runner, run index) for ``model``."""
    graph = api.load(model)
    feeds = dict(random_inputs(graph, 0))
    runners, _ = peers(resolve_model(model))
    lingers = peer_lingers()
    rows = []
    for name, other in PAIRS:
        if name not in runners or other not in runners:
            continue
        curve = settle_curve(runners[name], runners[other], lingers[other], feeds, rounds)
        steady = float(np.median(curve[-STEADY:]))
        for index, seconds in enumerate(curve, start=1):
            rows.append(
                {
                    "model": Path(model).stem,
                    "runner": name,
                    "after": other,
                    "run": index,
                    "median_ms": seconds * 1e3,
                    "steady_ms": steady * 1e3,
                    "vs_steady": seconds / steady,
                }
            )
    return rows


def main() -> None:
    """Measure every model's settle curves, write the CSV and print runs 1-8."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    table = pd.DataFrame([row for model in args.models for row in model_rows(model, args.rounds)])
    write_csv(table, "settle.csv")
    wide = table[table.run <= 8].pivot_table(
        index=["model", "runner", "steady_ms"], columns="run", values="vs_steady"
    )
    show("run k after another runner, over the steady time", wide.reset_index())


if __name__ == "__main__":
    main()
