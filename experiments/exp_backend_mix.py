"""Experiment: which backend is fastest for which op, and does mixing them pay?

Issue 22 asks whether the codegens are worth choosing among. Two views answer it:

- **Per op type** (from the profile, nothing runs): each model's per-node costs on every
  whole-device target (``cpu@numpy``, ``cpu@onnxruntime``, ``cpu@openvino``,
  ``opencl:0@opencl``, those found here) come from the cost model
  (:func:`autopart.costmodel.costs_from_profile`: op timings less the launch, fused
  consumers at what they add, scaled where the target's calibration says so). They are
  summed per op type; the fastest codegen of each op type in each model, and the second
  fastest over it, make a heatmap. A target that cannot run every node of an op type is
  no candidate for it.
- **Per model** (measured, as in Collage): the best single target against the tuned plan
  (``autopart bench``'s ``chosen`` row), the codegens the tuned plan mixes, their ratio
  and its partitions; beside them the cost model's ceiling on what mixing could gain
  (:func:`mixing_ceiling`: every node on its cheapest whole-device target, crossings free).
  The figures come from an ``autopart bench --csv`` output
  (``--bench-csv``) or, without one, from :func:`autopart.bench` run here on ``--models``.

Writes experiments/results/backend_mix.csv (per model), backend_mix_ops.csv (per model,
op type and target) and backend_mix.png (the heatmap).

    python experiments/exp_backend_mix.py --bench-csv bench.csv [--profiles DIR]
    python experiments/exp_backend_mix.py --models squeezenet resnet50 [--rounds 15]
        [--search-dir search]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from _common import console, new_figure, save_figure, show, write_csv, zoo_arguments
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from autopart import api
from autopart.costmodel import costs_from_profile
from autopart.costmodel.costs import Costs
from autopart.ir.target import VirtualDevice
from autopart.targets.resolve import available_targets

MODELS = [
    "resnet50", "squeezenet", "inception_v1", "densenet121", "shufflenet", "alexnet",
    "inception_v2", "vgg19", "zfnet512", "tests/fixtures/transformer_encoder.onnx",
]  # fmt: skip
CODEGENS = ("numpy", "onnxruntime", "openvino", "opencl")
COLOURS = {"numpy": "0.55", "onnxruntime": "#4c72b0", "openvino": "#8172b3", "opencl": "#dd8452"}
INK = {"numpy": "black", "onnxruntime": "white", "openvino": "white", "opencl": "black"}
CODE = {codegen: index for index, codegen in enumerate(CODEGENS)}
BENCH_COLUMNS = ("model", "plan", "kind", "target", "median_ms", "partitions", "codegens")


def whole_targets(targets: list[VirtualDevice]) -> list[VirtualDevice]:
    """The whole-device targets (no unit) of the codegens compared here, in CODEGENS order."""
    whole = [t for t in targets if t.unit is None and t.codegen in CODEGENS]
    return sorted(whole, key=lambda t: CODEGENS.index(str(t.codegen)))


def model_label(model: str) -> str:
    """A model's short name: a zoo name as it is, a file by its stem."""
    return Path(model).stem if model.endswith(".onnx") else model


def op_type_costs(model: str, costs: Costs) -> pd.DataFrame:
    """One row per (op type, target) of ``costs``: the op type's nodes' summed cost there.

    Columns ``model``, ``op_type``, ``nodes``, ``target``, ``codegen`` and ``ms``; ``ms`` is
    NaN where the target cannot run every node of that op type.
    """
    by_type: dict[str, list[str]] = {}
    for node in costs.graph.nodes:
        by_type.setdefault(node.op_type, []).append(node.name)
    rows = []
    for op_type, names in by_type.items():
        for target in costs.targets:
            runs = all(target in costs.node_cost[name] for name in names)
            seconds = sum(costs.cost(name, target) for name in names) if runs else np.nan
            rows.append(
                {
                    "model": model,
                    "op_type": op_type,
                    "nodes": len(names),
                    "target": str(target),
                    "codegen": target.codegen,
                    "ms": seconds * 1e3,
                }
            )
    return pd.DataFrame(rows)


