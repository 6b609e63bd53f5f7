"""Experiment: what does precision trade? autopart's plans on a latency-against-error front.

For each model, three tunes and three benches (issue 30, item 8), one per accuracy budget:

- ``f32``: ``precision="f32"``, the exact plans of before;
- ``default``: every precision this machine offers, the default tolerance (OpenVINO as
  installed's own error on the same inputs, plus 10%);
- ``loose``: every precision, ``tolerance=--loose`` (default 5e-2).

Each tune (:func:`autopart.api.tune`) saves its plan under ``--search-dir/<budget>/``, and
the bench of the same budget (:func:`autopart.api.bench`) times it beside every single
target (bf16 ones included where the budget allows them), the baselines and the three
peers (onnxruntime alone, openvino alone as installed, openvino alone f32), in interleaved
rounds, each row with its max relative error against the f32 reference. Every model gets
one panel of ``precision.png``: median latency against max relative error (log x), the
single targets and baselines of the default bench, the tuned plan of each budget, the
peers, and the front of autopart's plans.

Per-node sensitivities (``--sensitivity MODEL``, default squeezenet): for each node, the
whole model's output error when only that node runs on ``cpu@openvino:bf16`` and every
other node on ``cpu@openvino`` (f32), run by the plan executor and checked against the
numpy reference on the timing feeds and the evaluation samples (the largest error). Then
the plan that puts the least sensitive nodes in bf16 while their summed sensitivities stay
within the default budget is run too: how far sums predict a mixed plan's error.

The machine has 2 cores shared with other work: latencies are indicative only.

Writes experiments/results/precision.csv (every bench row, with ``budget``),
precision_summary.csv (per model and budget: the tuned plan against the peers),
precision.png, precision_sensitivity.csv and precision_sensitivity.png.

    python experiments/exp_precision.py [--models squeezenet resnet50 magika]
        [--rounds 5] [--loose 5e-2] [--search-dir search/precision] [--profiles DIR]
        [--targets cpu@numpy cpu@onnxruntime cpu@openvino cpu@openvino:bf16]
        [--sensitivity squeezenet | --no-sensitivity] [--no-pareto] [--keep] [--replot]

Every tune and bench of one process keeps the memory it freed (autopart retains it for
reuse), and autopart's memory check counts it as used: run many large models one process
each, with ``--keep`` so that each adds its rows to the CSV (``--replot`` draws them all).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from _common import RESULTS, console, new_figure, one_line, plain_log, save_figure, show, write_csv
from heldout.suite import load_suite

from autopart import api
from autopart.ir.feeds import random_inputs
from autopart.ir.graph import Graph
from autopart.ir.target import VirtualDevice
from autopart.plan.build import build_plan_for
from autopart.runtime.executor import Executor
from autopart.runtime.plan_executor import PlanExecutor
from autopart.targets.onnxruntime.peer import ALONE as ONNXRUNTIME_PEER
from autopart.targets.openvino.peer import AS_INSTALLED, F32, openvino_alone
from autopart.tuning.accuracy import follow_peer
from autopart.tuning.bench import TUNED
from autopart.tuning.judge import evaluation_samples
from autopart.tuning.oracle import check_outputs
from autopart.tuning.peers import PeerInputs
from autopart.tuning.plan_rows import plan_precisions
from autopart.zoo import zoo_names

ONNXRUNTIME, OPENVINO, OPENVINO_F32 = ONNXRUNTIME_PEER.name, AS_INSTALLED.name, F32.name
FLOOR = 1e-8  # errors below this (the numpy reference: 0) are drawn at it on the log axis
PEER_STYLE = {  # marker, colour
    ONNXRUNTIME: ("s", "#c44e52"),
    OPENVINO: ("D", "#8172b2"),
    OPENVINO_F32: ("^", "#dd8452"),
}
BUDGET_COLOURS = {"f32": "#4c72b0", "default": "#55a868", "loose": "#937860"}
F32, BF16 = VirtualDevice.parse("cpu@openvino"), VirtualDevice.parse("cpu@openvino:bf16")
FALLBACK = VirtualDevice.parse("cpu@numpy")
SHOWN = {  # summary column -> the printed table's heading
    "model": "model",
    "budget": "budget",
    "tuned_precisions": "precisions",
    "tuned_ms": "tuned",
    "tuned_error": "error",
    "tolerance": "tolerance",
    "onnxruntime_ms": "ort",
    "openvino_ms": "ov",
    "openvino_error": "ov error",
    "openvino_f32_ms": "ov f32",
    "tuned_vs_openvino": "/ ov",
    "tuned_vs_best_peer": "/ best peer",
}


@dataclass(frozen=True)
class RunPolicy:
    """One accuracy budget: its name and the ``precision``/``tolerance`` keywords."""

    name: str
    precision: str | None
    tolerance: float | None

    def allows(self, target: str) -> bool:
        """Whether a tune under this budget may be given ``target``."""
        return self.precision is None or VirtualDevice.parse(target).computes_in == self.precision

    def keywords(self) -> dict[str, object]:
        """The keywords of tune and bench that set this budget."""
        return {"precision": self.precision, "tolerance": self.tolerance}


@dataclass
class Model:
    """A model of the run: zoo name or held-out file, and the keywords it loads with."""

    name: str
    source: str
    fields: dict = field(default_factory=dict)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=zoo_names(), help="zoo or held-out")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loose", type=float, default=5e-2, help="the loose budget")
    parser.add_argument("--search-dir", default="search/precision")
    parser.add_argument("--profiles", default=None, help="profile store (default: saved)")
    parser.add_argument("--targets", nargs="*", default=None, help="default: all found")
    parser.add_argument("--sensitivity", default="squeezenet", help="model of the figure")
    parser.add_argument("--no-sensitivity", action="store_true")
    parser.add_argument("--no-pareto", action="store_true")
    parser.add_argument(
        "--replot", action="store_true", help="draw precision.png again from precision.csv"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep precision.csv's rows of the other models"
    )
    return parser.parse_args()


def budgets(loose: float) -> list[RunPolicy]:
    """The three budgets of the run, exact first."""
    return [
        RunPolicy("f32", "f32", None),
        RunPolicy("default", None, None),
        RunPolicy("loose", None, loose),
    ]


def resolve(names: Sequence[str]) -> list[Model]:
    """Zoo names as they are; held-out names as their cached file, shapes and frozen inputs."""
    suite = {m.name: m for m in load_suite().models}
    models = []
    for name in names:
        if name in suite:
            entry = suite[name]
            fields: dict[str, object] = {}
            if entry.input_shapes:
                fields["input_shapes"] = dict(entry.input_shapes)
            if entry.freeze:
                fields["freeze"] = dict(entry.freeze)
            models.append(Model(name, str(entry.path()), fields))
        else:
            models.append(Model(name, name))
    return models


def tune_and_bench(model: Model, budget: RunPolicy, args: argparse.Namespace) -> pd.DataFrame:
    """Tune ``model`` under ``budget``, then bench it; the bench rows with the tune's outcome.

    A failure of either is a row with its one-line error: it is a result here.
    """
    options: dict[str, object] = {
        "rounds": args.rounds,
        "search_dir": str(Path(args.search_dir) / budget.name),
        **budget.keywords(),
        **model.fields,
    }
    if args.profiles is not None:
        options["profiles_dir"] = args.profiles
    if args.targets:  # those the budget allows: an f32 tune refuses a bf16 target
        options["targets"] = [t for t in args.targets if budget.allows(t)]
    outcome: dict[str, object] = {"tune_error": ""}
    started = time.perf_counter()
    try:
        tuned = api.tune(model.source, **options)
        chosen = next(row for row in tuned.rows if row.name == tuned.chosen)
        over = [n for n in tuned.notes if n.startswith("outputs beyond the tolerance")]
        record = tuned.plan.measured
        outcome = {
            "tune_chosen": tuned.chosen,
            "tune_precisions": plan_precisions(tuned.plan),
            "tune_targets": "+".join(sorted({p.target for p in tuned.plan.partitions})),
            "tune_measured_ms": (chosen.measured_s or np.nan) * 1e3,
            "tune_max_rel_error": np.nan if chosen.max_error is None else chosen.max_error,
            "tune_tolerance": np.nan if record is None else record.tolerance,
            "tune_over_tolerance": over[0] if over else "",
            "tune_error": "",
        }
    except Exception as error:  # any failure is a result here: record it and go on
        outcome["tune_error"] = one_line(error)
    outcome["tune_s"] = time.perf_counter() - started
    try:
        table = api.bench([model.source], **options)
    except Exception as error:  # any failure is a result here: record it and go on
        table = pd.DataFrame([{"plan": "", "runs": 0, "error": one_line(error)}])
    return table.assign(model=model.name, budget=budget.name, **outcome)


def saved_rows() -> pd.DataFrame:
    """The rows of ``precision.csv`` as written (none if there is no such file)."""
    path = RESULTS / "precision.csv"
    if not path.exists():
        return pd.DataFrame({"model": []})
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


def run_pareto(models: Sequence[Model], args: argparse.Namespace) -> pd.DataFrame:
    """Every model under every budget; the rows so far are written after each bench.

    With ``--keep``, the saved rows of models not run now are kept, ahead of the new ones.
    """
    frames = []
    if args.keep:
        saved = saved_rows()
        frames.append(saved[~saved["model"].isin([m.name for m in models])])
    for model in models:
        for budget in budgets(args.loose):
            console.print(f"[bold]{model.name}[/bold]: tune and bench, budget {budget.name}")
            frames.append(tune_and_bench(model, budget, args))
            console.print(f"  {status(frames[-1])}")
            write_csv(pd.concat(frames, ignore_index=True), "precision.csv")
    return pd.concat(frames, ignore_index=True)


def status(table: pd.DataFrame) -> str:
    """One bench in a few words: the tuned plan's latency, error and ratio, or the error."""
    tuned = table[table["plan"] == TUNED] if "plan" in table else table.iloc[:0]
    if not len(tuned) or not np.isfinite(tuned["median_ms"].iloc[0]):
        errors = _errors(table)
        return f"[red]{errors[0] if errors else 'no tuned plan ran'}[/red]"
    row = tuned.iloc[0]
    within = "" if row["within_tolerance"] else " [red]BEYOND THE TOLERANCE[/red]"
    return (
        f"{row['tune_chosen']} ({row['tune_precisions']}): {row['median_ms']:.2f} ms, "
        f"error {row['max_rel_error']:.2g} (tolerance {row['tolerance']:.2g}){within}, "
        f"vs openvino alone {row['vs_openvino']:.2f}, vs best peer {row['vs_best_peer']:.2f}"
    )


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """Per model and budget: the tuned plan's latency and error beside each peer's."""
    out = []
    for (model, budget), table in rows.groupby(["model", "budget"], sort=False):
        by_plan = table.drop_duplicates("plan").set_index("plan")
        record: dict[str, object] = {"model": model, "budget": budget}
        for label, plan in (
            ("tuned", TUNED),
            ("onnxruntime", ONNXRUNTIME),
            ("openvino", OPENVINO),
            ("openvino_f32", OPENVINO_F32),
        ):
            record[f"{label}_ms"] = _cell(by_plan, plan, "median_ms")
            record[f"{label}_error"] = _cell(by_plan, plan, "max_rel_error")
        record["tuned_plan"] = _cell(by_plan, TUNED, "tune_chosen", "")
        record["tuned_precisions"] = _cell(by_plan, TUNED, "tune_precisions", "")
        record["tolerance"] = _cell(by_plan, TUNED, "tolerance")
        record["tuned_within"] = _cell(by_plan, TUNED, "within_tolerance", "")
        record["tuned_vs_openvino"] = _cell(by_plan, TUNED, "vs_openvino")
        record["tuned_vs_best_peer"] = _cell(by_plan, TUNED, "vs_best_peer")
        record["noise_floor"] = _cell(by_plan, TUNED, "noise_floor")
        record["noise_spread"] = _cell(by_plan, TUNED, "noise_spread")
        errors = _errors(table)
        record["error"] = _cell(by_plan, TUNED, "tune_error", "") or (errors[0] if errors else "")
        out.append(record)
    return pd.DataFrame(out)


