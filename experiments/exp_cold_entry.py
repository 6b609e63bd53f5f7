"""Experiment: how a partition's entry slows with the time its target sat idle.

On every target, a one-op partition (inception_v1's first LRN) and the launch probe (a
one-element Relu) run after the host was kept busy elsewhere for a gap of 0 to 20 ms, as
while other partitions of a plan run. The penalty at a gap is the median wall time there
less the median back to back (gap 0). Per target and op it fits
``penalty(gap) = full * (1 - exp(-gap / tau))`` (scipy ``curve_fit``); the profile's
``cold`` rows are measured after a 5 ms gap, and the simulator scales them by this curve
(:func:`autopart.search.simulator.cold_share`).

Writes ``experiments/results/cold_entry.csv`` (every gap), ``cold_entry_fit.csv`` and
``cold_entry.png``.

    python experiments/exp_cold_entry.py [--runs 30] [--targets T ...]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import numpy as np
import pandas as pd
from _common import console, new_figure, save_figure, show, target_colour, write_csv
from scipy.optimize import curve_fit

from autopart import api
from autopart.profile.probe import launch_probe_graph
from autopart.profile.samplers import busy, compiled_with_inputs, wall_sampler
from autopart.profile.values import reference_values
from autopart.targets.resolve import available_targets, resolve

GAPS_MS = (0.0, 0.1, 0.3, 1.0, 2.0, 5.0, 20.0)


def entry_sampler(target: str, op: str) -> Callable[[], float]:
    """A function returning the wall time of one run of ``op`` ("LRN" or "probe")."""
    resolved = resolve(target)
    if op == "probe":
        graph = launch_probe_graph()
        nodes, values = graph.nodes, {"x": np.ones((1, 1), np.float32)}
    else:
        graph = api.load("inception_v1")
        nodes, values = [next(n for n in graph.nodes if n.op_type == op)], reference_values(graph)
    compiled, env = compiled_with_inputs(resolved, graph, nodes, values)
    return wall_sampler(resolved, compiled, env)


def measure(targets: list[str], runs: int) -> pd.DataFrame:
    """Median wall time of each (target, op) after each gap, in ms."""
    rows = []
    for target in targets:
        for op in ("LRN", "probe"):
            sample = entry_sampler(target, op)
            for _ in range(5):
                sample()
            for gap_ms in GAPS_MS:
                times = []
                for _ in range(runs):
                    if gap_ms:
                        busy(gap_ms * 1e-3)
                    times.append(sample())
                median = statistics.median(times[3:])
                rows.append(
                    {"target": target, "op": op, "gap_ms": gap_ms, "median_ms": median * 1e3}
                )
    frame = pd.DataFrame(rows)
    base = frame[frame.gap_ms == 0].set_index(["target", "op"])["median_ms"]
    frame["penalty_ms"] = [
        row.median_ms - base[(row.target, row.op)] for row in frame.itertuples(index=False)
    ]
    return frame


def ramp(gap: np.ndarray, full: float, tau: float) -> np.ndarray:
    """The penalty after ``gap`` ms of idling: ``full * (1 - exp(-gap / tau))``."""
    return full * (1.0 - np.exp(-gap / tau))


def fit(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (target, op): the fitted full penalty and time constant, and the 5 ms share."""
    rows = []
    for (target, op), group in frame.groupby(["target", "op"], sort=False):
        gaps, penalty = group["gap_ms"].to_numpy(), group["penalty_ms"].to_numpy()
        try:
            (full, tau), _ = curve_fit(
                ramp, gaps, penalty, p0=(max(penalty.max(), 1e-3), 1.0),
                bounds=([0.0, 0.05], [np.inf, 50.0]),
            )  # fmt: skip
        except RuntimeError:
            full, tau = float("nan"), float("nan")
        rows.append({
            "target": target, "op": op, "full_ms": full, "tau_ms": tau,
            "penalty_5ms": float(penalty[list(gaps).index(5.0)]),
            "share_at_1ms": float(1 - np.exp(-1.0 / tau)) if np.isfinite(tau) else np.nan,
        })  # fmt: skip
    return pd.DataFrame(rows)


def plot(frame: pd.DataFrame) -> None:
    """Penalty against gap, one line per target, one panel per op."""
    figure = new_figure(11, 4.5)
    for index, op in enumerate(("LRN", "probe")):
        axes = figure.add_subplot(1, 2, index + 1)
        for target, group in frame[frame.op == op].groupby("target", sort=False):
            axes.plot(group["gap_ms"], group["penalty_ms"], marker="o", label=target,
                      color=target_colour(target))  # fmt: skip
        axes.set_xscale("symlog", linthresh=0.1)
        axes.set_xlabel("host busy elsewhere before the run (ms)")
        axes.set_ylabel("wall time over back to back (ms)")
        axes.set_title(f"{op}: entry penalty against the idle gap")
        axes.axvline(5.0, color="0.7", linewidth=0.8)
        if index == 0:
            axes.legend(fontsize=7)
    save_figure(figure, "cold_entry.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs per gap")
    parser.add_argument("--targets", nargs="*", default=None)
    args = parser.parse_args()
    targets = args.targets or [str(t) for t in available_targets()]
    frame = measure(targets, args.runs)
    write_csv(frame.round(4), "cold_entry.csv")
    fits = fit(frame)
    write_csv(fits.round(4), "cold_entry_fit.csv")
    plot(frame)
    show("entry penalty: fit full * (1 - exp(-gap / tau)) per target and op", fits)
    lrn = fits[fits.op == "LRN"]["tau_ms"]
    console.print(f"median tau over targets, LRN: {lrn.median():.2f} ms; probe: "
                  f"{fits[fits.op == 'probe']['tau_ms'].median():.2f} ms")  # fmt: skip
    console.print("results: experiments/results/cold_entry.csv, cold_entry_fit.csv, cold_entry.png")


if __name__ == "__main__":
    main()
