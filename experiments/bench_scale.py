"""Benchmark: how each stage of a tune grows with the graph, on generated graphs.

Two families (:mod:`autopart.testing.scale_models`): a transformer stack (blocks of 31
nodes on 16 x 64 tensors) and a chain of small elementwise ops, at 1k, 5k, 12k and 50k
nodes. For each size, one fresh process profiles the model (what the profile lacks: the
ops are shared across sizes, the calibration windows are each model's own), then another
fresh process tunes it from a cold start with that profile, as ``autopart tune --rounds 1
--no-peers`` does. Each stage is timed: import, profile (job planning and whatever is
left to measure), search (the costs and the search), measure (candidate partitions timed
whole) and verify (the candidate plans run); the peak resident memory of the process is
read after each stage (``ru_maxrss``, so it never falls). The ILP's size, time, gap and
segments are recorded on the search row.

Writes ``experiments/results/scale.csv`` (a row per family, size, run and stage),
``scale_fit.csv`` (each stage's growth exponent: the slope of log time on log nodes from
5k nodes up, ``scipy.stats.linregress``) and ``scale.png`` (time and peak memory against
nodes, log-log). The machine has two cores shared with other work: timings are indicative.

    python experiments/bench_scale.py [--sizes 1000 5000 12000 50000] [--families transformer
        chain] [--targets cpu@onnxruntime cpu@openvino] [--profiles DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
from _common import console, new_figure, plain_log, save_figure, show, write_csv
from scipy.stats import linregress

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ("transformer", "chain")
STAGES = ("import", "profile", "search", "measure", "verify")
FIT_FROM = 5000


def peak_mb() -> float:
    """This process's peak resident memory so far, in MB (``ru_maxrss`` is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_model(family: str, nodes: int, path: Path) -> None:
    """Write the generated model of ``family`` with about ``nodes`` nodes, unless it exists."""
    from autopart.testing.scale_models import op_chain, transformer_stack

    if not path.exists():
        model = transformer_stack(nodes) if family == "transformer" else op_chain(nodes)
        onnx.save(model, path)


class StageClock:
    """Stage times and peak memory from a tune's progress calls (first call opens a stage).

    Every stage closed is written to ``path`` at once, so a run stopped by the timeout
    still reports the stages it finished.
    """

    def __init__(self, path: Path) -> None:
        self.rows: list[dict] = []
        self.stage = ""
        self.opened = time.perf_counter()
        self.path = path
        self.nodes = 0

    def open(self, stage: str) -> None:
        """Close the current stage (if any) and open ``stage``."""
        now = time.perf_counter()
        if self.stage:
            self.rows.append(
                {"stage": self.stage, "seconds": now - self.opened, "peak_mb": peak_mb()}
            )
            partial = {"stages": self.rows, "unfinished": stage, "nodes": self.nodes}
            self.path.write_text(json.dumps(partial))
        self.stage, self.opened = stage, now

    def __call__(self, stage: str, done: int, total: int, label: str) -> None:
        """A progress callback: opens ``stage`` the first time it is named."""
        if stage != self.stage and stage in STAGES:
            self.open(stage)


def worker(args: argparse.Namespace) -> dict:
    """One fresh process: profile the model, or tune it from a cold start with its profile."""
    from autopart.loader import load_model

    make_model(args.family, args.nodes, Path(args.model))  # not timed: the file is the input
    clock = StageClock(args.json)
    clock.open("import")
    graph = load_model(args.model)
    clock.nodes = len(graph.nodes)
    result: dict = {"nodes": len(graph.nodes)}
    if args.phase == "profile":
        from autopart.tuning.profile_model import profile_model

        clock.open("profile")
        report, _, _ = profile_model(graph, args.targets, args.profiles, budget_s=args.budget)
        result.update(new=report.new, reused=report.reused, missing=report.missing)
    else:
        from autopart.tuning.options import TuneOptions
        from autopart.tuning.workflow import tune_model

        options = TuneOptions(
            targets=args.targets,
            profiles_dir=args.profiles,
            search_dir=args.search_dir,
            rounds=1,
            peers=False,
        )
        clock.open("profile")
        report = tune_model(graph, options, progress=clock)
        ilp = report.outcome.ilp
        chosen = next(row for row in report.rows if row.name == report.chosen)
        if ilp is not None:
            result.update(
                ilp_variables=ilp.variables,
                ilp_solve_s=ilp.solve_s,
                ilp_gap=ilp.gap,
                ilp_status=ilp.status,
                ilp_segments=ilp.segments,
                ilp_kinds=ilp.kinds,
            )
        result.update(
            chosen=report.chosen,
            partitions=len(report.plan.partitions),
            measured_ms=None if chosen.measured_s is None else chosen.measured_s * 1e3,
            predicted_ms=chosen.predicted_s * 1e3,
        )
    clock.open("")
    result["stages"] = clock.rows
    return result


