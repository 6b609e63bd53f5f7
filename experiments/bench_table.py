"""The results table of `exp_heldout.py` row CSVs, in Markdown, with each Done-when verdict.

    python bench_table.py results/bench_1130_complete.csv [more.csv ...] [--csv-out verdicts.csv]
    python bench_table.py results/bench_1130_complete.csv --readme   # the README's table

One line per model, from its rows alone: the peers' medians, the tuned plan (as `tune`
chose it, with its precisions), its ratio to the best peer with the 95% interval over the
paired rounds, the run's noise floor two ways (the gap between the tuned plan's two
timings, and the reach of their ratio's interval, ``noise_spread``), and the verdicts:

- **bar**: tuned / best peer at most 1.02, or its excess within the gap (``met (gap)``)
  or within the larger of gap and spread (``met (spread)``);
- **ov**: tuned / OpenVINO as installed at most 1.02 (or within the floor), at an error no
  more than that peer's plus 10%;
- **0.9x**: tuned / OpenVINO as installed at most 0.9 at no more error;
- **half error**: within 5% of OpenVINO as installed's time at half its error or less;
- **predicted**: tune's prediction of the chosen plan over the race's measurement, and the
  bench's over its own.

A summary of the counts follows the table.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

BAR = 1.02
GOAL = 0.9
EQUAL_TIME = 1.05
ERROR_ALLOWANCE = 1.1
PREDICTION_LIMIT = 0.2

COLUMNS = [
    "group", "model", "onnxruntime alone", "openvino alone (bf16)", "openvino alone f32",
    "tuned (plan, precision)", "tuned / best peer [95%]", "gap", "spread", "met (gap)",
    "met (spread)", "tuned / openvino alone", "tuned error", "openvino alone error",
    "predicted / measured (tune)", "predicted / measured (bench)",
]  # fmt: skip


def _ms(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.1f}" if value >= 100 else f"{value:.2f}" if value >= 1 else f"{value:.3f}"


def _peer(rows: pd.DataFrame, name: str, column: str = "median_ms") -> float:
    found = rows[(rows["plan"] == name) & (rows["runs"] > 0)]
    return float(found[column].iloc[0]) if len(found) else math.nan


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def verdicts(rows: pd.DataFrame) -> pd.DataFrame:
    """One record per model of ``rows`` (exp_heldout's row CSV): figures and verdicts."""
    out = []
    for model in dict.fromkeys(rows["model"]):
        mine = rows[rows["model"] == model]
        chosen = mine[mine["kind"] == "chosen"]
        if not len(chosen):
            errors = mine["error"].dropna()
            why = errors.iloc[0] if len(errors) else "no tuned plan ran"
            out.append({"group": mine["group"].iloc[0], "model": model, "error": why})
            continue
        tuned = chosen.iloc[0]
        gap = float(tuned["noise_floor"])
        spread = float(tuned.get("noise_spread", math.nan))
        floor = max(gap, 0.0 if math.isnan(spread) else spread)
        ratio = float(tuned["vs_best_peer"])
        vs_ov = float(tuned["vs_openvino"])
        ov_error = _peer(mine, "openvino alone", "max_rel_error")
        error = float(tuned["max_rel_error"])
        no_more_error = math.isnan(ov_error) or error <= ERROR_ALLOWANCE * ov_error
        out.append(
            {
                "group": tuned["group"],
                "model": model,
                "onnxruntime_ms": _peer(mine, "onnxruntime alone"),
                "openvino_ms": _peer(mine, "openvino alone"),
                "openvino_f32_ms": _peer(mine, "openvino alone f32"),
                "tuned_ms": float(tuned["median_ms"]),
                "plan": tuned["tune_chosen"],
                "precisions": tuned["tune_precisions"],
                "vs_best_peer": ratio,
                "low": float(tuned["vs_best_peer_low"]),
                "high": float(tuned["vs_best_peer_high"]),
                "gap": gap,
                "spread": spread,
                "met_gap": ratio <= BAR or ratio - 1 <= gap,
                "met_spread": ratio <= BAR or ratio - 1 <= floor,
                "vs_openvino": vs_ov,
                "error": error,
                "openvino_error": ov_error,
                "met_openvino": math.isnan(vs_ov)
                or ((vs_ov <= BAR or vs_ov - 1 <= floor) and no_more_error),
                "goal_09": vs_ov <= GOAL and no_more_error,
                "half_error": vs_ov <= EQUAL_TIME and error <= 0.5 * ov_error,
                "tune_prediction": tuned["tune_predicted_ms"] / tuned["tune_measured_ms"],
                "bench_prediction": tuned["predicted_ms"] / tuned["median_ms"],
            }
        )
    return pd.DataFrame(out)


def markdown(table: pd.DataFrame) -> str:
    """The Markdown table of :func:`verdicts`' records."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---|---|" + "---:|" * 3 + "---|" + "---:|" * 3
             + ":-:|:-:|" + "---:|" * 5]  # fmt: skip
    for r in table.itertuples():
        if isinstance(getattr(r, "plan", None), float) or "tuned_ms" not in table:
            lines.append(f"| {r.group} | {r.model} | error: {r.error} |")
            continue
        vs_ov = "-" if math.isnan(r.vs_openvino) else f"{r.vs_openvino:.2f}"
        ov_error = "-" if math.isnan(r.openvino_error) else f"{r.openvino_error:.1e}"
        cells = [
            r.group, r.model, _ms(r.onnxruntime_ms), _ms(r.openvino_ms), _ms(r.openvino_f32_ms),
            f"{_ms(r.tuned_ms)} (`{r.plan}`, {r.precisions})",
            f"{r.vs_best_peer:.2f} [{r.low:.2f}, {r.high:.2f}]", f"{r.gap:.1%}",
            "-" if math.isnan(r.spread) else f"{r.spread:.1%}",
            _yes(r.met_gap), _yes(r.met_spread), vs_ov, f"{r.error:.1e}",
            ov_error, f"{r.tune_prediction:.2f}", f"{r.bench_prediction:.2f}",
        ]  # fmt: skip
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(lines)


README_COLUMNS = [
    "model", "set", "onnxruntime alone", "openvino alone", "tuned (plan, precision)",
    "tuned / best peer [95%]", "noise floor (gap, spread)", "predicted / measured",
    "error (openvino alone's)",
]  # fmt: skip


def readme(table: pd.DataFrame) -> str:
    """The README's shorter table of :func:`verdicts`' records (models that ran only)."""
    rule = "|---|---|---:|---:|---|---:|---:|---:|---:|"
    lines = ["| " + " | ".join(README_COLUMNS) + " |", rule]
    for r in table.dropna(subset=["vs_best_peer"]).itertuples():
        ov_error = "" if math.isnan(r.openvino_error) else f" ({r.openvino_error:.1e})"
        gap, spread = ("-" if math.isnan(x) else f"{x:.0%}" for x in (r.gap, r.spread))
        cells = [
            r.model, r.group, _ms(r.onnxruntime_ms), _ms(r.openvino_ms),
            f"{_ms(r.tuned_ms)} ({r.plan}, {r.precisions})",
            f"{r.vs_best_peer:.2f}x [{r.low:.2f}, {r.high:.2f}]", f"{gap}, {spread}",
            f"{r.tune_prediction:.2f}", f"{r.error:.1e}{ov_error}",
        ]  # fmt: skip
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(lines)


def summary(table: pd.DataFrame) -> str:
    """The counts of each verdict, and the median and worst prediction error."""
    ran = table.dropna(subset=["vs_best_peer"]) if "vs_best_peer" in table else table.iloc[:0]
    off = (ran["tune_prediction"] - 1).abs()
    within = int((off <= PREDICTION_LIMIT).sum())
    return "\n".join(
        [
            f"models: {len(table)}, tuned and benched: {len(ran)}",
            f"bar met (gap): {int(ran['met_gap'].sum())}; (spread): {int(ran['met_spread'].sum())}",
            f"openvino as installed met at no more error: {int(ran['met_openvino'].sum())}",
            f"<= {GOAL}x openvino at no more error: {int(ran['goal_09'].sum())} "
            f"({', '.join(ran.loc[ran['goal_09'], 'model'])})",
            f"half openvino's error within {EQUAL_TIME}x its time: {int(ran['half_error'].sum())} "
            f"({', '.join(ran.loc[ran['half_error'], 'model'])})",
            f"tune predictions within {PREDICTION_LIMIT:.0%}: {within}/{len(ran)}, "
            f"median |error| {off.median():.1%}, worst {off.max():.1%}",
        ]
    )


def main() -> None:
    """Print the table and the summary of the CSVs named; write the verdicts if asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", type=Path)
    parser.add_argument("--csv-out", type=Path, help="write the verdicts here")
    parser.add_argument("--readme", action="store_true", help="the README's shorter table")
    args = parser.parse_args()
    table = verdicts(pd.concat([pd.read_csv(path) for path in args.csv], ignore_index=True))
    print(readme(table) if args.readme else markdown(table))
    print()
    print(summary(table))
    if args.csv_out:
        table.to_csv(args.csv_out, index=False)


if __name__ == "__main__":
    main()