def _errors(table: pd.DataFrame) -> list[str]:
    """The non-empty ``error`` cells of ``table``."""
    column = table["error"] if "error" in table else pd.Series(dtype=object)
    return [str(e) for e in column.astype(object) if isinstance(e, str) and e]


def _cell(table: pd.DataFrame, plan: str, column: str, default: object = np.nan) -> object:
    if plan not in table.index or column not in table:
        return default
    value = table.at[plan, column]
    return default if isinstance(value, float) and math.isnan(value) else value


def front(points: pd.DataFrame) -> pd.DataFrame:
    """The Pareto front of ``points`` (columns ``error`` and ``ms``), by rising error.

    A point is on it when no other point has both less or equal error and less or equal
    latency, one of them strictly less. Rows with NaN are left out.
    """
    ordered = points.dropna(subset=["error", "ms"]).sort_values(["error", "ms"])
    kept, best = [], math.inf
    for index, row in ordered.iterrows():
        if row["ms"] < best:
            kept.append(index)
            best = row["ms"]
    return ordered.loc[kept]


def plot_pareto(rows: pd.DataFrame, names: Sequence[str]) -> Path:
    """One panel per model: latency against error, the front of autopart's plans, the peers."""
    columns = min(3, len(names))
    lines = math.ceil(len(names) / columns)
    figure = new_figure(5.2 * columns, 4.0 * lines + 0.6)
    legend: dict[str, object] = {}
    for index, name in enumerate(names):
        axes = figure.add_subplot(lines, columns, index + 1)
        _panel(axes, rows[rows["model"] == name], name)
        handles, labels = axes.get_legend_handles_labels()
        legend.update({label: h for h, label in zip(handles, labels, strict=True)})
    figure.legend(legend.values(), legend.keys(), loc="outside lower center", ncols=4, fontsize=8)
    figure.suptitle(
        "autopart's plans: median latency against max relative error vs the f32 reference\n"
        "filled peers: the default budget's bench; hollow: the other benches "
        "(2 shared cores: latencies indicative only)",
        fontsize=9,
    )
    return save_figure(figure, "precision.png")