def mixing_ceiling(model: str, costs: Costs) -> dict[str, object]:
    """The most that mixing codegens could gain on ``model``, by the cost model.

    ``single_ms`` is the op sum of the cheapest target that runs every node, ``per_op_ms``
    the sum of every node's cheapest cost on any target, and ``ceiling`` their ratio: every
    node on its best target with every launch, layout conversion, cold entry and copy
    between them free. A real mix pays those, so it measures above the ceiling.
    """
    names = [node.name for node in costs.graph.nodes]
    sums = {
        target: sum(costs.cost(name, target) for name in names)
        for target in costs.targets
        if all(target in costs.node_cost[name] for name in names)
    }
    per_op = sum(min(costs.node_cost[name].values()) for name in names)
    single = min(sums.values()) if sums else np.nan
    return {
        "model": model,
        "single_ms": single * 1e3,
        "per_op_ms": per_op * 1e3,
        "ceiling": per_op / single if sums and single else np.nan,
    }


def fastest(ops: pd.DataFrame) -> pd.DataFrame:
    """Per (model, op type) of :func:`op_type_costs` rows: the fastest codegen and its lead.

    Columns ``model``, ``op_type``, ``nodes``, ``best`` (codegen), ``best_ms``, ``second``,
    ``second_ms`` and ``lead`` (``second_ms / best_ms``; NaN when one codegen alone can run
    the op type, infinite when the fastest is priced at 0: an op quicker than the launch it
    was timed with).
    """
    rows = []
    for (model, op_type), group in ops.dropna(subset=["ms"]).groupby(["model", "op_type"]):
        ranked = group.sort_values("ms")
        first = ranked.iloc[0]
        second = ranked.iloc[1] if len(ranked) > 1 else None
        rows.append(
            {
                "model": model,
                "op_type": op_type,
                "nodes": int(first["nodes"]),
                "best": first["codegen"],
                "best_ms": first["ms"],
                "second": "" if second is None else second["codegen"],
                "second_ms": np.nan if second is None else second["ms"],
                "lead": np.nan if second is None else _ratio(second["ms"], first["ms"]),
            }
        )
    return pd.DataFrame(rows)


def _ratio(slow: float, fast: float) -> float:
    """``slow / fast``: infinite where the cost model prices the fast one at nothing."""
    return slow / fast if fast > 0 else np.inf


def read_bench(path: str | Path) -> pd.DataFrame:
    """An ``autopart bench --csv`` table; SystemExit naming what an older one lacks."""
    table = pd.read_csv(path, keep_default_na=False, na_values=[""])
    lacking = [c for c in BENCH_COLUMNS if c not in table.columns]
    if lacking:
        raise SystemExit(
            f"{path} lacks the column(s) {', '.join(lacking)}: it was written by an older "
            "`autopart bench`; run it again"
        )
    table["codegens"] = table["codegens"].fillna("")
    table["target"] = table["target"].fillna("")
    return table


def collage(bench: pd.DataFrame) -> pd.DataFrame:
    """One row per model of a bench table: best single target against the tuned plan.

    Columns ``model``, ``best_single``, ``best_single_ms``, ``tuned_ms``, ``tuned_codegens``,
    ``mix`` (the tuned plan's partitions span two codegens or more), ``tuned_vs_single``,
    ``partitions``, ``best_peer_ms`` and ``tuned_vs_peer``.
    """
    rows = []
    for model, group in bench.groupby("model", sort=False):
        singles = group[group["kind"] == "single"]
        tuned = group[group["kind"] == "chosen"]
        if singles.empty or tuned.empty:
            raise SystemExit(f"the bench table has no single target or no tuned plan of {model}")
        best = singles.loc[singles["median_ms"].idxmin()]
        chosen = tuned.iloc[0]
        peers = group.loc[group["kind"] == "peer", "median_ms"]
        peer = float(peers.min()) if not peers.empty else np.nan
        codegens = str(chosen["codegens"])
        rows.append(
            {
                "model": model,
                "best_single": best["target"],
                "best_single_ms": float(best["median_ms"]),
                "tuned_ms": float(chosen["median_ms"]),
                "tuned_codegens": codegens,
                "mix": len(codegens.split("+")) >= 2,
                "tuned_vs_single": float(chosen["median_ms"] / best["median_ms"]),
                "partitions": int(chosen["partitions"]),
                "best_peer_ms": peer,
                "tuned_vs_peer": float(chosen["median_ms"]) / peer,
            }
        )
    return pd.DataFrame(rows)


def lead_text(lead: float) -> str:
    """A lead as the heatmap and the table show it: ``1.8x``, ``only`` when unopposed."""
    return "only" if np.isnan(lead) else "∞" if np.isinf(lead) else f"{lead:.1f}x"


