"""A plan in a minute: `autopart tune` as a new user runs it, default against --thorough.

Each model is tuned from an empty profile folder twice, through the command line, on every
target found: once as installed (the screen, the 60 s default --budget, the race that
drops what is behind) and once with ``--thorough`` (every target profiled in full, no
wall budget: the tune before issue #45). The two runs of one model follow each other, in
alternating order from model to model. Each row gives the wall time, the peak resident
memory the tune reports, the plan kept and its ratio to the best peer in the tune's own
race, and what the screen dropped. Then the two plans kept are timed side by side in one
interleaved measurement, with the default plan compiled twice for the noise floor:
``thorough_vs_default`` is the thorough plan's median over the default plan's, and
``noise_floor`` how far the default plan's second copy is from its first; the ``_low`` and
``_high`` columns bound both ratios over the paired rounds (95%), and ``met`` says the
default plan is within the noise floor of the thorough one or better (the ratio at least
1 - the floor, or its interval reaching 1: the thorough plan not shown quicker).

    python experiments/bench_minute.py --tag minute_1128 resnet50 densenet121
    python experiments/bench_minute.py --tag minute_1128 --corpus tv_resnet18

Writes ``experiments/results/<tag>.csv`` (one row per model and mode) and prints the
table with each model's time and memory ratios (default over thorough).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.loader import load_model
from autopart.plan.schema import Plan
from autopart.tuning.choice import ratio_interval
from autopart.tuning.verify import measure_plans

sys.path.insert(0, str(Path(__file__).parent / "corpus"))
from corpus import load_corpus, run_cli, save_rows, select

RESULTS = Path(__file__).parent / "results"
MODES = {"default": [], "thorough": ["--thorough"]}


def parsed(stdout: str) -> dict[str, Any]:
    """The figures a tune prints: the plan kept, its ratio to the best peer, peak memory."""
    text = " ".join(stdout.split())  # rich wraps long lines
    chosen = re.search(r"chosen: (\S+)", text)
    ratio = re.search(r"chosen / best peer: ([\d.]+)x", text)
    peak = re.search(r"peak memory: ([\d.]+) GiB", text)
    dropped = re.search(r"dropped (\d+) of (\d+) targets", text)
    return {
        "chosen": chosen.group(1) if chosen else "",
        "vs_best_peer": float(ratio.group(1)) if ratio else float("nan"),
        "peak_gib": float(peak.group(1)) if peak else float("nan"),
        "dropped": f"{dropped.group(1)}/{dropped.group(2)}" if dropped else "",
        "budget_cut": "cut short" in text,
    }


def tune_once(model: str, extra: list[str], mode: str, work: Path, timeout: float) -> dict:
    """One tune of ``model`` in ``mode`` from an empty profile folder; its row."""
    folder = work / mode
    command = [
        sys.executable, "-m", "autopart", "tune", model, *extra, *MODES[mode],
        "--profiles", str(folder / "profiles"), "--search-dir", str(folder / "search"),
        "-o", str(folder / "plan.json"),
    ]  # fmt: skip
    done = run_cli(command, timeout)
    row: dict[str, Any] = {"mode": mode, "status": done["status"], "detail": done["detail"]}
    row["seconds"] = done.get("seconds", float("nan"))
    if done["status"] == "ok":
        row.update(parsed(done.get("stdout", "")))
    return row


def compare(graph: Graph, work: Path, rounds: int = 15) -> dict[str, float]:
    """The two modes' plans timed in one interleaved run, the default plan twice."""
    paths = {mode: work / mode / "plan.json" for mode in MODES}
    if not all(path.is_file() for path in paths.values()):
        return {}
    plans = {
        "default": Plan.load(paths["default"]),
        "default again": Plan.load(paths["default"]),
        "thorough": Plan.load(paths["thorough"]),
    }
    measured = measure_plans(graph, plans, random_inputs(graph, 0), rounds=rounds)
    if set(measured) != set(plans):
        return {}
    default = measured["default"].median_s
    interval = ratio_interval(measured["thorough"], measured["default"])
    noise = ratio_interval(measured["default again"], measured["default"])
    floor = abs(measured["default again"].median_s / default - 1.0)
    ratio = measured["thorough"].median_s / default
    return {
        "thorough_vs_default": ratio,
        "noise_floor": floor,
        "thorough_vs_default_low": interval.low,
        "thorough_vs_default_high": interval.high,
        "noise_low": noise.low,
        "noise_high": noise.high,
        "met": bool(ratio >= 1.0 - floor or interval.high >= 1.0),
    }


def main() -> None:
    """Tune each model in both modes; write the CSV and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="zoo names or .onnx paths")
    parser.add_argument("--corpus", nargs="*", default=[], help="corpus model names")
    parser.add_argument("--tag", default="minute")
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    jobs = [(name, name, []) for name in args.models]
    graphs = {name: lambda name=name: load_model(name) for name in args.models}
    for model in select(load_corpus(), args.corpus) if args.corpus else []:  # none: no corpus
        jobs.append((model.name, str(model.path()), model.cli_arguments()))
        graphs[model.name] = lambda m=model: load_model(str(m.path()), m.input_shapes(), m.frozen())
    rows: list[dict[str, Any]] = []
    csv = RESULTS / f"{args.tag}.csv"
    for index, (name, path, extra) in enumerate(jobs):
        order = list(MODES) if index % 2 == 0 else list(reversed(MODES))
        with tempfile.TemporaryDirectory() as work:
            for mode in order:
                row = {"model": name, **tune_once(path, extra, mode, Path(work), args.timeout)}
                rows.append(row)
                print(row, flush=True)
                save_rows(rows, csv)
            compared = compare(graphs[name](), Path(work))
            for row in rows[-len(order) :]:
                row.update(compared)
            print(name, compared, flush=True)
            save_rows(rows, csv)
    table = pd.DataFrame(rows)
    wide = table.pivot(index="model", columns="mode", values=["seconds", "peak_gib"])
    ratios = pd.DataFrame(
        {
            "time_ratio": wide[("seconds", "default")] / wide[("seconds", "thorough")],
            "memory_ratio": wide[("peak_gib", "default")] / wide[("peak_gib", "thorough")],
        }
    )
    print(table.to_string(index=False))
    print(ratios.to_string())
    print(f"wrote {csv}")


if __name__ == "__main__":
    main()
