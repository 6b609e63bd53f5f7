"""Experiment: what a fused consumer adds, from its producer timed in turn or in another job.

A fusing codegen's consumer (a Relu after a Conv) costs what the pair takes beyond its
producer. The profiler times the pair and the producer alone in turn, in one job
(``producer_s`` of the ``fused`` row); before, it took the producer from the producer's
own op job, measured seconds away. For every fusion pair of the models, on every fusing
target, this writes both estimates as multiples of the consumer's one-op cost. A ratio
near 0 means the pair fused. A ratio near 1 means the consumer costs what it costs alone.
A ratio far outside [0, 1] is the host's drift between the measurements: the profile
clamps it to that range.

It profiles into a fresh store (``--profiles`` to reuse one). It writes
``experiments/results/fusion_pairs.csv`` (every pair), ``fusion_pairs_summary.csv``
(quantiles per pair class and target) and ``fusion_pairs.png``.

    python experiments/exp_fusion_pairs.py [--models resnet50 squeezenet inception_v1]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from _common import console, new_figure, save_figure, show, write_csv

from autopart import api
from autopart.costmodel.fusion import pairs_to_measure
from autopart.ir.signature import op_signature


def pair_ratios(models: list[str], store: Path) -> pd.DataFrame:
    """One row per measured pair and target: the marginal over the consumer alone, both ways."""
    rows = []
    for model in models:
        report, profile, _ = api.profile(model, None, store)
        console.print(f"[dim]{model}: {report.new} new, {report.reused} reused[/dim]")
        graph = api.load(model)
        for pair in pairs_to_measure(graph):
            producer = op_signature(pair.producer, graph)
            consumer = op_signature(pair.consumer, graph)
            for target in report.targets:
                row = profile.row("fused", target, pair.key(graph))
                alone = profile.measurement("op", target, producer)
                other = profile.measurement("op", target, consumer)
                if row is None or alone is None or other is None or other.median_s <= 0:
                    continue
                together = float(row["median_s"])
                rows.append({
                    "model": model, "pair": "+".join(pair.kind), "target": target,
                    "consumer_ms": other.median_s * 1e3,
                    "in_turn": (together - float(row["producer_s"])) / other.median_s,
                    "other_job": (together - alone.median_s) / other.median_s,
                })  # fmt: skip
    return pd.DataFrame(rows)


def summary(ratios: pd.DataFrame) -> pd.DataFrame:
    """Per pair class and target: the quantiles of both estimates, and how many fell outside."""
    rows = []
    for (pair, target), group in ratios.groupby(["pair", "target"]):
        row: dict[str, object] = {"pair": pair, "target": target, "pairs": len(group)}
        for column in ("in_turn", "other_job"):
            values = group[column].to_numpy()
            low, median, high = np.percentile(values, [10, 50, 90])
            row |= {f"{column}_p10": low, f"{column}_median": median, f"{column}_p90": high}
            row[f"{column}_outside"] = int(((values < -0.5) | (values > 1.5)).sum())
        rows.append(row)
    return pd.DataFrame(rows)


def plot(ratios: pd.DataFrame) -> None:
    """Both estimates of every pair, by class, on a symmetric log scale."""
    figure = new_figure(10, 5)
    axes = figure.add_subplot()
    classes = sorted(ratios["pair"].unique())
    for offset, (column, colour) in enumerate((("other_job", "0.6"), ("in_turn", "#8c510a"))):
        for index, pair in enumerate(classes):
            values = ratios.loc[ratios["pair"] == pair, column]
            jitter = np.linspace(-0.12, 0.12, len(values)) if len(values) > 1 else [0.0]
            axes.scatter(
                index + (offset - 0.5) * 0.35 + np.asarray(jitter), values, s=10, color=colour,
                label=column.replace("_", " ") if index == 0 else None,
            )  # fmt: skip
    axes.set_yscale("symlog", linthresh=1.0)
    axes.axhspan(0.0, 1.0, color="0.92", zorder=0)
    axes.set_xticks(range(len(classes)), classes, rotation=45, ha="right", fontsize=8)
    axes.set_ylabel("(pair - producer) / consumer alone")
    axes.set_title("what a fused consumer adds: producer timed in turn with the pair, or apart")
    axes.legend(fontsize=8)
    save_figure(figure, "fusion_pairs.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=["resnet50", "squeezenet", "inception_v1"])
    parser.add_argument("--profiles", default=None, help="profile store (default: a fresh one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as fresh:
        ratios = pair_ratios(args.models, Path(args.profiles or fresh))
    write_csv(ratios.round(4), "fusion_pairs.csv")
    table = summary(ratios)
    write_csv(table.round(4), "fusion_pairs_summary.csv")
    plot(ratios)
    show("fused consumer's cost over its cost alone (p10 / median / p90)", table, digits=2)
    for column in ("in_turn", "other_job"):
        values = ratios[column]
        outside = int(((values < -0.5) | (values > 1.5)).sum())
        console.print(
            f"{column}: p10 {values.quantile(0.1):.2f}, median {values.median():.2f}, "
            f"p90 {values.quantile(0.9):.2f}; {outside} of {len(values)} outside [-0.5, 1.5]"
        )
    console.print(
        "results: experiments/results/fusion_pairs.csv, fusion_pairs_summary.csv, fusion_pairs.png"
    )


if __name__ == "__main__":
    main()