def plot(best: pd.DataFrame, models: list[str]) -> Figure:
    """The heatmap: op types (rows, heaviest first) by models, coloured by fastest codegen.

    Each cell is annotated with the fastest codegen's lead over the second (``second_ms /
    best_ms``, :func:`lead_text`); a blank cell is an op type the model lacks.
    """
    order = best.groupby("op_type")["best_ms"].sum().sort_values(ascending=False).index
    grid = best.pivot(index="op_type", columns="model", values="best").reindex(order)
    grid = grid.reindex(columns=models)
    leads = best.pivot(index="op_type", columns="model", values="lead").reindex_like(grid)
    codes = grid.apply(lambda column: column.map(CODE)).astype(float)
    figure = new_figure(max(6.0, 4.0 + 0.8 * len(models)), 1.8 + 0.3 * len(order))
    axes = figure.add_subplot()
    colours = ListedColormap([COLOURS[c] for c in CODEGENS])
    axes.imshow(np.ma.masked_invalid(codes.to_numpy()), cmap=colours, vmin=-0.5,
                vmax=len(CODEGENS) - 0.5, aspect="auto")  # fmt: skip
    for (row, column), lead in np.ndenumerate(leads.to_numpy(dtype=float)):
        codegen = grid.iat[row, column]
        if isinstance(codegen, str):
            axes.text(column, row, lead_text(lead), ha="center", va="center", fontsize=8,
                      color=INK[codegen])  # fmt: skip
    axes.set_xticks(range(len(models)), [model_label(m) for m in models], rotation=30,
                    ha="right")  # fmt: skip
    axes.set_yticks(range(len(order)), list(order), fontsize=8)
    axes.set_title(
        "Fastest whole-device codegen per op type\n(cost model; label: its lead over the second)"
    )
    handles = [Patch(color=COLOURS[c], label=c) for c in CODEGENS if c in set(best["best"])]
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return figure


def model_ops(model: str, profiles: str | None) -> tuple[pd.DataFrame, dict[str, object]]:
    """:func:`op_type_costs` and :func:`mixing_ceiling` of ``model`` on whole-device targets.

    Costs come from the profile store ``profiles`` (default: the saved one); whatever it
    lacks for these targets is measured first.
    """
    targets = [str(t) for t in whole_targets(available_targets())]
    graph = api.load(model)
    report, profile, _ = api.profile(graph, targets, profiles)
    console.print(f"[dim]{model}: profile {report.new} new, {report.reused} reused[/dim]")
    costs = costs_from_profile(graph, profile, targets)
    return op_type_costs(model, costs), mixing_ceiling(model, costs)


def bench_table(args: argparse.Namespace) -> pd.DataFrame:
    """The bench table: read from ``--bench-csv``, else measured here on ``--models``."""
    if args.bench_csv:
        table = read_bench(args.bench_csv)
        wanted = args.models or list(dict.fromkeys(table["model"]))
        missing = sorted(set(wanted) - set(table["model"]))
        if missing:
            raise SystemExit(f"{args.bench_csv} has no rows of {', '.join(missing)}")
        return table[table["model"].isin(wanted)]
    models = args.models or MODELS
    return api.bench(
        models,
        rounds=args.rounds,
        search_dir=args.search_dir,
        profiles_dir=args.profiles,
    )


def main() -> None:
    """Read or run the bench, cost every op type, and write the CSVs, tables and heatmap."""
    parser = zoo_arguments(__doc__.splitlines()[0], [], 15, seed=False)
    parser.set_defaults(models=None)
    parser.add_argument("--bench-csv", default=None, help="an `autopart bench --csv` output")
    parser.add_argument("--search-dir", default="search", help="tuned plans (without the CSV)")
    args = parser.parse_args()
    bench = bench_table(args)
    models = list(dict.fromkeys(bench["model"]))
    costed = [model_ops(model, args.profiles) for model in models]
    ops = pd.concat([found for found, _ in costed], ignore_index=True)
    best = fastest(ops)
    ceilings = pd.DataFrame([ceiling for _, ceiling in costed])
    table = collage(bench).merge(ceilings[["model", "ceiling"]], on="model", how="left")
    write_csv(table, "backend_mix.csv")
    write_csv(ops, "backend_mix_ops.csv")
    view = best.assign(cell=best["best"] + " " + best["lead"].map(lead_text))
    grid = view.pivot(index="op_type", columns="model", values="cell").fillna("")
    grid = grid.reindex(columns=models).rename(columns=model_label)
    show("Fastest whole-device codegen per op type (lead over the second)", grid.reset_index())
    labelled = table.assign(model=table["model"].map(model_label))
    show("Best single target against the tuned plan (medians, ms)", labelled)
    save_figure(plot(best, models), "backend_mix.png")
    console.print("wrote experiments/results/backend_mix{.csv,_ops.csv,.png}")


if __name__ == "__main__":
    main()
