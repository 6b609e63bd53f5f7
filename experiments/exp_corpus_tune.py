"""``autopart tune`` across the corpus: no traceback, and how the kept plan compares with the peers.

Each model of ``experiments/corpus`` (fetched into its cache) is tuned through the command
line as a user tunes it, one process per model, smallest file first::

    python -m autopart tune MODEL --input-shape ... --freeze ... --inputs samples.npz \\
        --targets T1,T2 --rounds 3 --profiles P --search-dir S -o plan.json

at the tune's default wall budget (``--budget`` here passes one on; before 2026-11-28's
third session ``--budget 5`` bounded the search alone, and the sweep passed it).

``samples.npz`` holds two samples drawn from the model's input specs (with a leading sample
axis), as a user with data passes them. Each model gets one status:

- ``ok``: a plan was saved; the row has the kept plan, its measured median, its error and
  the tolerance it reports, and the peers' medians timed in the same rounds;
- ``refused``: one ``error:`` line and exit 2 (the line names the construct);
- ``crash``: a traceback, a signal or any other exit;
- ``timeout``: no answer within ``--timeout`` seconds (profiling every op of a large model
  on every target is issue #45's to bound).

``vs_best_peer`` is the tune's own ratio of the kept plan to the quickest peer within the
tolerance, over the rounds both ran (``tune`` times the peers beside its candidates;
``report.json``'s ``vs_best_peer``); a tool peer such as ``openvino + nncf int8`` whose
error is beyond the tolerance is no bar. It is not ``bench``'s figure, which also times
the plan twice for the noise floor. Rows without ``paired`` True (written before
session 30, 2026-12-06) hold the plain medians' ratio over every peer instead. ``raced``
False: the race of one plan gave way to the screen's timings (session 31), so the ratio is
of runs timed apart. Writes
``experiments/results/<tag>.csv`` (it grows model by model) and prints a summary.

    python experiments/exp_corpus_tune.py                   # the three peers' targets
    python experiments/exp_corpus_tune.py 'tv_*' --timeout 300
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent / "corpus"))
from corpus import (
    CorpusModel,
    crash_detail,
    load_corpus,
    make_inputs,
    peer_targets,
    problem,
    run_cli,
    save_rows,
    select,
)

RESULTS = Path(__file__).parent / "results"
SAMPLES = 2  # calibration and evaluation samples drawn from the input specs


def samples(model: CorpusModel, path: Path) -> None:
    """Write :data:`SAMPLES` samples of the model's non-frozen inputs, stacked on axis 0."""
    draws = [make_inputs(model, seed) for seed in range(SAMPLES)]
    frozen = {spec.name for spec in model.inputs if spec.freeze}
    stacked = {k: np.stack([d[k] for d in draws]) for k in draws[0] if k not in frozen}
    np.savez(path, **stacked)


def tune_one(model: CorpusModel, targets: str, work: Path, args: argparse.Namespace) -> dict:
    """One ``autopart tune`` of ``model``: its status, time and what the report says."""
    inputs, plan = work / "samples.npz", work / "plan.json"
    samples(model, inputs)
    command = [
        sys.executable, "-m", "autopart", "tune", str(model.path()), *model.cli_arguments(),
        "--inputs", str(inputs), "--targets", targets,
        *([] if args.budget is None else ["--budget", str(args.budget)]),
        "--rounds", str(args.rounds), "--profiles", str(args.profiles),
        "--search-dir", str(work / "search"), "-o", str(plan),
    ]  # fmt: skip
    result = run_cli(command, args.timeout)
    reports = list((work / "search").glob("*/report.json"))
    if result["status"] == "ok" and (not plan.exists() or not reports):
        result.update(status="crash", detail=crash_detail(0, result["stderr"]))
    if result["status"] != "ok":
        return {k: v for k, v in result.items() if k != "stderr"}
    seconds = result["seconds"]
    return {"status": "ok", "seconds": seconds, **summary(plan, reports[0])}


def summary(plan_path: Path, report_path: Path) -> dict[str, Any]:
    """The kept plan, its measurement and tolerance, and the peers' medians."""
    report = json.loads(report_path.read_text())
    plan = json.loads(plan_path.read_text())
    measured = plan.get("measured") or {}
    peers = report.get("peers", {})
    best_name = report.get("best_peer") or ""
    median = measured.get("median_s", math.nan)
    kinds = {row["name"]: row["kind"] for row in report["plans"]}
    return {
        "chosen": report["chosen"],
        "kind": kinds.get(report["chosen"], ""),
        "partitions": len(plan.get("partitions", [])),
        "median_s": median,
        "best_peer": best_name,
        "best_peer_s": peers.get(best_name, math.nan),
        "vs_best_peer": report.get("vs_best_peer") or math.nan,
        "paired": True,
        "raced": not any(n.startswith("the race did not run") for n in report.get("notes", [])),
        "error": measured.get("max_error", math.nan),
        "tolerance": measured.get("tolerance", math.nan),
        "within": (  # None: the plan saved was not measured
            None
            if "max_error" not in measured
            else measured["max_error"] <= measured.get("tolerance", -1.0)
        ),
        **{f"peer:{name}": seconds for name, seconds in peers.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="names, or prefixes ending in * (default: all)")
    parser.add_argument(
        "--targets", default=None, help="default: the targets the peers stand for here"
    )
    parser.add_argument("--budget", type=float, default=None, help="tune's wall budget (s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per model")
    parser.add_argument("--profiles", type=Path, default=Path("profiles"))
    parser.add_argument("--tag", default="corpus_tune")
    parser.add_argument("--resume", action="store_true", help="keep the tag's rows, skip them")
    args = parser.parse_args()
    args.targets = args.targets or peer_targets()
    models = [m for m in select(load_corpus(), args.models) if problem(m) is None]
    models.sort(key=lambda m: m.path().stat().st_size)
    RESULTS.mkdir(exist_ok=True)
    csv = RESULTS / f"{args.tag}.csv"
    rows: list[dict[str, Any]] = []
    if args.resume and csv.exists():
        rows = pd.read_csv(csv).to_dict("records")
    done = {row["model"] for row in rows}
    # the CSV grows model by model: a stopped run keeps what it did
    for model in (m for m in models if m.name not in done):
        with tempfile.TemporaryDirectory() as folder:
            result = tune_one(model, args.targets, Path(folder), args)
        row = {"model": model.name, "source": model.source, "family": model.family, **result}
        rows.append(row)
        ratio = row.get("vs_best_peer", math.nan)
        print(
            f"{model.name:<40} {row['status']:<8} {row.get('seconds', math.nan):6.1f} s "
            f"{row.get('chosen', '')[:32]:<32} {ratio:6.3f}x {row.get('detail', '')}",
            flush=True,
        )
        save_rows(rows, csv)
    frame = pd.DataFrame(rows)
    print(frame["status"].value_counts().to_string())
    ok = frame[frame["status"] == "ok"]
    if len(ok):
        ratios = ok["vs_best_peer"].dropna()
        print(
            f"vs best peer: median {ratios.median():.3f}x, worst {ratios.max():.3f}x, "
            f"over 1.02x: {(ratios > 1.02).sum()} of {len(ratios)}; "
            f"outside its own tolerance: {(ok['within'] == False).sum()}, "  # noqa: E712
            f"not measured: {ok['within'].isna().sum()}"
        )
    print(f"wrote {csv} ({len(models)} models)")


if __name__ == "__main__":
    main()
