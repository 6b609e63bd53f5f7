"""Experiment: does the core-sharing probe flag the spells that slow two-core runners?

``autopart.profile.core_sharing.CoreSharing`` times a small model on one core alone, then
on every core at once; a ratio over ``CORE_SHARING.core_sharing_limit`` marks a spell in which
the cores share one core's speed, and the race drops the rounds timed in one. This script
alternates, for ``--seconds`` seconds: a probe, a block of onnxruntime at its defaults
(both cores) on ``--model``, a block of onnxruntime on one intra-op thread, another probe.
A block is *flagged* when either probe beside it is over the limit. If the probe sees what
matters, flagged blocks show the two-core runner slowed (and the one-core one not), and
unflagged blocks do not.

Writes ``experiments/results/core_sharing.csv``; prints the ratio's quantiles and the
medians of flagged and unflagged blocks. Run it on an otherwise idle machine.

    python experiments/exp_core_sharing.py [--model shufflenet] [--seconds 180]
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
from _common import median_ms, model_and_feeds, ort_session, show, write_csv

from autopart.profile.core_sharing import CORE_SHARING, CoreSharing


def main() -> None:
    """Alternate probes and runner blocks for the time asked; write and summarise them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="shufflenet")
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    probe = CoreSharing.open()
    if probe is None:
        raise SystemExit("error: the probe needs two cores and onnxruntime")
    model, feeds = model_and_feeds(args.model)
    both, one = ort_session(model), ort_session(model, 1)
    started, rows = time.perf_counter(), []
    while time.perf_counter() - started < args.seconds:
        before = probe.ratio()
        two_ms = median_ms(lambda: both.run(None, feeds), args.runs, warmup=3)
        one_ms = median_ms(lambda: one.run(None, feeds), args.runs, warmup=3)
        after = probe.ratio()
        row = {"t_s": time.perf_counter() - started, "ratio_before": before, "ratio_after": after}
        rows.append({**row, "both_cores_ms": two_ms, "one_core_ms": one_ms})
    frame = pd.DataFrame(rows).round(3)
    limit = CORE_SHARING.core_sharing_limit
    frame["flagged"] = frame[["ratio_before", "ratio_after"]].max(axis=1) > limit
    write_csv(frame, "core_sharing.csv")
    ratios = pd.concat([frame["ratio_before"], frame["ratio_after"]])
    quantiles = ratios.quantile([0.5, 0.9, 0.95, 0.99, 1.0]).rename("ratio").reset_index()
    show(f"probe ratios ({len(ratios)} probes; limit {limit})", quantiles)
    by_flag = frame.groupby("flagged")[["both_cores_ms", "one_core_ms"]].median()
    by_flag["blocks"] = frame.groupby("flagged").size()
    show("block medians by flag (flagged: a probe beside it over the limit)", by_flag.reset_index())


if __name__ == "__main__":
    main()