def _points(table: pd.DataFrame) -> pd.DataFrame:
    """The rows that ran, with ``ms`` and ``error`` (floored for the log axis)."""
    ran = table[table["median_ms"].notna()] if "median_ms" in table else table.iloc[:0]
    return ran.assign(ms=ran["median_ms"], error=ran["max_rel_error"].clip(lower=FLOOR))


def _panel(axes: object, table: pd.DataFrame, name: str) -> None:
    points = _points(table)
    default = points[points["budget"] == "default"]
    plans = default[~default["kind"].isin(["peer", "chosen", "chosen-again"])]
    axes.scatter(plans["error"], plans["ms"], s=14, color="0.6", label="single targets, baselines")
    tuned = points[points["plan"] == TUNED]
    autopart = pd.concat([plans[["error", "ms"]], tuned[["error", "ms"]]])
    edge = front(autopart)
    axes.step(edge["error"], edge["ms"], where="post", color="0.3", linewidth=0.8, label="front")
    for _, row in tuned.iterrows():
        colour = BUDGET_COLOURS[row["budget"]]
        axes.scatter(row["error"], row["ms"], marker="*", s=140, zorder=4, color=colour,
                     label=f"tuned, {row['budget']}")  # fmt: skip
    for peer, (marker, colour) in PEER_STYLE.items():
        mine = points[points["plan"] == peer]
        main = mine[mine["budget"] == "default"]
        others = mine[mine["budget"] != "default"]
        axes.scatter(main["error"], main["ms"], marker=marker, s=50, color=colour, label=peer,
                     zorder=3)  # fmt: skip
        axes.scatter(others["error"], others["ms"], marker=marker, s=30, facecolors="none",
                     edgecolors=colour, zorder=3)  # fmt: skip
    tolerances = default["tolerance"].dropna()
    if len(tolerances):
        axes.axvline(tolerances.iloc[0], color=BUDGET_COLOURS["default"], linestyle="--",
                     linewidth=0.8, label="default tolerance")  # fmt: skip
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_title(name, fontsize=10)
    axes.set_xlabel(f"max relative error (log; 0 drawn at {FLOOR:g})", fontsize=8)
    axes.set_ylabel("median latency, ms (log)", fontsize=8)
    axes.tick_params(labelsize=7)
    plain_log(axes, "y")


