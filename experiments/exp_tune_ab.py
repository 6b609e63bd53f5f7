"""Experiment: this checkout's ``autopart tune`` against an earlier commit's, interleaved.

Each corpus model is tuned from empty profile and search folders, once per checkout in
each pair, the two checkouts alternating which runs first (pair 1: before, after; pair 2:
after, before; ...), one process at a time. The earlier commit runs from a git worktree
made for the run (``git worktree add --detach``, removed at the end). One row per tune:
wall seconds, the plan kept and its partitions, its ratio to the best peer in the tune's
own race, the peak memory the tune prints, which plans the budget left out of the race,
and the race's verdict (its ``kept ...`` note).

Writes ``experiments/results/<tag>.csv`` and prints the medians per model and checkout.

    python experiments/exp_tune_ab.py --before HEAD~1 --models w_basic_pitch --pairs 3 \\
        --targets cpu@onnxruntime,cpu@openvino --tag race_order_1206
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from _common import console, show, write_csv

sys.path.insert(0, str(Path(__file__).parent / "corpus"))
from corpus import CorpusModel, load_corpus, select

ROOT = Path(__file__).resolve().parents[1]
LEFT_OUT = "not raced, the wall budget left could not cover their heat: "


def tune_once(
    model: CorpusModel, checkout: Path, work: Path, args: argparse.Namespace
) -> dict[str, object]:
    """Tune ``model`` with the package in ``checkout``, from empty folders under ``work``."""
    command = [
        sys.executable, "-m", "autopart", "tune", str(model.path()), *model.cli_arguments(),
        "--targets", args.targets, "--profiles", str(work / "profiles"),
        "--search-dir", str(work / "search"), "-o", str(work / "plan.json"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(checkout), "COLUMNS": "200"}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout)
    seconds = time.perf_counter() - started
    text = " ".join((done.stdout + done.stderr).split())
    chosen = re.search(r"chosen: (\S+)", text)
    ratio = re.search(r"chosen / best peer: ([0-9.]+)x", text)
    peak = re.search(r"peak memory: ([0-9.]+) GiB", text)
    left = re.search(re.escape(LEFT_OUT) + r"([^.]*?) note:", text + " note:")
    kept = re.search(r"note: (kept .*?)(?= note:| chosen:)", text)
    plan = work / "plan.json"
    partitions = len(json.loads(plan.read_text())["partitions"]) if plan.exists() else 0
    return {
        "status": "ok" if done.returncode == 0 else f"exit {done.returncode}",
        "seconds": seconds,
        "chosen": chosen.group(1) if chosen else "",
        "vs_best_peer": float(ratio.group(1)) if ratio else float("nan"),
        "peak_gib": float(peak.group(1)) if peak else float("nan"),
        "partitions": partitions,
        "left_out": left.group(1).strip() if left else "",
        "kept": kept.group(1) if kept else "",
        "detail": "" if done.returncode == 0 else " ".join(done.stderr.strip().splitlines()[-1:]),
    }


def main() -> None:
    """Run the pairs and write the CSV."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the earlier commit (any git revision)")
    parser.add_argument("--models", required=True, help="corpus model names, comma-separated")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--targets", default="cpu@onnxruntime,cpu@openvino")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--tag", required=True)
    args = parser.parse_args()
    models = select(load_corpus(), args.models.split(","))
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="autopart-ab-") as scratch:
        before = Path(scratch) / "before"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(before), args.before],
            check=True, capture_output=True,
        )  # fmt: skip
        try:
            for model in models:
                for pair in range(args.pairs):
                    order = [("before", before), ("after", ROOT)]
                    for side, checkout in order if pair % 2 == 0 else order[::-1]:
                        work = Path(scratch) / f"{model.name}-{pair}-{side}"
                        row = tune_once(model, checkout, work, args)
                        rows.append({"model": model.name, "pair": pair, "side": side, **row})
                        console.print(rows[-1])
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)],
                check=False, capture_output=True,
            )  # fmt: skip
    frame = pd.DataFrame(rows)
    path = write_csv(frame, f"{args.tag}.csv")
    summary = frame.groupby(["model", "side"])[["seconds", "vs_best_peer", "peak_gib"]].median()
    show(f"medians ({path})", summary.reset_index())


if __name__ == "__main__":
    main()