def run_one(family: str, nodes: int, phase: str, args: argparse.Namespace, folder: Path) -> dict:
    """Run :func:`worker` in a fresh process; its stages as rows."""
    model = folder / f"{family}_{nodes}.onnx"
    out = folder / f"{family}_{nodes}_{phase}.json"
    command = [
        sys.executable, __file__, "--worker", phase, "--model", str(model), "--json", str(out),
        "--family", family, "--nodes", str(nodes),
        "--profiles", str(args.profiles), "--search-dir", str(folder / "search"),
        "--targets", *args.targets,
    ]  # fmt: skip
    if args.budget is not None:
        command += ["--budget", str(args.budget)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    try:
        done = subprocess.run(command, check=False, env=env, cwd=ROOT, timeout=args.timeout)
        if done.returncode:
            console.print(f"[red]{family} {nodes} {phase}: exit {done.returncode}[/red]")
    except subprocess.TimeoutExpired:
        console.print(f"[red]{family} {nodes} {phase}: stopped after {args.timeout:g} s[/red]")
    result = json.loads(out.read_text()) if out.exists() else {"stages": []}
    result["wall_s"] = time.perf_counter() - started
    return result


def fit(frame: pd.DataFrame) -> pd.DataFrame:
    """Each (family, run, stage)'s exponent: slope of log seconds on log nodes, from 5k up."""
    rows = []
    upper = frame[frame["nodes"] >= FIT_FROM * 0.95]
    for (family, run, stage), group in upper.groupby(["family", "run", "stage"], sort=False):
        if group["nodes"].nunique() < 2:
            continue
        time_fit = linregress(np.log(group["nodes"]), np.log(group["seconds"].clip(lower=1e-3)))
        memory_fit = linregress(np.log(group["nodes"]), np.log(group["peak_mb"]))
        rows.append(
            {
                "family": family, "run": run, "stage": stage, "sizes": group["nodes"].nunique(),
                "time_exponent": time_fit.slope, "r2": time_fit.rvalue**2,
                "memory_exponent": memory_fit.slope,
            }
        )  # fmt: skip
    return pd.DataFrame(rows)


def plot(frame: pd.DataFrame) -> Path:
    """Time and peak memory of each stage of the tune against nodes, per family (log-log)."""
    figure = new_figure(12, 8)
    axes = figure.subplots(2, len(FAMILIES), squeeze=False)
    tune = frame[frame["run"] == "tune"]
    for column, family in enumerate(FAMILIES):
        rows = tune[tune["family"] == family]
        for stage in STAGES:
            line = rows[rows["stage"] == stage].sort_values("nodes")
            if line.empty:
                continue
            axes[0][column].plot(line["nodes"], line["seconds"], marker="o", label=stage)
            axes[1][column].plot(line["nodes"], line["peak_mb"], marker="o", label=stage)
        for row, label in ((0, "seconds"), (1, "peak resident MB (after the stage)")):
            ax = axes[row][column]
            ax.set_xscale("log")
            ax.set_yscale("log")
            plain_log(ax, "x", "y")
            ax.set_xlabel("nodes")
            ax.set_ylabel(label)
            ax.grid(True, which="both", alpha=0.3)
        axes[0][column].set_title(f"{family}: tune from a cold start, with its profile")
        axes[0][column].legend()
    return save_figure(figure, "scale.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 5000, 12000, 50000])
    parser.add_argument("--families", nargs="*", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--targets", nargs="*", default=["cpu@onnxruntime", "cpu@openvino"])
    parser.add_argument("--profiles", type=Path, default=None, help="default: a fresh folder")
    parser.add_argument("--budget", type=float, default=None, help="profiling budget, seconds")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per run, seconds")
    parser.add_argument("--worker", choices=("profile", "tune"), help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--family", help=argparse.SUPPRESS)
    parser.add_argument("--nodes", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--search-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.phase = args.worker
        args.json.write_text(json.dumps(worker(args)))
        return
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as temporary:
        folder = Path(temporary)
        args.profiles = args.profiles or folder / "profiles"
        rows, runs = [], []
        for family in args.families:
            for size in args.sizes:  # one size at a time: the machine has two cores
                for phase in ("profile", "tune"):
                    result = run_one(family, size, phase, args, folder)
                    stages = result.pop("stages")
                    runs.append({"family": family, "size": size, "run": phase, **result})
                    for stage in stages:
                        nodes = result.get("nodes", size)
                        rows.append({"family": family, "nodes": nodes, "run": phase, **stage})
                    console.print(runs[-1])
    frame = pd.DataFrame(rows)
    summary = pd.DataFrame(runs)
    console.print(f"stages: {write_csv(frame, 'scale.csv')}")
    console.print(f"runs: {write_csv(summary, 'scale_runs.csv')}")
    exponents = fit(frame)
    if not exponents.empty:
        console.print(f"exponents: {write_csv(exponents, 'scale_fit.csv')}")
        show("growth exponents from 5k nodes up (time and peak memory)", exponents)
    console.print(f"plot: {plot(frame)}")


if __name__ == "__main__":
    main()