def plan_error(
    graph: Graph,
    reduced: set[str],
    feeds: Sequence[Mapping[str, np.ndarray]],
    references: Sequence[Mapping[str, np.ndarray]],
) -> float:
    """The largest output error over ``feeds`` of the plan running ``reduced`` in bf16.

    Every other node runs on ``cpu@openvino`` (f32); ``references`` are the numpy
    reference's outputs on each of ``feeds``.
    """
    assignment = {n.name: BF16 if n.name in reduced else F32 for n in graph.nodes}
    plan = build_plan_for(graph, assignment, FALLBACK, graph.name)
    worst = 0.0
    with PlanExecutor(plan, graph) as executor:
        for sample, reference in zip(feeds, references, strict=True):
            outputs = executor.run(sample).outputs
            worst = max(worst, *check_outputs(graph, sample, outputs, reference).values())
    return worst


@dataclass
class Sensitivity:
    """Per-node sensitivities of one model and the errors that put them in context.

    ``nodes`` has one row per node (``position``, ``node``, ``op_type``, ``error``,
    ``failed``); ``peer`` is OpenVINO as installed's error, ``budget`` the default budget
    from it, ``all_bf16`` and ``all_f32`` the errors of every node on bf16 and on f32,
    ``greedy`` the nodes put in bf16 least sensitive first while the sum of their
    sensitivities stays within ``budget``, and ``greedy_error`` that plan's error.
    """

    model: str
    nodes: pd.DataFrame
    peer: float
    budget: float
    all_bf16: float
    all_f32: float
    greedy: list[str]
    greedy_error: float


