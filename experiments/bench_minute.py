"""A plan in a minute: `autopart tune` as a new user runs it, default against --thorough.

Each model is tuned from an empty profile folder twice, through the command line, on every
target found: once as installed (the screen, the 60 s default --budget, the race that
drops what is behind) and once with ``--thorough`` (every target profiled in full, no
wall budget: the tune before issue #45). The two runs of one model follow each other, in
alternating order from model to model. Each row gives the wall time, the peak resident
memory the tune reports, the plan kept and its ratio to the best peer in the tune's own
race, and what the screen dropped.

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
    ]  # fmt: skip
    done = run_cli(command, timeout)
    row: dict[str, Any] = {"mode": mode, "status": done["status"], "detail": done["detail"]}
    row["seconds"] = done.get("seconds", float("nan"))
    if done["status"] == "ok":
        row.update(parsed(done.get("stdout", "")))
    return row


def main() -> None:
    """Tune each model in both modes; write the CSV and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="zoo names or .onnx paths")
    parser.add_argument("--corpus", nargs="*", default=[], help="corpus model names")
    parser.add_argument("--tag", default="minute")
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    jobs = [(name, name, []) for name in args.models]
    for model in select(load_corpus(), args.corpus):
        jobs.append((model.name, str(model.path()), model.cli_arguments()))
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
