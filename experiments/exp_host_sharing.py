"""A stream's predicted rate against its measured one, with and without the hosts' sharing.

``autopart tune MODEL --cluster local:2 --objective throughput`` runs ``--tunes`` times per
model (profiles, network and sharing measured by the first and reused). For every
candidate the tune ran, a row gives its measured rate (once the stream is full), the rate
the search predicted (which prices what the two hosts lose while both stream,
:mod:`autopart.costmodel.sharing`), and the rate it would have predicted without that:
the prediction with the efficiency taken out again. On equal hosts both are exact
inversions: replicas predict ``2 * share / (w + overhead)`` for an input taking ``w``,
a pipeline ``share / (b + overhead)`` for its slowest part ``b``. Rows whose plan does not
keep both hosts at work were priced without it either way.

Writes ``results/host_sharing_<tag>.csv`` and prints the rows and, per kind of plan, the
errors' range.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pandas as pd
from _common import show, write_csv

from autopart import api
from autopart.costmodel.network import load_network
from autopart.costmodel.sharing import Sharing
from autopart.tuning.hosts_tune import Candidate, HostTuneReport


def unshared_rate(candidate: Candidate, sharing: Sharing | None) -> float:
    """What the search would have predicted for ``candidate`` without ``sharing``."""
    predicted = candidate.predicted
    hosts = {stage[0] for stage in predicted.stages}
    if sharing is None or not sharing.applies(hosts):
        return predicted.rate_per_s
    if predicted.kind == "replicas":
        each = predicted.rate_per_s / len(predicted.stages)
        return len(predicted.stages) / (sharing.share / each - sharing.overhead_s)
    return 1.0 / (sharing.share / predicted.rate_per_s - sharing.overhead_s)


def rows_of(model: str, tune: int, report: HostTuneReport) -> list[dict[str, object]]:
    """One row per candidate of ``report`` that ran."""
    sharing = load_network(report.network).sharing
    rows = []
    for candidate in report.candidates:
        if candidate.rate_per_s is None:
            continue
        unshared = unshared_rate(candidate, sharing)
        rows.append({
            "model": model, "tune": tune, "candidate": candidate.name,
            "kind": candidate.predicted.kind, "stages": len(candidate.predicted.stages),
            "chosen": candidate is report.chosen, "measured_per_s": candidate.rate_per_s,
            "predicted_per_s": candidate.predicted.rate_per_s, "unshared_per_s": unshared,
            "error": candidate.rate_per_s / candidate.predicted.rate_per_s - 1,
            "unshared_error": candidate.rate_per_s / unshared - 1,
            "share": None if sharing is None else sharing.share,
            "overhead_ms": None if sharing is None else sharing.overhead_s * 1e3,
        })  # fmt: skip
    return rows


def main() -> None:
    """Tune each model across a local:2 cluster ``--tunes`` times; write and print the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["squeezenet", "resnet50"])
    parser.add_argument("--tunes", type=int, default=3)
    parser.add_argument("--budget", type=float, default=120.0, help="each tune's --budget")
    parser.add_argument("--targets", default=None, help="comma-separated, as tune's --targets")
    parser.add_argument("--tag", default="run")
    args = parser.parse_args()
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for model in args.models:
            for tune in range(args.tunes):
                report = api.tune(
                    model, cluster="local:2", objective="throughput", time_budget_s=args.budget,
                    profiles_dir=Path(scratch) / "profiles",
                    output=str(Path(scratch) / f"{model}-{tune}.json"),
                    targets=args.targets.split(",") if args.targets else None,
                )  # fmt: skip
                assert isinstance(report, HostTuneReport)
                rows += rows_of(model, tune, report)
    frame = pd.DataFrame(rows)
    show("predicted and measured stream rates on local:2", frame)
    spread = frame.groupby(["model", "kind", "stages"])[["error", "unshared_error"]].agg(
        ["min", "max"]
    )
    show("errors (measured / predicted - 1) by kind of plan", spread.reset_index())
    write_csv(frame, f"host_sharing_{args.tag}.csv")


if __name__ == "__main__":
    main()