def sensitivities(model: Model) -> Sensitivity:
    """Each node's sensitivity: the output error with only it on bf16 (see the module)."""
    graph = api.load(model.source, **model.fields)
    feeds = [random_inputs(graph, 0), *evaluation_samples(graph, 0)]
    references = [Executor(graph).run(sample).outputs for sample in feeds]
    rows = []
    for position, node in enumerate(graph.nodes):
        console.print(f"[dim]{model.name} {position + 1}/{len(graph.nodes)} {node.name}[/dim]")
        try:
            error, failed = plan_error(graph, {node.name}, feeds, references), ""
        except Exception as caught:  # a node OpenVINO refuses is a result: keep why
            error, failed = np.nan, one_line(caught)
        rows.append({"model": model.name, "position": position, "node": node.name,
                     "op_type": node.op_type, "error": error, "failed": failed})  # fmt: skip
    nodes = pd.DataFrame(rows)
    peer_run = openvino_alone(model.source, PeerInputs.of(graph))
    peer = max(
        max(check_outputs(graph, sample, peer_run(sample), reference).values())
        for sample, reference in zip(feeds, references, strict=True)
    )
    budget = follow_peer({OPENVINO: peer})
    ranked = nodes.dropna(subset=["error"]).sort_values("error")
    greedy = ranked[ranked["error"].cumsum() <= budget]["node"].tolist()
    everything = {n.name for n in graph.nodes}
    return Sensitivity(
        model.name, nodes, peer, budget,
        plan_error(graph, everything, feeds, references),
        plan_error(graph, set(), feeds, references),
        greedy, plan_error(graph, set(greedy), feeds, references),
    )  # fmt: skip


