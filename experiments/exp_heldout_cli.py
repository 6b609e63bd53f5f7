"""Experiment: every held-out model through the command line, as a user would type it.

``exp_heldout.py`` drives the suite through the Python API. This one runs
``python -m autopart`` itself on each model of ``experiments/heldout/`` (the cache must
hold it: ``heldout/fetch.py`` and ``heldout/export_torch.py``), with the
``--input-shape`` and ``--freeze`` arguments of ``suite.toml``:

1. ``info``;
2. ``run --check`` (the plan's outputs against the independent oracle);
3. ``tune`` on ``--targets`` (default: the targets the peers stand for on this machine,
   onnxruntime and OpenVINO at its installed precision, to keep the run short), its peers
   included;
4. ``bench`` of the same targets.

Each command's exit code, seconds and last line go to
``experiments/results/heldout_cli.csv``; a table is printed. A command a model cannot
pass is a row with its exit code, and the run goes on.

    python experiments/exp_heldout_cli.py [--models magika ppocr_cls] [--rounds 3]
        [--targets cpu@onnxruntime,cpu@openvino] [--profiles DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from _common import show, write_csv
from heldout.suite import HeldoutModel, load_suite, problem

sys.path.insert(0, str(Path(__file__).parent / "corpus"))
from corpus import peer_targets

STEPS = ("info", "run", "tune", "bench")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=None, help="default: the whole suite")
    parser.add_argument("--targets", default=None, help="default: the peers' targets here")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profiles", default=None, help="the profile store to reuse")
    parser.add_argument("--out", default="heldout_cli")
    args = parser.parse_args()
    args.targets = args.targets or peer_targets()
    return args


def commands(
    model: HeldoutModel, targets: str, rounds: int, profiles: str | None, work: Path
) -> dict[str, list[str]]:
    """Each step's command line for ``model``, with the suite's shapes and freezes."""
    path, shaped = str(model.path()), model.cli_arguments()
    stored = ["--profiles", profiles] if profiles else []
    search = ["--search-dir", str(work / "search")]
    timed = ["--targets", targets, "--rounds", str(rounds), *stored, *search]
    return {
        "info": ["info", path, *shaped],
        "run": ["run", path, *shaped, "--check"],
        "tune": ["tune", path, *shaped, *timed],
        "bench": ["bench", path, *shaped, *timed, "--csv", str(work / "bench.csv")],
    }


def run_step(argv: list[str]) -> tuple[int, float, str]:
    """``python -m autopart ARGV``: its exit code, seconds and last non-empty output line."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "autopart", *argv], capture_output=True, text=True, check=False
    )
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return done.returncode, time.perf_counter() - start, (lines[-1] if lines else "")[:160]


def main() -> None:
    """Run the steps on every model asked for; write the CSV and print the table."""
    args = _arguments()
    rows = []
    for model in load_suite().select(args.models):
        missing = problem(model)
        if missing is not None:
            rows.append({"model": model.name, "step": "fetch", "exit": 2, "last_line": missing})
            continue
        arguments = " ".join(model.cli_arguments())
        with tempfile.TemporaryDirectory() as work:
            steps = commands(model, args.targets, args.rounds, args.profiles, Path(work))
            for step in STEPS:
                code, seconds, last = run_step(steps[step])
                rows.append(
                    {"model": model.name, "step": step, "exit": code, "seconds": seconds,
                     "last_line": last, "arguments": arguments}
                )  # fmt: skip
                print(f"{model.name:20s} {step:6s} exit {code} {seconds:6.1f} s  {last[:90]}")
    table = pd.DataFrame(rows)
    write_csv(table, f"{args.out}.csv")
    passed = table.groupby("model")["exit"].apply(lambda codes: bool((codes == 0).all()))
    codes = table.pivot(index="model", columns="step", values="exit").reset_index()
    show(f"{args.out}: exit codes", codes)
    print(f"every step exited 0 on {int(passed.sum())} of {len(passed)} models")


if __name__ == "__main__":
    main()