def plot_sensitivity(found: Sensitivity) -> Path:
    """Per node, the error with only it in bf16; and the summed sensitivities, least first."""
    figure = new_figure(13.0, 4.6)
    bars, sums = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    nodes = found.nodes.assign(shown=found.nodes["error"].clip(lower=FLOOR))
    kinds = list(dict.fromkeys(nodes.sort_values("error", ascending=False)["op_type"]))
    palette = {kind: f"C{i % 10}" for i, kind in enumerate(kinds)}
    bars.bar(nodes["position"], nodes["shown"], color=nodes["op_type"].map(palette), width=0.9)
    context = (
        (found.budget, "default budget", "#55a868", "--"),
        (found.peer, "openvino alone (bf16)", "#8172b2", ":"),
        (found.all_bf16, "every node in bf16", "#c44e52", "-."),
        (max(found.all_f32, FLOOR), "every node in f32", "0.5", "-"),
    )
    for value, label, colour, style in context:
        label = f"{label}: {value:.2g}"
        bars.axhline(value, color=colour, linestyle=style, linewidth=1, label=label)
    bars.set_yscale("log")
    bars.set_xlabel(f"node of {found.model}, in topological order", fontsize=8)
    bars.set_ylabel("max relative output error, only this node in bf16", fontsize=8)
    handles = [bars.bar([0], [0], color=palette[k], label=k) for k in kinds[:8]]
    bars.legend(fontsize=6, ncols=2, handles=[*bars.get_lines(), *handles])
    ranked = nodes.dropna(subset=["error"]).sort_values("error")
    count = np.arange(1, len(ranked) + 1)
    sums.plot(count, ranked["error"].cumsum().clip(lower=FLOOR), color="0.3",
              label="sum of sensitivities, least first")  # fmt: skip
    sums.axhline(found.budget, color="#55a868", linestyle="--", linewidth=1, label="default budget")
    sums.scatter([len(found.greedy)], [max(found.greedy_error, FLOOR)], marker="*", s=120,
                 color="#55a868", zorder=3, label="that plan, measured")  # fmt: skip
    sums.scatter([len(nodes)], [found.all_bf16], marker="*", s=120, color="#c44e52", zorder=3,
                 label="every node in bf16, measured")  # fmt: skip
    sums.set_yscale("log")
    sums.set_xlabel("nodes in bf16 (least sensitive first)", fontsize=8)
    sums.set_ylabel("max relative output error", fontsize=8)
    sums.legend(fontsize=7)
    figure.suptitle(
        f"{found.model}: per-node bf16 sensitivity (whole-model error, that node alone on "
        "cpu@openvino:bf16, the rest on cpu@openvino f32; max over 5 seeded inputs)",
        fontsize=9,
    )
    return save_figure(figure, "precision_sensitivity.png")


def report_sensitivity(found: Sensitivity) -> None:
    """Write the sensitivity CSV and figure, and print what they show."""
    context = {
        "peer_error": found.peer,
        "default_budget": found.budget,
        "all_bf16_error": found.all_bf16,
        "all_f32_error": found.all_f32,
        "greedy_nodes": len(found.greedy),
        "greedy_error": found.greedy_error,
        "in_greedy": found.nodes["node"].isin(found.greedy),
    }
    console.print(f"wrote {write_csv(found.nodes.assign(**context), 'precision_sensitivity.csv')}")
    console.print(f"wrote {plot_sensitivity(found)}")
    total = found.nodes["error"].sum()
    console.print(
        f"{found.model}: {len(found.nodes)} nodes; sum of sensitivities {total:.3g}, every node "
        f"in bf16 measured {found.all_bf16:.3g}; openvino alone {found.peer:.3g}, budget "
        f"{found.budget:.3g}; {len(found.greedy)} least sensitive nodes in bf16 (sum "
        f"{found.nodes[found.nodes['node'].isin(found.greedy)]['error'].sum():.3g}) measured "
        f"{found.greedy_error:.3g}"
    )


def report_pareto(rows: pd.DataFrame, names: Sequence[str]) -> None:
    """Write the CSVs and the figure of the front, and print each tuned plan beside the peers."""
    summary = summarise(rows)
    console.print(f"wrote {write_csv(rows, 'precision.csv')}")
    console.print(f"wrote {write_csv(summary, 'precision_summary.csv')}")
    console.print(f"wrote {plot_pareto(rows, names)}")
    shown = summary[list(SHOWN)].rename(columns=SHOWN)
    for column in ("error", "ov error", "tolerance"):
        shown[column] = shown[column].map(lambda value: f"{value:.2g}")
    show("the tuned plan of each budget against the peers (ms; max relative error)", shown, 4)
    for _, row in summary[summary["error"].astype(bool)].iterrows():
        console.print(f"[red]{row['model']} ({row['budget']}): {row['error']}[/red]")


def main() -> None:
    args = arguments()
    console.print("[dim]2 cores shared with other work: latencies are indicative only[/dim]")
    if args.replot:
        rows = saved_rows()
        report_pareto(rows, list(dict.fromkeys(rows["model"])))
    elif not args.no_pareto:
        rows = run_pareto(resolve(args.models), args)
        report_pareto(rows, list(dict.fromkeys(rows["model"])))
    if not args.no_sensitivity:
        report_sensitivity(sensitivities(resolve([args.sensitivity])[0]))


if __name__ == "__main__":
    main()
